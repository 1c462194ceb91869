//! Semaphores with leased permits.
//!
//! A semaphore of N permits is one queue on one name: an entry holds a permit when fewer than
//! N entries are ahead of it, and waiters are served in arrival order. Each permit is a
//! holding of its own, with its id, its lease (renewed by the watchdog or kept by the session),
//! its `lost()` and its fencing token: a crashed holder's permit comes back when its lease
//! ends (Redisson's `RSemaphore` permits never come back, #2045), and a release names its
//! permit, so it can never free another's or count twice (#5066).
//!
//! N is stored with the semaphore while it has entries: a handle that asks for another N is
//! refused ([`crate::Error::PermitsMismatch`]) unless it resizes ([`Semaphore::resize`]).
//! Lowering N revokes nothing: the permits granted stay held until released or lost, and
//! waiters hold only once fewer than the new N are ahead of them.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Kind, Wait};
use crate::error::{InputError, Result};
use crate::guard::Guard;
use crate::lock::{timed, Contended, Lock};
use crate::options::LockOptions;
use crate::shared::Shared;

/// The most permits a semaphore has.
pub const MAX_PERMITS: u32 = 10_000;

/// A handle on one named semaphore of `permits` permits (see [`crate::Client::semaphore`]).
/// Cheap to clone. Each acquire takes one permit as a holding of its own (a fresh owner id),
/// released by its guard.
///
/// ```no_run
/// # async fn demo() -> fencelock::Result<()> {
/// let client = fencelock::Client::connect("zk://127.0.0.1:2181").await?;
/// let downloads = client.semaphore("downloads", 3);
/// let permit = downloads.acquire().await?;   // one of 3
/// let token = permit.fencing_token();          // this permit's own token
/// permit.release().await?;
/// # let _ = token; Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    client: Arc<Shared>,
    name: Arc<str>,
    permits: u32,
    resize: bool,
    options: LockOptions,
    /// `with_owner`'s id: every permit of this handle is held under it.
    owner: Option<Arc<str>>,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .field("resize", &self.resize)
            .field("owner", &self.owner)
            .finish()
    }
}

impl Semaphore {
    pub(crate) fn new(client: Arc<Shared>, name: &str, permits: u32) -> Self {
        Self {
            client,
            name: name.into(),
            permits,
            resize: false,
            options: LockOptions::default(),
            owner: None,
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of permits this handle asks for.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The same semaphore whose acquires store this handle's number of permits with the
    /// semaphore, replacing the number there (rather than being refused when it differs).
    /// Lowering it revokes no permit already granted.
    pub fn resize(mut self) -> Self {
        self.resize = true;
        self
    }

    /// The same semaphore with other options for its permits (see [`Lock::with_options`]).
    pub fn with_options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// The same semaphore whose permits are held under an explicit owner id (see
    /// [`Lock::with_owner`]), rather than a fresh one per acquire: for a process that takes one
    /// permit and wants `status` to name it (the `fencelock` command's host/pid ids). Two
    /// acquires under one owner id are one owner to the service, which treats the second as
    /// it treats a mutex's re-entry: give each permit holder an id of its own.
    pub fn with_owner(mut self, owner: &str) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// A new permit's handle: a fresh owner id (or `with_owner`'s), so every permit is a
    /// holding of its own.
    fn permit(&self) -> Result<Lock> {
        if self.permits == 0 || self.permits > MAX_PERMITS {
            return Err(InputError::InvalidOption {
                option: "permits",
                reason: "a semaphore has from 1 to MAX_PERMITS (10,000) permits",
            }
            .into());
        }
        let owner = self.client.next_owner();
        let lock = Lock::new(self.client.clone(), &self.name, owner);
        let lock = match &self.owner {
            Some(owner) => lock.with_owner(owner),
            None => lock,
        };
        Ok(lock
            .with_options(self.options.clone())
            .with_kind(Kind::Permit {
                permits: self.permits,
                resize: self.resize,
            }))
    }

    async fn take(&self, wait: Wait) -> Result<Result<Guard, Contended>> {
        let permit = self.permit()?;
        permit.ask_own(wait).await
    }

    /// Takes a permit, waiting (in arrival order) as long as it takes.
    pub async fn acquire(&self) -> Result<Guard> {
        let permit = self.permit()?;
        let taken = permit.ask_own(Wait::Until(None)).await?;
        taken.map_err(|busy| permit.busy_error(busy))
    }

    /// Like [`Semaphore::acquire`], but gives up after `timeout` with
    /// [`crate::Error::Timeout`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Guard> {
        let permit = self.permit()?;
        let taken = permit.ask_own(timed("acquire_timeout", timeout)?).await?;
        taken.map_err(|busy| permit.busy_error(busy))
    }

    /// One attempt: a permit, or `Contended` when all are held.
    pub async fn try_acquire(&self) -> Result<Result<Guard, Contended>> {
        self.take(Wait::No).await
    }
}
