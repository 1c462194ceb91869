//! Redis as a lock service: one server, a Sentinel-managed master, a Cluster, or RedLock over
//! independent servers.
//!
//! - `server`: one deployment that acts as one server for a lock (the Lua scripts, how they
//!   are sent, replies); `conn` and `url`: how it is reached.
//! - `redlock`: a majority over several `server`s.
//! - `engine`: the two shapes behind one enum; `terms`: what they speak (an attempt, its
//!   reply, the release sink), a leaf; `setup`: how connections are configured, a leaf.
//! - `acquire`: the acquire algorithm (attempts named by id, waiting, handover, undo);
//!   `waiters`: this client's local wait queues, fed by release messages.
//! - Elections (one deployment; RedLock refuses them): a campaign is an acquire whose attempts
//!   carry the participant's value (`terms::Attempt::value`), kept by the scripts in the lock's
//!   slot; `leader` and `proclaim` are a script each; `observe`: a follower task on the
//!   lock's subscription, shared with `waiters`.
//! - Read-write locks and semaphores (one deployment; RedLock refuses them, as every
//!   primitive but the mutex, in one place: `Engine::queued`): an acquire whose attempts carry a `terms::Shape` (read, write, a
//!   permit of N) runs `server/family_acquire.lua`; the release, renewal, status and
//!   force-unlock scripts are the mutex's, which tell a family lock by its `=k` field. The
//!   layout, in the lock's slot (`server/family.lua` has it in full): the hash's `=k` says
//!   `rw` or `sem:N`; each owner's field lists its hold ids (as a mutex's holder); each
//!   owner's `=h:<owner>` field is its holding: its own fencing token, its own deadline
//!   (`since_us term_ms` on the server's clock) and which holds are write holds. The rule,
//!   in arrival order over the mutex's queue (a place ends with `:r`, `:w` or `:p`): a reader
//!   holds when no writer holds and no place is ahead, a writer when nothing holds and no
//!   place is ahead, a permit when fewer than N hold and no place is ahead; every family
//!   script first drops the holdings past their own deadlines (so a dead reader's or a
//!   crashed permit holder's holding ends alone, at its deadline), then hands over by the rule
//!   (every reader at the head up to the next writer, one `=grant` each). Re-entry, a
//!   writer's downgrade (write, read, release write: the read stays) and the refusals
//!   (`UpgradeRefused`, `PermitsMismatch` unless resized, `PrimitiveMismatch` both ways with
//!   the mutex and the election, whose scripts read `=k` in the HMGET they already make) are
//!   decided in that script before any write. Lowering N revokes nothing: the holdings stay,
//!   and waiters hold once fewer than the new N hold.
//! - `keys`: a lock's keys and channels (its docs list them); `places`: a waiter's place in
//!   the server's queue, as the scripts write it; `abandoned`: attempts and holds given up,
//!   given back first by the owner's next attempt.
//! - RedLock's helpers: `serials` (a heal of a hold runs before its release), `outcome` (each
//!   server's answer, the source of `Error::Quorum`), `distinct` (a set's URLs reach distinct
//!   servers). Sentinel's: `announce` (`+switch-master`), `released` (releases kept across a
//!   switch, given back again after it).
//!
//! What crosses between the pieces on the way of one lock:
//!
//! ```text
//!  Lock::acquire ──attempt──▶ backend::redis (EVALSHA acquire) ──▶ redis-server
//!      │ held?                                                        │ PUBLISH on release
//!      ▼                                                              ▼
//!  waiters::join ──SUBSCRIBE (lock + client channel)─▶ subscriber conn ──push──▶ WaitRegistry::released
//!      │ the head's attempt takes a place        =grant: wakes the waiter it names, which holds
//!      │ in the server's queue                   the lock; other messages: wake each head
//!      ▼
//!  Guard ◀── LeaseState ──weak──▶ watchdog queue ──pipelined EVALSHA extend──▶ redis-server
//!                 │ deadline passed / renewal says NotHeld
//!                 ▼
//!           CancellationToken cancelled  ──▶ guard.lost() resolves
//! ```

use std::sync::{Arc, Weak};
use std::time::Duration;

use self::abandoned::Abandoned;
use self::acquire::{Ask, Attempted};
use self::engine::{Engine, ELECTION};
use self::granted::Granted;
use self::keys::LockKeys;
use self::redlock::RedLock;
use self::server::RedisBackend;
use self::terms::{ReleaseSink, ReplicaAcks, Shape};
use self::waiters::WaitRegistry;
use super::{
    Acquired, Connected, Connecting, Ctx, Feed, Kind, Leader, LockRequest, LockService, Released,
    Wait,
};
use crate::backend::RawStatus;
use crate::background::Background;
use crate::error::{Error, InputError, Warning};
use crate::lease::{LeaseState, LostReason, Renewal};
use crate::name::LockName;
use crate::options::{ClientOptions, LockOptions};
use crate::watchdog::{BoxFuture, Renewals, Watchdog};

