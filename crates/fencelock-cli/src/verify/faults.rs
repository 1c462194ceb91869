//! Faults: which of the asked ones can run here (the others are listed as skipped, with the
//! reason), when they run (a seeded schedule), and running each one with the evidence that
//! it really happened: a client pause is checked to have stopped the process (state `T`) for
//! longer than its lease, a kill to have ended it with SIGKILL, a restart to have changed
//! the server's PID, a failover to have moved the master, a partition and a delay by probes
//! from the host (`net.rs`).

use std::time::{Duration, Instant};

use fencelock_testkit::{EtcdServer, RedisCluster, RedisServer, ZooKeeperServer};
use serde::Serialize;

use super::args::{Backend, Fault};
use super::clients::{stopped, Fleet};
use super::events::now;
use super::net::Net;
use super::rng::Rng;
use super::servers::Servers;

/// A fault at its time in the run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Planned {
    /// The fault.
    pub fault: Fault,
    /// When, from the start of the run.
    pub at_ms: u64,
}

/// A fault that was tried.
#[derive(Debug, Clone, Serialize)]
pub struct Injected {
    /// The fault.
    pub fault: Fault,
    /// What it hit, e.g. `client 3` or `server 127.0.0.1:7001`.
    pub target: String,
    /// When it began (ns, monotonic).
    pub start: u64,
    /// When it healed (ns, monotonic).
    pub end: u64,
    /// Whether it was checked to have happened as asked.
    pub happened: bool,
    /// What showed it (or why it did not happen).
    pub evidence: String,
}

/// A fault asked for that cannot run here.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// The fault's name.
    pub fault: String,
    /// Why.
    pub reason: String,
}

/// Splits the asked faults into those that run and those skipped, with the reason.
pub fn plan(faults: &[Fault], backend: Backend, external: bool) -> (Vec<Fault>, Vec<Skipped>) {
    let mut run = Vec::new();
    let mut skipped = Vec::new();
    for &fault in faults {
        let reason = if !backend.faults().contains(&fault) {
            let name = format!("{backend:?}").to_lowercase();
            Some(format!(
                "does not apply to --backend {name}: {}",
                why_not(fault, backend)
            ))
        } else if external && !fault.client_side() {
            Some("needs throwaway servers: with --url only client faults run".to_owned())
        } else if matches!(fault, Fault::Partition | Fault::Netem) {
            network_reason(backend, faults.contains(&Fault::LeaderKill))
        } else if fault == Fault::ServerRestart && faults.contains(&Fault::ServerRestartAof) {
            Some(
                "this run's server keeps an append-only file for server-restart-aof; run \
                 server-restart in a run of its own"
                    .to_owned(),
            )
        } else {
            None
        };
        match reason {
            Some(reason) => skipped.push(Skipped {
                fault: fault.name(),
                reason,
            }),
            None => run.push(fault),
        }
    }
    (run, skipped)
}

/// Why `fault` is not among `backend`'s faults.
fn why_not(fault: Fault, backend: Backend) -> &'static str {
    use Backend::*;
    let consensus = matches!(backend, Zookeeper | Etcd);
    match fault {
        Fault::SessionExpiry => "a ZooKeeper session's end (etcd's is lease-expiry; a Redis lease running out is pause)",
        Fault::LeaseExpiry => "an etcd lease's end (ZooKeeper's is session-expiry; a Redis lease running out is pause)",
        Fault::LeaderKill => "ZooKeeper and etcd elect a leader; Redis deployments have none (Sentinel and Cluster failovers are faults of their own)",
        Fault::MinorityKill | Fault::MinoritySlow => "RedLock only: the other deployments do not ask several independent servers",
        Fault::SentinelFailover => "Redis Sentinel only",
        Fault::ClusterFailover | Fault::SlotMigration => "Redis Cluster only",
        Fault::ScriptFlush | Fault::RedisClientPause if consensus => "a Redis command; this deployment runs no Redis",
        Fault::ServerRestart | Fault::ServerRestartAof if consensus => "ZooKeeper and etcd keep their data on disk, so a restarted member comes back with every lock; losing a member is leader-kill",
        Fault::ServerRestartAof if backend == Redlock => "RedLock's servers restart without persistence (server-restart): a server that keeps its data is the single-server case",
        Fault::ServerRestart | Fault::ServerRestartAof | Fault::ServerPause => "on Sentinel or Cluster, a master stopped or restarted is failed over: sentinel-failover and cluster-failover are that fault, with its outcome checked",
        Fault::RedisClientPause => "not built for Redis Cluster: CLIENT PAUSE acts on one node, and the lock's slot may move",
        _ => "not built for this deployment",
    }
}

