//! The lock service of the session services (ZooKeeper, etcd), written once. A
//! [`SessionService`] runs each operation in the client's current session or lease
//! (`super::current`): an acquire re-enters the owner's holding or refuses on an ended or
//! unheard session before the service's attempt, and the new holding's first hold is granted
//! in the session (`super::session_holds`); holds are given back through `super::holdings`;
//! status, release by owner and forced unlocks read the lock's queue the same way for both;
//! per-lock options are refused and failures become errors in one place.
//!
//! Elections run here too: a campaign is an acquire of `Kind::Leader` (the queue's first
//! participant leads, its entry stores the value), the leader is the head of the election's
//! queue, and a proclaim rewrites the value of the holding's own entry, found in the
//! session's holdings, only while that entry is there; losing it there fires the hold's lost
//! signal. The services add reading the head, the guarded rewrite and a follower task.
//!
//! Read-write locks and semaphores run here too: each reader's, writer's and permit's
//! holding is an entry of its own in the session, named by its hold as a mutex's is. The
//! holdings are kept per (lock, owner, side) (`super::holdings::Side`): an owner may hold a
//! read-write lock's write and read sides at once (a downgrade), and asking for the write
//! side while holding only the read side is refused at once (`Error::UpgradeRefused`).
//! Status lists every holder (the queue's first entry, then every reader with no other
//! owner's writer ahead, every permit among the first N) and the waiters in order; a forced
//! unlock deletes every holder's entry.
//!
//! A service implements [`SessionLocks`] on its session with only what differs: a
//! [`Service`] constant (its name, its name rule, its refusals' words), how a failure counts
//! ([`Failure`]), how it attempts (its `super::queue` driver), how it reads the queue
//! ([`Listed`] entries), deletes its head and deletes a holding's entry. The ZooKeeper fast
//! path stays inside ZooKeeper's attempt and delete.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::current::{Current, Ends, Opening};
use super::holdings::{self, Closing, Side};
use super::queue::recipe::Recipe;
use super::queue::rule::{self, Queued};
use super::session_holds::SessionHolds;
use super::{
    Acquired, Connected, Ctx, Feed, Held, Kind, Leader, LockRequest, LockService, RawStatus,
    Released, Wait,
};
use crate::background::Background;
use crate::error::{Error, InputError};
use crate::lease::LeaseState;
use crate::name::LockName;
use crate::options::{ClientOptions, LockOptions};
use crate::status::Waiter;
use crate::watchdog::BoxFuture;

/// What a session service is: its name, its rule for lock names, and what it refuses, in its
/// own words.
pub(crate) struct Service {
    /// The service's name in errors.
    pub(crate) name: &'static str,
    /// Its rules for lock names, checked before any I/O.
    pub(crate) check_name: fn(&str) -> Result<(), InputError>,
    /// Why `min_replica_acks` means nothing here (a write is answered once a quorum logged it).
    pub(crate) quorum: &'static str,
    /// Why `LockOptions::lease` means nothing here (the session is the lease).
    pub(crate) session: &'static str,
    /// An attempt in a session that has ended.
    pub(crate) ended: &'static str,
    /// An owner that holds the lock while the session was not heard from within its length.
    pub(crate) unheard: &'static str,
    /// `Lock::release` of a lock this owner id holds in another session: what was asked ...
    pub(crate) held_elsewhere: &'static str,
    /// ... and why only that session's client can give it back.
    pub(crate) only_its_client: &'static str,
    /// Whether it offers the read-write lock (`Kind::Read`, `Kind::Write`) ...
    pub(crate) rw_lock: bool,
    /// ... and the semaphore (`Kind::Permit`).
    pub(crate) semaphore: bool,
}

/// An entry of a lock's queue, as status, release by owner and forced unlocks read it.
pub(crate) struct Listed {
    /// The node's path, or the key.
    pub(crate) path: String,
    /// The owner id the entry stores (empty where another client stores none).
    pub(crate) owner: String,
    /// The session (lease) it lives in, as [`Ends::id`] names it.
    pub(crate) session: i64,
    /// Its creation's zxid or revision: the holding's fencing token.
    pub(crate) token: i64,
    /// How long it has been queued, where the service tells (else zero).
    pub(crate) age: Duration,
    /// A read-write lock's reader (it shares with the readers around it); every other
    /// entry is exclusive.
    pub(crate) reader: bool,
}

