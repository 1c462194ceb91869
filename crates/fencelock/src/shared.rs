//! What every handle of one client shares: the lock service, and the machinery the client
//! lends it (timers, background task, given-up attempts, options).
//!
//! `Client`, `Lock` and `Guard` hold it by `Arc`; the background task holds it only by
//! `Weak` (as the watchdog's `Renewer`), so the client ends when its last handle is dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use tokio_util::sync::CancellationToken;

use crate::abandoned::Abandoned;
#[cfg(feature = "etcd")]
use crate::backend::etcd::Etcd;
#[cfg(feature = "redis")]
use crate::backend::redis::RedisFamily;
#[cfg(feature = "zookeeper")]
use crate::backend::zookeeper::ZooKeeper;
use crate::backend::{Ctx, Service};
use crate::background::Background;
use crate::error::{Error, InputError, Result};
use crate::lease::LeaseState;
use crate::name::LockName;
use crate::options::ClientOptions;
use crate::watchdog::{BoxFuture, Renewals, Renewer, Watchdog};

pub(crate) struct Shared {
    pub(crate) service: Service,
    pub(crate) ctx: Ctx,
    /// Random 128-bit id, hex: the first half of every owner id this client makes.
    pub(crate) id: String,
    next_handle: AtomicU64,
    pub(crate) warnings: Vec<String>,
    shutdown: CancellationToken,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Renewer for Shared {
    fn renew(&self, leases: Vec<Arc<LeaseState>>) -> BoxFuture<'_, Renewals> {
        self.service.renew(leases)
    }
}

impl Shared {
    /// A lock's name, checked by the common rules and by the service's own.
    pub(crate) fn lock_name(&self, name: &str) -> Result<Arc<LockName>, InputError> {
        let lock = LockName::new(name)?;
        self.service.check_name(name)?;
        Ok(Arc::new(lock))
    }

    /// Connects the service and starts the client's background task.
    pub(crate) async fn connect(urls: &[&str], options: ClientOptions) -> Result<Arc<Self>> {
        let (background, work) = Background::new();
        let (watchdog, runner) = Watchdog::new(options.clone(), work);
        let watchdog = Arc::new(watchdog);
        let id = format!("{:032x}", rand::random::<u128>());
        let (service, warnings) =
            connect_service(urls, &options, &background, &watchdog, &id).await?;
        let shared = Arc::new(Self {
            service,
            ctx: Ctx {
                watchdog: watchdog.clone(),
                background,
                abandoned: Arc::new(Abandoned::default()),
                options,
            },
            id,
            next_handle: AtomicU64::new(1),
            warnings,
            shutdown: CancellationToken::new(),
        });
        let renewer: Weak<dyn Renewer> = Arc::downgrade(&shared) as Weak<dyn Renewer>;
        tokio::spawn(runner.run(watchdog, renewer, shared.shutdown.clone()));
        tracing::debug!(server = %shared.service.server(), id = %shared.id, "fencelock client connected");
        Ok(shared)
    }

    /// A fresh owner id: this client's id and a per-handle number.
    pub(crate) fn next_owner(&self) -> String {
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
        format!("{}:{handle}", self.id)
    }

