//! A client's current session (ZooKeeper) or lease (etcd), replaced by a new one once it has
//! ended, so that a client outlives an expiry as Curator's does: the holds of the ended one
//! were told at once (their `lost()` fired), and the next operation opens the next one.

use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::error::Error;

/// What can end: a session or a lease, with what lives in it.
pub(crate) trait Ends {
    /// Whether it has ended (expired, revoked or closed) for good.
    fn has_ended(&self) -> bool;
    /// Stops its background work (keep-alives, watches).
    fn stop(&self);
}

/// The current one, and the lock that lets only one operation open the next.
pub(crate) struct Current<T> {
    now: Mutex<Arc<T>>,
    reopening: tokio::sync::Mutex<()>,
}

impl<T: Ends> Current<T> {
    pub(crate) fn new(first: Arc<T>) -> Self {
        Self {
            now: Mutex::new(first),
            reopening: tokio::sync::Mutex::new(()),
        }
    }

    /// The current one, as it is (ended or not): releases and status use it, since a hold of
    /// an ended one is in no later one's holdings.
    pub(crate) fn now(&self) -> Arc<T> {
        self.now.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The current one, or, if it has ended, the next one that `open` makes.
    pub(crate) async fn live<F, Fut>(&self, open: F) -> Result<Arc<T>, Error>
    where
        F: FnOnce(Arc<T>) -> Fut,
        Fut: Future<Output = Result<Arc<T>, Error>>,
    {
        let now = self.now();
        if !now.has_ended() {
            return Ok(now);
        }
        let _one = self.reopening.lock().await;
        let now = self.now();
        if !now.has_ended() {
            return Ok(now);
        }
        let fresh = open(now.clone()).await?;
        now.stop();
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = fresh.clone();
        Ok(fresh)
    }
}
