//! A client's current session (ZooKeeper) or lease (etcd), replaced by a new one once it has
//! ended, so that a client outlives an expiry as Curator's does: the holds of the ended one
//! were told at once (their `lost()` fired), and the next operation opens the next one.

use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::background::Background;
use crate::error::{Error, Warning};
use crate::options::ClientOptions;

/// A session or a lease, with what lives in it.
pub(crate) trait Ends: Sized + Send + Sync {
    /// Where it is opened (the servers, the base path or prefix).
    type Target: Send + Sync;
    /// What it is, for logs: "ZooKeeper session", "etcd lease".
    const WHAT: &'static str;
    /// Opens one, with warnings for the caller of `connect`; its work that must outlive a
    /// call goes to the client's background task (`Opening::background`).
    fn open(
        at: &Opening<Self::Target>,
    ) -> impl Future<Output = Result<(Arc<Self>, Vec<Warning>), Error>> + Send;
    /// Whether it has ended (expired, revoked or closed) for good.
    fn has_ended(&self) -> bool;
    /// Stops its background work (keep-alives, watches).
    fn stop(&self);
    /// Its id, for logs.
    fn id(&self) -> i64;
}

/// What opens a session or lease: where, with the client's options, and the client's
/// background task.
pub(crate) struct Opening<T> {
    pub(crate) target: T,
    pub(crate) options: ClientOptions,
    pub(crate) background: Background,
}

/// The current one, what opens the next, and the lock that lets only one operation open it.
pub(crate) struct Current<T: Ends> {
    now: Mutex<Arc<T>>,
    reopening: tokio::sync::Mutex<()>,
    opening: Opening<T::Target>,
}

impl<T: Ends> Current<T> {
    /// Opens the first one.
    pub(crate) async fn open(opening: Opening<T::Target>) -> Result<(Self, Vec<Warning>), Error> {
        let (first, warnings) = T::open(&opening).await?;
        let current = Self {
            now: Mutex::new(first),
            reopening: tokio::sync::Mutex::new(()),
            opening,
        };
        Ok((current, warnings))
    }

    /// The client's background task.
    pub(crate) fn background(&self) -> &Background {
        &self.opening.background
    }

    /// The current one, as it is (ended or not): releases use it, since a hold of an ended
    /// one is in no later one's holdings.
    pub(crate) fn now(&self) -> Arc<T> {
        self.now.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The current one, or, if it has ended, the next one.
    pub(crate) async fn live(&self) -> Result<Arc<T>, Error> {
        let now = self.now();
        if !now.has_ended() {
            return Ok(now);
        }
        let _one = self.reopening.lock().await;
        let now = self.now();
        if !now.has_ended() {
            return Ok(now);
        }
        let (fresh, _) = T::open(&self.opening).await?;
        tracing::info!(
            old = format_args!("{:#x}", now.id()),
            new = format_args!("{:#x}", fresh.id()),
            "{} ended; opened a new one",
            T::WHAT
        );
        now.stop();
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = fresh.clone();
        Ok(fresh)
    }
}

impl<T: Ends> Drop for Current<T> {
    fn drop(&mut self) {
        self.now().stop();
    }
}
