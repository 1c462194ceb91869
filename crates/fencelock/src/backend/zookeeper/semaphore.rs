//! Semaphores on ZooKeeper, in Curator's `InterProcessSemaphoreV2` layout, so that fencelock
//! permits and Curator leases of one semaphore never exceed its N together.
//!
//! A semaphore named S is the folder `<base>/S` with two folders: `locks` (an
//! `InterProcessMutex`, `_c_<guid>-lock-<seq>` nodes) and `leases` (one ephemeral sequential
//! `_c_<guid>-lease-<seq>` node per permit, the owner id as data). As Curator does, an
//! attempt takes the `locks` mutex (waiting in arrival order: the semaphore's FIFO), creates
//! its lease node, waits with a watch on `leases` until at most N lease nodes are there, and
//! gives the mutex back. Under the mutex at most one lease node is not held (the waiting
//! one's), so the holders never exceed N. A permit is its lease node: its token is the
//! node's `czxid`, a crashed holder's permit goes with its session, and a release deletes
//! that node only.
//!
//! N is stored as the semaphore folder's data (decimal), where Curator does not look: a
//! fencelock attempt with another N is refused (`Error::PermitsMismatch`) unless it
//! resizes, which rewrites it (guarded by the data's version). Waiters read it again, with a
//! watch, at each turn, so a lowered N revokes nothing: holders stay, and a waiter holds
//! once at most N lease nodes (its own included) are there; a raised N wakes it. Curator keeps its N in the process: a Curator
//! semaphore of another N is not detected. N goes with the last entry: a lease node's
//! delete is followed, in the same round trip, by deletes of the empty folders and the
//! semaphore's own folder (`tidy`); an N left without entries is taken over (`in_use`).
//!
//! One name, one kind: the folders have no sequence among the name's nodes, so a permit
//! looks at the name's folder while it waits for its lease, and fails when another kind's
//! node was made before the semaphore's folders (`made`); another kind's attempt fails when
//! they were made before its node (`super::driver`). Two kinds started together: one refusal.

use std::sync::Arc;

use tokio::time::Instant;
use zookeeper_client as zk;

use super::driver::{Attempt, Queue};
use super::recipe::{self, Entry, Mark, Node};
use super::session::Session;
use super::{Inner, Signal};
use crate::backend::queue::{self, rule::First};
use crate::backend::session_service::{Ask, Listed, SessionLocks};
use crate::backend::{Acquired, Wait};
use crate::error::Error;

/// What an attempt left that must go unless it holds: the mutex's node, the lease's node
/// (or a downgrade's read node). Dropped with anything in it (the attempt failed, or the
/// caller stopped waiting), it is undone in the background.
pub(super) struct Leftovers {
    inner: Arc<Inner>,
    mutex: Option<(String, String, Option<String>)>,
    lease: Option<(String, String, Option<String>)>,
}

/// What a permit's wait under the semaphore's mutex came to.
enum Leased {
    /// Its lease node holds, with the listing's watch.
    Held(Node, zk::OneshotWatcher),
    /// No wait, or past the deadline.
    GaveUp,
    /// Another primitive's node came first (what was found).
    Refused(String),
}

/// Deletes semaphore `dir`'s folders and then the semaphore's own folder, with N, if they
/// are empty: sent right behind the delete of a lease node (one round trip), so that the
/// step that deletes the last entry leaves no N behind. Each delete fails alone (not
/// empty, or gone already): the releaser whose delete came last finds them empty, as its
/// requests run in order after every other's.
pub(super) async fn tidy(session: &Session, dir: &str) {
    let sent = Instant::now();
    let folders = [
        format!("{dir}/leases"),
        format!("{dir}/locks"),
        dir.to_owned(),
    ];
    let deletes: Vec<_> = folders
        .iter()
        .map(|path| session.answer(sent, session.zk.delete(path, None)))
        .collect();
    for deleted in deletes {
        // Not empty, gone, or unanswered: nothing to do (a later release tries again).
        let _ = deleted.await;
    }
}

/// Whether `path` is a semaphore's lease node; its semaphore's folder.
pub(super) fn lease_of(path: &str) -> Option<&str> {
    path.rsplit_once('/')?.0.strip_suffix("/leases")
}

impl Leftovers {
    /// An attempt's node of GUID `guid` in folder `dir`, whatever its sequence.
    pub(super) fn node(inner: &Arc<Inner>, dir: &str, guid: &str) -> Self {
        Self {
            inner: inner.clone(),
            mutex: None,
            lease: Some((dir.to_owned(), guid.to_owned(), None)),
        }
    }

    /// The attempt holds: its node stays.
    pub(super) fn disarm(&mut self) {
        (self.mutex, self.lease) = (None, None);
    }

