//! How a `RedisBackend` sends a request: on which connection (the master the sentinels name,
//! the cluster node of the key, a connection lent for `WAIT`), within which time bound, with
//! NOSCRIPT handled (load, send once more), and resent once on a fresh connection when the
//! request may run twice. Errors are mapped to `Error` here.

use std::sync::Arc;
use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::super::conn::{self, ClusterConn, Node, SentinelConn};
use super::scripts::Lua;
use super::RedisBackend;
use crate::backend::redis::keys::LockKeys;
use crate::error::Error;

/// Whether a request whose connection was lost on the way may be sent once more, on the fresh
/// connection. A lost reply does not say whether the server ran the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resend {
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
pub(super) enum Conn {
    /// One master, found directly or through sentinels.
    Master(Master),
    // Boxed: far larger than the other variant.
    Cluster(Box<ClusterConn>),
}

/// A server that holds every lock: the one named in the URL, or the one the sentinels name.
pub(super) enum Master {
    Plain(Arc<Node>),
    // Boxed: far larger than the other variants.
    Sentinel(Box<SentinelConn>),
}

impl Master {
    pub(super) fn current(&self) -> Arc<Node> {
        match self {
            Master::Plain(node) => node.clone(),
            Master::Sentinel(sentinel) => sentinel.current(),
        }
    }
}

/// A connection lent for one acquisition that waits for replicas (see `conn::Spare`).
pub(super) enum Lent {
    Node(Arc<Node>, redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Lent {
    /// Sends `cmd` on this connection; on a cluster, to the master of the lock's slot (where
    /// the acquire went).
    pub(super) async fn query(
        &mut self,
        keys: &LockKeys,
        cmd: redis::Cmd,
    ) -> Result<i64, RedisError> {
        match self {
            Lent::Node(_, conn) => cmd.query_async(conn).await,
            Lent::Cluster(conn) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(conn::slot(keys.name()), SlotAddr::Master),
                ));
                redis::from_redis_value(conn.route_command(cmd, route).await?)
                    .map_err(RedisError::from)
            }
        }
    }

    /// Keeps the connection for a later acquisition (only after a request that went well).
    pub(super) fn give_back(self, backend: &RedisBackend) {
        match (self, &backend.conn) {
            (Lent::Node(node, conn), _) => node.spare.give_back(conn),
            (Lent::Cluster(conn), Conn::Cluster(cluster)) => cluster.spare.give_back(conn),
            (Lent::Cluster(_), Conn::Master(_)) => {}
        }
    }
}

/// The connection the request went on was closed, by the server or the network. Not a refused
/// connection (the server is down: sending again would not help) nor a timeout (after which
/// the connection stays).
pub(super) fn connection_lost(e: &RedisError) -> bool {
    e.is_connection_dropped() && !e.is_connection_refusal()
}

/// Through Sentinel: this error means the node is no longer (reachable as) the master.
pub(super) fn master_gone(e: &RedisError) -> bool {
    e.code() == Some("READONLY")
        || e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
}

impl RedisBackend {
    /// Runs a request with the client's end-to-end time bound, so that no call hangs forever
    /// even while the connection manager is reconnecting.
    pub(super) async fn bounded<T>(
        &self,
        lock: Option<&LockKeys>,
        request: impl std::future::Future<Output = T>,
    ) -> Result<T, Error> {
        self.bounded_for(self.request_bound, lock, request).await
    }

