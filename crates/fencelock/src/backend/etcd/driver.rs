//! etcd's side of the shared queue recipe (`backend::queue`): the key is put if absent in a
//! transaction that also reads the holder and the key just before it, the queue is read
//! again with a transaction that also checks the attempt's own key, and a waiter watches the
//! predecessor's deletion from the current revision (see `recipe`).
//!
//! A read-write lock's attempt (`recipes.RWMutex`'s `read/` and `write/` keys) reads every
//! key ahead of its own instead: a reader holds with no writer ahead, a writer when nothing
//! is ahead. A key of another primitive ahead of the attempt's own (a mutex's or an
//! election's key for a read-write lock, a read-write lock's for the others) ends the
//! attempt with `Error::PrimitiveMismatch` naming both (its key removed).

use std::sync::Arc;
use std::time::Duration;

use super::recipe::{self, Entry, Place, Wake};
use super::session::Fault;
use super::slots::Slot;
use super::Inner;
use crate::backend::queue::recipe::{Primitive, Recipe};
use crate::backend::queue::rule::Sight;
use crate::backend::queue::{Driver, Turn};
use crate::backend::session_service::SessionLocks;
use crate::backend::{LockRequest, Wait};
use crate::error::Error;

/// How long a waiter pauses before asking again after a failed request.
const RETRY: Duration = Duration::from_millis(50);

/// An attempt's key until it holds the lock or is removed. It keeps the client's slot for
/// the lock until then, so that no other attempt of this client puts the same key meanwhile.
pub(super) struct Attempt {
    pub(super) key: String,
    /// The key's create revision, once the put was answered.
    pub(super) revision: Option<i64>,
    pub(super) slot: Option<Slot>,
}

/// One acquire's view of the lock's queue.
pub(super) struct Queue<'a> {
    pub(super) inner: &'a Arc<Inner>,
    pub(super) request: &'a LockRequest<'a>,
    pub(super) recipe: &'a Recipe<'a>,
    pub(super) dir: String,
    /// Why the attempt is refused: the name is another kind (its key found ahead of the
    /// attempt's own, or its kind stored), or a semaphore of another N.
    pub(super) refused: std::sync::Mutex<Option<Error>>,
    /// How many keys were ahead at the last look (a permit waits for any of them to go).
    pub(super) seen: std::sync::atomic::AtomicUsize,
}

impl Queue<'_> {
    fn name(&self) -> &str {
        &self.request.lock.name
    }

    /// The attempt is a read-write lock's or a semaphore's: a key of its own, and every
    /// key ahead read at each look.
    fn own_key(&self) -> bool {
        !self.recipe.alone()
    }

    /// The primitive whose keys the attempt queues with (`recipe::primitive_of`'s words):
    /// a mutex and an election share `concurrency`'s layout.
    fn expected(&self) -> &'static str {
        match self.recipe.primitive {
            Primitive::Mutex | Primitive::Election => "mutex or election",
            other => other.words(),
        }
    }

    /// The primitive the attempt asks for, in `Error::PrimitiveMismatch`'s words.
    fn asked(&self) -> &'static str {
        self.recipe.primitive.words()
    }

    /// The kind the attempt's transaction checks or stores (see `recipe::Claim`): the
    /// primitive's words, a semaphore's N.
    fn value(&self) -> String {
        match self.recipe.permits {
            Some((permits, _)) => permits.to_string(),
            None => self.asked().to_owned(),
        }
    }

    fn refused(&self) -> std::sync::MutexGuard<'_, Option<Error>> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The attempt is refused: the name is `found` (a primitive's words, and where).
    fn mismatch(&self, found: String) {
        *self.refused() = Some(Error::PrimitiveMismatch {
            lock: self.name().to_owned(),
            asked: self.asked(),
            found,
            server: self.inner.session.server.clone(),
        });
    }

    /// The name's stored kind refused the attempt: another primitive, or another N.
    fn stored(&self, value: &str) {
        let (found, n) = recipe::kind_of(value);
        if let (Some((permits, _)), Some(n)) = (self.recipe.permits, n) {
            *self.refused() = Some(Error::PermitsMismatch {
                lock: self.name().to_owned(),
                stored: n,
                asked: permits,
            });
            return;
        }
        let key = recipe::permits_key(&self.inner.prefix, self.name());
        self.mismatch(format!("{found} (key {key})"));
    }

    /// Whether another primitive's key is among `ahead` (it is kept for the error).
    fn foreign(&self, ahead: &[Entry]) -> bool {
        let expected = self.expected();
        let other = ahead
            .iter()
            .find(|e| recipe::primitive_of(&self.dir, &e.key) != expected);
        if let Some(other) = other {
            let found = recipe::primitive_of(&self.dir, &other.key);
            self.mismatch(format!("{found} (key {})", other.key));
        }
        other.is_some()
    }
}

