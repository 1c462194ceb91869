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
//! - `ops`: a holding's key deleted, the lock's keys for status, release by owner and forced
//!   unlocks, the holder's remaining TTL.
//! - `audit`: holdings whose key was deleted behind the client's back (a forced unlock).
//! - `elect`: elections in `concurrency.Election`'s layout (`<prefix>/<name>/<lease hex>`,
//!   the value as the key's value, the lowest create revision leads and is the term): the
//!   leader, a leader's new value (guarded by its create revision), the follower behind
//!   `Election::observe`. A campaign is an attempt through the same queue and the same slot
//!   as a mutex's (one key per name per lease); the name's stored kind tells them apart
//!   (`etcdctl lock NAME` and `etcdctl elect NAME`, which store none, join either).
//! - read-write locks (here, `rw_attempt`) in the layout of etcd's `recipes.RWMutex`:
//!   `<prefix>/<name>/read/<unique>` and `.../write/<unique>` under the lease, one key per
//!   attempt (no slot), in create-revision order; a reader holds when no writer key is ahead
//!   of its own, a writer when no key is (as `RWMutex.RLock`/`Lock` look: the last write
//!   key, the last key, below their own revision). Re-entry is counted in the client; an
//!   owner holding only the read side is refused the write side (`Error::UpgradeRefused`).
//!   A downgrade (write, then read) holds at once with the write key as its own: the key
//!   stays until both sides are given back, so no writer queued meanwhile gets in; readers
//!   queued meanwhile wait for it too (etcd cannot put a key at an older revision: the
//!   price of the downgrade here, where ZooKeeper's read node takes the write node's place).
//! - semaphores (here, `permit`): `<prefix>/<name>/permit/<lease hex>-<unique>` under the
//!   lease, one key per permit, in create-revision order; a permit holds when fewer than N
//!   keys are ahead of its own, and waits (a watch of the range's deletions, and one of N's
//!   key) for any key ahead to go or for N to change. N is the value of the key
//!   `<prefix>/<name>` (beside the range, without a lease), checked or stored in the
//!   transaction that puts the permit's key (another N is refused, `Error::PermitsMismatch`,
//!   unless it resizes) and deleted in the one that deletes the range's last key. Waiters
//!   read N again at each look: a lowered N revokes nothing, a waiter holds once fewer than
//!   the new N keys are ahead. Status counts the first N keys as holders (a permit granted
//!   under a larger N shows as a waiter after a resize); a forced unlock deletes them all.
//! - one name, one primitive: the key `<prefix>/<name>` stores the name's kind (`mutex`,
//!   `election`, `read-write lock`, a semaphore's N), checked or stored in the transaction
//!   that puts an attempt's key and deleted with the range's last key (`recipe::Claim`,
//!   `recipe::leave`): an attempt of another kind puts nothing and fails with
//!   `Error::PrimitiveMismatch`. A key of another primitive ahead of an attempt's own
//!   (`etcdctl`'s, which store no kind) ends it the same way (`driver`).
//! - here: the lease (`Inner`) as a `super::session_service::SessionLocks`, which the shared
//!   `SessionService` (the `LockService` of ZooKeeper and etcd) runs every operation in.
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
use super::current::{Ends, Opening};
use super::holdings::Closing;
use super::holdings::Side;
use super::queue;
use super::queue::recipe::{Primitive, Recipe};
use super::session_holds::SessionHolds;
use super::session_service::{Ask, Failure, Listed, Service, SessionLocks, SessionService};
use super::{Acquired, Connected, Connecting, Ctx, Feed, Held, LockRequest, Released};
use crate::background::Background;
use crate::error::{Error, InputError, Warning};
use crate::watchdog::BoxFuture;

mod audit;
mod driver;
mod elect;
mod ops;
mod recipe;
mod session;
mod slots;
mod url;

