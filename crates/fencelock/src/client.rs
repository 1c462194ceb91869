//! The client: one connection (plus one subscriber connection) to the lock service, shared by
//! every lock handle made from it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use tokio_util::sync::CancellationToken;

use crate::abandoned::Abandoned;

use crate::backend::redis::RedisBackend;
use crate::backend::redlock::RedLock;
use crate::backend::{Backend, ReleaseSink};
use crate::error::{Error, Result};
use crate::lease::LeaseState;
use crate::lock::{Lock, LockStatus};
use crate::name::LockKeys;
use crate::options::ClientOptions;
use crate::waiters::WaitRegistry;
use crate::watchdog::{Request, Watchdog};

/// A connection to the lock service. Cheap to clone; clones share connections, the watchdog
/// task and the client id.
///
/// Dropping the last clone (and every guard made from it) stops the background task.
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) backend: Backend,
    pub(crate) options: ClientOptions,
    /// Random 128-bit id, hex: the first half of every owner id this client makes.
    pub(crate) id: String,
    next_handle: AtomicU64,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) waiters: Arc<WaitRegistry>,
    /// Attempts and holds given up whose give-back has not been confirmed yet.
    pub(crate) abandoned: Abandoned,
    warnings: Vec<String>,
    shutdown: CancellationToken,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl ClientInner {
    /// Gives back the hold (or queue place) taken by attempt `hold`, in the background: for
    /// code that cannot await (a guard's `Drop`, a dropped acquire). Until it is confirmed,
    /// the owner's next attempt on the lock carries the id and gives it back first, so a
    /// retry never re-enters what the caller let go of. `lease`: the guard's lease, whose
    /// heals the release must follow.
    pub(crate) fn give_back_later(
        self: &Arc<Self>,
        keys: &Arc<LockKeys>,
        owner: &Arc<str>,
        hold: u64,
        lease: Option<Arc<LeaseState>>,
    ) {
        self.abandoned.add(keys, owner, hold);
        self.watchdog.send(Request::Release {
            client: self.clone(),
            keys: keys.clone(),
            owner: owner.clone(),
            hold,
            lease,
        });
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("servers", &self.inner.backend.server())
            .field("id", &self.inner.id)
            .finish()
    }
}

