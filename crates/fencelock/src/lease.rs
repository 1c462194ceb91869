//! The state of one held lease, shared by its guard (strong) and the watchdog (weak).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::name::LockName;

/// When a lease must be renewed and when it is gone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseTimes {
    /// After this instant the lease may have expired on the server: the lock counts as lost.
    pub(crate) deadline: Instant,
    /// When the watchdog should renew next (only for renewed leases).
    pub(crate) renew_at: Instant,
    /// The time of this lease's live entry in the watchdog's queue.
    pub(crate) scheduled: Option<Instant>,
    /// A renewal request is on its way.
    pub(crate) in_flight: bool,
}

/// What a renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// The hold is still there; the lease now has at least the asked-for time left.
    // Seam vocabulary: a build without the services that use it leaves it unused.
    #[allow(dead_code)]
    Renewed,
    /// The hold is gone.
    NotHeld,
}

/// Why a guard's lock counts as lost ([`crate::Guard::lost_reason`], [`crate::Error::LockLost`]).
/// `Display` says it in a sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// The deadline passed without a successful renewal (of the lease, or of the session:
    /// the server was not heard from in time).
    Deadline,
    /// A renewal found the lock deleted or held by another owner.
    Renewal,
    /// An extension ([`crate::Guard::extend`]) found the lock deleted or held by another owner.
    Extension,
    /// The session the hold lived in (ZooKeeper's session, etcd's lease) expired, was closed
    /// or revoked.
    Session,
    /// The hold's node or key was deleted by another client (a forced unlock).
    Deleted,
    /// The guard gave the lock back (seen through [`crate::Guard::lost_token`] after a
    /// release).
    Released,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Deadline => {
                "the deadline passed without a successful renewal of the lease or session: the \
                 server was not heard from"
            }
            Self::Renewal => "a renewal found the lock deleted or held by another owner",
            Self::Extension => "an extension found the lock deleted or held by another owner",
            // No parentheses: the reason is often shown inside some (`Error::LockLost`).
            Self::Session => {
                "the client's ZooKeeper session or etcd lease expired, was closed or was revoked"
            }
            Self::Deleted => "another client deleted the holding on the server: a forced unlock",
            Self::Released => "released",
        })
    }
}

impl LostReason {
    /// The `reason` label of `fencelock_holds_lost_total`.
    fn label(self) -> &'static str {
        match self {
            Self::Deadline => "deadline",
            Self::Renewal => "renewal",
            Self::Extension => "extension",
            Self::Session => "session",
            Self::Deleted => "deleted",
            Self::Released => "released",
        }
    }
}

/// What a guard holds: one hold of a holding.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) lock: Arc<LockName>,
    pub(crate) owner: Arc<str>,
    pub(crate) lease: Duration,
    /// The watchdog renews this lease (no explicit lease was given).
    pub(crate) renew: bool,
    /// The id of the attempt that took this hold: every release, renewal and heal of it names
    /// this id, so that none of them acts on another hold (a newer holding of the same owner).
    pub(crate) id: u64,
    /// The holding's fencing token.
    pub(crate) token: u64,
}

/// One lease held through one guard.
#[derive(Debug)]
pub(crate) struct LeaseState {
    pub(crate) hold: Hold,
    pub(crate) times: Mutex<LeaseTimes>,
    lost: CancellationToken,
    reason: OnceLock<LostReason>,
    finished: AtomicBool,
    /// The hold as the metrics count it, once a guard was made of it (`Lock::ask`).
    meter: OnceLock<crate::telemetry::Held>,
}

impl LeaseState {
    pub(crate) fn new(hold: Hold, deadline: Instant, renew_at: Instant) -> Self {
        Self {
            hold,
            times: Mutex::new(LeaseTimes {
                deadline,
                renew_at,
                scheduled: None,
                in_flight: false,
            }),
            lost: CancellationToken::new(),
            reason: OnceLock::new(),
            finished: AtomicBool::new(false),
            meter: OnceLock::new(),
        }
    }

    /// Counts this hold in the metrics until it ends. A hold that ended already (lost before
    /// its guard was made) ends its count at once.
    pub(crate) fn metered(&self, held: crate::telemetry::Held) {
        if self.meter.set(held).is_ok() && self.reason.get().is_some() {
            self.end_meter();
        }
    }

    /// The hold ended (lost, released, or dropped): its count in the metrics ends (once).
    fn end_meter(&self) {
        if let Some(held) = self.meter.get() {
            held.end();
        }
    }

    pub(crate) fn times(&self) -> std::sync::MutexGuard<'_, LeaseTimes> {
        // A panic while holding this lock cannot leave the times inconsistent (plain copies),
        // so a poisoned lock is still usable.
        self.times.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fires the lost-lock signal once, with its reason.
    pub(crate) fn fire_lost(&self, lost: LostReason) {
        if self.reason.set(lost).is_ok() {
            tracing::warn!(lock = %self.hold.lock.name, reason = %lost, "lock lost");
            crate::telemetry::lost(lost.label());
        }
        self.finished.store(true, Ordering::Release);
        // Before the signal: whoever it wakes finds the hold's count ended.
        self.end_meter();
        self.lost.cancel();
    }

    /// The guard gave the lease back: nothing more to renew or to signal to the watchdog.
    /// Observers of the token learn that the lock is no longer theirs to use.
    pub(crate) fn finish(&self) {
        let _ = self.reason.set(LostReason::Released);
        self.finished.store(true, Ordering::Release);
        // Before the signal: whoever it wakes finds the hold's count ended.
        self.end_meter();
        self.lost.cancel();
    }

    /// Released or lost: the watchdog drops it.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    pub(crate) fn token(&self) -> &CancellationToken {
        &self.lost
    }

    pub(crate) fn reason(&self) -> Option<LostReason> {
        self.reason.get().copied()
    }

    /// The error for an operation on a lease that is lost.
    pub(crate) fn lost_error(&self) -> crate::error::Error {
        crate::error::Error::LockLost {
            lock: self.hold.lock.name.clone(),
            reason: self.reason().unwrap_or(LostReason::Deadline),
        }
    }

    /// Held as far as this process can tell, without a round trip.
    pub(crate) fn is_held(&self) -> bool {
        !self.lost.is_cancelled() && Instant::now() < self.times().deadline
    }
}

impl Drop for LeaseState {
    fn drop(&mut self) {
        // A hold whose guard went without a release or a loss (it cannot, but the count must
        // never outlive the hold).
        self.end_meter();
    }
}

#[cfg(test)]
mod tests {
    use super::LostReason;

    /// Issue 33: a reason is shown inside parentheses (`Error::LockLost`), so it has none of
    /// its own; and it speaks of no "node or key" on a service that has only keys.
    #[test]
    fn reasons_read_inside_parentheses() {
        use LostReason::*;
        for reason in [Deadline, Renewal, Extension, Session, Deleted, Released] {
            let text = reason.to_string();
            assert!(!text.contains(['(', ')']), "{text}");
            assert!(!text.contains("node or key"), "{text}");
        }
    }
}