/// Why `partition` and `netem` do not run on `backend`'s throwaway servers, if they do not
/// (`ensemble`: the run starts three ZooKeeper or etcd members for leader-kill). Where they
/// do, they still need CAP_NET_ADMIN: `servers::start` finds out.
fn network_reason(backend: Backend, ensemble: bool) -> Option<String> {
    let why = match backend {
        Backend::Redis | Backend::Redlock => return None,
        Backend::Zookeeper | Backend::Etcd if !ensemble => return None,
        Backend::Sentinel => {
            "not built for Sentinel: the test kit starts the master, replica and sentinels \
             on loopback, and a partition of the master must also cut it from its replica and \
             sentinels (runs on --backend redis and redlock)"
        }
        Backend::Cluster => {
            "not built for Cluster: the test kit creates the cluster on loopback addresses \
             that the nodes announce to each other and to clients, so a node cannot move into \
             a namespace (runs on --backend redis and redlock)"
        }
        Backend::Zookeeper | Backend::Etcd => {
            "not built for a three-member ensemble (started here for leader-kill): the test \
             kit starts its members on loopback; it runs on the single server of a run \
             without leader-kill"
        }
    };
    Some(why.to_owned())
}

/// The seeded schedule: the faults in a seeded order, spread over the middle of the run
/// (from 15% to 60% of it), so that the run sees the lock before and after them.
pub fn schedule(faults: &[Fault], duration: Duration, seed: u64) -> Vec<Planned> {
    let mut rng = Rng::new(seed);
    let mut order = faults.to_vec();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let total = duration.as_millis() as u64;
    let (from, to) = (total * 15 / 100, total * 60 / 100);
    let slot = (to - from) / (order.len().max(1) as u64);
    order
        .into_iter()
        .enumerate()
        .map(|(i, fault)| Planned {
            fault,
            at_ms: from + i as u64 * slot + rng.below(slot / 3),
        })
        .collect()
}

/// How long a fault takes at most (beyond waiting for a client to act on), so that the run
/// can be long enough for its faults and the recovery after them.
pub fn cost(fault: Fault, lease: Duration) -> Duration {
    let s = Duration::from_secs;
    match fault {
        Fault::Pause
        | Fault::SessionExpiry
        | Fault::LeaseExpiry
        | Fault::ServerPause
        | Fault::RedisClientPause => long(lease) + s(1),
        Fault::MinorityKill => long(lease) + s(1),
        Fault::Kill | Fault::ScriptFlush | Fault::MinoritySlow => lease + s(1),
        Fault::ServerRestart | Fault::ServerRestartAof => lease + s(1),
        Fault::SentinelFailover | Fault::ClusterFailover | Fault::SlotMigration => s(10),
        Fault::LeaderKill => s(20),
        // The fault, then PINGs until the server answers again.
        Fault::Partition => long(lease) + s(2),
        Fault::Netem => long(lease) + s(1),
    }
}

/// The shortest run for `faults`: they are spread over 45% of it (from 15% to 60%), and
/// the last 40% shows the recovery.
pub fn min_duration(faults: &[Fault], lease: Duration) -> Duration {
    let total: Duration = faults.iter().map(|&f| cost(f, lease)).sum();
    total * 100 / 45
}

/// What the faults act on.
pub struct Target<'a> {
    /// The clients.
    pub fleet: &'a mut Fleet,
    /// The servers.
    pub servers: &'a mut Servers,
    /// The clients' lease.
    pub lease: Duration,
    /// The lock's name (Cluster faults act on its slot).
    pub lock: &'a str,
    /// The private network of the network faults, if they run.
    pub net: Option<&'a mut Net>,
}

