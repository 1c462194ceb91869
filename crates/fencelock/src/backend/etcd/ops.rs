//! Releases, status and forced unlocks.

use std::sync::Arc;
use std::time::Duration;

use super::recipe::{self, Entry};
use super::session::Fault;
use super::{Inner, SERVICE};
use crate::backend::holdings::Holdings;
use crate::backend::holdings::{Closing, Sessioned};
use crate::backend::{RawStatus, Released};
use crate::background::Background;
use crate::error::Error;
use crate::status::Waiter;

impl Sessioned for Inner {
    type Fault = Fault;

    fn holdings(&self) -> &Holdings {
        &self.holdings
    }

    fn background(&self) -> &Background {
        &self.background
    }

    fn ended(&self) -> bool {
        self.session.ended.is_cancelled()
    }

    async fn delete_holding(self: Arc<Self>, closing: Closing) -> Result<Released, Fault> {
        self.delete_entry(&closing).await
    }

    fn fail_on(&self, lock: &str, fault: Fault) -> Error {
        self.fail(Some(lock), fault)
    }
}

impl Inner {
    /// Deletes a closing holding's key (only the revision it put) and, once it is gone (also
    /// with the lease that ended), ends the holding and then frees the client's slot for the
    /// lock: a new attempt of this client puts the same key, and must not find the old
    /// holding in the map.
    async fn delete_entry(&self, closing: &Closing) -> Result<Released, Fault> {
        let revision = i64::try_from(closing.token).ok();
        let deleted = match recipe::delete(&self.session, &closing.path, revision).await {
            Err(_) if self.session.ended.is_cancelled() => Ok(false),
            deleted => deleted,
        };
        let released = self.holdings.settle(closing, deleted);
        if released.is_ok() {
            self.slots.free(&closing.name);
        }
        released
    }

    /// `Lock::release`: the owner's newest hold in this client. A holding of this owner id
    /// under another client's lease cannot be released from here (typed error); none is
    /// `NotHeld`.
    pub(super) async fn release_owner(
        self: &Arc<Self>,
        name: &str,
        owner: &Arc<str>,
    ) -> Result<Released, Error> {
        if self.holdings.holds(name, owner) {
            return self.give_back(name, owner, None).await;
        }
        match self.entries(name).await?.first() {
            Some(holder) if *holder.owner == **owner && holder.lease != self.session.lease => {
                Err(Error::Unsupported {
                    service: SERVICE,
                    what: "releasing a lock that another etcd client holds",
                    why: "the lock is a key under the holder's lease; only that client \
                          releases it (or Client::force_unlock deletes it)",
                })
            }
            _ => Ok(Released::NotHeld),
        }
    }

    /// The lock's keys in queue order.
    async fn entries(&self, name: &str) -> Result<Vec<Entry>, Error> {
        let dir = recipe::dir(&self.prefix, name);
        let entries = recipe::entries(&self.session, &dir).await;
        entries.map_err(|e| self.fail(Some(name), e))
    }

    /// The holder's remaining lease TTL as the server counts it, if it has one.
    async fn remaining(&self, lease: i64) -> Option<Duration> {
        let asked = self
            .session
            .call(|c| async move { c.lease_client().time_to_live(lease, None).await })
            .await;
        match asked {
            Ok(reply) if reply.ttl() > 0 => Some(Duration::from_secs(reply.ttl() as u64)),
            _ => None,
        }
    }

    /// The holder (owner id, hold count if this client holds it, token, remaining TTL) and
    /// the waiters.
    pub(super) async fn status(&self, name: &str) -> Result<RawStatus, Error> {
        let mut entries = self.entries(name).await?.into_iter();
        let Some(holder) = entries.next() else {
            return Ok(RawStatus {
                remaining: None,
                held: false,
                last_token: None,
                current_token: None,
                owners: Vec::new(),
                waiters: Vec::new(),
            });
        };
        let count = self.holdings.count(name, &holder.key).unwrap_or(1);
        let token = u64::try_from(holder.revision).ok();
        let waiters = entries
            .map(|w| Waiter {
                owner: w.owner_or_lease(),
                age: Duration::ZERO,
                window: Duration::ZERO,
                remaining: Duration::ZERO,
                expired: false,
                unreadable: None,
            })
            .collect();
        Ok(RawStatus {
            remaining: self.remaining(holder.lease).await,
            held: true,
            last_token: token,
            current_token: token,
            owners: vec![(holder.owner_or_lease(), count)],
            waiters,
        })
    }

    /// Deletes the holder's key (that revision only); the next waiter's watch fires and it
    /// takes the lock.
    pub(super) async fn force_unlock(&self, name: &str) -> Result<Vec<(String, u64)>, Error> {
        let Some(holder) = self.entries(name).await?.into_iter().next() else {
            return Ok(Vec::new());
        };
        let deleted = recipe::delete(&self.session, &holder.key, Some(holder.revision)).await;
        match deleted.map_err(|e: Fault| self.fail(Some(name), e))? {
            true => Ok(vec![(holder.owner_or_lease(), 1)]),
            false => Ok(Vec::new()),
        }
    }
}
