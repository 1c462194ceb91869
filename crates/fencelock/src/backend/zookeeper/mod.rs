//! ZooKeeper as a lock service (`zk://host:port[,host:port...][/base/path]`), with Apache
//! Curator's `InterProcessMutex` layout, so that fencelock and Curator exclude each other.
//!
//! - `url`: the URL and the lock-name rules (a name is one node below the base path).
//! - `session`: the client's one session, which is the lease of every lock it holds: when
//!   the server was last heard from, probes, the lost-lock signal on expiry.
//! - `recipe`: the nodes (protected creation by GUID, the queue order, waiting on the node
//!   just before one's own, undo).
//! - `super::holdings`: re-entry, counted in the client per (lock, owner) (shared with etcd).
//!
//! The fencing token is the lock node's creation zxid (`czxid`): ZooKeeper's transaction ids
//! strictly increase across the ensemble's whole history, so a later holding has a larger
//! token even when the lock's folder was deleted and created again.

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client as zk;

use self::recipe::{Node, Place};
use self::session::Session;
use super::holdings::Holdings;
use super::{Acquired, Ctx, Held, LockRequest, RawStatus, Released, Wait};
use crate::background::Background;
use crate::error::{Error, InputError};
use crate::lease::{Hold, LeaseState, Renewal};
use crate::name::LockKeys;
use crate::options::{ClientOptions, LockOptions};
use crate::watchdog::Renewals;

mod ops;
mod recipe;
mod session;
mod url;

/// How long a waiter pauses before asking again after a connection loss.
const RETRY: Duration = Duration::from_millis(100);

/// The service's name in errors.
const SERVICE: &str = "ZooKeeper";

/// The ZooKeeper lock service of one client.
pub(crate) struct ZooKeeper {
    inner: Arc<Inner>,
}

/// What background work needs of the service.
struct Inner {
    session: Arc<Session>,
    holdings: Holdings,
    base: String,
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        self.inner.session.stop();
    }
}

impl ZooKeeper {
    /// Opens the client's session and makes sure the base path exists.
    pub(crate) async fn connect(
        url: &str,
        options: &ClientOptions,
    ) -> Result<(Self, Vec<String>), Error> {
        let target = url::parse_target(url)?;
        let (session, warnings) = Session::connect(&target.hosts, options).await?;
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let made = session.call(|zk| zk.mkdir(&target.base, &persistent)).await;
        let inner = Inner {
            session,
            holdings: Holdings::default(),
            base: target.base,
        };
        if let Err(e) = made {
            inner.session.stop();
            return Err(inner.fail(None, e));
        }
        Ok((
            Self {
                inner: Arc::new(inner),
            },
            warnings,
        ))
    }

    pub(crate) fn server(&self) -> String {
        self.inner.session.server.clone()
    }

    /// Options that mean nothing here are refused: the session is the lease.
    pub(crate) fn check(&self, options: &LockOptions, _lease: Duration) -> Result<(), InputError> {
        if options.replica_acks.is_some() {
            return Err(InputError::InvalidOption {
                option: "min_replica_acks",
                reason: "a Redis option; ZooKeeper answers a write only after a quorum of the \
                         ensemble logged it",
            });
        }
        if options.lease.is_some() {
            return Err(InputError::InvalidOption {
                option: "lease",
                reason: "ZooKeeper locks last as long as the client's session; set the session \
                         timeout with ClientOptions::default_lease instead",
            });
        }
        Ok(())
    }

    pub(crate) async fn acquire(
        &self,
        ctx: &Ctx,
        request: &LockRequest<'_>,
        wait: Wait,
    ) -> Result<Acquired, Error> {
        self.inner.acquire(ctx, request, wait).await
    }

    pub(crate) async fn release(
        &self,
        _ctx: &Ctx,
        lease: &Arc<LeaseState>,
    ) -> Result<Released, Error> {
        let hold = &lease.hold;
        let inner = &self.inner;
        inner
            .give_back(&hold.keys.name, &hold.owner, Some(hold.id))
            .await
    }

    /// [`ZooKeeper::release`] in the background (a guard dropped without `release`).
    pub(crate) fn release_later(&self, ctx: &Ctx, lease: &Arc<LeaseState>) {
        let (inner, lease, background) =
            (self.inner.clone(), lease.clone(), ctx.background.clone());
        ctx.background.finish(async move {
            let hold = &lease.hold;
            let given = inner.give_back(&hold.keys.name, &hold.owner, Some(hold.id)).await;
            if let Err(e) = given {
                background.failed();
                tracing::warn!(lock = %hold.keys.name, error = %e, "background release failed; the node goes with the session");
            }
        });
    }

    pub(crate) async fn release_owner(
        &self,
        keys: &Arc<LockKeys>,
        owner: &Arc<str>,
    ) -> Result<Released, Error> {
        self.inner.release_owner(&keys.name, owner).await
    }

