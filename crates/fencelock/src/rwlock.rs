//! Read-write locks: many readers or one writer, in arrival order.
//!
//! A read-write lock is one queue on one name, as a mutex is; the kind of each entry says
//! who holds: a reader when no writer is ahead of it, a writer when nothing is. So a reader
//! waits for every earlier writer and a writer for everyone earlier: neither side starves
//! (Redisson's `RReadWriteLock` lets readers starve writers, #5379), and when a writer leaves,
//! the readers behind it hold together (not one after another, #1542). Each reader's holding
//! has its own lease and token, so a dead reader's holding ends alone.

use crate::backend::Kind;
use crate::lock::Lock;
use crate::options::LockOptions;

/// A handle on one named read-write lock: its [`RwLock::read`] and [`RwLock::write`] sides,
/// each a [`Lock`] (acquire, try, timeout, status) with one owner id. Cheap to clone.
///
/// Both sides are re-entrant for the owner. The writer may also take the read side (a
/// downgrade: write, then read, then release the write side); the other way, a reader asking
/// for the write side, fails at once with [`crate::Error::UpgradeRefused`].
///
/// ```no_run
/// # async fn demo() -> fencelock::Result<()> {
/// let client = fencelock::Client::connect("zk://127.0.0.1:2181").await?;
/// let config = client.rw_lock("config");
/// let reading = config.read().acquire().await?;   // beside other readers
/// reading.release().await?;
/// let writing = config.write().acquire().await?;  // alone
/// writing.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    read: Lock,
    write: Lock,
}

impl RwLock {
    pub(crate) fn new(lock: Lock) -> Self {
        Self {
            read: lock.clone().with_kind(Kind::Read),
            write: lock.with_kind(Kind::Write),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.read.name()
    }

    /// The owner id both sides acquire as.
    pub fn owner(&self) -> &str {
        self.read.owner()
    }

    /// The read (shared) side.
    pub fn read(&self) -> &Lock {
        &self.read
    }

    /// The write (exclusive) side.
    pub fn write(&self) -> &Lock {
        &self.write
    }

    /// The same lock with an explicit owner id for both sides (see [`Lock::with_owner`]).
    pub fn with_owner(self, owner: &str) -> Self {
        Self {
            read: self.read.with_owner(owner),
            write: self.write.with_owner(owner),
        }
    }

    /// The same lock with other options for both sides (see [`Lock::with_options`]).
    pub fn with_options(self, options: LockOptions) -> Self {
        Self {
            read: self.read.with_options(options.clone()),
            write: self.write.with_options(options),
        }
    }
}