    /// [`RedisBackend::bounded`] with another bound (a `WAIT` may take its own timeout more).
    pub(super) async fn bounded_for<T>(
        &self,
        bound: Duration,
        lock: Option<&LockKeys>,
        request: impl std::future::Future<Output = T>,
    ) -> Result<T, Error> {
        tokio::time::timeout(bound, request)
            .await
            .map_err(|_| Error::Unavailable {
                lock: lock.map(|k| k.name().to_owned()),
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
    pub(super) async fn on_master<T, F, Fut>(
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
        if let Master::Sentinel(sentinel) = master {
            if sentinel.announced_new() {
                // The sentinels named a new master; the old one may still take writes, which
                // its conversion to a replica will throw away. Boxed, as below.
                let follow = Box::pin(sentinel.follow_announcement());
                if let Err(e) = self.bounded(lock, follow).await? {
                    return Ok(Err(e));
                }
            }
        }
        let node = master.current();
        let first = self.bounded(lock, request(node.clone())).await?;
        let Err(e) = &first else {
            return Ok(first);
        };
        match master {
            Master::Sentinel(sentinel) if master_gone(e) => {
                // Refused (READONLY, or no connection could be made): it did not run.
                let did_not_run = e.code() == Some("READONLY") || e.is_connection_refusal();
                // Boxed: switching is rare, and its future (kilobytes) would otherwise be part of
                // every request's, copied at each level on every request.
                if let Err(e) = self.bounded(lock, Box::pin(sentinel.switch(&node))).await? {
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
    pub(super) async fn query<T: redis::FromRedisValue>(
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
    pub(super) async fn load(&self, lock: Option<&LockKeys>, script: &Lua) -> Result<(), Error> {
        tracing::debug!(server = %self.server, "loading a script");
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
    pub(super) async fn run<T: redis::FromRedisValue>(
        &self,
        keys: &LockKeys,
        script: &Lua,
        call: &redis::Cmd,
    ) -> Result<T, Error> {
        self.run_as(Resend::Safe, keys, script, call).await
    }

    /// [`RedisBackend::run`] for any script: `resend` says whether it may run twice.
    pub(super) async fn run_as<T: redis::FromRedisValue>(
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
    pub(super) async fn with_script<T, F, Fut>(
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

    /// Runs a script on a connection lent for it (NOSCRIPT handled), which is handed back
    /// with the reply.
    pub(super) async fn run_on_lent<T: redis::FromRedisValue>(
        &self,
        keys: &LockKeys,
        script: &Lua,
        call: &redis::Cmd,
    ) -> Result<(T, Lent), Error> {
        // Boxed: rare (`min_replica_acks`), and its future is large.
        Box::pin(self.with_script(keys, script, || self.query_on_lent(keys, call))).await
    }

    /// Sends `call` on a connection lent for it, which is handed back with the reply.
    pub(super) async fn query_on_lent<T: redis::FromRedisValue>(
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

    pub(super) fn protocol(&self, keys: &LockKeys, detail: &str) -> Error {
        Error::Protocol {
            lock: Some(keys.name().to_owned()),
            server: self.server.clone(),
            detail: detail.to_owned(),
        }
    }

    pub(super) fn error(&self, keys: Option<&LockKeys>, e: RedisError) -> Error {
        let lock = keys.map(|k| k.name().to_owned());
        if denied(&e) {
            return Error::Denied {
                lock,
                server: self.server.clone(),
                detail: e.to_string(),
            };
        }
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
                let named = [keys.fence(), keys.queue(), keys.waiting()]
                    .into_iter()
                    .find(|k| detail.contains(&k.to_string()));
                return Error::WrongType {
                    lock: keys.name().to_owned(),
                    key: named.unwrap_or(keys.lock()).to_string(),
                    server: self.server.clone(),
                    detail,
                };
            }
            if e.code() == Some("FENCE") || detail.starts_with("FENCE") {
                return Error::FencingExhausted {
                    lock: keys.name().to_owned(),
                    server: self.server.clone(),
                    detail,
                };
            }
        }
        Error::Server {
            service: "Redis",
            lock,
            server: self.server.clone(),
            source: Box::new(e),
        }
    }
}

/// Whether the server refused the credentials (a wrong password or user, also when a
/// reconnection authenticates) or the user's ACL does not allow a command or key.
pub(crate) fn denied(e: &RedisError) -> bool {
    const REFUSALS: [&str; 3] = ["NOAUTH", "WRONGPASS", "NOPERM"];
    if matches!(e.code(), Some(code) if REFUSALS.contains(&code)) {
        return true;
    }
    // redis-rs reports any error reply to AUTH (on RESP2) as AuthenticationFailed, "max
    // number of clients reached" too: only the server's refusal of the password counts.
    let text = e.to_string();
    e.kind() == redis::ErrorKind::AuthenticationFailed
        && (REFUSALS.iter().any(|c| text.contains(c)) || text.contains("invalid password"))
}