    /// Removes `item` (folder, GUID, node if known) in the client's background.
    fn later(&self, item: Option<(String, String, Option<String>)>) {
        let Some((dir, guid, node)) = item else {
            return;
        };
        let (session, background) = (self.inner.session.clone(), self.inner.background.clone());
        self.inner.background.finish(async move {
            let undone =
                recipe::undo_until_done(&session, &dir, &guid, node.as_deref(), super::RETRY);
            if let Err(e) = undone.await {
                background.failed();
                tracing::warn!(dir, error = %e, "a semaphore attempt's node was not removed; it goes with the session");
            }
            if let Some(semaphore) = dir.strip_suffix("/leases") {
                tidy(&session, semaphore).await;
            }
        });
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let (mutex, lease) = (self.mutex.take(), self.lease.take());
        self.later(mutex);
        self.later(lease);
    }
}

impl Inner {
    /// Takes one permit of semaphore `ask.request.lock` of `permits` (see the module).
    pub(super) async fn permit(
        self: &Arc<Self>,
        ask: Ask<'_>,
        permits: u32,
        resize: bool,
    ) -> Result<Acquired, Error> {
        let Ask {
            ctx,
            request,
            recipe,
            wait,
        } = ask;
        let name = &request.lock.name;
        let dir = self.dir(name);
        self.store_permits(name, &dir, permits, resize).await?;
        let mutex = Attempt {
            dir: format!("{dir}/locks"),
            guid: recipe::guid(),
            node: None,
            checked: true,
            watcher: None,
            fast: None,
        };
        let queue = Queue::new(self, request, recipe);
        let Some(mutex) = queue::take(&queue, &First, mutex, wait).await? else {
            return wait.not_acquired(name);
        };
        let lease_guid = recipe::guid();
        let mut left = Leftovers {
            inner: self.clone(),
            mutex: Some((mutex.dir, mutex.guid, mutex.node.map(|n| n.path))),
            lease: Some((format!("{dir}/leases"), lease_guid.clone(), None)),
        };
        let owner = request.owner.as_bytes();
        let got = self.lease(&dir, &lease_guid, owner, permits, wait).await;
        // The mutex goes back whatever came of the lease (as Curator's `finally`).
        self.give_back_mutex(left.mutex.take());
        match got {
            Ok(Leased::Refused(found)) => Err(Error::PrimitiveMismatch {
                lock: name.clone(),
                asked: "semaphore",
                found,
                server: self.session.server.clone(),
            }),
            Ok(Leased::Held(node, watcher)) => {
                left.lease = None;
                let signal = Signal::Queue {
                    watcher,
                    alone: false,
                };
                Ok(Acquired::Held(self.held(ctx, request, node, signal)?))
            }
            Ok(Leased::GaveUp) => wait.not_acquired(name),
            Err(e) => Err(self.fail(Some(name), e)),
        }
    }

    /// Creates the lease node and waits, under the semaphore's mutex, until at most N lease
    /// nodes are there (N read again at each turn, with a watch: a raised N lets it hold
    /// without a release): the node and the listing's watch once it holds, `None` when it
    /// gave up (no wait, or past the deadline). A waiter outlives a connection loss while
    /// its session and its deadline do.
    async fn lease(
        &self,
        dir: &str,
        guid: &str,
        owner: &[u8],
        permits: u32,
        wait: Wait,
    ) -> Result<Leased, zk::Error> {
        let leases = format!("{dir}/leases");
        let entry = Entry {
            mark: Mark::Lease,
            data: owner,
        };
        let (node, mut listing) = recipe::create(&self.session, &leases, guid, entry, true).await?;
        loop {
            let turn = async {
                let listed = match listing.take() {
                    Some(listed) => listed,
                    None => recipe::list(&self.session, &leases, Mark::Lease).await?,
                };
                if !listed.children.iter().any(|c| c == node.name()) {
                    return Err(zk::Error::NoNode);
                }
                let (n, resized, others) = self.stored_and_watched(dir).await?;
                if let Some(found) = self.first(dir, others).await? {
                    return Ok(Some(Leased::Refused(found)));
                }
                let n = n.unwrap_or(permits);
                if listed.children.len() <= n as usize {
                    return Ok(Some(Leased::Held(node.clone(), listed.watcher)));
                }
                if matches!(wait, Wait::No) {
                    return Ok(Some(Leased::GaveUp));
                }
                let fired = async {
                    tokio::select! {
                        _ = listed.watcher.changed() => {}
                        _ = resized.changed() => {}
                    }
                };
                let woke = recipe::wait_for(&self.session, fired, wait.deadline()).await?;
                Ok((!woke).then_some(Leased::GaveUp))
            };
            match turn.await {
                Ok(Some(leased)) => return Ok(leased),
                Ok(None) => {}
                Err(e) if self.again(wait, &e) => tokio::time::sleep(super::RETRY).await,
                Err(e) => return Err(e),
            }
        }
    }

