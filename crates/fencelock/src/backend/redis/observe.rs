//! Following an election's leader (`Election::observe`) on one deployment (not RedLock).
//!
//! A follower is a task of its own. It joins the lock's subscription (`waiters::Watch`) and,
//! once the server confirmed it, reads the leader (`leader.lua`: token, value, remaining
//! lease), and reads it again on every message on the lock's channel (the scripts publish
//! `=leader` when an election's leader is taken, handed over, given back or proclaims; a
//! release, a handover to a queue place or a forced unlock publish there too), and when the
//! leader's lease would run out: a lease that ends without a release publishes nothing, so
//! the follower wakes at the expiry it read (after the server's, by the reply's way back), not
//! by polling. It sends what it read when it differs from what it sent last. A lost
//! subscription (messages may have been missed) or a failed read ends it with an error; the
//! core follows anew. It also ends when its receiver is dropped.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::engine::{Engine, ELECTION};
use super::keys::LockKeys;
use super::waiters::{WaitRegistry, Watching};
use crate::backend::{Feed, Leader};
use crate::error::Error;

/// What the follower sends at most ahead of its reader.
const FEED_ROOM: usize = 4;

/// The leader as read, and when to read again at the latest (its lease's end).
struct Seen {
    leader: Option<Leader>,
    until: Option<Instant>,
}

/// Reads the election's leader through `engine`: `Seen`, whose expiry counts from when the
/// reply arrived (the server's clock read it earlier, so the lease ends by then), plus 1 ms
/// for the server's rounding to whole ms.
async fn read(engine: &Engine, keys: &LockKeys) -> Result<Seen, Error> {
    let backend = engine.queued(ELECTION, "Election::observe")?;
    let read = backend.leader(keys).await?;
    let now = Instant::now();
    Ok(match read {
        None => Seen {
            leader: None,
            until: None,
        },
        Some((leader, remaining)) => Seen {
            leader: Some(leader),
            until: remaining.map(|left| now + left + Duration::from_millis(1)),
        },
    })
}

/// Starts following the election of lock `keys`: the feed's first item is the leader as it
/// is once the subscription is in place.
pub(super) async fn start(
    engine: &Arc<Engine>,
    waiters: &Arc<WaitRegistry>,
    keys: LockKeys,
) -> Result<Feed, Error> {
    let channel = keys.channel().to_string();
    // Dropped on an error or a future given up half-way, it removes the observer.
    let watching = waiters.watch(engine, &channel).await?;
    let first = read(engine, &keys).await?;
    let (feed, receiver) = mpsc::channel(FEED_ROOM);
    let follower = Follower {
        engine: Arc::downgrade(engine),
        keys,
        watching,
        feed,
    };
    tokio::spawn(follower.run(first));
    Ok(receiver)
}

/// One observer's task.
struct Follower {
    /// Weak: a follower does not keep a closed client's connections alive.
    engine: Weak<Engine>,
    keys: LockKeys,
    /// Its registration on the lock's channel, removed when the follower ends.
    watching: Watching,
    feed: mpsc::Sender<Result<Option<Leader>, Error>>,
}

impl Follower {
    async fn run(self, first: Seen) {
        let end = self.follow(first).await;
        if let Some(e) = end {
            let _ = self.feed.send(Err(e)).await;
        }
    }

    /// Sends each leader read until it can no longer follow (the error), or nobody reads.
    async fn follow(&self, mut seen: Seen) -> Option<Error> {
        let mut sent: Option<Option<Leader>> = None;
        loop {
            if sent.as_ref() != Some(&seen.leader) {
                self.feed.send(Ok(seen.leader.clone())).await.ok()?;
                sent = Some(seen.leader.clone());
            }
            let expiry = async {
                match seen.until {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.watching.watch.woken() => {}
                _ = expiry => {}
                _ = self.feed.closed() => return None,
            }
            if self.watching.watch.is_cut() {
                return Some(self.unavailable(
                    "the subscription to the election's channel was lost: changes may have \
                     been missed",
                ));
            }
            let Some(engine) = self.engine.upgrade() else {
                return Some(self.unavailable("the client was closed"));
            };
            seen = match read(&engine, &self.keys).await {
                Ok(now) => now,
                Err(e) => return Some(e),
            };
        }
    }

    fn unavailable(&self, detail: &str) -> Error {
        Error::Unavailable {
            lock: Some(self.keys.name().to_owned()),
            server: self
                .engine
                .upgrade()
                .map_or_else(String::new, |e| e.server()),
            detail: detail.to_owned(),
        }
    }
}
