//! Real servers for fencelock's tests, demo and benchmarks.
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
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod redis;
mod resp;
mod topology;

pub use redis::{Persistence, RedisServer, RedisServerBuilder};
pub use resp::{Reply, RespError};
pub use topology::{ClusterNode, RedisCluster, SentinelSet};

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
    /// An operating-system call failed.
    Io(std::io::Error),
}

impl std::fmt::Display for TestkitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing { program, hint } => write!(f, "{program} not found: {hint}"),
            Self::Start { detail } => write!(f, "server did not start: {detail}"),
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
