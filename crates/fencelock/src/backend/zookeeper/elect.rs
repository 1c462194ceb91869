//! Elections on ZooKeeper, in Curator's `LeaderLatch` layout: the leader (the lowest
//! `-latch-` node of the election's folder, its data the value, its `czxid` the term), a
//! leader's value rewritten on its own node, and a task that follows the leader with watches.
//!
//! ZooKeeper's watches tell that something changed, not what: the follower reads the folder
//! and the head's node again after each event, so a leader that came and went between two
//! reads is not seen; what it reports is in order (each report comes from a read after the
//! one before it) and terms only grow. Through a connection loss the session's watches are
//! set again by the client; the follower ends with an error when the session ends, or when
//! it was not heard from within its timeout (events may have been missed), and
//! `Observer::changed` then follows anew.

use std::sync::Arc;

use tokio::sync::mpsc;
use zookeeper_client as zk;

use super::recipe::{self, Mark};
use super::session::Session;
use super::{Inner, RETRY};
use crate::backend::session_service::{Listed, SessionLocks};
use crate::backend::{Feed, Leader};
use crate::error::Error;

/// How many reports a follower keeps for a reader that lags (the core keeps only changes).
const FEED_ROOM: usize = 16;

/// Why a follower stops when its session was not heard from in time.
const UNHEARD: &str = "not heard from within the session timeout (the session may have expired)";

/// The election's head as read: its path, its data and its stat.
struct Head {
    path: String,
    data: Vec<u8>,
    stat: zk::Stat,
}

impl Inner {
    /// The lowest `-latch-` node of election `name` and its data, listed after a `sync` (as
    /// status does: the session's server may lag behind another client's write). A head
    /// deleted between the listing and the read: listed again.
    pub(super) async fn leader_entry(&self, name: &str) -> Result<Option<Listed>, Error> {
        let dir = self.dir(name);
        loop {
            let listed = self.session.call(|zk| {
                let synced = zk.sync("/");
                let listed = zk.list_children(&dir);
                async move {
                    synced.await?;
                    listed.await
                }
            });
            let children = match listed.await {
                Err(zk::Error::NoNode) => return Ok(None),
                other => other.map_err(|e| self.fail(Some(name), e))?,
            };
            let Some(first) = recipe::sorted(children, Mark::Latch).into_iter().next() else {
                return Ok(None);
            };
            let path = format!("{dir}/{first}");
            match self.session.call(|zk| zk.get_data(&path)).await {
                Ok((data, stat)) => return Ok(Some(listed_head(Head { path, data, stat }))),
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(self.fail(Some(name), e)),
            }
        }
    }

