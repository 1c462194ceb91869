//! The lock-service seam: what the public API asks of a coordination service.
//!
//! A service acquires (a hold, with a fencing token and a lease whose loss it signals, or
//! "busy"), waits for a turn, releases a hold, extends it, renews the holds the watchdog hands
//! it, reports a lock's status and force-unlocks it. Each service lives in a folder below this
//! one with its own keys, scripts, sessions or leases; nothing above this module sees them.
//! Services get the client's background machinery (`Ctx`) from above and never import the
//! API: modules import downward only.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::abandoned::Abandoned;
use crate::background::Background;
use crate::error::{Error, InputError};
use crate::lease::{LeaseState, Renewal};
use crate::name::LockName;
use crate::options::{ClientOptions, LockOptions};
use crate::watchdog::{BoxFuture, Renewals, Watchdog};

#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) mod current;
#[cfg(feature = "etcd")]
pub(crate) mod etcd;
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) mod holdings;
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) mod queue;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) mod session_holds;
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper;

/// What the client lends every service: its timers, its background task, the attempts it
/// gave up, and its options.
pub(crate) struct Ctx {
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) background: Background,
    pub(crate) abandoned: Arc<Abandoned>,
    pub(crate) options: ClientOptions,
}

/// A lock's state as the service has it, for `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawStatus {
    pub(crate) remaining: Option<Duration>,
    pub(crate) held: bool,
    pub(crate) last_token: Option<u64>,
    pub(crate) current_token: Option<u64>,
    pub(crate) owners: Vec<(String, u64)>,
    /// The wait queue in arrival order (always empty with RedLock).
    pub(crate) waiters: Vec<crate::status::Waiter>,
}

/// What an acquire asks for.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct LockRequest<'a> {
    pub(crate) lock: &'a Arc<LockName>,
    pub(crate) owner: &'a Arc<str>,
    /// The owner id was given by the user (`Lock::with_owner`), so another process may hold
    /// the lock as the same owner; a generated id is this client's alone.
    #[cfg_attr(not(feature = "zookeeper"), allow(dead_code))]
    pub(crate) explicit_owner: bool,
    pub(crate) lease: Duration,
    /// The watchdog renews the lease (no explicit lease was given).
    pub(crate) renew: bool,
    pub(crate) options: &'a LockOptions,
}

/// How long an acquire may wait for the lock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// One attempt (`try_acquire`).
    No,
    /// Until the lock is acquired, or until the instant (the timeout it came from).
    Until(Option<(Instant, Duration)>),
}

impl Wait {
    /// The instant a timed wait gives up at.
    #[cfg_attr(not(any(feature = "zookeeper", feature = "etcd")), allow(dead_code))]
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Wait::Until(Some((at, _))) => Some(at),
            _ => None,
        }
    }

    /// What an attempt that did not get lock `name` comes to: a timeout when it waited until
    /// a deadline, else busy.
    #[cfg_attr(not(any(feature = "zookeeper", feature = "etcd")), allow(dead_code))]
    pub(crate) fn not_acquired(self, name: &str) -> Result<Acquired, Error> {
        match self {
            Wait::Until(Some((_, waited))) => Err(Error::Timeout {
                lock: name.to_owned(),
                waited,
            }),
            _ => Ok(Acquired::Busy { remaining: None }),
        }
    }
}

/// A hold the service granted: its lease (token, deadline, lost-lock signal) and the owner's
/// hold count right after it.
pub(crate) struct Held {
    pub(crate) lease: Arc<LeaseState>,
    pub(crate) count: u64,
}

/// What an acquire found.
pub(crate) enum Acquired {
    Held(Held),
    /// Held by another owner (only without waiting): its remaining lease, if known.
    Busy {
        remaining: Option<Duration>,
    },
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
    /// The hold (or owner) did not hold the lock (any more): it had expired, been
    /// force-unlocked, or was already released. Nothing was changed.
    NotHeld,
}

/// The coordination service behind a client.
pub(crate) enum Service {
    /// Redis: one server, Sentinel, Cluster, or RedLock over several servers.
    #[cfg(feature = "redis")]
    Redis(redis::RedisFamily),
    /// ZooKeeper (feature `zookeeper`): Curator's lock layout, one session per client.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(zookeeper::ZooKeeper),
    /// etcd (feature `etcd`): the layout of etcd's `concurrency.Mutex`, one lease per client.
    #[cfg(feature = "etcd")]
    Etcd(etcd::Etcd),
}

impl Service {
    /// Where the service is, for errors and logs.
    pub(crate) fn server(&self) -> String {
        match self {
            #[cfg(feature = "redis")]
            Service::Redis(r) => r.server(),
            #[cfg(feature = "zookeeper")]
            Service::ZooKeeper(z) => z.server(),
            #[cfg(feature = "etcd")]
            Service::Etcd(e) => e.server(),
        }
    }

    /// The service's own rules for lock names (beyond [`crate::validate_name`]'s), checked
    /// before any I/O.
    pub(crate) fn check_name(&self, name: &str) -> Result<(), InputError> {
        match self {
            #[cfg(feature = "redis")]
            Service::Redis(r) => r.check_name(name),
            #[cfg(feature = "zookeeper")]
            Service::ZooKeeper(z) => z.check_name(name),
            #[cfg(feature = "etcd")]
            Service::Etcd(e) => e.check_name(name),
        }
    }

