//! The arguments of `fencelock verify`, the backends and the faults.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::parse_duration;

/// Arguments of `fencelock verify`.
#[derive(Args, Debug, Clone)]
pub struct VerifyArgs {
    /// Run against these servers instead of throwaway local ones (the lock's URL as
    /// `fencelock run --url` takes it; several redis:// URLs for RedLock). Only the faults
    /// that need no control over a server run then (client pauses and kills).
    #[arg(long)]
    pub url: Vec<String>,
    /// Server password for --url (never printed).
    #[arg(long, env = "FENCELOCK_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// The deployment to start (without --url) or to describe (with --url).
    #[arg(long, value_enum, default_value_t = Backend::Redis)]
    pub backend: Backend,
    /// Faults to inject, comma-separated, or `all` (every fault of the backend) or `none`.
    /// Client faults: pause, kill, session-expiry, lease-expiry. Server faults: server-pause,
    /// server-restart, server-restart-aof, script-flush, redis-client-pause, minority-kill,
    /// minority-slow, sentinel-failover, cluster-failover, slot-migration, leader-kill,
    /// partition, netem.
    #[arg(long, value_delimiter = ',', default_value = "pause,kill")]
    pub faults: Vec<String>,
    /// How long each run lasts (the run, then its negative control).
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    pub duration: Duration,
    /// Client processes contending for the lock.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=32))]
    pub clients: u16,
    /// Seed of the fault schedule and of the clients' hold times.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write without the token check (the negative control as the run itself).
    #[arg(long)]
    pub no_fencing: bool,
    /// Skip the negative control (a second run without fencing, with the same schedule).
    #[arg(long)]
    pub no_control: bool,
    /// The lease (ZooKeeper: the session timeout; etcd: the lease TTL, whole seconds).
    /// Default: 1 s on Redis, 2 s on ZooKeeper and etcd.
    /// Client pauses last twice the lease, so a pause always outlasts it.
    #[arg(long, value_parser = parse_duration)]
    pub lease: Option<Duration>,
    /// What the clients contend for: the mutex, or a leader election whose leaders write with
    /// their term (each client also observes the election; the check adds that observers
    /// report terms in increasing order and agree on each term's leader), a read-write lock
    /// (a seeded mix of readers and writers), a semaphore (--permits), or a multi-lock over
    /// two locks with a register each.
    #[arg(long, value_enum, default_value_t = Primitive::Mutex)]
    pub primitive: Primitive,
    /// With --primitive semaphore: the number of permits (1 to 16; fewer than --clients, so
    /// that clients contend).
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    pub permits: u32,
    /// Folder for the report (report.json, report.html, the event files).
    #[arg(long, default_value = "fencelock-verify")]
    pub report: PathBuf,
}

/// The primitives `fencelock verify` checks.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Primitive {
    /// A mutex (`Client::lock`): holders write with their fencing token.
    #[default]
    Mutex,
    /// A leader election (`Client::election`): leaders write with their term.
    Election,
    /// A read-write lock (`Client::rw_lock`): writers write with their token, readers read
    /// and end with a checked read (refused once a later writer wrote).
    Rwlock,
    /// A semaphore (`Client::semaphore`) of --permits N: permit holders write a register of
    /// N fenced slots, taken only while the holding has its slot (`permits.lua`).
    Semaphore,
    /// A multi-lock (`Client::multi_lock`) over two locks: each written with its own token.
    Multi,
}

impl Primitive {
    /// The flag's value, as the hidden client takes it.
    pub fn as_arg(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::Election => "election",
            Primitive::Rwlock => "rwlock",
            Primitive::Semaphore => "semaphore",
            Primitive::Multi => "multi",
        }
    }

    /// The checker's rules for it (`permits`: the semaphore's N).
    pub fn rule(self, permits: u32) -> crate::verify::check::Rule {
        use crate::verify::check::Rule;
        match self {
            Primitive::Mutex | Primitive::Election => Rule::Mutex,
            Primitive::Rwlock => Rule::ReadWrite,
            Primitive::Semaphore => Rule::Permits(permits),
            Primitive::Multi => Rule::Multi(MULTI_LOCKS),
        }
    }
}

/// How many locks a `--primitive multi` client takes (and registers it writes).
pub const MULTI_LOCKS: u8 = 2;

