//! Leader-election figures (issue 25) on one Redis, ZooKeeper and etcd, each from the test
//! kit, with the service's round trip measured in the same run:
//!
//! - **failover**: a participant in a process of its own leads; it is killed (SIGKILL) and the
//!   time until the waiting participant leads is taken, against the bound "the lease (or
//!   session timeout) + 2 round trips + 50 ms", p99 over the rounds;
//! - **resign → next**: from a leader's `resign` call to the waiting participant's `campaign`
//!   returning, against "2 round trips + 1 ms", median over the rounds;
//! - **observe**: from that `resign` call to an observer's report of the new leader.
//!
//! `cargo bench -p fencelock --all-features --bench election -- [--quick]
//! [--markdown docs/PERFORMANCE-election.md] [--json PATH]`. The bench runs itself again as
//! the killed participant (`--participant URL NAME LEASE_MS`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fencelock::{Client, ClientOptions, Election, Leadership};
use fencelock_testkit::{EtcdServer, RedisServer, ZooKeeperServer};
use serde_json::{json, Value};

/// The lease (session timeout, lease TTL) every participant asks for.
const LEASE: Duration = Duration::from_secs(2);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if args.first().map(String::as_str) == Some("--participant") {
        return runtime.block_on(participant(&args[1], &args[2]));
    }
    let arg = |flag: &str| {
        let at = args.iter().position(|a| a == flag)?;
        args.get(at + 1).cloned()
    };
    let quick = args.iter().any(|a| a == "--quick");
    let (failovers, handovers) = if quick { (5, 20) } else { (20, 60) };
    let json_path = arg("--json").unwrap_or_else(|| root("target/bench-election.json"));
    let mut rows = Vec::new();
    let redis = RedisServer::start().expect("redis-server");
    rows.push(runtime.block_on(service("Redis", &redis.url(), failovers, handovers)));
    drop(redis);
    let zookeeper = ZooKeeperServer::start().expect("ZooKeeper");
    rows.push(runtime.block_on(service("ZooKeeper", &zookeeper.url(), failovers, handovers)));
    drop(zookeeper);
    let etcd = EtcdServer::start().expect("etcd");
    rows.push(runtime.block_on(service("etcd", &etcd.url(), failovers, handovers)));
    drop(etcd);
    let report = json!({ "lease_ms": LEASE.as_millis() as u64, "services": rows });
    std::fs::write(&json_path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!("{}", markdown(&report));
    if let Some(path) = arg("--markdown") {
        std::fs::write(root(&path), markdown(&report)).unwrap();
    }
}

/// `path` from the workspace root, unless it is absolute.
fn root(path: &str) -> String {
    if path.starts_with('/') {
        return path.to_owned();
    }
    format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"))
}

fn options() -> ClientOptions {
    ClientOptions::default().default_lease(LEASE)
}

/// The killed participant: leads, says so, and waits to be killed.
async fn participant(url: &str, name: &str) {
    let client = Client::connect_with(url, options()).await.unwrap();
    let leading = client.election(name).campaign("doomed").await.unwrap();
    println!("leading {}", leading.term());
    std::io::stdout().flush().unwrap();
    std::future::pending::<()>().await;
}

/// Starts the killed participant on `name` and waits until it leads.
fn leader_process(url: &str, name: &str) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--participant", url, name])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let stdout = child.stdout.take().unwrap();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert!(line.starts_with("leading"), "the participant said {line:?}");
    child
}

/// The median and the largest of `samples`, and the 99th percentile, in ms.
fn stats(samples: &mut [Duration]) -> Value {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let at = |p: f64| ms(samples[((samples.len() - 1) as f64 * p).round() as usize]);
    json!({ "n": samples.len(), "median_ms": at(0.5), "p99_ms": at(0.99), "max_ms": at(1.0) })
}

/// The service's round trip: the median of `Election::leader` on a name nobody leads (one
/// read on Redis and etcd, a listing on ZooKeeper).
async fn round_trip(client: &Client) -> Duration {
    let election = client.election("rtt");
    let mut samples = Vec::new();
    for _ in 0..200 {
        let sent = Instant::now();
        election.leader().await.unwrap();
        samples.push(sent.elapsed());
    }
    samples.sort();
    samples[samples.len() / 2]
}

/// Campaigns on `election` in a task of its own; returns when it leads.
fn standby(election: Election) -> tokio::task::JoinHandle<(Leadership, Instant)> {
    tokio::spawn(async move {
        let leading = election.campaign("standby").await.unwrap();
        (leading, Instant::now())
    })
}