/// The keys ahead of the attempt's own: none when it holds, else the holder and the key just
/// before its own (one entry when they are the same key).
fn ahead(holder: Entry, before: Entry) -> Vec<Entry> {
    if holder.key == before.key && holder.revision == before.revision {
        vec![holder]
    } else {
        vec![holder, before]
    }
}

impl Driver for Queue<'_> {
    type Entry = Entry;
    type Attempt = Attempt;
    type Fault = Fault;

    const ENTER_AGAIN: bool = true;
    const PAUSE: Duration = RETRY;

    async fn enter(
        &self,
        attempt: &mut Attempt,
        _sight: Sight,
    ) -> Result<Option<Vec<Entry>>, Fault> {
        // A mutex's key stores the owner id; an election's the value it advertises.
        let data = self.recipe.value;
        let session = &self.inner.session;
        let (kind, value) = (
            recipe::permits_key(&self.inner.prefix, self.name()),
            self.value(),
        );
        let claim = recipe::Claim {
            key: &kind,
            value: &value,
            resize: self.recipe.resizes(),
        };
        let created = recipe::create(session, &self.dir, &attempt.key, data, &claim).await?;
        let created = match created {
            recipe::Entered::Created(created) => created,
            recipe::Entered::Refused(stored) => {
                self.stored(&stored);
                return Ok(None);
            }
        };
        let mine = created.revision;
        attempt.revision = Some(mine);
        if created.holder.revision == mine {
            return Ok(Some(Vec::new()));
        }
        if self.own_key() {
            // Every key ahead is read by `look`.
            return Ok(None);
        }
        match created.before {
            Some(before) => {
                let ahead = ahead(created.holder, before);
                Ok((!self.foreign(&ahead)).then_some(ahead))
            }
            None => Err(Fault::Malformed("a holder but no key before ours")),
        }
    }

    async fn look(
        &self,
        attempt: &mut Attempt,
        _sight: Sight,
    ) -> Result<Option<Vec<Entry>>, Fault> {
        let session = &self.inner.session;
        let Some(mine) = attempt.revision else {
            return Ok(None);
        };
        if self.refused().is_some() {
            return Ok(None);
        }
        if self.own_key() {
            if let Some(permits) = self.recipe.permits_rule() {
                let key = recipe::permits_key(&self.inner.prefix, self.name());
                if let Some(n) = recipe::stored_permits(session, &key).await? {
                    permits.set(n);
                }
            }
            let ahead = recipe::ahead(session, &self.dir, &attempt.key, mine).await?;
            if let Some(ahead) = &ahead {
                self.seen
                    .store(ahead.len(), std::sync::atomic::Ordering::Relaxed);
            }
            return Ok(ahead.filter(|ahead| !self.foreign(ahead)));
        }
        // Even when the key before ours was the holder, ours is read again before it counts
        // as the holder: the lease may have been revoked meanwhile, which no deadline of ours
        // bounds (etcd-io/etcd#11456; tested by `a_waiter_whose_lease_ends_does_not_acquire`).
        Ok(
            match recipe::place(session, &self.dir, &attempt.key, mine).await? {
                Some(Place::Holder) => Some(Vec::new()),
                Some(Place::Behind { holder, before }) => {
                    let ahead = ahead(holder, before);
                    (!self.foreign(&ahead)).then_some(ahead)
                }
                None => None,
            },
        )
    }

    /// A permit waits for any key ahead of its own to go, or for N to change; the others
    /// for the key `on`.
    async fn behind(
        &self,
        attempt: &mut Attempt,
        holder: &Entry,
        on: &Entry,
        wait: Wait,
    ) -> Result<Turn, Error> {
        // The holder may be this owner in another client (a campaign's owner id is fresh,
        // and an election's keys store values, not owner ids).
        if self.recipe.primitive == Primitive::Mutex {
            self.inner.foreign(self.request.owner, holder)?;
        }
        if matches!(wait, Wait::No) {
            return Ok(Turn::GiveUp);
        }
        let session = &self.inner.session;
        let woke = match (self.recipe.permits_rule(), attempt.revision) {
            (Some(permits), Some(mine)) => {
                let permits_key = recipe::permits_key(&self.inner.prefix, self.name());
                let seen = recipe::Seen {
                    key: &attempt.key,
                    mine,
                    ahead: self.seen.load(std::sync::atomic::Ordering::Relaxed),
                    permits_key: &permits_key,
                    n: permits.get(),
                };
                recipe::wait_for_any(session, &self.dir, &seen, wait.deadline()).await
            }
            _ => recipe::wait_for(session, on, wait.deadline()).await,
        };
        match woke {
            Ok(Wake::Gone | Wake::Again) => Ok(Turn::Again),
            Ok(Wake::Deadline) => Ok(Turn::GiveUp),
            Err(f) if self.transient(&f) => Ok(Turn::Retry),
            Err(f) => Err(self.fail(f)),
        }
    }

    /// Its key, and the name's kind with it when it was the last key.
    async fn undo(&self, attempt: &mut Attempt) -> Result<(), Fault> {
        let kind = recipe::permits_key(&self.inner.prefix, self.name());
        let session = &self.inner.session;
        recipe::leave(session, &self.dir, &kind, &attempt.key, attempt.revision)
            .await
            .map(drop)
    }

    fn undo_later(&self, mut attempt: Attempt) {
        let inner = self.inner.clone();
        let background = inner.background.clone();
        let (dir, kind) = (
            self.dir.clone(),
            recipe::permits_key(&inner.prefix, self.name()),
        );
        self.inner.background.finish(async move {
            let (key, revision) = (&attempt.key, attempt.revision);
            let left = recipe::leave(&inner.session, &dir, &kind, key, revision);
            if let Err(e) = left.await {
                background.failed();
                tracing::warn!(key, error = %e, "undo of a given-up attempt failed; the key goes with the lease");
            }
            inner.slots.put_back(attempt.slot.take());
        });
    }

    fn undone(&self, mut attempt: Attempt) {
        self.inner.slots.put_back(attempt.slot.take());
    }

    fn transient(&self, fault: &Fault) -> bool {
        fault.transient() && !self.inner.session.holds.ended.is_cancelled()
    }

    fn fail(&self, fault: Fault) -> Error {
        self.inner.fail(Some(self.name()), fault)
    }

    /// Also the end of an attempt refused as another kind, or another N.
    fn vanished(&self) -> Error {
        if let Some(refused) = self.refused().take() {
            return refused;
        }
        Error::Unavailable {
            lock: Some(self.name().to_owned()),
            server: self.inner.session.server.clone(),
            detail: "the attempt's key vanished while it waited (lease expired or revoked, or \
                     the key was deleted)"
                .into(),
        }
    }
}
