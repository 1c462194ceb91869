//! A Redis deployment that acts as one server for a lock (single server, Sentinel-managed
//! master, or Cluster): the lock and election operations. How requests are sent (routing to
//! the master, NOSCRIPT, time bounds, resending) is in `exec`; the scripts, their arguments
//! and the parsing of their replies are in `scripts`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::{RedisError, Value};

use super::terms::{AcquireReply, Attempt, ReleaseSink, ReplicaAcks, Shape};
use crate::backend::redis::keys::{LockKeys, CLIENT_CHANNELS};
use crate::backend::{Leader, RawStatus, Released};
use crate::error::{Error, Warning};
use crate::lease::{LeaseState, Renewal};
use crate::options::ClientOptions;

use super::conn::{ClusterConn, Node, SentinelConn};
use super::url;
use crate::redact::redact_url;

mod exec;
mod failover;
mod listing;
mod scripts;

use exec::{Conn, Lent, Master, Resend};
use scripts::{evalsha, hold_count, renewal, scripts, Lua, Refusal};

/// One Redis deployment that behaves as one server for a lock: a single server, the master
/// of a Sentinel set, or a Redis Cluster (each lock lives in one slot).
pub(crate) struct RedisBackend {
    conn: Conn,
    server: String,
    request_bound: Duration,
    /// How long a lock's fencing counter lives after its last token, in ms (as an argument).
    horizon_ms: u64,
}

impl RedisBackend {
    /// A backend for one plain server whose connections are made on first use (a RedLock
    /// server that was down when the client started). Its eviction policy is not checked.
    pub(crate) fn lazy(
        url: &str,
        options: &ClientOptions,
        sink: Weak<dyn ReleaseSink>,
    ) -> Result<Self, Error> {
        let url::Target::Single(info) = url::parse_target(url)? else {
            return Err(crate::error::InputError::InvalidUrl {
                url: redact_url(url),
                reason: "RedLock servers must be plain redis:// servers".into(),
            }
            .into());
        };
        let node = Node::lazy(with_password(info, options), options, sink).map_err(|e| {
            Error::Unavailable {
                lock: None,
                server: redact_url(url),
                detail: e.to_string(),
            }
        })?;
        Ok(Self {
            server: node.server.clone(),
            conn: Conn::Master(Master::Plain(Arc::new(node))),
            request_bound: options.request_bound(),
            horizon_ms: options.fence_horizon_or_default().as_millis() as u64,
        })
    }

    /// Connects the command and the subscriber connection, and checks the eviction policy.
    /// Returns the backend and the warnings found on connect.
    pub(crate) async fn connect(
        url: &str,
        options: &ClientOptions,
        sink: Weak<dyn ReleaseSink>,
    ) -> Result<(Self, Vec<Warning>), Error> {
        let target = url::parse_target(url)?;
        let bound = options.request_bound();
        let display = redact_url(url);
        let connect = async {
            Ok::<_, RedisError>(match target {
                url::Target::Single(info) => {
                    let node = Node::connect(with_password(info, options), options, sink).await?;
                    Conn::Master(Master::Plain(Arc::new(node)))
                }
                url::Target::Cluster(nodes) => Conn::Cluster(Box::new(
                    ClusterConn::connect(
                        nodes
                            .into_iter()
                            .map(|n| with_password(n, options))
                            .collect(),
                        options,
                        sink,
                    )
                    .await?,
                )),
                url::Target::Sentinel {
                    sentinels,
                    master,
                    node,
                } => {
                    let node = password_settings(node, options);
                    let sentinel =
                        SentinelConn::connect(sentinels, &master, node, options, sink).await?;
                    Conn::Master(Master::Sentinel(Box::new(sentinel)))
                }
            })
        };
        let conn = tokio::time::timeout(bound, connect)
            .await
            .map_err(|_| Error::Unavailable {
                lock: None,
                server: display.clone(),
                detail: format!("no connection within {bound:?}"),
            })?
            .map_err(|e| {
                let (server, detail) = (display.clone(), e.to_string());
                if exec::denied(&e) {
                    Error::Denied {
                        lock: None,
                        server,
                        detail,
                    }
                } else {
                    Error::Unavailable {
                        lock: None,
                        server,
                        detail,
                    }
                }
            })?;
        let server = match &conn {
            Conn::Master(Master::Plain(node)) => node.server.clone(),
            Conn::Master(Master::Sentinel(s)) => s.name.clone(),
            Conn::Cluster(c) => c.name.clone(),
        };
        let backend = Self {
            conn,
            server,
            request_bound: bound,
            horizon_ms: options.fence_horizon_or_default().as_millis() as u64,
        };
        let warnings = backend.check_eviction_policy().await?;
        backend.preload_scripts().await;
        Ok((backend, warnings))
    }

