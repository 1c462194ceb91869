//! Holds released through Sentinel, kept until a failover can no longer bring them back.
//!
//! Replication is asynchronous: a release the old master took may not have reached the
//! replica promoted in its place, which still has the hold. The owner's next acquire there
//! would re-enter it (a second hold, the old token, a lock that never ends while the owner
//! keeps coming back). So each release by id is kept for the longest lease the client took
//! (after it, the hold has expired on any master); when the client switches masters, the
//! kept ones become stale, and the owner's next attempt on the lock gives them back first,
//! as it gives back attempts it gave up. Giving back a hold that is gone does nothing.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// The most releases kept at once: a client releasing faster than this per longest lease
/// keeps only the newest (the ones a failover is likeliest to have lost).
const MAX_KEPT: usize = 100_000;

/// One release: the lock, the owner and the hold, and when it stops mattering.
struct Kept {
    lock: String,
    owner: Arc<str>,
    id: u64,
    until: Instant,
}

/// Stale holds by lock and owner: each id, and when it stops mattering.
type Stale = HashMap<(String, Arc<str>), Vec<(u64, Instant)>>;

#[derive(Default)]
struct State {
    /// Releases taken by the current master, oldest first.
    recent: VecDeque<Kept>,
    /// Releases taken by masters replaced since, by lock and owner.
    stale: Stale,
    /// The longest lease an acquire or extension asked for so far.
    longest: Duration,
}

/// See the module documentation.
#[derive(Default)]
pub(crate) struct ReleasedHolds {
    state: Mutex<State>,
}

impl ReleasedHolds {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A hold with this lease was asked for (an acquire, an extension).
    pub(crate) fn note_lease(&self, lease: Duration) {
        let mut state = self.state();
        state.longest = state.longest.max(lease);
    }

    /// Hold `id` of `owner` on `lock` was released. `replaced`: the client switched masters
    /// while the release was under way, so the master that took it may be the old one.
    pub(crate) fn note(&self, lock: &str, owner: &Arc<str>, id: u64, replaced: bool) {
        let mut state = self.state();
        let now = Instant::now();
        let kept = Kept {
            lock: lock.to_owned(),
            owner: owner.clone(),
            id,
            until: now + state.longest,
        };
        if replaced {
            stale_add(&mut state.stale, kept);
            return;
        }
        while state
            .recent
            .front()
            .is_some_and(|k| k.until <= now || state.recent.len() >= MAX_KEPT)
        {
            state.recent.pop_front();
        }
        state.recent.push_back(kept);
    }

    /// The client switched masters: every release kept may be missing on the new one.
    pub(crate) fn switched(&self) {
        let mut state = self.state();
        let now = Instant::now();
        let recent = std::mem::take(&mut state.recent);
        for kept in recent.into_iter().filter(|k| k.until > now) {
            stale_add(&mut state.stale, kept);
        }
    }

    /// The stale holds of `owner` on `lock`, to give back before anything else.
    pub(crate) fn stale(&self, lock: &str, owner: &Arc<str>) -> Vec<u64> {
        let mut state = self.state();
        if state.stale.is_empty() {
            return Vec::new();
        }
        let now = Instant::now();
        state.stale.retain(|_, ids| {
            ids.retain(|(_, until)| *until > now);
            !ids.is_empty()
        });
        let key = (lock.to_owned(), owner.clone());
        state
            .stale
            .get(&key)
            .map_or_else(Vec::new, |ids| ids.iter().map(|(id, _)| *id).collect())
    }

    /// These stale holds were given back.
    pub(crate) fn settle(&self, lock: &str, owner: &Arc<str>, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        let mut state = self.state();
        let key = (lock.to_owned(), owner.clone());
        if let Some(kept) = state.stale.get_mut(&key) {
            kept.retain(|(id, _)| !ids.contains(id));
            if kept.is_empty() {
                state.stale.remove(&key);
            }
        }
    }
}

fn stale_add(stale: &mut Stale, kept: Kept) {
    stale
        .entry((kept.lock, kept.owner))
        .or_default()
        .push((kept.id, kept.until));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_turn_stale_at_a_switch_and_expire_with_the_longest_lease() {
        let kept = ReleasedHolds::default();
        let owner: Arc<str> = Arc::from("o");
        kept.note_lease(Duration::from_secs(10));
        kept.note("a", &owner, 1, false);
        assert!(
            kept.stale("a", &owner).is_empty(),
            "not stale before a switch"
        );
        kept.switched();
        assert_eq!(kept.stale("a", &owner), [1]);
        assert!(kept.stale("b", &owner).is_empty());
        assert!(kept.stale("a", &Arc::from("other")).is_empty());
        kept.note("a", &owner, 2, true); // under way during a switch: stale at once
        assert_eq!(kept.stale("a", &owner), [1, 2]);
        kept.settle("a", &owner, &[1]);
        assert_eq!(kept.stale("a", &owner), [2]);

        // No lease taken: a release is over at once, before or after a switch.
        let none = ReleasedHolds::default();
        none.note("a", &owner, 3, false);
        none.switched();
        none.note("a", &owner, 4, true);
        assert!(none.stale("a", &owner).is_empty());
    }
}
