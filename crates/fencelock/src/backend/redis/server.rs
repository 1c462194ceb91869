//! A Redis deployment that acts as one server for a lock (single server, Sentinel-managed
//! master, or Cluster): the lock scripts and how they are sent.

use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::{ErrorKind, RedisError, Script, ServerErrorKind, Value};

use super::engine::{AcquireReply, Attempt, ReleaseSink};
use crate::backend::Released;
use crate::error::Error;
use crate::lease::{LeaseState, Renewal};
use crate::name::LockKeys;
use crate::options::ClientOptions;

use super::conn::{self, ClusterConn, Node, SentinelConn};
use super::url::{self, redact_url};

/// A Lua script: its SHA for EVALSHA, and its source for SCRIPT LOAD after NOSCRIPT.
struct Lua {
    script: Script,
    code: &'static str,
}

impl Lua {
    fn new(code: &'static str) -> Self {
        Self {
            script: Script::new(code),
            code,
        }
    }
}

/// The scripts, hashed once per process and sent with EVALSHA.
struct Scripts {
    acquire: Lua,
    release: Lua,
    extend: Lua,
    status: Lua,
    force_unlock: Lua,
    raise_fence: Lua,
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        // The rules the scripts share (holds, tokens, handover, key checks) are written once,
        // in lib.lua.
        acquire: Lua::new(concat!(
            include_str!("lib.lua"),
            include_str!("acquire.lua")
        )),
        release: Lua::new(concat!(
            include_str!("lib.lua"),
            include_str!("release.lua")
        )),
        extend: Lua::new(concat!(include_str!("lib.lua"), include_str!("extend.lua"))),
        status: Lua::new(include_str!("status.lua")),
        force_unlock: Lua::new(include_str!("force_unlock.lua")),
        raise_fence: Lua::new(concat!(
            include_str!("lib.lua"),
            include_str!("raise_fence.lua")
        )),
    })
}

/// A lock's state as the server has it, for `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawStatus {
    pub(crate) remaining: Option<Duration>,
    pub(crate) held: bool,
    pub(crate) last_token: Option<u64>,
    pub(crate) current_token: Option<u64>,
    pub(crate) owners: Vec<(String, u64)>,
    /// The wait queue in arrival order (always empty with RedLock).
    pub(crate) waiters: Vec<crate::status::Waiter>,
}

/// Whether a request whose connection was lost on the way may be sent once more, on the fresh
/// connection. A lost reply does not say whether the server ran the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resend {
    /// Running it twice does what running it once does: reads, renewals, raising a fencing
    /// counter, `SCRIPT LOAD`, subscriptions, and requests checked by their attempt id (an
    /// acquire, sent again with the same id; the undo of one).
    Safe,
    /// It could take effect twice (a release by owner only, a forced unlock): the caller gets
    /// the error. Through Sentinel, one that surely did not run (READONLY, connection refused)
    /// still goes to the new master.
    Never,
}

/// How the backend reaches its server.
enum Conn {
    /// One master, found directly or through sentinels.
    Master(Master),
    // Boxed: far larger than the other variant.
    Cluster(Box<ClusterConn>),
}

/// A server that holds every lock: the one named in the URL, or the one the sentinels name.
enum Master {
    Plain(Arc<Node>),
    // Boxed: far larger than the other variants.
    Sentinel(Box<SentinelConn>),
}

impl Master {
    fn current(&self) -> Arc<Node> {
        match self {
            Master::Plain(node) => node.clone(),
            Master::Sentinel(sentinel) => sentinel.current(),
        }
    }
}

/// One Redis deployment that behaves as one server for a lock: a single server, the master
/// of a Sentinel set, or a Redis Cluster (each lock lives in one slot).
pub(crate) struct RedisBackend {
    conn: Conn,
    server: String,
    request_bound: Duration,
}

/// Replication acknowledgement wanted after an acquire (`WAIT numreplicas timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaAcks {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

