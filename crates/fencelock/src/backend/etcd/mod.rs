//! etcd as a lock service (`etcd://host:port[,host:port...][/prefix]`), with the layout of
//! etcd's `concurrency.Mutex`, so that fencelock and `etcdctl lock` exclude each other.
//!
//! - `url`: the URL and the lock-name rules (a name is one key segment below the prefix).
//! - `session`: the client's one lease, which is the lease of every lock it holds: kept
//!   alive in the background, when it was last renewed, the lost-lock signal when it ends.
//! - `slots`: one attempt or holding per lock per client (the key is named by the lease).
//! - `recipe`: the keys (create if absent, the queue order, waiting on the key just before
//!   one's own from the current revision, undo).
//! - `driver`: etcd's side of the queue recipe shared with ZooKeeper (`super::queue`).
//! - `ops`: releases, status, forced unlocks.
//! - `audit`: holdings whose key was deleted behind the client's back (a forced unlock).
//! - `super::holdings`: re-entry, counted in the client per (lock, owner) (shared with
//!   ZooKeeper).
//!
//! The fencing token is the lock key's create revision: etcd's revision strictly increases
//! across the cluster's whole history, so a later holding has a larger token, whoever holds.

use std::sync::Arc;
use std::time::Duration;

use self::driver::{Attempt, Queue};
use self::recipe::Entry;
use self::session::{Fault, Session};
use self::slots::{Slot, Slots};
use super::current::{Current, Ends};
use super::holdings::{self, Holdings, Sessioned};
use super::queue::{self, rule::First};
use super::{
    Acquired, Connected, Connecting, Ctx, Held, LockRequest, LockService, RawStatus, Released, Wait,
};
use crate::background::Background;
use crate::error::{Error, InputError, Warning};
use crate::lease::LeaseState;
use crate::name::LockName;
use crate::options::{ClientOptions, LockOptions};
use crate::watchdog::BoxFuture;

mod audit;
mod driver;
mod ops;
mod recipe;
mod session;
mod slots;
mod url;

/// The service's name in errors.
const SERVICE: &str = "etcd";

/// The etcd lock service of one client.
pub(crate) struct Etcd {
    /// The current lease with its holdings, replaced by a new one once it has ended.
    current: Current<Inner>,
}

/// What background work needs of the service.
struct Inner {
    session: Arc<Session>,
    holdings: Holdings,
    /// The client's background task: deletes that must go on after a failed release.
    background: Background,
    slots: Slots,
    prefix: String,
}

impl Etcd {
    /// Connects and grants the client's lease. Checks the URL (and that a password has a
    /// user to go with) before any I/O.
    pub(crate) async fn connect(
        url: &str,
        options: &ClientOptions,
        background: &Background,
    ) -> Result<(Self, Vec<Warning>), Error> {
        let target = url::parse_target(url)?;
        if options.password.is_some() && target.user.is_none() {
            return Err(InputError::InvalidUrl {
                url: crate::redact_url(url),
                reason: "a password (ClientOptions::password, FENCELOCK_PASSWORD) needs the etcd \
                         user in the URL: etcd://user@host:port"
                    .into(),
            }
            .into());
        }
        let (current, warnings) = Current::open(target, options, background).await?;
        Ok((Self { current }, warnings))
    }

    /// The current lease, or a new one if it has ended (expired or revoked).
    async fn inner(&self) -> Result<Arc<Inner>, Error> {
        self.current.live().await
    }
}

/// The lease ends with the last handle on what lives in it (also one that was opened and
/// then given up, e.g. by a dropped future): its background work would otherwise keep it
/// alive.
impl Drop for Inner {
    fn drop(&mut self) {
        self.end_lease();
    }
}

impl Inner {
    /// Stops the lease's keep-alives and revokes it, as tracked work of the client's
    /// background task: `Client::close` waits for it.
    fn end_lease(&self) {
        if let Some(revoke) = self.session.stop() {
            self.background.finish(revoke);
        }
    }
}

impl Ends for Inner {
    type Target = url::EtcdTarget;
    const WHAT: &'static str = "etcd lease";