    pub(crate) fn extend(&self) -> Result<Renewal, Error> {
        Err(Error::Unsupported {
            service: SERVICE,
            what: "Guard::extend",
            why: "a ZooKeeper lock lasts as long as the client's session, which the client \
                  keeps alive by itself; there is no lease per lock to extend",
        })
    }

    pub(crate) fn renew(&self) -> Renewals {
        Err(Error::Unsupported {
            service: SERVICE,
            what: "renewing a lease",
            why: "ZooKeeper locks are kept alive by the client's session",
        })
    }

    pub(crate) async fn status(&self, keys: &Arc<LockKeys>) -> Result<RawStatus, Error> {
        self.inner.status(&keys.name).await
    }

    pub(crate) async fn force_unlock(
        &self,
        keys: &Arc<LockKeys>,
    ) -> Result<Vec<(String, u64)>, Error> {
        self.inner.force_unlock(&keys.name).await
    }
}

/// An attempt's node until it holds the lock or is removed: dropped while armed (a cancelled
/// acquire), it is removed in the background.
struct Attempt {
    session: Arc<Session>,
    background: Background,
    dir: String,
    guid: String,
    node: Option<String>,
    armed: bool,
}

impl Attempt {
    /// Removes the attempt's node now; if that fails, it stays armed for the background.
    async fn undo(&mut self) {
        let undone = recipe::undo(&self.session, &self.dir, &self.guid, self.node.as_deref()).await;
        self.armed = undone.is_err();
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (session, background) = (self.session.clone(), self.background.clone());
        let (dir, guid, node) = (self.dir.clone(), self.guid.clone(), self.node.take());
        self.background.finish(async move {
            if let Err(e) = recipe::undo(&session, &dir, &guid, node.as_deref()).await {
                background.failed();
                tracing::warn!(dir, error = %e, "undo of a given-up attempt failed; its node goes with the session");
            }
        });
    }
}

impl Inner {
    /// The lock's folder.
    fn dir(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }

    /// A ZooKeeper failure as fencelock's error.
    fn fail(&self, lock: Option<&str>, e: zk::Error) -> Error {
        use zk::Error::*;
        let (lock, server) = (lock.map(str::to_owned), self.session.server.clone());
        match e {
            ConnectionLoss | Timeout | NoHosts | SessionExpired | ClientClosed | SessionMoved => {
                Error::Unavailable {
                    lock,
                    server,
                    detail: format!("ZooKeeper: {e}"),
                }
            }
            e => Error::Protocol {
                lock,
                server,
                detail: format!("ZooKeeper answered: {e}"),
            },
        }
    }

    /// Before a new attempt: the session must still be usable.
    fn alive(&self, lock: &str) -> Result<(), Error> {
        if self.session.ended.is_cancelled() {
            return Err(Error::Unavailable {
                lock: Some(lock.to_owned()),
                server: self.session.server.clone(),
                detail: "the ZooKeeper session expired or was closed; connect a new client".into(),
            });
        }
        Ok(())
    }

    async fn acquire(
        self: &Arc<Self>,
        ctx: &Ctx,
        request: &LockRequest<'_>,
        wait: Wait,
    ) -> Result<Acquired, Error> {
        let name = &request.keys.name;
        url::check_name(name)?;
        if self.session.is_live() {
            let made = |token| {
                let lease = self.lease(ctx, request, token);
                (lease.hold.id, lease)
            };
            if let Some((lease, count)) = self.holdings.reenter(name, request.owner, made) {
                return Ok(Acquired::Held(Held { lease, count }));
            }
        }
        self.alive(name)?;
        if self.holdings.holds(name, request.owner) {
            // Held, but the server has not been heard from for the session timeout: the
            // holding may be gone, and a second node of this owner would queue behind it.
            return Err(Error::Unavailable {
                lock: Some(name.clone()),
                server: self.session.server.clone(),
                detail: "not heard from ZooKeeper within the session timeout; the session \
                         (and this owner's holding) may have expired"
                    .into(),
            });
        }
        let mut attempt = Attempt {
            session: self.session.clone(),
            background: ctx.background.clone(),
            dir: self.dir(name),
            guid: recipe::guid(),
            node: None,
            armed: true,
        };
        let deadline = match wait {
            Wait::Until(Some((at, _))) => Some(at),
            _ => None,
        };
        match self.contend(&mut attempt, request, wait, deadline).await {
            Ok(Some(node)) => {
                attempt.armed = false;
                Ok(Acquired::Held(self.held(ctx, request, node)?))
            }
            Ok(None) => {
                attempt.undo().await;
                match wait {
                    Wait::Until(Some((_, waited))) => Err(Error::Timeout {
                        lock: name.clone(),
                        waited,
                    }),
                    _ => Ok(Acquired::Busy { remaining: None }),
                }
            }
            Err(e) => {
                attempt.undo().await;
                Err(e)
            }
        }
    }

