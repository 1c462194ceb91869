//! What `status` and a listing read of ZooKeeper's layout (read only): the kind a lock's
//! folder is used as (by its nodes' marks, or a semaphore's `leases`/`locks` folders), a
//! semaphore's stored N (the folder's data), and the names below the base path, a page at a
//! time. A node records when it was created (`ctime`), which is when its entry was queued:
//! status says "queued at", since no node records when its holding was granted.

use zookeeper_client as zk;

use super::recipe::Mark;
use super::Inner;
use crate::backend::session_service::{Listed, SessionLocks};
use crate::error::Error;
use crate::status::LockKind;

/// How many names one page of a listing holds.
const PAGE: usize = 500;

impl Inner {
    /// The kind lock `name`'s entries say it is used as.
    pub(super) fn entry_kind(&self, name: &str, entries: &[Listed]) -> Option<LockKind> {
        let dir = self.dir(name);
        let first = entries.first()?;
        let child = first.path.strip_prefix(&dir)?.trim_start_matches('/');
        if child.starts_with("leases/") || child.starts_with("locks/") {
            return Some(LockKind::Semaphore);
        }
        match Mark::of_child(child)?.0 {
            Mark::Lock => Some(LockKind::Mutex),
            Mark::Latch => Some(LockKind::Election),
            Mark::Read | Mark::Write => Some(LockKind::ReadWrite),
            Mark::Lease => Some(LockKind::Semaphore),
        }
    }

    /// Semaphore `name`'s N, as its folder's data stores it.
    pub(super) async fn folder_permits(&self, name: &str) -> Result<Option<u32>, Error> {
        let dir = self.dir(name);
        match self.session.call(|zk| zk.get_data(&dir)).await {
            Ok((data, _)) => Ok(std::str::from_utf8(&data)
                .ok()
                .and_then(|s| s.trim().parse().ok())),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(self.fail(Some(name), e)),
        }
    }

    /// A page of the names below the base path, in byte order, after `cursor` (the last
    /// name of the previous page). ZooKeeper lists a folder's children in one reply.
    pub(super) async fn folder_names(
        &self,
        cursor: Option<&str>,
    ) -> Result<(Vec<String>, Option<String>), Error> {
        let base = self.base.clone();
        let mut names = match self.session.call(|zk| zk.list_children(&base)).await {
            Ok(names) => names,
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(self.fail(None, e)),
        };
        names.retain(|n| cursor.is_none_or(|c| n.as_str() > c));
        names.sort_unstable();
        names.truncate(PAGE + 1);
        let next = match names.len() > PAGE {
            true => {
                names.truncate(PAGE);
                names.last().cloned()
            }
            false => None,
        };
        Ok((names, next))
    }
}
