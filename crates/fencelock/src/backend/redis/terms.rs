//! The terms the Redis acquire algorithm speaks with an engine (one deployment, or RedLock):
//! an attempt either acquires (with a fencing token and hold count) or reports the holder's
//! remaining lease; a renewal names the holds it renews; a backend delivers release
//! notifications to a [`ReleaseSink`]. A leaf: the engines, the servers and their
//! connections all speak it, and it imports none of them.

use std::sync::Arc;
use std::time::Duration;

use super::keys::LockKeys;
use crate::lease::LeaseState;

/// Replication acknowledgement wanted after an acquire (`WAIT numreplicas timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaAcks {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

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
    /// Not acquired: another owner holds it (`remaining`: its lease, `None` when it has no
    /// expiry, or how long to back off). `undo`: the attempt may have left holds behind
    /// (RedLock servers that granted a minority) that must be removed. `queued`: the attempt
    /// took a place in the server's wait queue; the release script will hand the lock to it.
    Held {
        remaining: Option<Duration>,
        undo: bool,
        queued: bool,
    },
}

/// A waiter's part in an acquire attempt, where the server keeps a wait queue (one server,
/// Sentinel, Cluster; not RedLock, whose servers would each hand over on their own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Queueing {
    /// Take (or renew) a place in the queue if the lock is held, valid for this long from
    /// the request: the caller is subscribed to the lock's channel and will hear of the
    /// handover, which gives it what is left of the window.
    pub(crate) join: Option<Duration>,
    /// The attempt id of the caller's place so far: a handover to it that the caller did not
    /// hear of (lost message) is claimed by this attempt.
    pub(crate) claim: Option<u64>,
}

/// One acquire attempt: who asks, for how long, and what it gives back first.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    pub(crate) keys: LockKeys,
    pub(crate) owner: Arc<str>,
    pub(crate) lease_ms: u64,
    /// The attempt's id, which names the hold it takes: releases, renewals and undos of that
    /// hold name it, and a request sent twice with it takes one hold.
    pub(crate) id: u64,
    /// An acquisition completed after this instant has no validity left and counts as
    /// failed (RedLock).
    pub(crate) valid_until: tokio::time::Instant,
    pub(crate) acks: Option<ReplicaAcks>,
    pub(crate) queueing: Queueing,
    /// The client id whose channel (the lock's, followed by `:<client id>`) hears the
    /// handover to the place this attempt takes, when it takes one.
    pub(crate) listener: Option<Arc<str>>,
    /// Earlier attempts of this owner on this lock that were given up (a lost reply, a dropped
    /// future) and not yet undone: their holds and places are given back first, so that none
    /// counts as a re-entry of this attempt.
    pub(crate) abandoned: Vec<u64>,
    /// An election's participant: the value it advertises (`None`: a mutex's attempt).
    pub(crate) value: Option<Arc<str>>,
    /// A read-write lock's side or a semaphore's permit (`None`: a mutex or an election).
    pub(crate) shape: Option<Shape>,
}

/// What a read-write lock's or a semaphore's attempt takes (family.lua's rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Read,
    Write,
    Permit { permits: u32, resize: bool },
}

impl Shape {
    /// The family acquire script's ARGV[5]: `r`, `w`, `p<N>` or `P<N>` (resize).
    pub(crate) fn arg(self) -> String {
        match self {
            Shape::Read => "r".to_owned(),
            Shape::Write => "w".to_owned(),
            Shape::Permit {
                permits,
                resize: false,
            } => format!("p{permits}"),
            Shape::Permit {
                permits,
                resize: true,
            } => format!("P{permits}"),
        }
    }

    /// What the attempt asks for, in `Error::PrimitiveMismatch`'s words.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Shape::Read | Shape::Write => "read-write lock",
            Shape::Permit { .. } => "semaphore",
        }
    }
}

/// One hold to renew: its lease state names the lock, the owner, the hold and the lease.
pub(crate) type RenewItem = Arc<LeaseState>;

/// Receives release notifications from a backend's subscriber connection.
pub(crate) trait ReleaseSink: Send + Sync + 'static {
    /// A lock whose release channel is `channel` was released; `message` identifies the
    /// release (RedLock publishes the same message from every server).
    fn released(&self, channel: &str, message: &[u8]);
    /// The subscriber connection dropped: notifications may have been missed.
    fn disconnected(&self);
    /// The server behind the connections may not be the one that granted the locks: a
    /// connection came back (the server may have restarted empty) or another master took
    /// over. Holders must hear at once if their lock is gone.
    fn server_changed(&self);
}
