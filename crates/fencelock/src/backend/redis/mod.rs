//! One Redis server: the lock scripts, the command connection and the subscriber connection.

use std::sync::Weak;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, PushInfo, PushKind, RedisError, Script, ServerErrorKind, Value};

use super::{AcquireReply, ReleaseSink, Released, Renewal};
use crate::error::{Error, InputError};
use crate::name::LockKeys;
use crate::options::ClientOptions;

mod url;

pub use url::redact_url;

/// The scripts, hashed once per process and sent with EVALSHA.
struct Scripts {
    acquire: Script,
    release: Script,
    extend: Script,
    status: Script,
    force_unlock: Script,
    raise_fence: Script,
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: Script::new(include_str!("acquire.lua")),
        release: Script::new(include_str!("release.lua")),
        extend: Script::new(include_str!("extend.lua")),
        status: Script::new(include_str!("status.lua")),
        force_unlock: Script::new(include_str!("force_unlock.lua")),
        raise_fence: Script::new(include_str!("raise_fence.lua")),
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
}

/// One Redis server.
pub(crate) struct RedisBackend {
    conn: ConnectionManager,
    subscriber: ConnectionManager,
    server: String,
    request_bound: Duration,
}

impl RedisBackend {
    /// Connects the command and the subscriber connection, and checks the eviction policy.
    /// Returns the backend and the warnings found on connect.
    pub(crate) async fn connect(
        url: &str,
        options: &ClientOptions,
        sink: Weak<dyn ReleaseSink>,
    ) -> Result<(Self, Vec<String>), Error> {
        let mut info = url::parse(url)?;
        if let Some(password) = &options.password {
            info = info
                .clone()
                .set_redis_settings(info.redis_settings().clone().set_password(&password.0));
        }
        let server = url::server_name(&info);
        let sub_info = info.clone().set_redis_settings(
            info.redis_settings()
                .clone()
                .set_protocol(redis::ProtocolVersion::RESP3),
        );
        let unavailable = |e: RedisError| Error::Unavailable {
            lock: None,
            server: server.clone(),
            detail: e.to_string(),
        };
        let client = redis::Client::open(info).map_err(|e| invalid_url(url, e))?;
        let sub_client = redis::Client::open(sub_info).map_err(|e| invalid_url(url, e))?;

        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(Some(options.response_timeout))
            // Reconnection is retried on the next request; each request is bounded in time.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let push = move |info: PushInfo| -> Result<(), ()> {
            let Some(sink) = sink.upgrade() else {
                return Err(());
            };
            match info.kind {
                PushKind::Message | PushKind::SMessage => {
                    if let [Value::BulkString(channel), Value::BulkString(message), ..] =
                        info.data.as_slice()
                    {
                        if let Ok(channel) = std::str::from_utf8(channel) {
                            sink.released(channel, message);
                        }
                    }
                }
                PushKind::Disconnection => sink.disconnected(),
                _ => {}
            }
            Ok(())
        };
        let sub_config = config
            .clone()
            .set_push_sender(push)
            .set_automatic_resubscription();

