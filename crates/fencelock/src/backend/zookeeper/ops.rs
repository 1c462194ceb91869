//! Releases, status and forced unlocks.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use zookeeper_client as zk;

use super::{recipe, Inner, SERVICE};
use crate::backend::holdings::Holdings;
use crate::backend::holdings::{Closing, Sessioned};
use crate::backend::{RawStatus, Released};
use crate::background::Background;
use crate::error::Error;
use crate::status::Waiter;

/// The lock's children, read together with their data.
struct Children {
    /// `(path, owner id from the data, stat)` in queue order.
    nodes: Vec<(String, String, zk::Stat)>,
}

impl Sessioned for Inner {
    type Fault = zk::Error;

    fn holdings(&self) -> &Holdings {
        &self.holdings
    }

    fn background(&self) -> &Background {
        &self.background
    }

    fn ended(&self) -> bool {
        self.session.ended.is_cancelled()
    }

    async fn delete_holding(self: Arc<Self>, closing: Closing) -> Result<Released, zk::Error> {
        self.delete_entry(&closing).await
    }

    fn fail_on(&self, lock: &str, fault: zk::Error) -> Error {
        self.fail(Some(lock), fault)
    }
}

impl Inner {
    /// Deletes a closing holding's node and, once it is gone (also with the session that
    /// ended), ends the holding. The folder may be left calm for the owner's next attempt
    /// (see `quiet`): a holding that the listing showed alone first puts a persistent watch
    /// on the folder, sent right before the delete (the node keeps the folder from going
    /// until then), in the same round trip.
    async fn delete_entry(self: &Arc<Self>, closing: &Closing) -> Result<Released, zk::Error> {
        let path = &closing.path;
        let dir = path.rsplit_once('/').map_or("/", |(dir, _)| dir);
        let sent = Instant::now();
        let watch = self
            .quiet
            .releasing(dir, path)
            .then(|| self.session.zk.watch(dir, zk::AddWatchMode::Persistent));
        let mut abandoned = Abandoned {
            inner: self,
            dir,
            path,
            armed: true,
        };
        let added = async {
            match watch {
                Some(watch) => self.session.answer(sent, watch).await.ok(),
                None => None,
            }
        };
        let (deleted, added) = tokio::join!(self.delete(path), added);
        abandoned.armed = false;
        let seq = recipe::seq_of(path);
        if let Some(slot) = self
            .quiet
            .released(dir, path, seq, deleted == Ok(true), added)
        {
            self.watch_folder(dir.to_owned(), slot);
        }
        let deleted = match deleted {
            Err(_) if self.session.ended.is_cancelled() => Ok(false),
            deleted => deleted,
        };
        self.holdings.settle(closing, deleted)
    }

