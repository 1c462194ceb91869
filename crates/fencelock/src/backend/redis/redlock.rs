//! RedLock: one lock over N independent Redis masters, held when a majority grants it.
//!
//! Every request goes to all servers at once over their kept-open connections, and an attempt
//! is decided as soon as a majority has answered for or against it. Fencing tokens: the client
//! proposes `max(its clock in µs, highest token it has seen + 1)`; each server issues
//! `max(its counter + 1, proposal)` and stores it in the same script. When a majority issued
//! the same token it is on a majority already; otherwise the highest is written back to a
//! majority before the acquisition counts. Any later majority shares a server with that one,
//! whose counter forces a higher token (docs/SAFETY.md has the argument and its assumptions).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;

use super::outcome::{Outcomes, ServerOutcome};
use super::serials::Serials;
use super::server::RedisBackend;
use super::terms::{AcquireReply, Attempt, Queueing, ReleaseSink, RenewItem};
use crate::backend::redis::keys::LockKeys;
use crate::backend::RawStatus;
use crate::backend::Released;
use crate::background::Background;
use crate::error::{Error, Warning};
use crate::lease::Renewal;
use crate::options::ClientOptions;

/// Several independent servers, one lock.
pub(crate) struct RedLock {
    servers: Vec<Arc<RedisBackend>>,
    /// Runs the requests still in flight when an operation is decided.
    background: Background,
    quorum: usize,
    /// The highest fencing token this client has seen, so that its next proposal is higher.
    highest: AtomicU64,
    /// Acquire requests still under way on a server after their attempt was decided.
    late: Arc<LateGrants>,
    /// Orders a heal of a hold before its release.
    serials: Arc<Serials>,
    /// Keeps the de-duplicating sink alive (the servers hold it weakly).
    _sink: Arc<DedupSink>,
}

/// Every server publishes the same release message; waiters should hear it once.
struct DedupSink {
    inner: Weak<dyn ReleaseSink>,
    recent: Mutex<std::collections::VecDeque<(String, Vec<u8>)>>,
}

impl ReleaseSink for DedupSink {
    fn released(&self, channel: &str, message: &[u8]) {
        {
            let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
            if recent.iter().any(|(c, m)| c == channel && m == message) {
                return;
            }
            if recent.len() >= 64 {
                recent.pop_front();
            }
            recent.push_back((channel.to_owned(), message.to_vec()));
        }
        if let Some(inner) = self.inner.upgrade() {
            inner.released(channel, message);
        }
    }

    fn disconnected(&self) {
        if let Some(inner) = self.inner.upgrade() {
            inner.disconnected();
        }
    }

    fn server_changed(&self) {
        if let Some(inner) = self.inner.upgrade() {
            inner.server_changed();
        }
    }
}

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// One acquire request under way in [`LateGrants`]; dropped when it has ended, which ends
/// the waits of the releases behind it.
struct UnderWay {
    late: Arc<LateGrants>,
    key: (u64, usize),
    _ended: watch::Sender<()>,
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        self.late.map().remove(&self.key);
    }
}

/// Acquire requests still under way on a server when their attempt was decided, by attempt
/// id and server. Such a request may take more steps there (NOSCRIPT, the script loaded and
/// sent again; a request sent once more on a fresh connection), so a release of the attempt's
/// hold, sent later, could overtake it on that server and leave a grant behind that nobody
/// keeps, for a whole lease (after a server restarted empty: issue 22). A release of the
/// hold on that server waits for the request to end first.
#[derive(Default)]
struct LateGrants {
    under_way: Mutex<HashMap<(u64, usize), watch::Receiver<()>>>,
}

impl LateGrants {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, usize), watch::Receiver<()>>> {
        self.under_way.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that attempt `id`'s request to `server` is still under way, until the returned
    /// note is dropped (when the request has ended).
    fn note(self: &Arc<Self>, id: u64, server: usize) -> UnderWay {
        let (ended, wait) = watch::channel(());
        self.map().insert((id, server), wait);
        UnderWay {
            late: self.clone(),
            key: (id, server),
            _ended: ended,
        }
    }