    /// Creates the attempt's node and waits for its turn: the node once it is the lowest, or
    /// `None` when busy (no waiting) or past the deadline.
    async fn contend(
        &self,
        attempt: &mut Attempt,
        request: &LockRequest<'_>,
        wait: Wait,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Option<Node>, Error> {
        let (name, owner) = (&request.keys.name, request.owner);
        let fail = |e| self.fail(Some(name), e);
        let (session, dir) = (&self.session, &attempt.dir);
        let node = recipe::create(session, dir, &attempt.guid, owner)
            .await
            .map_err(fail)?;
        attempt.node = Some(node.path.clone());
        let mut checked = false;
        // A waiter outlives a connection loss: its node stays while the session does.
        let waits = matches!(wait, Wait::Until(_));
        let transient = |e: &zk::Error| {
            waits
                && matches!(e, zk::Error::ConnectionLoss | zk::Error::Timeout)
                && !session.ended.is_cancelled()
                && deadline.is_none_or(|at| tokio::time::Instant::now() < at)
        };
        loop {
            let placed = match recipe::place(session, dir, &node).await {
                Err(e) if transient(&e) => {
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
                placed => placed.map_err(fail)?,
            };
            let (holder, before) = match placed {
                Some(Place::Holder) => return Ok(Some(node)),
                Some(Place::Behind { holder, before }) => (holder, before),
                None => {
                    return Err(Error::Unavailable {
                        lock: Some(name.clone()),
                        server: session.server.clone(),
                        detail: "the attempt's node vanished while it waited (session lost?)"
                            .into(),
                    })
                }
            };
            if !checked {
                match self.foreign(name, owner, &holder).await {
                    // The check's read timed out (a paused server): like any read of a
                    // waiter, it is tried again while the session lives.
                    Err(Error::Unavailable { .. }) if transient(&zk::Error::Timeout) => {
                        tokio::time::sleep(RETRY).await;
                        continue;
                    }
                    checked_now => checked_now?,
                }
                checked = true;
            }
            if matches!(wait, Wait::No) {
                return Ok(None);
            }
            match recipe::wait_for(session, &before, deadline).await {
                Ok(true) => {}
                Ok(false) => return Ok(None),
                Err(e) if transient(&e) => tokio::time::sleep(RETRY).await,
                Err(e) => return Err(fail(e)),
            }
        }
    }

    /// Refuses to queue behind a holding of the same owner id in another session: a second
    /// process cannot re-enter (own) another session's node.
    async fn foreign(&self, name: &str, owner: &str, holder: &str) -> Result<(), Error> {
        let session = &self.session;
        match session.call(|zk| zk.get_data(holder)).await {
            Ok((data, stat)) if data == owner.as_bytes() && stat.ephemeral_owner != session.id => {
                Err(Error::Unsupported {
                    service: SERVICE,
                    what: "re-entry by an owner id that another ZooKeeper session holds",
                    why: "a ZooKeeper lock is an ephemeral node owned by one session; re-entry \
                          is counted in the client that holds it (Lock::with_owner works \
                          across processes on Redis only)",
                })
            }
            Ok(_) | Err(zk::Error::NoNode) => Ok(()),
            Err(e) => Err(self.fail(Some(name), e)),
        }
    }

    /// A hold's lease: the session's timeout and deadline, never renewed by the watchdog.
    fn lease(&self, ctx: &Ctx, request: &LockRequest<'_>, token: u64) -> Arc<LeaseState> {
        let hold = Hold {
            keys: request.keys.clone(),
            owner: request.owner.clone(),
            lease: self.session.timeout,
            renew: false,
            id: rand::random(),
            token,
        };
        let deadline = self.session.deadline();
        let lease = Arc::new(LeaseState::new(hold, deadline, deadline));
        ctx.watchdog.track(&lease);
        self.session.register(&lease);
        lease
    }

    /// The attempt's node is the lowest: a new holding, watched for a forced delete.
    fn held(
        self: &Arc<Self>,
        ctx: &Ctx,
        request: &LockRequest<'_>,
        node: Node,
    ) -> Result<Held, Error> {
        let name = &request.keys.name;
        let token = u64::try_from(node.czxid).map_err(|_| Error::Protocol {
            lock: Some(name.clone()),
            server: self.session.server.clone(),
            detail: format!("the lock node's czxid {} is not a zxid", node.czxid),
        })?;
        let lease = self.lease(ctx, request, token);
        self.holdings
            .insert(name, request.owner, node.path.clone(), &lease);
        self.watch(ctx, name, request.owner, node.path);
        Ok(Held { lease, count: 1 })
    }

    /// Fires the holding's lost signals when its node is deleted by someone else.
    fn watch(self: &Arc<Self>, ctx: &Ctx, name: &str, owner: &Arc<str>, path: String) {
        let (session, me) = (self.session.clone(), self.clone());
        let (name, owner) = (name.to_owned(), owner.clone());
        ctx.background.linger(async move {
            let gone = match session.call(|zk| zk.get_and_watch_data(&path)).await {
                Ok((_, _, watcher)) => {
                    watcher.changed().await.event_type == zk::EventType::NodeDeleted
                }
                Err(zk::Error::NoNode) => true,
                Err(_) => false,
            };
            if gone {
                me.holdings.vanished(&name, &owner, &path);
            }
        });
    }
}