impl Queued for Listed {
    fn exclusive(&self) -> bool {
        !self.reader
    }
}

/// A session service's session (ZooKeeper's session, etcd's lease) and what lives in it: what
/// differs between the session services. The rest is [`SessionService`]'s.
pub(crate) trait SessionLocks: Ends + 'static {
    /// Why a request failed.
    type Fault: Send;
    /// The service: its name, name rules and words.
    const SERVICE: Service;

    /// Where the session's servers are, for errors and logs.
    fn server(&self) -> String;
    /// The session's clock, holds and holdings.
    fn holds(&self) -> &SessionHolds;
    /// How a failure counts, and its detail for the error.
    fn failure(fault: Self::Fault) -> (Failure, String);

    /// A new attempt in this session (the owner does not hold the lock here): takes the lock
    /// through the queue (`super::queue`), waiting as the ask's `wait` says; a holding it
    /// takes is made with [`SessionLocks::hold`].
    fn attempt(
        self: &Arc<Self>,
        ask: Ask<'_>,
    ) -> impl Future<Output = Result<Acquired, Error>> + Send;
    /// Deletes a closing holding's node or key and settles it (`Holdings::settle`).
    fn delete_holding(
        self: Arc<Self>,
        closing: Closing,
    ) -> impl Future<Output = Result<Released, Self::Fault>> + Send;
    /// The lock's queue in order, as the servers have it now.
    fn queue(&self, name: &str) -> impl Future<Output = Result<Vec<Listed>, Error>> + Send;
    /// Deletes the queue's head, that holding only: `Ok(false)` when it is gone already.
    fn delete_head(&self, head: &Listed) -> impl Future<Output = Result<bool, Self::Fault>> + Send;
    /// The head's remaining lease as the server counts it, where the service can tell.
    fn remaining(&self, _head: &Listed) -> impl Future<Output = Option<Duration>> + Send {
        std::future::ready(None)
    }
    /// Whether a forced unlock of `queue` deletes every entry, the waiters' too: a semaphore
    /// whose holders are not told apart from its waiters once N was lowered (etcd).
    fn unlock_all(_queue: &[Listed]) -> bool {
        false
    }
    /// An entry's owner as status shows it.
    fn shown(entry: &Listed) -> String {
        entry.owner.clone()
    }

    /// The entry of election `name`'s leader (its first participant), as the servers have
    /// it now: `owner` is the value it advertises, `token` its term.
    fn leader(&self, name: &str) -> impl Future<Output = Result<Option<Listed>, Error>> + Send;
    /// Rewrites the value stored in a holding's entry `path` (created with `token`), only if
    /// that entry is still there: `Ok(false)` when it is gone (or its session ended).
    fn proclaim(
        &self,
        path: &str,
        token: u64,
        value: &str,
    ) -> impl Future<Output = Result<bool, Self::Fault>> + Send;
    /// Starts a task that follows election `name`'s leader in this session (see
    /// [`Feed`]); it ends with an error when it can no longer follow, quietly when the
    /// receiver is dropped.
    fn observe(self: &Arc<Self>, name: &str) -> Feed;

    /// A new holding of the node or key `path` with `token`, and its first hold, granted in
    /// the session.
    fn hold(
        &self,
        ctx: &Ctx,
        request: &LockRequest<'_>,
        path: String,
        token: u64,
    ) -> Arc<LeaseState> {
        let lease = self.holds().grant(ctx, request, token);
        self.holds().holdings.insert(
            (&request.lock.name, request.owner, Side::of(request.kind)),
            path,
            &lease,
        );
        lease
    }

    /// A failure as fencelock's error, about `lock` if any.
    fn fail(&self, lock: Option<&str>, fault: Self::Fault) -> Error {
        let (lock, server) = (lock.map(str::to_owned), self.server());
        match Self::failure(fault) {
            (Failure::Unavailable, detail) => Error::Unavailable {
                lock,
                server,
                detail,
            },
            (Failure::Denied, detail) => Error::Denied {
                lock,
                server,
                detail,
            },
            (Failure::Protocol, detail) => Error::Protocol {
                lock,
                server,
                detail,
            },
        }
    }
}

