//! Lock handles: acquiring, waiting, and the handle-level operations.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{Acquired, Kind, LockRequest, RawStatus, Released, Wait};
use crate::error::{InputError, Result};
use crate::guard::Guard;
use crate::name::{validate_owner, LockName};
use crate::options::{validate_acks, validate_lease, LockOptions};
use crate::shared::Shared;
use crate::status::LockStatus;
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
    client: Arc<Shared>,
    name: Arc<str>,
    lock: Result<Arc<LockName>, InputError>,
    owner: Arc<str>,
    /// The owner id came from `with_owner`: another process may use it too.
    explicit_owner: bool,
    options: LockOptions,
    problem: Option<InputError>,
    /// What this handle takes: the mutex, or a side of a read-write lock, or a permit.
    kind: Kind<'static>,
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
#[non_exhaustive]
pub struct Contended {
    /// The holder's remaining lease as the server reported it; `None` if the key has no expiry
    /// (set by something other than fencelock). With RedLock: the shortest remaining lease
    /// among the majority that refused, or, when competing attempts split the servers and
    /// nobody holds a majority, a short random back-off (5-50 ms) before trying again.
    pub remaining_lease: Option<Duration>,
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

impl Lock {
    pub(crate) fn new(client: Arc<Shared>, name: &str, owner: String) -> Self {
        Self {
            name: name.into(),
            lock: client.lock_name(name),
            owner: owner.into(),
            explicit_owner: false,
            options: LockOptions::default(),
            problem: None,
            kind: Kind::Mutex,
            client,
        }
    }

    /// The same handle taking `kind` (a read-write lock's side, a semaphore's permit).
    pub(crate) fn with_kind(mut self, kind: Kind<'static>) -> Self {
        self.kind = kind;
        self
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
        self.explicit_owner = true;
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

    /// Input checks, before any I/O (the service checks the options only it understands);
    /// what an acquire asks for.
    fn checked(&self) -> Result<LockRequest<'_>> {
        let lock = self.lock.as_ref().map_err(|e| e.clone())?;
        if let Some(problem) = &self.problem {
            return Err(problem.clone().into());
        }
        let (lease, renew) = match self.options.lease {
            Some(lease) => (lease, false),
            None => (self.client.ctx.options.default_lease, true),
        };
        self.client.ctx.options.validate_drift(lease)?;
        self.client.service.check(&self.options, lease)?;
        Ok(LockRequest {
            lock,
            owner: &self.owner,
            explicit_owner: self.explicit_owner,
            lease,
            renew,
            options: &self.options,
            kind: self.kind,
        })
    }

    /// Asks for a holding of this handle's own kind.
    pub(crate) async fn ask_own(&self, wait: Wait) -> Result<Result<Guard, Contended>> {
        self.ask(self.kind, wait).await
    }

    /// The input checks of an acquire alone, before any I/O.
    pub(crate) fn validate(&self) -> Result<()> {
        self.checked().map(|_| ())
    }

    /// Asks the service for a holding of `kind`, and makes a guard of what it granted.
    pub(crate) async fn ask(&self, kind: Kind<'_>, wait: Wait) -> Result<Result<Guard, Contended>> {
        let mut request = self.checked()?;
        request.kind = kind;
        let client = &self.client;
        client.service.check_kind(kind)?;
        let started = Instant::now();
        let metered = metered_kind(kind);
        let waiting = match wait {
            Wait::No => None,
            Wait::Until(_) => Some(telemetry::Waiting::begin(metered)),
        };
        let acquired = client.service.acquire(&client.ctx, &request, wait).await;
        drop(waiting);
        Ok(match acquired? {
            Acquired::Held(held) => {
                let election = matches!(kind, Kind::Leader { .. })
                    .then(|| (self.name.clone(), held.lease.hold.token));
                held.lease
                    .metered(telemetry::Held::begin(metered, election));
                let guard = Guard::new(client.clone(), held.lease, held.count);
                Ok(counted(guard, started))
            }
            Acquired::Busy { remaining } => Err(Contended {
                remaining_lease: remaining,
            }),
        })
    }

    /// Acquires the lock, waiting as long as it takes. Waiting is driven by release
    /// notifications, bounded by the holder's remaining lease; dropping the future cancels the
    /// wait (and undoes an attempt that may have reached the server).
    pub async fn acquire(&self) -> Result<Guard> {
        self.ask(self.kind, Wait::Until(None))
            .instrument(tracing::debug_span!("acquire", lock = %self.name))
            .await?
            .map_err(|busy| self.busy_error(busy))
    }

    /// Like [`Lock::acquire`], but gives up after `timeout` with [`crate::Error::Timeout`].
    ///
    /// `timeout` is at most [`crate::MAX_TIMEOUT`]; a longer one (`Duration::MAX` included)
    /// is not read as "no timeout" but rejected with [`InputError::TimeoutTooLong`], before
    /// any I/O. To wait without a bound, use [`Lock::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Guard> {
        let wait = timed("acquire_timeout", timeout)?;
        self.ask(self.kind, wait)
            .instrument(tracing::debug_span!("acquire", lock = %self.name, ?timeout))
            .await?
            .map_err(|busy| self.busy_error(busy))
    }

    /// One attempt: the guard, or the holder's remaining lease.
    pub async fn try_acquire(&self) -> Result<Result<Guard, Contended>> {
        self.ask(self.kind, Wait::No)
            .instrument(tracing::debug_span!("try_acquire", lock = %self.name))
            .await
    }

    /// A waiting acquire never ends busy; if a service said so, it is a protocol error.
    pub(crate) fn busy_error(&self, busy: Contended) -> crate::Error {
        crate::Error::Protocol {
            lock: Some(self.name.to_string()),
            server: self.client.service.server(),
            detail: format!("a waiting acquire ended busy ({busy:?})"),
        }
    }

    /// Gives back one hold of this handle's owner without a guard: for an owner id shared
    /// with another process, or to make sure a lock is released. Releasing a lock that is not
    /// held is harmless and reported as [`Released::NotHeld`].
    pub async fn release(&self) -> Result<Released> {
        let request = self.checked()?;
        let service = &self.client.service;
        service.release_owner(request.lock, &self.owner).await
    }

    /// What the server knows about this lock.
    pub async fn status(&self) -> Result<LockStatus> {
        let request = self.checked()?;
        let raw = self.client.service.status(request.lock).await?;
        Ok(LockStatus::from_raw(&self.name, raw))
    }
}

/// A wait until `timeout` from now (`option` names it in the error): at most
/// [`crate::MAX_TIMEOUT`], never read as "no timeout".
pub(crate) fn timed(option: &'static str, timeout: Duration) -> Result<Wait> {
    crate::options::validate_timeout(option, timeout)?;
    // Within the maximum this cannot fail on the platforms fencelock runs on; if it does,
    // the deadline is beyond what this clock can represent: still too long.
    let deadline = Instant::now()
        .checked_add(timeout)
        .ok_or(InputError::TimeoutTooLong {
            option,
            timeout,
            max: crate::MAX_TIMEOUT,
        })?;
    Ok(Wait::Until(Some((deadline, timeout))))
}

/// The `kind` label of a hold of `kind`.
fn metered_kind(kind: Kind<'_>) -> telemetry::HoldKind {
    match kind {
        Kind::Mutex => telemetry::HoldKind::Mutex,
        Kind::Leader { .. } => telemetry::HoldKind::Leader,
        Kind::Read => telemetry::HoldKind::Read,
        Kind::Write => telemetry::HoldKind::Write,
        Kind::Permit { .. } => telemetry::HoldKind::Permit,
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