    /// Deletes a holding's node: `Ok(false)` when it is gone already (force-unlocked, or with
    /// the session that ended).
    async fn delete(&self, path: &str) -> Result<bool, zk::Error> {
        match self.session.call(|zk| zk.delete(path, None)).await {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode | zk::Error::SessionExpired | zk::Error::ClientClosed) => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// `Lock::release`: the owner's newest hold in this client. A holding of this owner id in
    /// another session cannot be released from here (typed error); none is `NotHeld`.
    pub(super) async fn release_owner(
        self: &Arc<Self>,
        name: &str,
        owner: &Arc<str>,
    ) -> Result<Released, Error> {
        if self.holdings.holds(name, owner) {
            return self.give_back(name, owner, None).await;
        }
        let children = self.children(name).await?;
        match children.nodes.first() {
            Some((_, holder, stat))
                if **holder == **owner && stat.ephemeral_owner != self.session.id =>
            {
                Err(Error::Unsupported {
                    service: SERVICE,
                    what: "releasing a lock that another ZooKeeper session holds",
                    why: "the lock is an ephemeral node of the holder's session; only that \
                          client releases it (or Client::force_unlock deletes it)",
                })
            }
            _ => Ok(Released::NotHeld),
        }
    }

    /// The lock's children in queue order with their data, read in one multi-read; a node
    /// deleted between the listing and the read is left out.
    ///
    /// The listing follows a `sync`, sent in the same round trip: a session reads from its
    /// own member of the ensemble, which may not have applied yet what another client's
    /// acknowledged write did (an attempt undone, a lock released), and status, release by
    /// owner and force-unlock must see the lock as it is.
    async fn children(&self, name: &str) -> Result<Children, Error> {
        let dir = self.dir(name);
        let fail = |e| self.fail(Some(name), e);
        let listed = self.session.call(|zk| {
            // Both are sent now, in this order; the session answers them in order.
            let synced = zk.sync("/");
            let listed = zk.list_children(&dir);
            async move {
                synced.await?;
                listed.await
            }
        });
        let listed = match listed.await {
            Err(zk::Error::NoNode) => Vec::new(),
            other => other.map_err(fail)?,
        };
        let paths: Vec<String> = recipe::sorted(listed)
            .into_iter()
            .map(|c| format!("{dir}/{c}"))
            .collect();
        if paths.is_empty() {
            return Ok(Children { nodes: Vec::new() });
        }
        let read = self
            .session
            .call(|zk| {
                let mut reader = zk.new_multi_reader();
                for path in &paths {
                    // Paths built from a checked name and a listed child are valid.
                    let _ = reader.add_get_data(path);
                }
                reader.commit()
            })
            .await
            .map_err(fail)?;
        let nodes = paths
            .into_iter()
            .zip(read)
            .filter_map(|(path, result)| match result {
                zk::MultiReadResult::Data { data, stat } => {
                    Some((path, String::from_utf8_lossy(&data).into_owned(), stat))
                }
                _ => None,
            })
            .collect();
        Ok(Children { nodes })
    }

    /// The holder (owner id, hold count if this client holds it, token) and the waiters.
    pub(super) async fn status(&self, name: &str) -> Result<RawStatus, Error> {
        let children = self.children(name).await?;
        let mut nodes = children.nodes.into_iter();
        let Some((path, owner, stat)) = nodes.next() else {
            return Ok(RawStatus {
                remaining: None,
                held: false,
                last_token: None,
                current_token: None,
                owners: Vec::new(),
                waiters: Vec::new(),
            });
        };
        let count = self.holdings.count(name, &path).unwrap_or(1);
        let token = u64::try_from(stat.czxid).ok();
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let waiters = nodes
            .map(|(_, owner, stat)| Waiter {
                owner,
                age: Duration::from_millis(now_ms.saturating_sub(stat.ctime).max(0) as u64),
                window: Duration::ZERO,
                remaining: Duration::ZERO,
                expired: false,
                unreadable: None,
            })
            .collect();
        Ok(RawStatus {
            remaining: None,
            held: true,
            last_token: token,
            current_token: token,
            owners: vec![(owner, count)],
            waiters,
        })
    }

    /// Deletes the holder's node; the next waiter's watch fires and it takes the lock.
    pub(super) async fn force_unlock(&self, name: &str) -> Result<Vec<(String, u64)>, Error> {
        let children = self.children(name).await?;
        let Some((path, owner, _)) = children.nodes.into_iter().next() else {
            return Ok(Vec::new());
        };
        match self.session.call(|zk| zk.delete(&path, None)).await {
            Ok(()) => Ok(vec![(owner, 1)]),
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(self.fail(Some(name), e)),
        }
    }
}

/// A release's delete whose outcome will not be read (the future was dropped): the calm of
/// its folder ends (see `Quiet::abandon`).
struct Abandoned<'a> {
    inner: &'a Inner,
    dir: &'a str,
    path: &'a str,
    /// Cleared once the outcome was read.
    armed: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.inner.quiet.abandon(self.dir, self.path);
        }
    }
}
