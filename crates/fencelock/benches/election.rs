//! Leader-election figures (issue 25) on one Redis, ZooKeeper and etcd, each from the test
//! kit, with the service's round trip measured in the same run:
//!
//! - **failover**: a participant in a process of its own leads; it is killed (SIGKILL) and the
//!   time until the waiting participant leads is taken, against the bound "the lease (or
//!   session timeout) + 2 round trips + 50 ms", p99 over the rounds;
//! - **resign → next**: from a leader's `resign` call to the waiting participant's `campaign`
//!   returning, against "2 round trips + 1 ms", median over the rounds;
//! - **observe**: from that `resign` call to an observer's report of the new leader;
//! - **peers**, process against process, the same way for each: from the leader's process
//!   being told to resign (a line on its stdin; SIGTERM for `etcdctl`) to the next
//!   participant's process printing that it leads, and an observer process printing it:
//!   fencelock's participants beside Curator's `LeaderLatch` (ZooKeeper) and beside
//!   `etcdctl elect` and `etcdctl elect -l` (etcd).
//!
//! `cargo bench -p fencelock --all-features --bench election -- [--quick]
//! [--markdown docs/PERFORMANCE-election.md] [--json PATH]`. The bench runs itself again as
//! its participant and observer processes (`--participant URL NAME hold|stdin`, `--observer
//! URL NAME`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fencelock::{Client, ClientOptions, Election, Leadership};
use fencelock_testkit::etcd::etcdctl_program;
use fencelock_testkit::{CuratorLatch, EtcdServer, RedisServer, ZooKeeperServer};
use serde_json::{json, Value};

/// The lease (session timeout, lease TTL) every participant asks for.
const LEASE: Duration = Duration::from_secs(2);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    match args.first().map(String::as_str) {
        Some("--participant") => {
            return runtime.block_on(participant(&args[1], &args[2], &args[3]))
        }
        Some("--observer") => return runtime.block_on(observer(&args[1], &args[2])),
        _ => {}
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
    let raw = Raw::Redis(redis.url());
    rows.push(runtime.block_on(service("Redis", &redis.url(), raw, failovers, handovers)));
    drop(redis);
    let mut peers = Vec::new();
    let zookeeper = ZooKeeperServer::start().expect("ZooKeeper");
    let (raw, url) = (Raw::ZooKeeper(zookeeper.connect_string()), zookeeper.url());
    rows.push(runtime.block_on(service("ZooKeeper", &url, raw, failovers, handovers)));
    peers.push(curator_peer(&zookeeper, failovers));
    drop(zookeeper);
    let etcd = EtcdServer::start().expect("etcd");
    let (raw, url) = (Raw::Etcd(etcd.endpoints()), etcd.url());
    let mut row = runtime.block_on(service("etcd", &url, raw, failovers, handovers));
    let mut lag = runtime.block_on(etcd_expiry(&etcd.endpoints(), failovers));
    row["server_expiry"] = stats(&mut lag);
    rows.push(row);
    peers.push(etcdctl_peer(&etcd, failovers));
    drop(etcd);
    let report = json!({
        "lease_ms": LEASE.as_millis() as u64,
        "services": rows,
        "peers": peers,
    });
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

/// A participant process: campaigns, says when it leads; `hold` then waits to be killed,
/// `stdin` resigns at the line `resign` and says `resigned`.
async fn participant(url: &str, name: &str, mode: &str) {
    let client = Client::connect_with(url, options()).await.unwrap();
    println!("campaigning");
    std::io::stdout().flush().unwrap();
    let leading = client.election(name).campaign(mode).await.unwrap();
    println!("leading {}", leading.term());
    std::io::stdout().flush().unwrap();
    if mode == "hold" {
        std::future::pending::<()>().await;
    }
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    });
    if line.await.unwrap().unwrap().trim() == "resign" {
        leading.resign().await.unwrap();
        println!("resigned");
    }
    client.close().await.unwrap();
}

/// An observer process: prints `leader <value> <term>` or `none` at each change.
async fn observer(url: &str, name: &str) {
    let client = Client::connect_with(url, options()).await.unwrap();
    let mut observer = client.election(name).observe().await.unwrap();
    loop {
        match observer.changed().await.unwrap() {
            Some(now) => println!("leader {} {}", now.value, now.term),
            None => println!("none"),
        }
        std::io::stdout().flush().unwrap();
    }
}

/// A child process whose output lines are timestamped as they arrive.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<(String, Instant)>,
}

