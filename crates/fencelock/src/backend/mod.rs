//! The engines behind the backend-neutral lock API.
//!
//! Everything above this module (handles, guards, the watchdog, the wait queues) speaks in the
//! terms defined here: an acquire attempt either acquires (with a fencing token and hold count)
//! or reports the holder's remaining lease; a release reports what it left; a renewal reports
//! whether the owner still holds the lock. A backend also delivers release notifications to a
//! [`ReleaseSink`].

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::lease::LeaseState;
use crate::name::LockKeys;

pub(crate) mod redis;
pub(crate) mod redlock;

use self::redis::{RawStatus, RedisBackend, ReplicaAcks};
use self::redlock::RedLock;

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
    pub(crate) keys: Arc<LockKeys>,
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
    /// Earlier attempts of this owner on this lock that were given up (a lost reply, a dropped
    /// future) and not yet undone: their holds and places are given back first, so that none
    /// counts as a re-entry of this attempt.
    pub(crate) abandoned: Vec<u64>,
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

/// One hold to renew: its lease state names the lock, the owner, the hold and the lease.
pub(crate) type RenewItem = Arc<LeaseState>;

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
    /// A lock whose release channel is `channel` was released; `message` identifies the
    /// release (RedLock publishes the same message from every server).
    fn released(&self, channel: &str, message: &[u8]);
    /// The subscriber connection dropped: notifications may have been missed.
    fn disconnected(&self);
}

/// The engine behind a client: one server (plain, Sentinel-managed or a Cluster), or RedLock
/// over independent servers. The methods are the whole vocabulary the lock API uses.
pub(crate) enum Backend {
    One(RedisBackend),
    RedLock(RedLock),
}

impl Backend {
    /// Where the lock service is, for errors and logs.
    pub(crate) fn server(&self) -> String {
        match self {
            Backend::One(b) => b.server().to_owned(),
            Backend::RedLock(r) => r.servers(),
        }
    }

    /// One acquire attempt.
    pub(crate) async fn acquire(&self, attempt: &Attempt) -> Result<AcquireReply, Error> {
        match self {
            Backend::One(b) => b.acquire(attempt, None).await,
            Backend::RedLock(r) => r.acquire(attempt).await,
        }
    }

    /// Whether the server keeps a wait queue and hands the lock over on release.
    pub(crate) fn queues(&self) -> bool {
        matches!(self, Backend::One(_))
    }

    /// Gives back the hold `hold` (the attempt id that took it; it also gives up the place
    /// that attempt took in the queue), or, with `None`, the owner's newest hold. A hold that
    /// is gone is left alone: [`Released::NotHeld`].
    pub(crate) async fn release(
        &self,
        keys: &Arc<LockKeys>,
        owner: &Arc<str>,
        hold: Option<u64>,
    ) -> Result<Released, Error> {
        match self {
            Backend::One(b) => b.release(keys, owner, hold, None).await,
            Backend::RedLock(r) => r.release(keys, owner, hold).await,
        }
    }

    /// Extends a hold's lease to at least `lease_ms` while the hold is live.
    pub(crate) async fn extend(
        &self,
        hold: &Arc<LeaseState>,
        lease_ms: u64,
    ) -> Result<Renewal, Error> {
        match self {
            Backend::One(b) => b.extend(hold, lease_ms).await,
            Backend::RedLock(r) => {
                let mut results = r.renew_batch(vec![hold.clone()], Some(lease_ms)).await?;
                results.pop().unwrap_or(Ok(Renewal::NotHeld))
            }
        }
    }

    /// Extends a hold's lease and waits until `acks.replicas` replicas have the lock: after
    /// a handover, which the releasing holder wrote without `WAIT`. (RedLock never hands over;
    /// there it is a plain extension.)
    pub(crate) async fn extend_replicated(
        &self,
        hold: &Arc<LeaseState>,
        lease_ms: u64,
        acks: ReplicaAcks,
    ) -> Result<Renewal, Error> {
        match self {
            Backend::One(b) => b.extend_replicated(hold, lease_ms, acks).await,
            Backend::RedLock(_) => self.extend(hold, lease_ms).await,
        }
    }

    /// Renews many leases; per-lease outcomes in order.
    pub(crate) async fn renew_batch(
        &self,
        items: Vec<RenewItem>,
    ) -> Result<Vec<Result<Renewal, Error>>, Error> {
        match self {
            Backend::One(b) => b.renew_batch(&items, None).await,
            Backend::RedLock(r) => r.renew_batch(items, None).await,
        }
    }

    pub(crate) async fn status(&self, keys: &Arc<LockKeys>) -> Result<RawStatus, Error> {
        match self {
            Backend::One(b) => b.status(keys).await,
            Backend::RedLock(r) => r.status(keys).await,
        }
    }

    pub(crate) async fn force_unlock(
        &self,
        keys: &Arc<LockKeys>,
    ) -> Result<Vec<(String, u64)>, Error> {
        match self {
            Backend::One(b) => b.force_unlock(keys).await,
            Backend::RedLock(r) => r.force_unlock(keys).await,
        }
    }

    pub(crate) async fn subscribe(&self, channel: &str) -> Result<(), Error> {
        match self {
            Backend::One(b) => b.subscribe(channel).await,
            Backend::RedLock(r) => r.subscribe(channel).await,
        }
    }

    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<(), Error> {
        match self {
            Backend::One(b) => b.unsubscribe(channel).await,
            Backend::RedLock(r) => r.unsubscribe(channel).await,
        }
    }
}
