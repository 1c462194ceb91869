//! Locks this client last held alone, and the proof that nobody touched them since: the
//! uncontended fast path (two requests per acquire + release instead of three).
//!
//! A sequential node's number counts the creates in its folder. So when this client's node
//! number `s` was the only lock node of the folder, and its next node there gets number
//! `s + 1`, no other node was created in between: the folder holds only that new node (and
//! the deleted one's, if its delete had not yet run: the same client's, released), and the
//! attempt holds the lock without listing the queue. ZooKeeper 3.8 counts only creates in
//! the number; a server that counted deletes too would never give `s + 1`, which costs only
//! the listing.
//!
//! The number cannot show the folder deleted (the server reaps an empty container node) and
//! made again, whose count starts over. A persistent watch on the folder, in place while the
//! node numbered `s` existed (so before the folder could go), shows it: any event other than
//! the child changes of the client's own delete and create ends the calm. The server sends a
//! watch event before the reply to a later request of the same session, and
//! `zookeeper-client` hands them over in that order, so every event that came before a reply
//! is there to read when the reply is.
//!
//! The watch also tells a holding taken on the fast path of the queue's next change (its own
//! delete, or someone queueing or deleting its node), as the listing's watch does otherwise.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures_util::FutureExt;
use zookeeper_client as zk;

/// At most this many folders are remembered (each is a watch on the server).
const ROOM: usize = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A holding taken on the fast path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) name: String,
    pub(crate) owner: Arc<str>,
    pub(crate) path: String,
    /// The node's creation zxid.
    pub(crate) token: u64,
}

/// Where a remembered folder stands.
#[derive(Debug)]
enum Phase {
    /// Nothing of this client's in it; the next attempt may take the fast path.
    Calm,
    /// An attempt created its node and is reading the events: the folder's task waits.
    Taking,
    /// A holding taken on the fast path.
    Holding(Holder),
    /// The release of that holding (its node's path) is deleting it: the folder's task waits.
    Releasing(String),
}

impl Phase {
    /// Whether the folder's task reads the watch: not while an attempt or a release reads
    /// it itself.
    fn read_by_task(&self) -> bool {
        matches!(self, Phase::Calm | Phase::Holding(_))
    }
}

/// The folder's watch and the number of this client's last node in it.
struct Watched {
    seq: i64,
    events: zk::PersistentWatcher,
    phase: Phase,
}

impl Watched {
    /// The watch's next event if one has come (never waits).
    fn next_now(&mut self) -> Option<zk::WatchedEvent> {
        self.events.changed().now_or_never()
    }

    /// Whether exactly one event came, a child change (the caller's own create or delete).
    /// After any other event the watch is not read again: after a session's last event,
    /// `zookeeper-client` panics on the next read.
    fn only_own_change(&mut self) -> bool {
        match self.next_now() {
            Some(e) if e.event_type == zk::EventType::NodeChildrenChanged => {
                self.next_now().is_none()
            }
            _ => false,
        }
    }
}

#[derive(Default)]
struct SlotState {
    watched: Option<Watched>,
    /// The folder's task, woken when an attempt or a release read the watch in its stead.
    waker: Option<Waker>,
    /// A holding taken on the fast path whose watch ended while it held the lock: the
    /// folder's task has it read its own node instead.
    orphan: Option<Holder>,
}

