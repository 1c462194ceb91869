//! RedLock: one lock per hold that orders a heal of the hold (re-taking a server that lost
//! it) before the hold's release. A heal checks, under it, that the hold is still live, and
//! a release of the hold takes it too, so a heal never lands on a server after the release
//! (and leaves a grant nobody keeps). Only RedLock heals: one deployment takes no such lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// The locks of the holds being healed or released, by hold id. An entry lives as long as
/// someone holds or awaits its lock.
#[derive(Default)]
pub(crate) struct Serials {
    held: Mutex<HashMap<u64, Weak<tokio::sync::Mutex<()>>>>,
}

impl Serials {
    /// Takes the lock of hold `hold`.
    pub(crate) async fn lock(&self, hold: u64) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            match held.get(&hold).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    // Entries nobody holds or awaits any more go (few are ever live at once).
                    held.retain(|_, lock| lock.strong_count() > 0);
                    let lock = Arc::new(tokio::sync::Mutex::new(()));
                    held.insert(hold, Arc::downgrade(&lock));
                    lock
                }
            }
        };
        lock.lock_owned().await
    }
}

#[cfg(test)]
mod tests {
    use super::Serials;

    #[tokio::test]
    async fn one_hold_at_a_time_and_no_entry_left_behind() {
        let serials = Serials::default();
        let first = serials.lock(7).await;
        let other = serials.lock(8).await;
        let second = serials.lock(7);
        tokio::pin!(second);
        assert!(futures_util::poll!(second.as_mut()).is_pending());
        drop(first);
        let second = second.await;
        drop((second, other));
        let _third = serials.lock(9).await;
        assert_eq!(serials.held.lock().unwrap().len(), 1);
    }
}