        let bound = options.request_bound();
        let connect = async {
            let conn = client.get_connection_manager_with_config(config).await?;
            let subscriber = sub_client
                .get_connection_manager_with_config(sub_config)
                .await?;
            Ok::<_, RedisError>((conn, subscriber))
        };
        let (conn, subscriber) = tokio::time::timeout(bound, connect)
            .await
            .map_err(|_| Error::Unavailable {
                lock: None,
                server: server.clone(),
                detail: format!("no connection within {bound:?}"),
            })?
            .map_err(unavailable)?;
        let backend = Self {
            conn,
            subscriber,
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
        let mut conn = self.conn.clone();
        let reply: Result<Vec<String>, RedisError> = self
            .bounded(
                None,
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg("maxmemory-policy")
                    .query_async(&mut conn),
            )
            .await?;
        let Ok(pair) = reply else {
            return Ok(Vec::new());
        };
        match pair.get(1).map(String::as_str) {
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
        tokio::time::timeout(self.request_bound, request)
            .await
            .map_err(|_| Error::Unavailable {
                lock: lock.map(|k| k.name.clone()),
                server: self.server.clone(),
                detail: format!("no reply within {:?}", self.request_bound),
            })
    }

    /// Runs a script by its SHA; on NOSCRIPT (script cache flushed, server restarted or failed
    /// over) loads it and runs it once more.
    async fn run<T: redis::FromRedisValue>(
        &self,
        keys: &LockKeys,
        script: &Script,
        call: &redis::Cmd,
    ) -> Result<T, Error> {
        let mut conn = self.conn.clone();
        let first: Result<T, RedisError> = self
            .bounded(Some(keys), call.query_async(&mut conn))
            .await?;
        let result = match first {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                tracing::debug!(server = %self.server, "NOSCRIPT: loading the script");
                self.bounded(Some(keys), script.load_async(&mut conn))
                    .await?
                    .map_err(|e| self.error(Some(keys), e))?;
                self.bounded(Some(keys), call.query_async(&mut conn))
                    .await?
            }
            other => other,
        };
        result.map_err(|e| self.error(Some(keys), e))
    }

