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
    /// none for it (`"no place recorded"`), or it is not in the
    /// `attempt window_ms since_us [lease_ms [client]]` format (the description quotes it).
    /// Nothing else writes these keys, so this means they were changed by hand or by another
    /// program.
    pub unreadable: Option<String>,
}

impl Waiter {
    /// What the server stored for `owner` (`None`: no place), read at `now_us` on the server's
    /// clock.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn from_place(owner: String, place: Option<&str>, now_us: u64) -> Self {
        let unreadable = |reason: String| Self {
            owner: owner.clone(),
            age: Duration::ZERO,
            window: Duration::ZERO,
            remaining: Duration::ZERO,
            expired: true,
            unreadable: Some(reason),
        };
        let Some(place) = place else {
            return unreadable("no place recorded".to_owned());
        };
        // The format the release script reads (queue.lua's parse_place): 'attempt window_ms
        // since_us [lease_ms [client]]' (the lease to hand over, and the client id whose channel
        // hears the handover; places of earlier versions have neither, or no client).
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
        let number = |s: &str| digits(s).then(|| s.parse::<u64>().ok()).flatten();
        let mut parts = place.split(' ');
        let parsed = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(attempt), Some(window), Some(since), lease)
                if digits(attempt)
                    && lease.is_none_or(digits)
                    && parts
                        .next()
                        .is_none_or(|client| lease.is_some() && hex(client))
                    && parts.next().is_none() =>
            {
                number(window).zip(number(since))
            }
            _ => None,
        };
        let Some((window_ms, since_us)) = parsed else {
            return unreadable(format!(
                "place {place:?} is not \"attempt window_ms since_us [lease_ms [client]]\""
            ));
        };
        let window_us = window_ms.saturating_mul(1000);
        // As queue.lua's end_holding counts: what is left is since + window - now (a place
        // stamped ahead of this clock, e.g. by a server whose clock went back, has more than its
        // window).
        let remaining_us = since_us.saturating_add(window_us).saturating_sub(now_us);
        Self {
            owner,
            age: Duration::from_micros(now_us.saturating_sub(since_us)),
            window: Duration::from_millis(window_ms),
            remaining: Duration::from_micros(remaining_us),
            expired: remaining_us < 2000,
            unreadable: None,
        }
    }
}