/// What background work needs of the service.
struct Inner {
    session: Arc<Session>,
    /// The client's background task: deletes that must go on after a failed release.
    background: Background,
    slots: Slots,
    prefix: String,
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
    async fn open(at: &Opening<url::EtcdTarget>) -> Result<(Arc<Self>, Vec<Warning>), Error> {
        let (session, warnings) = Session::connect(&at.target, &at.options).await?;
        let inner = Arc::new(Inner {
            session,
            background: at.background.clone(),
            slots: Slots::default(),
            prefix: at.target.prefix.clone(),
        });
        tokio::spawn(audit::audit(Arc::downgrade(&inner)));
        Ok((inner, warnings))
    }

    fn id(&self) -> i64 {
        self.session.lease
    }

    fn has_ended(&self) -> bool {
        self.session.holds.ended.is_cancelled()
    }

    fn stop(&self) {
        self.end_lease();
    }
}

impl SessionLocks for Inner {
    type Fault = Fault;
    /// Its words say that the client's lease is the lease of every lock it holds.
    const SERVICE: Service = Service {
        name: "etcd",
        // A lock name must be one key segment below the prefix.
        check_name: url::check_name,
        quorum: "a Redis option; etcd answers a write only after a quorum of the cluster logged it",
        session: "etcd locks last as long as the client's lease; set its TTL with \
                  ClientOptions::default_lease instead",
        ended: "etcd: the client's lease expired or was revoked",
        unheard: "no etcd keep-alive answered within the lease TTL; the lease (and this \
                  owner's holding) may have expired",
        held_elsewhere: "releasing a lock that another etcd client holds",
        only_its_client: "the lock is a key under the holder's lease; only that client \
                          releases it (or Client::force_unlock deletes it)",
        rw_lock: true,
        semaphore: true,
    };

    fn server(&self) -> String {
        self.session.server.clone()
    }

    fn holds(&self) -> &SessionHolds {
        &self.session.holds
    }

    /// An etcd failure: the credentials refused, or an answer that trying again would not
    /// change, or else unavailable.
    fn failure(fault: Fault) -> (Failure, String) {
        match fault {
            Fault::Malformed(_) => (Failure::Protocol, format!("etcd: {fault}")),
            Fault::Etcd(ref e) if session::denied(e) => (Failure::Denied, format!("etcd: {fault}")),
            Fault::Etcd(etcd_client::Error::GRpcStatus(ref s)) if !fault.transient() => {
                (Failure::Protocol, format!("etcd answered: {}", s.message()))
            }
            fault => (Failure::Unavailable, format!("etcd: {fault}")),
        }
    }

