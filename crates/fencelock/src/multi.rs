//! Multi-locks: several named locks held all or nothing, by one guard.
//!
//! The locks are taken one after another in one global order (their names' byte order), so
//! two multi-locks that name the same locks in any order never wait for each other in a
//! cycle; when one lock cannot be had (busy, timed out, an error) or the caller gives up (the
//! future is dropped), the locks already taken are given back. Redisson's `RMultiLock` is a
//! client loop in the caller's order: an interrupted acquire leaves some locks held (#4456)
//! and two callers naming the locks in opposite orders deadlock (#4050).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::select_all;
use tokio_util::sync::CancellationToken;

use crate::backend::{Kind, Released, Wait};
use crate::error::{InputError, Result};
use crate::guard::Guard;
use crate::lock::{timed, Contended, Lock};
use crate::shared::Shared;

/// The most locks one multi-lock takes.
pub const MAX_MULTI_LOCKS: usize = 64;

/// A handle on several named locks taken all or nothing (see [`crate::Client::multi_lock`]).
/// Cheap to clone; clones share the owner, as [`Lock`] clones do.
#[derive(Clone, Debug)]
pub struct MultiLock {
    /// One handle per name, in the global order, all with one owner id.
    locks: Vec<Lock>,
    problem: Option<InputError>,
}

/// The multi-lock could not be taken at once: `name` is held by another owner (from
/// [`MultiLock::try_acquire`]); every lock taken before it was given back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MultiContended {
    /// The lock found held.
    pub name: String,
    /// What its holder's lease was, as for [`Lock::try_acquire`].
    pub contended: Contended,
}

impl MultiLock {
    pub(crate) fn new(client: &Arc<Shared>, names: &[&str]) -> Self {
        let owner = client.next_owner();
        let mut sorted: Vec<&str> = names.to_vec();
        sorted.sort_unstable();
        let problem = if names.is_empty() || names.len() > MAX_MULTI_LOCKS {
            Some(InputError::MultiLockSize {
                len: names.len(),
                max: MAX_MULTI_LOCKS,
            })
        } else {
            sorted
                .windows(2)
                .find(|w| w[0] == w[1])
                .map(|w| InputError::DuplicateName {
                    name: w[0].to_owned(),
                })
        };
        let locks = sorted
            .into_iter()
            .map(|name| Lock::new(client.clone(), name, owner.clone()))
            .collect();
        Self { locks, problem }
    }

    /// The same locks with other options (same owner): each lock is taken with them.
    pub fn with_options(mut self, options: crate::LockOptions) -> Self {
        self.locks = self
            .locks
            .into_iter()
            .map(|lock| lock.with_options(options.clone()))
            .collect();
        self
    }

    /// The same locks held under an explicit owner id (see [`Lock::with_owner`]), so that each
    /// lock's `status` names it (the `fencelock` command's host/pid ids).
    pub fn with_owner(mut self, owner: &str) -> Self {
        self.locks = self
            .locks
            .into_iter()
            .map(|lock| lock.with_owner(owner))
            .collect();
        self
    }

    /// The names, in the order they are taken.
    pub fn names(&self) -> Vec<&str> {
        self.locks.iter().map(Lock::name).collect()
    }

    /// Takes every lock in order, waiting as `wait` says for each (a deadline is the whole
    /// multi-lock's); gives back what was taken when one fails. A lock lost while a later one
    /// was awaited (a fixed lease that ran out) makes it give all back and start again, so it
    /// returns only with every lock held.
    async fn take(&self, wait: Wait) -> Result<Result<MultiGuard, MultiContended>> {
        if let Some(problem) = &self.problem {
            return Err(problem.clone().into());
        }
        // Every name and option is checked before the first lock is asked for.
        for lock in &self.locks {
            lock.validate()?;
        }
        loop {
            let mut taken = match self.take_once(wait).await? {
                Ok(taken) => taken,
                Err(contended) => return Ok(Err(contended)),
            };
            let lost = taken
                .0
                .iter()
                .find(|g| !g.is_held())
                .map(|g| g.parts().1.lost_error());
            let Some(lost) = lost else {
                return Ok(Ok(MultiGuard::new(std::mem::take(&mut taken.0))));
            };
            taken.give_back().await;
            if matches!(wait, Wait::No) {
                return Err(lost);
            }
        }
    }

