//! Attempts given up before their outcome was known, until they are undone.
//!
//! An acquire whose reply was lost, or whose future was dropped, may still take a hold (or a
//! place in the queue) when the server runs it. Its undo runs in the background, but the
//! caller may retry at once, and the retry can reach the server first. Then it would re-enter
//! the orphan hold. So the next attempt of the same owner on the same lock carries the ids of
//! the attempts given up, and the script gives them back before it decides anything.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// The most ids kept per lock: a server that stays away while a caller retries in a loop
/// must not make this grow without end. Expired ones go first, then the oldest; their holds
/// expire with their lease at the latest.
const MAX_PER_LOCK: usize = 32;

/// How long after its lease an id is kept: a renewal sent just before the hold was given up
/// may still lengthen it on the server by a lease from when it arrives.
const SLACK: Duration = Duration::from_secs(5);

/// One attempt given up: its owner and id, and when the server has let it go anyway.
struct Given {
    owner: Arc<str>,
    id: u64,
    expires: Instant,
}

/// Given-up attempts per lock name.
type ByLock = HashMap<String, Vec<Given>>;

/// The attempts a client gave up on, until they are known to be undone or have expired.
#[derive(Default)]
pub(crate) struct Abandoned {
    by_lock: Mutex<ByLock>,
}

impl Abandoned {
    /// The map, without entries whose lease has run out (given back by the server itself; a
    /// re-entry made while one was alive carried its id).
    fn map(&self) -> std::sync::MutexGuard<'_, ByLock> {
        let mut map = self.by_lock.lock().unwrap_or_else(|e| e.into_inner());
        if !map.is_empty() {
            let now = Instant::now();
            map.retain(|_, ids| {
                ids.retain(|g| g.expires > now);
                !ids.is_empty()
            });
        }
        map
    }

    /// Records an attempt given up, taken with lease `term`.
    pub(crate) fn add(&self, name: &str, owner: &Arc<str>, id: u64, term: Duration) {
        let mut map = self.map();
        let ids = map.entry(name.to_owned()).or_default();
        if ids.len() >= MAX_PER_LOCK {
            ids.remove(0);
        }
        ids.push(Given {
            owner: owner.clone(),
            id,
            expires: Instant::now() + term + SLACK,
        });
    }

    /// The attempts of `owner` on this lock not yet known to be undone.
    pub(crate) fn pending(&self, name: &str, owner: &str) -> Vec<u64> {
        let map = self.map();
        match map.get(name) {
            Some(ids) => ids
                .iter()
                .filter(|g| &*g.owner == owner)
                .map(|g| g.id)
                .collect(),
            None => Vec::new(),
        }
    }

    /// How many attempts and holds are not known to be given back (and have not expired).
    pub(crate) fn len(&self) -> usize {
        self.map().values().map(Vec::len).sum()
    }

    /// These attempts were given back on the server (a script ran with them).
    pub(crate) fn settle(&self, name: &str, owner: &str, settled: &[u64]) {
        if settled.is_empty() {
            return;
        }
        let mut map = self.map();
        if let Some(ids) = map.get_mut(name) {
            ids.retain(|g| !(&*g.owner == owner && settled.contains(&g.id)));
            if ids.is_empty() {
                map.remove(name);
            }
        }
    }
}
