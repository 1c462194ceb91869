//! The client: one connection (plus one subscriber connection) to the lock service, shared by
//! every lock handle made from it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionAddr, IntoConnectionInfo};

use crate::error::{InputError, Result};
use crate::lock::Lock;
use crate::name::LockKeys;
use crate::options::ClientOptions;
use crate::shared::Shared;
use crate::status::LockStatus;

/// A connection to the lock service. Cheap to clone; clones share connections, the watchdog
/// task and the client id.
///
/// Dropping the last clone (and every guard made from it) stops the background task.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Shared>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("servers", &self.inner.service.server())
            .field("id", &self.inner.id)
            .finish()
    }
}

impl Client {
    /// Connects with default [`ClientOptions`]. The URL says what to connect to:
    /// - `redis://host:port[/db]` (password: `redis://:password@host:port`): one server;
    /// - `redis+cluster://host:port,host:port,...`: a Redis Cluster (seed nodes);
    /// - `redis+sentinel://host:port,host:port,.../master-name[/db]`: the master that the
    ///   sentinels name, followed through failovers;
    /// - `zk://host:port[,host:port...][/base/path]` (feature `zookeeper`): a ZooKeeper
    ///   ensemble; a lock named N is the node `<base>/N` (base `/fencelock` by default), with
    ///   Apache Curator's `InterProcessMutex` layout. The client's session is the lease of
    ///   every lock it holds: its timeout is [`ClientOptions::default_lease`] as the server
    ///   negotiated it (a different one is reported in [`Client::warnings`]).
    ///
    /// For RedLock over independent servers see [`Client::connect_all`].
    ///
    /// Must be called inside a tokio runtime: the client's background task runs there.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects with explicit options.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Self> {
        Self::connect_all_with(&[url], options).await
    }

    /// RedLock: one lock over N independent Redis masters (N odd: 3 or 5 typically), held
    /// when a majority grants it. Requests go to all servers in parallel; see docs/SAFETY.md
    /// for what this guarantees. With one URL this is [`Client::connect`]. Several `zk://` URLs
    /// are an input error: name the ensemble's servers in one URL.
    ///
    /// The servers must be distinct: two URLs that reach the same address (after resolving
    /// host names, so `localhost` and `127.0.0.1` are one server; whatever the database or
    /// password) are rejected with [`InputError::DuplicateServer`] before connecting. Only
    /// names are resolved for this; two different addresses that lead to one server (a
    /// machine's own LAN address beside `127.0.0.1`, a proxy) cannot be told apart.
    pub async fn connect_all(urls: &[&str]) -> Result<Self> {
        Self::connect_all_with(urls, ClientOptions::default()).await
    }

    /// [`Client::connect_all`] with explicit options.
    pub async fn connect_all_with(urls: &[&str], options: ClientOptions) -> Result<Self> {
        options.validate()?;
        // A RedLock set (an odd number of Redis URLs; `Shared::connect` refuses the rest
        // before any I/O) must name distinct servers.
        let redlock = urls.len() > 1 && !urls.len().is_multiple_of(2);
        if redlock && urls.iter().all(|u| !u.starts_with("zk://")) {
            check_distinct(urls, options.connect_timeout).await?;
        }
        let inner = Shared::connect(urls, options).await?;
        Ok(Self { inner })
    }

    /// A handle on the lock `name`, with a fresh owner identity (this client's id plus a
    /// per-handle number). Cheap; no I/O. Clones of the handle share the owner, so taking the
    /// lock again through a clone re-enters it.
    ///
    /// An invalid name (empty, longer than [`crate::MAX_NAME_LEN`] bytes, containing `{` or
    /// `}`) is reported by the handle's first operation, before any I/O.
    pub fn lock(&self, name: &str) -> Lock {
        Lock::new(self.inner.clone(), name, self.inner.next_owner())
    }

    /// The random id of this client (hex), the prefix of the owner ids it makes.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// `host:port` of the server (comma-separated for RedLock).
    pub fn server(&self) -> String {
        self.inner.service.server()
    }

    /// Problems found on connect that do not stop the client from working, e.g. a
    /// `maxmemory-policy` that can evict lock keys. Each is also logged with `tracing::warn!`.
    pub fn warnings(&self) -> &[String] {
        &self.inner.warnings
    }

    /// What the server knows about the lock `name`.
    pub async fn status(&self, name: &str) -> Result<LockStatus> {
        let keys = Arc::new(LockKeys::new(name)?);
        let raw = self.inner.service.status(&keys).await?;
        Ok(LockStatus::from_raw(name, raw))
    }

    /// Deletes the lock `name` whoever holds it, and wakes its waiters. For operators who know
    /// a lock is stale; the holder (if alive) learns of it at its next renewal. Returns the
    /// owners and hold counts that were removed (empty when the lock was free).
    pub async fn force_unlock(&self, name: &str) -> Result<Vec<(String, u64)>> {
        let keys = Arc::new(LockKeys::new(name)?);
        let removed = self.inner.service.force_unlock(&keys).await?;
        tracing::info!(lock = name, ?removed, "lock force-unlocked");
        Ok(removed)
    }

    /// Waits until the work this client left to its background task is done, then drops this
    /// handle: releases of dropped guards, undone attempts, queue places given up, and RedLock
    /// requests still in flight when an operation was decided (a release decided by a majority
    /// still removes the lock from the slower servers). A program that exits right after its
    /// last release should call this, or the lock may stay on a slow server until its lease
    /// ends. Waits at most the client's request bound (connect + response timeout).
    ///
    /// Fails with [`crate::Error::Unfinished`] when some of that work was still under way at the
    /// bound, or failed: a server that did not answer may then keep a grant until its lease
    /// ends. (A hold whose give-back failed is also given back by the owner's next attempt on
    /// that lock.)
    pub async fn close(self) -> Result<()> {
        self.inner.settle().await
    }
}