    /// Waits (bounded) for background work; an error when some was unfinished or failed.
    pub(crate) async fn settle(&self) -> Result<()> {
        let ctx = &self.ctx;
        let bound = ctx.options.request_bound();
        let pending = ctx.background.settle(bound).await;
        // Holds and attempts given up whose give-back failed (and that no later attempt gave
        // back), and RedLock releases that failed on a server after the majority answered.
        let failed = ctx.abandoned.len() + ctx.background.take_failures();
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

/// Picks the lock service by the URL's scheme and connects it: `zk://` or `etcd://` (one
/// URL, the servers comma-separated in it) or the Redis family (one URL, or RedLock's odd
/// number of them).
async fn connect_service(
    urls: &[&str],
    options: &ClientOptions,
    background: &Background,
    watchdog: &Arc<Watchdog>,
    client_id: &str,
) -> Result<(Service, Vec<String>)> {
    for (scheme, service) in [("zk://", "ZooKeeper"), ("etcd://", "etcd")] {
        if !urls.iter().any(|u| u.starts_with(scheme)) {
            continue;
        }
        let [url] = urls else {
            let list: Vec<String> = urls.iter().map(|u| crate::redact_url(u)).collect();
            return Err(InputError::InvalidUrl {
                url: list.join(" "),
                reason: format!(
                    "{service} takes one {scheme} URL that lists its servers, comma-separated; \
                     several URLs (RedLock) are for Redis only"
                ),
            }
            .into());
        };
        return match scheme {
            "zk://" => connect_zookeeper(url, options, background).await,
            _ => connect_etcd(url, options, background).await,
        };
    }
    connect_redis(urls, options, background, watchdog, client_id).await
}

#[cfg(feature = "redis")]
async fn connect_redis(
    urls: &[&str],
    options: &ClientOptions,
    background: &Background,
    watchdog: &Arc<Watchdog>,
    client_id: &str,
) -> Result<(Service, Vec<String>)> {
    if urls.is_empty() || urls.len().is_multiple_of(2) {
        return Err(InputError::InvalidOption {
            option: "urls",
            reason: "RedLock needs an odd number of servers (1, 3, 5, ...)",
        }
        .into());
    }
    // Boxed, as the seam's operations are: the connect futures nest deeply (RedLock).
    let watchdog = Arc::downgrade(watchdog);
    let connecting = Box::pin(RedisFamily::connect(
        urls, options, background, watchdog, client_id,
    ));
    let (family, warnings) = connecting.await?;
    Ok((Service::Redis(family), warnings))
}

#[cfg(not(feature = "redis"))]
async fn connect_redis(
    urls: &[&str],
    _options: &ClientOptions,
    _background: &Background,
    _watchdog: &Arc<Watchdog>,
    _client_id: &str,
) -> Result<(Service, Vec<String>)> {
    let url = urls.first().copied().unwrap_or_default();
    if !urls.is_empty() && urls.iter().all(|u| u.starts_with("redis")) {
        return Err(not_built(url, "redis"));
    }
    Err(InputError::InvalidUrl {
        url: crate::redact_url(url),
        reason: format!(
            "not a URL of a lock service this build has ({}; Redis URLs need the `redis` cargo \
             feature)",
            built_schemes()
        ),
    }
    .into())
}

#[cfg(feature = "zookeeper")]
async fn connect_zookeeper(
    url: &str,
    options: &ClientOptions,
    background: &Background,
) -> Result<(Service, Vec<String>)> {
    let (zk, warnings) = Box::pin(ZooKeeper::connect(url, options, background)).await?;
    Ok((Service::ZooKeeper(zk), warnings))
}

#[cfg(not(feature = "zookeeper"))]
async fn connect_zookeeper(
    url: &str,
    _options: &ClientOptions,
    _background: &Background,
) -> Result<(Service, Vec<String>)> {
    Err(not_built(url, "zookeeper"))
}

#[cfg(feature = "etcd")]
async fn connect_etcd(
    url: &str,
    options: &ClientOptions,
    background: &Background,
) -> Result<(Service, Vec<String>)> {
    let (etcd, warnings) = Box::pin(Etcd::connect(url, options, background)).await?;
    Ok((Service::Etcd(etcd), warnings))
}

#[cfg(not(feature = "etcd"))]
async fn connect_etcd(
    url: &str,
    _options: &ClientOptions,
    _background: &Background,
) -> Result<(Service, Vec<String>)> {
    Err(not_built(url, "etcd"))
}

/// A URL of a service this build left out (its cargo feature was off).
#[cfg(not(all(feature = "redis", feature = "zookeeper", feature = "etcd")))]
fn not_built(url: &str, feature: &str) -> Error {
    InputError::InvalidUrl {
        url: crate::redact_url(url),
        reason: format!(
            "fencelock was built without its `{feature}` cargo feature, which this URL needs"
        ),
    }
    .into()
}

/// The URL schemes of the services this build has, other than Redis.
#[cfg(not(feature = "redis"))]
fn built_schemes() -> String {
    let schemes = [
        ("zk://", cfg!(feature = "zookeeper")),
        ("etcd://", cfg!(feature = "etcd")),
    ];
    let built: Vec<&str> = schemes
        .iter()
        .filter(|(_, on)| *on)
        .map(|(s, _)| *s)
        .collect();
    built.join(", ")
}
