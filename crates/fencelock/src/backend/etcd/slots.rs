//! One attempt or holding per lock per client: the lock key is named by the client's lease,
//! so two owners of one client cannot both have a key on a lock. The second waits here, in
//! arrival order (a fair mutex per lock name), until the first's key is gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

use crate::backend::Wait;

/// The right to put this client's key on one lock.
pub(crate) type Slot = (String, OwnedMutexGuard<()>);

/// The slots of every lock this client uses, and those that holdings keep.
#[derive(Default)]
pub(crate) struct Slots {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    kept: Mutex<HashMap<String, Slot>>,
}

impl Slots {
    /// Takes the lock's slot: at once or not at all (`Wait::No`), or waiting until the
    /// deadline (`None` past it).
    pub(crate) async fn take(&self, name: &str, wait: Wait) -> Option<Slot> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            locks.entry(name.to_owned()).or_default().clone()
        };
        let guard = match wait {
            Wait::No => lock.try_lock_owned().ok(),
            Wait::Until(None) => Some(lock.lock_owned().await),
            Wait::Until(Some((at, _))) => tokio::time::timeout_at(at, lock.lock_owned()).await.ok(),
        };
        guard.map(|g| (name.to_owned(), g))
    }

    /// A holding keeps its slot until its key is gone ([`Slots::free`]).
    pub(crate) fn keep(&self, name: &str, slot: Option<Slot>) {
        if let Some(slot) = slot {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            kept.insert(name.to_owned(), slot);
        }
    }

    /// The holding's key is gone: its slot goes to the next attempt.
    pub(crate) fn free(&self, name: &str) {
        let slot = self
            .kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        self.put_back(slot);
    }

    /// Gives a slot back; the lock's entry goes when nobody else uses it.
    pub(crate) fn put_back(&self, slot: Option<Slot>) {
        let Some((name, guard)) = slot else { return };
        drop(guard);
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if locks.get(&name).is_some_and(|l| Arc::strong_count(l) == 1) {
            locks.remove(&name);
        }
    }
}
