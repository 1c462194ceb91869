//! The libraries under comparison, driven the same way: connect, acquire (waiting), release.

use std::time::Duration;

use fencelock::{Client, Guard, Lock, LockOptions};

/// The lease of the fixed-lease runs, and rslock's TTL (it has no watchdog).
pub const LEASE: Duration = Duration::from_secs(10);

/// What is measured: fencelock with a fixed lease, fencelock under its watchdog, or rslock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// fencelock, `LockOptions::lease(LEASE)`: no renewals.
    Fixed,
    /// fencelock's default: the watchdog renews the lease.
    Watchdog,
    /// rslock 0.10 (`SET NX PX` + compare-and-delete script), TTL `LEASE`.
    Rslock,
}

impl Variant {
    /// All three, in the order the rounds start with.
    pub const ALL: [Variant; 3] = [Variant::Rslock, Variant::Fixed, Variant::Watchdog];

    /// The name used in JSON and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Fixed => "fencelock_fixed",
            Variant::Watchdog => "fencelock_watchdog",
            Variant::Rslock => "rslock",
        }
    }

    /// The variant named `name` (see [`Variant::name`]).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }
}

/// One connected client of either library.
#[derive(Clone)]
pub enum Locker {
    /// A fencelock client; `Some(lease)`: a fixed lease.
    Fence(Client, Option<Duration>),
    /// An rslock manager (one multiplexed connection per server).
    Rs(rslock::LockManager),
}

/// A held lock of either library.
pub enum Held {
    /// A fencelock guard.
    Fence(Guard),
    /// An rslock lock.
    Rs(rslock::Lock),
}

impl Locker {
    /// Connects `variant` to `urls` (one URL, or several for RedLock). `retry`: rslock's
    /// polling interval while it waits.
    pub async fn connect(variant: Variant, urls: &[String], retry: Duration) -> Self {
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let fence = |client| match variant {
            Variant::Fixed => Locker::Fence(client, Some(LEASE)),
            _ => Locker::Fence(client, None),
        };
        match variant {
            Variant::Rslock => {
                let mut manager = rslock::LockManager::new(urls);
                manager.set_retry(3, retry);
                Locker::Rs(manager)
            }
            _ if urls.len() == 1 => fence(Client::connect(urls[0]).await.expect("connect")),
            _ => fence(Client::connect_all(&urls).await.expect("connect")),
        }
    }

    /// A handle on the lock `key`, made once and reused, as a service would.
    pub fn handle(&self, key: &str) -> Handle {
        match self {
            Locker::Fence(client, lease) => {
                let mut lock = client.lock(key);
                if let Some(lease) = lease {
                    lock = lock.with_options(LockOptions::default().lease(*lease));
                }
                Handle::Fence(lock)
            }
            Locker::Rs(manager) => Handle::Rs(manager.clone(), key.as_bytes().to_vec()),
        }
    }
}

/// One lock of either library.
pub enum Handle {
    /// A fencelock lock handle.
    Fence(Lock),
    /// An rslock manager and the resource name.
    Rs(rslock::LockManager, Vec<u8>),
}

impl Handle {
    /// Acquires the lock, waiting for as long as it takes.
    pub async fn acquire(&self) -> Held {
        match self {
            Handle::Fence(lock) => Held::Fence(lock.acquire().await.expect("fencelock acquire")),
            Handle::Rs(manager, key) => Held::Rs(
                manager
                    .acquire_no_guard(&key[..], LEASE)
                    .await
                    .expect("rslock acquire"),
            ),
        }
    }

    /// Releases what [`Handle::acquire`] returned.
    pub async fn release(&self, held: Held) {
        match (self, held) {
            (_, Held::Fence(guard)) => {
                guard.release().await.expect("fencelock release");
            }
            (Handle::Rs(manager, _), Held::Rs(lock)) => manager.unlock(&lock).await,
            (Handle::Fence(_), Held::Rs(_)) => unreachable!("an rslock lock on a fencelock"),
        }
    }

    /// One acquire + release pair.
    pub async fn pair(&self) {
        let held = self.acquire().await;
        self.release(held).await;
    }
}