    /// Loads the scripts at connect (one pipelined round trip), so that a request rarely
    /// meets NOSCRIPT: its second step (load, send again) could otherwise be cut off by a
    /// response timeout while the server stalls, and an undo or release queued behind a late
    /// grant would then never run. Best effort: a server that refuses `SCRIPT` still works
    /// (NOSCRIPT is handled on every request). A Cluster loads per node on first use.
    async fn preload_scripts(&self) {
        if let Conn::Cluster(_) = self.conn {
            return;
        }
        let s = scripts();
        let all = [
            &s.acquire,
            &s.release,
            &s.extend,
            &s.status,
            &s.force_unlock,
            &s.raise_fence,
            &s.leader,
            &s.proclaim,
            &s.family_acquire,
        ];
        let loads = all.iter().map(|script| self.load(None, script));
        for result in futures_util::future::join_all(loads).await {
            if let Err(e) = result {
                tracing::debug!(server = %self.server, error = %e, "preloading a script failed");
            }
        }
    }

    /// `host:port` of the server, for errors and logs.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// Any `maxmemory-policy` but `noeviction` may evict lock keys (volatile-* too: lock keys
    /// have TTLs). Servers with `CONFIG` disabled or renamed are skipped quietly.
    async fn check_eviction_policy(&self) -> Result<Vec<Warning>, Error> {
        let mut config = redis::cmd("CONFIG");
        config.arg("GET").arg("maxmemory-policy");
        // A map on RESP3 (a flat list on RESP2).
        let reply: Result<std::collections::HashMap<String, String>, RedisError> =
            self.query(None, Resend::Safe, &config).await?;
        let Ok(pair) = reply else {
            return Ok(Vec::new());
        };
        match pair.get("maxmemory-policy").map(String::as_str) {
            Some("noeviction") | None => Ok(Vec::new()),
            Some(policy) => {
                let warning = Warning::EvictionPolicy {
                    server: self.server.clone(),
                    policy: policy.to_owned(),
                };
                tracing::warn!(server = %self.server, policy, "{warning}");
                Ok(vec![warning])
            }
        }
    }

    /// One acquire attempt; `proposal`: the token RedLock proposes (else the server's clock).
    pub(crate) async fn acquire(
        &self,
        attempt: &Attempt,
        proposal: Option<u64>,
    ) -> Result<AcquireReply, Error> {
        let keys = &attempt.keys;
        let before = self.before_acquire(attempt).await?;
        let (script, call) = match attempt.shape {
            Some(shape) => (
                &scripts().family_acquire,
                self.family_call(attempt, shape, &before.stale),
            ),
            None => (
                &scripts().acquire,
                self.acquire_call(attempt, proposal, &before.stale),
            ),
        };
        let queued = attempt.queueing.join.is_some();
        match attempt.acks {
            None => {
                let reply: Vec<Value> = self.run(keys, script, &call).await?;
                self.after_acquire(attempt, &before).await;
                self.parse_acquire(attempt, &reply, queued)
            }
            Some(acks) => {
                let (reply, lent): (Vec<Value>, _) = self.run_on_lent(keys, script, &call).await?;
                self.after_acquire(attempt, &before).await;
                let reply = self.parse_acquire(attempt, &reply, queued)?;
                if !matches!(reply, AcquireReply::Acquired { .. }) {
                    lent.give_back(self);
                    return Ok(reply);
                }
                // Boxed: rare, and its future (kilobytes) would otherwise be part of every
                // acquire's.
                Box::pin(self.await_replicas(keys, lent, acks, &attempt.owner, attempt.id)).await?;
                Ok(reply)
            }
        }
    }

