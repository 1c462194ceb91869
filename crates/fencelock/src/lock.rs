//! Lock handles: acquiring, waiting, and the handle-level operations.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::redis::RawStatus;
use crate::backend::redis::ReplicaAcks;
use crate::backend::{AcquireReply, Released};
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

/// An acquire request that may have reached the server: if it is dropped before its reply
/// settles the matter, the background task undoes it (owner- and attempt-checked), so that no
/// orphan lock blocks others for a whole lease.
struct PendingAttempt<'a> {
    lock: &'a Lock,
    keys: &'a Arc<LockKeys>,
    id: u64,
    armed: bool,
}

impl Drop for PendingAttempt<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.lock.client.watchdog.send(Request::Release {
                client: self.lock.client.clone(),
                keys: self.keys.clone(),
                owner: self.lock.owner.clone(),
                attempt: Some(self.id),
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
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Guard> {
        self.acquire_until(Some((Instant::now() + timeout, timeout)))
            .instrument(tracing::debug_span!("acquire", lock = %self.name, ?timeout))
            .await
    }

    /// One attempt: the guard, or the holder's remaining lease.
    pub async fn try_acquire(&self) -> Result<Result<Guard, Contended>> {
        let (keys, lease, renew) = self.checked()?;
        self.attempt(keys, lease, renew)
            .instrument(tracing::debug_span!("try_acquire", lock = %self.name))
            .await
    }

    async fn acquire_until(&self, deadline: Option<(Instant, Duration)>) -> Result<Guard> {
        let (keys, lease, renew) = self.checked()?;
        let waiters = &self.client.waiters;
        // Queue behind this client's waiters instead of barging in.
        if !waiters.has_waiters(&keys.channel) {
            if let Ok(guard) = self.attempt(keys, lease, renew).await? {
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
        loop {
            while !ticket.is_head() {
                wait(None).await.map_err(|_| timed_out())?;
            }
            if let Some(held_for) = ticket.take_handoff() {
                // The previous head just acquired: wait for its release, not more than its lease.
                wait(Some(held_for)).await.map_err(|_| timed_out())?;
            }
            match self.attempt(keys, lease, renew).await? {
                Ok(guard) => {
                    ticket.acquired(lease);
                    return Ok(guard);
                }
                Err(Contended { remaining_lease }) => {
                    let bound = remaining_lease.unwrap_or(self.client.options.default_lease);
                    tracing::trace!(lock = %keys.name, ?bound, "held; waiting for a release");
                    wait(Some(bound)).await.map_err(|_| timed_out())?;
                }
            }
        }
    }

    /// One acquire round trip, and the guard when it succeeded.
    async fn attempt(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
        renew: bool,
    ) -> Result<Result<Guard, Contended>> {
        let mut pending = PendingAttempt {
            lock: self,
            keys,
            id: rand::random(),
            armed: true,
        };
        let sent = Instant::now();
        let watchdog = &self.client.watchdog;
        let valid_until = watchdog.deadline(sent, lease);
        let reply = self
            .client
            .backend
            .acquire(
                keys,
                &self.owner,
                lease.as_millis() as u64,
                pending.id,
                valid_until,
                self.options
                    .replica_acks
                    .map(|(replicas, timeout)| ReplicaAcks { replicas, timeout }),
            )
            .await;
        match reply {
            Ok(AcquireReply::Acquired { token, count }) => {
                pending.armed = false;
                let state = Arc::new(LeaseState::new(
                    keys.clone(),
                    self.owner.clone(),
                    lease,
                    renew,
                    valid_until,
                    watchdog.renew_at(sent, lease),
                ));
                watchdog.track(&state);
                tracing::debug!(lock = %keys.name, token, count, "acquired");
                Ok(Ok(Guard::new(self.client.clone(), state, token, count)))
            }
            Ok(AcquireReply::Held { remaining, undo }) => {
                // RedLock servers that granted a minority keep `undo` armed: dropping
                // `pending` then removes those holds in the background.
                pending.armed = undo;
                Ok(Err(Contended {
                    remaining_lease: remaining,
                }))
            }
            // A server error (e.g. WRONGTYPE) means the script did not run to the end; only a
            // lost reply, or a RedLock majority that failed, leaves holds possibly behind and
            // the undo armed.
            Err(e @ (Error::Unavailable { .. } | Error::Quorum { .. })) => Err(e),
            Err(e) => {
                pending.armed = false;
                Err(e)
            }
        }
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
