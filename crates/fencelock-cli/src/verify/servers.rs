//! The servers of a verify run: throwaway ones of the chosen backend, started through the
//! test kit so that faults can be injected, or the user's (`--url`), plus a throwaway Redis
//! for the fenced register in every case (the resource the clients write to; it is never
//! faulted, since it stands for the user's database).

use std::net::SocketAddr;

use fencelock_testkit::{
    EtcdCluster, EtcdServer, Namespace, Persistence, PrivateNet, RedisCluster, RedisServer,
    SentinelSet, TestkitError, ZooKeeperEnsemble, ZooKeeperServer,
};

use super::args::{Backend, Fault};
use super::net::{Net, Probe};

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
    /// The private network of the network faults, if they run (after `servers`: fields drop
    /// in order, and the servers must stop before their namespaces go).
    pub net: Option<Net>,
    /// Network faults asked for that cannot run here after all, and why.
    pub unavailable: Vec<(Fault, String)>,
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
            net: None,
            unavailable: Vec::new(),
            register,
            description: format!("{backend:?} at {}", shown.join(" ")),
        });
    }
    let network: Vec<Fault> = faults
        .iter()
        .copied()
        .filter(|f| matches!(f, Fault::Partition | Fault::Netem))
        .collect();
    let mut unavailable = Vec::new();
    // Only a run with network faults gets a private network; if this process may not make
    // one, those faults are skipped with the reason and the servers run on loopback.
    let mut private = None;
    if !network.is_empty() {
        match PrivateNet::create() {
            Ok(net) => private = Some(net),
            Err(e) => unavailable.extend(network.iter().map(|&f| (f, e.to_string()))),
        }
    }
    let (servers, mut urls, description, mut net) =
        throwaway(backend, faults, private).map_err(|e| e.to_string())?;
    if let Some(n) = net.as_mut().filter(|_| network.contains(&Fault::Netem)) {
        if let Err(e) = prepare_delay(n, &mut urls) {
            unavailable.push((Fault::Netem, e));
        }
    }
    Ok(Deployment {
        urls,
        servers,
        net,
        unavailable,
        register,
        description,
    })
}

/// Sets up the delay for `netem`; with a proxy, the clients reach the server through it
/// (its `host:port` in their URLs becomes the proxy's).
fn prepare_delay(net: &mut Net, urls: &mut [String]) -> Result<(), String> {
    let direct = net.server.to_string();
    net.prepare_delay()?;
    let via = net.client_addr().to_string();
    for url in urls.iter_mut() {
        *url = url.replace(&direct, &via);
    }
    Ok(())
}

type Started = (Servers, Vec<String>, String, Option<Net>);

/// A namespace for the server that network faults hit, if there is a private network.
fn namespace(private: &mut Option<PrivateNet>) -> Result<Option<Namespace>, TestkitError> {
    let Some(net) = private.as_mut() else {
        return Ok(None);
    };
    let ns = net.add().map_err(|e| TestkitError::Start {
        detail: format!("a network namespace for the server: {e}"),
    })?;
    Ok(Some(ns))
}

/// The server that network faults hit, started in a namespace of `private`; `None` (and a
/// server on loopback) without a private network.
fn redis_in(
    private: &mut Option<PrivateNet>,
    builder: fencelock_testkit::RedisServerBuilder,
) -> Result<(RedisServer, Option<Namespace>), TestkitError> {
    match namespace(private)? {
        Some(ns) => Ok((builder.namespace(&ns).start()?, Some(ns))),
        None => Ok((builder.start()?, None)),
    }
}

/// The network faults' view of the deployment, if it has a private network.
fn net_of(
    private: Option<PrivateNet>,
    ns: Option<Namespace>,
    server: SocketAddr,
    label: &str,
    probe: Probe,
) -> Option<Net> {
    Some(Net {
        private: private?,
        ns: ns?,
        server,
        label: label.to_owned(),
        probe,
        delay: None,
    })
}

/// " in network namespace NAME" for the deployment's description.
fn inside(ns: &Option<Namespace>) -> String {
    ns.as_ref().map_or(String::new(), |ns| {
        format!(", in network namespace {}", ns.name)
    })
}