/// An acquire, as the session service hands it to a session's attempt, with its recipe
/// (`super::queue::recipe`): a service reads the recipe, never the kind.
#[derive(Clone, Copy)]
pub(crate) struct Ask<'a> {
    pub(crate) ctx: &'a Ctx,
    pub(crate) request: &'a LockRequest<'a>,
    pub(crate) recipe: &'a Recipe<'a>,
    pub(crate) wait: Wait,
}

/// How a session service's failure counts.
pub(crate) enum Failure {
    /// No reply or no connection, or the session ended: it may work later.
    Unavailable,
    /// The service refused the credentials or their permissions.
    Denied,
    /// The service answered something fencelock does not expect, or refused the request.
    Protocol,
}

/// Gives back hold `id` (`None`: the owner's newest) of `session`; the last one deletes the
/// holding's node or key. A delete that fails, or that the caller stopped waiting for, closes
/// the holding to re-entry and goes on in the client's `background` until the entry is gone
/// or the session ends. A hold of an ended session is `NotHeld`, a re-entered lock's too.
async fn give_back<S: SessionLocks>(
    session: &Arc<S>,
    background: &Background,
    hold: (&str, &Arc<str>, Option<u64>),
) -> Result<Released, Error> {
    if session.has_ended() {
        return Ok(Released::NotHeld);
    }
    let delete = |session: Arc<S>, closing| session.delete_holding(closing);
    let holdings = &session.holds().holdings;
    let released = holdings::give_back(session, holdings, background, hold, delete).await;
    released.map_err(|e| session.fail(Some(hold.0), e))
}

/// A session service as the core sees it: the current session (lease) with its holdings,
/// replaced by a new one once it has ended.
pub(crate) struct SessionService<S: SessionLocks> {
    current: Current<S>,
}

impl<S: SessionLocks> SessionService<S> {
    /// Opens the client's first session at `target` (its URL checked already).
    pub(crate) async fn connect(
        target: S::Target,
        options: &ClientOptions,
        background: &Background,
    ) -> Result<Connected, Error> {
        if options.fence_horizon.is_some() {
            return Err(InputError::InvalidOption {
                option: "fence_horizon",
                reason: "a Redis option: ZooKeeper and etcd keep no fencing counter (their \
                         tokens are zxids and revisions, kept by the server)",
            }
            .into());
        }
        let opening = Opening {
            target,
            options: options.clone(),
            background: background.clone(),
        };
        let (current, warnings) = Current::open(opening).await?;
        Ok((Arc::new(Self { current }) as Arc<dyn LockService>, warnings))
    }
}

