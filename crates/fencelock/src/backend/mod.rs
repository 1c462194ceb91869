//! The lock-service seam: what the public API asks of a coordination service.
//!
//! A service acquires (a hold, with a fencing token and a lease whose loss it signals, or
//! "busy"), waits for a turn, releases a hold, extends it, renews the holds the watchdog hands
//! it, reports a lock's status and force-unlocks it. Each service lives in a folder below this
//! one with its own keys, scripts, sessions or leases; nothing above this module sees them.
//! Services get the client's background machinery (`Ctx`) from above and never import the
//! API: modules import downward only.
//!
//! The seam is the trait [`LockService`]; `registry` lists every service by URL scheme. A
//! new service is its folder, its `mod` line here, its line in `registry` and its cargo
//! feature (docs/ARCHITECTURE.md, "What a new service adds").

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::background::Background;
use crate::error::{Error, InputError, Warning};
use crate::lease::{Hold, LeaseState, Renewal};
use crate::name::LockName;
use crate::options::{ClientOptions, LockOptions};
use crate::watchdog::{BoxFuture, Renewals, Watchdog};

#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) mod current;
#[cfg(feature = "etcd")]
pub(crate) mod etcd;
#[cfg(any(feature = "zookeeper", feature = "etcd", feature = "postgres"))]
#[cfg_attr(not(any(feature = "zookeeper", feature = "etcd")), allow(dead_code))]
pub(crate) mod holdings;
#[cfg(feature = "postgres")]
#[allow(dead_code)] // Its tests use it; its driver is written on the shared recipe layer.
pub(crate) mod postgres;
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) mod queue;
#[cfg(feature = "redis")]
pub(crate) mod redis;
pub(crate) mod registry;
#[cfg(any(feature = "zookeeper", feature = "etcd", feature = "postgres"))]
#[cfg_attr(not(any(feature = "zookeeper", feature = "etcd")), allow(dead_code))]
pub(crate) mod session_holds;
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) mod session_service;
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper;

/// What the client lends every service: its timers, its background task and its options.
pub(crate) struct Ctx {
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) background: Background,
    pub(crate) options: ClientOptions,
}

/// What a service's connect function gets: the URLs (one, or several where the service takes
/// several), the client's options and the machinery it may keep. Not every service reads every
/// field, so a build of some services only may leave one unread.
#[allow(dead_code)]
pub(crate) struct Connecting<'a> {
    pub(crate) urls: &'a [&'a str],
    pub(crate) options: &'a ClientOptions,
    pub(crate) background: &'a Background,
    pub(crate) watchdog: Weak<Watchdog>,
    /// The prefix of this client's owner ids.
    pub(crate) client_id: &'a str,
}

impl Connecting<'_> {
    /// The one URL of a service that takes one (the registry checked that there is one).
    pub(crate) fn url(&self) -> &str {
        self.urls.first().copied().unwrap_or_default()
    }
}

/// A connected service and the warnings found on connect.
pub(crate) type Connected = (Arc<dyn LockService>, Vec<Warning>);

/// A service's connect function, as its line in [`registry`] names it.
pub(crate) type Connect = for<'a> fn(Connecting<'a>) -> BoxFuture<'a, Result<Connected, Error>>;

impl Ctx {
    /// A hold the service granted, as the core keeps it: its `LeaseState` (token, deadline,
    /// lost-lock signal), timed by the watchdog, which renews it at `renew_at` if the hold is
    /// renewed and fires its lost signal at `deadline`. Services say what they granted and
    /// never build lease state themselves. (A hold of a session also goes to the session's
    /// holds, which move its deadline and end it with the session.)
    pub(crate) fn grant(
        &self,
        hold: Hold,
        deadline: Instant,
        renew_at: Instant,
    ) -> Arc<LeaseState> {
        let lease = Arc::new(LeaseState::new(hold, deadline, renew_at));
        self.watchdog.track(&lease);
        lease
    }
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
// Seam vocabulary: a build without the services that use it leaves it unused.
#[allow(dead_code)]
pub(crate) struct LockRequest<'a> {
    pub(crate) lock: &'a Arc<LockName>,
    pub(crate) owner: &'a Arc<str>,
    /// The owner id was given by the user (`Lock::with_owner`), so another process may hold
    /// the lock as the same owner; a generated id is this client's alone.
    // Seam vocabulary: a build without the services that use it leaves it unused.
    #[allow(dead_code)]
    pub(crate) explicit_owner: bool,
    pub(crate) lease: Duration,
    /// The watchdog renews the lease (no explicit lease was given).
    pub(crate) renew: bool,
    pub(crate) options: &'a LockOptions,
    /// What the attempt takes: a mutex's holding, or an election's leadership.
    pub(crate) kind: Kind<'a>,
}

