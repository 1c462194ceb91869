//! ZooKeeper as a lock service (`zk://host:port[,host:port...][/base/path]`), with Apache
//! Curator's `InterProcessMutex` layout, so that fencelock and Curator exclude each other.
//!
//! - `url`: the URL and the lock-name rules (a name is one node below the base path).
//! - `session`: the client's one session, which is the lease of every lock it holds: when
//!   the server was last heard from, probes, the lost-lock signal on expiry.
//! - `recipe`: the nodes (protected creation by GUID, the queue order, waiting on the node
//!   just before one's own, undo).
//! - `driver`: ZooKeeper's side of the queue recipe shared with etcd (`super::queue`).
//! - `quiet`: the uncontended fast path: folders whose last holding by this client was alone,
//!   and the watch proving nobody touched them since (an acquire then skips the listing).
//! - `ops`: a holding's node deleted, the lock's children for status, release by owner and
//!   forced unlocks.
//! - `semaphore`: semaphores in Curator's `InterProcessSemaphoreV2` layout (`locks/` and
//!   `leases/`, N as the folder's data), interoperable with it.
//! - `elect`: elections in Curator's `LeaderLatch` layout (`_c_<guid>-latch-<seq>`, the value
//!   as data, the lowest leads, the term is its `czxid`): the leader, a leader's new value,
//!   the follower behind `Election::observe`. A campaign is an attempt of its own kind through
//!   the same queue (`driver`); a name used as a mutex and as an election at once fails the
//!   attempt that finds the other kind ahead (`Error::PrimitiveMismatch`).
//! - read-write locks (`recipe`, `driver`, here): Curator's `InterProcessReadWriteLock`
//!   nodes, `_c_<guid>-__READ__<seq>` and `_c_<guid>-__WRIT__<seq>` in the lock's folder, one
//!   queue sorted by sequence across both kinds: a reader holds when no writer node is
//!   before its own (it watches the last one), a writer when its node is first. Each reader
//!   has its node, its `czxid` token and its place; re-entry is counted in the client per
//!   side, an upgrade is refused (`Error::UpgradeRefused`). A downgrade (write, then read)
//!   holds at once with a plain ephemeral read node carrying the write node's sequence (as
//!   Curator does since CURATOR-621), and the write node's token (it holds in that turn):
//!   once the write side is given back, later writers stay behind it, with larger tokens, and
//!   later readers join it. The fast path (`quiet`) is the mutex's and the
//!   election's only.
//! - one name, one primitive: a node of another primitive in the folder ahead of an
//!   attempt's own (another mark) ends it with `Error::PrimitiveMismatch` naming both; a
//!   semaphore's folders (`locks`/`leases`, no sequence) are told apart by creation: the
//!   later of the two fails, on either side (`driver`, `semaphore`).
//! - here: the session (`Inner`) as a `super::session_service::SessionLocks`, which the
//!   shared `SessionService` (the `LockService` of ZooKeeper and etcd) runs every operation in.
//! - `super::holdings`: re-entry, counted in the client per (lock, owner) (shared with etcd).
//!
//! The fencing token is the lock node's creation zxid (`czxid`): ZooKeeper's transaction ids
//! strictly increase across the ensemble's whole history, so a later holding has a larger
//! token even when the lock's folder was deleted and created again.

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client as zk;

use self::driver::{Attempt, Queue};
use self::quiet::{Holder, Quiet, Slot, Taken};
use self::recipe::Node;
use self::session::Session;
use super::current::{Ends, Opening};
use super::holdings::Closing;
use super::holdings::Side;
use super::queue;
use super::session_holds::SessionHolds;
use super::session_service::{Ask, Failure, Listed, Service, SessionLocks, SessionService};
use super::{Acquired, Connected, Connecting, Ctx, Feed, Held, LockRequest, Released};
use crate::background::Background;
use crate::error::{Error, Warning};
use crate::watchdog::BoxFuture;

mod driver;
mod elect;
mod ops;
mod quiet;
mod recipe;
mod semaphore;
mod session;
mod url;

/// How long a waiter pauses before asking again after a connection loss.
pub(super) const RETRY: Duration = Duration::from_millis(100);

/// One session and what lives in it; background work holds it.
struct Inner {
    session: Arc<Session>,
    /// The client's background task: deletes that must go on after a failed release.
    background: Background,
    base: String,
    /// Lock folders this client last held alone (the fast path).
    quiet: Arc<Quiet>,
}