    /// The acquire script's call. Trailing arguments the script does not need are left out:
    /// every one costs the server. They are given only when queueing or giving attempts back
    /// (`attempt.abandoned`, and `stale`: see `before_acquire`).
    fn acquire_call(&self, attempt: &Attempt, proposal: Option<u64>, stale: &[u64]) -> redis::Cmd {
        let keys = &attempt.keys;
        let queueing = attempt.queueing;
        // An election's participant always gives its value (after ARGV[10], before the
        // attempts given back: acquire.lua's ARGV[11], marked by a leading '=').
        let full = queueing.join.is_some()
            || queueing.claim.is_some()
            || !attempt.abandoned.is_empty()
            || !stale.is_empty()
            || attempt.value.is_some();
        // The queue's keys always: a free lock whose queue has places is marked for a handover.
        let mut call = evalsha(&scripts().acquire, 4);
        call.arg(keys.lock())
            .arg(keys.fence())
            .arg(keys.queue())
            .arg(keys.waiting());
        call.arg(&*attempt.owner)
            .arg(attempt.lease_ms)
            .arg(attempt.id)
            .arg(self.horizon_ms);
        if proposal.is_some() || full {
            call.arg(proposal.map(|t| t.to_string()).unwrap_or_default());
        }
        if full {
            let window = queueing.join.map(|w| w.as_millis().to_string());
            call.arg(window.unwrap_or_default())
                .arg(queueing.claim.map(|c| c.to_string()).unwrap_or_default())
                .arg(keys.channel())
                .arg(self.publish_mode())
                .arg(attempt.listener.as_deref().unwrap_or(""));
            if let Some(value) = &attempt.value {
                call.arg(Elected(value));
            }
            call.arg(&attempt.abandoned[..]).arg(stale);
        }
        call
    }

    /// `WAIT` on the lent connection that just wrote the lock, until `acks.replicas` replicas
    /// have it (WAIT counts the writes of the connection it is sent on, and blocks it
    /// meanwhile; see `conn::Spare`). Not replicated in time: the hold `hold` is given back
    /// and the caller gets [`Error::ReplicaAcks`].
    async fn await_replicas(
        &self,
        keys: &LockKeys,
        lent: Lent,
        acks: ReplicaAcks,
        owner: &str,
        hold: u64,
    ) -> Result<(), Error> {
        let mut lent = lent;
        let mut wait = redis::cmd("WAIT");
        wait.arg(acks.replicas).arg(acks.timeout.as_millis() as u64);
        let bound = acks.timeout + self.request_bound;
        let acked = self
            .bounded_for(bound, Some(keys), lent.query(keys, wait))
            .await?
            .map_err(|e| self.error(Some(keys), e))?;
        lent.give_back(self);
        if acked >= i64::from(acks.replicas) {
            return Ok(());
        }
        // Not replicated in time: a failover now could lose it. Give it back.
        let _ = self.release(keys, owner, Some(hold), None).await;
        Err(Error::ReplicaAcks {
            lock: keys.name().to_owned(),
            server: self.server.clone(),
            acked: acked.max(0) as u32,
            needed: acks.replicas,
            timeout: acks.timeout,
        })
    }

