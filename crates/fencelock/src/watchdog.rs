//! The one background task of a client.
//!
//! It renews every lease the client holds (a timer queue, with renewals that fall due together
//! sent in one pipelined round trip), fires the lost-lock signal when a lease's deadline passes
//! without a successful renewal, and runs the work that synchronous code (a guard's `Drop`, a
//! cancelled acquire) hands to it (`background`). It holds the lock service that renews only
//! through a `Weak` reference (`Renewer`) and ends when the client is gone.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::background::{Job, Work};
use crate::error::Error;
use crate::lease::{LeaseState, LeaseTimes, LostReason, Renewal};
use crate::options::ClientOptions;
use crate::telemetry;

/// Renewals due within one quantum of each other go out together.
const BATCH_QUANTUM: Duration = Duration::from_millis(10);
/// The most renewals in one pipeline.
const MAX_BATCH: usize = 1000;
/// Below this many queue entries, stale ones are not worth compacting.
const COMPACT_MIN: usize = 1024;

/// Renews leases for the watchdog: the client's lock service, held weakly so that the
/// background task never keeps a client alive.
pub(crate) trait Renewer: Send + Sync + 'static {
    /// Renews these leases; per-lease outcomes in order, or an error for the whole round.
    fn renew(&self, leases: Vec<Arc<LeaseState>>) -> BoxFuture<'_, Renewals>;
}

/// The outcome of a renewal round: per lease, or for the whole round.
pub(crate) type Renewals = Result<Vec<Result<Renewal, Error>>, Error>;

/// A boxed future, as the renewer returns it.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

struct Entry {
    at: Instant,
    lease: Weak<LeaseState>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    // Earliest first in a max-heap.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other.at.cmp(&self.at)
    }
}

/// The timer queue. Released leases leave their entries behind (a heap cannot remove from
/// the middle); they are dropped when popped, or all at once when the queue has doubled since
/// the last sweep, which keeps the sweep's cost amortised O(1) per entry.
#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Entry>,
    sweep_at: usize,
}

/// The client's handle on its background task.
pub(crate) struct Watchdog {
    queue: Mutex<Queue>,
    wake: Notify,
    options: ClientOptions,
}

/// The receiving half, moved into the task when it is spawned.
pub(crate) struct Runner {
    work: mpsc::UnboundedReceiver<Job>,
}

type Pending = Pin<Box<dyn Future<Output = Option<RenewalRound>> + Send>>;

/// The outcome of one pipelined renewal round.
struct RenewalRound {
    sent: Instant,
    leases: Vec<Arc<LeaseState>>,
    results: Renewals,
}

