//! What every handle of one client shares: the lock service, and the machinery the client
//! lends it (timers, background task, given-up attempts, options).
//!
//! `Client`, `Lock` and `Guard` hold it by `Arc`; the background task holds it only by
//! `Weak` (as the watchdog's `Renewer`), so the client ends when its last handle is dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use tokio_util::sync::CancellationToken;

use crate::backend::registry;
use crate::backend::{Connecting, Ctx, LockService};
use crate::background::Background;
use crate::error::{Error, InputError, Result, Warning};
use crate::lease::LeaseState;
use crate::name::LockName;
use crate::options::ClientOptions;
use crate::watchdog::{BoxFuture, Renewals, Renewer, Watchdog};

pub(crate) struct Shared {
    pub(crate) service: Arc<dyn LockService>,
    pub(crate) ctx: Arc<Ctx>,
    /// Random 128-bit id, hex: the first half of every owner id this client makes.
    pub(crate) id: String,
    next_handle: AtomicU64,
    pub(crate) warnings: Vec<Warning>,
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
        // Boxed, as the seam's operations are: the connect futures nest deeply (RedLock).
        let (service, warnings) = Box::pin(registry::connect(Connecting {
            urls,
            options: &options,
            background: &background,
            watchdog: Arc::downgrade(&watchdog),
            client_id: &id,
        }))
        .await?;
        let shared = Arc::new(Self {
            service,
            ctx: Arc::new(Ctx {
                watchdog: watchdog.clone(),
                background,
                options,
            }),
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
        let started = std::time::Instant::now();
        let pending = ctx.background.settle(bound).await;
        // Holds and attempts given up whose give-back failed (and that no later attempt gave
        // back), and RedLock releases that failed on a server after the majority answered.
        let failed = self.service.unconfirmed() + ctx.background.take_failures();
        if pending + failed > 0 {
            tracing::warn!(pending, failed, "background work unfinished at close");
            return Err(Error::Unfinished {
                pending,
                failed,
                waited: started.elapsed(),
            });
        }
        Ok(())
    }
}