    /// The family acquire script's call (family_acquire.lua): the short call (6 arguments)
    /// for an attempt that neither queues, claims nor gives anything back, else all of them.
    fn family_call(&self, attempt: &Attempt, shape: Shape, stale: &[u64]) -> redis::Cmd {
        let keys = &attempt.keys;
        let queueing = attempt.queueing;
        let mut call = evalsha(&scripts().family_acquire, 4);
        call.arg(keys.lock())
            .arg(keys.fence())
            .arg(keys.queue())
            .arg(keys.waiting());
        call.arg(&*attempt.owner)
            .arg(attempt.lease_ms)
            .arg(attempt.id)
            .arg(self.horizon_ms)
            .arg(shape.arg());
        let short = queueing.join.is_none()
            && queueing.claim.is_none()
            && attempt.abandoned.is_empty()
            && stale.is_empty();
        if short {
            // family_acquire.lua's short call: the publish mode alone after ARGV[5].
            call.arg(self.publish_mode());
            return call;
        }
        let window = queueing.join.map(|w| w.as_millis().to_string());
        call.arg(window.unwrap_or_default())
            .arg(queueing.claim.map(|c| c.to_string()).unwrap_or_default())
            .arg(keys.channel())
            .arg(self.publish_mode())
            .arg(attempt.listener.as_deref().unwrap_or(""));
        call.arg(&attempt.abandoned[..]).arg(stale);
        call
    }

    /// An acquire script's reply: a grant, the holder's lease, or a refusal (typed errors:
    /// another primitive, another N, an upgrade).
    fn parse_acquire(
        &self,
        attempt: &Attempt,
        reply: &[Value],
        queued: bool,
    ) -> Result<AcquireReply, Error> {
        let keys = &attempt.keys;
        let lock = || keys.name().to_owned();
        match scripts::parse_refusal(reply) {
            Some(Refusal::Kind(found)) => {
                let asked = match (attempt.shape, &attempt.value) {
                    (Some(shape), _) => shape.word(),
                    (None, Some(_)) => "election",
                    (None, None) => "mutex",
                };
                return Err(Error::PrimitiveMismatch {
                    lock: lock(),
                    asked,
                    found: scripts::primitive_word(&found).to_owned(),
                    server: self.server.clone(),
                });
            }
            Some(Refusal::Permits(stored)) => {
                let asked = match attempt.shape {
                    Some(Shape::Permit { permits, .. }) => permits,
                    _ => 0,
                };
                return Err(Error::PermitsMismatch {
                    lock: lock(),
                    stored,
                    asked,
                });
            }
            Some(Refusal::Upgrade) => {
                return Err(Error::UpgradeRefused {
                    lock: lock(),
                    owner: attempt.owner.to_string(),
                })
            }
            None => {}
        }
        scripts::parse_acquire(reply, queued).map_err(|detail| self.protocol(keys, &detail))
    }

    /// Gives back the hold taken by attempt `hold` (and the place it took in the queue), or
    /// with `None` the owner's newest hold.
    pub(crate) async fn release(
        &self,
        keys: &LockKeys,
        owner: &str,
        hold: Option<u64>,
        message: Option<&str>,
    ) -> Result<Released, Error> {
        let switches = self.switches();
        let released = self.release_call(keys, owner, hold, message).await?;
        if let (Some(id), Released::Released | Released::StillHeld { .. }) = (hold, &released) {
            self.after_release(keys, owner, id, switches);
        }
        Ok(released)
    }

    /// The release script's call and its answer.
    async fn release_call(
        &self,
        keys: &LockKeys,
        owner: &str,
        hold: Option<u64>,
        message: Option<&str>,
    ) -> Result<Released, Error> {
        let script = &scripts().release;
        let mut call = evalsha(script, 4);
        call.arg(keys.lock())
            .arg(keys.fence())
            .arg(keys.queue())
            .arg(keys.waiting())
            .arg(owner)
            .arg(keys.channel());
        match hold {
            Some(id) => call.arg(id),
            None => call.arg(""),
        };
        call.arg(self.horizon_ms);
        // Arguments the script does not need are left out: every one costs the server.
        match (message, self.publish_mode()) {
            (None, "") => {}
            (message, mode) => {
                call.arg(message.unwrap_or("")).arg(mode);
            }
        }
        // By owner only, a release that ran twice could give back a second hold; one that
        // names its hold does nothing the second time (and then answers NotHeld).
        let resend = match hold {
            Some(_) => Resend::Safe,
            None => Resend::Never,
        };
        let left: i64 = self.run_as(resend, keys, script, &call).await?;
        Ok(match left {
            0 => Released::Released,
            n if n > 0 => Released::StillHeld { count: n as u64 },
            _ => Released::NotHeld,
        })
    }

