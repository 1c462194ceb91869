//! Holdings whose key was deleted behind the client's back (`Client::force_unlock`, an
//! operator's `etcdctl del`): their holds are lost, as the API promises, "at the next
//! renewal". While the client holds something, it asks every second (every third of the TTL
//! if that is shorter) which keys its lease still carries (`LeaseTimeToLive` with keys: one
//! request per client, whatever the number of locks). A holding whose key existed at that
//! read's revision (its token, the create revision, is not above it) and is not among them is
//! gone. It is matched by its token, never by its key alone: the owner may have released it
//! and taken the lock again (the same key, named by the lease) while the read was on its way. A watch per holding would tell sooner, but it costs the server a watch and a read
//! per acquisition, which halved the uncontended rate.

use std::collections::HashSet;
use std::sync::Weak;
use std::time::Duration;

use etcd_client::LeaseTimeToLiveOptions;

use super::Inner;

/// The longest time between two reads.
const EVERY: Duration = Duration::from_secs(1);

/// Runs until the service is dropped or its lease ended.
pub(super) async fn audit(inner: Weak<Inner>) {
    let every = match inner.upgrade() {
        Some(inner) => EVERY.min(inner.session.ttl / 3),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        if inner.session.holds.ended.is_cancelled() {
            return;
        }
        inner.check().await;
    }
}

impl Inner {
    /// One read of the lease's keys; holdings missing from it are lost.
    async fn check(&self) {
        let held = self.session.holds.holdings.all();
        if held.is_empty() {
            return;
        }
        let lease = self.session.lease;
        let options = LeaseTimeToLiveOptions::new().with_keys();
        let asked = self
            .session
            .call(|c| {
                let options = options.clone();
                async move { c.lease_client().time_to_live(lease, Some(options)).await }
            })
            .await;
        let Ok(reply) = asked else { return };
        let Some(at) = reply.header().map(|h| h.revision()) else {
            return;
        };
        // -1: expired (or never granted). 0 is a live lease with under a second left: etcd
        // rounds the remaining TTL down.
        if reply.ttl() < 0 {
            return self.session.end("the lease's TTL read as expired");
        }
        let keys: HashSet<&[u8]> = reply.keys().iter().map(Vec::as_slice).collect();
        for (name, owner, key, token) in held {
            let existed = i64::try_from(token).is_ok_and(|t| t <= at);
            if existed
                && !keys.contains(key.as_bytes())
                && self
                    .session
                    .holds
                    .holdings
                    .vanished(&name, &owner, &key, token)
            {
                tracing::warn!(lock = %name, key, "the lock's key was deleted by another client");
                self.slots.free(&name);
            }
        }
    }
}
