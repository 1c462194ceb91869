//! Lock handles: acquiring, waiting, and the handle-level operations.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::redis::RawStatus;
use crate::backend::redis::ReplicaAcks;
use crate::backend::{AcquireReply, Queueing, Released};
use crate::client::ClientInner;
use crate::error::{Error, InputError, Result};
use crate::guard::Guard;
use crate::lease::LeaseState;
use crate::name::{validate_owner, LockKeys};
use crate::options::{validate_acks, validate_lease, LockOptions};
use crate::watchdog::Request;

/// A handle on one named lock, carrying an owner identity. Cheap to clone; clones share the
/// owner, so acquiring through a clone while a guard is held re-enters the lock (the hold count
/// goes up, and each guard gives back one hold).
///
/// ```no_run
/// # async fn demo() -> fencelock::Result<()> {
/// use std::time::Duration;
/// let client = fencelock::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.lock("orders:42");
/// let guard = lock.acquire().await?;
/// let again = lock.acquire().await?;            // re-entry: hold count 2
/// assert_eq!(again.fencing_token(), guard.fencing_token());
/// again.release().await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    client: Arc<ClientInner>,
    name: Arc<str>,
    keys: Result<Arc<LockKeys>, InputError>,
    owner: Arc<str>,
    options: LockOptions,
    problem: Option<InputError>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .field("options", &self.options)
            .finish()
    }
}

/// The lock is held by another owner (from [`Lock::try_acquire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contended {
    /// The holder's remaining lease as the server reported it; `None` if the key has no expiry
    /// (set by something other than fencelock). With RedLock: the shortest remaining lease
    /// among the majority that refused, or, when competing attempts split the servers and
    /// nobody holds a majority, a short random back-off (5-50 ms) before trying again.
    pub remaining_lease: Option<Duration>,
}

/// What the server knows about one lock, from [`crate::Client::status`] or [`Lock::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock name.
    pub name: String,
    /// Whether any owner holds it.
    pub held: bool,
    /// Each owner and its hold count (one owner for an exclusive lock).
    pub owners: Vec<(String, u64)>,
    /// The remaining lease; `None` when not held or when the key has no expiry.
    pub remaining_lease: Option<Duration>,
    /// The fencing token of the current holding.
    pub fencing_token: Option<u64>,
    /// The last fencing token issued for this name (also after release).
    pub last_token: Option<u64>,
}

impl LockStatus {
    pub(crate) fn from_raw(name: &str, raw: RawStatus) -> Self {
        Self {
            name: name.to_owned(),
            held: raw.held,
            owners: raw.owners,
            remaining_lease: raw.remaining,
            fencing_token: raw.current_token,
            last_token: raw.last_token,
        }
    }
}

/// The longest a waiter's place in the server's queue lasts without being renewed (locks
/// renewed by the watchdog; a fixed lease is its own window).
const PLACE_WINDOW: Duration = Duration::from_secs(5);

/// What one acquire attempt found.
enum Attempted {
    Acquired(Guard),
    Held {
        remaining: Option<Duration>,
        /// The place the attempt took in the server's wait queue.
        queued: Option<Place>,
    },
}

/// A place in the server's wait queue: the attempt that took (or last renewed) it, and when
/// that request was sent, which is when a lease handed over to it counts from.
#[derive(Debug, Clone, Copy)]
struct Place {
    attempt: u64,
    sent: Instant,
}

/// An attempt whose effects on the server the background task undoes if this is dropped
/// while armed: a hold the attempt may have taken (its reply was lost, or its future dropped),
/// or the place it took in the server's queue (a wait that ended without the lock; a handover
/// that arrived meanwhile is given back). The release is checked against the owner *and* the
/// attempt id, so that no orphan lock or place blocks others.
struct Undo<'a> {
    lock: &'a Lock,
    keys: &'a Arc<LockKeys>,
    armed: Option<Place>,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if let Some(place) = self.armed {
            self.lock.client.watchdog.send(Request::Release {
                client: self.lock.client.clone(),
                keys: self.keys.clone(),
                owner: self.lock.owner.clone(),
                attempt: Some(place.attempt),
            });
        }
    }
}

impl Lock {
    pub(crate) fn new(client: Arc<ClientInner>, name: &str, owner: String) -> Self {
        Self {
            client,
            name: name.into(),
            keys: LockKeys::new(name).map(Arc::new),
            owner: owner.into(),
            options: LockOptions::default(),
            problem: None,
        }
    }