    /// A downgrade holds at once with the write key as its own (see the module); a mutex's
    /// and an election's attempt takes the client's slot for the lock first (one key per
    /// name per lease), then the key; the others put a key of their own.
    async fn attempt(self: &Arc<Self>, ask: Ask<'_>) -> Result<Acquired, Error> {
        let Ask {
            ctx,
            request,
            recipe,
            wait,
        } = ask;
        let name = &request.lock.name;
        if recipe.downgrades {
            let holdings = &self.session.holds.holdings;
            if let Some((key, token)) = holdings.path(name, request.owner, Side::One) {
                let lease = self.hold(ctx, request, key, token);
                return Ok(Acquired::Held(Held { lease, count: 1 }));
            }
        }
        let slot = match recipe.alone() {
            // An owner of this client waits here for another's holding to end; if the lease
            // ends first, that holding's slot is never freed in this lease: stop waiting then.
            true => match tokio::select! {
                slot = self.slots.take(name, wait) => slot,
                () = self.session.holds.ended.cancelled() => return Err(self.fail(Some(name), Fault::Ended)),
            } {
                Some(slot) => Some(slot),
                None => return wait.not_acquired(name),
            },
            false => None,
        };
        let attempt = Attempt {
            key: self.key_of(name, recipe),
            revision: None,
            slot,
        };
        let queue = Queue {
            inner: self,
            request,
            recipe,
            dir: recipe::dir(&self.prefix, name),
            refused: Default::default(),
            seen: Default::default(),
        };
        match queue::take(&queue, &recipe.holds, attempt, wait).await? {
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

    async fn delete_holding(self: Arc<Self>, closing: Closing) -> Result<Released, Fault> {
        self.delete_entry(&closing).await
    }

    async fn queue(&self, name: &str) -> Result<Vec<Listed>, Error> {
        self.listed(name).await
    }

    async fn leader(&self, name: &str) -> Result<Option<Listed>, Error> {
        let leader = self.leader_entry(name).await;
        leader.map_err(|e| self.fail(Some(name), e))
    }

    async fn proclaim(&self, key: &str, token: u64, value: &str) -> Result<bool, Fault> {
        self.set_value(key, token, value).await
    }

    fn observe(self: &Arc<Self>, name: &str) -> Feed {
        self.follow(name)
    }

    /// That revision only (and the name's kind with the last key).
    async fn delete_head(&self, head: &Listed) -> Result<bool, Fault> {
        let (dir, kind) = self.range_of(&head.path);
        recipe::leave(&self.session, &dir, &kind, &head.path, Some(head.token)).await
    }

    async fn remaining(&self, head: &Listed) -> Option<Duration> {
        self.ttl_left(head.session).await
    }

    /// A semaphore: its permits granted under a larger N look like waiters once N is
    /// lowered, so every permit key goes (and N with the last).
    fn unlock_all(queue: &[Listed]) -> bool {
        queue.iter().any(|e| e.path.contains("/permit/"))
    }

    /// Keys of other clients (`etcdctl lock`) store no owner id: their lease stands for it.
    fn shown(entry: &Listed) -> String {
        recipe::owner_or_lease(&entry.owner, entry.session)
    }
}

impl Inner {
    /// The key an attempt of `recipe` puts: the layout table from primitive to key
    /// (`concurrency`'s lease-named key, `recipes.RWMutex`'s `read/` and `write/`, `permit/`).
    fn key_of(&self, name: &str, recipe: &Recipe<'_>) -> String {
        let lease = self.session.lease;
        match recipe.primitive {
            Primitive::Mutex | Primitive::Election => recipe::key(&self.prefix, name, lease),
            Primitive::RwLock => recipe::rw_key(&self.prefix, name, !recipe.reader, lease),
            Primitive::Semaphore => recipe::permit_key(&self.prefix, name, lease),
        }
    }

    /// The range of lock key `key` and the key that stores its name's kind.
    pub(super) fn range_of(&self, key: &str) -> (String, String) {
        let name = key
            .strip_prefix(&self.prefix)
            .and_then(|k| k.strip_prefix('/'))
            .and_then(|k| k.split('/').next())
            .unwrap_or_default();
        (
            recipe::dir(&self.prefix, name),
            recipe::permits_key(&self.prefix, name),
        )
    }

    /// Refuses to queue behind a holding of the same owner id under another lease: a second
    /// process cannot re-enter (own) another client's key.
    pub(super) fn foreign(&self, owner: &str, holder: &Entry) -> Result<(), Error> {
        if holder.owner == owner && holder.lease != self.session.lease {
            return Err(Error::Unsupported {
                service: Self::SERVICE.name,
                what: "re-entry by an owner id that another etcd client holds",
                why: "an etcd lock is a key under one client's lease; re-entry is counted in \
                      the client that holds it (Lock::with_owner works across processes on \
                      Redis only)",
            });
        }
        Ok(())
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
        let lease = self.hold(ctx, request, key, token);
        self.slots.keep(name, slot);
        Ok(Held { lease, count: 1 })
    }
}

/// Connects etcd (its registry line): one URL that lists the servers. Checks the URL (and
/// that a password has a user to go with) before any I/O, then grants the client's lease.
pub(crate) fn connect(c: Connecting<'_>) -> BoxFuture<'_, Result<Connected, Error>> {
    Box::pin(async move {
        let target = url::parse_target(c.url())?;
        if c.options.password.is_some() && target.user.is_none() {
            return Err(InputError::InvalidUrl {
                url: crate::redact_url(c.url()),
                reason: "a password (ClientOptions::password, FENCELOCK_PASSWORD) needs the etcd \
                         user in the URL: etcd://user@host:port"
                    .into(),
            }
            .into());
        }
        SessionService::<Inner>::connect(target, c.options, c.background).await
    })
}