mod abandoned;
mod acquire;
mod announce;
mod conn;
mod distinct;
mod engine;
mod granted;
pub(crate) mod keys;
mod observe;
mod outcome;
mod places;
mod redlock;
mod released;
mod serials;
pub(crate) mod server;
mod setup;
mod terms;
mod url;
mod waiters;

/// The Redis lock service of one client.
pub(crate) struct RedisFamily {
    engine: Arc<Engine>,
    waiters: Arc<WaitRegistry>,
    /// Attempts and holds given up whose give-back is not confirmed yet.
    abandoned: Arc<Abandoned>,
    /// The holds granted to this client, by owner: a re-entry is tried at once.
    granted: Granted,
}

impl RedisFamily {
    /// Connects to one deployment (one URL) or to RedLock's servers (several). Returns the
    /// service and the warnings found on connect. `client_id`: the prefix of this client's
    /// owner ids, which names the channel its handovers arrive on (see `WaitRegistry`).
    pub(crate) async fn connect(
        urls: &[&str],
        options: &ClientOptions,
        background: &Background,
        watchdog: Weak<Watchdog>,
        client_id: &str,
    ) -> Result<(Self, Vec<Warning>), Error> {
        let waiters = Arc::new(WaitRegistry::new(watchdog, client_id));
        let sink: Weak<dyn ReleaseSink> = Arc::downgrade(&waiters) as Weak<dyn ReleaseSink>;
        let (engine, warnings) = if let [url] = urls {
            let (b, w) = RedisBackend::connect(url, options, sink).await?;
            (Engine::One(b), w)
        } else {
            let (r, w) = RedLock::connect(urls, options, sink, background.clone()).await?;
            (Engine::RedLock(r), w)
        };
        // A forced unlock tells the holders' clients on their own channels: a holder hears
        // of it at once, not at its next renewal (a request at connect, none per acquire).
        if let Err(e) = engine.listen_as_client(waiters.own_channel()).await {
            tracing::debug!(error = %e, "subscribing the client's own channel failed");
        }
        let family = Self {
            engine: Arc::new(engine),
            waiters,
            abandoned: Arc::default(),
            granted: Granted::default(),
        };
        Ok((family, warnings))
    }

    /// Gives back the hold (or queue place) taken by attempt `id`, in the background: for code
    /// that cannot await. Until it is confirmed, the owner's next attempt on the lock carries
    /// the id and gives it back first, so a retry never re-enters what the caller let go of.
    /// `term`: the lease it was taken with (after it, the server has let it go anyway).
    pub(crate) fn give_back_later(
        &self,
        ctx: &Ctx,
        keys: &LockKeys,
        owner: &Arc<str>,
        id: u64,
        term: Duration,
    ) {
        self.abandoned.add(keys.name(), owner, id, term);
        let (engine, abandoned) = (self.engine.clone(), self.abandoned.clone());
        let (keys, owner) = (keys.clone(), owner.clone());
        ctx.background.finish(async move {
            match engine.release(&keys, &owner, Some(id)).await {
                Ok(released) => {
                    abandoned.settle(keys.name(), &owner, &[id]);
                    tracing::debug!(lock = %keys.name(), ?released, id, "background release");
                }
                Err(e) => {
                    tracing::warn!(lock = %keys.name(), error = %e, "background release failed; the lease will expire")
                }
            }
        });
    }
}