    /// Raises the lock's fencing counter and the owner's recorded token to `token`.
    pub(crate) async fn raise_fence(
        &self,
        keys: &LockKeys,
        owner: &str,
        token: u64,
    ) -> Result<(), Error> {
        let script = &scripts().raise_fence;
        let mut call = evalsha(script, 2);
        call.arg(keys.lock())
            .arg(keys.fence())
            .arg(owner)
            .arg(token)
            .arg(self.horizon_ms);
        let _: i64 = self.run(keys, script, &call).await?;
        Ok(())
    }

    /// `'S'` when release messages go through sharded pub/sub.
    /// Whether a script can publish on the clients' own channels (not on a Redis Cluster,
    /// where such a channel lives in another slot than the lock).
    pub(crate) fn hears_clients(&self) -> bool {
        !matches!(self.conn, Conn::Cluster(_))
    }

    fn publish_mode(&self) -> &'static str {
        match self.conn {
            Conn::Cluster(_) => "S",
            _ => "",
        }
    }

    /// The extend script's call for one hold.
    fn extend_call(hold: &LeaseState, lease_ms: u64) -> redis::Cmd {
        let hold = &hold.hold;
        let mut call = evalsha(&scripts().extend, 1);
        call.arg(LockKeys::of(&hold.lock).lock())
            .arg(&*hold.owner)
            .arg(lease_ms)
            .arg(hold.id);
        call
    }

    /// Extends a hold's lease to at least `lease_ms` while the hold is live.
    pub(crate) async fn extend(&self, hold: &LeaseState, lease_ms: u64) -> Result<Renewal, Error> {
        let keys = LockKeys::of(&hold.hold.lock);
        self.note_lease(lease_ms);
        let call = Self::extend_call(hold, lease_ms);
        let ttl: i64 = self.run(&keys, &scripts().extend, &call).await?;
        Ok(renewal(ttl))
    }

    /// [`RedisBackend::extend`] on a lent connection, followed by `WAIT` until
    /// `acks.replicas` replicas have the lock: a handover was written by the releasing
    /// holder's script, and this write (the lease always grows after a handover) is what
    /// `WAIT` then counts. Not replicated in time: the hold is given back.
    pub(crate) async fn extend_replicated(
        &self,
        hold: &LeaseState,
        lease_ms: u64,
        acks: ReplicaAcks,
    ) -> Result<Renewal, Error> {
        let keys = LockKeys::of(&hold.hold.lock);
        let call = Self::extend_call(hold, lease_ms);
        let (ttl, lent): (i64, _) = self.run_on_lent(&keys, &scripts().extend, &call).await?;
        if ttl < 0 {
            lent.give_back(self);
            return Ok(Renewal::NotHeld);
        }
        let owner = &hold.hold.owner;
        Box::pin(self.await_replicas(&keys, lent, acks, owner, hold.hold.id)).await?;
        Ok(Renewal::Renewed)
    }

    /// Renews many holds: one pipelined round trip on a single server, concurrent requests
    /// on a cluster (the locks live on different nodes). The outer error means the round trip
    /// failed as a whole; inner errors are per lock (e.g. WRONGTYPE). `lease_ms`: the lease to
    /// ask for, else each hold's own.
    pub(crate) async fn renew_batch(
        &self,
        items: &[super::terms::RenewItem],
        lease_ms: Option<u64>,
    ) -> Result<Vec<Result<Renewal, Error>>, Error> {
        let lease_of = |h: &LeaseState| lease_ms.unwrap_or(h.hold.lease.as_millis() as u64);
        let master = match &self.conn {
            Conn::Master(master) => master,
            Conn::Cluster(_) => {
                let each = items.iter().map(|h| self.extend(h, lease_of(h)));
                return Ok(futures_util::future::join_all(each).await);
            }
        };
        let script = &scripts().extend;
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for hold in items {
            pipe.add_command(Self::extend_call(hold, lease_of(hold)));
        }
        let send = |node: Arc<Node>| {
            let pipe = &pipe;
            async move {
                let replies: Vec<Value> = pipe.query_async(&mut node.cmd.clone()).await?;
                // A demoted master answers each renewal READONLY: report it as the pipeline's
                // error, so that `on_master` finds the new master.
                match replies.iter().find_map(|v| match v {
                    Value::ServerError(e) if e.code() == "READONLY" => Some(e.clone()),
                    _ => None,
                }) {
                    Some(e) => Err(e.into()),
                    None => Ok(replies),
                }
            }
        };
        // Renewals may run twice: each extends to at least the lease.
        let mut replies = self
            .on_master(master, None, Resend::Safe, send)
            .await?
            .map_err(|e| self.error(None, e))?;
        let noscript = |v: &Value| matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT");
        if replies.iter().any(noscript) {
            self.load(None, script).await?;
            replies = self
                .on_master(master, None, Resend::Safe, send)
                .await?
                .map_err(|e| self.error(None, e))?;
        }
        if replies.len() != items.len() {
            return Err(Error::Protocol {
                lock: None,
                server: self.server.clone(),
                detail: format!("{} replies to {} renewals", replies.len(), items.len()),
            });
        }
        Ok(items
            .iter()
            .zip(replies)
            .map(|(hold, reply)| {
                // The keys only name the lock in an error: not derived for a renewal that
                // went through.
                let keys = || LockKeys::of(&hold.hold.lock);
                match reply {
                    Value::Int(ttl) => Ok(renewal(ttl)),
                    Value::ServerError(e) => Err(self.error(Some(&keys()), e.into())),
                    other => Err(self.protocol(&keys(), &format!("renewal replied {other:?}"))),
                }
            })
            .collect())
    }

    /// The election's leader (the lock's holder, its token and value) and how long its lease
    /// has left (`None`: no expiry), or `None` when nobody holds the lock. One script.
    pub(crate) async fn leader(
        &self,
        keys: &LockKeys,
    ) -> Result<Option<(Leader, Option<Duration>)>, Error> {
        let script = &scripts().leader;
        let mut call = evalsha(script, 1);
        call.arg(keys.lock());
        let reply: Vec<Value> = self.run(keys, script, &call).await?;
        scripts::parse_leader(&reply).map_err(|detail| self.protocol(keys, &detail))
    }

    /// Sets the value an election's leader advertises, while `hold` is the lock's holder;
    /// `false` (nothing changed) when it is not. Observers hear `=leader`.
    pub(crate) async fn proclaim(&self, hold: &LeaseState, value: &str) -> Result<bool, Error> {
        let keys = LockKeys::of(&hold.hold.lock);
        let script = &scripts().proclaim;
        let mut call = evalsha(script, 1);
        call.arg(keys.lock())
            .arg(&*hold.hold.owner)
            .arg(hold.hold.id)
            .arg(value)
            .arg(keys.channel())
            .arg(self.publish_mode());
        // Twice sets the same value.
        let set: i64 = self.run(&keys, script, &call).await?;
        Ok(set > 0)
    }

    /// A consistent snapshot of a lock and its wait queue.
    pub(crate) async fn status(&self, keys: &LockKeys) -> Result<RawStatus, Error> {
        let script = &scripts().status;
        let mut call = evalsha(script, 4);
        call.arg(keys.lock())
            .arg(keys.fence())
            .arg(keys.queue())
            .arg(keys.waiting());
        let reply: Vec<Value> = self.run(keys, script, &call).await?;
        scripts::parse_status(&reply).map_err(|detail| self.protocol(keys, &detail))
    }

    /// A forced unlock's call: the lock's keys, its channel, and how its holders' clients
    /// are told. Both forced unlocks take these arguments first.
    fn forced_call(&self, script: &Lua, keys: &LockKeys) -> redis::Cmd {
        let mut call = evalsha(script, 3);
        call.arg(keys.lock())
            .arg(keys.queue())
            .arg(keys.waiting())
            .arg(keys.channel())
            .arg(self.publish_mode())
            .arg(if self.hears_clients() {
                CLIENT_CHANNELS
            } else {
                ""
            });
        call
    }

    /// Deletes a lock whatever its owner and wakes its waiters. Returns the owners it had.
    pub(crate) async fn force_unlock(&self, keys: &LockKeys) -> Result<Vec<(String, u64)>, Error> {
        let script = &scripts().force_unlock;
        let call = self.forced_call(script, keys);
        // A second run would find no owners to report.
        let fields: Vec<(String, Value)> = self.run_as(Resend::Never, keys, script, &call).await?;
        Ok(fields
            .into_iter()
            .filter(|(field, _)| !field.starts_with('='))
            .map(|(field, holds)| (field, hold_count(&holds)))
            .collect())
    }

    /// Removes `owner`'s holding only, and wakes the waiters (they queue again); the
    /// holder's client is told at once. Returns the owner and its hold count, if it held.
    pub(crate) async fn force_unlock_holder(
        &self,
        keys: &LockKeys,
        owner: &str,
    ) -> Result<Vec<(String, u64)>, Error> {
        let script = &scripts().force_unlock_holder;
        let mut call = self.forced_call(script, keys);
        call.arg(owner);
        // A second run would find nothing to report.
        let removed: Vec<Value> = self.run_as(Resend::Never, keys, script, &call).await?;
        Ok(match removed.as_slice() {
            [_, holds] => vec![(owner.to_owned(), hold_count(holds))],
            _ => Vec::new(),
        })
    }

    /// Subscribes the subscriber connection to a lock's channels (one command); returns once
    /// the server confirmed, so a release published afterwards cannot be missed.
    pub(crate) async fn subscribe(&self, channels: &[String]) -> Result<(), Error> {
        let result = match &self.conn {
            Conn::Cluster(cluster) => {
                cluster.channels.add(channels);
                self.bounded(None, cluster.sub.clone().ssubscribe(channels))
                    .await?
            }
            Conn::Master(master) => {
                if let Master::Sentinel(sentinel) = master {
                    for channel in channels {
                        sentinel.track(channel, true);
                    }
                }
                self.on_master(master, None, Resend::Safe, |node| async move {
                    node.sub.clone().subscribe(channels).await
                })
                .await?
            }
        };
        result.map_err(|e| self.error(None, e))
    }

    /// Unsubscribes from a lock's channels.
    pub(crate) async fn unsubscribe(&self, channels: &[String]) -> Result<(), Error> {
        let result = match &self.conn {
            Conn::Cluster(cluster) => {
                cluster.channels.remove(channels);
                self.bounded(None, cluster.sub.clone().sunsubscribe(channels))
                    .await?
            }
            Conn::Master(master) => {
                if let Master::Sentinel(sentinel) = master {
                    for channel in channels {
                        sentinel.track(channel, false);
                    }
                }
                self.on_master(master, None, Resend::Safe, |node| async move {
                    node.sub.clone().unsubscribe(channels).await
                })
                .await?
            }
        };
        result.map_err(|e| self.error(None, e))
    }
}

/// An election participant's value as the acquire script takes it: `=` followed by the value,
/// as one argument (an attempt id, which may follow, never starts with `=`).
struct Elected<'a>(&'a str);

impl redis::ToRedisArgs for Elected<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        let mut arg = Vec::with_capacity(self.0.len() + 1);
        arg.push(b'=');
        arg.extend_from_slice(self.0.as_bytes());
        out.write_arg(&arg);
    }
}

/// The password from the options, if one was given, overrides the URL's.
fn password_settings(
    settings: redis::RedisConnectionInfo,
    options: &ClientOptions,
) -> redis::RedisConnectionInfo {
    match &options.password {
        Some(p) => settings.set_password(&p.0),
        None => settings,
    }
}

fn with_password(info: redis::ConnectionInfo, options: &ClientOptions) -> redis::ConnectionInfo {
    let settings = password_settings(info.redis_settings().clone(), options);
    info.set_redis_settings(settings)
}