    /// Gives the semaphore's mutex back: its node's delete is sent now, so that it runs before
    /// any later request of this session (the release of the lease then finds the mutex's
    /// folder empty, `tidy`), and is confirmed in the background, where a failed delete is
    /// tried again until done or the session ends.
    fn give_back_mutex(&self, mutex: Option<(String, String, Option<String>)>) {
        let Some((dir, guid, node)) = mutex else {
            return;
        };
        let sent = Instant::now();
        let deleted = node
            .as_deref()
            .map(|path| self.session.zk.delete(path, None));
        let (session, background) = (self.session.clone(), self.background.clone());
        self.background.finish(async move {
            if let Some(deleted) = deleted {
                if let Ok(()) | Err(zk::Error::NoNode) = session.answer(sent, deleted).await {
                    return;
                }
            }
            let undone = recipe::undo_until_done(&session, &dir, &guid, node.as_deref(), super::RETRY);
            if let Err(e) = undone.await {
                background.failed();
                tracing::warn!(dir, error = %e, "a semaphore's mutex node was not removed; it goes with the session");
            }
        });
    }

    /// Whether a waiter's failed request is tried again: a connection loss while the session
    /// and the deadline last.
    fn again(&self, wait: Wait, e: &zk::Error) -> bool {
        matches!(wait, Wait::Until(_))
            && recipe::connection_lost(e)
            && !self.session.holds.ended.is_cancelled()
            && wait
                .deadline()
                .is_none_or(|at| tokio::time::Instant::now() < at)
    }

