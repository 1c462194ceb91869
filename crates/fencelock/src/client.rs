//! The client: one connection (plus one subscriber connection) to the lock service, shared by
//! every lock handle made from it.

use std::sync::Arc;

use crate::election::Election;
use crate::error::{Result, Warning};
use crate::lock::Lock;
use crate::multi::MultiLock;
use crate::options::ClientOptions;
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;
use crate::shared::Shared;
use crate::status::LockStatus;

/// A connection to the lock service. Cheap to clone; clones share connections, the watchdog
/// task and the client id.
///
/// Dropping the last clone (and every guard made from it) stops the background task.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Shared>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("servers", &self.inner.service.server())
            .field("id", &self.inner.id)
            .finish()
    }
}

impl Client {
    /// Connects with default [`ClientOptions`]. The URL says what to connect to:
    /// - `redis://host:port[/db]` (password: `redis://:password@host:port`): one server;
    /// - `redis+cluster://host:port,host:port,...`: a Redis Cluster (seed nodes);
    /// - `redis+sentinel://host:port,host:port,.../master-name[/db]`: the master that the
    ///   sentinels name, followed through failovers;
    /// - `zk://host:port[,host:port...][/base/path]` (feature `zookeeper`): a ZooKeeper
    ///   ensemble; a lock named N is the node `<base>/N` (base `/fencelock` by default), with
    ///   Apache Curator's `InterProcessMutex` layout. The client's session is the lease of
    ///   every lock it holds: its timeout is [`ClientOptions::default_lease`] as the server
    ///   negotiated it (a different one is reported in [`Client::warnings`]).
    /// - `etcd://[user[:password]@]host:port[,host:port...][/prefix]` (feature `etcd`): an etcd
    ///   cluster, with the key layout of etcd's `concurrency.Mutex`; the client's lease (TTL
    ///   [`ClientOptions::default_lease`] in whole seconds) is the lease of every lock it holds.
    ///
    /// [`crate::services`] lists the services and their URL forms, and says which this build
    /// has. For RedLock over independent servers see [`Client::connect_all`].
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
    /// for what this guarantees. With one URL this is [`Client::connect`]. Several `zk://` URLs
    /// are an input error: name the ensemble's servers in one URL.
    ///
    /// The servers must be distinct: two URLs that reach the same address (after resolving
    /// host names, so `localhost` and `127.0.0.1` are one server; whatever the database or
    /// password) are rejected with [`crate::InputError::DuplicateServer`] before connecting. Only
    /// names are resolved for this; two different addresses that lead to one server (a
    /// machine's own LAN address beside `127.0.0.1`, a proxy) cannot be told apart.
    pub async fn connect_all(urls: &[&str]) -> Result<Self> {
        Self::connect_all_with(urls, ClientOptions::default()).await
    }

    /// [`Client::connect_all`] with explicit options.
    pub async fn connect_all_with(urls: &[&str], options: ClientOptions) -> Result<Self> {
        options.validate()?;
        let inner = Shared::connect(urls, options).await?;
        Ok(Self { inner })
    }

    /// A handle on the lock `name`, with a fresh owner identity (this client's id plus a
    /// per-handle number). Cheap; no I/O. Clones of the handle share the owner, so taking the
    /// lock again through a clone re-enters it.
    ///
    /// An invalid name (empty, longer than [`crate::MAX_NAME_LEN`] bytes, containing `{` or
    /// `}`) is reported by the handle's first operation, before any I/O.
    pub fn lock(&self, name: &str) -> Lock {
        Lock::new(self.inner.clone(), name, self.inner.next_owner())
    }

    /// A handle on the locks `names`, taken all or nothing by one guard (see [`MultiLock`]):
    /// in one global order (the names' byte order), whatever order they are given in, so two
    /// multi-locks never wait for each other in a cycle; what was taken is given back when a
    /// lock cannot be had or the caller gives up. One owner id for all of them. From 1 to
    /// [`crate::MAX_MULTI_LOCKS`] distinct names, checked with the names' rules by the first
    /// operation, before any I/O.
    pub fn multi_lock(&self, names: &[&str]) -> MultiLock {
        MultiLock::new(&self.inner, names)
    }

    /// A handle on the read-write lock `name` (see [`RwLock`]): its read and write sides,
    /// with one owner id (this handle's). Cheap; no I/O.
    pub fn rw_lock(&self, name: &str) -> RwLock {
        RwLock::new(self.lock(name))
    }

    /// A handle on the semaphore `name` of `permits` permits (see [`Semaphore`]; 1 to
    /// [`crate::MAX_PERMITS`], checked by the first operation before any I/O). Cheap; no I/O.
    pub fn semaphore(&self, name: &str, permits: u32) -> Semaphore {
        Semaphore::new(self.inner.clone(), name, permits)
    }

    /// A handle on the leader election `name` (see [`Election`]). Cheap; no I/O. A name is
    /// checked as a lock name is, by the handle's first operation. On ZooKeeper and etcd an
    /// election and a mutex of one name share the name's folder or prefix, in the layouts
    /// of Curator's `LeaderLatch` and etcd's `concurrency.Election`.
    pub fn election(&self, name: &str) -> Election {
        Election::new(self.inner.clone(), name)
    }

    /// The random id of this client (hex), the prefix of the owner ids it makes.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// `host:port` of the server (comma-separated for RedLock).
    pub fn server(&self) -> String {
        self.inner.service.server()
    }

    /// Problems found on connect that do not stop the client from working, e.g. a
    /// `maxmemory-policy` that can evict lock keys. Each is also logged with `tracing::warn!`.
    pub fn warnings(&self) -> &[Warning] {
        &self.inner.warnings
    }

    /// What the server knows about the lock `name`.
    pub async fn status(&self, name: &str) -> Result<LockStatus> {
        let keys = self.inner.lock_name(name)?;
        let raw = self.inner.service.status(&keys).await?;
        Ok(LockStatus::from_raw(name, raw))
    }

    /// Deletes the lock `name` whoever holds it, and wakes its waiters. For operators who know
    /// a lock is stale; the holder (if alive) learns of it at its next renewal. Returns the
    /// owners and hold counts that were removed (empty when the lock was free).
    pub async fn force_unlock(&self, name: &str) -> Result<Vec<(String, u64)>> {
        let keys = self.inner.lock_name(name)?;
        let removed = self.inner.service.force_unlock(&keys).await?;
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
    /// Fails with [`crate::Error::Unfinished`] when some of that work was still under way at the
    /// bound, or failed: a server that did not answer may then keep a grant until its lease
    /// ends. (A hold whose give-back failed is also given back by the owner's next attempt on
    /// that lock.)
    ///
    /// When this is the client's last handle (no `Lock` or `Guard` of it is left), it also
    /// ends the client's session, and on etcd waits (within the same bound) for the server to
    /// revoke the client's lease, so that nothing of the client outlives a program that exits
    /// right after `close`.
    pub async fn close(self) -> Result<()> {
        let started = std::time::Instant::now();
        let settled = self.inner.settle().await;
        let Some(shared) = Arc::into_inner(self.inner) else {
            return settled;
        };
        let (background, bound) = (
            shared.ctx.background.clone(),
            shared.ctx.options.request_bound(),
        );
        // Dropping the last handle ends the session; what that sends (etcd's lease revoke)
        // is background work, waited for here.
        drop(shared);
        let pending = background.settle(bound).await;
        match settled {
            Ok(()) if pending > 0 => Err(crate::Error::Unfinished {
                pending,
                failed: 0,
                waited: started.elapsed(),
            }),
            settled => settled,
        }
    }
}