    /// Options that only some services understand are checked here, before any I/O.
    pub(crate) fn check(&self, options: &LockOptions, lease: Duration) -> Result<(), InputError> {
        match self {
            #[cfg(feature = "redis")]
            Service::Redis(r) => r.check(options, lease),
            #[cfg(feature = "zookeeper")]
            Service::ZooKeeper(z) => z.check(options, lease),
            #[cfg(feature = "etcd")]
            Service::Etcd(e) => e.check(options, lease),
        }
    }

    /// Acquires, waiting as `wait` says.
    ///
    /// Boxed, as every operation of the seam is: the seam erases each service's future type. Its nesting (a
    /// RedLock fan-out over one-server requests) would otherwise reach every caller's future,
    /// and the compiler's default limits would refuse `tokio::spawn(lock.acquire())` in the
    /// user's crate.
    pub(crate) fn acquire<'a>(
        &'a self,
        ctx: &'a Ctx,
        request: &'a LockRequest<'a>,
        wait: Wait,
    ) -> BoxFuture<'a, Result<Acquired, Error>> {
        match self {
            #[cfg(feature = "redis")]
            Service::Redis(r) => Box::pin(r.acquire(ctx, request, wait)),
            #[cfg(feature = "zookeeper")]
            Service::ZooKeeper(z) => Box::pin(z.acquire(ctx, request, wait)),
            #[cfg(feature = "etcd")]
            Service::Etcd(e) => Box::pin(e.acquire(ctx, request, wait)),
        }
    }

    /// Gives back a guard's hold; a hold that is gone is left alone.
    pub(crate) fn release<'a>(
        &'a self,
        ctx: &'a Ctx,
        hold: &'a Arc<LeaseState>,
    ) -> BoxFuture<'a, Result<Released, Error>> {
        match self {
            #[cfg(feature = "redis")]
            Service::Redis(r) => Box::pin(r.release(ctx, hold)),
            #[cfg(feature = "zookeeper")]
            Service::ZooKeeper(z) => Box::pin(z.release(ctx, hold)),
            #[cfg(feature = "etcd")]
            Service::Etcd(e) => Box::pin(e.release(ctx, hold)),
        }
    }

    /// Gives back a guard's hold in the background (a guard dropped without `release`).
    pub(crate) fn release_later(&self, ctx: &Ctx, hold: &Arc<LeaseState>) {
        match self {
            #[cfg(feature = "redis")]
            Service::Redis(r) => r.release_later(ctx, hold),
            #[cfg(feature = "zookeeper")]
            Service::ZooKeeper(z) => z.release_later(ctx, hold),
            #[cfg(feature = "etcd")]
            Service::Etcd(e) => e.release_later(ctx, hold),
        }
    }

    /// Gives back the owner's newest hold, without a guard.
    pub(crate) fn release_owner<'a>(
        &'a self,
        lock: &'a Arc<LockName>,
        owner: &'a Arc<str>,
    ) -> BoxFuture<'a, Result<Released, Error>> {
        match self {
            #[cfg(feature = "redis")]
            Service::Redis(r) => Box::pin(r.release_owner(lock, owner)),
            #[cfg(feature = "zookeeper")]
            Service::ZooKeeper(z) => Box::pin(z.release_owner(lock, owner)),
            #[cfg(feature = "etcd")]
            Service::Etcd(e) => Box::pin(e.release_owner(lock, owner)),
        }
    }

    /// Extends a hold's lease to at least `lease` while the hold is live.
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    pub(crate) fn extend<'a>(
        &'a self,
        hold: &'a Arc<LeaseState>,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Renewal, Error>> {
        match self {
            #[cfg(feature = "redis")]
            Service::Redis(r) => Box::pin(r.extend(hold, lease)),
            #[cfg(feature = "zookeeper")]
            Service::ZooKeeper(z) => Box::pin(std::future::ready(z.extend())),
            #[cfg(feature = "etcd")]
            Service::Etcd(e) => Box::pin(std::future::ready(e.extend())),
        }
    }

    /// Renews the holds the watchdog found due.
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    pub(crate) fn renew(&self, holds: Vec<Arc<LeaseState>>) -> BoxFuture<'_, Renewals> {
        match self {
            #[cfg(feature = "redis")]
            Service::Redis(r) => Box::pin(r.renew(holds)),
            #[cfg(feature = "zookeeper")]
            Service::ZooKeeper(z) => Box::pin(std::future::ready(z.renew())),
            #[cfg(feature = "etcd")]
            Service::Etcd(e) => Box::pin(std::future::ready(e.renew())),
        }
    }

    /// What the service knows about a lock.
    pub(crate) fn status<'a>(
        &'a self,
        lock: &'a Arc<LockName>,
    ) -> BoxFuture<'a, Result<RawStatus, Error>> {
        match self {
            #[cfg(feature = "redis")]
            Service::Redis(r) => Box::pin(r.status(lock)),
            #[cfg(feature = "zookeeper")]
            Service::ZooKeeper(z) => Box::pin(z.status(lock)),
            #[cfg(feature = "etcd")]
            Service::Etcd(e) => Box::pin(e.status(lock)),
        }
    }

    /// Deletes a lock whoever holds it; returns the owners and hold counts it had.
    pub(crate) fn force_unlock<'a>(
        &'a self,
        lock: &'a Arc<LockName>,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, Error>> {
        match self {
            #[cfg(feature = "redis")]
            Service::Redis(r) => Box::pin(r.force_unlock(lock)),
            #[cfg(feature = "zookeeper")]
            Service::ZooKeeper(z) => Box::pin(z.force_unlock(lock)),
            #[cfg(feature = "etcd")]
            Service::Etcd(e) => Box::pin(e.force_unlock(lock)),
        }
    }
}
