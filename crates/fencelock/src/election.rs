//! Leader elections: one leader at a time, a term to fence with, a leader one can watch.
//!
//! An election is a queue on one name, as a mutex is: each campaign is a participant, the
//! first one leads and advertises a value, the others wait in arrival order; the leader's
//! term is its holding's fencing token. The service keeps the participant's value in its
//! entry (Curator's `LeaderLatch` node data, etcd's `concurrency.Election` key value), so
//! other clients read and watch the leader without fencelock (docs/SAFETY.md, "Elections").

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tracing::Instrument;

use crate::backend::{Feed, Kind, Leader, Released, Wait};
use crate::error::{InputError, Result};
use crate::guard::Guard;
use crate::lease::LostReason;
use crate::lock::{timed, Contended, Lock};
use crate::shared::Shared;

/// The longest value a participant may advertise, in bytes.
pub const MAX_VALUE_LEN: usize = 4096;

/// A handle on one named election. Cheap to clone; no I/O until used.
///
/// Each [`Election::campaign`] is a participant of its own (a fresh owner id), so two
/// campaigns through one handle are two participants, served in arrival order.
///
/// ```no_run
/// # async fn demo() -> fencelock::Result<()> {
/// let client = fencelock::Client::connect("redis://127.0.0.1:6379").await?;
/// let election = client.election("billing-leader");
/// let leading = election.campaign("worker-1:8080").await?;
/// let term = leading.term(); // hand it to the resources this leader writes to
/// tokio::select! {
///     _ = leading.lost() => eprintln!("deposed: stop writing"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {
///         leading.resign().await?;
///     }
/// }
/// # let _ = term; Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    client: Arc<Shared>,
    name: Arc<str>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish()
    }
}

