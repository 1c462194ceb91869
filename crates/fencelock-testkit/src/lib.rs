//! Real servers for fencelock's tests, demo and benchmarks: Redis, ZooKeeper and etcd.
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
//! tests can check that fencelock's ZooKeeper locks and Curator's exclude each other:
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
//! # etcd
//!
//! [`EtcdServer`] runs Debian's etcd (`apt-get install etcd-server`) as a one-member cluster
//! on free loopback ports with its data in a temporary folder; it can pause, be killed and
//! restart with its data. Members run with a 50 ms heartbeat and a 500 ms election timeout,
//! so the smallest lease TTL etcd grants is 1 s. [`EtcdCluster`] starts three members and
//! tells which one leads. [`EtcdctlLock`] holds a lock with `etcdctl lock NAME -- CMD`
//! (`apt-get install etcd-client`), for the interop tests.
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
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod curator;
pub mod etcd;
mod redis;
mod resp;
mod topology;
pub mod zookeeper;

pub use curator::{curator_bench, CuratorLock, CuratorLockBuilder};
pub use etcd::{etcdctl, EtcdCluster, EtcdServer, EtcdctlLock};
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

/// Sends `signal` to a process this kit started (by its PID, never by name); a process that
/// is gone is left alone.
pub(crate) fn signal(pid: Option<u32>, signal: nix::sys::signal::Signal) {
    if let Some(pid) = pid {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
    }
}
