//! The demo's throwaway servers: the lock service of the chosen backend, and the Redis that
//! keeps the record.
//!
//! A backend is a [`Backend`] variant and one function that starts its server and describes it
//! as a [`LockService`]: its URL, its name, how a holder stays alive on it, and the short
//! lease or session the frozen and killed holders ask for. The scenes take their words and
//! timings from that description, so they need no change for a new backend.

use std::time::Duration;

use clap::ValueEnum;
use fencelock_testkit::{zookeeper, EtcdServer, RedisServer, TestkitError, ZooKeeperServer};

/// The service the demo's lock lives on (the record is on Redis with every backend).
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// A throwaway redis-server: a lease per lock that the holder renews.
    #[default]
    Redis,
    /// A throwaway ZooKeeper server: the holder's session is its lease.
    Zookeeper,
    /// A throwaway one-member etcd: the client's lease, kept alive, is its session.
    Etcd,
}

impl Backend {
    /// Starts this backend's throwaway server. Blocking: a JVM takes seconds to serve.
    pub(super) fn start(self) -> Result<LockService, TestkitError> {
        match self {
            Backend::Redis => redis(),
            Backend::Zookeeper => zookeeper(),
            Backend::Etcd => etcd(),
        }
    }
}

/// How a holder keeps its lock on a service: it decides what the scenes say happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Liveness {
    /// A lease per lock that the holder renews: it runs out when the renewals stop.
    Lease,
    /// The holder's session: the server ends it when it has heard nothing from the holder for
    /// the session timeout, and deletes the holder's lock node with it.
    Session,
    /// The client's lease, which it keeps alive: the server revokes it when no keep-alive came
    /// for its TTL, and deletes the holder's lock key with it.
    ClientLease,
}

/// A running lock service for the demo.
pub(super) struct LockService {
    /// The URL `fencelock run --url` takes.
    pub(super) url: String,
    /// The service's name in the output, e.g. `ZooKeeper`.
    pub(super) name: &'static str,
    /// How a holder stays alive on it.
    pub(super) liveness: Liveness,
    /// The lease (or session timeout) of the frozen and the killed holder: short, so that the
    /// scenes are short, yet long enough that a live holder on a busy machine keeps its lock.
    pub(super) short: Duration,
    /// The server's handle: the server stops when it drops.
    _server: Box<dyn Send>,
}

impl LockService {
    /// "a 2 s ZooKeeper session" or "a 1 s lease": what a holder with the short timeout has.
    pub(super) fn short_liveness(&self) -> String {
        let secs = self.short.as_secs_f64();
        match self.liveness {
            Liveness::Lease => format!("a {secs} s lease"),
            Liveness::Session => format!("a {secs} s {} session", self.name),
            Liveness::ClientLease => format!("a {secs} s {} lease", self.name),
        }
    }

    /// Why the lock passed on from a frozen holder.
    pub(super) fn frozen_outcome(&self) -> String {
        match self.liveness {
            Liveness::Lease => "the lease ran out".to_owned(),
            Liveness::Session => format!(
                "{} heard nothing from it for the session timeout, so it expired its session \
                 and deleted its lock node",
                self.name
            ),
            Liveness::ClientLease => format!(
                "no keep-alive reached {} for the lease's TTL, so it revoked the lease and \
                 deleted its lock key",
                self.name
            ),
        }
    }

    /// What `fencelock run`'s "lease deadline" means here, when it is not a lease: the
    /// library words every hold's deadline as a lease's.
    pub(super) fn deadline_note(&self) -> Option<String> {
        match self.liveness {
            Liveness::Lease => None,
            Liveness::Session => Some(format!(
                "(on {}, a hold's lease deadline is its session's: the session timeout after \
                 the server last answered)",
                self.name
            )),
            Liveness::ClientLease => Some(format!(
                "(on {}, a hold's deadline is its client's lease: the TTL after the last \
                 keep-alive the server answered)",
                self.name
            )),
        }
    }

    /// Why the lock passed on from a killed holder.
    pub(super) fn killed_outcome(&self) -> String {
        match self.liveness {
            Liveness::Lease => "the lease expired".to_owned(),
            Liveness::Session => format!(
                "its connection closed; {} expired its session after the session timeout",
                self.name
            ),
            Liveness::ClientLease => format!(
                "its keep-alives stopped; {} revoked its lease after the TTL",
                self.name
            ),
        }
    }
}

fn redis() -> Result<LockService, TestkitError> {
    let server = RedisServer::start()?;
    Ok(LockService {
        url: server.url(),
        name: "Redis",
        liveness: Liveness::Lease,
        short: Duration::from_secs(1),
        _server: Box::new(server),
    })
}

/// The session timeout of the frozen and the killed holder. A live holder must be heard from
/// several times per timeout (fencelock probes every quarter of it), so 2 s leaves it room on
/// two busy cores while keeping the two scenes short. The test kit's server grants it as asked
/// (checked below), so the frozen holder's session ends when the scenes say it does.
const ZOOKEEPER_SESSION_MS: u64 = 2_000;
const _: () = assert!(
    zookeeper::MIN_SESSION_TIMEOUT_MS <= ZOOKEEPER_SESSION_MS
        && ZOOKEEPER_SESSION_MS <= zookeeper::MAX_SESSION_TIMEOUT_MS
);

fn zookeeper() -> Result<LockService, TestkitError> {
    let server = ZooKeeperServer::start()?;
    Ok(LockService {
        url: server.url(),
        name: "ZooKeeper",
        liveness: Liveness::Session,
        short: Duration::from_millis(ZOOKEEPER_SESSION_MS),
        _server: Box::new(server),
    })
}

/// The lease TTL of the frozen and the killed holder on etcd: the test kit's members grant TTLs
/// from 1 s; 2 s leaves a live holder room for its keep-alives on two busy cores.
const ETCD_LEASE_MS: u64 = 2_000;

fn etcd() -> Result<LockService, TestkitError> {
    let server = EtcdServer::start()?;
    Ok(LockService {
        url: server.url(),
        name: "etcd",
        liveness: Liveness::ClientLease,
        short: Duration::from_millis(ETCD_LEASE_MS),
        _server: Box::new(server),
    })
}

/// Starts the record's Redis and the lock service side by side (a JVM's start is the longest
/// wait of the demo).
pub(super) async fn start(backend: Backend) -> Result<(LockService, RedisServer), String> {
    let lock = tokio::task::spawn_blocking(move || backend.start());
    let record = tokio::task::spawn_blocking(RedisServer::start);
    let (lock, record) = tokio::join!(lock, record);
    let lock = lock
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let record = record
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    Ok((lock, record))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `demo --backend` offers every service of the library's registry that this build has
    /// (a new service in the registry fails this test until the demo can start its server).
    #[test]
    fn every_built_service_has_a_demo_backend() {
        for service in fencelock::services().iter().filter(|s| s.is_built()) {
            assert!(
                Backend::from_str(service.name(), true).is_ok(),
                "no `demo --backend {}`",
                service.name()
            );
        }
    }
}