    /// A semaphore's queue for status and forced unlocks: its lease nodes in order (they
    /// hold, but for the newest one when its owner holds the mutex: it waits), then its
    /// mutex's nodes (the waiters).
    pub(super) async fn semaphore_listing(
        &self,
        name: &str,
        dir: &str,
    ) -> Result<Vec<Listed>, Error> {
        let fail = |e| self.fail(Some(name), e);
        let mut paths = Vec::new();
        for (folder, mark) in [("leases", Mark::Lease), ("locks", Mark::Lock)] {
            let folder = format!("{dir}/{folder}");
            let children = match self.session.call(|zk| zk.list_children(&folder)).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => return Err(fail(e)),
            };
            let sorted = recipe::sorted(children, mark);
            paths.extend(sorted.into_iter().map(|c| format!("{folder}/{c}")));
        }
        let lease = |path: &str| path.contains("/leases/");
        let mut listed = self.read_entries(paths, lease).await.map_err(fail)?;
        let leases = listed.iter().filter(|e| e.reader).count();
        let waiting = match (leases.checked_sub(1), listed.get(leases)) {
            (Some(last), Some(mutex)) => listed[last].owner == mutex.owner,
            _ => false,
        };
        if waiting {
            listed.remove(leases - 1);
        }
        Ok(listed)
    }

    /// The N stored with the semaphore, if any, and a watch of it (the folder's data), and
    /// the other primitives' nodes in the folder, read in the same round trip. The folder
    /// holds the waiter's lease node, so it is there.
    async fn stored_and_watched(
        &self,
        dir: &str,
    ) -> Result<(Option<u32>, zk::OneshotWatcher, Vec<String>), zk::Error> {
        let sent = Instant::now();
        let data = self.session.zk.get_and_watch_data(dir);
        let children = self.session.zk.list_children(dir);
        let (data, children) = tokio::join!(
            self.session.answer(sent, data),
            self.session.answer(sent, children)
        );
        let (data, _, watcher) = data?;
        let n = std::str::from_utf8(&data)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let others = children?
            .into_iter()
            .filter(|c| Mark::of_child(c).is_some())
            .map(|c| format!("{dir}/{c}"))
            .collect();
        Ok((n, watcher, others))
    }

    /// Whether another primitive's node in the folder (`others`) came before the semaphore's
    /// folders: the name is that primitive's, and the attempt fails (what was found, for
    /// the error). One that came after is that attempt's to refuse (`super::driver`): both
    /// compare the folders' creation with the node's, so two kinds started together give one
    /// refusal.
    async fn first(&self, dir: &str, others: Vec<String>) -> Result<Option<String>, zk::Error> {
        if others.is_empty() {
            return Ok(None);
        }
        let read = self.read_entries(others, |_| false).await?;
        let Some(other) = read.into_iter().min_by_key(|e| e.token) else {
            return Ok(None);
        };
        let made = recipe::made(&self.session, dir).await?;
        Ok(match made {
            Some((czxid, _)) if czxid < other.token => None,
            _ => {
                let child = other.path.rsplit('/').next().unwrap_or(&other.path);
                let found = recipe::primitive_of(child).unwrap_or("another primitive");
                Some(format!("{found} (node {})", other.path))
            }
        })
    }

    /// Makes sure the semaphore's folder stores `permits`: creates it with it, or stores it
    /// in a folder without one (Curator's), or checks it; another N is refused unless
    /// `resize`. A folder of another primitive is refused (`Error::PrimitiveMismatch`). On a
    /// semaphore in use, one round trip (its data and children read together).
    async fn store_permits(
        &self,
        name: &str,
        dir: &str,
        permits: u32,
        resize: bool,
    ) -> Result<(), Error> {
        let fail = |e| self.fail(Some(name), e);
        let data = permits.to_string();
        for _ in 0..8 {
            let Some((stored, stat, children)) = self.folder(dir).await.map_err(fail)? else {
                self.make_folder(dir, data.as_bytes()).await.map_err(fail)?;
                continue;
            };
            self.only_semaphore(name, dir, &children)?;
            let stored = String::from_utf8_lossy(&stored).trim().to_owned();
            match (stored.parse::<u32>().ok(), resize) {
                (Some(n), _) if n == permits => return Ok(()),
                // N lives as long as the semaphore's entries: one left in a folder without
                // any (the server reaps empty folders late) is no semaphore's any more.
                (Some(n), false) if self.in_use(dir).await.map_err(fail)? => {
                    return Err(Error::PermitsMismatch {
                        lock: name.to_owned(),
                        stored: n,
                        asked: permits,
                    })
                }
                (None, false) if !stored.is_empty() => {
                    return Err(Error::Protocol {
                        lock: Some(name.to_owned()),
                        server: self.session.server.clone(),
                        detail: format!(
                            "the semaphore folder {dir} stores {stored:?}, not a number"
                        ),
                    })
                }
                _ => {}
            }
            let version = Some(stat.version);
            match self
                .session
                .call(|zk| zk.set_data(dir, data.as_bytes(), version))
                .await
            {
                Ok(_) => return Ok(()),
                Err(zk::Error::BadVersion | zk::Error::NoNode) => continue,
                Err(e) => return Err(fail(e)),
            }
        }
        Err(Error::Unavailable {
            lock: Some(name.to_owned()),
            server: self.session.server.clone(),
            detail: "the semaphore's number of permits kept changing under this attempt".into(),
        })
    }

    /// Whether the semaphore has entries: a lease node, or a waiter's node in its mutex.
    async fn in_use(&self, dir: &str) -> Result<bool, zk::Error> {
        let sent = Instant::now();
        let stats = recipe::SEMAPHORE_CHILDREN.map(|c| {
            let path = format!("{dir}/{c}");
            self.session.answer(sent, self.session.zk.check_stat(&path))
        });
        let [locks, leases] = stats;
        let (locks, leases) = tokio::join!(locks, leases);
        Ok([locks?, leases?]
            .into_iter()
            .flatten()
            .any(|stat| stat.num_children > 0))
    }

    /// The folder's data, stat and children, read in one round trip; `None` without it.
    async fn folder(
        &self,
        dir: &str,
    ) -> Result<Option<(Vec<u8>, zk::Stat, Vec<String>)>, zk::Error> {
        let sent = Instant::now();
        let data = self.session.zk.get_data(dir);
        let children = self.session.zk.list_children(dir);
        let (data, children) = tokio::join!(
            self.session.answer(sent, data),
            self.session.answer(sent, children)
        );
        match (data, children) {
            (Ok((data, stat)), Ok(children)) => Ok(Some((data, stat, children))),
            (Err(zk::Error::NoNode), _) | (_, Err(zk::Error::NoNode)) => Ok(None),
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    }

    /// Creates the semaphore's folder (a container) storing `data`, and the base path if it
    /// is missing; one made meanwhile by another client is fine (the caller reads it).
    async fn make_folder(&self, dir: &str, data: &[u8]) -> Result<(), zk::Error> {
        let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
        match self
            .session
            .call(|zk| zk.create(dir, data, &container))
            .await
        {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(zk::Error::NoNode) => {
                let base = dir.rsplit_once('/').map_or("/", |(b, _)| b);
                let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                self.session.call(|zk| zk.mkdir(base, &persistent)).await
            }
            Err(e) => Err(e),
        }
    }

    /// Refuses a folder that holds another primitive's nodes.
    fn only_semaphore(&self, name: &str, dir: &str, children: &[String]) -> Result<(), Error> {
        let other = children.iter().find_map(|c| {
            let found = recipe::primitive_of(c)?;
            (found != "semaphore").then(|| format!("{found} (node {dir}/{c})"))
        });
        match other {
            Some(found) => Err(Error::PrimitiveMismatch {
                lock: name.to_owned(),
                asked: "semaphore",
                found,
                server: self.session.server.clone(),
            }),
            None => Ok(()),
        }
    }
}