    /// Waits until no request of attempt `id` is under way on `server`. Each request is
    /// bounded in time, so this is too.
    fn wait(&self, id: u64, server: usize) -> Option<impl std::future::Future<Output = ()>> {
        let mut wait = self.map().get(&(id, server))?.clone();
        // Nothing is ever sent: `changed` returns when the sender is dropped.
        Some(async move { while wait.changed().await.is_ok() {} })
    }
}

/// A short random back-off after competing attempts split the servers (5-50 ms).
fn backoff() -> Duration {
    Duration::from_millis(5 + rand::random::<u64>() % 45)
}

/// One server's grant of an attempt.
struct Grant {
    server: usize,
    token: u64,
    count: u64,
}

/// What the servers answered one attempt so far.
struct Tally {
    /// Raw replies, turned into `ServerOutcome`s (with strings) only for an error.
    replies: Vec<Option<Result<AcquireReply, Error>>>,
    granted: Vec<Grant>,
    /// The remaining leases of the servers where another owner holds it.
    held: Vec<Option<Duration>>,
    failed: usize,
}

impl Tally {
    fn count(&mut self, server: usize, reply: Result<AcquireReply, Error>) {
        match &reply {
            Ok(AcquireReply::Acquired { token, count }) => self.granted.push(Grant {
                server,
                token: *token,
                count: *count,
            }),
            Ok(AcquireReply::Held { remaining, .. }) => self.held.push(*remaining),
            Err(_) => self.failed += 1,
        }
        self.replies[server] = Some(reply);
    }

    /// Whether the attempt is decided. Fresh grants beside re-entries wait for the other
    /// servers: one server's grant of the first entry may still be on its way (this request
    /// overtook it), and deciding which holding this is needs the others (`holding_token`).
    fn decided(&self, quorum: usize, n: usize) -> bool {
        let reentries = self.granted.iter().filter(|g| g.count > 1).count();
        let mixed = reentries > 0 && reentries < self.granted.len() && reentries < quorum;
        let against = self.held.len() + self.failed;
        (self.granted.len() >= quorum && !mixed) || against > n - quorum
    }
}

/// What the servers answered a release so far.
#[derive(Default)]
struct ReleaseTally {
    answered: usize,
    /// Servers that still had the hold (and gave it back, or one of its re-entries).
    held: usize,
    still_held: u64,
    failed: Vec<ServerOutcome>,
}

impl ReleaseTally {
    fn count(&mut self, server: &str, result: Result<Released, Error>) {
        self.answered += 1;
        match result {
            Ok(Released::Released) => self.held += 1,
            Ok(Released::StillHeld { count }) => {
                self.held += 1;
                self.still_held = self.still_held.max(count);
            }
            Ok(_) => {}
            Err(e) => self.failed.push(ServerOutcome::Failed {
                server: server.to_owned(),
                error: e.to_string(),
            }),
        }
    }

    fn answers(&self) -> usize {
        self.answered - self.failed.len()
    }

    /// Decided once a majority gave the hold back, or once no majority can have held it.
    fn decided(&self, n: usize, quorum: usize) -> bool {
        let out_of_reach = self.held + (n - self.answered) < quorum;
        self.held >= quorum || (out_of_reach && self.answers() >= quorum)
    }

    /// The release's result, or each failure when too few servers answered. A hold found on
    /// fewer than a majority was lost before this release (its lease ran out on the others,
    /// and another owner may have held a majority since): `NotHeld`, though its last copies
    /// are deleted all the same.
    fn released(self, quorum: usize) -> Result<Released, Vec<ServerOutcome>> {
        if self.held >= quorum {
            Ok(if self.still_held > 0 {
                Released::StillHeld {
                    count: self.still_held,
                }
            } else {
                Released::Released
            })
        } else if self.answers() >= quorum {
            Ok(Released::NotHeld)
        } else {
            Err(self.failed)
        }
    }
}