impl<S: SessionLocks> LockService for SessionService<S> {
    fn name(&self) -> &'static str {
        S::SERVICE.name
    }

    fn server(&self) -> String {
        self.current.now().server()
    }

    fn check_name(&self, name: &str) -> Result<(), InputError> {
        (S::SERVICE.check_name)(name)
    }

    /// The mutex and the election, and the read-write lock and the semaphore where the
    /// service offers them ([`Service`]), in the layouts of the service's own recipes; the
    /// others are refused, before any I/O.
    fn check_kind(&self, kind: Kind<'_>) -> Result<(), Error> {
        let offered = match kind {
            Kind::Mutex | Kind::Leader { .. } => true,
            Kind::Read | Kind::Write => S::SERVICE.rw_lock,
            Kind::Permit { .. } => S::SERVICE.semaphore,
        };
        match offered {
            true => Ok(()),
            false => Err(super::refused(S::SERVICE.name, kind)),
        }
    }

    fn leader<'a>(
        &'a self,
        lock: &'a Arc<LockName>,
    ) -> BoxFuture<'a, Result<Option<Leader>, Error>> {
        Box::pin(async move {
            let session = self.current.live().await?;
            let head = session.leader(&lock.name).await?;
            head.map(|head| as_leader(&*session, &lock.name, head))
                .transpose()
        })
    }

    fn proclaim<'a>(
        &'a self,
        hold: &'a Arc<LeaseState>,
        value: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(proclaim(self.current.now(), hold, value))
    }

    fn observe<'a>(&'a self, lock: &'a Arc<LockName>) -> BoxFuture<'a, Result<Feed, Error>> {
        Box::pin(async move { Ok(self.current.live().await?.observe(&lock.name)) })
    }

    /// Options that mean nothing here are refused: the session is the lease of every lock.
    fn check(&self, options: &LockOptions, _lease: Duration) -> Result<(), InputError> {
        let option = if options.replica_acks.is_some() {
            ("min_replica_acks", S::SERVICE.quorum)
        } else if options.lease.is_some() {
            ("lease", S::SERVICE.session)
        } else {
            return Ok(());
        };
        Err(InputError::InvalidOption {
            option: option.0,
            reason: option.1,
        })
    }

    fn acquire<'a>(
        &'a self,
        ctx: &'a Ctx,
        request: &'a LockRequest<'a>,
        wait: Wait,
    ) -> BoxFuture<'a, Result<Acquired, Error>> {
        Box::pin(async move {
            let session = self.current.live().await?;
            match start(&*session, ctx, request)? {
                Some(held) => Ok(Acquired::Held(held)),
                None => {
                    let recipe = Recipe::of(request);
                    let ask = Ask {
                        ctx,
                        request,
                        recipe: &recipe,
                        wait,
                    };
                    session.attempt(ask).await
                }
            }
        })
    }

    fn release<'a>(
        &'a self,
        _ctx: &'a Ctx,
        lease: &'a Arc<LeaseState>,
    ) -> BoxFuture<'a, Result<Released, Error>> {
        Box::pin(async move {
            // A hold of an ended session is in no later session's holdings: `NotHeld`.
            let (hold, now) = (&lease.hold, self.current.now());
            let background = self.current.background();
            give_back(
                &now,
                background,
                (&hold.lock.name, &hold.owner, Some(hold.id)),
            )
            .await
        })
    }

    fn release_owner<'a>(
        &'a self,
        lock: &'a Arc<LockName>,
        owner: &'a Arc<str>,
    ) -> BoxFuture<'a, Result<Released, Error>> {
        Box::pin(async move {
            let session = self.current.live().await?;
            let background = self.current.background();
            release_owner(&session, background, &lock.name, owner).await
        })
    }

    fn status<'a>(&'a self, lock: &'a Arc<LockName>) -> BoxFuture<'a, Result<RawStatus, Error>> {
        Box::pin(async move { status(&*self.current.live().await?, &lock.name).await })
    }

    fn force_unlock<'a>(
        &'a self,
        lock: &'a Arc<LockName>,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, Error>> {
        Box::pin(async move { force_unlock(&*self.current.live().await?, &lock.name).await })
    }
}

/// The start of an acquire in `session` (see `Holdings::start`): a re-entry into the
/// owner's holding while the session is live, or `None` for a new attempt; refused when the
/// session ended, or when the owner holds the lock and the session was not heard from in time.
fn start<S: SessionLocks>(
    session: &S,
    ctx: &Ctx,
    request: &LockRequest<'_>,
) -> Result<Option<Held>, Error> {
    let holds = session.holds();
    let unavailable = |detail: &str| Error::Unavailable {
        lock: Some(request.lock.name.clone()),
        server: session.server(),
        detail: detail.into(),
    };
    let usable = match holds.ended.is_cancelled() {
        true => Err(unavailable(S::SERVICE.ended)),
        false => Ok(()),
    };
    holds.holdings.start(
        holds.is_live(),
        usable,
        request,
        |token| holds.grant(ctx, request, token),
        || unavailable(S::SERVICE.unheard),
    )
}

/// `Lock::release`: the owner's newest hold in this client. A holding of this owner id in
/// another session cannot be released from here (typed error); none is `NotHeld`.
async fn release_owner<S: SessionLocks>(
    session: &Arc<S>,
    background: &Background,
    name: &str,
    owner: &Arc<str>,
) -> Result<Released, Error> {
    if session.holds().holdings.holds(name, owner) {
        return give_back(session, background, (name, owner, None)).await;
    }
    match session.queue(name).await?.first() {
        Some(head) if *head.owner == **owner && head.session != session.id() => {
            Err(Error::Unsupported {
                service: S::SERVICE.name,
                what: S::SERVICE.held_elsewhere,
                why: S::SERVICE.only_its_client,
            })
        }
        _ => Ok(Released::NotHeld),
    }
}