/// Failover after SIGKILL, `rounds` times.
async fn failovers(url: &str, client: &Client, rounds: usize) -> Vec<Duration> {
    let mut samples = Vec::new();
    for round in 0..rounds {
        let name = format!("failover-{round}");
        let mut leader = leader_process(url, &name);
        let waiting = standby(client.election(&name));
        // The standby queues behind the leader before the kill.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let killed = Instant::now();
        leader.kill().unwrap();
        leader.wait().unwrap();
        let (leading, at) = waiting.await.unwrap();
        samples.push(at - killed);
        leading.resign().await.unwrap();
    }
    samples
}

/// Resign to next leader, and to an observer's report of it, `rounds` times.
async fn handovers(
    client: &Client,
    other: &Client,
    rounds: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut next, mut observed) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let name = format!("handover-{round}");
        let mut observer = client.election(&name).observe().await.unwrap();
        observer.changed().await.unwrap();
        let leading = client.election(&name).campaign("leader").await.unwrap();
        assert!(observer.changed().await.unwrap().is_some());
        let waiting = standby(other.election(&name));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let resigned = Instant::now();
        leading.resign().await.unwrap();
        let seen = loop {
            if let Some(now) = observer.changed().await.unwrap() {
                break (now, Instant::now());
            }
        };
        let (successor, at) = waiting.await.unwrap();
        assert_eq!(seen.0.term, successor.term());
        next.push(at - resigned);
        observed.push(seen.1 - resigned);
        successor.resign().await.unwrap();
    }
    (next, observed)
}

/// One service's rows.
async fn service(name: &str, url: &str, failover_rounds: usize, handover_rounds: usize) -> Value {
    let client = Client::connect_with(url, options()).await.unwrap();
    let other = Client::connect_with(url, options()).await.unwrap();
    let rtt = round_trip(&client).await;
    let (mut next, mut observed) = handovers(&client, &other, handover_rounds).await;
    let mut failover = failovers(url, &client, failover_rounds).await;
    let rtt_ms = rtt.as_secs_f64() * 1e3;
    let lease_ms = LEASE.as_secs_f64() * 1e3;
    let failover = stats(&mut failover);
    let next = stats(&mut next);
    let observed = stats(&mut observed);
    let failover_bound = lease_ms + 2.0 * rtt_ms + 50.0;
    let next_bound = 2.0 * rtt_ms + 1.0;
    client.close().await.unwrap();
    other.close().await.unwrap();
    json!({
        "service": name,
        "round_trip_ms": rtt_ms,
        "failover": failover,
        "failover_bound_ms": failover_bound,
        "failover_within": failover["p99_ms"].as_f64().unwrap() <= failover_bound,
        "resign_to_next": next,
        "resign_to_next_bound_ms": next_bound,
        "resign_to_next_within": next["median_ms"].as_f64().unwrap() <= next_bound,
        "resign_to_observed": observed,
    })
}

fn markdown(report: &Value) -> String {
    let mut out = String::from(
        "# Leader elections: measured\n\n\
         Generated by `cargo bench -p fencelock --all-features --bench election -- --markdown \
         docs/PERFORMANCE-election.md` (one run; JSON in `target/bench-election.json`). Each \
         service is a throwaway server of the test kit on this machine; the lease (session \
         timeout, lease TTL) asked is ",
    );
    out += &format!(
        "{} ms. Round trip: the median of `Election::leader` on a name nobody leads.\n\n\
         | service | round trip (ms) | failover after SIGKILL p99 (median) ms | bound: lease + 2 RTT + 50 ms | resign → next leads, median (p99) ms | bound: 2 RTT + 1 ms | resign → observer, median (p99) ms |\n\
         |---|---|---|---|---|---|---|\n",
        report["lease_ms"]
    );
    for s in report["services"].as_array().unwrap() {
        let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
        let mark = |ok: &Value| {
            if ok.as_bool() == Some(true) {
                "met"
            } else {
                "**not met**"
            }
        };
        out += &format!(
            "| {} | {:.2} | {:.0} ({:.0}) | {:.0}: {} | {:.2} ({:.2}) | {:.2}: {} | {:.2} ({:.2}) |\n",
            s["service"].as_str().unwrap_or("?"),
            f(&s["round_trip_ms"]),
            f(&s["failover"]["p99_ms"]),
            f(&s["failover"]["median_ms"]),
            f(&s["failover_bound_ms"]),
            mark(&s["failover_within"]),
            f(&s["resign_to_next"]["median_ms"]),
            f(&s["resign_to_next"]["p99_ms"]),
            f(&s["resign_to_next_bound_ms"]),
            mark(&s["resign_to_next_within"]),
            f(&s["resign_to_observed"]["median_ms"]),
            f(&s["resign_to_observed"]["p99_ms"]),
        );
    }
    out
}
