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

/// The most stale holds one attempt carries: the rest go with the owner's next attempts.
const MAX_CARRIED: usize = 256;

/// How often the stale holds are swept of expired ones.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
struct State {
    /// How many times the client switched masters.
    switches: u64,
    /// When the stale holds were last swept of expired ones.
    swept: Option<Instant>,
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

    /// How many times the client switched masters (see `note`).
    pub(crate) fn switches(&self) -> u64 {
        self.state().switches
    }

    /// Hold `id` of `owner` on `lock` was released by a request sent when the client had
    /// switched masters `since` times. If it has switched since, the master that took the
    /// release may be the old one: the hold is stale at once.
    pub(crate) fn note(&self, lock: &str, owner: &Arc<str>, id: u64, since: u64) {
        let mut state = self.state();
        let replaced = since != state.switches;
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
        state.switches += 1;
        let now = Instant::now();
        let recent = std::mem::take(&mut state.recent);
        for kept in recent.into_iter().filter(|k| k.until > now) {
            stale_add(&mut state.stale, kept);
        }
    }

    /// Up to `MAX_CARRIED` stale holds of `owner` on `lock`, to give back before anything
    /// else, and the number of switches they reflect (read together, so that a switch after
    /// this call shows as one).
    pub(crate) fn stale(&self, lock: &str, owner: &Arc<str>) -> (Vec<u64>, u64) {
        let mut state = self.state();
        let switches = state.switches;
        if state.stale.is_empty() {
            return (Vec::new(), switches);
        }
        let now = Instant::now();
        if state.swept.is_none_or(|at| now >= at + SWEEP_EVERY) {
            state.swept = Some(now);
            state.stale.retain(|_, ids| {
                ids.retain(|(_, until)| *until > now);
                !ids.is_empty()
            });
        }
        let key = (lock.to_owned(), owner.clone());
        let ids = state.stale.get(&key).map_or_else(Vec::new, |ids| {
            let live = ids.iter().filter(|(_, until)| *until > now);
            live.map(|(id, _)| *id).take(MAX_CARRIED).collect()
        });
        (ids, switches)
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
        let ids = |k: &ReleasedHolds, lock| k.stale(lock, &owner).0;
        kept.note("a", &owner, 1, 0);
        assert!(ids(&kept, "a").is_empty(), "not stale before a switch");
        kept.switched();
        assert_eq!(kept.stale("a", &owner), (vec![1], 1));
        assert!(ids(&kept, "b").is_empty());
        assert!(kept.stale("a", &Arc::from("other")).0.is_empty());
        kept.note("a", &owner, 2, 0); // sent before the switch: stale at once
        kept.note("a", &owner, 5, 1); // sent after it: kept for the next one
        assert_eq!(ids(&kept, "a"), [1, 2]);
        kept.settle("a", &owner, &[1]);
        assert_eq!(ids(&kept, "a"), [2]);
        for id in 100..1000 {
            kept.note("c", &owner, id, 0);
        }
        assert_eq!(
            ids(&kept, "c").len(),
            MAX_CARRIED,
            "carried a few at a time"
        );

        // No lease taken: a release is over at once, before or after a switch.
        let none = ReleasedHolds::default();
        none.note("a", &owner, 3, 0);
        none.switched();
        none.note("a", &owner, 4, 0);
        assert!(ids(&none, "a").is_empty());
    }
}
