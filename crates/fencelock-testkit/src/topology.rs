//! Several servers working together: a Sentinel set and a Redis Cluster.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::resp::Reply;
use crate::{find_program, RedisServer, TestkitError};

fn wait_until(what: &str, secs: u64, mut ok: impl FnMut() -> bool) -> Result<(), TestkitError> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        if Instant::now() > deadline {
            return Err(TestkitError::Start {
                detail: format!("{what}: not within {secs} s"),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn text(reply: Result<Reply, crate::RespError>) -> String {
    reply.ok().and_then(|r| r.text()).unwrap_or_default()
}

/// One master, one replica and three sentinels watching them as `mymaster`.
#[derive(Debug)]
pub struct SentinelSet {
    /// The servers: `servers[0]` starts as the master, `servers[1]` as its replica.
    pub servers: Vec<RedisServer>,
    /// The sentinels.
    pub sentinels: Vec<RedisServer>,
}

impl SentinelSet {
    /// The name the sentinels know the master by.
    pub const MASTER: &'static str = "mymaster";

    /// Starts the servers, waits for replication, then the sentinels, and waits until every
    /// sentinel knows the replica and the other sentinels (so that a failover can happen).
    pub fn start() -> Result<Self, TestkitError> {
        let master = RedisServer::start()?;
        let replica = RedisServer::builder()
            .config("replicaof", &format!("127.0.0.1 {}", master.port()))
            .start()?;
        wait_until("replica in sync", 10, || {
            replica.info_field("master_link_status").as_deref() == Some("up")
        })?;
        let lines = vec![
            format!(
                "sentinel monitor {} 127.0.0.1 {} 2",
                Self::MASTER,
                master.port()
            ),
            format!("sentinel down-after-milliseconds {} 1000", Self::MASTER),
            format!("sentinel failover-timeout {} 5000", Self::MASTER),
        ];
        let sentinels = (0..3)
            .map(|_| RedisServer::builder().sentinel(&lines).start())
            .collect::<Result<Vec<_>, _>>()?;
        for s in &sentinels {
            wait_until("sentinels see the replica and each other", 20, || {
                let replicas = s.command(&["SENTINEL", "REPLICAS", Self::MASTER]);
                let others = s.command(&["SENTINEL", "SENTINELS", Self::MASTER]);
                matches!(replicas, Ok(Reply::Array(Some(r))) if !r.is_empty())
                    && matches!(others, Ok(Reply::Array(Some(o))) if o.len() >= 2)
            })?;
        }
        Ok(Self {
            servers: vec![master, replica],
            sentinels,
        })
    }

    /// `redis+sentinel://127.0.0.1:A,127.0.0.1:B,127.0.0.1:C/mymaster`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        format!("redis+sentinel://{}/{}", hosts.join(","), Self::MASTER)
    }

    /// The port of the master the sentinels name now.
    pub fn master_port(&self) -> Option<u16> {
        let reply = self.sentinels[0]
            .command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::MASTER])
            .ok()?;
        match reply {
            Reply::Array(Some(items)) => items.get(1)?.text()?.parse().ok(),
            _ => None,
        }
    }

    /// `SENTINEL FAILOVER`, and waits until the sentinels name the other server and it acts
    /// as the master.
    pub fn failover(&self) -> Result<u16, TestkitError> {
        let old = self.master_port();
        let reply = self.sentinels[0].command(&["SENTINEL", "FAILOVER", Self::MASTER]);
        if let Err(e) = reply {
            return Err(TestkitError::Start {
                detail: format!("SENTINEL FAILOVER: {e}"),
            });
        }
        wait_until("failover", 20, || {
            let now = self.master_port();
            now.is_some() && now != old && {
                let server = self.servers.iter().find(|s| Some(s.port()) == now);
                server.and_then(|s| s.info_field("role")).as_deref() == Some("master")
            }
        })?;
        Ok(self.master_port().unwrap_or_default())
    }
}

/// A node of a cluster as `CLUSTER NODES` describes it.
#[derive(Debug, Clone)]
pub struct ClusterNode {
    /// Node id.
    pub id: String,
    /// Port on 127.0.0.1.
    pub port: u16,
    /// Whether it is a master.
    pub master: bool,
    /// The id of its master (replicas).
    pub master_id: Option<String>,
}

