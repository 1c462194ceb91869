//! Real servers for fencelock's tests, demo and benchmarks: Redis, ZooKeeper, etcd and
//! PostgreSQL.
//!
//! [`RedisServer`] starts a `redis-server` process on a free loopback port (never 6379) in a
//! temporary folder, and can pause (SIGSTOP/SIGCONT), kill and restart it on the same port. The
//! process is stopped by its PID when the handle drops, and its log is printed to stderr when
//! the handle drops during a panic (a failing test).
//!
//! ```
//! use fencelock_testkit::RedisServer;
//!
//! let mut server = RedisServer::start()?;          // a throwaway server on a free port
//! assert_ne!(server.port(), 6379);
//! server.command(&["SET", "k", "v"])?;
//! assert_eq!(server.command(&["GET", "k"])?.text().as_deref(), Some("v"));
//!
//! server.restart()?;                               // same port; no persistence by default
//! assert_eq!(server.command(&["EXISTS", "k"])?.int(), Some(0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`SentinelSet`] and [`RedisCluster`] start whole topologies (a master, a replica and three
//! sentinels; three masters with a replica each) and fail them over on demand.
//!
//! # ZooKeeper
//!
//! [`ZooKeeperServer`] runs Debian's ZooKeeper (`apt-get install zookeeper
//! default-jre-headless`) under `java` in the same way: a standalone server on a free loopback
//! port, with its data and log in a temporary folder, that can pause, be killed and restart
//! with its data. Its tick is 200 ms and it grants session timeouts from 400 ms to 60 s
//! ([`zookeeper::MIN_SESSION_TIMEOUT_MS`], [`zookeeper::MAX_SESSION_TIMEOUT_MS`]), so that
//! tests of session expiry stay short. [`ZooKeeperEnsemble`] starts three members and tells
//! which one leads; each member is a [`ZooKeeperServer`] to kill, pause or restart.
//! [`four_letter`] sends a four-letter word (`ruok`, `srvr`, `mntr`, …) to a server.
//!
//! ```no_run
//! use fencelock_testkit::{ZooKeeperEnsemble, ZooKeeperServer};
//! use std::time::Duration;
//!
//! let server = ZooKeeperServer::start()?;              // JVM: about a second
//! assert_eq!(server.mode().as_deref(), Some("standalone"));
//! assert_eq!(server.url(), format!("zk://127.0.0.1:{}", server.port()));
//!
//! let mut ensemble = ZooKeeperEnsemble::start()?;      // one leader, two followers
//! let leader = ensemble.leader().expect("a leader");
//! ensemble.member_mut(leader).kill();
//! let new_leader = ensemble.wait_for_leader(Duration::from_secs(30))?;
//! assert_ne!(new_leader, leader);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`CuratorLock`] runs Apache Curator's `InterProcessMutex` (Debian's
//! `libcurator-recipes-java`) in a Java process of its own, driven line by line, so that
//! tests can check that fencelock's ZooKeeper locks and Curator's exclude each other;
//! [`CuratorLatch`] runs Curator's `LeaderLatch` the same way, for elections:
//!
//! ```no_run
//! use fencelock_testkit::{CuratorLock, ZooKeeperServer};
//! use std::time::Duration;
//!
//! let server = ZooKeeperServer::start()?;
//! let mut holder = CuratorLock::spawn(&server.connect_string(), "/locks/job")?;
//! let node = holder.wait_acquired(Duration::from_secs(30))?;
//! assert!(node.starts_with("/locks/job/_c_"));            // …/_c_<uuid>-lock-0000000000
//! holder.release()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # PostgreSQL
//!
//! [`PostgresServer`] runs Debian's PostgreSQL (`apt-get install postgresql`) in a temporary
//! folder on a free loopback port (as the `postgres` user when the kit runs as root), for the
//! fenced-SQL example and tests. [`PgBouncer`] (`apt-get install pgbouncer`) runs in front
//! of one on a free loopback port, in transaction pooling and otherwise default settings.
//!
//! # Network faults
//!
//! [`TcpProxy`] is a TCP proxy on loopback, run by threads of the test process, that a test
//! puts between a client and a server. It forwards each connection as it is, until the test
//! tells it to drop the server's replies on the connections open now
//! ([`TcpProxy::swallow_replies`]: a request reaches the server, its answer never reaches the
//! client) and then to close them ([`TcpProxy::cut`]). Connections opened afterwards are
//! forwarded again, so that a client reconnects within its session: this is how a test loses
//! the reply of a ZooKeeper `create` that the server did carry out. While
//! [`TcpProxy::refuse_new`] is set, new connections are closed at once: with a cut, the client
//! is partitioned from a server that keeps running (and expires its session).
//!
//! ```no_run
//! use fencelock_testkit::{TcpProxy, ZooKeeperServer};
//!
//! let server = ZooKeeperServer::start()?;
//! let proxy = TcpProxy::start(server.port())?;
//! let url = format!("zk://{}", proxy.connect_string());  // clients connect through it
//! // … a client connects to `url` …
//! proxy.swallow_replies();   // requests still reach the server; no answer comes back
//! // … the client sends a request; the test sees its effect on the server directly …
//! proxy.cut();               // the client's connection ends; it reconnects through the proxy
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`PrivateNet`] (needs CAP_NET_ADMIN) is a bridge on a free private /24 with one network
//! namespace per server; [`RedisServerBuilder::namespace`],
//! [`ZooKeeperServerBuilder::namespace`] and [`EtcdServer::start_in`] start a server inside
//! one, bound to its address. [`PrivateNet::partition`] cuts a member off from the host and
//! the other members by blackhole routes (never by a link set down, which would send its
//! address out by the default route), [`PrivateNet::heal`] undoes it, and everything is
//! removed by name when the handle drops. [`TcpProxy::set_latency`] delays traffic where the
//! kernel has no `sch_netem`.
//!
//! ```no_run
//! use fencelock_testkit::{PrivateNet, RedisServer};
//!
//! let mut net = PrivateNet::create()?;                 // fails with the reason, e.g. no CAP_NET_ADMIN
//! let ns = net.add()?;                                  // 10.23x.y.2 in namespace fencelock-…
//! let server = RedisServer::builder().namespace(&ns).start()?;
//! net.partition(&ns)?;                                  // the host's PING now fails
//! assert!(server.command(&["PING"]).is_err());
//! net.heal(&ns)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # etcd
//!
//! [`EtcdServer`] runs Debian's etcd (`apt-get install etcd-server`) as a one-member cluster
//! on free loopback ports with its data in a temporary folder; it can pause, be killed and
//! restart with its data. Members run with a 50 ms heartbeat and a 500 ms election timeout,
//! so the smallest lease TTL etcd grants is 1 s. [`EtcdCluster`] starts three members and
//! tells which one leads. [`EtcdctlLock`] holds a lock with `etcdctl lock NAME -- CMD`
//! (`apt-get install etcd-client`), and [`EtcdctlElect`] campaigns or observes with
//! `etcdctl elect`, for the interop tests.
//!
//! ```no_run
//! use fencelock_testkit::{EtcdCluster, EtcdServer, EtcdctlLock};
//! use std::time::Duration;
//!
//! let server = EtcdServer::start()?;
//! assert_eq!(server.url(), format!("etcd://127.0.0.1:{}", server.port()));
//! let mut holder = EtcdctlLock::spawn(&server.endpoints(), "/fencelock/job", 5)?;
//! let (key, revision) = holder.wait_held(Duration::from_secs(10))?;
//! assert!(key.starts_with("/fencelock/job/") && revision > 0);
//! holder.release()?;
//!
//! let mut cluster = EtcdCluster::start()?;
//! let leader = cluster.leader().expect("a leader");
//! cluster.member_mut(leader).kill();
//! assert_ne!(cluster.wait_for_leader(Duration::from_secs(30))?, leader);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The test kit's own blocking calls (starting a server, waiting for a Curator process) should
//! not run on an async runtime thread that a ZooKeeper client's session needs: use
//! `tokio::task::block_in_place` or `spawn_blocking`.