    /// Sets the data of the holding's node `path`, any version: `Ok(false)` when the node is
    /// gone (deleted, or with the session). The path names this session's own node (its
    /// GUID), which nobody else creates.
    pub(super) async fn set_value(&self, path: &str, value: &str) -> Result<bool, zk::Error> {
        match self
            .session
            .call(|zk| zk.set_data(path, value.as_bytes(), None))
            .await
        {
            Ok(_) => Ok(true),
            Err(zk::Error::NoNode | zk::Error::SessionExpired | zk::Error::ClientClosed) => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Starts the follower of election `name` in this session.
    pub(super) fn follow(self: &Arc<Self>, name: &str) -> Feed {
        let (tx, rx) = mpsc::channel(FEED_ROOM);
        let follower = Follower {
            session: self.session.clone(),
            dir: self.dir(name),
            name: name.to_owned(),
            tx,
        };
        tokio::spawn(follower.run());
        rx
    }
}

/// A head as the session service reads entries.
fn listed_head(head: Head) -> Listed {
    Listed {
        reader: false,
        path: head.path,
        owner: String::from_utf8_lossy(&head.data).into_owned(),
        session: head.stat.ephemeral_owner,
        token: head.stat.czxid,
        age: std::time::Duration::ZERO,
    }
}

/// What ended one look at the election.
enum Step {
    /// Look again (after a watch fired, or a connection loss).
    Again,
    /// Stop: the receiver is gone, or the error was sent.
    Stop,
}

/// The task that follows one election's leader.
struct Follower {
    session: Arc<Session>,
    dir: String,
    name: String,
    tx: mpsc::Sender<Result<Option<Leader>, Error>>,
}

impl Follower {
    /// Looks until the receiver is dropped (quietly), or until it cannot follow: the session
    /// ended, the client stopped it, or it was not heard from within its timeout (it may have
    /// expired: what the follower last reported may be stale). Then it sends the error.
    async fn run(self) {
        let session = &self.session;
        let (mut synced, mut heard) = (false, false);
        loop {
            let step = tokio::select! {
                step = self.look(&mut synced) => step,
                () = self.tx.closed() => Step::Stop,
                () = session.holds.ended.cancelled() => self.end("the session ended").await,
                () = session.stopped() => self.end("the client closed its session").await,
                () = self.unheard(&mut heard) => self.end(UNHEARD).await,
            };
            if let Step::Stop = step {
                return;
            }
        }
    }

    /// Resolves once the session was not heard from within its timeout (minus the drift),
    /// after it was heard from while this follower ran (`heard`). A follower started in a
    /// session that is unheard but has not ended (the client keeps handing it out until it
    /// ends) waits for it to be heard again, looking meanwhile, rather than stop at once: a
    /// caller that follows anew after the error would otherwise spin until then.
    async fn unheard(&self, heard: &mut bool) {
        let every = (self.session.timeout / 4).max(std::time::Duration::from_millis(10));
        loop {
            let live = self.session.holds.is_live();
            if *heard && !live {
                return;
            }
            *heard |= live;
            tokio::time::sleep(every).await;
        }
    }

    /// The follower cannot follow any more: sends why.
    async fn end(&self, why: &str) -> Step {
        let error = Error::Unavailable {
            lock: Some(self.name.clone()),
            server: self.session.server.clone(),
            detail: format!("ZooKeeper: {why}: the election's follower stopped"),
        };
        let _ = self.tx.send(Err(error)).await;
        Step::Stop
    }

    /// A failed request: looked at again after a pause when it was the connection and the
    /// session has not ended (its watches are set again when it reconnects; one unheard for
    /// too long is `unheard`'s to stop), else the error is sent.
    async fn failed(&self, e: zk::Error) -> Step {
        if recipe::connection_lost(&e) && !self.session.holds.ended.is_cancelled() {
            tokio::time::sleep(RETRY).await;
            return Step::Again;
        }
        self.end(&e.to_string()).await
    }

    /// Sends what was read; `false` when the receiver is gone.
    async fn report(&self, leader: Option<Leader>) -> bool {
        self.tx.send(Ok(leader)).await.is_ok()
    }

    /// One look: lists the folder with a watch (or waits for the folder to be made), reads
    /// the head with a watch, reports, and waits for either watch. Until a listing was
    /// answered (`synced`), a `sync` goes before it in the same round trip, as for
    /// `leader_entry`: the session's server may lag behind the quorum, and a new follower
    /// would otherwise report a deposed leader first. Later looks follow watches, which the
    /// server fires only once it has applied the change; a session that moves to another
    /// server never sees older state than it saw.
    async fn look(&self, synced: &mut bool) -> Step {
        let sync = !*synced;
        let listed = self
            .session
            .call(|zk| {
                let synced = sync.then(|| zk.sync("/"));
                let listed = zk.list_and_watch_children(&self.dir);
                async move {
                    if let Some(synced) = synced {
                        synced.await?;
                    }
                    listed.await
                }
            })
            .await;
        if !matches!(listed, Err(ref e) if recipe::connection_lost(e)) {
            *synced = true;
        }
        let (children, folder) = match listed {
            Ok(listed) => listed,
            Err(zk::Error::NoNode) => return self.no_folder().await,
            Err(e) => return self.failed(e).await,
        };
        let Some(first) = recipe::sorted(children, Mark::Latch).into_iter().next() else {
            if !self.report(None).await {
                return Step::Stop;
            }
            folder.changed().await;
            return Step::Again;
        };
        let path = format!("{}/{first}", self.dir);
        let read = self.session.call(|zk| zk.get_and_watch_data(&path)).await;
        let (data, stat, node) = match read {
            Ok(read) => read,
            // Deleted since the listing: the folder's watch fires (or has).
            Err(zk::Error::NoNode) => {
                folder.changed().await;
                return Step::Again;
            }
            Err(e) => return self.failed(e).await,
        };
        let Some(leader) = as_leader(&data, &stat) else {
            return self
                .failed(zk::Error::UnexpectedError("a negative czxid".into()))
                .await;
        };
        if !self.report(Some(leader)).await {
            return Step::Stop;
        }
        self.wait(folder, node).await
    }

    /// Waits for the folder's watch or the head's; after the head's, the value may have
    /// changed (a proclaim) or the head gone, which the folder's watch tells too: both are
    /// read again either way.
    async fn wait(&self, folder: zk::OneshotWatcher, node: zk::OneshotWatcher) -> Step {
        let folder = folder.changed();
        let node = node.changed();
        tokio::pin!(folder, node);
        tokio::select! {
            _ = &mut folder => {}
            event = &mut node => {
                if event.event_type == zk::EventType::NodeDeleted {
                    // The folder's watch fires for the same delete: wait for it so that the
                    // next look does not find the folder watched twice.
                    folder.await;
                }
            }
        }
        Step::Again
    }

    /// The folder does not exist (a container goes when empty): reports nobody, and waits
    /// for its creation (a watch on its existence).
    async fn no_folder(&self) -> Step {
        let exists = self
            .session
            .call(|zk| zk.check_and_watch_stat(&self.dir))
            .await;
        match exists {
            Ok((Some(_), _watch)) => Step::Again,
            Ok((None, watch)) => {
                if !self.report(None).await {
                    return Step::Stop;
                }
                watch.changed().await;
                Step::Again
            }
            Err(e) => self.failed(e).await,
        }
    }
}

/// A head's data and stat as a leader: `None` when the czxid is not a zxid.
fn as_leader(data: &[u8], stat: &zk::Stat) -> Option<Leader> {
    Some(Leader {
        value: String::from_utf8_lossy(data).into_owned(),
        term: u64::try_from(stat.czxid).ok()?,
    })
}