/// Runs one fault and checks that it happened.
pub async fn inject(fault: Fault, t: &mut Target<'_>) -> Injected {
    let mut start = now();
    // A client fault first waits for a client at the right point: it begins when it acts.
    let result = match fault {
        Fault::Pause => pause(t, false, &mut start).await,
        Fault::SessionExpiry | Fault::LeaseExpiry => pause(t, true, &mut start).await,
        Fault::Kill => kill(t, &mut start).await,
        _ => {
            // A server fault is aimed at a held lock: it waits (a while) for a client between
            // its read and its write, as a crash in production comes in the middle of work.
            let held = t.fleet.await_holder(Duration::from_secs(3)).await;
            start = now();
            let lease = t.lease;
            let (servers, lock) = (&mut *t.servers, t.lock);
            let net = t.net.as_deref_mut();
            let done = tokio::task::block_in_place(|| match fault {
                Fault::Partition | Fault::Netem => network_fault(fault, net, lease),
                _ => server_fault(fault, servers, lease, lock),
            });
            done.map(|(target, evidence)| match held {
                Some(h) => (
                    target,
                    format!(
                        "{evidence}; it began while client {} held token {}",
                        h.lane, h.token
                    ),
                ),
                None => (target, format!("{evidence}; no client held the lock then")),
            })
        }
    };
    let (target, happened, evidence) = match result {
        Ok((target, evidence)) => (target, true, evidence),
        Err(e) => ("-".to_owned(), false, e),
    };
    Injected {
        fault,
        target,
        start,
        end: now(),
        happened,
        evidence,
    }
}

type Outcome = Result<(String, String), String>;

/// How long client and server pauses last: twice the lease, so that a pause always
/// outlasts the lease even if it began just after a renewal.
fn long(lease: Duration) -> Duration {
    lease * 2 + Duration::from_millis(100)
}

/// SIGSTOP a client between its read and its write, past its lease. For session (ZooKeeper)
/// or lease (etcd) expiry, another client must also have acquired during the pause: the
/// stopped client deletes nothing, so only the server ending its session or lease, which
/// deletes its nodes or keys, lets the lock pass on.
async fn pause(t: &mut Target<'_>, session: bool, began: &mut u64) -> Outcome {
    let h = t
        .fleet
        .await_holder(Duration::from_secs(5))
        .await
        .ok_or("no client was between its read and its write within 5 s")?;
    *began = now();
    let is_stopped = t.fleet.pause(h);
    tokio::time::sleep(long(t.lease)).await;
    let taken = t.fleet.acquired_since(*began, h.pid);
    t.fleet.resume(h);
    let held = Duration::from_nanos(now() - *began);
    if !is_stopped {
        return Err(format!(
            "client {} (pid {}) was not seen stopped",
            h.lane, h.pid
        ));
    }
    if held <= t.lease {
        return Err(format!("the pause lasted {held:?}, not past the lease"));
    }
    let takeover = match taken {
        Some(token) => format!("; meanwhile another client acquired token {token}"),
        None if session => return Err("no other client acquired during the pause".to_owned()),
        None => "; no other client acquired meanwhile".to_owned(),
    };
    Ok((
        format!("client {}", h.lane),
        format!(
            "client {} (pid {}) stopped (state T) for {:.2} s between its read and write, \
             holding token {}, past its {:.1} s lease{takeover}",
            h.lane,
            h.pid,
            held.as_secs_f64(),
            h.token,
            t.lease.as_secs_f64()
        ),
    ))
}

/// SIGKILL a client holding the lock; a new process takes its lane.
async fn kill(t: &mut Target<'_>, began: &mut u64) -> Outcome {
    let h = t
        .fleet
        .await_holder(Duration::from_secs(5))
        .await
        .ok_or("no client was holding the lock within 5 s")?;
    *began = now();
    let evidence = t.fleet.kill(h).await?;
    Ok((format!("client {}", h.lane), evidence))
}

/// A server process the faults can stop.
trait Process {
    fn pid(&self) -> Option<u32>;
    fn pause(&self);
    fn resume(&self);
    fn label(&self) -> String;
}

impl Process for RedisServer {
    fn pid(&self) -> Option<u32> {
        RedisServer::pid(self)
    }
    fn pause(&self) {
        RedisServer::pause(self)
    }
    fn resume(&self) {
        RedisServer::resume(self)
    }
    fn label(&self) -> String {
        format!("redis-server :{}", self.port())
    }
}

