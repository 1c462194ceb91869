//! ZooKeeper's side of the shared queue recipe (`backend::queue`): Curator's protected
//! creation with the listing sent right behind the create (or, on a folder this client last
//! held alone, the create alone: `quiet`), the queue listed with a watch on the folder, and a
//! waiter's read with a watch of the node just before its own, which also reads the holder's
//! node once to refuse queueing behind this owner's holding in another session.
//!
//! A mutex's attempt (`-lock-`), an election's (`-latch-`) and a read-write lock's
//! (`-__READ__`, `-__WRIT__`) run the same loop over their own primitive's nodes. A listing
//! that shows another primitive's node (or a semaphore's folders) ahead of the attempt's own
//! ends the attempt with `Error::PrimitiveMismatch` naming both (its node removed): the two
//! queues would ignore each other, as Curator's recipes do, and both would hold.

use std::sync::Arc;

use tokio::time::Instant;
use zookeeper_client as zk;

use super::quiet::Taken;
use super::recipe::{self, Entry, Listing, Mark, Node};
use super::{Inner, RETRY};
use crate::backend::queue::recipe::Recipe;
use crate::backend::queue::rule::{Queued, Sight};
use crate::backend::queue::{Driver, Turn};
use crate::backend::session_service::SessionLocks;
use crate::backend::{LockRequest, Wait};
use crate::error::Error;

/// An attempt's node until it holds the lock or is removed.
pub(super) struct Attempt {
    pub(super) dir: String,
    pub(super) guid: String,
    pub(super) node: Option<Node>,
    /// The holder was checked not to be this owner in another session.
    pub(super) checked: bool,
    /// The folder watch of the last listing, and whether that listing showed the node alone.
    pub(super) watcher: Option<(zk::OneshotWatcher, bool)>,
    /// Taken on the fast path (see `quiet`).
    pub(super) fast: Option<Taken>,
}

/// One acquire's view of the lock's queue.
pub(super) struct Queue<'a> {
    pub(super) inner: &'a Arc<Inner>,
    pub(super) request: &'a LockRequest<'a>,
    pub(super) recipe: &'a Recipe<'a>,
    /// The other kind's node found ahead of the attempt's own: the attempt fails.
    pub(super) mixed: std::sync::Mutex<Option<String>>,
    /// A semaphore's folder found in the lock's folder, to be told apart: made before the
    /// attempt's node (the attempt fails) or after it (the semaphore's attempt fails).
    folder: std::sync::Mutex<Option<String>>,
    /// The semaphore's folders were made after the attempt's node: they are not its matter.
    later: std::sync::atomic::AtomicBool,
}