/// A connection lent for one acquisition that waits for replicas (see `conn::Spare`).
enum Lent {
    Node(Arc<Node>, redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Lent {
    /// Sends `cmd` on this connection; on a cluster, to the master of the lock's slot (where
    /// the acquire went).
    async fn query(&mut self, keys: &LockKeys, cmd: redis::Cmd) -> Result<i64, RedisError> {
        match self {
            Lent::Node(_, conn) => cmd.query_async(conn).await,
            Lent::Cluster(conn) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(conn::slot(&keys.lock), SlotAddr::Master),
                ));
                redis::from_redis_value(conn.route_command(cmd, route).await?)
                    .map_err(RedisError::from)
            }
        }
    }

    /// Keeps the connection for a later acquisition (only after a request that went well).
    fn give_back(self, backend: &RedisBackend) {
        match (self, &backend.conn) {
            (Lent::Node(node, conn), _) => node.spare.give_back(conn),
            (Lent::Cluster(conn), Conn::Cluster(cluster)) => cluster.spare.give_back(conn),
            (Lent::Cluster(_), Conn::Master(_)) => {}
        }
    }
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
        })
    }

    /// Connects the command and the subscriber connection, and checks the eviction policy.
    /// Returns the backend and the warnings found on connect.
    pub(crate) async fn connect(
        url: &str,
        options: &ClientOptions,
        sink: Weak<dyn ReleaseSink>,
    ) -> Result<(Self, Vec<String>), Error> {
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
            .map_err(|e| Error::Unavailable {
                lock: None,
                server: display.clone(),
                detail: e.to_string(),
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
        };
        let warnings = backend.check_eviction_policy().await?;
        Ok((backend, warnings))
    }

    /// `host:port` of the server, for errors and logs.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// Any `maxmemory-policy` but `noeviction` may evict lock keys (volatile-* too: lock keys
    /// have TTLs). Servers with `CONFIG` disabled or renamed are skipped quietly.
    async fn check_eviction_policy(&self) -> Result<Vec<String>, Error> {
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
                let warning = format!(
                    "server {} has maxmemory-policy {policy}, which can evict lock keys and \
                     hand a lock to two owners; use noeviction",
                    self.server
                );
                tracing::warn!(server = %self.server, policy, "{warning}");
                Ok(vec![warning])
            }
        }
    }

    /// Runs a request with the client's end-to-end time bound, so that no call hangs forever
    /// even while the connection manager is reconnecting.
    async fn bounded<T>(
        &self,
        lock: Option<&LockKeys>,
        request: impl std::future::Future<Output = T>,
    ) -> Result<T, Error> {
        self.bounded_for(self.request_bound, lock, request).await
    }

    /// [`RedisBackend::bounded`] with another bound (a `WAIT` may take its own timeout more).
    async fn bounded_for<T>(
        &self,
        bound: Duration,
        lock: Option<&LockKeys>,
        request: impl std::future::Future<Output = T>,
    ) -> Result<T, Error> {
        tokio::time::timeout(bound, request)
            .await
            .map_err(|_| Error::Unavailable {
                lock: lock.map(|k| k.name.clone()),
                server: self.server.clone(),
                detail: format!("no reply within {bound:?}"),
            })
    }

    /// Runs `request` (a command, a pipeline, a subscription) on the master's connections; the
    /// outer error is the time bound, the inner one the server's. This is the one place where
    /// a request meets a lost connection or a master that is no more:
    /// - The connection was closed (server `timeout`, `CLIENT KILL`, a reset) and the request
    ///   may run twice ([`Resend::Safe`]): it is sent once more. The connection manager is
    ///   connecting again already (it does on every lost connection); the request waits for it.
    /// - Through Sentinel, a master that stopped being one (READONLY, connection lost) is
    ///   replaced by the one the sentinels name, and the request is sent once more there if it
    ///   may run twice or surely did not run: single commands and the watchdog's pipelines alike.
    async fn on_master<T, F, Fut>(
        &self,
        master: &Master,
        lock: Option<&LockKeys>,
        resend: Resend,
        request: F,
    ) -> Result<Result<T, RedisError>, Error>
    where
        F: Fn(Arc<Node>) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        let node = master.current();
        let first = self.bounded(lock, request(node.clone())).await?;
        let Err(e) = &first else {
            return Ok(first);
        };
        match master {
            Master::Sentinel(sentinel) if master_gone(e) => {
                // Refused (READONLY, or no connection could be made): it did not run.
                let did_not_run = e.code() == Some("READONLY") || e.is_connection_refusal();
                if let Err(e) = self.bounded(lock, sentinel.switch(&node)).await? {
                    return Ok(Err(e));
                }
                if !did_not_run && resend == Resend::Never {
                    return Ok(first);
                }
                self.bounded(lock, request(sentinel.current())).await
            }
            Master::Plain(_) if connection_lost(e) && resend == Resend::Safe => {
                tracing::debug!(server = %node.server, error = %e, "connection lost; sending once more");
                // Idle connections lent for `WAIT` were likely closed alike.
                node.spare.clear();
                self.bounded(lock, request(node)).await
            }
            _ => Ok(first),
        }
    }

    /// Sends one command (on a cluster, to the node that serves its key; the cluster
    /// connection resends a request whose node connection was lost on its own).
    async fn query<T: redis::FromRedisValue>(
        &self,
        lock: Option<&LockKeys>,
        resend: Resend,
        cmd: &redis::Cmd,
    ) -> Result<Result<T, RedisError>, Error> {
        match &self.conn {
            Conn::Cluster(cluster) => {
                let mut c = cluster.cmd.clone();
                self.bounded(lock, cmd.query_async(&mut c)).await
            }
            Conn::Master(master) => {
                self.on_master(master, lock, resend, |node| async move {
                    cmd.query_async(&mut node.cmd.clone()).await
                })
                .await
            }
        }
    }

    /// Loads a script after NOSCRIPT (script cache flushed, server restarted or failed over).
    async fn load(&self, lock: Option<&LockKeys>, script: &Lua) -> Result<(), Error> {
        tracing::debug!(server = %self.server, "NOSCRIPT: loading the script");
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(script.code);
        let _: String = self
            .query(lock, Resend::Safe, &load)
            .await?
            .map_err(|e| self.error(lock, e))?;
        Ok(())
    }

    /// Runs a script that may run twice ([`Resend::Safe`]) by its SHA; on NOSCRIPT loads it
    /// and runs it once more.
    async fn run<T: redis::FromRedisValue>(
        &self,
        keys: &LockKeys,
        script: &Lua,
        call: &redis::Cmd,
    ) -> Result<T, Error> {
        self.run_as(Resend::Safe, keys, script, call).await
    }

    /// [`RedisBackend::run`] for any script: `resend` says whether it may run twice.
    async fn run_as<T: redis::FromRedisValue>(
        &self,
        resend: Resend,
        keys: &LockKeys,
        script: &Lua,
        call: &redis::Cmd,
    ) -> Result<T, Error> {
        // Boxed: one small allocation per request keeps the futures of the operations built
        // on it (RedLock fan-outs, undo inside acquire) shallow enough for the compiler.
        Box::pin(self.with_script(keys, script, || self.query(Some(keys), resend, call))).await
    }

    /// Sends a script call with `send`; on NOSCRIPT (script cache flushed, server restarted or
    /// failed over) loads the script and sends once more.
    async fn with_script<T, F, Fut>(
        &self,
        keys: &LockKeys,
        script: &Lua,
        send: F,
    ) -> Result<T, Error>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Result<T, RedisError>, Error>>,
    {
        let result = match send().await? {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.load(Some(keys), script).await?;
                send().await?
            }
            other => other,
        };
        result.map_err(|e| self.error(Some(keys), e))
    }

    /// One acquire attempt; `proposal`: the token RedLock proposes (else the server's clock).
    pub(crate) async fn acquire(
        &self,
        attempt: &Attempt,
        proposal: Option<u64>,
    ) -> Result<AcquireReply, Error> {
        let keys = &attempt.keys;
        let script = &scripts().acquire;
        let call = self.acquire_call(attempt, proposal);
        let queued = attempt.queueing.join.is_some();
        match attempt.acks {
            None => {
                let reply: Vec<Value> = self.run(keys, script, &call).await?;
                self.parse_acquire(keys, &reply, queued)
            }
            Some(acks) => {
                let (reply, lent): (Vec<Value>, _) = self.run_on_lent(keys, script, &call).await?;
                let reply = self.parse_acquire(keys, &reply, queued)?;
                if !matches!(reply, AcquireReply::Acquired { .. }) {
                    lent.give_back(self);
                    return Ok(reply);
                }
                self.await_replicas(keys, lent, acks, &attempt.owner, attempt.id)
                    .await?;
                Ok(reply)
            }
        }
    }

    /// The acquire script's call. Keys and trailing arguments the script does not need are
    /// left out: every one costs the server. The queue's keys are only touched when queueing
    /// or giving attempts back.
    fn acquire_call(&self, attempt: &Attempt, proposal: Option<u64>) -> redis::Cmd {
        let keys = &attempt.keys;
        let queueing = attempt.queueing;
        let full =
            queueing.join.is_some() || queueing.claim.is_some() || !attempt.abandoned.is_empty();
        let mut call = evalsha(&scripts().acquire, if full { 4 } else { 2 });
        call.arg(&keys.lock).arg(&keys.fence);
        if full {
            call.arg(&keys.queue).arg(&keys.waiting);
        }
        call.arg(&*attempt.owner)
            .arg(attempt.lease_ms)
            .arg(attempt.id);
        if proposal.is_some() || full {
            call.arg(proposal.map(|t| t.to_string()).unwrap_or_default());
        }
        if full {
            let window = queueing.join.map(|w| w.as_millis().to_string());
            call.arg(window.unwrap_or_default())
                .arg(queueing.claim.map(|c| c.to_string()).unwrap_or_default())
                .arg(&keys.channel)
                .arg(self.publish_mode())
                .arg(&attempt.abandoned[..]);
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
            lock: keys.name.clone(),
            server: self.server.clone(),
            acked: acked.max(0) as u32,
            needed: acks.replicas,
            timeout: acks.timeout,
        })
    }

    /// Runs a script on a connection lent for it (NOSCRIPT handled), which is handed back
    /// with the reply.
    async fn run_on_lent<T: redis::FromRedisValue>(
        &self,
        keys: &LockKeys,
        script: &Lua,
        call: &redis::Cmd,
    ) -> Result<(T, Lent), Error> {
        self.with_script(keys, script, || self.query_on_lent(keys, call))
            .await
    }

    /// Sends `call` on a connection lent for it, which is handed back with the reply.
    async fn query_on_lent<T: redis::FromRedisValue>(
        &self,
        keys: &LockKeys,
        call: &redis::Cmd,
    ) -> Result<Result<(T, Lent), RedisError>, Error> {
        match &self.conn {
            Conn::Cluster(cluster) => {
                self.bounded(Some(keys), async {
                    let mut conn = cluster.lend().await?;
                    let reply = call.query_async(&mut conn).await?;
                    Ok((reply, Lent::Cluster(conn)))
                })
                .await
            }
            Conn::Master(master) => {
                // The same attempt id if sent again: an acquire may run twice.
                self.on_master(master, Some(keys), Resend::Safe, |node| async move {
                    let mut conn = node.lend().await?;
                    let reply = call.query_async(&mut conn).await?;
                    Ok((reply, Lent::Node(node, conn)))
                })
                .await
            }
        }
    }

    fn parse_acquire(
        &self,
        keys: &LockKeys,
        reply: &[Value],
        queued: bool,
    ) -> Result<AcquireReply, Error> {
        match reply {
            [Value::Int(1), Value::Int(count), token] => Ok(AcquireReply::Acquired {
                token: self.token(keys, token)?,
                count: u64::try_from(*count).map_err(|_| self.protocol(keys, "negative count"))?,
            }),
            [Value::Int(0), Value::Int(pttl)] => Ok(AcquireReply::Held {
                remaining: u64::try_from(*pttl).ok().map(Duration::from_millis),
                undo: false,
                queued,
            }),
            other => Err(self.protocol(keys, &format!("acquire replied {other:?}"))),
        }
    }

    fn token(&self, keys: &LockKeys, value: &Value) -> Result<u64, Error> {
        let parsed = match value {
            Value::BulkString(bytes) => {
                std::str::from_utf8(bytes).ok().and_then(|s| s.parse().ok())
            }
            Value::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        parsed.ok_or_else(|| self.protocol(keys, &format!("fencing token {value:?}")))
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
        let script = &scripts().release;
        let mut call = evalsha(script, 4);
        call.arg(&keys.lock)
            .arg(&keys.fence)
            .arg(&keys.queue)
            .arg(&keys.waiting)
            .arg(owner)
            .arg(&keys.channel);
        match hold {
            Some(id) => call.arg(id),
            None => call.arg(""),
        };
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
        call.arg(&keys.lock).arg(&keys.fence).arg(owner).arg(token);
        let _: i64 = self.run(keys, script, &call).await?;
        Ok(())
    }

    /// `'S'` when release messages go through sharded pub/sub.
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
        call.arg(&hold.keys.lock)
            .arg(&*hold.owner)
            .arg(lease_ms)
            .arg(hold.id);
        call
    }

    /// Extends a hold's lease to at least `lease_ms` while the hold is live.
    pub(crate) async fn extend(&self, hold: &LeaseState, lease_ms: u64) -> Result<Renewal, Error> {
        let keys = &hold.hold.keys;
        let call = Self::extend_call(hold, lease_ms);
        let ttl: i64 = self.run(keys, &scripts().extend, &call).await?;
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
        let keys = &hold.hold.keys;
        let call = Self::extend_call(hold, lease_ms);
        let (ttl, lent): (i64, _) = self.run_on_lent(keys, &scripts().extend, &call).await?;
        if ttl < 0 {
            lent.give_back(self);
            return Ok(Renewal::NotHeld);
        }
        let owner = &hold.hold.owner;
        self.await_replicas(keys, lent, acks, owner, hold.hold.id)
            .await?;
        Ok(Renewal::Renewed)
    }

    /// Renews many holds: one pipelined round trip on a single server, concurrent requests
    /// on a cluster (the locks live on different nodes). The outer error means the round trip
    /// failed as a whole; inner errors are per lock (e.g. WRONGTYPE). `lease_ms`: the lease to
    /// ask for, else each hold's own.
    pub(crate) async fn renew_batch(
        &self,
        items: &[super::engine::RenewItem],
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
                let keys = &hold.hold.keys;
                match reply {
                    Value::Int(ttl) => Ok(renewal(ttl)),
                    Value::ServerError(e) => Err(self.error(Some(keys), e.into())),
                    other => Err(self.protocol(keys, &format!("renewal replied {other:?}"))),
                }
            })
            .collect())
    }

    /// A consistent snapshot of a lock and its wait queue.
    pub(crate) async fn status(&self, keys: &LockKeys) -> Result<RawStatus, Error> {
        let script = &scripts().status;
        let mut call = evalsha(script, 4);
        call.arg(&keys.lock)
            .arg(&keys.fence)
            .arg(&keys.queue)
            .arg(&keys.waiting);
        let reply: Vec<Value> = self.run(keys, script, &call).await?;
        let bad = |what: &str| self.protocol(keys, &format!("status reply: {what}"));
        let [Value::Int(pttl), last, Value::Array(fields), Value::Array(time), Value::Array(queue)] =
            reply.as_slice()
        else {
            return Err(bad(&format!("{reply:?}")));
        };
        let last_token = match last {
            Value::Nil | Value::Boolean(false) => None,
            v => Some(self.token(keys, v)?),
        };
        let mut status = RawStatus {
            remaining: u64::try_from(*pttl).ok().map(Duration::from_millis),
            held: *pttl != -2,
            last_token,
            current_token: None,
            owners: Vec::new(),
            waiters: Vec::new(),
        };
        for pair in fields.chunks(2) {
            let [Value::BulkString(field), value] = pair else {
                return Err(bad(&format!("lock field {pair:?}")));
            };
            let field = String::from_utf8_lossy(field).into_owned();
            match field.as_str() {
                "=token" => status.current_token = Some(self.token(keys, value)?),
                f if f.starts_with('=') => {}
                _ => status.owners.push((field, hold_count(value))),
            }
        }
        // TIME: seconds and microseconds, as text.
        let number = |v: &Value| match v {
            Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
            Value::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        let now_us = match time.as_slice() {
            [secs, micros] => number(secs)
                .zip(number(micros))
                .and_then(|(s, us)| s.checked_mul(1_000_000)?.checked_add(us)),
            _ => None,
        }
        .ok_or_else(|| bad(&format!("server time {time:?}")))?;
        for pair in queue.chunks(2) {
            let (owner, place) = match pair {
                [Value::BulkString(owner), Value::BulkString(place)] => (owner, Some(place)),
                [Value::BulkString(owner), Value::Nil | Value::Boolean(false)] => (owner, None),
                _ => return Err(bad(&format!("queue entry {pair:?}"))),
            };
            let place = place.map(|p| String::from_utf8_lossy(p));
            status.waiters.push(crate::status::Waiter::from_place(
                String::from_utf8_lossy(owner).into_owned(),
                place.as_deref(),
                now_us,
            ));
        }
        Ok(status)
    }

    /// Deletes a lock whatever its owner and wakes its waiters. Returns the owners it had.
    pub(crate) async fn force_unlock(&self, keys: &LockKeys) -> Result<Vec<(String, u64)>, Error> {
        let script = &scripts().force_unlock;
        let mut call = evalsha(script, 3);
        call.arg(&keys.lock)
            .arg(&keys.queue)
            .arg(&keys.waiting)
            .arg(&keys.channel)
            .arg(self.publish_mode());
        // A second run would find no owners to report.
        let fields: Vec<(String, Value)> = self.run_as(Resend::Never, keys, script, &call).await?;
        Ok(fields
            .into_iter()
            .filter(|(field, _)| !field.starts_with('='))
            .map(|(field, holds)| (field, hold_count(&holds)))
            .collect())
    }

    /// Subscribes the subscriber connection to a release channel; returns once the server
    /// confirmed, so a release published afterwards cannot be missed.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<(), Error> {
        let result = match &self.conn {
            Conn::Cluster(cluster) => {
                self.bounded(None, cluster.sub.clone().ssubscribe(channel))
                    .await?
            }
            Conn::Master(master) => {
                if let Master::Sentinel(sentinel) = master {
                    sentinel.track(channel, true);
                }
                self.on_master(master, None, Resend::Safe, |node| async move {
                    node.sub.clone().subscribe(channel).await
                })
                .await?
            }
        };
        result.map_err(|e| self.error(None, e))
    }

    /// Unsubscribes from a release channel.
    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<(), Error> {
        let result = match &self.conn {
            Conn::Cluster(cluster) => {
                self.bounded(None, cluster.sub.clone().sunsubscribe(channel))
                    .await?
            }
            Conn::Master(master) => {
                if let Master::Sentinel(sentinel) = master {
                    sentinel.track(channel, false);
                }
                self.on_master(master, None, Resend::Safe, |node| async move {
                    node.sub.clone().unsubscribe(channel).await
                })
                .await?
            }
        };
        result.map_err(|e| self.error(None, e))
    }

    fn protocol(&self, keys: &LockKeys, detail: &str) -> Error {
        Error::Protocol {
            lock: Some(keys.name.clone()),
            server: self.server.clone(),
            detail: detail.to_owned(),
        }
    }

    fn error(&self, keys: Option<&LockKeys>, e: RedisError) -> Error {
        let lock = keys.map(|k| k.name.clone());
        if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
        {
            return Error::Unavailable {
                lock,
                server: self.server.clone(),
                detail: e.to_string(),
            };
        }
        let detail = e.to_string();
        if let Some(keys) = keys {
            if e.code() == Some("WRONGTYPE") || detail.contains("WRONGTYPE") {
                // The scripts name the key; plain commands touch only the lock key.
                let named = [&keys.fence, &keys.queue, &keys.waiting]
                    .into_iter()
                    .find(|k| detail.contains(k.as_str()));
                return Error::WrongType {
                    lock: keys.name.clone(),
                    key: named.unwrap_or(&keys.lock).clone(),
                    server: self.server.clone(),
                    detail,
                };
            }
            if e.code() == Some("FENCE") || detail.starts_with("FENCE") {
                return Error::FencingExhausted {
                    lock: keys.name.clone(),
                    server: self.server.clone(),
                    detail,
                };
            }
        }
        Error::Server {
            lock,
            server: self.server.clone(),
            source: e,
        }
    }
}

/// What an extend script's reply (the remaining lease, or -1) says.
fn renewal(ttl: i64) -> Renewal {
    if ttl >= 0 {
        Renewal::Renewed
    } else {
        Renewal::NotHeld
    }
}

/// A holder's hold count: the number of hold ids in its field.
fn hold_count(holds: &Value) -> u64 {
    match holds {
        Value::BulkString(ids) => String::from_utf8_lossy(ids).split_whitespace().count() as u64,
        _ => 0,
    }
}

/// `EVALSHA sha numkeys`, to be followed by the keys and arguments.
fn evalsha(script: &Lua, keys: usize) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.script.get_hash()).arg(keys);
    cmd
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

/// The connection the request went on was closed, by the server or the network. Not a refused
/// connection (the server is down: sending again would not help) nor a timeout (after which
/// the connection stays).
fn connection_lost(e: &RedisError) -> bool {
    e.is_connection_dropped() && !e.is_connection_refusal()
}

/// Through Sentinel: this error means the node is no longer (reachable as) the master.
fn master_gone(e: &RedisError) -> bool {
    e.code() == Some("READONLY")
        || e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
}