mod curator;
pub mod etcd;
mod netns;
mod pgbouncer;
mod postgres;
mod proxy;
mod redis;
mod resp;
mod topology;
pub mod zookeeper;

pub use curator::{curator_bench, CuratorLatch, CuratorLock, CuratorLockBuilder};
pub use etcd::{etcdctl, EtcdCluster, EtcdServer, EtcdctlElect, EtcdctlLock};
pub use netns::{cap_net_admin, Namespace, NetnsError, PrivateNet};
pub use pgbouncer::PgBouncer;
pub use postgres::PostgresServer;
pub use proxy::TcpProxy;
pub use redis::{Persistence, RedisServer, RedisServerBuilder};
pub use resp::{Reply, RespError};
pub use topology::{ClusterNode, RedisCluster, SentinelSet};
pub use zookeeper::{four_letter, ZooKeeperEnsemble, ZooKeeperServer, ZooKeeperServerBuilder};

/// Something the test kit could not do.
#[derive(Debug)]
#[non_exhaustive]
pub enum TestkitError {
    /// A server program is not installed.
    Missing {
        /// The program, e.g. `redis-server`.
        program: &'static str,
        /// How to get it.
        hint: &'static str,
    },
    /// A server did not start or did not become ready.
    Start {
        /// What went wrong, with the tail of the server's log.
        detail: String,
    },
    /// A helper program (e.g. [`CuratorLock`]) failed, or did not do what was asked in time.
    Process {
        /// What went wrong, with what the program printed.
        detail: String,
    },
    /// An operating-system call failed.
    Io(std::io::Error),
}

impl std::fmt::Display for TestkitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing { program, hint } => write!(f, "{program} not found: {hint}"),
            Self::Start { detail } => write!(f, "server did not start: {detail}"),
            Self::Process { detail } => write!(f, "{detail}"),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for TestkitError {}

impl From<std::io::Error> for TestkitError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// Finds a program: the environment variable `env` if set, else `name` on PATH.
pub fn find_program(name: &str, env: &str) -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os(env) {
        let path = std::path::PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A free TCP port on 127.0.0.1, as the kernel hands it out (never below 1024).
pub fn free_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}

/// The last `lines` lines of a log file (empty if it cannot be read).
pub(crate) fn tail(path: &std::path::Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Sends `signal` to a process this kit started (by its PID, never by name); a process that
/// is gone is left alone.
pub(crate) fn signal(pid: Option<u32>, signal: nix::sys::signal::Signal) {
    if let Some(pid) = pid {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
    }
}
