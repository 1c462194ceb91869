//! The Redis engines: one deployment that acts as one server (plain, Sentinel, Cluster), or
//! RedLock over several, and the terms the Redis acquire algorithm speaks with them: an
//! attempt either acquires (with a fencing token and hold count) or reports the holder's
//! remaining lease; a release reports what it left; a renewal whether the hold is still
//! there. An engine also delivers release notifications to a [`ReleaseSink`].

use std::sync::Arc;
use std::time::Duration;

use super::redlock::RedLock;
use super::server::{RedisBackend, ReplicaAcks};
use crate::backend::redis::keys::LockKeys;
use crate::backend::RawStatus;
use crate::backend::Released;
use crate::error::Error;
use crate::lease::{LeaseState, Renewal};

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
    /// The client id whose channel (the lock's, followed by `:<client id>`) hears the
    /// handover to the place this attempt takes, when it takes one.
    pub(crate) listener: Option<Arc<str>>,
    /// Earlier attempts of this owner on this lock that were given up (a lost reply, a dropped
    /// future) and not yet undone: their holds and places are given back first, so that none
    /// counts as a re-entry of this attempt.
    pub(crate) abandoned: Vec<u64>,
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

/// The engine behind a Redis lock service: one server (plain, Sentinel-managed or a
/// Cluster), or RedLock over independent servers.
pub(crate) enum Engine {
    One(RedisBackend),
    RedLock(RedLock),
}

impl Engine {
    /// Where the lock service is, for errors and logs.
    pub(crate) fn server(&self) -> String {
        match self {
            Engine::One(b) => b.server().to_owned(),
            Engine::RedLock(r) => r.servers(),
        }
    }

    /// One acquire attempt.
    pub(crate) async fn acquire(&self, attempt: &Attempt) -> Result<AcquireReply, Error> {
        match self {
            Engine::One(b) => b.acquire(attempt, None).await,
            Engine::RedLock(r) => r.acquire(attempt).await,
        }
    }

    /// Whether the server keeps a wait queue and hands the lock over on release.
    pub(crate) fn queues(&self) -> bool {
        matches!(self, Engine::One(_))
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
            Engine::One(b) => b.release(keys, owner, hold, None).await,
            Engine::RedLock(r) => r.release(keys, owner, hold).await,
        }
    }

    /// Extends a hold's lease to at least `lease_ms` while the hold is live.
    pub(crate) async fn extend(
        &self,
        hold: &Arc<LeaseState>,
        lease_ms: u64,
    ) -> Result<Renewal, Error> {
        match self {
            Engine::One(b) => b.extend(hold, lease_ms).await,
            Engine::RedLock(r) => {
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
            Engine::One(b) => b.extend_replicated(hold, lease_ms, acks).await,
            Engine::RedLock(_) => self.extend(hold, lease_ms).await,
        }
    }

    /// Renews many leases; per-lease outcomes in order.
    pub(crate) async fn renew_batch(
        &self,
        items: Vec<RenewItem>,
    ) -> Result<Vec<Result<Renewal, Error>>, Error> {
        match self {
            Engine::One(b) => b.renew_batch(&items, None).await,
            Engine::RedLock(r) => r.renew_batch(items, None).await,
        }
    }

    pub(crate) async fn status(&self, keys: &Arc<LockKeys>) -> Result<RawStatus, Error> {
        match self {
            Engine::One(b) => b.status(keys).await,
            Engine::RedLock(r) => r.status(keys).await,
        }
    }

    pub(crate) async fn force_unlock(
        &self,
        keys: &Arc<LockKeys>,
    ) -> Result<Vec<(String, u64)>, Error> {
        match self {
            Engine::One(b) => b.force_unlock(keys).await,
            Engine::RedLock(r) => r.force_unlock(keys).await,
        }
    }

    pub(crate) async fn subscribe(&self, channels: &[String]) -> Result<(), Error> {
        match self {
            Engine::One(b) => b.subscribe(channels).await,
            Engine::RedLock(r) => r.subscribe(channels).await,
        }
    }

    /// Subscribes this client's own channel, where a forced unlock tells the holders'
    /// clients (not on a Redis Cluster: see `keys::CLIENT_CHANNELS`). Once, on connect.
    pub(crate) async fn listen_as_client(&self, channel: &str) -> Result<(), Error> {
        let channels = [channel.to_owned()];
        match self {
            Engine::One(b) if b.hears_clients() => b.subscribe(&channels).await,
            Engine::One(_) => Ok(()),
            Engine::RedLock(r) => r.subscribe(&channels).await,
        }
    }

    pub(crate) async fn unsubscribe(&self, channels: &[String]) -> Result<(), Error> {
        match self {
            Engine::One(b) => b.unsubscribe(channels).await,
            Engine::RedLock(r) => r.unsubscribe(channels).await,
        }
    }
}
