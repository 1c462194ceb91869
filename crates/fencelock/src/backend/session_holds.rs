//! The clock and the holds of one client session (a ZooKeeper session, an etcd lease): when
//! the server was last heard from and so when every hold of the session counts as lost, the
//! holds kept weakly, their deadlines moved forward when the session is heard from, and all
//! of them lost at once when the session ends; and the session's holdings
//! (`super::holdings`).
//!
//! The server expires a session when it has heard nothing for the session's length, counted
//! from when it *received* a request (a keep-alive, on etcd). The client cannot see that
//! moment, so it bounds it from below: `heard` is the *send* time of the last request the
//! server answered, and every hold of the session is lost at `heard + length - drift`.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::holdings::Holdings;
use super::{Ctx, LockRequest};
use crate::lease::{Hold, LeaseState, LostReason};

/// A session's clock and its holds, weakly: a guard dropped without release leaves nothing
/// here.
pub(crate) struct SessionHolds {
    inner: Mutex<Inner>,
    /// The session's length (ZooKeeper's negotiated timeout, etcd's granted TTL).
    pub(crate) length: Duration,
    drift: Duration,
    heard: Mutex<Instant>,
    /// Cancelled when the session expired, was revoked or closed (terminal).
    pub(crate) ended: CancellationToken,
    /// Its holdings: re-entry, counted in the client per (lock, owner).
    pub(crate) holdings: Holdings,
}

#[derive(Default)]
struct Inner {
    all: Vec<Weak<LeaseState>>,
    /// Finished holds are swept out when the list reaches this length.
    sweep_at: usize,
    /// The session ended: holds registered from now on are lost at once.
    ended: bool,
}

impl SessionHolds {
    /// A session of `length`, opened by a request sent at `sent`, whose deadlines keep
    /// `drift` off the server's count.
    pub(crate) fn new(sent: Instant, length: Duration, drift: Duration) -> Self {
        Self {
            inner: Mutex::default(),
            length,
            drift,
            heard: Mutex::new(sent),
            ended: CancellationToken::new(),
            holdings: Holdings::default(),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A hold of this session; lost at once if the session already ended.
    pub(crate) fn register(&self, lease: &Arc<LeaseState>) {
        let mut inner = self.inner();
        if inner.all.len() >= inner.sweep_at.max(64) {
            inner
                .all
                .retain(|l| l.upgrade().is_some_and(|l| !l.is_finished()));
            inner.sweep_at = 2 * inner.all.len();
        }
        inner.all.push(Arc::downgrade(lease));
        if inner.ended {
            drop(inner);
            lease.fire_lost(LostReason::Session);
        }
    }

    /// The live holds.
    fn live(&self) -> Vec<Arc<LeaseState>> {
        let mut inner = self.inner();
        let mut live = Vec::new();
        inner.all.retain(|l| match l.upgrade() {
            Some(l) if !l.is_finished() => {
                live.push(l);
                true
            }
            _ => false,
        });
        live
    }

    /// The session ended: every hold is lost, now and from now on. `false` when it had ended
    /// already.
    pub(crate) fn end(&self) -> bool {
        if self.ended.is_cancelled() {
            return false;
        }
        self.ended.cancel();
        self.inner().ended = true;
        for lease in self.live() {
            lease.fire_lost(LostReason::Session);
        }
        true
    }

    /// The server answered a request sent at `sent`.
    pub(crate) fn heard(&self, sent: Instant) {
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        *heard = (*heard).max(sent);
    }

    /// The instant after which the server may have expired the session: every hold of it
    /// counts as lost then.
    pub(crate) fn deadline(&self) -> Instant {
        let heard = *self.heard.lock().unwrap_or_else(|e| e.into_inner());
        heard + self.length.saturating_sub(self.drift)
    }

    /// Whether the session may still be alive on the server.
    pub(crate) fn is_live(&self) -> bool {
        !self.ended.is_cancelled() && Instant::now() < self.deadline()
    }

    /// Every live hold lasts at least until the session's deadline.
    pub(crate) fn refresh(&self) {
        let deadline = self.deadline();
        for lease in self.live() {
            let mut times = lease.times();
            times.deadline = times.deadline.max(deadline);
        }
    }

    /// A hold granted in this session: the session's length is its lease and the session's
    /// deadline its deadline, and the watchdog never renews it (the session is kept alive by
    /// the service). The core builds its state (`Ctx::grant`); it is registered here.
    pub(crate) fn grant(
        &self,
        ctx: &Ctx,
        request: &LockRequest<'_>,
        token: u64,
    ) -> Arc<LeaseState> {
        let deadline = self.deadline();
        let hold = Hold {
            lock: request.lock.clone(),
            owner: request.owner.clone(),
            lease: self.length,
            renew: false,
            id: rand::random(),
            token,
        };
        let lease = ctx.grant(hold, deadline, deadline);
        self.register(&lease);
        lease
    }
}