fn throwaway(
    backend: Backend,
    faults: &[Fault],
    private: Option<PrivateNet>,
) -> Result<Started, TestkitError> {
    let leader_kill = faults.contains(&Fault::LeaderKill);
    Ok(match backend {
        Backend::Redis => redis(faults, private)?,
        Backend::Redlock => redlock(private)?,
        Backend::Sentinel => {
            let set = SentinelSet::start()?;
            let url = set.url();
            let what = "a throwaway master, replica and three sentinels";
            (Servers::Sentinel(set), vec![url], what.to_owned(), None)
        }
        Backend::Cluster => {
            let cluster = RedisCluster::start()?;
            let url = cluster.url();
            let what = "a throwaway Redis Cluster: three masters with a replica each";
            (Servers::Cluster(cluster), vec![url], what.to_owned(), None)
        }
        Backend::Zookeeper if leader_kill => {
            let ensemble = ZooKeeperEnsemble::start()?;
            let url = ensemble.url();
            let what = "a throwaway ZooKeeper ensemble of three".to_owned();
            (Servers::Ensemble(ensemble), vec![url], what, None)
        }
        Backend::Zookeeper => zookeeper(private)?,
        Backend::Etcd if leader_kill => {
            let cluster = EtcdCluster::start()?;
            let url = cluster.url();
            let what = "a throwaway etcd cluster of three members".to_owned();
            (Servers::EtcdCluster(cluster), vec![url], what, None)
        }
        Backend::Etcd => etcd(private)?,
    })
}

/// One Redis, in a namespace of `private` if there is one.
fn redis(faults: &[Fault], mut private: Option<PrivateNet>) -> Result<Started, TestkitError> {
    // `appendfsync always` only when the run restarts the server with its data.
    let persistence = if faults.contains(&Fault::ServerRestartAof) {
        Persistence::AofAlways
    } else {
        Persistence::None
    };
    let builder = RedisServer::builder().persistence(persistence);
    let (server, ns) = redis_in(&mut private, builder)?;
    let url = server.url();
    let mut what = match persistence {
        Persistence::AofAlways => "one throwaway redis-server (appendfsync always)",
        _ => "one throwaway redis-server (no persistence)",
    }
    .to_owned();
    what.push_str(&inside(&ns));
    let net = net_of(private, ns, server.addr(), "redis-server", Probe::Redis);
    Ok((Servers::Redis(server), vec![url], what, net))
}

/// RedLock's three servers; only the first, the one the network faults hit, gets a
/// namespace.
fn redlock(mut private: Option<PrivateNet>) -> Result<Started, TestkitError> {
    let (first, ns) = redis_in(&mut private, RedisServer::builder())?;
    let mut servers = vec![first];
    for _ in 1..3 {
        servers.push(RedisServer::start()?);
    }
    let urls = servers.iter().map(RedisServer::url).collect();
    let mut what = "RedLock over three throwaway redis-servers (no persistence)".to_owned();
    if let Some(ns) = &ns {
        what.push_str(&format!(", the first in network namespace {}", ns.name));
    }
    let label = "redis-server 1 of 3 (a minority)";
    let net = net_of(private, ns, servers[0].addr(), label, Probe::Redis);
    Ok((Servers::RedLock(servers), urls, what, net))
}

/// One standalone ZooKeeper server, in a namespace of `private` if there is one.
fn zookeeper(mut private: Option<PrivateNet>) -> Result<Started, TestkitError> {
    let ns = namespace(&mut private)?;
    let builder = ZooKeeperServer::builder();
    let server = match &ns {
        Some(ns) => builder.namespace(ns).start()?,
        None => builder.start()?,
    };
    let url = server.url();
    let what = format!("one throwaway ZooKeeper server{}", inside(&ns));
    let net = net_of(private, ns, server.addr(), "zookeeper", Probe::ZooKeeper);
    Ok((Servers::ZooKeeper(server), vec![url], what, net))
}

/// One etcd member, in a namespace of `private` if there is one.
fn etcd(mut private: Option<PrivateNet>) -> Result<Started, TestkitError> {
    let ns = namespace(&mut private)?;
    let server = match &ns {
        Some(ns) => EtcdServer::start_in(ns)?,
        None => EtcdServer::start()?,
    };
    let url = server.url();
    let what = format!("one throwaway etcd member{}", inside(&ns));
    let net = net_of(private, ns, server.addr(), "etcd", Probe::Etcd);
    Ok((Servers::Etcd(server), vec![url], what, net))
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
