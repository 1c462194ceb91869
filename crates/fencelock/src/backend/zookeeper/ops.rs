//! What the shared session service (`super::super::session_service`) asks of ZooKeeper
//! beside acquiring: a holding's node deleted (leaving its folder calm for the fast path),
//! and the lock's children in queue order with their data.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use zookeeper_client as zk;

use super::{recipe, Inner};
use crate::backend::holdings::Closing;
use crate::backend::session_service::{Listed, SessionLocks};
use crate::backend::Released;
use crate::error::Error;

impl Inner {
    /// Deletes a closing holding's node and, once it is gone (also with the session that
    /// ended), ends the holding. The folder may be left calm for the owner's next attempt
    /// (see `quiet`): a holding that the listing showed alone first puts a persistent watch
    /// on the folder, sent right before the delete (the node keeps the folder from going
    /// until then), in the same round trip.
    pub(super) async fn delete_entry(
        self: &Arc<Self>,
        closing: &Closing,
    ) -> Result<Released, zk::Error> {
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
        // A semaphore's last lease takes its folders and N with it (`semaphore::tidy`).
        let tidy = async {
            if let Some(semaphore) = super::semaphore::lease_of(path) {
                super::semaphore::tidy(&self.session, semaphore).await;
            }
        };
        let (deleted, added, ()) = tokio::join!(self.delete(path), added, tidy);
        abandoned.armed = false;
        let seq = recipe::seq_of(path);
        if let Some(slot) = self
            .quiet
            .released(dir, path, seq, deleted == Ok(true), added)
        {
            self.watch_folder(dir.to_owned(), slot);
        }
        let deleted = match deleted {
            Err(_) if self.session.holds.ended.is_cancelled() => Ok(false),
            deleted => deleted,
        };
        self.session.holds.holdings.settle(closing, deleted)
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

    /// The lock's children in queue order with their data, read in one multi-read; a node
    /// deleted between the listing and the read is left out. Both kinds count (`-lock-` and
    /// `-latch-`: a name is one kind at a time), so status shows an election's leader as the
    /// holder and a forced unlock deposes it.
    ///
    /// The listing follows a `sync`, sent in the same round trip: a session reads from its
    /// own member of the ensemble, which may not have applied yet what another client's
    /// acknowledged write did (an attempt undone, a lock released), and status, release by
    /// owner and force-unlock must see the lock as it is.
    pub(super) async fn children(&self, name: &str) -> Result<Vec<Listed>, Error> {
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
        if listed.iter().any(|c| c == "leases") {
            return self.semaphore_listing(name, &dir).await;
        }
        let paths: Vec<String> = recipe::sorted_all(listed)
            .into_iter()
            .map(|c| format!("{dir}/{c}"))
            .collect();
        let readers =
            |path: &str| matches!(recipe::Mark::of_child(path), Some((recipe::Mark::Read, _)));
        self.read_entries(paths, readers).await.map_err(fail)
    }

    /// The nodes `paths` with their data, read in one multi-read; a node deleted since it
    /// was listed is left out. `shares(path)`: the entry shares with those around it (a
    /// reader, a semaphore's held lease).
    pub(super) async fn read_entries(
        &self,
        paths: Vec<String>,
        shares: impl Fn(&str) -> bool,
    ) -> Result<Vec<Listed>, zk::Error> {
        if paths.is_empty() {
            return Ok(Vec::new());
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
            .await?;
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let listed = paths.into_iter().zip(read).filter_map(|(path, result)| {
            let zk::MultiReadResult::Data { data, stat } = result else {
                return None;
            };
            let reader = shares(&path);
            Some(Listed {
                path,
                reader,
                owner: String::from_utf8_lossy(&data).into_owned(),
                session: stat.ephemeral_owner,
                token: stat.czxid,
                age: Duration::from_millis(now_ms.saturating_sub(stat.ctime).max(0) as u64),
            })
        });
        Ok(listed.collect())
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
