//! Lock handles: acquiring, waiting, and the handle-level operations.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::acquire::{Ask, Attempted};
use crate::backend::redis::{RawStatus, ReplicaAcks};
use crate::backend::{Queueing, Released};
use crate::client::ClientInner;
use crate::error::{InputError, Result};
use crate::guard::Guard;
use crate::name::{validate_owner, LockKeys};
use crate::options::{validate_acks, validate_lease, LockOptions};
use crate::telemetry;

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
    /// The server's wait queue, in arrival order: the first waiter is handed the lock at the
    /// next release (places that ran out are skipped). Places that ran out are listed too,
    /// marked [`Waiter::expired`]: a waiter that died or lost touch with the server while
    /// waiting. Read in the same script as the rest, so it is one consistent snapshot.
    ///
    /// Always empty with RedLock, which keeps no queue on the servers (waiters there retry
    /// on release notifications instead).
    pub waiters: Vec<Waiter>,
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
            waiters: raw.waiters,
        }
    }
}

/// One place in a lock's wait queue on the server, from [`LockStatus::waiters`].
///
/// A waiting [`Lock::acquire`] takes a place valid for a window (the lease with a fixed lease,
/// at most 5 s with the watchdog) and renews it at half the window while it waits, so the age
/// of a live waiter's place normally stays under about half its window. A place that stays
/// listed past its window is a waiter that died or cannot reach the server: the release script
/// skips it and removes it when it comes to it, and it also goes when the queue keys expire.
/// Ages are measured on the server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The waiting owner id (see [`Lock::owner`]).
    pub owner: String,
    /// How long ago the waiter took or last renewed its place. Zero when
    /// [`Waiter::unreadable`].
    pub age: Duration,
    /// How long the place lasts from when it was taken or renewed. Zero when
    /// [`Waiter::unreadable`].
    pub window: Duration,
    /// How long the place stays valid: `window - age`, zero once it ran out. A waiter handed
    /// the lock now would first hold it for this long (then its watchdog renews it, or a
    /// fixed lease is extended to the whole lease).
    pub remaining: Duration,
    /// The release script would skip this place: less than 2 ms of its window is left (the
    /// least it hands over), or the place is unreadable.
    pub expired: bool,
    /// `Some` when the queue names this owner but its place cannot be used: the server has
    /// none for it (`"no place recorded"`), or it is not in the `attempt window_ms since_us`
    /// format (the description quotes it). Nothing else writes these keys, so this means they
    /// were changed by hand or by another program.
    pub unreadable: Option<String>,
}

impl Waiter {
    /// What the server stored for `owner` (`None`: no place), read at `now_us` on the server's
    /// clock.
    pub(crate) fn from_place(owner: String, place: Option<&str>, now_us: u64) -> Self {
        let unreadable = |reason: String| Self {
            owner: owner.clone(),
            age: Duration::ZERO,
            window: Duration::ZERO,
            remaining: Duration::ZERO,
            expired: true,
            unreadable: Some(reason),
        };
        let Some(place) = place else {
            return unreadable("no place recorded".to_owned());
        };
        // The format release.lua reads: '^(%d+) (%d+) (%d+)$'.
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let number = |s: &str| digits(s).then(|| s.parse::<u64>().ok()).flatten();
        let mut parts = place.split(' ');
        let parsed = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(attempt), Some(window), Some(since), None) if digits(attempt) => {
                number(window).zip(number(since))
            }
            _ => None,
        };
        let Some((window_ms, since_us)) = parsed else {
            return unreadable(format!(
                "place {place:?} is not \"attempt window_ms since_us\""
            ));
        };
        let window_us = window_ms.saturating_mul(1000);
        // As release.lua counts: what is left is since + window - now (a place stamped ahead
        // of this clock, e.g. by a server whose clock went back, has more than its window).
        let remaining_us = since_us.saturating_add(window_us).saturating_sub(now_us);
        Self {
            owner,
            age: Duration::from_micros(now_us.saturating_sub(since_us)),
            window: Duration::from_millis(window_ms),
            remaining: Duration::from_micros(remaining_us),
            expired: remaining_us < 2000,
            unreadable: None,
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

    /// Input checks, before any I/O; what an acquire asks for.
    fn checked(&self) -> Result<Ask<'_>> {
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
        Ok(Ask {
            client: &self.client,
            keys,
            owner: &self.owner,
            lease,
            renew,
            acks: self
                .options
                .replica_acks
                .map(|(replicas, timeout)| ReplicaAcks { replicas, timeout }),
        })
    }

    /// Acquires the lock, waiting as long as it takes. Waiting is driven by release
    /// notifications, bounded by the holder's remaining lease; dropping the future cancels the
    /// wait (and undoes an attempt that may have reached the server).
    pub async fn acquire(&self) -> Result<Guard> {
        let ask = self.checked()?;
        let started = Instant::now();
        let guard = ask
            .until(None)
            .instrument(tracing::debug_span!("acquire", lock = %self.name))
            .await?;
        Ok(counted(guard, started))
    }

    /// Like [`Lock::acquire`], but gives up after `timeout` with [`crate::Error::Timeout`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Guard> {
        let ask = self.checked()?;
        let started = Instant::now();
        let guard = ask
            .until(Some((started + timeout, timeout)))
            .instrument(tracing::debug_span!("acquire", lock = %self.name, ?timeout))
            .await?;
        Ok(counted(guard, started))
    }

    /// One attempt: the guard, or the holder's remaining lease.
    pub async fn try_acquire(&self) -> Result<Result<Guard, Contended>> {
        let ask = self.checked()?;
        let started = Instant::now();
        let attempted = ask
            .once(rand::random(), Queueing::default())
            .instrument(tracing::debug_span!("try_acquire", lock = %self.name))
            .await?;
        Ok(match attempted {
            Attempted::Acquired(guard) => Ok(counted(guard, started)),
            Attempted::Held { remaining, .. } => Err(Contended {
                remaining_lease: remaining,
            }),
        })
    }

    /// Gives back one hold of this handle's owner without a guard: for an owner id shared
    /// with another process, or to make sure a lock is released. Releasing a lock that is not
    /// held is harmless and reported as [`Released::NotHeld`].
    pub async fn release(&self) -> Result<Released> {
        let ask = self.checked()?;
        self.client
            .backend
            .release(ask.keys, &self.owner, None)
            .await
    }

    /// What the server knows about this lock.
    pub async fn status(&self) -> Result<LockStatus> {
        let ask = self.checked()?;
        let raw = self.client.backend.status(ask.keys).await?;
        Ok(LockStatus::from_raw(&self.name, raw))
    }
}

/// Records an acquisition (metrics) and hands the guard on.
fn counted(guard: Guard, started: Instant) -> Guard {
    let how = if guard.hold_count() > 1 {
        telemetry::Acquired::Reentry
    } else {
        telemetry::Acquired::First
    };
    telemetry::acquired(how, started.elapsed());
    guard
}