/// The session ends with the last handle on what lives in it (also one that was opened and
/// then given up, e.g. by a dropped future): its background work would otherwise keep it
/// alive.
impl Drop for Inner {
    fn drop(&mut self) {
        self.session.stop();
    }
}

impl Ends for Inner {
    type Target = url::ZkTarget;
    const WHAT: &'static str = "ZooKeeper session";

    /// Opens a session and makes sure the base path exists. Returns the warnings (a
    /// negotiated session timeout other than asked).
    async fn open(at: &Opening<url::ZkTarget>) -> Result<(Arc<Self>, Vec<Warning>), Error> {
        let (session, warnings) = Session::connect(&at.target.hosts, &at.options).await?;
        // Made before the first request, so that an open given up there (a failed mkdir, a
        // dropped future) stops the session with it.
        let inner = Self {
            session,
            background: at.background.clone(),
            base: at.target.base.clone(),
            quiet: Arc::default(),
        };
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let made = inner
            .session
            .call(|zk| zk.mkdir(&inner.base, &persistent))
            .await;
        if let Err(e) = made {
            return Err(inner.fail(None, e));
        }
        // The fast path needs persistent watches (ZooKeeper 3.6 and later). Asked here, before
        // any lock, since an older server does not know the request and closes the
        // connection (ZOOKEEPER-2786); dropped at once (the client removes it).
        let persistent = zk::AddWatchMode::Persistent;
        let probe = inner
            .session
            .call(|zk| zk.watch(&inner.base, persistent))
            .await;
        inner.quiet.set_persistent(probe.is_ok());
        Ok((Arc::new(inner), warnings))
    }

    fn id(&self) -> i64 {
        self.session.id
    }

    fn has_ended(&self) -> bool {
        self.session.holds.ended.is_cancelled()
    }

    fn stop(&self) {
        self.session.stop();
    }
}

impl SessionLocks for Inner {
    type Fault = zk::Error;
    /// Its words say that the session is the lease of every lock it holds.
    const SERVICE: Service = Service {
        name: "ZooKeeper",
        // A lock name must be one node below the base path.
        check_name: url::check_name,
        quorum: "a Redis option; ZooKeeper answers a write only after a quorum of the ensemble \
                 logged it",
        session: "ZooKeeper locks last as long as the client's session; set the session timeout \
                  with ClientOptions::default_lease instead",
        ended: "the ZooKeeper session expired or was closed; the next operation opens a new \
                session",
        unheard: "not heard from ZooKeeper within the session timeout; the session (and this \
                  owner's holding) may have expired",
        held_elsewhere: "releasing a lock that another ZooKeeper session holds",
        only_its_client: "the lock is an ephemeral node of the holder's session; only that \
                          client releases it (or Client::force_unlock deletes it)",
        rw_lock: true,
        semaphore: true,
    };

    fn server(&self) -> String {
        self.session.server.clone()
    }

    fn holds(&self) -> &SessionHolds {
        &self.session.holds
    }

    /// A ZooKeeper failure: no connection or session, the credentials refused, or else an
    /// answer that trying again would not change.
    fn failure(e: zk::Error) -> (Failure, String) {
        use zk::Error::*;
        match e {
            ConnectionLoss | Timeout | NoHosts | SessionExpired | ClientClosed | SessionMoved
            | Custom(_) => (Failure::Unavailable, format!("ZooKeeper: {e}")),
            NoAuth | AuthFailed => (Failure::Denied, format!("ZooKeeper: {e}")),
            e => (Failure::Protocol, format!("ZooKeeper answered: {e}")),
        }
    }