    /// One pass over the locks in order.
    async fn take_once(&self, wait: Wait) -> Result<Result<Taken, MultiContended>> {
        let mut taken = Taken(Vec::with_capacity(self.locks.len()));
        for lock in &self.locks {
            match lock.ask(Kind::Mutex, wait).await {
                Ok(Ok(guard)) => taken.0.push(guard),
                Ok(Err(contended)) => {
                    taken.give_back().await;
                    let name = lock.name().to_owned();
                    return Ok(Err(MultiContended { name, contended }));
                }
                Err(e) => {
                    taken.give_back().await;
                    return Err(e);
                }
            }
        }
        Ok(Ok(taken))
    }

    /// Takes every lock, waiting as long as it takes (in the global order, so never in a
    /// cycle with another multi-lock). Dropping the future gives back the locks taken so far.
    pub async fn acquire(&self) -> Result<MultiGuard> {
        let taken = self.take(Wait::Until(None)).await?;
        taken.map_err(|busy| self.locks[0].busy_error(busy.contended))
    }

    /// Like [`MultiLock::acquire`], but gives up after `timeout` (for all the locks together)
    /// with [`crate::Error::Timeout`], giving back the locks taken so far.
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<MultiGuard> {
        let taken = self.take(timed("acquire_timeout", timeout)?).await?;
        taken.map_err(|busy| self.locks[0].busy_error(busy.contended))
    }

    /// One attempt at each lock: the guard, or the first lock found held (the ones taken
    /// before it given back).
    pub async fn try_acquire(&self) -> Result<Result<MultiGuard, MultiContended>> {
        self.take(Wait::No).await
    }
}

/// Guards taken so far: given back (awaited) when the multi-lock fails, in the background
/// when its future is dropped.
struct Taken(Vec<Guard>);

impl Taken {
    async fn give_back(&mut self) {
        for guard in self.0.drain(..).rev() {
            if let Err(e) = guard.release().await {
                tracing::warn!(error = %e, "a multi-lock's give-back failed; it is finished in the background or the lease ends it");
            }
        }
    }
}

/// Several locks held together. Give them back with [`MultiGuard::release`]; dropped, each
/// is released in the background as a dropped [`Guard`] is.
#[must_use = "dropping a multi-guard releases its locks in the background at once"]
#[derive(Debug)]
pub struct MultiGuard {
    guards: Vec<Guard>,
    /// Cancelled when any lock is lost, or the guard is dropped.
    lost: CancellationToken,
    watch: tokio::task::JoinHandle<()>,
}

impl MultiGuard {
    fn new(guards: Vec<Guard>) -> Self {
        let lost = CancellationToken::new();
        let tokens: Vec<CancellationToken> = guards.iter().map(Guard::lost_token).collect();
        let watch = tokio::spawn({
            let lost = lost.clone();
            async move {
                let each = tokens.iter().map(|t| Box::pin(t.cancelled()));
                select_all(each).await;
                lost.cancel();
            }
        });
        Self {
            guards,
            lost,
            watch,
        }
    }

    /// Each lock's name and fencing token, in the order they were taken.
    pub fn tokens(&self) -> Vec<(&str, u64)> {
        self.guards
            .iter()
            .map(|g| (g.name(), g.fencing_token()))
            .collect()
    }

    /// The fencing token of lock `name`, if this guard holds it.
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.guards
            .iter()
            .find(|g| g.name() == name)
            .map(Guard::fencing_token)
    }

    /// The guards, one per lock, in the order they were taken.
    pub fn guards(&self) -> &[Guard] {
        &self.guards
    }

    /// Resolves when any of the locks is no longer safely held (see [`Guard::lost`]).
    pub async fn lost(&self) {
        self.lost.cancelled().await
    }

    /// A token cancelled when [`MultiGuard::lost`] would resolve.
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.child_token()
    }

    /// Whether every lock is still safely held, from local state only.
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(Guard::is_held)
    }

    /// Gives back every lock, in the reverse of the order they were taken; the outcome per
    /// lock, in that order. An error of one release does not stop the others: the first
    /// error is returned after all were tried (what failed is finished in the background).
    pub async fn release(mut self) -> Result<Vec<(String, Released)>> {
        let mut released = Vec::with_capacity(self.guards.len());
        let mut first_error = None;
        for guard in std::mem::take(&mut self.guards).into_iter().rev() {
            let name = guard.name().to_owned();
            match guard.release().await {
                Ok(r) => released.push((name, r)),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(released),
        }
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        self.watch.abort();
        self.lost.cancel();
    }
}