impl SlotState {
    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Forgets the watch (the server's side goes when the watcher is dropped).
    fn end(&mut self) {
        if let Some(Watched {
            phase: Phase::Holding(holder),
            ..
        }) = self.watched.take()
        {
            self.orphan = Some(holder);
        }
        self.wake();
    }
}

/// One remembered folder. Its task (`Slot::poll_end`) reads the watch while the folder is calm
/// or held on the fast path, and ends the slot at the first event.
#[derive(Default)]
pub(crate) struct Slot(Mutex<SlotState>);

impl Slot {
    /// For the folder's task: ready when the slot ended (at the watch's first event while
    /// the folder is calm or held on the fast path, or by an attempt or a release), with the
    /// holding taken on the fast path that held the lock then, if any.
    pub(crate) fn poll_end(&self, cx: &mut Context<'_>) -> Poll<Option<Holder>> {
        let mut state = lock(&self.0);
        let Some(watched) = state.watched.as_mut() else {
            return Poll::Ready(state.orphan.take());
        };
        if !watched.phase.read_by_task() {
            state.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let polled = std::pin::pin!(watched.events.changed()).poll(cx);
        if polled.is_pending() {
            state.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        state.end();
        Poll::Ready(state.orphan.take())
    }
}

/// A calm folder taken by an attempt: it holds the lock if [`Taken::check`] says so, and
/// [`Taken::hold`] hands the watch to the holding. Dropped before that (the check failed,
/// the create failed, or the future was dropped), the calm ends.
pub(crate) struct Taken {
    slot: Arc<Slot>,
}

impl Taken {
    /// Whether the attempt whose node is numbered `seq` holds the lock: the number follows
    /// the calm's, and the only event since is its create. If not, the calm ends when `self`
    /// is dropped, before the attempt lists the queue.
    pub(crate) fn check(&self, seq: i64) -> bool {
        let mut state = lock(&self.slot.0);
        match state.watched.as_mut() {
            Some(w) if matches!(w.phase, Phase::Taking) => {
                if w.seq.checked_add(1) == Some(seq) && w.only_own_change() {
                    w.seq = seq;
                    return true;
                }
                false
            }
            _ => false,
        }
    }

    /// The checked attempt is a holding now (in the client's holdings): the folder's task
    /// watches for the queue's next change on its behalf. `false` when the calm ended since
    /// the check (another owner of the client listed the folder): the holding must then
    /// watch its own node.
    #[must_use]
    pub(crate) fn hold(self, holder: Holder) -> bool {
        let mut state = lock(&self.slot.0);
        let Some(w) = state.watched.as_mut() else {
            return false;
        };
        w.phase = Phase::Holding(holder);
        state.wake();
        true
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        let mut state = lock(&self.slot.0);
        if state
            .watched
            .as_ref()
            .is_some_and(|w| matches!(w.phase, Phase::Taking))
        {
            state.end();
        }
    }
}

/// The folders of one session whose last holding by this client was alone, and the
/// holdings that may make more (taken alone on the slow path).
#[derive(Default)]
pub(crate) struct Quiet {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    candidates: Mutex<HashSet<String>>,
    /// Whether the server takes persistent watches (ZooKeeper 3.6 and later), as the probe
    /// at the session's start found.
    persistent: AtomicBool,
}

impl Quiet {
    /// Notes a holding (its node's path) that the listing showed alone: its release may make
    /// its folder calm.
    pub(crate) fn candidate(&self, path: &str) {
        let mut candidates = lock(&self.candidates);
        if candidates.len() < ROOM {
            candidates.insert(path.to_owned());
        }
    }

    /// Forgets a holding's node (gone without its release).
    pub(crate) fn forget(&self, path: &str) {
        lock(&self.candidates).remove(path);
    }

    /// Ends `dir`'s calm before this client lists the folder with a watch: ZooKeeper before
    /// 3.9 keeps one watch mode per path and session (ZOOKEEPER-4466), so a listing's
    /// one-shot watch would turn the folder's persistent watch into one that goes at its
    /// next event. Dropping the watcher has `zookeeper-client` remove it on the server, by a
    /// request sent before the listing's.
    pub(crate) fn end(&self, dir: &str) {
        if let Some(slot) = lock(&self.slots).remove(dir) {
            lock(&slot.0).end();
        }
    }

    /// Before the delete of node `path` in `dir` by its release: a holding taken on the fast
    /// path stops its task from reading the watch (the release reads its own delete there);
    /// `true` when a holding taken alone on the slow path should put a watch on the folder
    /// (sent before the delete, while the node keeps the folder from going).
    pub(crate) fn releasing(&self, dir: &str, path: &str) -> bool {
        let slots = lock(&self.slots);
        let Some(slot) = slots.get(dir) else {
            return self.persistent.load(Ordering::Relaxed)
                && slots.len() < ROOM
                && lock(&self.candidates).contains(path);
        };
        let mut state = lock(&slot.0);
        if let Some(w) = state.watched.as_mut() {
            if matches!(&w.phase, Phase::Holding(h) if h.path == path) {
                w.phase = Phase::Releasing(path.to_owned());
            }
        }
        false
    }

    /// Notes whether the server takes persistent watches: without them there is no fast path.
    pub(crate) fn set_persistent(&self, taken: bool) {
        self.persistent.store(taken, Ordering::Relaxed);
    }

    /// A release of node `path` that stopped before it knew the delete's outcome (its future
    /// was dropped): the calm ends, or its watch would go unread.
    pub(crate) fn abandon(&self, dir: &str, path: &str) {
        let slots = lock(&self.slots);
        if let Some(slot) = slots.get(dir) {
            let mut state = lock(&slot.0);
            let releasing = |w: &Watched| matches!(&w.phase, Phase::Releasing(p) if p == path);
            if state.watched.as_ref().is_some_and(releasing) {
                state.end();
            }
        }
    }

    /// Takes the calm of `dir` for an attempt, if it is unbroken.
    pub(crate) fn take(&self, dir: &str) -> Option<Taken> {
        let slot = lock(&self.slots).get(dir)?.clone();
        let mut state = lock(&slot.0);
        let watched = state.watched.as_mut()?;
        if !matches!(watched.phase, Phase::Calm) {
            return None;
        }
        if watched.next_now().is_some() {
            state.end();
            return None;
        }
        watched.phase = Phase::Taking;
        drop(state);
        Some(Taken { slot })
    }

    /// After the release's delete of node `path` (number `seq`) in `dir` (`deleted`: it ran;
    /// `false` also when the node was gone already): the folder is calm if the only event
    /// since the watch began is that delete. `added` is the watch the release put in place
    /// before its delete, for a holding taken alone on the slow path; the new slot is returned
    /// for its task to run.
    pub(crate) fn released(
        &self,
        dir: &str,
        path: &str,
        seq: i64,
        deleted: bool,
        added: Option<zk::PersistentWatcher>,
    ) -> Option<Arc<Slot>> {
        lock(&self.candidates).remove(path);
        if let Some(slot) = lock(&self.slots).get(dir) {
            let mut state = lock(&slot.0);
            let calm = match state.watched.as_mut() {
                Some(w) if matches!(&w.phase, Phase::Releasing(p) if p == path) => {
                    w.phase = Phase::Calm;
                    deleted && w.only_own_change()
                }
                _ => return None,
            };
            match calm {
                true => state.wake(),
                false => state.end(),
            }
            return None;
        }
        if !deleted {
            return None;
        }
        let mut watched = Watched {
            seq,
            events: added?,
            phase: Phase::Calm,
        };
        if !watched.only_own_change() {
            return None;
        }
        let slot = Arc::new(Slot(Mutex::new(SlotState {
            watched: Some(watched),
            ..SlotState::default()
        })));
        lock(&self.slots).insert(dir.to_owned(), slot.clone());
        Some(slot)
    }

    /// Removes `dir`'s slot if it is still `slot` (its task ended).
    pub(crate) fn remove(&self, dir: &str, slot: &Arc<Slot>) {
        let mut slots = lock(&self.slots);
        if slots.get(dir).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            slots.remove(dir);
        }
    }
}