    /// Grants a lease and starts the audit of its holdings.
    async fn open(
        target: &url::EtcdTarget,
        options: &ClientOptions,
        background: &Background,
    ) -> Result<(Arc<Self>, Vec<Warning>), Error> {
        let (session, warnings) = Session::connect(target, options).await?;
        let inner = Arc::new(Inner {
            session,
            holdings: Holdings::default(),
            background: background.clone(),
            slots: Slots::default(),
            prefix: target.prefix.clone(),
        });
        tokio::spawn(audit::audit(Arc::downgrade(&inner)));
        Ok((inner, warnings))
    }

    fn id(&self) -> i64 {
        self.session.lease
    }

    fn has_ended(&self) -> bool {
        self.session.ended.is_cancelled()
    }

    fn stop(&self) {
        self.end_lease();
    }
}

impl Inner {
    /// An etcd failure as fencelock's error.
    pub(super) fn fail(&self, lock: Option<&str>, fault: Fault) -> Error {
        let (lock, server) = (lock.map(str::to_owned), self.session.server.clone());
        match fault {
            Fault::Malformed(_) => Error::Protocol {
                lock,
                server,
                detail: format!("etcd: {fault}"),
            },
            Fault::Etcd(ref e) if session::denied(e) => Error::Denied {
                lock,
                server,
                detail: format!("etcd: {fault}"),
            },
            Fault::Etcd(etcd_client::Error::GRpcStatus(ref s)) if !fault.transient() => {
                Error::Protocol {
                    lock,
                    server,
                    detail: format!("etcd answered: {}", s.message()),
                }
            }
            fault => Error::Unavailable {
                lock,
                server,
                detail: format!("etcd: {fault}"),
            },
        }
    }

    /// Before a new attempt: the lease must still be usable.
    fn alive(&self, lock: &str) -> Result<(), Error> {
        if self.session.ended.is_cancelled() {
            return Err(self.fail(Some(lock), Fault::Ended));
        }
        Ok(())
    }

    async fn acquire(
        self: &Arc<Self>,
        ctx: &Ctx,
        request: &LockRequest<'_>,
        wait: Wait,
    ) -> Result<Acquired, Error> {
        let name = &request.lock.name;
        let started = self.holdings.start(
            self.session.is_live(),
            self.alive(name),
            request,
            |token| self.lease(ctx, request, token),
            || self.unheard(name),
        );
        if let Some(held) = started? {
            return Ok(Acquired::Held(held));
        }
        // An owner of this client waits here for another's holding to end; if the lease ends
        // first, that holding's slot is never freed in this lease: stop waiting then.
        let slot = tokio::select! {
            slot = self.slots.take(name, wait) => slot,
            () = self.session.ended.cancelled() => return Err(self.fail(Some(name), Fault::Ended)),
        };
        let Some(slot) = slot else {
            return wait.not_acquired(name);
        };
        let attempt = Attempt {
            key: recipe::key(&self.prefix, name, self.session.lease),
            revision: None,
            slot: Some(slot),
        };
        let queue = Queue {
            inner: self,
            request,
            dir: recipe::dir(&self.prefix, name),
        };
        match queue::take(&queue, &First, attempt, wait).await? {
            Some(mut held) => {
                let (key, slot) = (std::mem::take(&mut held.key), held.slot.take());
                let revision = held.revision.unwrap_or_default();
                Ok(Acquired::Held(
                    self.held(ctx, request, key, revision, slot)?,
                ))
            }
            None => wait.not_acquired(name),
        }
    }

    /// The refusal of an owner that holds the lock while no keep-alive was answered within
    /// the lease TTL (see `Holdings::start`).
    fn unheard(&self, name: &str) -> Error {
        Error::Unavailable {
            lock: Some(name.to_owned()),
            server: self.session.server.clone(),
            detail: "no etcd keep-alive answered within the lease TTL; the lease (and this \
                     owner's holding) may have expired"
                .into(),
        }
    }

    /// Refuses to queue behind a holding of the same owner id under another lease: a second
    /// process cannot re-enter (own) another client's key.
    pub(super) fn foreign(&self, owner: &str, holder: &Entry) -> Result<(), Error> {
        if holder.owner == owner && holder.lease != self.session.lease {
            return Err(Error::Unsupported {
                service: SERVICE,
                what: "re-entry by an owner id that another etcd client holds",
                why: "an etcd lock is a key under one client's lease; re-entry is counted in \
                      the client that holds it (Lock::with_owner works across processes on \
                      Redis only)",
            });
        }
        Ok(())
    }