/// One server identity of a RedLock URL: a resolved address, the host name as written
/// (lower-cased; what is compared when resolution fails), or a unix socket path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Endpoint {
    Address(SocketAddr),
    Name(String, u16),
    Path(PathBuf),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Address(a) => write!(f, "{a}"),
            Self::Name(host, port) => write!(f, "{host}:{port}"),
            Self::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// What one URL of a RedLock set reaches: the master a set of sentinels names (`master`),
/// or the server(s) themselves.
#[derive(Debug, Default)]
struct Reach {
    master: Option<String>,
    endpoints: Vec<Endpoint>,
}

impl Reach {
    /// An endpoint both reach, if they are the same kind of thing (two sentinel URLs are one
    /// server only if they also name the same master).
    fn shared(&self, other: &Reach) -> Option<&Endpoint> {
        if self.master != other.master {
            return None;
        }
        self.endpoints.iter().find(|e| other.endpoints.contains(e))
    }
}

/// The addresses a URL names, without its password or database. `None` for a URL this cannot
/// read: the URL parser (on connect) reports it.
fn named_addresses(url: &str) -> Option<(Option<String>, Vec<ConnectionAddr>)> {
    let (scheme, rest) = url.split_once("://")?;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts);
    let each = |list: &str| -> Option<Vec<ConnectionAddr>> {
        list.split(',')
            .map(|h| {
                format!("redis://{h}")
                    .into_connection_info()
                    .ok()
                    .map(|i| i.addr().clone())
            })
            .collect()
    };
    match scheme {
        "redis" => Some((None, vec![url.into_connection_info().ok()?.addr().clone()])),
        "redis+cluster" => Some((None, each(rest.trim_end_matches('/'))?)),
        "redis+sentinel" => {
            let (list, path) = rest.split_once('/')?;
            let master = path.split('/').next().unwrap_or_default();
            Some((Some(master.to_owned()), each(list)?))
        }
        _ => None,
    }
}

/// Resolves what `url` reaches; names that do not resolve within `bound` count as written.
async fn reach(url: &str, bound: Duration) -> Reach {
    let Some((master, addresses)) = named_addresses(url) else {
        return Reach::default();
    };
    let mut endpoints = Vec::new();
    for address in addresses {
        let (host, port) = match address {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                (host, port)
            }
            ConnectionAddr::Unix(path) => {
                endpoints.push(Endpoint::Path(path));
                continue;
            }
            _ => continue,
        };
        let lookup = tokio::net::lookup_host((host.as_str(), port));
        if let Ok(Ok(resolved)) = tokio::time::timeout(bound, lookup).await {
            endpoints.extend(resolved.map(Endpoint::Address));
        }
        endpoints.push(Endpoint::Name(host.to_ascii_lowercase(), port));
    }
    Reach { master, endpoints }
}

