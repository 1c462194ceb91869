//! [`Listing`]: every lock under the client's prefix (Redis: of the deployment), read a page
//! at a time from the service, so that a listing of any size takes bounded memory.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::error::Result;
use crate::shared::Shared;
use crate::status::LockStatus;

/// Every name that has something on the server (a holding or a waiter), with its status,
/// from [`crate::Client::list`]. Call [`Listing::next`] until it returns `None`.
///
/// It only reads: no key, node, lease or place is written. It reads a page of names at a
/// time (Redis: a `SCAN` step, never `KEYS`; ZooKeeper: the base path's children; etcd: a
/// range of keys) and keeps only that page. Names come in the service's order (Redis:
/// none in particular; ZooKeeper and etcd: byte order). Redis's `SCAN` may return a name
/// twice (a rehash, a Cluster's resharding); none is left out that stayed the whole time.
/// Each status is one consistent read of its name, the names are not read at one instant.
pub struct Listing {
    shared: Arc<Shared>,
    page: VecDeque<LockStatus>,
    /// Where the next page starts; `None` once the last page was read.
    cursor: Option<String>,
    started: bool,
}

impl std::fmt::Debug for Listing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listing")
            .field("buffered", &self.page.len())
            .field("cursor", &self.cursor)
            .finish()
    }
}

impl Listing {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            page: VecDeque::new(),
            cursor: None,
            started: false,
        }
    }

    /// The next lock, or `None` when every one was listed. An error ends nothing: the same
    /// page is read again by the next call.
    pub async fn next(&mut self) -> Option<Result<LockStatus>> {
        loop {
            if let Some(status) = self.page.pop_front() {
                return Some(Ok(status));
            }
            if self.started && self.cursor.is_none() {
                return None;
            }
            let page = match self.shared.service.list(self.cursor.as_deref()).await {
                Ok(page) => page,
                Err(e) => return Some(Err(e)),
            };
            self.started = true;
            self.cursor = page.next;
            self.page.extend(
                page.statuses
                    .into_iter()
                    .map(|(name, raw)| LockStatus::from_raw(&name, raw)),
            );
        }
    }
}
