//! The holds that live in one client session (a ZooKeeper session, an etcd lease): kept weakly, their deadlines moved forward when the session is
//! heard from, and all of them lost at once when the session ends.

use std::sync::{Arc, Mutex, Weak};

use tokio::time::Instant;

use crate::lease::{LeaseState, LostReason};

/// The holds of one session, weakly: a guard dropped without release leaves nothing here.
#[derive(Default)]
pub(crate) struct SessionHolds {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    all: Vec<Weak<LeaseState>>,
    /// Finished holds are swept out when the list reaches this length.
    sweep_at: usize,
    /// The session ended: holds registered from now on are lost at once.
    ended: bool,
}

impl SessionHolds {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A hold of this session; lost at once if the session already ended.
    pub(crate) fn register(&self, lease: &Arc<LeaseState>) {
        let mut inner = self.inner();
        if inner.all.len() >= inner.sweep_at.max(64) {
            inner
                .all
                .retain(|l| l.upgrade().is_some_and(|l| !l.is_finished()));
            inner.sweep_at = 2 * inner.all.len();
        }
        inner.all.push(Arc::downgrade(lease));
        if inner.ended {
            drop(inner);
            lease.fire_lost(LostReason::Session);
        }
    }

    /// The live holds.
    fn live(&self) -> Vec<Arc<LeaseState>> {
        let mut inner = self.inner();
        let mut live = Vec::new();
        inner.all.retain(|l| match l.upgrade() {
            Some(l) if !l.is_finished() => {
                live.push(l);
                true
            }
            _ => false,
        });
        live
    }

    /// The session ended: every hold is lost, now and from now on.
    pub(crate) fn end(&self) {
        self.inner().ended = true;
        for lease in self.live() {
            lease.fire_lost(LostReason::Session);
        }
    }

    /// The session was heard from: every live hold lasts at least until `deadline`.
    pub(crate) fn refresh(&self, deadline: Instant) {
        for lease in self.live() {
            let mut times = lease.times();
            times.deadline = times.deadline.max(deadline);
        }
    }
}