impl<'a> Queue<'a> {
    /// One acquire's view of the queue of `request`'s kind.
    pub(super) fn new(
        inner: &'a Arc<Inner>,
        request: &'a LockRequest<'a>,
        recipe: &'a Recipe<'a>,
    ) -> Self {
        Self {
            inner,
            request,
            recipe,
            mixed: std::sync::Mutex::new(None),
            folder: std::sync::Mutex::new(None),
            later: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn name(&self) -> &str {
        &self.request.lock.name
    }

    /// The kind of node the attempt makes.
    fn mark(&self) -> Mark {
        Mark::of(self.recipe)
    }

    /// The attempt's node: its kind, and its data (the owner id, or the value advertised).
    fn entry(&self) -> Entry<'_> {
        Entry {
            mark: self.mark(),
            data: self.recipe.value.as_bytes(),
        }
    }

    fn mixed(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.mixed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the folder watch of a listing that did not make the attempt the holder until it
    /// fires (at the queue's next change): dropping it early would cost a request to remove
    /// it from the server.
    fn park(&self, attempt: &mut Attempt) {
        if let Some((watcher, _)) = attempt.watcher.take() {
            self.inner.background.linger(async move {
                watcher.changed().await;
            });
        }
    }

    /// The nodes ahead of the attempt's own in a listing (as much as `sight` asks for);
    /// `None` if its own is not in it. Keeps the listing's watch in the attempt.
    fn ahead(&self, attempt: &mut Attempt, listing: Listing, sight: Sight) -> Option<Vec<String>> {
        self.park(attempt);
        let node = attempt.node.as_ref()?;
        if let Some((seq, other)) = &listing.other {
            let path = format!("{}/{other}", attempt.dir);
            if recipe::SEMAPHORE_CHILDREN.contains(&other.as_str()) {
                // Its folders have no sequence: they are told apart by creation (`told`).
                if !self.later.load(std::sync::atomic::Ordering::Relaxed) {
                    *self.folder.lock().unwrap_or_else(|e| e.into_inner()) = Some(path);
                }
            } else if i64::try_from(*seq).is_ok_and(|seq| seq < node.seq) {
                *self.mixed() = Some(path);
                return None;
            }
        }
        let children = listing.children;
        let at = children.iter().position(|c| c == node.name())?;
        attempt.watcher = Some((listing.watcher, children.len() == 1));
        let path = |c: &String| format!("{}/{c}", attempt.dir);
        Some(match (sight, at) {
            (_, 0) => Vec::new(),
            (Sight::Ends, 1) => vec![path(&children[0])],
            (Sight::Ends, _) => vec![path(&children[0]), path(&children[at - 1])],
            (Sight::All, _) => children[..at].iter().map(path).collect(),
        })
    }

    /// The entries ahead as `ahead` found them, unless a semaphore's folder it saw was made
    /// before the attempt's node: the name was a semaphore first, and the attempt fails
    /// (`None`). One made after it is the semaphore's attempt's to refuse (see
    /// `super::semaphore`): both compare the folder's creation with the other's node, so
    /// two kinds started together give one refusal.
    async fn told(
        &self,
        attempt: &Attempt,
        ahead: Option<Vec<String>>,
    ) -> Result<Option<Vec<String>>, zk::Error> {
        let folder = self.folder.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (Some(_), Some(node)) = (folder, attempt.node.as_ref()) else {
            return Ok(ahead);
        };
        let made = recipe::made(&self.inner.session, &attempt.dir).await?;
        match made {
            Some((czxid, path)) if czxid < node.czxid => {
                *self.mixed() = Some(path);
                Ok(None)
            }
            _ => {
                self.later.store(true, std::sync::atomic::Ordering::Relaxed);
                Ok(ahead)
            }
        }
    }

    /// Whether a failed request is tried again: a waiter outlives a connection loss while its
    /// session and its deadline do.
    fn again(&self, wait: Wait, e: &zk::Error) -> bool {
        matches!(wait, Wait::Until(_))
            && self.transient(e)
            && wait.deadline().is_none_or(|at| Instant::now() < at)
    }

    /// Refuses to queue behind a holding of this owner id in another session (the holder's
    /// node as read: data and stat, `None` if gone); marks the check done otherwise.
    fn refuse_foreign(
        &self,
        attempt: &mut Attempt,
        read: Result<Option<(Vec<u8>, zk::Stat)>, zk::Error>,
    ) -> Result<(), Error> {
        match read {
            Ok(Some((data, stat)))
                if data == self.request.owner.as_bytes()
                    && stat.ephemeral_owner != self.inner.session.id =>
            {
                Err(Error::Unsupported {
                    service: Inner::SERVICE.name,
                    what: "re-entry by an owner id that another ZooKeeper session holds",
                    why: "a ZooKeeper lock is an ephemeral node owned by one session; re-entry \
                          is counted in the client that holds it (Lock::with_owner works \
                          across processes on Redis only)",
                })
            }
            Ok(_) | Err(zk::Error::NoNode) => {
                attempt.checked = true;
                Ok(())
            }
            Err(e) => Err(self.fail(e)),
        }
    }
}

/// A node's path in the queue: a reader's (`__READ__`) shares, every other node excludes.
impl Queued for String {
    fn exclusive(&self) -> bool {
        !matches!(Mark::of_child(self), Some((Mark::Read, _)))
    }
}

impl Driver for Queue<'_> {
    type Entry = String;
    type Attempt = Attempt;
    type Fault = zk::Error;

    const ENTER_AGAIN: bool = false;
    const PAUSE: std::time::Duration = RETRY;

    /// On a folder this client last held alone, and still calm, the create goes without the
    /// listing, and the attempt may hold the lock at once (see `quiet`); otherwise the
    /// listing goes right behind the create.
    async fn enter(
        &self,
        attempt: &mut Attempt,
        sight: Sight,
    ) -> Result<Option<Vec<String>>, zk::Error> {
        let (inner, dir) = (self.inner, &attempt.dir);
        // The fast path is the mutex's and the election's: a read-write lock's folder may
        // keep this client's other node (a downgrade's reader) after a release.
        let fast = self.recipe.alone();
        let taken = fast.then(|| inner.quiet.take(dir)).flatten();
        if taken.is_none() {
            inner.quiet.end(dir);
        }
        let list = taken.is_none();
        let entry = self.entry();
        let created = recipe::create(&inner.session, dir, &attempt.guid, entry, list).await;
        let (node, listed) = created?;
        let seq = node.seq;
        attempt.node = Some(node);
        if let Some(taken) = taken {
            if taken.check(seq) {
                attempt.fast = Some(taken);
                return Ok(Some(Vec::new()));
            }
            // Dropped here, which ends the calm before the listing is sent.
        }
        let ahead = listed.and_then(|listing| self.ahead(attempt, listing, sight));
        self.told(attempt, ahead).await
    }

    async fn look(
        &self,
        attempt: &mut Attempt,
        sight: Sight,
    ) -> Result<Option<Vec<String>>, zk::Error> {
        if self.mixed().is_some() {
            return Ok(None);
        }
        let listing = self.inner.list(&attempt.dir, self.mark()).await?;
        let ahead = self.ahead(attempt, listing, sight);
        self.told(attempt, ahead).await
    }

    /// The first time, it also reads the holder's node, in the same round trip as the
    /// watch, to refuse queueing behind a holding of the same owner id in another session
    /// (a second process cannot re-enter, i.e. own, another session's node). A generated
    /// owner id is this client's alone, and skips the check.
    async fn behind(
        &self,
        attempt: &mut Attempt,
        holder: &String,
        on: &String,
        wait: Wait,
    ) -> Result<Turn, Error> {
        self.park(attempt);
        let session = &self.inner.session;
        let sent = Instant::now();
        let holder_read = (!attempt.checked && (holder != on || matches!(wait, Wait::No)))
            .then(|| session.answer(sent, session.zk.get_data(holder)));
        if matches!(wait, Wait::No) {
            if let Some(read) = holder_read {
                self.refuse_foreign(attempt, read.await.map(Some))?;
            }
            return Ok(Turn::GiveUp);
        }
        let watched = recipe::watch(session, on);
        let (holder_read, watched) = match holder_read {
            Some(read) => {
                let (read, watched) = tokio::join!(read, watched);
                (Some(read.map(Some)), watched)
            }
            None => (None, watched.await),
        };
        let watched = match watched {
            Err(e) if self.again(wait, &e) => return Ok(Turn::Retry),
            watched => watched.map_err(|e| self.fail(e))?,
        };
        if !attempt.checked {
            let read = holder_read
                .unwrap_or_else(|| Ok(watched.as_ref().map(|w| (w.data.clone(), w.stat))));
            match self.refuse_foreign(attempt, read) {
                Err(Error::Unavailable { .. }) if self.again(wait, &zk::Error::Timeout) => {
                    return Ok(Turn::Retry)
                }
                checked => checked?,
            }
        }
        let Some(watched) = watched else {
            return Ok(Turn::Again);
        };
        match recipe::wait_for(session, watched.watcher.changed(), wait.deadline()).await {
            Ok(true) => Ok(Turn::Again),
            Ok(false) => Ok(Turn::GiveUp),
            Err(e) if self.again(wait, &e) => Ok(Turn::Retry),
            Err(e) => Err(self.fail(e)),
        }
    }

    async fn undo(&self, attempt: &mut Attempt) -> Result<(), zk::Error> {
        let node = attempt.node.as_ref().map(|n| n.path.as_str());
        recipe::undo(&self.inner.session, &attempt.dir, &attempt.guid, node).await
    }

    fn undo_later(&self, attempt: Attempt) {
        let (session, background) = (self.inner.session.clone(), self.inner.background.clone());
        self.inner.background.finish(async move {
            let (dir, guid) = (&attempt.dir, &attempt.guid);
            let node = attempt.node.as_ref().map(|n| n.path.as_str());
            if let Err(e) = recipe::undo_until_done(&session, dir, guid, node, RETRY).await {
                background.failed();
                tracing::warn!(dir, error = %e, "undo of a given-up attempt failed; its node goes with the session");
            }
        });
    }

    fn transient(&self, e: &zk::Error) -> bool {
        recipe::connection_lost(e) && !self.inner.session.holds.ended.is_cancelled()
    }

    fn fail(&self, e: zk::Error) -> Error {
        self.inner.fail(Some(self.name()), e)
    }

    /// Also the end of an attempt that found the other kind's node ahead of its own.
    fn vanished(&self) -> Error {
        if let Some(other) = self.mixed().take() {
            let child = other.rsplit('/').next().unwrap_or(&other);
            let found = recipe::primitive_of(child).unwrap_or("another primitive");
            return Error::PrimitiveMismatch {
                lock: self.name().to_owned(),
                asked: self.mark().primitive(),
                found: format!("{found} (node {other})"),
                server: self.inner.session.server.clone(),
            };
        }
        Error::Unavailable {
            lock: Some(self.name().to_owned()),
            server: self.inner.session.server.clone(),
            detail: "the attempt's node vanished while it waited (session lost?)".into(),
        }
    }
}