/// The holding's token: the one a majority of the servers holding the lock agree on (it was
/// written back to a majority before the acquisition counted). A server whose grant came
/// after the majority's may have issued a higher one; without a majority, the highest.
fn agreed_token(held: &[&RawStatus], quorum: usize) -> Option<u64> {
    let tokens: Vec<u64> = held.iter().filter_map(|v| v.current_token).collect();
    let agreed = tokens
        .iter()
        .copied()
        .filter(|t| tokens.iter().filter(|u| *u == t).count() >= quorum)
        .max();
    agreed.or_else(|| tokens.iter().copied().max())
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl RedLock {
    /// Connects to every server. A majority must answer now; the others get connections
    /// that are retried on every request (a server that is down when a cron job starts must
    /// not stop it while a majority is up).
    pub(crate) async fn connect(
        urls: &[&str],
        options: &ClientOptions,
        sink: Weak<dyn ReleaseSink>,
        background: Background,
    ) -> Result<(Self, Vec<Warning>), Error> {
        // Every URL is read before any server is reached (a malformed one is an input error,
        // not something found after waiting for the others to connect), and no two may reach
        // the same server.
        super::distinct::check_distinct(urls, options.connect_timeout).await?;
        let dedup = Arc::new(DedupSink {
            inner: sink,
            recent: Mutex::new(Default::default()),
        });
        let weak: Weak<dyn ReleaseSink> = Arc::downgrade(&dedup) as Weak<dyn ReleaseSink>;
        let connecting = urls
            .iter()
            .map(|url| RedisBackend::connect(url, options, weak.clone()));
        let mut servers = Vec::with_capacity(urls.len());
        let mut warnings = Vec::new();
        let mut outcomes = Vec::new();
        for (url, result) in urls
            .iter()
            .zip(futures_util::future::join_all(connecting).await)
        {
            match result {
                Ok((server, w)) => {
                    servers.push(Arc::new(server));
                    warnings.extend(w);
                }
                Err(e @ Error::InvalidInput(_)) => return Err(e),
                Err(e) => {
                    let server = RedisBackend::lazy(url, options, weak.clone())?;
                    warnings.push(Warning::ServerUnavailable {
                        server: server.server().to_owned(),
                        error: e.to_string(),
                    });
                    outcomes.push(ServerOutcome::Failed {
                        server: server.server().to_owned(),
                        error: e.to_string(),
                    });
                    servers.push(Arc::new(server));
                }
            }
        }
        let quorum = servers.len() / 2 + 1;
        if servers.len() - outcomes.len() < quorum {
            return Err(Error::Quorum {
                lock: None,
                operation: "connect",
                needed: quorum,
                source: Box::new(Outcomes(outcomes)),
            });
        }
        for w in &warnings {
            tracing::warn!("{w}");
        }
        Ok((
            Self {
                servers,
                background,
                quorum,
                highest: AtomicU64::new(0),
                late: Arc::default(),
                serials: Arc::default(),
                _sink: dedup,
            },
            warnings,
        ))
    }

    pub(crate) fn servers(&self) -> String {
        let names: Vec<&str> = self.servers.iter().map(|s| s.server()).collect();
        names.join(",")
    }

    fn quorum_error(
        &self,
        keys: Option<&LockKeys>,
        what: &'static str,
        outcomes: Vec<ServerOutcome>,
    ) -> Error {
        Error::Quorum {
            lock: keys.map(|k| k.name().to_owned()),
            operation: what,
            needed: self.quorum,
            source: Box::new(Outcomes(outcomes)),
        }
    }

    /// Sends `request` to every server at once; the futures own what they use, so that the
    /// ones still in flight when the caller has decided can be finished in the background.
    fn fan_out<T, F, Fut>(&self, request: F) -> FuturesUnordered<BoxFuture<(usize, T)>>
    where
        F: Fn(usize, Arc<RedisBackend>) -> Fut,
        Fut: std::future::Future<Output = T> + Send + 'static,
    {
        self.servers
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let fut = request(i, s.clone());
                Box::pin(async move { (i, fut.await) }) as BoxFuture<(usize, T)>
            })
            .collect()
    }

    /// Lets the requests not yet answered run to their end in the background.
    fn finish<T: Send + 'static>(&self, pending: FuturesUnordered<BoxFuture<T>>) {
        if !pending.is_empty() {
            self.background.finish(async move {
                pending.for_each(|_| async {}).await;
            });
        }
    }

    /// What server `i` answered an acquire, for an error.
    fn outcome(&self, i: usize, reply: Option<Result<AcquireReply, Error>>) -> ServerOutcome {
        let server = self.servers[i].server().to_owned();
        match reply {
            Some(Ok(AcquireReply::Acquired { token, .. })) => {
                ServerOutcome::Granted { server, token }
            }
            Some(Ok(AcquireReply::Held { remaining, .. })) => {
                ServerOutcome::Held { server, remaining }
            }
            Some(Err(e)) => ServerOutcome::Failed {
                server,
                error: e.to_string(),
            },
            None => ServerOutcome::NoReply { server },
        }
    }

    /// One RedLock attempt (RedLock servers keep no wait queue).
    pub(crate) async fn acquire(&self, attempt: &Attempt) -> Result<AcquireReply, Error> {
        let highest = self.highest.load(Ordering::Relaxed);
        let proposal = now_micros().max(highest.saturating_add(1));
        let tally = self.collect(attempt, proposal).await;
        if tally.granted.len() < self.quorum {
            return self.refused(&attempt.keys, tally);
        }
        let (token, reentry) = self.holding_token(&tally, proposal);
        if !reentry && !self.on_majority(attempt, &tally, token).await {
            return Ok(AcquireReply::Held {
                remaining: Some(backoff()),
                undo: true,
                queued: false,
            });
        }
        if Instant::now() >= attempt.valid_until {
            // A majority granted it, but too late to be of use.
            tracing::debug!(lock = %attempt.keys.name(), "RedLock majority reached without validity left");
            return Ok(AcquireReply::Held {
                remaining: Some(Duration::ZERO),
                undo: true,
                queued: false,
            });
        }
        self.highest.fetch_max(token, Ordering::Relaxed);
        let count = tally.granted.iter().map(|g| g.count).max().unwrap_or(1);
        Ok(AcquireReply::Acquired { token, count })
    }

    /// Sends the attempt to every server and gathers answers until it is decided. Requests
    /// still in flight then run on in the background: an undo sent later is queued behind
    /// them on the same connection, so a late grant is removed too.
    async fn collect(&self, attempt: &Attempt, proposal: u64) -> Tally {
        let n = self.servers.len();
        let mut pending = self.fan_out(|_, s| {
            let attempt = Attempt {
                queueing: Queueing::default(),
                ..attempt.clone()
            };
            async move { s.acquire(&attempt, Some(proposal)).await }
        });
        let mut tally = Tally {
            replies: (0..n).map(|_| None).collect(),
            granted: Vec::new(),
            held: Vec::new(),
            failed: 0,
        };
        while let Some((i, reply)) = pending.next().await {
            tally.count(i, reply);
            if tally.decided(self.quorum, n) {
                break;
            }
        }
        self.finish_late(attempt.id, &tally, pending);
        tally
    }

    /// Lets the acquire requests of attempt `id` not yet answered run to their end in the
    /// background, noted in `late` until they end (see [`LateGrants`]).
    fn finish_late(
        &self,
        id: u64,
        tally: &Tally,
        mut pending: FuturesUnordered<BoxFuture<(usize, Result<AcquireReply, Error>)>>,
    ) {
        if pending.is_empty() {
            return;
        }
        let mut under_way: Vec<UnderWay> = (tally.replies.iter().enumerate())
            .filter(|(_, reply)| reply.is_none())
            .map(|(i, _)| self.late.note(id, i))
            .collect();
        self.background.finish(async move {
            while let Some((i, _)) = pending.next().await {
                under_way.retain(|u| u.key.1 != i);
            }
        });
    }

    /// No majority granted: held elsewhere (wait for a release), too many failures (an error
    /// naming each server), or a split with competitors (back off and try again).
    fn refused(&self, keys: &LockKeys, mut tally: Tally) -> Result<AcquireReply, Error> {
        let n = self.servers.len();
        let unanswered = tally.replies.iter().any(Option::is_none);
        let undo = !tally.granted.is_empty() || tally.failed > 0 || unanswered;
        if tally.held.len() >= self.quorum {
            // Held elsewhere on a majority: wait for a release, at most the shortest lease.
            tally.held.sort();
            return Ok(AcquireReply::Held {
                remaining: tally.held[0],
                undo,
                queued: false,
            });
        }
        if tally.failed > n - self.quorum {
            let outcomes = std::mem::take(&mut tally.replies)
                .into_iter()
                .enumerate()
                .map(|(i, reply)| self.outcome(i, reply))
                .collect();
            return Err(self.quorum_error(Some(keys), "acquire", outcomes));
        }
        Ok(AcquireReply::Held {
            remaining: Some(backoff()),
            undo,
            queued: false,
        })
    }

    /// The holding's token, and whether this is a re-entry. A re-entry on a majority keeps
    /// the token of the holding the owner already has: a server that granted afresh instead
    /// (its grant of the first entry was still on its way, and this request overtook it) must
    /// not change it, since the holding's token is already on a majority.
    fn holding_token(&self, tally: &Tally, proposal: u64) -> (u64, bool) {
        let reentries: Vec<u64> = tally
            .granted
            .iter()
            .filter(|g| g.count > 1)
            .map(|g| g.token)
            .collect();
        if reentries.len() >= self.quorum {
            return (reentries.iter().copied().max().unwrap_or(proposal), true);
        }
        let highest = tally.granted.iter().map(|g| g.token).max();
        (highest.unwrap_or(proposal), false)
    }

    /// Puts `token` on a majority of counters (the granting servers that issued less) before
    /// the acquisition counts; false when that failed.
    async fn on_majority(&self, attempt: &Attempt, tally: &Tally, token: u64) -> bool {
        let agreeing = tally.granted.iter().filter(|g| g.token == token).count();
        if agreeing >= self.quorum {
            return true;
        }
        let mut raising: FuturesUnordered<_> = tally
            .granted
            .iter()
            .filter(|g| g.token < token)
            .map(|g| {
                let s = self.servers[g.server].clone();
                let (keys, owner) = (attempt.keys.clone(), attempt.owner.clone());
                Box::pin(async move { s.raise_fence(&keys, &owner, token).await })
                    as BoxFuture<Result<(), Error>>
            })
            .collect();
        let mut on_majority = agreeing;
        while on_majority < self.quorum {
            match raising.next().await {
                Some(Ok(())) => on_majority += 1,
                Some(Err(_)) => {}
                None => break,
            }
        }
        self.finish(raising);
        on_majority >= self.quorum
    }

    /// Releases on every server (also those that never answered the acquire).
    pub(crate) async fn release(
        &self,
        keys: &LockKeys,
        owner: &Arc<str>,
        hold: Option<u64>,
    ) -> Result<Released, Error> {
        // After a heal of the hold under way, never before it (see `Serials`).
        let _serial = match hold {
            Some(id) => Some(self.serials.lock(id).await),
            None => None,
        };
        // One message for all servers, so that waiters can drop the copies.
        let message: Arc<str> = format!("{owner}#{:x}", rand::random::<u64>()).into();
        let mut pending = self.fan_out(|i, s| {
            let (keys, owner, message) = (keys.clone(), owner.clone(), message.clone());
            // After the hold's own acquire request, if it is still under way there.
            let late = hold.and_then(|id| self.late.wait(id, i));
            async move {
                if let Some(late) = late {
                    late.await;
                }
                s.release(&keys, &owner, hold, Some(&message)).await
            }
        });
        let mut tally = ReleaseTally::default();
        while let Some((i, result)) = pending.next().await {
            tally.count(self.servers[i].server(), result);
            // Decided: the rest runs on in the background (a paused server runs it when it
            // resumes).
            if tally.decided(self.servers.len(), self.quorum) {
                break;
            }
        }
        // A straggler that fails may leave the lock on its server: `Client::close` says so.
        if !pending.is_empty() {
            let background = self.background.clone();
            self.background.finish(async move {
                pending
                    .for_each(|(_, result)| {
                        if result.is_err() {
                            background.failed();
                        }
                        async {}
                    })
                    .await;
            });
        }
        tally
            .released(self.quorum)
            .map_err(|outcomes| self.quorum_error(Some(keys), "release", outcomes))
    }

    /// Renews on every server; a lease counts as renewed once a majority renewed it.
    /// `lease_ms`: the lease to ask for, else each hold's own.
    pub(crate) async fn renew_batch(
        &self,
        items: Vec<RenewItem>,
        lease_ms: Option<u64>,
    ) -> Result<Vec<Result<Renewal, Error>>, Error> {
        let n = self.servers.len();
        let items = Arc::new(items);
        let mut pending = self.fan_out(|_, s| {
            let items = items.clone();
            async move { s.renew_batch(&items, lease_ms).await }
        });
        let mut renewed = vec![0usize; items.len()];
        let mut against = vec![0usize; items.len()];
        let mut errors: Vec<Option<String>> = vec![None; items.len()];
        // (server, lease) pairs where the server no longer has the lock.
        let mut missing: Vec<(usize, usize)> = Vec::new();
        let decided = |renewed: &[usize], against: &[usize]| {
            renewed
                .iter()
                .zip(against)
                .all(|(r, a)| *r >= self.quorum || *a > n - self.quorum)
        };
        while let Some((i, result)) = pending.next().await {
            match result {
                Ok(each) => {
                    for (j, r) in each.into_iter().enumerate() {
                        match r {
                            Ok(Renewal::Renewed) => renewed[j] += 1,
                            Ok(Renewal::NotHeld) => {
                                against[j] += 1;
                                missing.push((i, j));
                            }
                            Err(e) => {
                                against[j] += 1;
                                errors[j] = Some(e.to_string());
                            }
                        }
                    }
                }
                Err(e) => {
                    for (a, err) in against.iter_mut().zip(errors.iter_mut()) {
                        *a += 1;
                        *err = Some(e.to_string());
                    }
                }
            }
            if decided(&renewed, &against) {
                break;
            }
        }
        self.finish(pending);
        self.heal(&items, &renewed, missing);
        Ok(renewed
            .iter()
            .zip(errors)
            .zip(items.iter())
            .map(|((&r, error), hold)| {
                if r >= self.quorum {
                    Ok(Renewal::Renewed)
                } else if let Some(error) = error {
                    // Unsure: the watchdog retries until the deadline.
                    Err(Error::Unavailable {
                        lock: Some(hold.hold.lock.name.clone()),
                        server: self.servers(),
                        detail: format!("renewal reached {r} of {n} servers: {error}"),
                    })
                } else {
                    Ok(Renewal::NotHeld)
                }
            })
            .collect())
    }

    /// A hold renewed on a majority but missing on some server (it restarted empty, or its
    /// copy expired) is taken again there, in the background, with the holding's token.
    /// Otherwise servers restarting one after another would wear a long-held lock down below
    /// a majority. Safe: no one else can hold a majority meanwhile, and where the key is held
    /// by another owner the acquire just reports it held. The heal runs under the hold's
    /// serial lock (`Serials`) and only while the hold is live; its release takes that lock too, so a
    /// heal never lands on a server after the release (and leaves a grant nobody keeps).
    fn heal(&self, items: &Arc<Vec<RenewItem>>, renewed: &[usize], missing: Vec<(usize, usize)>) {
        for (i, j) in missing {
            if renewed[j] < self.quorum {
                continue;
            }
            let lease = items[j].clone();
            let server = self.servers[i].clone();
            tracing::debug!(lock = %lease.hold.lock.name, server = %server.server(), "re-taking a lock a server lost");
            let serials = self.serials.clone();
            self.background.finish(async move {
                let _serial = serials.lock(lease.hold.id).await;
                if lease.is_finished() {
                    return;
                }
                let hold = &lease.hold;
                let attempt = Attempt {
                    keys: LockKeys::of(&hold.lock),
                    owner: hold.owner.clone(),
                    lease_ms: hold.lease.as_millis() as u64,
                    id: hold.id,
                    valid_until: Instant::now(),
                    acks: None,
                    queueing: Queueing::default(),
                    listener: None,
                    abandoned: Vec::new(),
                    value: None,
                    shape: None,
                };
                let _ = server.acquire(&attempt, Some(hold.token)).await;
            });
        }
    }

    /// The majority's view of a lock.
    pub(crate) async fn status(&self, keys: &LockKeys) -> Result<RawStatus, Error> {
        let results =
            futures_util::future::join_all(self.servers.iter().map(|s| s.status(keys))).await;
        let mut views = Vec::new();
        let mut outcomes = Vec::new();
        for (s, r) in self.servers.iter().zip(results) {
            match r {
                Ok(v) => views.push(v),
                Err(e) => outcomes.push(ServerOutcome::Failed {
                    server: s.server().to_owned(),
                    error: e.to_string(),
                }),
            }
        }
        if views.len() < self.quorum {
            return Err(self.quorum_error(Some(keys), "status", outcomes));
        }
        let held: Vec<&RawStatus> = views.iter().filter(|v| v.held).collect();
        let last_token = views.iter().filter_map(|v| v.last_token).max();
        if held.len() < self.quorum {
            // RedLock keeps no queue on the servers.
            let mut free = RawStatus::free();
            free.last_token = last_token;
            return Ok(free);
        }
        let mut remaining: Vec<Option<Duration>> = held.iter().map(|v| v.remaining).collect();
        remaining.sort();
        // The lease the majority still agrees on.
        let lease = remaining[remaining.len() + 1 - self.quorum.min(remaining.len())..]
            .first()
            .copied()
            .flatten();
        let token = agreed_token(&held, self.quorum);
        // RedLock offers the mutex alone; its holder as the first server that has it says,
        // with the majority's token and lease.
        let mut holders = held[0].holders.clone();
        for h in &mut holders {
            h.token = token;
            h.remaining_lease = lease;
            h.since = h.since.filter(|_| token == held[0].current_token);
        }
        let mut status = RawStatus::free();
        status.remaining = lease;
        status.held = true;
        status.last_token = last_token;
        status.current_token = token;
        status.owners = held[0].owners.clone();
        status.kind = Some(crate::status::LockKind::Mutex);
        status.holders = holders;
        Ok(status)
    }

    /// Deletes the lock on every server.
    pub(crate) async fn force_unlock(&self, keys: &LockKeys) -> Result<Vec<(String, u64)>, Error> {
        self.on_every_server(keys, None).await
    }

    /// Removes `owner`'s holding on every server.
    pub(crate) async fn force_unlock_holder(
        &self,
        keys: &LockKeys,
        owner: &str,
    ) -> Result<Vec<(String, u64)>, Error> {
        self.on_every_server(keys, Some(owner)).await
    }

    /// A listing: refused, since no one server has every lock.
    pub(crate) async fn list(&self, _cursor: Option<&str>) -> Result<crate::backend::Page, Error> {
        Err(Error::Unsupported {
            service: "Redis",
            what: "listing every lock with RedLock",
            why: "each RedLock server keeps its own keys and a lock is held on a majority; \
                  list each server with its own redis:// URL",
        })
    }

    /// Deletes the lock (or `owner`'s holding of it) on every server.
    async fn on_every_server(
        &self,
        keys: &LockKeys,
        owner: Option<&str>,
    ) -> Result<Vec<(String, u64)>, Error> {
        let results = futures_util::future::join_all(self.servers.iter().map(|s| async move {
            match owner {
                Some(owner) => s.force_unlock_holder(keys, owner).await,
                None => s.force_unlock(keys).await,
            }
        }))
        .await;
        let mut removed = Vec::new();
        let mut outcomes = Vec::new();
        for (s, r) in self.servers.iter().zip(results) {
            match r {
                Ok(owners) => {
                    for o in owners {
                        if !removed.contains(&o) {
                            removed.push(o);
                        }
                    }
                }
                Err(e) => outcomes.push(ServerOutcome::Failed {
                    server: s.server().to_owned(),
                    error: e.to_string(),
                }),
            }
        }
        if self.servers.len() - outcomes.len() < self.quorum {
            return Err(self.quorum_error(Some(keys), "force-unlock", outcomes));
        }
        Ok(removed)
    }

    /// Subscribes on every server: a release on any of them wakes the waiters. Succeeds when a
    /// majority subscribed (waits are bounded by leases anyway).
    pub(crate) async fn subscribe(&self, channels: &[String]) -> Result<(), Error> {
        let results =
            futures_util::future::join_all(self.servers.iter().map(|s| s.subscribe(channels)))
                .await;
        self.majority_ok("subscribe", results)
    }

    pub(crate) async fn unsubscribe(&self, channels: &[String]) -> Result<(), Error> {
        let results =
            futures_util::future::join_all(self.servers.iter().map(|s| s.unsubscribe(channels)))
                .await;
        self.majority_ok("unsubscribe", results)
    }

    fn majority_ok(
        &self,
        what: &'static str,
        results: Vec<Result<(), Error>>,
    ) -> Result<(), Error> {
        let outcomes: Vec<ServerOutcome> = self
            .servers
            .iter()
            .zip(results)
            .filter_map(|(s, r)| {
                r.err().map(|e| ServerOutcome::Failed {
                    server: s.server().to_owned(),
                    error: e.to_string(),
                })
            })
            .collect();
        if self.servers.len() - outcomes.len() >= self.quorum {
            Ok(())
        } else {
            Err(self.quorum_error(None, what, outcomes))
        }
    }
}
