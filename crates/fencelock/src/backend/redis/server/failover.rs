//! Through Sentinel: the bookkeeping that keeps a failover from bringing back a released
//! hold (see `backend::redis::released`). Nothing here runs for one server or a Cluster.

use std::sync::Arc;
use std::time::Duration;

use super::exec::{Conn, Master};
use super::RedisBackend;
use crate::backend::redis::conn::SentinelConn;
use crate::backend::redis::keys::LockKeys;
use crate::backend::redis::terms::Attempt;
use crate::error::Error;

/// What an acquire attempt starts from: the stale holds it gives back first, and how many
/// times the client had switched masters (0 when not through Sentinel).
pub(super) struct Before {
    pub(super) stale: Vec<u64>,
    switches: u64,
}

impl RedisBackend {
    fn sentinel(&self) -> Option<&SentinelConn> {
        match &self.conn {
            Conn::Master(Master::Sentinel(sentinel)) => Some(sentinel),
            _ => None,
        }
    }

    /// The number of switches so far (0 when not through Sentinel).
    pub(super) fn switches(&self) -> u64 {
        self.sentinel().map_or(0, |s| s.released.switches())
    }

    /// Before an acquire: a master the sentinels announced is switched to first, so that
    /// the holds released on the old one are known stale and the attempt carries them.
    pub(super) async fn before_acquire(&self, attempt: &Attempt) -> Result<Before, Error> {
        let Some(sentinel) = self.sentinel() else {
            return Ok(Before {
                stale: Vec::new(),
                switches: 0,
            });
        };
        let keys = &attempt.keys;
        if sentinel.announced_new() {
            let switched = self.bounded(Some(keys), Box::pin(sentinel.follow_announcement()));
            switched.await?.map_err(|e| self.error(Some(keys), e))?;
        }
        let released = &sentinel.released;
        released.note_lease(Duration::from_millis(attempt.lease_ms));
        let (stale, switches) = released.stale(keys.name(), &attempt.owner);
        Ok(Before { stale, switches })
    }

    /// After an acquire script ran: the stale holds it carried are given back, and so are
    /// the attempts it gave up (a failover may lose that too). If the client switched
    /// masters meanwhile, the attempt may have been sent again to the new master without
    /// the holds that became stale at the switch: they are given back now. (Had it
    /// re-entered one of them, its hold count is one too high, once.)
    pub(super) async fn after_acquire(&self, attempt: &Attempt, before: &Before) {
        let Some(sentinel) = self.sentinel() else {
            return;
        };
        let (keys, owner) = (&attempt.keys, &attempt.owner);
        let released = &sentinel.released;
        released.settle(keys.name(), owner, &before.stale);
        for &id in &attempt.abandoned {
            released.note(keys.name(), owner, id, before.switches);
        }
        if before.switches != released.switches() {
            let (stale, _) = released.stale(keys.name(), owner);
            let late: Vec<u64> = stale
                .into_iter()
                .filter(|id| !before.stale.contains(id))
                .collect();
            Box::pin(self.give_back_stale(keys, owner, &late)).await;
        }
    }

    /// Gives back holds released on a replaced master, by id, on the current one.
    async fn give_back_stale(&self, keys: &LockKeys, owner: &Arc<str>, ids: &[u64]) {
        let Some(sentinel) = self.sentinel() else {
            return;
        };
        for &id in ids {
            match self.release_call(keys, owner, Some(id), None).await {
                Ok(_) => sentinel.released.settle(keys.name(), owner, &[id]),
                Err(e) => tracing::debug!(lock = %keys.name(), error = %e, id,
                    "a hold released on the old master is given back at the next attempt"),
            }
        }
    }

    /// After a release by id that ran: kept in case a failover loses it. `switches`: the
    /// count before it was sent.
    pub(super) fn after_release(&self, keys: &LockKeys, owner: &str, id: u64, switches: u64) {
        if let Some(sentinel) = self.sentinel() {
            let owner = Arc::from(owner);
            sentinel.released.note(keys.name(), &owner, id, switches);
        }
    }

    /// An extension asks for `lease_ms`: releases are kept at least that long.
    pub(super) fn note_lease(&self, lease_ms: u64) {
        if let Some(sentinel) = self.sentinel() {
            let lease = Duration::from_millis(lease_ms);
            sentinel.released.note_lease(lease);
        }
    }
}