/// A Redis Cluster of 3 masters with one replica each.
#[derive(Debug)]
pub struct RedisCluster {
    /// All nodes.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts six nodes and joins them with `redis-cli --cluster create`.
    pub fn start() -> Result<Self, TestkitError> {
        let cli =
            find_program("redis-cli", "FENCELOCK_REDIS_CLI").ok_or(TestkitError::Missing {
                program: "redis-cli",
                hint: "install it (Debian: apt-get install redis-tools) or set FENCELOCK_REDIS_CLI",
            })?;
        let nodes = (0..6)
            .map(|_| {
                RedisServer::builder()
                    .config("cluster-enabled", "yes")
                    .config("cluster-config-file", "nodes.conf")
                    .config("cluster-node-timeout", "2000")
                    .start()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new(cli)
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()?;
        if !out.status.success() {
            return Err(TestkitError::Start {
                detail: format!(
                    "redis-cli --cluster create: {}",
                    String::from_utf8_lossy(&out.stdout)
                ),
            });
        }
        let cluster = Self { nodes };
        for node in &cluster.nodes {
            wait_until("cluster state ok", 30, || {
                text(node.command(&["CLUSTER", "INFO"])).contains("cluster_state:ok")
            })?;
            // Replicas must be in sync before they can acknowledge writes or take over.
            if node.info_field("role").as_deref() == Some("slave") {
                wait_until("replica in sync", 30, || {
                    node.info_field("master_link_status").as_deref() == Some("up")
                })?;
            }
        }
        Ok(cluster)
    }

    /// `redis+cluster://127.0.0.1:A,127.0.0.1:B,...`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The topology as the first reachable node sees it (roles as each node reports its own).
    pub fn topology(&self) -> Vec<ClusterNode> {
        let listing = self
            .nodes
            .iter()
            .map(|n| text(n.command(&["CLUSTER", "NODES"])))
            .find(|t| !t.is_empty())
            .unwrap_or_default();
        listing
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split(' ').collect();
                let port = f.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
                let flags = f.get(2)?;
                // Gossip can lag behind a role change: ask the node itself when we can.
                let master = match self.node(port).and_then(|n| n.info_field("role")) {
                    Some(role) => role == "master",
                    None => flags.contains("master"),
                };
                Some(ClusterNode {
                    id: f[0].to_owned(),
                    port,
                    master,
                    master_id: f.get(3).filter(|m| **m != "-").map(|m| m.to_string()),
                })
            })
            .collect()
    }

    /// The node on `port`.
    pub fn node(&self, port: u16) -> Option<&RedisServer> {
        self.nodes.iter().find(|n| n.port() == port)
    }

    /// The master serving `slot` now.
    pub fn master_of(&self, slot: u16) -> Option<&RedisServer> {
        let slots = self
            .nodes
            .iter()
            .find_map(|n| n.command(&["CLUSTER", "SLOTS"]).ok())?;
        let Reply::Array(Some(ranges)) = slots else {
            return None;
        };
        for range in ranges {
            let Reply::Array(Some(r)) = range else {
                continue;
            };
            let (Some(lo), Some(hi)) = (
                r.first().and_then(Reply::int),
                r.get(1).and_then(Reply::int),
            ) else {
                continue;
            };
            if (lo..=hi).contains(&i64::from(slot)) {
                let Some(Reply::Array(Some(master))) = r.get(2) else {
                    continue;
                };
                let port = master.get(1).and_then(Reply::int)? as u16;
                return self.node(port);
            }
        }
        None
    }

    /// The slot of a key, as the cluster computes it.
    pub fn slot(&self, key: &str) -> u16 {
        self.nodes[0]
            .command(&["CLUSTER", "KEYSLOT", key])
            .ok()
            .and_then(|r| r.int())
            .unwrap_or(0) as u16
    }

    /// Moves `slot` with its keys to the master on `to` (IMPORTING/MIGRATING, MIGRATE, then
    /// SETSLOT NODE on every master), as `redis-cli --cluster reshard` does.
    pub fn migrate_slot(&self, slot: u16, to: u16) -> Result<(), TestkitError> {
        let fail = |what: &str, e: String| TestkitError::Start {
            detail: format!("{what}: {e}"),
        };
        let topology = self.topology();
        let from = self
            .master_of(slot)
            .ok_or_else(|| fail("slot owner", "unknown".into()))?;
        let id = |port: u16| {
            topology
                .iter()
                .find(|n| n.port == port)
                .map(|n| n.id.clone())
                .unwrap_or_default()
        };
        let target = self
            .node(to)
            .ok_or_else(|| fail("target", "no such node".into()))?;
        let slot_s = slot.to_string();
        let (from_id, to_id) = (id(from.port()), id(to));
        target
            .command(&["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id])
            .map_err(|e| fail("IMPORTING", e.to_string()))?;
        from.command(&["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id])
            .map_err(|e| fail("MIGRATING", e.to_string()))?;
        loop {
            let keys = match from.command(&["CLUSTER", "GETKEYSINSLOT", &slot_s, "100"]) {
                Ok(Reply::Array(Some(keys))) => {
                    keys.iter().filter_map(Reply::text).collect::<Vec<_>>()
                }
                other => return Err(fail("GETKEYSINSLOT", format!("{other:?}"))),
            };
            if keys.is_empty() {
                break;
            }
            let port = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            from.command(&args)
                .map_err(|e| fail("MIGRATE", e.to_string()))?;
        }
        for node in topology.iter().filter(|n| n.master) {
            if let Some(server) = self.node(node.port) {
                server
                    .command(&["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id])
                    .map_err(|e| fail("SETSLOT NODE", e.to_string()))?;
            }
        }
        Ok(())
    }

    /// `CLUSTER FAILOVER` on a replica of the master on `port`; waits until it is the master.
    pub fn failover(&self, port: u16) -> Result<u16, TestkitError> {
        let topology = self.topology();
        let master_id = topology
            .iter()
            .find(|n| n.port == port)
            .map(|n| n.id.clone())
            .unwrap_or_default();
        let replica = topology
            .iter()
            .find(|n| n.master_id.as_deref() == Some(master_id.as_str()))
            .and_then(|n| self.node(n.port))
            .ok_or_else(|| TestkitError::Start {
                detail: format!("no replica of {port}"),
            })?;
        replica
            .command(&["CLUSTER", "FAILOVER"])
            .map_err(|e| TestkitError::Start {
                detail: format!("CLUSTER FAILOVER: {e}"),
            })?;
        wait_until("cluster failover", 20, || {
            replica.info_field("role").as_deref() == Some("master")
        })?;
        Ok(replica.port())
    }
}