impl Process for EtcdServer {
    fn pid(&self) -> Option<u32> {
        EtcdServer::pid(self)
    }
    fn pause(&self) {
        EtcdServer::pause(self)
    }
    fn resume(&self) {
        EtcdServer::resume(self)
    }
    fn label(&self) -> String {
        format!("etcd :{}", self.port())
    }
}

impl Process for ZooKeeperServer {
    fn pid(&self) -> Option<u32> {
        ZooKeeperServer::pid(self)
    }
    fn pause(&self) {
        ZooKeeperServer::pause(self)
    }
    fn resume(&self) {
        ZooKeeperServer::resume(self)
    }
    fn label(&self) -> String {
        format!("zookeeper :{}", self.port())
    }
}

/// `partition` or `netem` around the server in its namespace, for twice the lease; the
/// delay is a sixth of the lease (a round trip of a third with the proxy).
fn network_fault(fault: Fault, net: Option<&mut Net>, lease: Duration) -> Outcome {
    let net = net.ok_or("no private network was set up for this run")?;
    if fault == Fault::Partition {
        super::net::partition(net, long(lease), lease)
    } else {
        super::net::netem(net, lease / 6, long(lease))
    }
}

fn failed(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

/// The server faults (blocking: the test kit's calls wait for servers).
fn server_fault(fault: Fault, servers: &mut Servers, lease: Duration, lock: &str) -> Outcome {
    match (fault, servers) {
        (Fault::ServerPause, Servers::Redis(s)) => stop_server(&*s, lease),
        (Fault::ServerPause, Servers::RedLock(list)) => stop_server(&list[0], lease),
        (Fault::ServerPause, Servers::ZooKeeper(s)) => stop_server(&*s, lease),
        (Fault::ServerPause, Servers::Etcd(s)) => stop_server(&*s, lease),
        (Fault::ServerPause, Servers::Ensemble(e)) => {
            let leader = e.leader().ok_or("the ensemble has no leader")?;
            stop_server(e.member(leader), lease)
        }
        (Fault::ServerRestart | Fault::ServerRestartAof, Servers::Redis(s)) => restart(s, None),
        (Fault::ServerRestart, Servers::RedLock(list)) => restart(&mut list[0], None),
        (Fault::MinorityKill, Servers::RedLock(list)) => restart(&mut list[0], Some(long(lease))),
        (Fault::MinoritySlow, Servers::RedLock(list)) => slow(&list[0], lease),
        (Fault::ScriptFlush, servers) => script_flush(servers),
        (Fault::RedisClientPause, servers) => client_pause(servers, lease),
        (Fault::SentinelFailover, Servers::Sentinel(set)) => {
            let old = set.master_port();
            let new = set.failover().map_err(|e| failed("SENTINEL FAILOVER", e))?;
            Ok((
                format!("master :{}", old.unwrap_or_default()),
                format!("the sentinels moved the master from :{old:?} to :{new}"),
            ))
        }
        (Fault::ClusterFailover | Fault::SlotMigration, Servers::Cluster(cluster)) => {
            move_lock_slot(fault, cluster, lock)
        }
        (Fault::LeaderKill, Servers::Ensemble(e)) => {
            let old = e.leader().ok_or("the ensemble has no leader")?;
            e.member_mut(old).kill();
            let new = e
                .wait_for_leader(Duration::from_secs(30))
                .map_err(|e| failed("no new leader", e))?;
            e.member_mut(old)
                .restart()
                .map_err(|e| failed("restart the old leader", e))?;
            Ok((
                format!("member {old}"),
                format!("leader (member {old}) killed; member {new} leads; member {old} restarted"),
            ))
        }
        (Fault::LeaderKill, Servers::EtcdCluster(c)) => {
            let old = c.leader().ok_or("the etcd cluster has no leader")?;
            c.member_mut(old).kill();
            let new = c
                .wait_for_leader(Duration::from_secs(30))
                .map_err(|e| failed("no new leader", e))?;
            c.member_mut(old)
                .restart()
                .map_err(|e| failed("restart the old leader", e))?;
            Ok((
                format!("member {old}"),
                format!("leader (member {old}) killed; member {new} leads; member {old} restarted"),
            ))
        }
        (fault, _) => Err(format!("{} does not apply here", fault.name())),
    }
}

/// Cluster: fail over the master of the lock's slot, or migrate the slot to another master.
fn move_lock_slot(fault: Fault, cluster: &mut RedisCluster, lock: &str) -> Outcome {
    let slot = cluster.slot(lock);
    let old = cluster
        .master_of(slot)
        .map(RedisServer::port)
        .ok_or("the lock's slot has no master")?;
    let new = if fault == Fault::ClusterFailover {
        cluster
            .failover(old)
            .map_err(|e| failed("CLUSTER FAILOVER", e))?
    } else {
        let to = cluster
            .topology()
            .iter()
            .find(|n| n.master && n.port != old)
            .map(|n| n.port)
            .ok_or("no other master")?;
        cluster
            .migrate_slot(slot, to)
            .map_err(|e| failed("slot migration", e))?;
        to
    };
    let now_at = cluster.master_of(slot).map(RedisServer::port);
    if now_at != Some(new) {
        return Err(format!("slot {slot} is served by {now_at:?}, not :{new}"));
    }
    Ok((
        format!("slot {slot}"),
        format!("slot {slot} (the lock's) moved from master :{old} to :{new}"),
    ))
}

/// SIGSTOP a server for twice the lease.
fn stop_server(s: &dyn Process, lease: Duration) -> Outcome {
    let began = Instant::now();
    s.pause();
    let pid = s.pid().unwrap_or(0);
    let is_stopped = stopped(pid);
    std::thread::sleep(long(lease));
    s.resume();
    if !is_stopped {
        return Err(format!("{} (pid {pid}) was not seen stopped", s.label()));
    }
    Ok((
        s.label(),
        format!(
            "{} (pid {pid}) stopped (state T) for {:.2} s, past the {:.1} s lease",
            s.label(),
            began.elapsed().as_secs_f64(),
            lease.as_secs_f64()
        ),
    ))
}

fn dbsize(s: &RedisServer) -> i64 {
    s.command(&["DBSIZE"])
        .ok()
        .and_then(|r| r.int())
        .unwrap_or(-1)
}

/// Kill a Redis server and restart it, after `down` (RedLock's delayed restart) or at once.
fn restart(s: &mut RedisServer, down: Option<Duration>) -> Outcome {
    let (old, keys) = (s.pid(), dbsize(s));
    s.kill();
    if let Some(down) = down {
        std::thread::sleep(down);
    }
    s.restart().map_err(|e| failed("restart", e))?;
    let new = s.pid();
    if new.is_none() || new == old {
        return Err(format!(
            "the server's pid did not change ({old:?} → {new:?})"
        ));
    }
    let aof = s.info_field("aof_enabled").as_deref() == Some("1");
    let downtime = down.map_or("at once".to_owned(), |d| {
        format!("after {:.1} s down", d.as_secs_f64())
    });
    Ok((
        format!("redis-server :{}", s.port()),
        format!(
            "pid {} killed, restarted {downtime} as pid {} ({}); keys before {keys}, after {}",
            old.unwrap_or(0),
            new.unwrap_or(0),
            if aof {
                "appendfsync always"
            } else {
                "no persistence"
            },
            dbsize(s)
        ),
    ))
}

/// `DEBUG SLEEP` one RedLock server for the lease: it answers, late.
fn slow(s: &RedisServer, lease: Duration) -> Outcome {
    let began = Instant::now();
    let secs = format!("{:.3}", lease.as_secs_f64());
    s.command(&["DEBUG", "SLEEP", &secs])
        .map_err(|e| failed("DEBUG SLEEP", e))?;
    let took = began.elapsed();
    if took < lease {
        return Err(format!(
            "DEBUG SLEEP returned after {took:?}, before the lease"
        ));
    }
    Ok((
        format!("redis-server :{}", s.port()),
        format!(
            "DEBUG SLEEP {secs}: the server answered nothing for {:.2} s",
            took.as_secs_f64()
        ),
    ))
}

fn script_flush(servers: &Servers) -> Outcome {
    let masters = servers.redis_masters();
    if masters.is_empty() {
        return Err("no Redis server to flush".to_owned());
    }
    let mut ports = Vec::new();
    for s in masters {
        let reply = s
            .command(&["SCRIPT", "FLUSH"])
            .map_err(|e| failed("SCRIPT FLUSH", e))?;
        if reply.text().as_deref() != Some("OK") {
            return Err(format!("SCRIPT FLUSH answered {reply:?}"));
        }
        ports.push(format!(":{}", s.port()));
    }
    Ok((
        ports.join(" "),
        format!("SCRIPT FLUSH answered OK on {}", ports.join(" ")),
    ))
}

/// `CLIENT PAUSE` the (first) master for twice the lease, and wait it out.
fn client_pause(servers: &Servers, lease: Duration) -> Outcome {
    let s = *servers
        .redis_masters()
        .first()
        .ok_or("no Redis server to pause")?;
    let ms = long(lease).as_millis().to_string();
    let reply = s
        .command(&["CLIENT", "PAUSE", &ms, "ALL"])
        .map_err(|e| failed("CLIENT PAUSE", e))?;
    if reply.text().as_deref() != Some("OK") {
        return Err(format!("CLIENT PAUSE answered {reply:?}"));
    }
    std::thread::sleep(long(lease));
    Ok((
        format!("redis-server :{}", s.port()),
        format!("CLIENT PAUSE {ms} ALL answered OK: no client served for {ms} ms"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_seeded_and_inside_the_run() {
        let faults = [Fault::Pause, Fault::Kill, Fault::ServerPause];
        let a = schedule(&faults, Duration::from_secs(20), 3);
        let b = schedule(&faults, Duration::from_secs(20), 3);
        assert_eq!(
            a.iter().map(|p| (p.fault, p.at_ms)).collect::<Vec<_>>(),
            b.iter().map(|p| (p.fault, p.at_ms)).collect::<Vec<_>>()
        );
        assert_eq!(a.len(), 3);
        assert!(
            a.iter().all(|p| (3_000..12_000).contains(&p.at_ms)),
            "{a:?}"
        );
        assert!(a.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
    }

    #[test]
    fn every_fault_a_backend_lacks_says_why() {
        use clap::ValueEnum;
        let backends = [
            Backend::Redis,
            Backend::Redlock,
            Backend::Sentinel,
            Backend::Cluster,
            Backend::Zookeeper,
            Backend::Etcd,
        ];
        for backend in backends {
            for &fault in Fault::value_variants() {
                if backend.faults().contains(&fault) {
                    continue;
                }
                let why = why_not(fault, backend);
                assert_ne!(
                    why, "not built for this deployment",
                    "{fault:?} on {backend:?}"
                );
            }
        }
    }

    #[test]
    fn faults_that_cannot_run_are_skipped_with_a_reason() {
        let asked = [
            Fault::Pause,
            Fault::ServerPause,
            Fault::Partition,
            Fault::LeaderKill,
        ];
        let (run, skipped) = plan(&asked, Backend::Redis, true);
        assert_eq!(run, vec![Fault::Pause]);
        let reasons: Vec<(&str, &str)> = skipped
            .iter()
            .map(|s| (s.fault.as_str(), s.reason.as_str()))
            .collect();
        assert_eq!(reasons.len(), 3);
        assert!(reasons[0].1.contains("--url"), "{reasons:?}");
        assert!(
            reasons[1].1.contains("needs throwaway servers"),
            "{reasons:?}"
        );
        assert!(reasons[2].1.contains("does not apply"), "{reasons:?}");

        // Network faults run on throwaway Redis and RedLock (if the process may create
        // namespaces, which `servers::start` finds out); elsewhere they say why not.
        let network = [Fault::Partition, Fault::Netem];
        for backend in [
            Backend::Redis,
            Backend::Redlock,
            Backend::Zookeeper,
            Backend::Etcd,
        ] {
            let (run, skipped) = plan(&network, backend, false);
            assert_eq!(run, network.to_vec());
            assert!(skipped.is_empty(), "{skipped:?}");
        }
        for (backend, word) in [
            (Backend::Sentinel, "Sentinel"),
            (Backend::Cluster, "Cluster"),
            (Backend::Zookeeper, "ensemble"),
            (Backend::Etcd, "ensemble"),
        ] {
            let asked = [&network[..], &[Fault::LeaderKill]].concat();
            let (run, skipped) = plan(&asked, backend, false);
            assert!(run.iter().all(|f| !network.contains(f)), "{run:?}");
            let skipped: Vec<_> = skipped
                .into_iter()
                .filter(|s| s.fault != "leader-kill")
                .collect();
            assert_eq!(skipped.len(), 2);
            assert!(
                skipped.iter().all(|s| s.reason.contains(word)),
                "{skipped:?}"
            );
        }
    }
}