/// The name of lock `part` of a multi-lock whose first lock is `lock`.
pub fn multi_name(lock: &str, part: u8) -> String {
    match part {
        0 => lock.to_owned(),
        n => format!("{lock}-{n}"),
    }
}

/// The deployments `fencelock verify` knows.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// One Redis server.
    Redis,
    /// RedLock over three independent Redis servers.
    Redlock,
    /// A Redis master and replica watched by three sentinels.
    Sentinel,
    /// A Redis Cluster of three masters with a replica each.
    Cluster,
    /// ZooKeeper (one server; three when the faults include leader-kill).
    Zookeeper,
    /// etcd (one member; three when the faults include leader-kill).
    Etcd,
}

impl Backend {
    /// The default lease: ZooKeeper's session must be heard from several times per timeout,
    /// so it gets more room on a busy machine.
    pub fn default_lease(self) -> Duration {
        match self {
            Backend::Zookeeper | Backend::Etcd => Duration::from_secs(2),
            _ => Duration::from_secs(1),
        }
    }

    /// The faults that apply to this backend's throwaway servers.
    pub fn faults(self) -> &'static [Fault] {
        use Fault::*;
        match self {
            Backend::Redis => &[
                Pause,
                Kill,
                ServerPause,
                ServerRestart,
                ServerRestartAof,
                ScriptFlush,
                RedisClientPause,
                Partition,
                Netem,
            ],
            Backend::Redlock => &[
                Pause,
                Kill,
                MinorityKill,
                MinoritySlow,
                ServerRestart,
                ScriptFlush,
                RedisClientPause,
                Partition,
                Netem,
            ],
            Backend::Sentinel => &[
                Pause,
                Kill,
                SentinelFailover,
                ScriptFlush,
                RedisClientPause,
                Partition,
                Netem,
            ],
            Backend::Cluster => &[
                Pause,
                Kill,
                ClusterFailover,
                SlotMigration,
                ScriptFlush,
                Partition,
                Netem,
            ],
            Backend::Zookeeper => &[
                Pause,
                Kill,
                SessionExpiry,
                ServerPause,
                LeaderKill,
                Partition,
                Netem,
            ],
            Backend::Etcd => &[
                Pause,
                Kill,
                LeaseExpiry,
                ServerPause,
                LeaderKill,
                Partition,
                Netem,
            ],
        }
    }
}

/// A fault `fencelock verify` can inject.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// SIGSTOP a client holding the lock for twice its lease, between its read and write.
    Pause,
    /// SIGKILL a client holding the lock, and start a new one in its place.
    Kill,
    /// ZooKeeper: SIGSTOP a holder past its session timeout, until its session expired.
    SessionExpiry,
    /// etcd: SIGSTOP a holder past its lease's TTL, until the lease expired on the server.
    LeaseExpiry,
    /// SIGSTOP the server (RedLock: one server) for twice the lease.
    ServerPause,
    /// Kill the server and restart it at once, without persistence (RedLock: one server).
    ServerRestart,
    /// Kill the server and restart it at once, with `appendfsync always`.
    ServerRestartAof,
    /// `SCRIPT FLUSH` on every server.
    ScriptFlush,
    /// `CLIENT PAUSE` for twice the lease (RedLock: one server).
    RedisClientPause,
    /// RedLock: kill one server, restart it after twice the lease.
    MinorityKill,
    /// RedLock: one server answers late (`DEBUG SLEEP` for the lease).
    MinoritySlow,
    /// `SENTINEL FAILOVER`.
    SentinelFailover,
    /// `CLUSTER FAILOVER` of the lock's master.
    ClusterFailover,
    /// Move the lock's slot to another master.
    SlotMigration,
    /// ZooKeeper ensemble or etcd cluster: kill the leader, restart it once a new one leads.
    LeaderKill,
    /// Cut one server (RedLock: one of three) off from everyone for twice the lease, by
    /// blackhole routes around its network namespace (needs CAP_NET_ADMIN).
    Partition,
    /// Delay one server's traffic by a sixth of the lease for twice the lease: `tc netem`,
    /// or a delaying proxy where the kernel has no netem (needs CAP_NET_ADMIN).
    Netem,
}

impl Fault {
    /// The fault's name on the command line.
    pub fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }

    /// Whether it acts on a client process only (it runs against servers given with --url).
    pub fn client_side(self) -> bool {
        matches!(
            self,
            Fault::Pause | Fault::Kill | Fault::SessionExpiry | Fault::LeaseExpiry
        )
    }
}

