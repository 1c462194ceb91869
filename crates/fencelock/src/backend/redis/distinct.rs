//! RedLock over the same server twice is a "majority" of one: the URLs of a RedLock set
//! must reach distinct servers. Host names are resolved for the comparison (`localhost` and
//! `127.0.0.1` are one server); two different addresses that lead to one server (a proxy, a
//! host's LAN address beside loopback) cannot be told apart.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use redis::ConnectionAddr;

use super::url::{parse_target, Target};
use crate::error::InputError;
use crate::redact::redact_url;

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

/// The addresses a parsed URL names (its password and database do not matter), and the
/// master's name for a set of sentinels.
fn named_addresses(target: &Target) -> (Option<String>, Vec<ConnectionAddr>) {
    let addrs = |infos: &[redis::ConnectionInfo]| infos.iter().map(|i| i.addr().clone()).collect();
    match target {
        Target::Single(info) => (None, vec![info.addr().clone()]),
        Target::Cluster(nodes) => (None, addrs(nodes)),
        Target::Sentinel {
            sentinels, master, ..
        } => (Some(master.clone()), addrs(sentinels)),
    }
}

/// Resolves what `target` reaches; names that do not resolve within `bound` count as
/// written.
async fn reach(target: &Target, bound: Duration) -> Reach {
    let (master, addresses) = named_addresses(target);
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
/// Reads every URL with the one URL parser (an input error for a malformed one), then
/// resolves the names, at most `bound` each.
pub(crate) async fn check_distinct(urls: &[&str], bound: Duration) -> Result<(), InputError> {
    let targets = urls
        .iter()
        .map(|url| parse_target(url))
        .collect::<Result<Vec<_>, _>>()?;
    let reached = futures_util::future::join_all(targets.iter().map(|t| reach(t, bound))).await;
    for (j, later) in reached.iter().enumerate() {
        for (i, earlier) in reached[..j].iter().enumerate() {
            if let Some(address) = earlier.shared(later) {
                return Err(InputError::DuplicateServer {
                    first: redact_url(urls[i]),
                    second: redact_url(urls[j]),
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
                (&*redact_url(a), &*redact_url(c))
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
        ] {
            assert_eq!(check_distinct(&urls, bound).await, Ok(()), "{urls:?}");
        }
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
        let target = parse_target("redis+sentinel://:pw@S1:1,s2:2/m/3").unwrap();
        let (master, addrs) = named_addresses(&target);
        assert_eq!(master.as_deref(), Some("m"));
        assert_eq!(addrs.len(), 2);
    }
}