impl Proc {
    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send((line, Instant::now()));
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
        }
    }

    /// A fencelock participant (`mode`: `hold` or `stdin`) or observer of `name`.
    fn fencelock(args: &[&str]) -> Self {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command.args(args);
        Self::spawn(command)
    }

    /// When the first line containing `word` arrived (at most 30 s).
    fn wait(&self, word: &str) -> Instant {
        loop {
            let (line, at) = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("no line with {word:?}: {e}"));
            if line.contains(word) {
                return at;
            }
        }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// fencelock's participants and observer as processes: resign (a line on stdin) to the next
/// participant leading, and to the observer printing it, `rounds` times.
fn fencelock_processes(url: &str, rounds: usize) -> (Vec<Duration>, Vec<Duration>) {
    let (mut next, mut observed) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let name = format!("processes-{round}");
        let watcher = Proc::fencelock(&["--observer", url, &name]);
        watcher.wait("none");
        let mut leader = Proc::fencelock(&["--participant", url, &name, "stdin"]);
        leader.wait("leading");
        watcher.wait("leader");
        let standby = Proc::fencelock(&["--participant", url, &name, "hold"]);
        standby.wait("campaigning");
        std::thread::sleep(Duration::from_millis(300));
        let resigned = Instant::now();
        leader.say("resign");
        next.push(standby.wait("leading") - resigned);
        observed.push(watcher.wait("leader hold") - resigned);
    }
    (next, observed)
}

