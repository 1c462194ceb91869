//! What the shared session service (`super::super::session_service`) asks of etcd beside
//! acquiring: a holding's key deleted (and the client's slot for the lock freed), the lock's
//! keys in queue order, and the holder's remaining lease.

use std::time::Duration;

use super::recipe;
use super::session::Fault;
use super::Inner;
use crate::backend::holdings::Closing;
use crate::backend::session_service::{Listed, SessionLocks};
use crate::backend::Released;
use crate::error::Error;

impl Inner {
    /// Deletes a closing holding's key (only the revision it put) and, once it is gone (also
    /// with the lease that ended), ends the holding and then frees the client's slot for the
    /// lock: a new attempt of this client puts the same key, and must not find the old
    /// holding in the map.
    pub(super) async fn delete_entry(&self, closing: &Closing) -> Result<Released, Fault> {
        let revision = i64::try_from(closing.token).ok();
        let (dir, kind) = (
            recipe::dir(&self.prefix, &closing.name),
            recipe::permits_key(&self.prefix, &closing.name),
        );
        let left = recipe::leave(&self.session, &dir, &kind, &closing.path, revision).await;
        let deleted = match left {
            Err(_) if self.session.holds.ended.is_cancelled() => Ok(false),
            deleted => deleted,
        };
        let released = self.session.holds.holdings.settle(closing, deleted);
        if released.is_ok() {
            self.slots.free(&closing.name);
        }
        released
    }

    /// The lock's keys in queue order.
    pub(super) async fn listed(&self, name: &str) -> Result<Vec<Listed>, Error> {
        let dir = recipe::dir(&self.prefix, name);
        let entries = recipe::entries(&self.session, &dir).await;
        let entries = entries.map_err(|e| self.fail(Some(name), e))?;
        // A semaphore's first N permits hold together (as readers do); the others wait.
        let permits = entries
            .iter()
            .any(|e| recipe::primitive_of(&dir, &e.key) == "semaphore");
        let n = match permits {
            true => {
                let key = recipe::permits_key(&self.prefix, name);
                let n = recipe::stored_permits(&self.session, &key).await;
                n.map_err(|e| self.fail(Some(name), e))?.unwrap_or(1) as usize
            }
            false => 0,
        };
        let listed = entries.into_iter().enumerate().map(|(at, e)| Listed {
            reader: recipe::is_reader(&dir, &e.key) || (permits && at < n),
            path: e.key,
            owner: e.owner,
            session: e.lease,
            token: e.revision,
            age: Duration::ZERO,
        });
        Ok(listed.collect())
    }

    /// A lease's remaining TTL as the server counts it, if it has one.
    pub(super) async fn ttl_left(&self, lease: i64) -> Option<Duration> {
        let asked = self
            .session
            .call(|c| async move { c.lease_client().time_to_live(lease, None).await })
            .await;
        match asked {
            Ok(reply) if reply.ttl() > 0 => Some(Duration::from_secs(reply.ttl() as u64)),
            _ => None,
        }
    }
}
