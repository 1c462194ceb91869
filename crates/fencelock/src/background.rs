//! Work that code which cannot await (a guard's `Drop`, a dropped acquire future, a RedLock
//! operation decided before every server answered) hands to the client's background task.
//!
//! Tracked work is what `Client::close` waits for before a program exits; give-backs that
//! failed on a straggling server are counted, so that `close` can say a server may keep a
//! grant. This module is a leaf: engines and the API both use it, and it uses neither.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

/// A unit of background work.
pub(crate) type Work = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Work as the background task receives it.
pub(crate) struct Job {
    pub(crate) work: Work,
    /// Must run to its end even when the client is gone (a release, an undo); otherwise it is
    /// dropped then (unsubscribing an idle channel).
    pub(crate) keep: bool,
}

/// The sending side: cheap to clone.
#[derive(Clone)]
pub(crate) struct Background {
    tx: mpsc::UnboundedSender<Job>,
    tracker: TaskTracker,
    failures: Arc<AtomicUsize>,
}

impl Background {
    /// The handle, and the receiving side for the task that runs the work.
    pub(crate) fn new() -> (Self, mpsc::UnboundedReceiver<Job>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let background = Self {
            tx,
            tracker: TaskTracker::new(),
            failures: Arc::new(AtomicUsize::new(0)),
        };
        (background, rx)
    }

    /// Runs `work` to its end in the background; `Client::close` waits for it. Fails
    /// quietly when the runtime is gone: then leases simply expire.
    pub(crate) fn finish(&self, work: impl Future<Output = ()> + Send + 'static) {
        let work = Box::pin(self.tracker.track_future(work));
        if let Err(unsent) = self.tx.send(Job { work, keep: true }) {
            // The task has stopped taking work (the client's last handle was just dropped):
            // still tracked, it runs on its own, as long as the runtime does.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(unsent.0.work);
            }
        }
    }

    /// Runs `work` in the background without `close` waiting for it (nothing is lost if it
    /// never runs, e.g. unsubscribing an idle channel after a while).
    // Seam vocabulary: a build without the services that use it leaves it unused.
    #[allow(dead_code)]
    pub(crate) fn linger(&self, work: impl Future<Output = ()> + Send + 'static) {
        let _ = self.tx.send(Job {
            work: Box::pin(work),
            keep: false,
        });
    }

    /// Counts a background give-back that failed, for `Client::close` to report.
    pub(crate) fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// How many background give-backs failed since the last call.
    pub(crate) fn take_failures(&self) -> usize {
        self.failures.swap(0, Ordering::Relaxed)
    }

    /// Waits at most `bound` for the tracked work; returns how much was still under way.
    pub(crate) async fn settle(&self, bound: Duration) -> usize {
        self.tracker.close();
        match tokio::time::timeout(bound, self.tracker.wait()).await {
            Ok(()) => 0,
            Err(_) => self.tracker.len(),
        }
    }
}