    /// A new node, or the fast path's create alone on a calm folder (see `quiet`).
    async fn attempt(self: &Arc<Self>, ask: Ask<'_>) -> Result<Acquired, Error> {
        let Ask {
            ctx,
            request,
            recipe,
            wait,
        } = ask;
        let name = &request.lock.name;
        if let Some((permits, resize)) = recipe.permits {
            return self.permit(ask, permits, resize).await;
        }
        let attempt = Attempt {
            dir: self.dir(name),
            guid: recipe::guid(),
            node: None,
            // A generated owner id is this client's alone: no other session can hold the lock
            // as this owner, and the check (one read) is skipped.
            checked: !request.explicit_owner,
            watcher: None,
            fast: None,
        };
        if recipe.downgrades {
            let holdings = &self.session.holds.holdings;
            if let Some(write) = holdings.path(name, request.owner, Side::One) {
                return self.downgrade(ctx, request, attempt, write).await;
            }
        }
        let queue = Queue::new(self, request, recipe);
        let Some(held) = queue::take(&queue, &recipe.holds, attempt, wait).await? else {
            return wait.not_acquired(name);
        };
        let signal = match (held.fast, held.watcher) {
            (Some(taken), _) => Some(Signal::Fast(taken)),
            (None, Some((watcher, alone))) => Some(Signal::Queue {
                watcher,
                // The fast path is the mutex's and the election's (see `Queue::enter`).
                alone: alone && recipe.alone(),
            }),
            (None, None) => None,
        };
        match (held.node, signal) {
            (Some(node), Some(signal)) => {
                Ok(Acquired::Held(self.held(ctx, request, node, signal)?))
            }
            _ => Err(Error::Protocol {
                lock: Some(name.clone()),
                server: self.session.server.clone(),
                detail: "a holding without its node or the listing that showed it first".into(),
            }),
        }
    }

    async fn delete_holding(self: Arc<Self>, closing: Closing) -> Result<Released, zk::Error> {
        self.delete_entry(&closing).await
    }

    async fn queue(&self, name: &str) -> Result<Vec<Listed>, Error> {
        self.children(name).await
    }

    async fn leader(&self, name: &str) -> Result<Option<Listed>, Error> {
        self.leader_entry(name).await
    }

    async fn proclaim(&self, path: &str, _token: u64, value: &str) -> Result<bool, zk::Error> {
        self.set_value(path, value).await
    }

    fn observe(self: &Arc<Self>, name: &str) -> Feed {
        self.follow(name)
    }

