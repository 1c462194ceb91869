//! The engines behind the backend-neutral lock API.
//!
//! Everything above this module (handles, guards, the watchdog, the wait queues) speaks in the
//! terms defined here: an acquire attempt either acquires (with a fencing token and hold count)
//! or reports the holder's remaining lease; a release reports what it left; a renewal reports
//! whether the owner still holds the lock. A backend also delivers release notifications to a
//! [`ReleaseSink`].

use std::time::Duration;

pub(crate) mod redis;

/// The outcome of one acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The owner holds the lock now.
    Acquired {
        /// The fencing token of the current holding (the same for re-entries).
        token: u64,
        /// The owner's hold count after this attempt.
        count: u64,
    },
    /// Another owner holds it; `None` when its lease has no expiry.
    Held { remaining: Option<Duration> },
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Released {
    /// The last hold was given back: the lock is free and waiters were notified.
    Released,
    /// One hold was given back; the owner still holds the lock this many times.
    StillHeld {
        /// Holds left.
        count: u64,
    },
    /// The owner did not hold the lock (any more): it had expired, been force-unlocked, or was
    /// already released. Nothing was changed.
    NotHeld,
}

/// What a renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// The owner still holds the lock; the lease now has at least this much left.
    Renewed,
    /// The owner no longer holds the lock.
    NotHeld,
}

/// Receives release notifications from a backend's subscriber connection.
pub(crate) trait ReleaseSink: Send + Sync + 'static {
    /// A lock whose release channel is `channel` was released.
    fn released(&self, channel: &str);
    /// The subscriber connection dropped: notifications may have been missed.
    fn disconnected(&self);
}