    /// The same lock with other options (same owner). Invalid options are reported by the
    /// first operation, before any I/O.
    pub fn with_options(mut self, options: LockOptions) -> Self {
        self.problem = options
            .lease
            .and_then(|l| validate_lease(l).err())
            .or_else(|| {
                options
                    .replica_acks
                    .and_then(|(n, timeout)| validate_acks(n, timeout).err())
            });
        self.options = options;
        self
    }

    /// The same lock with an explicit owner id, so that another handle or process using the
    /// same id re-enters or releases it. Use with care: two processes with one owner id are one
    /// owner to the lock. At most 128 bytes, no whitespace, not starting with `=`.
    pub fn with_owner(mut self, owner: &str) -> Self {
        if let Err(e) = validate_owner(owner) {
            self.problem = Some(e);
        }
        self.owner = owner.into();
        self
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The owner id this handle acquires and releases as.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Input checks, before any I/O.
    fn checked(&self) -> Result<(&Arc<LockKeys>, Duration, bool)> {
        let keys = self.keys.as_ref().map_err(|e| e.clone())?;
        if let Some(problem) = &self.problem {
            return Err(problem.clone().into());
        }
        let (lease, renew) = match self.options.lease {
            Some(lease) => (lease, false),
            None => (self.client.options.default_lease, true),
        };
        self.client.options.validate_drift(lease)?;
        if let Some((_, timeout)) = self.options.replica_acks {
            if timeout >= lease {
                return Err(InputError::InvalidOption {
                    option: "min_replica_acks",
                    reason: "the timeout must be shorter than the lease, which could otherwise \
                             run out while the replicas are awaited",
                }
                .into());
            }
        }
        Ok((keys, lease, renew))
    }

    /// Acquires the lock, waiting as long as it takes. Waiting is driven by release
    /// notifications, bounded by the holder's remaining lease; dropping the future cancels the
    /// wait (and undoes an attempt that may have reached the server).
    pub async fn acquire(&self) -> Result<Guard> {
        self.acquire_until(None)
            .instrument(tracing::debug_span!("acquire", lock = %self.name))
            .await
    }

    /// Like [`Lock::acquire`], but gives up after `timeout` with [`Error::Timeout`].
    ///
    /// `timeout` is at most [`crate::MAX_TIMEOUT`]; a longer one (`Duration::MAX` included)
    /// is not read as "no timeout" but rejected with [`InputError::TimeoutTooLong`], before
    /// any I/O. To wait without a bound, use [`Lock::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Guard> {
        crate::options::validate_timeout("acquire_timeout", timeout)?;
        // Within the maximum this cannot fail on the platforms fencelock runs on; if it does,
        // the deadline is beyond what this clock can represent: still too long.
        let deadline = Instant::now()
            .checked_add(timeout)
            .ok_or(InputError::TimeoutTooLong {
                option: "acquire_timeout",
                timeout,
                max: crate::MAX_TIMEOUT,
            })?;
        self.acquire_until(Some((deadline, timeout)))
            .instrument(tracing::debug_span!("acquire", lock = %self.name, ?timeout))
            .await
    }

    /// One attempt: the guard, or the holder's remaining lease.
    pub async fn try_acquire(&self) -> Result<Result<Guard, Contended>> {
        let (keys, lease, renew) = self.checked()?;
        let attempted = self
            .attempt(keys, lease, renew, Queueing::default())
            .instrument(tracing::debug_span!("try_acquire", lock = %self.name))
            .await?;
        Ok(match attempted {
            Attempted::Acquired(guard) => Ok(guard),
            Attempted::Held { remaining, .. } => Err(Contended {
                remaining_lease: remaining,
            }),
        })
    }

