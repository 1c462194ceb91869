//! The holds this client was granted, by owner, as far as it can tell without a round trip.
//!
//! An acquire by an owner that holds the lock through this client is a re-entry (or a
//! downgrade, or an upgrade to refuse): the server decides it at once, so it must not queue
//! behind this client's own waiters for the lock, which may be waiting for that very
//! holding (`acquire::Ask::until`). A hold is recorded when it is granted and counts while
//! its lease is held; the record is a weak reference, so it never keeps a lease alive.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::lease::LeaseState;

/// Below this many owners the index is never swept.
const SWEEP_FLOOR: usize = 64;

/// The leases granted to each owner id of this client.
#[derive(Debug, Default)]
pub(crate) struct Granted {
    index: Mutex<Index>,
}

#[derive(Debug, Default)]
struct Index {
    by_owner: HashMap<Arc<str>, Vec<Weak<LeaseState>>>,
    /// How many owners the index had after its last sweep: it is swept again (owners whose
    /// leases all ended dropped) once it has twice as many, so it stays within twice the
    /// owners that hold something, at a constant cost per grant.
    swept: usize,
}

impl Granted {
    /// Records a hold just granted.
    pub(crate) fn add(&self, lease: &Arc<LeaseState>) {
        let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        let leases = index.by_owner.entry(lease.hold.owner.clone()).or_default();
        leases.retain(live);
        leases.push(Arc::downgrade(lease));
        if index.by_owner.len() >= 2 * index.swept.max(SWEEP_FLOOR) {
            index.by_owner.retain(|_, leases| {
                leases.retain(live);
                !leases.is_empty()
            });
            index.swept = index.by_owner.len();
        }
    }

    /// Whether `owner` holds lock `name` through a hold this client was granted and still
    /// holds (not released, lost or past its deadline).
    pub(crate) fn holds(&self, name: &str, owner: &str) -> bool {
        let index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        index.by_owner.get(owner).is_some_and(|leases| {
            leases
                .iter()
                .filter_map(Weak::upgrade)
                .any(|lease| lease.hold.lock.name == name && lease.is_held())
        })
    }
}

/// A recorded lease that may still be held (neither released nor lost).
fn live(lease: &Weak<LeaseState>) -> bool {
    lease.upgrade().is_some_and(|lease| !lease.is_finished())
}