/// What an acquire takes. Every kind is a participant of the name's one queue; the kind says
/// which participants hold (the first, for both kinds so far) and what an entry stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind<'a> {
    /// A mutex's holding; the entry stores the owner id.
    Mutex,
    /// A leader election's campaign: the first participant leads and advertises `value`,
    /// which the entry stores (Curator's `LeaderLatch` and etcd's `concurrency.Election` keep
    /// the participant's id or value as the node's or key's data).
    Leader {
        /// The value the participant advertises while it leads.
        value: &'a str,
    },
    /// A read-write lock's read side: holds when no writer is ahead of it in the queue (so a
    /// reader waits for every earlier writer, and a writer for everyone earlier). An owner
    /// that holds the write side takes the read side at once (a downgrade).
    Read,
    /// A read-write lock's write side: holds when nothing is ahead. An owner that holds only
    /// the read side is refused at once (`Error::UpgradeRefused`): it would wait for itself.
    Write,
    /// One permit of a semaphore of `permits`: holds when fewer than `permits` holdings are
    /// ahead. Each permit is a holding of its own (no re-entry). `permits` is stored with the
    /// semaphore; another number is refused (`Error::PermitsMismatch`) unless `resize`.
    Permit {
        /// The semaphore's number of permits, as the caller asked.
        permits: u32,
        /// Store `permits` as the semaphore's number (`Semaphore::resize`).
        resize: bool,
    },
}

/// The leader of an election: the value it advertises and its term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Leader {
    /// The value the leader advertises ([`crate::Election::campaign`]'s, or the last
    /// [`crate::Leadership::proclaim`]'s).
    pub value: String,
    /// The leader's term: its holding's fencing token. It strictly increases from one leader
    /// of an election to the next, so a resource can refuse a deposed leader's late write.
    pub term: u64,
}

/// What a service's `observe` sends: the election's leader (or none) each time it may have
/// changed, the leader as it is at the start first; an error, and nothing after it, once the
/// service can no longer follow. The core reports changes only, never an older term. The
/// sending task ends when the receiver is dropped.
pub(crate) type Feed = tokio::sync::mpsc::Receiver<Result<Option<Leader>, Error>>;

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
    // Seam vocabulary: a build without the services that use it leaves it unused.
    #[allow(dead_code)]
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Wait::Until(Some((at, _))) => Some(at),
            _ => None,
        }
    }

    /// What an attempt that did not get lock `name` comes to: a timeout when it waited until
    /// a deadline, else busy.
    // Seam vocabulary: a build without the services that use it leaves it unused.
    #[allow(dead_code)]
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

/// The refusal of `kind` by a service that does not offer it.
pub(crate) fn refused(service: &'static str, kind: Kind<'_>) -> Error {
    let (what, why) = match kind {
        Kind::Mutex => ("a mutex", "this service offers no mutex"),
        Kind::Leader { .. } => (
            "Election::campaign",
            "this service offers no leader election",
        ),
        Kind::Read | Kind::Write => (
            "a read-write lock",
            "this service offers no read-write lock",
        ),
        Kind::Permit { .. } => ("a semaphore", "this service offers no semaphore"),
    };
    Error::Unsupported { service, what, why }
}