impl Client {
    /// Connects with default [`ClientOptions`]. The URL says what to connect to:
    /// - `redis://host:port[/db]` (password: `redis://:password@host:port`): one server;
    /// - `redis+cluster://host:port,host:port,...`: a Redis Cluster (seed nodes);
    /// - `redis+sentinel://host:port,host:port,.../master-name[/db]`: the master that the
    ///   sentinels name, followed through failovers.
    ///
    /// For RedLock over independent servers see [`Client::connect_all`].
    ///
    /// Must be called inside a tokio runtime: the client's background task runs there.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects with explicit options.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Self> {
        Self::connect_all_with(&[url], options).await
    }

    /// RedLock: one lock over N independent Redis masters (N odd: 3 or 5 typically), held
    /// when a majority grants it. Requests go to all servers in parallel; see docs/SAFETY.md
    /// for what this guarantees. With one URL this is [`Client::connect`].
    pub async fn connect_all(urls: &[&str]) -> Result<Self> {
        Self::connect_all_with(urls, ClientOptions::default()).await
    }

    /// [`Client::connect_all`] with explicit options.
    pub async fn connect_all_with(urls: &[&str], options: ClientOptions) -> Result<Self> {
        options.validate()?;
        if urls.is_empty() || urls.len().is_multiple_of(2) {
            return Err(crate::InputError::InvalidOption {
                option: "urls",
                reason: "RedLock needs an odd number of servers (1, 3, 5, ...)",
            }
            .into());
        }
        let waiters = Arc::new(WaitRegistry::default());
        let sink: Weak<dyn ReleaseSink> = Arc::downgrade(&waiters) as Weak<dyn ReleaseSink>;
        let (watchdog, runner) = Watchdog::new(options.clone());
        let watchdog = Arc::new(watchdog);
        let (backend, warnings) = if let [url] = urls {
            let (b, w) = RedisBackend::connect(url, &options, sink).await?;
            (Backend::One(b), w)
        } else {
            let (r, w) = RedLock::connect(urls, &options, sink, watchdog.finisher()).await?;
            (Backend::RedLock(r), w)
        };
        let inner = Arc::new(ClientInner {
            backend,
            options,
            id: format!("{:032x}", rand::random::<u128>()),
            next_handle: AtomicU64::new(1),
            watchdog: watchdog.clone(),
            waiters,
            abandoned: Abandoned::default(),
            warnings,
            shutdown: CancellationToken::new(),
        });
        tokio::spawn(runner.run(watchdog, Arc::downgrade(&inner), inner.shutdown.clone()));
        tracing::debug!(server = %inner.backend.server(), id = %inner.id, "fencelock client connected");
        Ok(Self { inner })
    }

    /// A handle on the lock `name`, with a fresh owner identity (this client's id plus a
    /// per-handle number). Cheap; no I/O. Clones of the handle share the owner, so taking the
    /// lock again through a clone re-enters it.
    ///
    /// An invalid name (empty, longer than [`crate::MAX_NAME_LEN`] bytes, containing `{` or
    /// `}`) is reported by the handle's first operation, before any I/O.
    pub fn lock(&self, name: &str) -> Lock {
        let handle = self.inner.next_handle.fetch_add(1, Ordering::Relaxed);
        let owner = format!("{}:{handle}", self.inner.id);
        Lock::new(self.inner.clone(), name, owner)
    }

    /// The random id of this client (hex), the prefix of the owner ids it makes.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// `host:port` of the server (comma-separated for RedLock).
    pub fn server(&self) -> String {
        self.inner.backend.server()
    }

    /// Problems found on connect that do not stop the client from working, e.g. a
    /// `maxmemory-policy` that can evict lock keys. Each is also logged with `tracing::warn!`.
    pub fn warnings(&self) -> &[String] {
        &self.inner.warnings
    }

    /// What the server knows about the lock `name`.
    pub async fn status(&self, name: &str) -> Result<LockStatus> {
        let keys = Arc::new(LockKeys::new(name)?);
        let raw = self.inner.backend.status(&keys).await?;
        Ok(LockStatus::from_raw(name, raw))
    }

    /// Deletes the lock `name` whoever holds it, and wakes its waiters. For operators who know
    /// a lock is stale; the holder (if alive) learns of it at its next renewal. Returns the
    /// owners and hold counts that were removed (empty when the lock was free).
    pub async fn force_unlock(&self, name: &str) -> Result<Vec<(String, u64)>> {
        let keys = Arc::new(LockKeys::new(name)?);
        let removed = self.inner.backend.force_unlock(&keys).await?;
        tracing::info!(lock = name, ?removed, "lock force-unlocked");
        Ok(removed)
    }

    /// Waits until the work this client left to its background task is done, then drops this
    /// handle: releases of dropped guards, undone attempts, queue places given up, and RedLock
    /// requests still in flight when an operation was decided (a release decided by a majority
    /// still removes the lock from the slower servers). A program that exits right after its
    /// last release should call this, or the lock may stay on a slow server until its lease
    /// ends. Waits at most the client's request bound (connect + response timeout).
    ///
    /// Fails with [`Error::Unfinished`] when some of that work was still under way at the
    /// bound, or failed: a server that did not answer may then keep a grant until its lease
    /// ends. (A hold whose give-back failed is also given back by the owner's next attempt on
    /// that lock.)
    pub async fn close(self) -> Result<()> {
        let watchdog = &self.inner.watchdog;
        let tracker = watchdog.tracker.clone();
        tracker.close();
        let bound = self.inner.options.request_bound();
        let timed_out = tokio::time::timeout(bound, tracker.wait()).await.is_err();
        let pending = if timed_out { tracker.len() } else { 0 };
        // Holds and attempts given up whose give-back failed (and that no later attempt gave
        // back), and RedLock releases that failed on a server after the majority answered.
        let failed = self.inner.abandoned.len() + watchdog.take_failures();
        if pending + failed > 0 {
            tracing::warn!(pending, failed, "background work unfinished at close");
            return Err(Error::Unfinished {
                pending,
                failed,
                waited: bound,
            });
        }
        Ok(())
    }
}