/// RedLock: no two URLs may reach the same server, or a "majority" could be one server.
async fn check_distinct(urls: &[&str], bound: Duration) -> Result<(), InputError> {
    let reached = futures_util::future::join_all(urls.iter().map(|url| reach(url, bound))).await;
    for (j, later) in reached.iter().enumerate() {
        for (i, earlier) in reached[..j].iter().enumerate() {
            if let Some(address) = earlier.shared(later) {
                return Err(InputError::DuplicateServer {
                    first: crate::redact_url(urls[i]),
                    second: crate::redact_url(urls[j]),
                    address: address.to_string(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only IP literals and `localhost` (from the hosts file): no name server is asked.
    #[tokio::test]
    async fn urls_reaching_one_server_are_duplicates() {
        let bound = Duration::from_secs(2);
        for [a, b, c] in [
            [
                "redis://127.0.0.1:1",
                "redis://127.0.0.2:1",
                "redis://127.0.0.1:1",
            ],
            [
                "redis://:pw@127.0.0.1:1/0",
                "redis://127.0.0.2:1",
                "redis://localhost:1/2",
            ],
            [
                "redis://127.0.0.1",
                "redis://127.0.0.2:1",
                "redis://LocalHost:6379",
            ],
            [
                "redis://[::1]:1",
                "redis://127.0.0.2:1",
                "redis://[0:0::1]:1",
            ],
            [
                "redis+cluster://127.0.0.1:1,127.0.0.2:1",
                "redis://127.0.0.3:1",
                "redis://127.0.0.2:1",
            ],
            [
                "redis+sentinel://127.0.0.1:1/m",
                "redis://127.0.0.3:1",
                "redis+sentinel://:pw@127.0.0.2:1,localhost:1/m/2",
            ],
        ] {
            let e = check_distinct(&[a, b, c], bound).await.unwrap_err();
            let InputError::DuplicateServer { first, second, .. } = &e else {
                panic!("{a} {c}: {e}");
            };
            assert_eq!(
                (first.as_str(), second.as_str()),
                (&*crate::redact_url(a), &*crate::redact_url(c))
            );
            assert!(!e.to_string().contains("pw@"), "{e}");
        }
        for urls in [
            [
                "redis://127.0.0.1:1",
                "redis://127.0.0.1:2",
                "redis://127.0.0.1:3",
            ],
            [
                "redis://127.0.0.1:1",
                "redis://127.0.0.2:1",
                "redis://[::1]:2",
            ],
            [
                "redis+sentinel://127.0.0.1:1/m",
                "redis+sentinel://127.0.0.1:1/n",
                "redis://127.0.0.1:2",
            ],
            // Unreadable URLs are left to the URL parser.
            ["nope", "nope", "redis://127.0.0.1:1"],
        ] {
            assert_eq!(check_distinct(&urls, bound).await, Ok(()), "{urls:?}");
        }
    }

    /// The reader sees every URL a caller passes, before the URL parser does.
    #[test]
    fn reading_any_url_never_panics() {
        use proptest::prelude::*;
        let urls = prop_oneof![
            any::<String>(),
            "(redis|redis\\+cluster|redis\\+sentinel|rediss|unix)://[ -~]{0,40}",
        ];
        proptest::test_runner::TestRunner::new(proptest::test_runner::Config::with_cases(3_000))
            .run(&urls, |url| {
                let _ = named_addresses(&url);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn names_that_do_not_resolve_compare_as_written() {
        let name = |h: &str, p| Endpoint::Name(h.into(), p);
        let reach = |master: Option<&str>, endpoints| Reach {
            master: master.map(Into::into),
            endpoints,
        };
        let a = reach(None, vec![name("db.example", 1)]);
        assert!(a
            .shared(&reach(None, vec![name("db.example", 1)]))
            .is_some());
        assert!(a
            .shared(&reach(None, vec![name("db.example", 2)]))
            .is_none());
        assert!(a
            .shared(&reach(Some("m"), vec![name("db.example", 1)]))
            .is_none());
        assert!(a.shared(&Reach::default()).is_none());
        let (master, addrs) = named_addresses("redis+sentinel://:pw@S1:1,s2:2/m/3").unwrap();
        assert_eq!(master.as_deref(), Some("m"));
        assert_eq!(addrs.len(), 2);
    }
}
