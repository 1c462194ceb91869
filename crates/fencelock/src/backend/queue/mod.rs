//! The queue recipe of the session services (ZooKeeper, etcd), written once: an attempt
//! enters the lock's queue (an ephemeral sequential node, a key under the client's lease),
//! finds its place, waits with a watch for the entry it queues behind to go, looks again,
//! and holds when the [`rule`] says so; an attempt given up (busy, past its deadline, failed,
//! or its future dropped) is undone, at once or in the background. Apache Curator builds its
//! mutex, read-write lock and semaphore on one such loop (`LockInternals`) with a small
//! driver; etcd's `concurrency.Mutex` is the same loop over revisions.
//!
//! Each service keeps its recipe specifics behind a [`Driver`]: how an entry is made (with
//! what the service can read in the same round trip), how the queue is read, how one waits
//! for an entry to go, how an attempt is undone; and its URL and session. Giving a holding
//! back is `super::holdings::give_back`, and the `LockService` over a session
//! `super::session_service`, shared the same way.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use self::rule::{Decision, Rule, Sight};
use super::Wait;
use crate::error::Error;

pub(crate) mod recipe;
pub(crate) mod rule;

/// What one turn of an attempt behind another entry came to.
pub(crate) enum Turn {
    /// Look at the queue again (the entry waited on changed, or is gone).
    Again,
    /// A request failed on a connection loss: pause, then look again.
    Retry,
    /// Busy without waiting, or past the deadline.
    GiveUp,
}

/// A service's side of the queue recipe. `Attempt` is what it keeps of one attempt (its
/// entry once made); `Entry` an entry of the queue as it reads it.
pub(crate) trait Driver: Send + Sync {
    /// An entry of the queue (a node's path, a key with its revision and owner).
    type Entry: Send + Sync + rule::Queued;
    /// One attempt: what its undo needs, and what a holding is made of.
    type Attempt: Send;
    /// Why a request failed.
    type Fault: Send;

    /// Whether an entry whose creation failed on a connection loss is made again by the
    /// loop (when the attempt waits and has time left); `false` when the driver retries
    /// itself (ZooKeeper's protected creation).
    const ENTER_AGAIN: bool;
    /// The pause before a request that failed on a connection loss is tried again.
    const PAUSE: Duration;

    /// Makes the attempt's entry. Returns the entries ahead of it when they could be read
    /// in the same round trip (as much as `sight` asks for), or `None`: the loop looks.
    fn enter(
        &self,
        attempt: &mut Self::Attempt,
        sight: Sight,
    ) -> impl Future<Output = Result<Option<Vec<Self::Entry>>, Self::Fault>> + Send;

    /// The entries ahead of the attempt's own, in queue order (as much as `sight` asks for);
    /// `None` when its own is gone (the session ended, or it was deleted).
    fn look(
        &self,
        attempt: &mut Self::Attempt,
        sight: Sight,
    ) -> impl Future<Output = Result<Option<Vec<Self::Entry>>, Self::Fault>> + Send;

    /// One turn behind entry `on`, with `holder` the first entry: refuses to queue behind
    /// a holding that this owner has in another session, gives up at once without waiting,
    /// or waits until `on` goes or the deadline passes.
    fn behind(
        &self,
        attempt: &mut Self::Attempt,
        holder: &Self::Entry,
        on: &Self::Entry,
        wait: Wait,
    ) -> impl Future<Output = Result<Turn, Error>> + Send;

    /// Removes what the attempt may have left in the queue.
    fn undo(
        &self,
        attempt: &mut Self::Attempt,
    ) -> impl Future<Output = Result<(), Self::Fault>> + Send;

    /// [`Driver::undo`] as the client's background work, tried until done or the session
    /// ends: for an attempt whose undo failed or whose future was dropped.
    fn undo_later(&self, attempt: Self::Attempt);

    /// An attempt that ended without holding, its entry removed.
    fn undone(&self, attempt: Self::Attempt) {
        drop(attempt);
    }

    /// Whether a failed request may work later (no reply, no connection) while the session
    /// lives.
    fn transient(&self, fault: &Self::Fault) -> bool;

    /// A failure as fencelock's error.
    fn fail(&self, fault: Self::Fault) -> Error;

    /// The error of an attempt whose entry vanished while it waited.
    fn vanished(&self) -> Error;
}

/// Runs an attempt through the queue under `rule`: the attempt back once it holds, `None`
/// when it gave up (busy, or past the deadline: its entry removed), or the error (its entry
/// removed). Dropped on the way, the attempt is undone in the background.
pub(crate) async fn take<D: Driver, R: Rule>(
    driver: &D,
    rule: &R,
    attempt: D::Attempt,
    wait: Wait,
) -> Result<Option<D::Attempt>, Error> {
    let mut armed = Armed {
        driver,
        attempt: Some(attempt),
    };
    let outcome = match armed.attempt.as_mut() {
        Some(mine) => contend(driver, rule, mine, wait).await,
        None => Ok(false),
    };
    if let Ok(true) = outcome {
        return Ok(armed.attempt.take());
    }
    if let Some(mine) = armed.attempt.as_mut() {
        if driver.undo(mine).await.is_ok() {
            if let Some(mine) = armed.attempt.take() {
                driver.undone(mine);
            }
        }
    }
    outcome.map(|_| None)
}

/// An attempt that is not settled yet: dropped so, it is undone in the background.
struct Armed<'d, D: Driver> {
    driver: &'d D,
    attempt: Option<D::Attempt>,
}

impl<D: Driver> Drop for Armed<'_, D> {
    fn drop(&mut self) {
        if let Some(attempt) = self.attempt.take() {
            self.driver.undo_later(attempt);
        }
    }
}

/// Whether a failed request is tried again: a waiter outlives a failed request (a leader
/// election, a connection loss) while its session and its deadline do; its entry stays.
fn retries<D: Driver>(driver: &D, wait: Wait, fault: &D::Fault) -> bool {
    matches!(wait, Wait::Until(_))
        && driver.transient(fault)
        && wait.deadline().is_none_or(|at| Instant::now() < at)
}

/// Enters the queue and waits for the rule to say the attempt holds (`true`), or gives up
/// (`false`).
async fn contend<D: Driver, R: Rule>(
    driver: &D,
    rule: &R,
    attempt: &mut D::Attempt,
    wait: Wait,
) -> Result<bool, Error> {
    let sight = rule.sight();
    let mut ahead = loop {
        match driver.enter(attempt, sight).await {
            Ok(ahead) => break ahead,
            Err(f) if D::ENTER_AGAIN && retries(driver, wait, &f) => {
                tokio::time::sleep(D::PAUSE).await
            }
            Err(f) => return Err(driver.fail(f)),
        }
    };
    loop {
        let entries = match ahead.take() {
            Some(entries) => entries,
            None => match driver.look(attempt, sight).await {
                Ok(Some(entries)) => entries,
                Ok(None) => return Err(driver.vanished()),
                Err(f) if retries(driver, wait, &f) => {
                    tokio::time::sleep(D::PAUSE).await;
                    continue;
                }
                Err(f) => return Err(driver.fail(f)),
            },
        };
        let (holder, on) = match rule.decide(&entries) {
            Decision::Holds => return Ok(true),
            Decision::Waits { holder, on } => (holder, on),
        };
        match driver.behind(attempt, holder, on, wait).await? {
            Turn::Again => {}
            Turn::Retry => tokio::time::sleep(D::PAUSE).await,
            Turn::GiveUp => return Ok(false),
        }
    }
}