/// ZooKeeper: fencelock's participant processes beside Curator's `LeaderLatch` processes.
fn curator_peer(server: &ZooKeeperServer, rounds: usize) -> Value {
    let (mut ours, mut observed) = fencelock_processes(&server.url(), rounds);
    let mut curator = Vec::new();
    for round in 0..rounds {
        let path = format!("/fencelock/latch-{round}");
        let connect = server.connect_string();
        let mut leader = CuratorLatch::spawn(&connect, &path, "a", LEASE).unwrap();
        leader.wait_leading(Duration::from_secs(30)).unwrap();
        let standby = CuratorLatch::spawn(&connect, &path, "b", LEASE).unwrap();
        standby.wait_started(Duration::from_secs(30)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let led = std::thread::scope(|scope| {
            let waiting = scope.spawn(|| {
                standby.wait_leading(Duration::from_secs(30)).unwrap();
                Instant::now()
            });
            let resigned = Instant::now();
            leader.close().unwrap();
            waiting.join().unwrap() - resigned
        });
        curator.push(led);
    }
    json!({
        "service": "ZooKeeper",
        "peer": "Curator LeaderLatch",
        "fencelock_resign_to_next": stats(&mut ours),
        "fencelock_resign_to_observed": stats(&mut observed),
        "peer_resign_to_next": stats(&mut curator),
    })
}

/// etcd: fencelock's participant and observer processes beside `etcdctl elect` and
/// `etcdctl elect -l` (the election's prefix is the name below the URL's prefix).
fn etcdctl_peer(server: &EtcdServer, rounds: usize) -> Value {
    let (mut ours, mut ours_observed) = fencelock_processes(&server.url(), rounds);
    let (mut next, mut observed) = (Vec::new(), Vec::new());
    let etcdctl = |args: &[&str]| {
        let mut command = Command::new(etcdctl_program().unwrap());
        command
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", server.endpoints()))
            .arg("elect")
            .args(args);
        Proc::spawn(command)
    };
    for round in 0..rounds {
        let name = format!("/etcdctl-{round}");
        let watcher = etcdctl(&["-l", &name]);
        let leader = etcdctl(&[&name, "first"]);
        leader.wait("first");
        watcher.wait("first");
        let standby = etcdctl(&[&name, "second"]);
        std::thread::sleep(Duration::from_millis(300));
        // etcdctl resigns on SIGTERM (the `kill` program: no signal crate in this package). The
        // clock starts once `kill` has sent it: the peer is not charged for starting `kill`.
        let pid = leader.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let resigned = Instant::now();
        next.push(standby.wait("second") - resigned);
        observed.push(watcher.wait("second") - resigned);
        drop(leader);
    }
    json!({
        "service": "etcd",
        "peer": "etcdctl elect",
        "fencelock_resign_to_next": stats(&mut ours),
        "fencelock_resign_to_observed": stats(&mut ours_observed),
        "peer_resign_to_next": stats(&mut next),
        "peer_resign_to_observed": stats(&mut observed),
    })
}

/// Starts the killed participant on `name` and waits until it leads.
fn leader_process(url: &str, name: &str) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--participant", url, name, "hold"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let leads = lines.find(|l| l.as_ref().is_ok_and(|l| l.starts_with("leading")));
    assert!(leads.is_some(), "the participant never led");
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

/// A service's own client, for the write round trip.
enum Raw {
    /// A Redis URL.
    Redis(String),
    /// A ZooKeeper connect string.
    ZooKeeper(String),
    /// etcd endpoints (`host:port`).
    Etcd(String),
}

/// The median round trip of a write with the service's own client (`SET`, `setData`, `put`):
/// a resign is a write, and the next leader can lead only once the write is committed.
async fn write_round_trip(raw: Raw) -> Duration {
    let mut samples = Vec::new();
    match raw {
        Raw::Redis(url) => {
            let client = redis::Client::open(url).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            for _ in 0..200 {
                let sent = Instant::now();
                let mut set = redis::cmd("SET");
                set.arg("rtt").arg("v");
                let _: () = set.query_async(&mut c).await.unwrap();
                samples.push(sent.elapsed());
            }
        }
        Raw::ZooKeeper(connect) => {
            let c = zookeeper_client::Client::connect(&connect).await.unwrap();
            let mode = zookeeper_client::CreateMode::Persistent
                .with_acls(zookeeper_client::Acls::anyone_all());
            let _ = c.create("/rtt", b"v", &mode).await;
            for _ in 0..200 {
                let sent = Instant::now();
                c.set_data("/rtt", b"v", None).await.unwrap();
                samples.push(sent.elapsed());
            }
        }
        Raw::Etcd(endpoints) => {
            let endpoint = format!("http://{endpoints}");
            let mut c = etcd_client::Client::connect([endpoint], None)
                .await
                .unwrap();
            for _ in 0..200 {
                let sent = Instant::now();
                c.put("rtt", "v", None).await.unwrap();
                samples.push(sent.elapsed());
            }
        }
    }
    samples.sort();
    samples[samples.len() / 2]
}

/// etcd's own expiry of a lease nobody renews, with its client alone: from the grant's reply
/// to the deletion of a key under it (seen by a watch), `rounds` times. The floor of any
/// failover on etcd: the lease's TTL plus the server's lag in revoking it.
async fn etcd_expiry(endpoints: &str, rounds: usize) -> Vec<Duration> {
    let endpoint = format!("http://{endpoints}");
    let mut c = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    let ttl = LEASE.as_secs() as i64;
    let mut samples = Vec::new();
    for round in 0..rounds {
        let key = format!("expiry-{round}");
        let mut events = c.watch(key.as_str(), None).await.unwrap();
        let lease = c.lease_grant(ttl, None).await.unwrap().id();
        let granted = Instant::now();
        let put = etcd_client::PutOptions::new().with_lease(lease);
        c.put(key.as_str(), "v", Some(put)).await.unwrap();
        loop {
            let message = events.message().await.unwrap().expect("the watch ended");
            let deleted = message
                .events()
                .iter()
                .any(|e| e.event_type() == etcd_client::EventType::Delete);
            if deleted {
                break;
            }
        }
        samples.push(granted.elapsed());
    }
    samples
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
async fn service(
    name: &str,
    url: &str,
    raw: Raw,
    failover_rounds: usize,
    handover_rounds: usize,
) -> Value {
    let client = Client::connect_with(url, options()).await.unwrap();
    let other = Client::connect_with(url, options()).await.unwrap();
    let rtt = round_trip(&client).await;
    let write_ms = write_round_trip(raw).await.as_secs_f64() * 1e3;
    let (mut next, mut observed) = handovers(&client, &other, handover_rounds).await;
    let mut failover = failovers(url, &client, failover_rounds).await;
    let rtt_ms = rtt.as_secs_f64() * 1e3;
    let lease_ms = LEASE.as_secs_f64() * 1e3;
    let failover = stats(&mut failover);
    let next = stats(&mut next);
    let observed = stats(&mut observed);
    let failover_bound = lease_ms + 2.0 * write_ms + 50.0;
    let next_bound = 2.0 * write_ms + 1.0;
    client.close().await.unwrap();
    other.close().await.unwrap();
    json!({
        "service": name,
        "round_trip_ms": rtt_ms,
        "write_round_trip_ms": write_ms,
        "failover": failover,
        "failover_bound_ms": failover_bound,
        "failover_within": failover["p99_ms"].as_f64().unwrap() <= failover_bound,
        "resign_to_next": next,
        "resign_to_next_bound_ms": next_bound,
        "resign_to_next_within": next["median_ms"].as_f64().unwrap() <= next_bound,
        "resign_to_observed": observed,
    })
}

/// The peers' table: fencelock's processes and the peer's, measured alike.
fn peers_markdown(report: &Value) -> String {
    let mut out = String::from(
        "\n## Beside Curator and etcdctl, process against process\n\n\
         From the leader's process being told to resign (a line on its stdin; SIGTERM for \
         `etcdctl elect`, which resigns on it) to the next participant's process printing that \
         it leads, and to an observer process printing the new leader (`etcdctl elect -l`; \
         Curator's `LeaderLatch` has no observer). Medians in ms (p99); the ratio is the \
         peer's median over fencelock's (above 1: fencelock is faster).\n\n\
         | service | peer | resign → next leads: fencelock | peer | ratio | resign → observer: fencelock | peer | ratio |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let cell = |v: &Value| {
        let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        format!("{:.1} ({:.1})", f("median_ms"), f("p99_ms"))
    };
    let ratio = |peer: &Value, ours: &Value| {
        let (p, o) = (peer["median_ms"].as_f64(), ours["median_ms"].as_f64());
        match (p, o) {
            (Some(p), Some(o)) => format!("{:.2}", p / o),
            _ => "–".into(),
        }
    };
    for p in report["peers"].as_array().into_iter().flatten() {
        let (ours, theirs) = (&p["fencelock_resign_to_next"], &p["peer_resign_to_next"]);
        let (ours_o, theirs_o) = (
            &p["fencelock_resign_to_observed"],
            &p["peer_resign_to_observed"],
        );
        let observed_peer = if theirs_o.is_null() {
            "–".to_owned()
        } else {
            cell(theirs_o)
        };
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            p["service"].as_str().unwrap_or("?"),
            p["peer"].as_str().unwrap_or("?"),
            cell(ours),
            cell(theirs),
            ratio(theirs, ours),
            cell(ours_o),
            observed_peer,
            if theirs_o.is_null() {
                "–".to_owned()
            } else {
                ratio(theirs_o, ours_o)
            },
        );
    }
    out
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
        "{} ms. Read RTT: the median of `Election::leader` on a name nobody leads; write RTT \
         (the RTT of the bounds): the median of a write with the service's own client (`SET`, \
         `setData`, `put`), since a resign is a write and the next leader leads only once it \
         is committed.\n\n\
         | service | read RTT (ms) | write RTT (ms) | failover after SIGKILL p99 (median) ms | bound: lease + 2 RTT + 50 ms | resign → next leads, median (p99) ms | bound: 2 RTT + 1 ms | resign → observer, median (p99) ms |\n\
         |---|---|---|---|---|---|---|---|\n",
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
            "| {} | {:.2} | {:.2} | {:.0} ({:.0}) | {:.0}: {} | {:.2} ({:.2}) | {:.2}: {} | {:.2} ({:.2}) |\n",
            s["service"].as_str().unwrap_or("?"),
            f(&s["round_trip_ms"]),
            f(&s["write_round_trip_ms"]),
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
    for s in report["services"].as_array().into_iter().flatten() {
        if let Some(expiry) = s.get("server_expiry").filter(|v| !v.is_null()) {
            out += &format!(
                "\netcd's own expiry of a lease nobody renews ({} ms TTL; from the grant's reply to \
                 the deletion of a key under it, seen by a watch, with etcd's client alone): \
                 median {:.0} ms, p99 {:.0} ms. That is the floor of any failover on etcd; \
                 fencelock's failover p99 is {:.0} ms.\n",
                report["lease_ms"],
                expiry["median_ms"].as_f64().unwrap_or(f64::NAN),
                expiry["p99_ms"].as_f64().unwrap_or(f64::NAN),
                s["failover"]["p99_ms"].as_f64().unwrap_or(f64::NAN),
            );
        }
    }
    out +=
        "\n**Reading the failover column.** A killed leader sends nothing: the next participant \
             leads once the server ends the leader's lease or session, and no client can make that \
             sooner without acting on a lease it does not hold. Redis expires the key when its \
             lease (at most 2 s after the leader's last renewal) runs out, and the waiter wakes at \
             that expiry; ZooKeeper expires the session on its tick (200 ms in the test kit) once \
             the timeout passed; etcd revokes an expired lease in its lessor's loop, which runs \
             every 500 ms (etcd `server/lease/lessor.go`, `runLoop`), so a failover on etcd takes \
             up to TTL + 500 ms + a revocation's commit, whatever the client: fencelock's etcd \
             row is bound by that loop, not by its own requests (its waiter is woken by the \
             deletion's watch event).\n";
    out + &peers_markdown(report)
}
