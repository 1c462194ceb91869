//! Every lock of one deployment, a page at a time: `SCAN` (never `KEYS`, which blocks the
//! server and answers every key at once) over `fencelock:{*`, each master of a Cluster in
//! turn, then each name's status script, all of a page's at once on the multiplexed
//! connection. Only reads; memory is bounded by a page.
//!
//! A name is listed by its lock hash `fencelock:{name}`, or, when its holder's lease ran out
//! while others waited (no hash, a queue), by its queue `fencelock:{name}:queue`. `SCAN`
//! returns a key that exists the whole time at least once, and may return one twice (a
//! Cluster's resharding, a rehash): a name may then be listed twice, never left out.

use std::sync::Arc;

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use super::exec::{Conn, Resend};
use super::RedisBackend;
use crate::backend::redis::keys::LockKeys;
use crate::backend::{Page, RawStatus};
use crate::error::Error;
use crate::name::LockName;

/// The keys a listing scans: `fencelock:{*` (the brace written as an escape).
const SCAN_MATCH: &str = "fencelock:\u{7b}*";

/// How many keys one `SCAN` step looks at.
const SCAN_COUNT: usize = 1000;

/// The name of a lock's hash or queue key; `None` for its other keys and anything else.
fn name_of(key: &[u8]) -> Option<(&str, bool)> {
    let key = std::str::from_utf8(key).ok()?;
    let rest = key.strip_prefix("fencelock:{")?;
    let (name, suffix) = rest.split_once('}')?;
    match suffix {
        "" => Some((name, false)),
        ":queue" => Some((name, true)),
        _ => None,
    }
}

/// A cursor `"<node>:<scan cursor>"` (node: the master's index in address order; 0 when
/// there is one master).
fn parse_cursor(cursor: Option<&str>) -> Option<(usize, u64)> {
    match cursor {
        None => Some((0, 0)),
        Some(c) => {
            let (node, scan) = c.split_once(':')?;
            Some((node.parse().ok()?, scan.parse().ok()?))
        }
    }
}

impl RedisBackend {
    /// One page of the deployment's locks (see [`crate::backend::LockService::list`]).
    pub(crate) async fn list(&self, cursor: Option<&str>) -> Result<Page, Error> {
        let Some((node, at)) = parse_cursor(cursor) else {
            return Err(self.bad_cursor(cursor));
        };
        let mut scan = redis::cmd("SCAN");
        scan.arg(at)
            .arg("MATCH")
            .arg(SCAN_MATCH)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let (masters, reply) = match &self.conn {
            Conn::Master(_) => (1, self.query(None, Resend::Safe, &scan).await?),
            Conn::Cluster(cluster) => {
                let masters = self.masters().await?;
                let Some((host, port)) = masters.get(node).cloned() else {
                    return Err(self.bad_cursor(cursor));
                };
                let route =
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                let mut conn = cluster.cmd.clone();
                let sent = self.bounded(None, conn.route_command(scan, route)).await?;
                (
                    masters.len(),
                    sent.and_then(|v| redis::from_redis_value(v).map_err(Into::into)),
                )
            }
        };
        let (next, keys): (u64, Vec<Vec<u8>>) = reply.map_err(|e| self.error(None, e))?;
        let statuses = self.statuses(&keys).await?;
        let next = match (next, node + 1 < masters) {
            (0, false) => None,
            (0, true) => Some(format!("{}:0", node + 1)),
            (n, _) => Some(format!("{node}:{n}")),
        };
        Ok(Page { statuses, next })
    }

    /// The status of each lock a page's keys name, read at once.
    async fn statuses(&self, keys: &[Vec<u8>]) -> Result<Vec<(String, RawStatus)>, Error> {
        let mut names: Vec<(Arc<LockName>, bool)> = Vec::new();
        for (name, by_queue) in keys.iter().filter_map(|k| name_of(k)) {
            // A name no fencelock client could have written (too long) is not a lock.
            if let Ok(lock) = LockName::new(name) {
                if !names.iter().any(|(n, _)| n.name == name) {
                    names.push((Arc::new(lock), by_queue));
                }
            }
        }
        let reads = names
            .iter()
            .map(|(name, _)| async move { self.status(&LockKeys::of(name)).await });
        let read = futures_util::future::join_all(reads).await;
        let mut statuses = Vec::with_capacity(names.len());
        for ((name, by_queue), status) in names.into_iter().zip(read) {
            let status = status?;
            // Listed by its hash when it has one; a queue without holders or waiters is
            // nothing.
            let listed = match by_queue {
                true => !status.held && !status.waiters.is_empty(),
                false => status.held || !status.waiters.is_empty(),
            };
            if listed {
                statuses.push((name.name.clone(), status));
            }
        }
        Ok(statuses)
    }

    /// A Cluster's masters, in address order (`CLUSTER NODES`).
    async fn masters(&self) -> Result<Vec<(String, u16)>, Error> {
        let Conn::Cluster(cluster) = &self.conn else {
            return Ok(Vec::new());
        };
        let mut conn = cluster.cmd.clone();
        let nodes: Result<String, _> = self
            .bounded(
                None,
                redis::cmd("CLUSTER").arg("NODES").query_async(&mut conn),
            )
            .await?;
        let nodes = nodes.map_err(|e| self.error(None, e))?;
        let mut masters: Vec<(String, u16)> = nodes
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let flags = fields.get(2)?;
                if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                    return None;
                }
                let addr = fields.get(1)?.split('@').next()?;
                let (host, port) = addr.rsplit_once(':')?;
                Some((host.to_owned(), port.parse().ok()?))
            })
            .collect();
        masters.sort();
        Ok(masters)
    }

    fn bad_cursor(&self, cursor: Option<&str>) -> Error {
        Error::Protocol {
            lock: None,
            server: self.server.clone(),
            detail: format!("listing cursor {cursor:?} is not one this client made"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hashes_and_queues_name_locks() {
        assert_eq!(name_of(b"fencelock:{a:b}"), Some(("a:b", false)));
        assert_eq!(name_of(b"fencelock:{a}:queue"), Some(("a", true)));
        assert_eq!(name_of(b"fencelock:{a}:fence"), None);
        assert_eq!(name_of(b"fencelock:{a}:waiting"), None);
        assert_eq!(name_of(b"other"), None);
        assert_eq!(parse_cursor(Some("2:17")), Some((2, 17)));
        assert_eq!(parse_cursor(Some("x")), None);
        assert_eq!(SCAN_MATCH, "fencelock:\x7b*");
    }
}
