//! The Redis engines: one deployment that acts as one server (plain, Sentinel, Cluster), or
//! RedLock over several, behind one enum. The terms they speak are in `terms`.

use std::sync::Arc;

use super::redlock::RedLock;
use super::server::RedisBackend;
use super::terms::{AcquireReply, Attempt, RenewItem, ReplicaAcks};
use crate::backend::redis::keys::LockKeys;
use crate::backend::{Kind, RawStatus, Released};
use crate::error::Error;
use crate::lease::{LeaseState, Renewal};

/// An election, for the operations that name no value (`leader`, `proclaim`, `observe`).
pub(crate) const ELECTION: Kind<'static> = Kind::Leader { value: "" };

/// Why RedLock refuses elections.
const NO_REDLOCK_ELECTION: &str = "RedLock offers no leader election: its servers keep no wait \
     queue, and N servers handing a released lock over independently could each pick another \
     next leader (and value); use one Redis server, a Sentinel set or a Cluster";

/// Why RedLock refuses read-write locks and semaphores.
const NO_REDLOCK_FAMILY: &str = "RedLock keeps no wait queue, so it cannot serve readers, \
     writers or permits in arrival order (N servers handing over independently could each \
     admit others), and a majority per rule cannot bound the holders: readers and permits \
     granted on different majorities could exceed N or overlap a writer once a server \
     restarts empty; use one Redis server, a Sentinel set or a Cluster";

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

    /// The one deployment, for an operation `what` on a primitive that needs its wait queue:
    /// every `kind` but the mutex (a campaign, and an election's `leader`, `proclaim` and
    /// `observe`; a read-write lock's sides; a semaphore's permits). What RedLock refuses is
    /// decided here alone: it keeps no wait queue, so it serves the mutex alone.
    pub(crate) fn queued(
        &self,
        kind: Kind<'_>,
        what: &'static str,
    ) -> Result<&RedisBackend, Error> {
        match self {
            Engine::One(b) => Ok(b),
            Engine::RedLock(_) => Err(Error::Unsupported {
                service: "Redis",
                what,
                why: match kind {
                    Kind::Leader { .. } => NO_REDLOCK_ELECTION,
                    Kind::Mutex | Kind::Read | Kind::Write | Kind::Permit { .. } => {
                        NO_REDLOCK_FAMILY
                    }
                },
            }),
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
        keys: &LockKeys,
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

    pub(crate) async fn status(&self, keys: &LockKeys) -> Result<RawStatus, Error> {
        match self {
            Engine::One(b) => b.status(keys).await,
            Engine::RedLock(r) => r.status(keys).await,
        }
    }

    pub(crate) async fn force_unlock(&self, keys: &LockKeys) -> Result<Vec<(String, u64)>, Error> {
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