    async fn acquire_until(&self, deadline: Option<(Instant, Duration)>) -> Result<Guard> {
        let (keys, lease, renew) = self.checked()?;
        let waiters = &self.client.waiters;
        // A handover is written by the releasing holder's script, with no `WAIT` for replicas:
        // locks that want replica acknowledgement take the lock themselves instead.
        let queues = self.client.backend.queues() && self.options.replica_acks.is_none();
        // How long a place in the server's queue stays valid without being renewed: a waiter
        // that dies is skipped (or, if handed the lock, loses it) after at most this long. A
        // fixed lease is never renewed, so there the place is as long as the lease.
        let window = if renew {
            lease.min(PLACE_WINDOW)
        } else {
            lease
        };
        // Queue behind this client's waiters instead of barging in. A caller that is not yet
        // subscribed to the lock's channel tries once first (an uncontended acquire costs one
        // round trip); one that is (a lock contended a moment ago) queues up at once, so that
        // its first attempt can take a place in the server's queue too.
        let queue_at_once =
            waiters.has_waiters(&keys.channel) || (queues && waiters.is_subscribed(&keys.channel));
        if !queue_at_once {
            if let Attempted::Acquired(guard) = self
                .attempt(keys, lease, renew, Queueing::default())
                .await?
            {
                return Ok(guard);
            }
        }
        let timed_out = || Error::Timeout {
            lock: keys.name.clone(),
            waited: deadline.map_or(Duration::ZERO, |(_, d)| d),
        };
        let ticket = match deadline {
            Some((at, _)) => tokio::time::timeout_at(at, waiters.join(&self.client, &keys.channel))
                .await
                .map_err(|_| timed_out())??,
            None => waiters.join(&self.client, &keys.channel).await?,
        };
        // Waits for a notification, for at most `bound`, and never past the deadline.
        let wait = |bound: Option<Duration>| {
            let ticket = &ticket;
            async move {
                let bound = async {
                    match bound {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending().await,
                    }
                };
                let deadline = async {
                    match deadline {
                        Some((at, _)) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = ticket.notified() => Ok(()),
                    _ = bound => Ok(()),
                    _ = deadline => Err(()),
                }
            }
        };
        // Our place in the server's queue, given up (in the background) if we stop waiting.
        let mut place = Undo {
            lock: self,
            keys,
            armed: None,
        };
        let waited = async {
            loop {
                while !ticket.is_head() {
                    wait(None).await.map_err(|_| timed_out())?;
                }
                let handoff = ticket.take_handoff();
                if let (false, Some(held_for)) = (queues, handoff) {
                    // The previous head just acquired: wait for its release, not more than its lease.
                    wait(Some(held_for)).await.map_err(|_| timed_out())?;
                }
                if let Some(taken) = place.armed {
                    if let Some(token) = ticket.take_grant(taken.attempt) {
                        // The release script handed the lock to our place; its lease counts from
                        // the request that took the place.
                        place.armed = None;
                        ticket.acquired(lease);
                        tracing::debug!(lock = %keys.name, token, "handed over");
                        let guard = self.guard(keys, lease, renew, (taken.sent, window), token, 1);
                        if !renew {
                            // What is left of the window may be less than the fixed lease the
                            // caller asked for (the watchdog would renew it; here nothing will).
                            // A failure shows in the guard, whose deadline stays honest.
                            if let Err(e) = guard.extend(lease).await {
                                tracing::debug!(lock = %keys.name, error = %e, "extending a handover failed");
                            }
                        }
                        return Ok(guard);
                    }
                }
                let queueing = Queueing {
                    join: queues.then_some(window),
                    claim: place.armed.map(|t| t.attempt),
                };
                // The handover to the place this attempt takes can arrive before its reply:
                // the ticket knows the attempt id before it is sent.
                let id = rand::random();
                if queues {
                    ticket.queued(id);
                }
                match self.attempt_as(id, keys, lease, renew, queueing).await? {
                    Attempted::Acquired(guard) => {
                        place.armed = None;
                        ticket.acquired(lease);
                        return Ok(guard);
                    }
                    Attempted::Held { remaining, queued } => {
                        let mut bound = remaining.unwrap_or(self.client.options.default_lease);
                        if let Some(taken) = queued {
                            place.armed = Some(taken);
                            // The handover comes as a message; this bound only renews the place
                            // before its window runs out (and covers a lost message, or a lock
                            // handed to a waiter that died).
                            bound = bound.min(window / 2);
                        }
                        tracing::trace!(lock = %keys.name, ?bound, "held; waiting for a release");
                        wait(Some(bound)).await.map_err(|_| timed_out())?;
                    }
                }
            }
        }
        .await;
        // A wait that timed out gives up its place before returning, not in the background:
        // a process that exits on the timeout must not be handed the lock afterwards.
        if let (Err(Error::Timeout { .. }), Some(taken)) = (&waited, place.armed.take()) {
            let _ = self
                .client
                .backend
                .release(keys, &self.owner, Some(taken.attempt))
                .await;
        }
        waited
    }

    /// One acquire round trip, and the guard when it succeeded.
    async fn attempt(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
        renew: bool,
        queueing: Queueing,
    ) -> Result<Attempted> {
        self.attempt_as(rand::random(), keys, lease, renew, queueing)
            .await
    }

    /// [`Lock::attempt`] with the attempt id chosen by the caller.
    async fn attempt_as(
        &self,
        id: u64,
        keys: &Arc<LockKeys>,
        lease: Duration,
        renew: bool,
        queueing: Queueing,
    ) -> Result<Attempted> {
        let sent = Instant::now();
        let mut pending = Undo {
            lock: self,
            keys,
            armed: Some(Place { attempt: id, sent }),
        };
        let watchdog = &self.client.watchdog;
        let valid_until = watchdog.deadline(sent, lease);
        let reply = self
            .client
            .backend
            .acquire(
                keys,
                &self.owner,
                lease.as_millis() as u64,
                id,
                valid_until,
                self.options
                    .replica_acks
                    .map(|(replicas, timeout)| ReplicaAcks { replicas, timeout }),
                queueing,
            )
            .await;
        match reply {
            Ok(AcquireReply::Acquired { token, count }) => {
                pending.armed = None;
                tracing::debug!(lock = %keys.name, token, count, "acquired");
                Ok(Attempted::Acquired(self.guard(
                    keys,
                    lease,
                    renew,
                    (sent, lease),
                    token,
                    count,
                )))
            }
            Ok(AcquireReply::Held {
                remaining,
                undo,
                queued,
            }) => {
                if undo {
                    // RedLock servers that granted a minority: remove those holds before the
                    // caller tries again, not in the background. Otherwise the next attempt of
                    // this owner could reach a server first and re-enter the stale hold (count
                    // 2, the old token), which the later undo, checked against the old
                    // attempt, would no longer remove. A failure leaves them to their lease; if this
                    // future is dropped meanwhile, `pending` undoes it in the background.
                    if let Err(e) = self
                        .client
                        .backend
                        .release(keys, &self.owner, Some(id))
                        .await
                    {
                        tracing::debug!(lock = %keys.name, error = %e, "undoing a failed attempt");
                    }
                }
                let armed = pending.armed.take();
                // A place taken in the server's queue goes to the caller, whose `Undo` gives
                // it up if need be.
                Ok(Attempted::Held {
                    remaining,
                    queued: armed.filter(|_| queued),
                })
            }
            // A server error (e.g. WRONGTYPE) means the script did not run to the end; only a
            // lost reply, or a RedLock majority that failed, leaves holds possibly behind and
            // the undo armed.
            Err(e @ (Error::Unavailable { .. } | Error::Quorum { .. })) => Err(e),
            Err(e) => {
                pending.armed = None;
                Err(e)
            }
        }
    }

    /// A guard for a holding granted for `granted.1` by a request sent at `granted.0` (the
    /// lease, or a queue place's window): the deadline and the first renewal count from then;
    /// renewals ask for the whole lease.
    fn guard(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
        renew: bool,
        granted: (Instant, Duration),
        token: u64,
        count: u64,
    ) -> Guard {
        let watchdog = &self.client.watchdog;
        let (sent, term) = granted;
        let state = Arc::new(LeaseState::new(
            keys.clone(),
            self.owner.clone(),
            lease,
            renew,
            watchdog.deadline(sent, term),
            watchdog.renew_at(sent, term),
        ));
        watchdog.track(&state);
        Guard::new(self.client.clone(), state, token, count)
    }

    /// Gives back one hold of this handle's owner without a guard: for an owner id shared
    /// with another process, or to make sure a lock is released. Releasing a lock that is not
    /// held is harmless and reported as [`Released::NotHeld`].
    pub async fn release(&self) -> Result<Released> {
        let (keys, _, _) = self.checked()?;
        self.client.backend.release(keys, &self.owner, None).await
    }

    /// What the server knows about this lock.
    pub async fn status(&self) -> Result<LockStatus> {
        let (keys, _, _) = self.checked()?;
        let raw = self.client.backend.status(keys).await?;
        Ok(LockStatus::from_raw(&self.name, raw))
    }
}
