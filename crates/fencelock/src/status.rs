//! What a lock service reports about one lock: the public status types. A leaf module:
//! services build these, and the API hands them out.

use std::time::Duration;

/// What the server knows about one lock, from [`crate::Client::status`] or [`crate::Lock::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock name.
    pub name: String,
    /// Whether any owner holds it.
    pub held: bool,
    /// Each owner and its hold count (one owner for an exclusive lock).
    pub owners: Vec<(String, u64)>,
    /// The remaining lease; `None` when not held or when the key has no expiry.
    pub remaining_lease: Option<Duration>,
    /// The fencing token of the current holding.
    pub fencing_token: Option<u64>,
    /// The last fencing token issued for this name (also after release).
    pub last_token: Option<u64>,
    /// The server's wait queue, in arrival order: the first waiter is handed the lock at the
    /// next release (places that ran out are skipped). Places that ran out are listed too,
    /// marked [`Waiter::expired`]: a waiter that died or lost touch with the server while
    /// waiting. Read in the same script as the rest, so it is one consistent snapshot.
    ///
    /// Always empty with RedLock, which keeps no queue on the servers (waiters there retry
    /// on release notifications instead).
    pub waiters: Vec<Waiter>,
}

/// One place in a lock's wait queue on the server, from [`LockStatus::waiters`].
///
/// A waiting [`crate::Lock::acquire`] takes a place valid for a window (the lease with a fixed lease,
/// at most 5 s with the watchdog) and renews it at half the window while it waits, so the age
/// of a live waiter's place normally stays under about half its window. A place that stays
/// listed past its window is a waiter that died or cannot reach the server: the release script
/// skips it and removes it when it comes to it, and it also goes when the queue keys expire.
/// Ages are measured on the server's clock.
///
/// ZooKeeper: the waiters' nodes in queue order; the age is counted from the node's creation
/// time (the server's clock against this host's), and `window` and `remaining` are zero, as a
/// place lasts as long as its waiter's session.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The waiting owner id (see [`crate::Lock::owner`]).
    pub owner: String,
    /// How long ago the waiter took or last renewed its place. Zero when
    /// [`Waiter::unreadable`].
    pub age: Duration,
    /// How long the place lasts from when it was taken or renewed. Zero when
    /// [`Waiter::unreadable`].
    pub window: Duration,
    /// How long the place stays valid: `window - age`, zero once it ran out. A waiter handed
    /// the lock while this is not zero holds it for one window from then, which its watchdog
    /// renews to the whole lease (a fixed lease is its own window).
    pub remaining: Duration,
    /// The release script would skip this place: less than 2 ms of its window is left (the
    /// least it hands over), or the place is unreadable.
    pub expired: bool,
    /// `Some` when the queue names this owner but its place cannot be used: the server has
    /// none for it (`"no place recorded"`), or it is not in the format fencelock writes (the
    /// description quotes it). Nothing else writes these keys, so this means they were changed
    /// by hand or by another program.
    pub unreadable: Option<String>,
}