/// Checks a value a participant advertises.
fn validate_value(value: &str) -> Result<(), InputError> {
    if value.len() > MAX_VALUE_LEN {
        return Err(InputError::ValueTooLong {
            len: value.len(),
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

impl Election {
    pub(crate) fn new(client: Arc<Shared>, name: &str) -> Self {
        Self {
            client,
            name: name.into(),
        }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A new participant: a lock handle on the election's name with a fresh owner id.
    fn participant(&self) -> Lock {
        Lock::new(self.client.clone(), &self.name, self.client.next_owner())
    }

    /// Campaigns as `participant`, advertising `value`.
    async fn run(
        &self,
        participant: &Lock,
        value: &str,
        wait: Wait,
    ) -> Result<Result<Leadership, Contended>> {
        validate_value(value)?;
        let asked = participant.ask(Kind::Leader { value }, wait).await?;
        Ok(asked.map(|guard| Leadership {
            guard,
            value: value.to_owned(),
        }))
    }

    /// Campaigns as a new participant, waiting as `wait` says (a waiting campaign never ends
    /// busy: if a service said so, it is a protocol error).
    async fn waited(&self, value: &str, wait: Wait) -> Result<Leadership> {
        let participant = self.participant();
        let leading = self.run(&participant, value, wait).await?;
        leading.map_err(|busy| participant.busy_error(busy))
    }

    /// Campaigns until this participant leads, advertising `value` (at most
    /// [`MAX_VALUE_LEN`] bytes). Participants lead in arrival order; dropping the future
    /// withdraws the participant.
    pub async fn campaign(&self, value: &str) -> Result<Leadership> {
        self.waited(value, Wait::Until(None))
            .instrument(tracing::debug_span!("campaign", election = %self.name))
            .await
    }

    /// Like [`Election::campaign`], but gives up after `timeout` with
    /// [`crate::Error::Timeout`] (at most [`crate::MAX_TIMEOUT`]).
    pub async fn campaign_timeout(&self, value: &str, timeout: Duration) -> Result<Leadership> {
        let wait = timed("campaign_timeout", timeout)?;
        self.waited(value, wait)
            .instrument(tracing::debug_span!("campaign", election = %self.name, ?timeout))
            .await
    }

    /// One attempt: leadership if nobody leads, else `Contended` (and the participant is
    /// withdrawn).
    pub async fn try_campaign(&self, value: &str) -> Result<Result<Leadership, Contended>> {
        self.run(&self.participant(), value, Wait::No)
            .instrument(tracing::debug_span!("try_campaign", election = %self.name))
            .await
    }

    /// The current leader, or `None` when nobody leads, as the servers have it now.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let lock = self.client.lock_name(&self.name)?;
        self.client.service.leader(&lock).await
    }

    /// Follows the election's leader: see [`Observer`]. The first
    /// [`Observer::changed`] reports the leader as it is now.
    pub async fn observe(&self) -> Result<Observer> {
        let lock = self.client.lock_name(&self.name)?;
        let feed = self.client.service.observe(&lock).await?;
        Ok(Observer {
            election: self.clone(),
            feed: Some(feed),
            reported: None,
            high: 0,
        })
    }
}

/// Leadership of an election: proof of leading, the term to fence with, the lost signal.
///
/// Give it up with [`Leadership::resign`]; dropped, it is resigned in the background, as a
/// dropped [`Guard`] is released.
#[must_use = "dropping a leadership resigns at once; hold it while you lead"]
#[derive(Debug)]
pub struct Leadership {
    guard: Guard,
    value: String,
}

impl Leadership {
    /// The election's name.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// This leader's term: strictly greater than every earlier leader's of this election.
    /// Hand it to the resources the leader writes to, as a fencing token.
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// The value this leader advertises.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The participant id this leader campaigned as.
    pub fn participant(&self) -> &str {
        self.guard.owner()
    }

    /// Resolves when this participant no longer safely leads: its lease or session ended
    /// (before another participant can lead: the deadline is taken with the drift margin),
    /// its entry was deleted, or it resigned.
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.guard.lost()
    }

    /// A token cancelled when [`Leadership::lost`] would resolve, to hand to other tasks.
    pub fn lost_token(&self) -> CancellationToken {
        self.guard.lost_token()
    }

    /// Why the leadership was lost, if it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.guard.lost_reason()
    }

    /// Whether this participant still safely leads, from local state only.
    pub fn is_leading(&self) -> bool {
        self.guard.is_held()
    }

    /// Advertises `value` instead, while leading (at most [`MAX_VALUE_LEN`] bytes). Fails with
    /// [`crate::Error::LockLost`] when this participant no longer leads; the value is then
    /// unchanged.
    pub async fn proclaim(&mut self, value: &str) -> Result<()> {
        validate_value(value)?;
        let (client, state) = self.guard.parts();
        if !state.is_held() {
            return Err(state.lost_error());
        }
        client.service.proclaim(state, value).await?;
        self.value = value.to_owned();
        Ok(())
    }

    /// Steps down: the next participant in arrival order leads. Reports
    /// [`Released::NotHeld`] when the leadership had been lost already.
    pub async fn resign(self) -> Result<Released> {
        self.guard.release().await
    }
}

/// A follower of an election's leader, from [`Election::observe`].
///
/// [`Observer::changed`] reports the leader as it is first, then each change, in order:
/// a new leader (never one with an older term than one already reported), a new value of the
/// leader, or nobody leading. It fails when the service can no longer follow (the session or
/// connection was lost, etcd compacted the history it watched); called again after that, it
/// follows anew and reports the leader as it is then.
///
/// What "each change" covers depends on the service (docs/SAFETY.md, "Elections"): a leader
/// that came and went between two reads may go unreported where the service tells only that
/// something changed (ZooKeeper's watches); terms still only increase.
pub struct Observer {
    election: Election,
    feed: Option<Feed>,
    /// The last leader reported (`Some(None)`: nobody), `None` before the first report.
    reported: Option<Option<Leader>>,
    /// The highest term reported: an older leader is never reported after it.
    high: u64,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("election", &self.election.name)
            .field("reported", &self.reported)
            .finish()
    }
}

impl Observer {
    /// The next change of leader (`None`: nobody leads); see [`Observer`].
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        loop {
            let feed = match &mut self.feed {
                Some(feed) => feed,
                None => {
                    let lock = self.election.client.lock_name(&self.election.name)?;
                    self.feed = Some(self.election.client.service.observe(&lock).await?);
                    // After a gap, the leader as it is now is news even if it is the same.
                    self.reported = None;
                    continue;
                }
            };
            let seen = match feed.recv().await {
                Some(Ok(seen)) => seen,
                Some(Err(e)) => {
                    self.feed = None;
                    return Err(e);
                }
                None => {
                    self.feed = None;
                    return Err(crate::Error::Unavailable {
                        lock: Some(self.election.name.to_string()),
                        server: self.election.client.service.server(),
                        detail: "the election's observer stopped".into(),
                    });
                }
            };
            if self.news(&seen) {
                if let Some(leader) = &seen {
                    self.high = leader.term;
                }
                self.reported = Some(seen.clone());
                return Ok(seen);
            }
        }
    }

    /// Whether `seen` is a change to report: not the leader last reported, and not a
    /// leader older than it.
    fn news(&self, seen: &Option<Leader>) -> bool {
        if seen.as_ref().is_some_and(|now| now.term < self.high) {
            return false;
        }
        match (&self.reported, seen) {
            (None, _) => true,
            (Some(Some(last)), Some(now)) => now.term > last.term || now.value != last.value,
            (Some(None), None) => false,
            (Some(_), _) => true,
        }
    }
}