/// Parses `--faults`: names, `all` or `none`. Unknown names are a usage error.
pub fn parse_faults(names: &[String], backend: Backend) -> Result<Vec<Fault>, String> {
    let mut faults = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        match name {
            "none" => {}
            "all" => faults.extend_from_slice(backend.faults()),
            _ => {
                let f = Fault::from_str(name, true).map_err(|_| {
                    let known: Vec<String> =
                        Fault::value_variants().iter().map(|f| f.name()).collect();
                    format!(
                        "unknown fault {name:?} in --faults (known: all, none, {})",
                        known.join(", ")
                    )
                })?;
                faults.push(f);
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    faults.retain(|f| seen.insert(*f));
    Ok(faults)
}

/// `--permits` given with a primitive other than the semaphore is refused, not ignored. On
/// clap's matches: whether `--permits` (which has a default) was given matters.
pub fn check_permits(m: &clap::ArgMatches) -> Result<(), clap::Error> {
    use clap::parser::ValueSource;
    let given = m.value_source("permits") == Some(ValueSource::CommandLine);
    let primitive = m
        .get_one::<Primitive>("primitive")
        .copied()
        .unwrap_or_default();
    if !given || primitive == Primitive::Semaphore {
        return Ok(());
    }
    let message = format!(
        "--permits is the number of permits of a semaphore, but --primitive {} has none: \
         drop --permits, or give --primitive semaphore",
        primitive.as_arg()
    );
    Err(crate::command_error(
        "verify",
        clap::error::ErrorKind::ArgumentConflict,
        &message,
    ))
}

/// The bounds on the other flags; a value outside them is a usage error.
pub fn validate(args: &VerifyArgs) -> Result<(), String> {
    if args.duration < Duration::from_secs(4) || args.duration > Duration::from_secs(3600) {
        return Err("--duration must be between 4s and 1h".to_owned());
    }
    if let Some(lease) = args.lease {
        if lease < Duration::from_millis(500) || lease > Duration::from_secs(60) {
            return Err("--lease must be between 500ms and 60s".to_owned());
        }
    }
    if args.backend == Backend::Redlock && args.primitive == Primitive::Election {
        return Err(
            "--primitive election is not offered by RedLock: its servers keep no \
                    queue, so they could not agree on the next leader; use one Redis, \
                    Sentinel, a Cluster, ZooKeeper or etcd"
                .to_owned(),
        );
    }
    if args.backend == Backend::Redlock
        && matches!(args.primitive, Primitive::Rwlock | Primitive::Semaphore)
    {
        return Err(format!(
            "--primitive {} is not offered by RedLock: its servers keep no queue to serve \
             readers, writers or permits in arrival order; use one Redis, Sentinel, a \
             Cluster, ZooKeeper or etcd",
            args.primitive.as_arg()
        ));
    }
    if args.primitive == Primitive::Semaphore && args.permits >= u32::from(args.clients) {
        return Err(format!(
            "--permits {} lets all {} clients in at once: give fewer permits than --clients",
            args.permits, args.clients
        ));
    }
    if args.backend == Backend::Redlock && args.url.len() == 1 {
        return Err("--backend redlock with --url needs several redis:// URLs".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// `verify --backend` offers every service of the library's registry that this build
    /// has (a new service fails this test until `verify` can start its servers).
    #[test]
    fn every_built_service_has_a_verify_backend() {
        use clap::ValueEnum;
        for service in fencelock::services().iter().filter(|s| s.is_built()) {
            assert!(
                Backend::from_str(service.name(), true).is_ok(),
                "no `verify --backend {}`",
                service.name()
            );
        }
    }

    use super::*;

    #[test]
    fn faults_parse_by_name_all_and_none() {
        let names = |s: &str| s.split(',').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            parse_faults(&names("pause,kill,pause"), Backend::Redis).unwrap(),
            vec![Fault::Pause, Fault::Kill]
        );
        assert!(parse_faults(&names("none"), Backend::Redis)
            .unwrap()
            .is_empty());
        let all = parse_faults(&names("all"), Backend::Redlock).unwrap();
        assert!(all.contains(&Fault::MinorityKill));
        let e = parse_faults(&names("pause,fire"), Backend::Redis).unwrap_err();
        assert!(e.contains("\"fire\"") && e.contains("server-pause"), "{e}");
        assert_eq!(Fault::RedisClientPause.name(), "redis-client-pause");
    }
}
