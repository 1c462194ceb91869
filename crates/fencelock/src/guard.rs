//! Guards: proof of holding a lock, its fencing token and its lost-lock signal.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::backend::Released;
use crate::error::Result;
use crate::lease::{LeaseState, LostReason};
use crate::options::validate_lease;
use crate::shared::Shared;

/// A held lock.
///
/// Give it back with [`Guard::release`]. A guard dropped without `release` is released in the
/// background when a tokio runtime is still running the client's task; otherwise its lease
/// simply expires (at most one lease later). Either way the watchdog stops renewing it.
#[must_use = "dropping a guard releases the lock in the background at once; hold it while you work"]
pub struct Guard {
    client: Arc<Shared>,
    state: Arc<LeaseState>,
    count: u64,
    done: bool,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("lock", &self.state.hold.lock.name)
            .field("owner", &self.state.hold.owner)
            .field("fencing_token", &self.state.hold.token)
            .field("hold_count", &self.count)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Guard {
    pub(crate) fn new(client: Arc<Shared>, state: Arc<LeaseState>, count: u64) -> Self {
        Self {
            client,
            state,
            count,
            done: false,
        }
    }

    /// The hold's lease state, and the client it lives in.
    pub(crate) fn parts(&self) -> (&Arc<Shared>, &Arc<LeaseState>) {
        (&self.client, &self.state)
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.state.hold.lock.name
    }

    /// The owner id that holds the lock.
    pub fn owner(&self) -> &str {
        &self.state.hold.owner
    }

    /// The fencing token: it strictly increases from one holding of this lock name to the
    /// next, so the protected resource can reject writes carrying an older token. Re-entries
    /// share the token of the first entry.
    pub fn fencing_token(&self) -> u64 {
        self.state.hold.token
    }

    /// The owner's hold count right after this acquisition (1 for a first entry).
    pub fn hold_count(&self) -> u64 {
        self.count
    }

    /// The lease this guard was acquired with.
    pub fn lease(&self) -> Duration {
        self.state.hold.lease
    }

    /// Whether the watchdog renews this guard's lease.
    pub fn is_renewed(&self) -> bool {
        self.state.hold.renew
    }

    /// Resolves when the lock is no longer safely held: a renewal found another owner or no
    /// key, or the lease deadline (measured on the monotonic clock from when the acquire
    /// request was sent, minus the drift margin) passed without a successful renewal. Also
    /// resolves once the guard is released.
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.state.token().cancelled()
    }

    /// A token cancelled when [`Guard::lost`] would resolve, to hand to other tasks.
    pub fn lost_token(&self) -> CancellationToken {
        self.state.token().child_token()
    }

    /// Why the lost-lock signal fired, if it did (`Display` says it in a sentence).
    pub fn lost_reason(&self) -> Option<LostReason> {
        if self.state.token().is_cancelled() {
            self.state.reason()
        } else {
            None
        }
    }

    /// Whether the lock is still safely held, from local state only (no round trip).
    pub fn is_held(&self) -> bool {
        self.state.is_held()
    }

    /// How long the lock is certainly still held, if it is.
    pub fn remaining_validity(&self) -> Option<Duration> {
        if !self.is_held() {
            return None;
        }
        let deadline = self.state.times().deadline;
        Some(deadline.saturating_duration_since(Instant::now()))
    }

    /// Extends the lease to at least `lease` from now (it never shortens it). Fails with
    /// [`crate::Error::LockLost`] if the lock is no longer held. `lease` is checked as a
    /// lock's lease is (bounds, whole milliseconds, longer than the clock-drift margin),
    /// before any I/O. On ZooKeeper and etcd a lock lasts as long as the client's session
    /// (or lease), and this fails with [`crate::Error::Unsupported`].
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        validate_lease(lease)?;
        self.client.ctx.options.validate_drift(lease)?;
        if !self.state.is_held() {
            return Err(self.state.lost_error());
        }
        let sent = Instant::now();
        let renewal = self.client.service.extend(&self.state, lease).await?;
        let watchdog = &self.client.ctx.watchdog;
        watchdog.extended(&self.state, renewal, sent, lease)
    }

    /// Gives back this guard's hold. Reports whether the lock is now free, still held by this
    /// owner (re-entry), or was not held any more (it had been lost).
    ///
    /// The release names this guard's hold: a guard whose lock was lost and taken again (by
    /// this owner too) never gives back the newer holding. A release that fails (the server
    /// is away) is not forgotten: on Redis the owner's next attempt on this lock gives the
    /// hold back first; on ZooKeeper and etcd the node or key is deleted again in the
    /// background, and the holding is never re-entered meanwhile. The lease (session) ends it
    /// at the latest.
    pub async fn release(mut self) -> Result<Released> {
        self.state.finish();
        let client = &self.client;
        let result = client.service.release(&client.ctx, &self.state).await;
        tracing::debug!(lock = %self.state.hold.lock.name, ?result, "release");
        // Until the server has answered, the hold may still be there: a release that failed
        // on the way, or whose future was dropped, is given back by `Drop` in the background
        // (and by the owner's next attempt on the lock, which carries its id).
        if !in_doubt(&result) {
            self.done = true;
        }
        result
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.state.finish();
        let client = &self.client;
        client
            .service
            .clone()
            .release_later(&client.ctx, &self.state);
    }
}

/// Whether a release's outcome leaves the hold possibly in place (the request may not have
/// reached the server, or not a majority of them).
fn in_doubt(result: &Result<Released>) -> bool {
    match result {
        // Refused (e.g. a password changed since, met by a reconnection): the hold stays.
        Err(
            crate::Error::Unavailable { .. }
            | crate::Error::Denied { .. }
            | crate::Error::Quorum { .. },
        ) => true,
        _ => false,
    }
}
