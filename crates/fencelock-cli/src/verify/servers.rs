//! The servers of a verify run: throwaway ones of the chosen backend, started through the
//! test kit so that faults can be injected, or the user's (`--url`), plus a throwaway Redis
//! for the fenced register in every case (the resource the clients write to; it is never
//! faulted, since it stands for the user's database).

use fencelock_testkit::{
    EtcdCluster, EtcdServer, Persistence, RedisCluster, RedisServer, SentinelSet, TestkitError,
    ZooKeeperEnsemble, ZooKeeperServer,
};

use super::args::{Backend, Fault};

/// The lock service's throwaway servers.
pub enum Servers {
    /// The user's servers (`--url`): no server faults.
    External,
    /// One Redis.
    Redis(RedisServer),
    /// Three independent Redis servers.
    RedLock(Vec<RedisServer>),
    /// A master, a replica and three sentinels.
    Sentinel(SentinelSet),
    /// Three masters with a replica each.
    Cluster(RedisCluster),
    /// One ZooKeeper server.
    ZooKeeper(ZooKeeperServer),
    /// Three ZooKeeper servers.
    Ensemble(ZooKeeperEnsemble),
    /// One etcd member.
    Etcd(EtcdServer),
    /// Three etcd members.
    EtcdCluster(EtcdCluster),
}

/// Where a run's lock and register live.
pub struct Deployment {
    /// The lock service's URLs, as the clients take them.
    pub urls: Vec<String>,
    /// Its servers.
    pub servers: Servers,
    /// The fenced register's Redis.
    pub register: RedisServer,
    /// One line for the report, e.g. "RedLock over 3 throwaway redis-server processes".
    pub description: String,
}

/// Starts the deployment for `backend` (blocking: a JVM takes seconds), or uses `urls`.
pub fn start(backend: Backend, faults: &[Fault], urls: &[String]) -> Result<Deployment, String> {
    let register = RedisServer::start().map_err(|e| format!("the register's Redis: {e}"))?;
    if !urls.is_empty() {
        let shown: Vec<String> = urls.iter().map(|u| fencelock::redact_url(u)).collect();
        return Ok(Deployment {
            urls: urls.to_vec(),
            servers: Servers::External,
            register,
            description: format!("{backend:?} at {}", shown.join(" ")),
        });
    }
    let (servers, urls, description) = throwaway(backend, faults).map_err(|e| e.to_string())?;
    Ok(Deployment {
        urls,
        servers,
        register,
        description,
    })
}

type Started = (Servers, Vec<String>, String);

fn throwaway(backend: Backend, faults: &[Fault]) -> Result<Started, TestkitError> {
    Ok(match backend {
        Backend::Redis => {
            // `appendfsync always` only when the run restarts the server with its data.
            let persistence = if faults.contains(&Fault::ServerRestartAof) {
                Persistence::AofAlways
            } else {
                Persistence::None
            };
            let server = RedisServer::builder().persistence(persistence).start()?;
            let url = server.url();
            let what = match persistence {
                Persistence::AofAlways => "one throwaway redis-server (appendfsync always)",
                _ => "one throwaway redis-server (no persistence)",
            };
            (Servers::Redis(server), vec![url], what.to_owned())
        }
        Backend::Redlock => {
            let servers = (0..3)
                .map(|_| RedisServer::start())
                .collect::<Result<Vec<_>, _>>()?;
            let urls = servers.iter().map(RedisServer::url).collect();
            let what = "RedLock over three throwaway redis-servers (no persistence)";
            (Servers::RedLock(servers), urls, what.to_owned())
        }
        Backend::Sentinel => {
            let set = SentinelSet::start()?;
            let url = set.url();
            let what = "a throwaway master, replica and three sentinels";
            (Servers::Sentinel(set), vec![url], what.to_owned())
        }
        Backend::Cluster => {
            let cluster = RedisCluster::start()?;
            let url = cluster.url();
            let what = "a throwaway Redis Cluster: three masters with a replica each";
            (Servers::Cluster(cluster), vec![url], what.to_owned())
        }
        Backend::Zookeeper if faults.contains(&Fault::LeaderKill) => {
            let ensemble = ZooKeeperEnsemble::start()?;
            let url = ensemble.url();
            let what = "a throwaway ZooKeeper ensemble of three";
            (Servers::Ensemble(ensemble), vec![url], what.to_owned())
        }
        Backend::Zookeeper => {
            let server = ZooKeeperServer::start()?;
            let url = server.url();
            let what = "one throwaway ZooKeeper server";
            (Servers::ZooKeeper(server), vec![url], what.to_owned())
        }
        Backend::Etcd if faults.contains(&Fault::LeaderKill) => {
            let cluster = EtcdCluster::start()?;
            let url = cluster.url();
            let what = "a throwaway etcd cluster of three members";
            (Servers::EtcdCluster(cluster), vec![url], what.to_owned())
        }
        Backend::Etcd => {
            let server = EtcdServer::start()?;
            let url = server.url();
            let what = "one throwaway etcd member";
            (Servers::Etcd(server), vec![url], what.to_owned())
        }
    })
}

impl Servers {
    /// The deployment's state after a run, where it can change by itself: which server the
    /// sentinels name as master (a failover the run did not ask for shows here).
    pub fn state(&self) -> Option<String> {
        match self {
            Servers::Sentinel(set) => Some(format!(
                "the sentinels name :{} as master",
                set.master_port().unwrap_or_default()
            )),
            _ => None,
        }
    }

    /// Every Redis server of the lock service that holds lock keys (masters and RedLock
    /// members; not replicas or sentinels).
    pub fn redis_masters(&self) -> Vec<&RedisServer> {
        match self {
            Servers::Redis(s) => vec![s],
            Servers::RedLock(list) => list.iter().collect(),
            Servers::Sentinel(set) => {
                let port = set.master_port();
                set.servers
                    .iter()
                    .filter(|s| Some(s.port()) == port)
                    .collect()
            }
            Servers::Cluster(cluster) => cluster
                .topology()
                .iter()
                .filter(|n| n.master)
                .filter_map(|n| cluster.node(n.port))
                .collect(),
            _ => Vec::new(),
        }
    }
}
