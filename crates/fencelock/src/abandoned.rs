//! Attempts given up before their outcome was known, until they are undone.
//!
//! An acquire whose reply was lost, or whose future was dropped, may still take a hold (or a
//! place in the queue) when the server runs it. Its undo runs in the background, but the
//! caller may retry at once, and the retry can reach the server first. Then it would re-enter
//! the orphan hold. So the next attempt of the same owner on the same lock carries the ids of
//! the attempts given up, and the script gives them back before it decides anything.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::name::LockKeys;

/// The most ids kept per lock: a server that stays away while a caller retries in a loop
/// must not make this grow without end. The oldest go first; their holds expire with their
/// lease at the latest.
const MAX_PER_LOCK: usize = 32;

/// Given-up attempts per lock name: (owner, attempt id).
type ByLock = HashMap<String, Vec<(Arc<str>, u64)>>;

/// The attempts a client gave up on, until they are known to be undone.
#[derive(Default)]
pub(crate) struct Abandoned {
    by_lock: Mutex<ByLock>,
}

impl Abandoned {
    fn map(&self) -> std::sync::MutexGuard<'_, ByLock> {
        self.by_lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records an attempt given up.
    pub(crate) fn add(&self, keys: &LockKeys, owner: &Arc<str>, id: u64) {
        let mut map = self.map();
        let ids = map.entry(keys.name.clone()).or_default();
        if ids.len() >= MAX_PER_LOCK {
            ids.remove(0);
        }
        ids.push((owner.clone(), id));
    }

    /// The attempts of `owner` on this lock not yet known to be undone.
    pub(crate) fn pending(&self, keys: &LockKeys, owner: &str) -> Vec<u64> {
        let map = self.map();
        match map.get(keys.name.as_str()) {
            Some(ids) => ids
                .iter()
                .filter(|(o, _)| &**o == owner)
                .map(|(_, id)| *id)
                .collect(),
            None => Vec::new(),
        }
    }

    /// How many attempts and holds are not known to be given back.
    pub(crate) fn len(&self) -> usize {
        self.map().values().map(Vec::len).sum()
    }

    /// These attempts were given back on the server (a script ran with them).
    pub(crate) fn settle(&self, keys: &LockKeys, owner: &str, settled: &[u64]) {
        if settled.is_empty() {
            return;
        }
        let mut map = self.map();
        if let Some(ids) = map.get_mut(keys.name.as_str()) {
            ids.retain(|(o, id)| !(&**o == owner && settled.contains(id)));
            if ids.is_empty() {
                map.remove(keys.name.as_str());
            }
        }
    }
}