    /// One acquire attempt.
    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
        attempt: u64,
        proposal: Option<u64>,
    ) -> Result<AcquireReply, Error> {
        let script = &scripts().acquire;
        let mut call = evalsha(script, 2);
        call.arg(&keys.lock)
            .arg(&keys.fence)
            .arg(owner)
            .arg(lease_ms)
            .arg(attempt);
        match proposal {
            Some(token) => call.arg(token),
            None => call.arg(""),
        };
        let reply: Vec<Value> = self.run(keys, script, &call).await?;
        self.parse_acquire(keys, &reply)
    }

    fn parse_acquire(&self, keys: &LockKeys, reply: &[Value]) -> Result<AcquireReply, Error> {
        match reply {
            [Value::Int(1), Value::Int(count), token] => Ok(AcquireReply::Acquired {
                token: self.token(keys, token)?,
                count: u64::try_from(*count).map_err(|_| self.protocol(keys, "negative count"))?,
            }),
            [Value::Int(0), Value::Int(pttl)] => Ok(AcquireReply::Held {
                remaining: u64::try_from(*pttl).ok().map(Duration::from_millis),
                undo: false,
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

    /// Gives back one hold. With `attempt`, only if that attempt was the last to acquire.
    pub(crate) async fn release(
        &self,
        keys: &LockKeys,
        owner: &str,
        attempt: Option<u64>,
        message: Option<&str>,
    ) -> Result<Released, Error> {
        let script = &scripts().release;
        let mut call = evalsha(script, 1);
        call.arg(&keys.lock).arg(owner).arg(&keys.channel);
        match attempt {
            Some(id) => call.arg(id),
            None => call.arg(""),
        };
        call.arg(message.unwrap_or("")).arg(self.publish_mode());
        let left: i64 = self.run(keys, script, &call).await?;
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
        ""
    }

    /// Extends the lease to at least `lease_ms` if `owner` holds the lock.
    pub(crate) async fn extend(
        &self,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
    ) -> Result<Renewal, Error> {
        let script = &scripts().extend;
        let mut call = evalsha(script, 1);
        call.arg(&keys.lock).arg(owner).arg(lease_ms);
        let ttl: i64 = self.run(keys, script, &call).await?;
        Ok(if ttl >= 0 {
            Renewal::Renewed
        } else {
            Renewal::NotHeld
        })
    }

    /// Renews many leases in one pipelined round trip. The outer error means the round trip
    /// failed as a whole; inner errors are per lock (e.g. WRONGTYPE).
    pub(crate) async fn renew_batch(
        &self,
        items: &[super::RenewItem],
    ) -> Result<Vec<Result<Renewal, Error>>, Error> {
        let script = &scripts().extend;
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for (keys, owner, lease_ms) in items {
            pipe.add_command(evalsha(script, 1))
                .arg(&keys.lock)
                .arg(&**owner)
                .arg(*lease_ms);
        }
        let mut conn = self.conn.clone();
        let mut replies: Vec<Value> = self
            .bounded(None, pipe.query_async(&mut conn))
            .await?
            .map_err(|e| self.error(None, e))?;
        let noscript = |v: &Value| matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT");
        if replies.iter().any(noscript) {
            // The script cache was flushed: load it and send the batch once more.
            self.bounded(None, script.load_async(&mut conn))
                .await?
                .map_err(|e| self.error(None, e))?;
            replies = self
                .bounded(None, pipe.query_async(&mut conn))
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
            .map(|((keys, _, _), reply)| match reply {
                Value::Int(ttl) if ttl >= 0 => Ok(Renewal::Renewed),
                Value::Int(_) => Ok(Renewal::NotHeld),
                Value::ServerError(e) => Err(self.error(Some(keys), e.into())),
                other => Err(self.protocol(keys, &format!("renewal replied {other:?}"))),
            })
            .collect())
    }

    /// A consistent snapshot of a lock.
    pub(crate) async fn status(&self, keys: &LockKeys) -> Result<RawStatus, Error> {
        let script = &scripts().status;
        let mut call = evalsha(script, 2);
        call.arg(&keys.lock).arg(&keys.fence);
        let reply: Vec<Value> = self.run(keys, script, &call).await?;
        let bad = || self.protocol(keys, "status reply");
        let (Some(Value::Int(pttl)), Some(last)) = (reply.first(), reply.get(1)) else {
            return Err(bad());
        };
        let last_token = match last {
            Value::Nil => None,
            v => Some(self.token(keys, v)?),
        };
        let mut status = RawStatus {
            remaining: u64::try_from(*pttl).ok().map(Duration::from_millis),
            held: *pttl != -2,
            last_token,
            current_token: None,
            owners: Vec::new(),
        };
        for pair in reply[2..].chunks(2) {
            let [Value::BulkString(field), value] = pair else {
                return Err(bad());
            };
            let field = String::from_utf8_lossy(field).into_owned();
            match field.as_str() {
                "=token" => status.current_token = Some(self.token(keys, value)?),
                "=attempt" => {}
                _ => status.owners.push((field, self.token(keys, value)?)),
            }
        }
        Ok(status)
    }

    /// Deletes a lock whatever its owner and wakes its waiters. Returns the owners it had.
    pub(crate) async fn force_unlock(&self, keys: &LockKeys) -> Result<Vec<(String, u64)>, Error> {
        let script = &scripts().force_unlock;
        let mut call = evalsha(script, 1);
        call.arg(&keys.lock)
            .arg(&keys.channel)
            .arg(self.publish_mode());
        let fields: Vec<(String, String)> = self.run(keys, script, &call).await?;
        Ok(fields
            .into_iter()
            .filter(|(field, _)| !field.starts_with('='))
            .map(|(field, count)| (field, count.parse().unwrap_or(0)))
            .collect())
    }

    /// Subscribes the subscriber connection to a release channel; returns once the server
    /// confirmed, so a release published afterwards cannot be missed.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<(), Error> {
        let mut sub = self.subscriber.clone();
        self.bounded(None, sub.subscribe(channel))
            .await?
            .map_err(|e| self.error(None, e))
    }

    /// Unsubscribes from a release channel.
    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<(), Error> {
        let mut sub = self.subscriber.clone();
        self.bounded(None, sub.unsubscribe(channel))
            .await?
            .map_err(|e| self.error(None, e))
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
        if e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE") {
            if let Some(keys) = keys {
                return Error::WrongType {
                    lock: keys.name.clone(),
                    key: keys.lock.clone(),
                    server: self.server.clone(),
                    detail: e.to_string(),
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

/// `EVALSHA sha numkeys`, to be followed by the keys and arguments.
fn evalsha(script: &Script, keys: usize) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys);
    cmd
}

fn invalid_url(url: &str, e: RedisError) -> Error {
    InputError::InvalidUrl {
        url: redact_url(url),
        reason: e.to_string(),
    }
    .into()
}