/// The holders (owner id, hold count if this client holds it, token of the first, remaining
/// lease where the service tells) and the waiters. The holders are the queue's first entry
/// and, on a read-write lock, every reader with no other owner's writer ahead of it.
async fn status<S: SessionLocks>(session: &S, name: &str) -> Result<RawStatus, Error> {
    let queue = session.queue(name).await?;
    let held = rule::holding(&queue, same_owner);
    let Some(head) = queue.first() else {
        return Ok(RawStatus {
            remaining: None,
            held: false,
            last_token: None,
            current_token: None,
            owners: Vec::new(),
            waiters: Vec::new(),
        });
    };
    let holdings = &session.holds().holdings;
    let owners = queue[..held]
        .iter()
        .map(|e| (S::shown(e), holdings.count(name, &e.path).unwrap_or(1)))
        .collect();
    let token = queue[..held]
        .iter()
        .filter_map(|e| u64::try_from(e.token).ok())
        .max();
    let waiters = queue[held..]
        .iter()
        .map(|w| Waiter {
            owner: S::shown(w),
            age: w.age,
            window: Duration::ZERO,
            remaining: Duration::ZERO,
            expired: false,
            unreadable: None,
        })
        .collect();
    Ok(RawStatus {
        remaining: session.remaining(head).await,
        held: true,
        last_token: token,
        current_token: token,
        owners,
        waiters,
    })
}

/// Whether two entries are one owner's (a downgrade's write and read entries).
fn same_owner(a: &Listed, b: &Listed) -> bool {
    a.session == b.session && a.owner == b.owner
}

/// Deletes every holder's node or key (those holdings only: a read-write lock's readers
/// all; every entry where the service says so, `SessionLocks::unlock_all`); the next
/// waiters' watches fire and they take the lock.
async fn force_unlock<S: SessionLocks>(
    session: &S,
    name: &str,
) -> Result<Vec<(String, u64)>, Error> {
    let queue = session.queue(name).await?;
    let held = match S::unlock_all(&queue) {
        true => queue.len(),
        false => rule::holding(&queue, same_owner),
    };
    let mut gone = Vec::new();
    for head in &queue[..held] {
        match session.delete_head(head).await {
            Ok(true) => gone.push((S::shown(head), 1)),
            Ok(false) => {}
            Err(e) => return Err(session.fail(Some(name), e)),
        }
    }
    Ok(gone)
}

/// A leader's entry as the election's leader: its value and its term.
fn as_leader<S: SessionLocks>(session: &S, name: &str, head: Listed) -> Result<Leader, Error> {
    let term = u64::try_from(head.token).map_err(|_| Error::Protocol {
        lock: Some(name.to_owned()),
        server: session.server(),
        detail: format!("the leader's entry has token {}", head.token),
    })?;
    Ok(Leader {
        value: head.owner,
        term,
    })
}

/// `Leadership::proclaim`: rewrites the value of the hold's own entry in `session` (the
/// current one: a hold of an ended session is lost already). An entry gone is the hold lost:
/// its lost signal fires, and the error says so.
async fn proclaim<S: SessionLocks>(
    session: Arc<S>,
    hold: &Arc<LeaseState>,
    value: &str,
) -> Result<(), Error> {
    let (name, owner, token) = (&hold.hold.lock.name, &hold.hold.owner, hold.hold.token);
    let holdings = &session.holds().holdings;
    let entry = holdings
        .all()
        .into_iter()
        .find(|(n, o, _, t)| n == name && o == owner && *t == token);
    let Some((_, _, path, _)) = entry.filter(|_| !session.has_ended()) else {
        return Err(hold.lost_error());
    };
    match session.proclaim(&path, token, value).await {
        Ok(true) => Ok(()),
        Ok(false) => {
            holdings.vanished(name, owner, &path, token);
            Err(hold.lost_error())
        }
        Err(fault) => Err(session.fail(Some(name), fault)),
    }
}