/// A coordination service, as the core sees it: the seam every service implements in its
/// folder (`backend/<service>/`) and registers in [`registry`].
///
/// Required: where it is, acquire, release, release by owner, status and force-unlock.
/// The rest has defaults for what only some services do: `extend` and `renew` refuse (a
/// service whose locks live in a session has no lease per lock), `release_later` runs
/// `release` through the client's background task, `check_name` and `check` accept.
///
/// Operations return boxed futures: the seam erases each service's future type, whose
/// nesting (a RedLock fan-out over one-server requests) would otherwise reach every caller's
/// future, and the compiler's default limits would refuse `tokio::spawn(lock.acquire())` in
/// the user's crate. The trait object adds one virtual call next to that allocation.
pub(crate) trait LockService: Send + Sync + 'static {
    /// The service's name in errors (`"Redis"`, `"ZooKeeper"`, `"etcd"`).
    fn name(&self) -> &'static str;

    /// Where the service is, for errors and logs.
    fn server(&self) -> String;

    /// The service's own rules for lock names (beyond [`crate::validate_name`]'s), checked
    /// before any I/O.
    fn check_name(&self, _name: &str) -> Result<(), InputError> {
        Ok(())
    }

    /// Options that only some services understand are checked here, before any I/O.
    fn check(&self, _options: &LockOptions, _lease: Duration) -> Result<(), InputError> {
        Ok(())
    }

    /// Refuses, before any I/O, a kind of acquire the service does not offer. By default only
    /// the mutex is offered; a service that offers elections overrides this (and `leader`,
    /// `proclaim` and `observe`), one that cannot refuses with its reason.
    fn check_kind(&self, kind: Kind<'_>) -> Result<(), Error> {
        match kind {
            Kind::Mutex => Ok(()),
            kind => Err(refused(self.name(), kind)),
        }
    }

    /// The refusal of an election operation by a service that offers none.
    fn no_election(&self, what: &'static str) -> Error {
        Error::Unsupported {
            service: self.name(),
            what,
            why: "this service offers no leader election",
        }
    }

    /// The election's current leader (the first participant of name `lock`'s queue), if any.
    fn leader<'a>(
        &'a self,
        _lock: &'a Arc<LockName>,
    ) -> BoxFuture<'a, Result<Option<Leader>, Error>> {
        Box::pin(std::future::ready(
            Err(self.no_election("Election::leader")),
        ))
    }

    /// Changes the value a leader advertises: the hold's own entry only, and only while it
    /// is there (`Error::LockLost` otherwise).
    fn proclaim<'a>(
        &'a self,
        _hold: &'a Arc<LeaseState>,
        _value: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(std::future::ready(Err(
            self.no_election("Leadership::proclaim")
        )))
    }

    /// Follows the election's leader (see [`Feed`]).
    fn observe<'a>(&'a self, _lock: &'a Arc<LockName>) -> BoxFuture<'a, Result<Feed, Error>> {
        Box::pin(std::future::ready(Err(
            self.no_election("Election::observe")
        )))
    }

    /// Acquires, waiting as `wait` says.
    fn acquire<'a>(
        &'a self,
        ctx: &'a Ctx,
        request: &'a LockRequest<'a>,
        wait: Wait,
    ) -> BoxFuture<'a, Result<Acquired, Error>>;

    /// Gives back a guard's hold; a hold that is gone is left alone.
    fn release<'a>(
        &'a self,
        ctx: &'a Ctx,
        hold: &'a Arc<LeaseState>,
    ) -> BoxFuture<'a, Result<Released, Error>>;

    /// Gives back a guard's hold in the background (a guard dropped without `release`, or a
    /// release whose answer never came): `release`, as tracked work of the client's task.
    fn release_later(self: Arc<Self>, ctx: &Arc<Ctx>, hold: &Arc<LeaseState>) {
        let (ctx_, hold) = (ctx.clone(), hold.clone());
        ctx.background.finish(async move {
            if let Err(e) = self.release(&ctx_, &hold).await {
                ctx_.background.failed();
                tracing::warn!(lock = %hold.hold.lock.name, error = %e, "background release failed; it is tried again in the background, or the lease or session ends it");
            }
        });
    }

    /// Gives back the owner's newest hold, without a guard.
    fn release_owner<'a>(
        &'a self,
        lock: &'a Arc<LockName>,
        owner: &'a Arc<str>,
    ) -> BoxFuture<'a, Result<Released, Error>>;

    /// Extends a hold's lease to at least `lease` while the hold is live. By default
    /// refused: a lock that lives in the client's session has no lease of its own.
    fn extend<'a>(
        &'a self,
        _hold: &'a Arc<LeaseState>,
        _lease: Duration,
    ) -> BoxFuture<'a, Result<Renewal, Error>> {
        Box::pin(std::future::ready(Err(Error::Unsupported {
            service: self.name(),
            what: "Guard::extend",
            why: "a lock of this service lasts as long as the client's session (or lease), \
                  which the client keeps alive by itself; there is no lease per lock to extend",
        })))
    }

    /// Renews, in one request where the service can, the batch of holds the watchdog found
    /// due; one outcome per hold, in order. By default refused: the watchdog never asks a
    /// service whose holds it does not renew (`Hold::renew` false).
    fn renew(&self, _holds: Vec<Arc<LeaseState>>) -> BoxFuture<'_, Renewals> {
        Box::pin(std::future::ready(Err(Error::Unsupported {
            service: self.name(),
            what: "renewing a lease",
            why: "locks of this service are kept alive by the client's session (or lease)",
        })))
    }

    /// What the service knows about a lock.
    fn status<'a>(&'a self, lock: &'a Arc<LockName>) -> BoxFuture<'a, Result<RawStatus, Error>>;

    /// How many give-backs the service has not confirmed yet (attempts and holds given up
    /// whose undo failed or is under way), for `Client::close` to report. By default none:
    /// a service that retries give-backs itself tracks them as background work.
    fn unconfirmed(&self) -> usize {
        0
    }

    /// Deletes a lock whoever holds it; returns the owners and hold counts it had.
    fn force_unlock<'a>(
        &'a self,
        lock: &'a Arc<LockName>,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, Error>>;
}
