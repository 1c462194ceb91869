//! The one background task of a client.
//!
//! It renews every lease the client holds (a timer queue, with renewals that fall due together
//! sent in one pipelined round trip), fires the lost-lock signal when a lease's deadline passes
//! without a successful renewal, and runs the requests that synchronous code (a guard's `Drop`,
//! a cancelled acquire) could not await. It holds only a `Weak` reference to the client and ends
//! when the client is gone.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::Renewal;
use crate::client::ClientInner;
use crate::error::Error;
use crate::lease::{LeaseState, LeaseTimes, Lost};
use crate::name::LockKeys;
use crate::options::ClientOptions;
use crate::telemetry;

/// Renewals due within one quantum of each other go out together.
const BATCH_QUANTUM: Duration = Duration::from_millis(10);
/// The most renewals in one pipeline.
const MAX_BATCH: usize = 1000;
/// How long a release channel stays subscribed after its last local waiter left.
const SUBSCRIPTION_LINGER: Duration = Duration::from_secs(1);
/// Below this many queue entries, stale ones are not worth compacting.
const COMPACT_MIN: usize = 1024;

/// Work for the background task that its senders could not await themselves.
pub(crate) enum Request {
    /// Give back one hold, named by the attempt that took it: a guard dropped without
    /// `release`, an acquire whose reply was lost, a queue place given up.
    Release {
        client: Arc<ClientInner>,
        keys: Arc<LockKeys>,
        owner: Arc<str>,
        hold: u64,
        /// The guard's lease, whose heals the release must come after (RedLock).
        lease: Option<Arc<LeaseState>>,
    },
    /// Requests of a decided RedLock operation that are still in flight: they must run to the
    /// end (a NOSCRIPT retry, an undo queued behind a late acquire), not be dropped.
    Finish(Pin<Box<dyn Future<Output = ()> + Send>>),
    /// The last local waiter on a channel left: unsubscribe unless a new one came.
    Unsubscribe {
        client: Arc<ClientInner>,
        channel: String,
    },
}

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
    requests: mpsc::UnboundedSender<Request>,
    /// Background work that should be done before the program exits (releases, undos,
    /// finishing RedLock requests): what `Client::close` waits for.
    pub(crate) tracker: TaskTracker,
    /// RedLock give-backs that failed on a server after a majority had answered (that server
    /// may keep a grant until its lease ends): what `Client::close` reports.
    failures: Arc<AtomicUsize>,
    options: ClientOptions,
}

/// Hands futures to the background task to be driven to completion.
#[derive(Clone)]
pub(crate) struct Finisher(
    mpsc::UnboundedSender<Request>,
    TaskTracker,
    Arc<AtomicUsize>,
);