impl Watchdog {
    /// The watchdog, and the runner of the task that drives it and `background`'s work.
    pub(crate) fn new(
        options: ClientOptions,
        work: mpsc::UnboundedReceiver<Job>,
    ) -> (Self, Runner) {
        (
            Self {
                queue: Mutex::new(Queue::default()),
                wake: Notify::new(),
                options,
            },
            Runner { work },
        )
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies what an extension of `lease` (sent at `sent`, asking for `term`) found: a
    /// later deadline, or the lost-lock signal; an error when the lock is lost.
    pub(crate) fn extended(
        &self,
        lease: &Arc<LeaseState>,
        renewal: Renewal,
        sent: Instant,
        term: Duration,
    ) -> Result<(), Error> {
        if renewal == Renewal::NotHeld {
            lease.fire_lost(LostReason::Extension);
            return Err(lease.lost_error());
        }
        {
            let mut times = lease.times();
            if lease.token().is_cancelled() {
                drop(times);
                return Err(lease.lost_error());
            }
            times.deadline = times.deadline.max(self.deadline(sent, term));
        }
        self.track(lease);
        Ok(())
    }

    /// The usable part of a lease that began (was requested) at `sent`.
    pub(crate) fn deadline(&self, sent: Instant, lease: Duration) -> Instant {
        sent + lease.saturating_sub(self.options.drift(lease))
    }

    /// When to renew a lease requested at `sent`: a third into it, on a coarse grid so that
    /// renewals of locks taken close together share a round trip.
    pub(crate) fn renew_at(&self, sent: Instant, lease: Duration) -> Instant {
        let at = sent + lease / 3;
        if lease < BATCH_QUANTUM * 30 {
            return at;
        }
        // Round down to the quantum, measured from a fixed origin: renewing a little early is
        // harmless, late is not.
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        let since = at.saturating_duration_since(origin);
        let q = BATCH_QUANTUM.as_nanos();
        let rounded = Duration::from_nanos((since.as_nanos() / q * q) as u64);
        (origin + rounded).max(sent)
    }

    /// Brings the renewal of every lease the watchdog renews forward to now: the server
    /// behind them may have lost them (a restart, a failover), and their holders must hear
    /// of it at once. (Fixed leases are not renewed, so they are not checked.)
    // Seam vocabulary: a build without the services that use it leaves it unused.
    #[allow(dead_code)]
    pub(crate) fn renew_all_now(&self) {
        let leases = self.leases();
        let now = Instant::now();
        for lease in leases.iter().filter(|l| l.hold.renew) {
            let mut times = lease.times();
            if !times.in_flight && times.renew_at > now && !lease.token().is_cancelled() {
                times.renew_at = now;
                self.schedule(lease, &mut times);
            }
        }
    }

    /// The leases the watchdog tracks (a lease may be listed more than once).
    pub(crate) fn leases(&self) -> Vec<Arc<LeaseState>> {
        let queue = self.queue();
        queue
            .heap
            .iter()
            .filter_map(|e| e.lease.upgrade())
            .collect()
    }

    /// Queues a lease at its next event: a new lease, or one whose deadline moved (extended
    /// by hand). An entry that is already right is left alone.
    pub(crate) fn track(&self, lease: &Arc<LeaseState>) {
        let mut times = lease.times();
        self.schedule(lease, &mut times);
    }

    /// (Re)queues a lease at its next event; the caller holds its times.
    fn schedule(&self, lease: &Arc<LeaseState>, times: &mut LeaseTimes) {
        let next = if lease.hold.renew && !times.in_flight {
            times.deadline.min(times.renew_at)
        } else {
            times.deadline
        };
        if times.scheduled == Some(next) {
            return;
        }
        times.scheduled = Some(next);
        let mut queue = self.queue();
        let earliest = queue.heap.peek().map(|e| e.at);
        if queue.heap.len() >= queue.sweep_at.max(COMPACT_MIN) {
            queue.heap.retain(|e| e.lease.strong_count() > 0);
            queue.sweep_at = 2 * queue.heap.len();
        }
        queue.heap.push(Entry {
            at: next,
            lease: Arc::downgrade(lease),
        });
        drop(queue);
        if earliest.is_none_or(|e| next < e) {
            self.wake.notify_one();
        }
    }

    /// Pops every entry due by `now`: fires lost signals, and returns the leases to renew.
    fn due(&self, now: Instant) -> Vec<Arc<LeaseState>> {
        let mut batch = Vec::new();
        loop {
            let entry = {
                let mut queue = self.queue();
                match queue.heap.peek() {
                    Some(e) if e.at <= now && batch.len() < MAX_BATCH => queue.heap.pop(),
                    _ => None,
                }
            };
            let Some(entry) = entry else { break };
            let Some(lease) = entry.lease.upgrade() else {
                continue;
            };
            if lease.is_finished() {
                continue;
            }
            let mut times = lease.times();
            if times.scheduled != Some(entry.at) {
                continue; // superseded by a later entry
            }
            times.scheduled = None;
            if now >= times.deadline {
                drop(times);
                lease.fire_lost(LostReason::Deadline);
                continue;
            }
            if lease.hold.renew && !times.in_flight && now >= times.renew_at {
                times.in_flight = true;
                batch.push(lease.clone());
            }
            self.schedule(&lease, &mut times);
        }
        batch
    }

    fn next_event(&self) -> Option<Instant> {
        self.queue().heap.peek().map(|e| e.at)
    }

    /// Applies the replies of one renewal round.
    fn apply(&self, round: RenewalRound) {
        let RenewalRound {
            sent,
            leases,
            results,
        } = round;
        telemetry::renewed_in(sent.elapsed());
        let results: Vec<Result<Renewal, String>> = match results {
            Ok(each) => each
                .into_iter()
                .map(|r| r.map_err(|e| e.to_string()))
                .collect(),
            Err(e) => {
                let e = e.to_string();
                leases.iter().map(|_| Err(e.clone())).collect()
            }
        };
        for (lease, result) in leases.iter().zip(results) {
            let mut times = lease.times();
            times.in_flight = false;
            if lease.is_finished() {
                continue;
            }
            match result {
                Ok(Renewal::Renewed) => {
                    telemetry::renewal("renewed");
                    let deadline = self.deadline(sent, lease.hold.lease);
                    times.deadline = times.deadline.max(deadline);
                    times.renew_at = self.renew_at(sent, lease.hold.lease);
                    tracing::debug!(lock = %lease.hold.lock.name, "lease renewed");
                }
                Ok(Renewal::NotHeld) => {
                    telemetry::renewal("not_held");
                    drop(times);
                    lease.fire_lost(LostReason::Renewal);
                    continue;
                }
                Err(e) => {
                    telemetry::renewal("failed");
                    // Try again soon; the deadline stays, and fires if the server stays away.
                    let retry = (lease.hold.lease / 10).min(Duration::from_secs(1));
                    times.renew_at = Instant::now() + retry;
                    tracing::warn!(lock = %lease.hold.lock.name, error = %e, "lease renewal failed; retrying");
                }
            }
            self.schedule(lease, &mut times);
        }
    }
}

impl Runner {
    /// The task's body. It holds the watchdog strongly and the renewer (the client's lock
    /// service) only weakly, so that it never keeps a client alive; it ends when the client's
    /// shutdown token fires.
    pub(crate) async fn run(
        mut self,
        watchdog: Arc<Watchdog>,
        renewer: Weak<dyn Renewer>,
        shutdown: CancellationToken,
    ) {
        let mut renewals: FuturesUnordered<Pending> = FuturesUnordered::new();
        // Work that must finish (releases, undos), and work that may be dropped at the end.
        let mut chores: FuturesUnordered<Work> = FuturesUnordered::new();
        let mut lingering: FuturesUnordered<Work> = FuturesUnordered::new();
        loop {
            let next = watchdog.next_event();
            let sleep = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = watchdog.wake.notified() => {}
                _ = sleep => {}
                Some(round) = renewals.next(), if !renewals.is_empty() => {
                    if let Some(round) = round {
                        watchdog.apply(round);
                    }
                }
                Some(()) = chores.next(), if !chores.is_empty() => {}
                Some(()) = lingering.next(), if !lingering.is_empty() => {}
                job = self.work.recv() => match job {
                    Some(Job { work, keep: true }) => chores.push(work),
                    Some(Job { work, keep: false }) => lingering.push(work),
                    None => break,
                },
            }
            let due = watchdog.due(Instant::now());
            if !due.is_empty() {
                renewals.push(Box::pin(renew(renewer.clone(), due)));
            }
        }
        // The client is gone; releases and undos it left still run to their end (each is
        // bounded in time), so that its last guards do not stay on the server for a lease.
        self.work.close();
        while let Ok(job) = self.work.try_recv() {
            if job.keep {
                chores.push(job.work);
            }
        }
        while chores.next().await.is_some() {}
        tracing::debug!("fencelock watchdog stopped");
    }
}

async fn renew(renewer: Weak<dyn Renewer>, leases: Vec<Arc<LeaseState>>) -> Option<RenewalRound> {
    let renewer = renewer.upgrade()?;
    let sent = Instant::now();
    let results = renewer.renew(leases.clone()).await;
    Some(RenewalRound {
        sent,
        leases,
        results,
    })
}