    /// A hold's lease: the client lease's TTL and deadline, never renewed by the watchdog.
    fn lease(&self, ctx: &Ctx, request: &LockRequest<'_>, token: u64) -> Arc<LeaseState> {
        let times = (self.session.ttl, self.session.deadline());
        let lease = holdings::session_lease(ctx, request, times, token);
        self.session.register(&lease);
        lease
    }

    /// The attempt's key is the lowest: a new holding, which keeps the client's slot for the
    /// lock (`audit` finds it if its key is deleted behind the client's back).
    fn held(
        self: &Arc<Self>,
        ctx: &Ctx,
        request: &LockRequest<'_>,
        key: String,
        revision: i64,
        slot: Option<Slot>,
    ) -> Result<Held, Error> {
        let name = &request.lock.name;
        let token = u64::try_from(revision)
            .ok()
            .filter(|t| *t > 0)
            .ok_or_else(|| Error::Protocol {
                lock: Some(name.clone()),
                server: self.session.server.clone(),
                detail: format!("the lock key's create revision {revision} is not a revision"),
            })?;
        let lease = self.lease(ctx, request, token);
        self.holdings
            .insert(name, request.owner, key.clone(), &lease);
        self.slots.keep(name, slot);
        Ok(Held { lease, count: 1 })
    }
}

/// Connects etcd (its registry line): one URL that lists the servers.
pub(crate) fn connect(c: Connecting<'_>) -> BoxFuture<'_, Result<Connected, Error>> {
    Box::pin(async move {
        let (etcd, warnings) = Etcd::connect(c.url(), c.options, c.background).await?;
        Ok((Arc::new(etcd) as Arc<dyn LockService>, warnings))
    })
}

impl LockService for Etcd {
    fn name(&self) -> &'static str {
        SERVICE
    }

    fn server(&self) -> String {
        self.current.now().session.server.clone()
    }

    /// A lock name must be one key segment below the prefix.
    fn check_name(&self, name: &str) -> Result<(), InputError> {
        url::check_name(name)
    }

    /// Options that mean nothing here are refused: the client's lease is the lock's.
    fn check(&self, options: &LockOptions, _lease: Duration) -> Result<(), InputError> {
        holdings::refuse_per_lock_options(
            options,
            "a Redis option; etcd answers a write only after a quorum of the cluster logged it",
            "etcd locks last as long as the client's lease; set its TTL with \
             ClientOptions::default_lease instead",
        )
    }

    fn acquire<'a>(
        &'a self,
        ctx: &'a Ctx,
        request: &'a LockRequest<'a>,
        wait: Wait,
    ) -> BoxFuture<'a, Result<Acquired, Error>> {
        Box::pin(async move { self.inner().await?.acquire(ctx, request, wait).await })
    }

    fn release<'a>(
        &'a self,
        _ctx: &'a Ctx,
        lease: &'a Arc<LeaseState>,
    ) -> BoxFuture<'a, Result<Released, Error>> {
        Box::pin(async move {
            // A hold of an ended lease is in no later lease's holdings: `NotHeld`.
            let hold = &lease.hold;
            self.current
                .now()
                .give_back(&hold.lock.name, &hold.owner, Some(hold.id))
                .await
        })
    }

    fn release_owner<'a>(
        &'a self,
        lock: &'a Arc<LockName>,
        owner: &'a Arc<str>,
    ) -> BoxFuture<'a, Result<Released, Error>> {
        Box::pin(async move { self.inner().await?.release_owner(&lock.name, owner).await })
    }

    fn status<'a>(&'a self, lock: &'a Arc<LockName>) -> BoxFuture<'a, Result<RawStatus, Error>> {
        Box::pin(async move { self.inner().await?.status(&lock.name).await })
    }

    fn force_unlock<'a>(
        &'a self,
        lock: &'a Arc<LockName>,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, Error>> {
        Box::pin(async move { self.inner().await?.force_unlock(&lock.name).await })
    }
}