    /// A semaphore's last lease takes its folders and N with it (`semaphore::tidy`).
    async fn delete_head(&self, head: &Listed) -> Result<bool, zk::Error> {
        let tidy = async {
            if let Some(semaphore) = semaphore::lease_of(&head.path) {
                semaphore::tidy(&self.session, semaphore).await;
            }
        };
        let deleted = self.session.call(|zk| zk.delete(&head.path, None));
        match tokio::join!(deleted, tidy).0 {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Inner {
    /// The lock's folder.
    fn dir(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }

    /// Lists the lock's queue with a watch, once the folder's persistent watch is gone (see
    /// `Quiet::end`).
    pub(super) async fn list(
        &self,
        dir: &str,
        mark: recipe::Mark,
    ) -> Result<recipe::Listing, zk::Error> {
        self.quiet.end(dir);
        recipe::list(&self.session, dir, mark).await
    }

    /// A downgrade: the owner holds the write side (node `write`) and takes the read side at
    /// once, as Curator does, with a plain ephemeral read node at the write node's place
    /// (`_c_<guid>-__READ__<the write node's digits>`). Its token is the write node's: it
    /// holds in the write holding's turn, and its own `czxid` would be above that of a writer
    /// queued behind that place, which holds next (tokens out of holding order).
    async fn downgrade(
        self: &Arc<Self>,
        ctx: &Ctx,
        request: &LockRequest<'_>,
        mut attempt: Attempt,
        (write, token): (String, u64),
    ) -> Result<Acquired, Error> {
        let name = &request.lock.name;
        let Some(digits) = write.rsplit(recipe::Mark::Write.text()).next() else {
            return Err(self.fail(Some(name), zk::Error::BadArguments(&"no write node")));
        };
        let (dir, guid) = (&attempt.dir, &attempt.guid);
        // Until it holds, a failure or a dropped future removes the node in the background.
        let mut left = semaphore::Leftovers::node(self, dir, guid);
        let data = request.owner.as_bytes();
        let made = recipe::create_at(&self.session, dir, guid, data, digits).await;
        let node = made.map_err(|e| self.fail(Some(name), e))?;
        attempt.node = Some(node.clone());
        let czxid = i64::try_from(token).unwrap_or(node.czxid);
        let node = Node { czxid, ..node };
        let listed = self.session.call(|zk| zk.list_and_watch_children(dir));
        let (_, watcher) = listed.await.map_err(|e| self.fail(Some(name), e))?;
        let signal = Signal::Queue {
            watcher,
            alone: false,
        };
        let held = self.held(ctx, request, node, signal)?;
        left.disarm();
        Ok(Acquired::Held(held))
    }

    /// The attempt's node is the lowest: a new holding, watched for a forced delete.
    fn held(
        self: &Arc<Self>,
        ctx: &Ctx,
        request: &LockRequest<'_>,
        node: Node,
        signal: Signal,
    ) -> Result<Held, Error> {
        let name = &request.lock.name;
        let token = u64::try_from(node.czxid).map_err(|_| Error::Protocol {
            lock: Some(name.clone()),
            server: self.session.server.clone(),
            detail: format!("the lock node's czxid {} is not a zxid", node.czxid),
        })?;
        let lease = self.hold(ctx, request, node.path.clone(), token);
        let holder = Holder {
            name: name.clone(),
            owner: request.owner.clone(),
            path: node.path,
            token,
        };
        match signal {
            Signal::Fast(taken) => {
                if !taken.hold(holder.clone()) {
                    let inner = self.clone();
                    ctx.background
                        .linger(async move { inner.recheck(&holder).await });
                }
            }
            Signal::Queue { watcher, alone } => {
                if alone {
                    self.quiet.candidate(&holder.path);
                }
                ctx.background.linger(self.clone().watch(holder, watcher));
            }
        }
        Ok(Held { lease, count: 1 })
    }

    /// Fires the holding's lost signals when its node is deleted by someone else. It starts
    /// from the queue watch of the listing that made it the holder, which costs no request:
    /// that watch fires at the queue's next change, which is the holding's own delete when
    /// nobody queued meanwhile (the uncontended case). Only when the queue changed while the
    /// lock is still held does it read its own node with a watch, once.
    async fn watch(self: Arc<Self>, holder: Holder, queue: zk::OneshotWatcher) {
        let event = queue.changed().await;
        if event.event_type != zk::EventType::Session {
            self.recheck(&holder).await;
        }
    }

    /// The queue changed while `holder` may still hold the lock: reads its node with a watch
    /// (again after a connection loss, while the session lives) and fires its lost signals
    /// when the node is gone.
    async fn recheck(&self, holder: &Holder) {
        let Holder {
            name,
            owner,
            path,
            token,
        } = holder;
        loop {
            if !self.session.holds.holdings.live(name, owner, path) {
                return;
            }
            let gone = match self.session.call(|zk| zk.get_and_watch_data(path)).await {
                Ok((_, _, watcher)) => {
                    watcher.changed().await.event_type == zk::EventType::NodeDeleted
                }
                Err(zk::Error::NoNode) => true,
                Err(e)
                    if recipe::connection_lost(&e) && !self.session.holds.ended.is_cancelled() =>
                {
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
                Err(_) => false,
            };
            if gone {
                self.quiet.forget(path);
                self.session
                    .holds
                    .holdings
                    .vanished(name, owner, path, *token);
            }
            return;
        }
    }

    /// Runs the task of a calm folder's slot (see `quiet`): it ends the slot at the watch's
    /// first event, and a holding taken on the fast path that held the lock then reads its
    /// own node instead. It holds the session weakly: a calm folder does not keep it open.
    fn watch_folder(self: &Arc<Self>, dir: String, slot: Arc<Slot>) {
        let inner = Arc::downgrade(self);
        self.background.linger(async move {
            let orphan = std::future::poll_fn(|cx| slot.poll_end(cx)).await;
            let Some(inner) = inner.upgrade() else {
                return;
            };
            inner.quiet.remove(&dir, &slot);
            if let Some(holder) = orphan {
                inner.recheck(&holder).await;
            }
        });
    }
}

/// What tells a new holding of the queue's next change.
enum Signal {
    /// The queue watch of the listing that showed the attempt first; `alone`: the only one.
    Queue {
        watcher: zk::OneshotWatcher,
        alone: bool,
    },
    /// The fast path: the calm folder, checked (see `quiet`).
    Fast(Taken),
}

/// Connects ZooKeeper (its registry line): one URL that lists the servers. Opens the
/// client's session and makes sure the base path exists.
pub(crate) fn connect(c: Connecting<'_>) -> BoxFuture<'_, Result<Connected, Error>> {
    Box::pin(async move {
        let target = url::parse_target(c.url())?;
        SessionService::<Inner>::connect(target, c.options, c.background).await
    })
}