impl Finisher {
    /// Counts a background give-back that failed, for `Client::close` to report.
    pub(crate) fn failed(&self) {
        self.2.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn finish(&self, work: impl Future<Output = ()> + Send + 'static) {
        let _ = self
            .0
            .send(Request::Finish(Box::pin(self.1.track_future(work))));
    }
}

/// The receiving half, moved into the task when it is spawned.
pub(crate) struct Runner {
    requests: mpsc::UnboundedReceiver<Request>,
}

type Pending = Pin<Box<dyn Future<Output = Option<RenewalRound>> + Send>>;

/// The outcome of one pipelined renewal round.
struct RenewalRound {
    sent: Instant,
    leases: Vec<Arc<LeaseState>>,
    results: Result<Vec<Result<Renewal, Error>>, Error>,
}

impl Watchdog {
    pub(crate) fn new(options: ClientOptions) -> (Self, Runner) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self {
                queue: Mutex::new(Queue::default()),
                wake: Notify::new(),
                requests: tx,
                tracker: TaskTracker::new(),
                failures: Arc::new(AtomicUsize::new(0)),
                options,
            },
            Runner { requests: rx },
        )
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands work to the background task. Fails quietly when the task is gone (the runtime
    /// shut down): then the lease simply expires, as documented for dropped guards.
    pub(crate) fn send(&self, request: Request) {
        let request = match request {
            // Lingers on purpose; nothing is lost if it never runs.
            Request::Unsubscribe { .. } => request,
            work => Request::Finish(Box::pin(self.tracker.track_future(run_request(work)))),
        };
        let _ = self.requests.send(request);
    }

    /// A handle for backends to hand in-flight work to the background task.
    pub(crate) fn finisher(&self) -> Finisher {
        Finisher(
            self.requests.clone(),
            self.tracker.clone(),
            self.failures.clone(),
        )
    }

    /// How many RedLock give-backs failed on a straggler since the last call.
    pub(crate) fn take_failures(&self) -> usize {
        self.failures.swap(0, Ordering::Relaxed)
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
                lease.fire_lost(Lost::Deadline);
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
                    tracing::debug!(lock = %lease.hold.keys.name, "lease renewed");
                }
                Ok(Renewal::NotHeld) => {
                    telemetry::renewal("not_held");
                    drop(times);
                    lease.fire_lost(Lost::Renewal);
                    continue;
                }
                Err(e) => {
                    telemetry::renewal("failed");
                    // Try again soon; the deadline stays, and fires if the server stays away.
                    let retry = (lease.hold.lease / 10).min(Duration::from_secs(1));
                    times.renew_at = Instant::now() + retry;
                    tracing::warn!(lock = %lease.hold.keys.name, error = %e, "lease renewal failed; retrying");
                }
            }
            self.schedule(lease, &mut times);
        }
    }
}

impl Runner {
    /// The task's body. It holds the watchdog strongly and the client only weakly, so that it
    /// never keeps a client alive; it ends when the client's shutdown token fires.
    pub(crate) async fn run(
        mut self,
        watchdog: Arc<Watchdog>,
        client: Weak<ClientInner>,
        shutdown: CancellationToken,
    ) {
        let mut renewals: FuturesUnordered<Pending> = FuturesUnordered::new();
        let mut chores: FuturesUnordered<Pin<Box<dyn Future<Output = ()> + Send>>> =
            FuturesUnordered::new();
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
                request = self.requests.recv() => match request {
                    Some(request) => chores.push(Box::pin(run_request(request))),
                    None => break,
                },
            }
            let due = watchdog.due(Instant::now());
            if !due.is_empty() {
                renewals.push(Box::pin(renew(client.clone(), due)));
            }
        }
        tracing::debug!("fencelock watchdog stopped");
    }
}

async fn renew(client: Weak<ClientInner>, leases: Vec<Arc<LeaseState>>) -> Option<RenewalRound> {
    let inner = client.upgrade()?;
    let sent = Instant::now();
    let results = inner.backend.renew_batch(leases.clone()).await;
    Some(RenewalRound {
        sent,
        leases,
        results,
    })
}

async fn run_request(request: Request) {
    match request {
        Request::Release {
            client,
            keys,
            owner,
            hold,
            lease,
        } => {
            let outcome = {
                let _serial = match &lease {
                    Some(lease) => Some(lease.serial.lock().await),
                    None => None,
                };
                client.backend.release(&keys, &owner, Some(hold)).await
            };
            match outcome {
                Ok(released) => {
                    client.abandoned.settle(&keys, &owner, &[hold]);
                    tracing::debug!(lock = %keys.name, ?released, hold, "background release")
                }
                Err(e) => {
                    tracing::warn!(lock = %keys.name, error = %e, "background release failed; the lease will expire")
                }
            }
        }
        Request::Finish(work) => work.await,
        Request::Unsubscribe { client, channel } => {
            // Linger: a lock that is contended now is likely contended again in a moment, and
            // re-subscribing would cost two commands per episode.
            tokio::time::sleep(SUBSCRIPTION_LINGER).await;
            client
                .waiters
                .unsubscribe_if_idle(&client.backend, &channel)
                .await;
        }
    }
}