/// Connects the Redis family (its registry line): one URL, or RedLock's odd number of them.
pub(crate) fn connect(c: Connecting<'_>) -> BoxFuture<'_, Result<Connected, Error>> {
    Box::pin(async move {
        if c.urls.is_empty() || c.urls.len().is_multiple_of(2) {
            return Err(InputError::InvalidOption {
                option: "urls",
                reason: "RedLock needs an odd number of servers (1, 3, 5, ...)",
            }
            .into());
        }
        let (urls, options, background) = (c.urls, c.options, c.background);
        let (family, warnings) =
            RedisFamily::connect(urls, options, background, c.watchdog, c.client_id).await?;
        Ok((Arc::new(family) as Arc<dyn LockService>, warnings))
    })
}

impl LockService for RedisFamily {
    fn name(&self) -> &'static str {
        "Redis"
    }

    fn server(&self) -> String {
        self.engine.server()
    }

    /// A name with a brace would break the keys' hash tag.
    fn check_name(&self, name: &str) -> Result<(), InputError> {
        keys::check_name(name)
    }

    /// Redis's own lock options: `min_replica_acks` needs a timeout shorter than the lease.
    fn check(&self, options: &LockOptions, lease: Duration) -> Result<(), InputError> {
        match options.replica_acks {
            Some((_, timeout)) if timeout >= lease => Err(InputError::InvalidOption {
                option: "min_replica_acks",
                reason: "the timeout must be shorter than the lease, which could otherwise \
                         run out while the replicas are awaited",
            }),
            _ => Ok(()),
        }
    }

    /// Elections, read-write locks and semaphores on one deployment (server, Sentinel,
    /// Cluster); RedLock refuses them (`Engine::queued`).
    fn check_kind(&self, kind: Kind<'_>) -> Result<(), Error> {
        let what = match kind {
            Kind::Mutex => return Ok(()),
            Kind::Leader { .. } => "Election::campaign",
            Kind::Read | Kind::Write => "a read-write lock",
            Kind::Permit { .. } => "a semaphore",
        };
        self.engine.queued(kind, what).map(drop)
    }

    fn leader<'a>(
        &'a self,
        lock: &'a Arc<LockName>,
    ) -> BoxFuture<'a, Result<Option<Leader>, Error>> {
        Box::pin(async move {
            let backend = self.engine.queued(ELECTION, "Election::leader")?;
            let read = backend.leader(&LockKeys::of(lock)).await?;
            Ok(read.map(|(leader, _)| leader))
        })
    }

    /// Sets the leader's value while its hold is the lock's; a hold found gone is lost
    /// (`LostReason::Renewal`: the server no longer has it), and nothing changes.
    fn proclaim<'a>(
        &'a self,
        hold: &'a Arc<LeaseState>,
        value: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let backend = self.engine.queued(ELECTION, "Leadership::proclaim")?;
            if backend.proclaim(hold, value).await? {
                return Ok(());
            }
            hold.fire_lost(LostReason::Renewal);
            Err(hold.lost_error())
        })
    }

    fn observe<'a>(&'a self, lock: &'a Arc<LockName>) -> BoxFuture<'a, Result<Feed, Error>> {
        Box::pin(async move {
            self.engine.queued(ELECTION, "Election::observe")?;
            observe::start(&self.engine, &self.waiters, LockKeys::of(lock)).await
        })
    }

    fn acquire<'a>(
        &'a self,
        ctx: &'a Ctx,
        request: &'a LockRequest<'a>,
        wait: Wait,
    ) -> BoxFuture<'a, Result<Acquired, Error>> {
        let keys = LockKeys::of(request.lock);
        Box::pin(async move {
            let ask = Ask {
                family: self,
                ctx,
                lock: request.lock,
                keys: &keys,
                owner: request.owner,
                explicit_owner: request.explicit_owner,
                lease: request.lease,
                renew: request.renew,
                acks: request
                    .options
                    .replica_acks
                    .map(|(replicas, timeout)| ReplicaAcks { replicas, timeout }),
                value: match request.kind {
                    Kind::Leader { value } => Some(value.into()),
                    Kind::Mutex | Kind::Read | Kind::Write | Kind::Permit { .. } => None,
                },
                shape: match request.kind {
                    Kind::Read => Some(Shape::Read),
                    Kind::Write => Some(Shape::Write),
                    Kind::Permit { permits, resize } => Some(Shape::Permit { permits, resize }),
                    Kind::Mutex | Kind::Leader { .. } => None,
                },
            };
            match wait {
                Wait::No => Ok(match ask.once(rand::random(), Default::default()).await? {
                    Attempted::Acquired(held) => Acquired::Held(held),
                    Attempted::Held { remaining, .. } => Acquired::Busy { remaining },
                }),
                Wait::Until(deadline) => Ok(Acquired::Held(ask.until(deadline).await?)),
            }
        })
    }

    /// Gives back a guard's hold, named by its id. On RedLock it waits for a heal of the hold
    /// under way (`Serials`), so that the heal never lands after it.
    fn release<'a>(
        &'a self,
        _ctx: &'a Ctx,
        lease: &'a Arc<LeaseState>,
    ) -> BoxFuture<'a, Result<Released, Error>> {
        Box::pin(async move {
            let hold = &lease.hold;
            let keys = LockKeys::of(&hold.lock);
            self.engine.release(&keys, &hold.owner, Some(hold.id)).await
        })
    }

    /// The release in the background, carried by the owner's next attempt until confirmed.
    fn release_later(self: Arc<Self>, ctx: &Arc<Ctx>, lease: &Arc<LeaseState>) {
        let hold = &lease.hold;
        let keys = LockKeys::of(&hold.lock);
        let owner = &hold.owner;
        self.give_back_later(ctx, &keys, owner, hold.id, hold.lease);
    }

    fn release_owner<'a>(
        &'a self,
        lock: &'a Arc<LockName>,
        owner: &'a Arc<str>,
    ) -> BoxFuture<'a, Result<Released, Error>> {
        Box::pin(async move { self.engine.release(&LockKeys::of(lock), owner, None).await })
    }

    fn extend<'a>(
        &'a self,
        hold: &'a Arc<LeaseState>,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Renewal, Error>> {
        Box::pin(self.engine.extend(hold, lease.as_millis() as u64))
    }

    fn renew(&self, holds: Vec<Arc<LeaseState>>) -> BoxFuture<'_, Renewals> {
        Box::pin(self.engine.renew_batch(holds))
    }

    fn status<'a>(&'a self, lock: &'a Arc<LockName>) -> BoxFuture<'a, Result<RawStatus, Error>> {
        Box::pin(async move { self.engine.status(&LockKeys::of(lock)).await })
    }

    fn unconfirmed(&self) -> usize {
        self.abandoned.len()
    }

    fn force_unlock<'a>(
        &'a self,
        lock: &'a Arc<LockName>,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, Error>> {
        Box::pin(async move { self.engine.force_unlock(&LockKeys::of(lock)).await })
    }
}
