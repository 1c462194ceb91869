//! What a lock service reports about one lock, or about every lock under the client's
//! prefix: the public status types. A leaf module: services build these, and the API hands
//! them out.

use std::time::{Duration, SystemTime};

/// What the server knows about one lock, from [`crate::Client::status`] or [`crate::Lock::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock name.
    pub name: String,
    /// Whether any owner holds it.
    pub held: bool,
    /// Each owner and its hold count (one owner for an exclusive lock). [`LockStatus::holders`]
    /// says more of each.
    pub owners: Vec<(String, u64)>,
    /// What the name is used as, where the server's layout tells: `None` for a free name
    /// whose layout keeps no kind (nothing held, nobody waiting).
    pub kind: Option<LockKind>,
    /// Each holding, in the order the server keeps them: a mutex's holder, an election's
    /// leader, a read-write lock's readers or writer, a semaphore's permits. Each has its own
    /// token, where the service keeps one per holding.
    pub holders: Vec<Holder>,
    /// A semaphore's number of permits, as stored with it (it lives as long as the semaphore
    /// has entries); `None` for the other kinds.
    pub permits: Option<u32>,
    /// An election's leader: the value it advertises and its term (its token). `None` when
    /// nobody leads, or for the other kinds.
    pub leader: Option<crate::Leader>,
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
/// place lasts as long as its waiter's session. etcd: the keys in queue order, with `age`,
/// `window` and `remaining` zero: etcd keeps no time with a key, so a waiter's age is not
/// known there.
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

/// What a name is used as: one name is one kind of primitive on every service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// A [`crate::Lock`]: one holder.
    Mutex,
    /// A [`crate::RwLock`]: readers, or one writer.
    ReadWrite,
    /// A [`crate::Semaphore`]: at most N permits held.
    Semaphore,
    /// An [`crate::Election`]: one leader, who advertises a value.
    Election,
}

impl LockKind {
    /// Every kind, in the order above.
    pub const ALL: [LockKind; 4] = [
        LockKind::Mutex,
        LockKind::ReadWrite,
        LockKind::Semaphore,
        LockKind::Election,
    ];

    /// The kind's word: `mutex`, `rwlock`, `semaphore`, `election` (what
    /// [`LockKind::from_word`] reads).
    pub fn word(self) -> &'static str {
        match self {
            LockKind::Mutex => "mutex",
            LockKind::ReadWrite => "rwlock",
            LockKind::Semaphore => "semaphore",
            LockKind::Election => "election",
        }
    }

    /// The kind of a word [`LockKind::word`] gives.
    pub fn from_word(word: &str) -> Option<LockKind> {
        LockKind::ALL.into_iter().find(|k| k.word() == word)
    }
}

impl std::fmt::Display for LockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

/// What one holding holds, from [`Holder::role`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HolderRole {
    /// A mutex's holder.
    Mutex,
    /// A read-write lock's reader.
    Reader,
    /// A read-write lock's writer (also when it downgraded and reads too).
    Writer,
    /// One permit of a semaphore.
    Permit,
    /// An election's leader.
    Leader,
}

impl HolderRole {
    /// `holder`, `reader`, `writer`, `permit`, `leader`.
    pub fn word(self) -> &'static str {
        match self {
            HolderRole::Mutex => "holder",
            HolderRole::Reader => "reader",
            HolderRole::Writer => "writer",
            HolderRole::Permit => "permit",
            HolderRole::Leader => "leader",
        }
    }
}

/// When a holding began, as far as the service's layout can tell, from [`Holder::since`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Since {
    /// When the holding was granted. Redis: its token is planned from the server's clock
    /// when it is granted (`max(last token + 1, clock in µs)`), so the token read as
    /// microseconds is the grant time, unless the lock's counter ran ahead of that clock (a
    /// clock stepped back, RedLock's proposals): then nothing is said.
    Granted(SystemTime),
    /// When the holding's entry was queued: ZooKeeper's node creation time. The layout keeps
    /// no grant time; the holding began at this time or later (after the entries ahead went).
    Queued(SystemTime),
}

impl Since {
    /// The time itself, granted or queued.
    pub fn time(self) -> SystemTime {
        match self {
            Since::Granted(t) | Since::Queued(t) => t,
        }
    }
}

/// One holding of a lock, from [`LockStatus::holders`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holding's owner id (see [`crate::Lock::owner`]); an entry written by another
    /// program without one shows what stands for it (etcd: its lease, in hex). This is the
    /// id [`crate::Client::force_unlock_holder`] takes.
    pub owner: String,
    /// What it holds.
    pub role: HolderRole,
    /// Its hold count where the service tells (re-entry; 1 otherwise).
    pub holds: u64,
    /// Its own fencing token (an election leader's term).
    pub token: Option<u64>,
    /// When it began, where the layout tells; `None` when it cannot.
    pub since: Option<Since>,
    /// How long it lasts without renewal, where the service tells (Redis: its own lease;
    /// etcd: its lease's TTL); `None` on ZooKeeper, where it lasts as long as its session.
    pub remaining_lease: Option<Duration>,
}

impl Holder {
    /// A holding of `owner` in `role`, with the rest unknown.
    pub(crate) fn new(owner: String, role: HolderRole) -> Self {
        Self {
            owner,
            role,
            holds: 1,
            token: None,
            since: None,
            remaining_lease: None,
        }
    }

    /// How long it has been held at `now`, when its start is known.
    pub fn held_for(&self, now: SystemTime) -> Option<Duration> {
        self.since
            .map(|s| now.duration_since(s.time()).unwrap_or_default())
    }
}
