//! The ZooKeeper rows: fencelock's read pair, write pair and permit pair beside Curator's
//! `InterProcessReadWriteLock` and `InterProcessSemaphoreV2` (`CuratorBench`, kept running
//! between slices with its `again` line), taking turns slice by slice on one server.

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout};
use std::time::Duration;

use fencelock::Client;
use fencelock_testkit::{curator_bench, ZooKeeperServer};
use serde_json::{json, Value};

use super::{contend, median, rate, Hold, Plan, Primitive};

/// The semaphore's N in every ZooKeeper row.
const PERMITS: u32 = 3;
/// Contending workers, and how long each holds.
const WORKERS: usize = 8;
const HOLD: Duration = Duration::from_millis(1);

/// Requests the server has received (`mntr`'s `zk_packets_received`, as `bench/zookeeper.rs`
/// counts them: the difference of two readings is one more than the requests between them).
fn packets_received(server: &ZooKeeperServer) -> f64 {
    let mntr = server.four_letter("mntr").expect("mntr");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_packets_received"))
        .and_then(|v| v.trim().parse().ok())
        .expect("zk_packets_received in mntr")
}

/// A running `CuratorBench`: one `RESULT` per slice.
struct Curator {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    started: bool,
}

impl Curator {
    /// Starts it with `args` and waits for `READY` (after its warm-up).
    fn start(server: &ZooKeeperServer, args: &[String]) -> Result<Self, String> {
        let connect = server.connect_string();
        let mut all = vec![connect.as_str()];
        all.extend(args.iter().map(String::as_str));
        let mut child = curator_bench(&all)
            .map_err(|e| e.to_string())?
            .spawn()
            .map_err(|e| e.to_string())?;
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut curator = Self {
            child,
            stdin,
            lines,
            started: false,
        };
        match curator.line()?.as_str() {
            "READY" => Ok(curator),
            other => Err(format!("CuratorBench said {other}")),
        }
    }

    fn line(&mut self) -> Result<String, String> {
        match self.lines.next() {
            Some(Ok(l)) if l.starts_with("ERROR") => Err(l),
            Some(Ok(l)) => Ok(l),
            _ => Err("CuratorBench closed its output".into()),
        }
    }

    /// Measures one slice: its `RESULT` fields.
    fn slice(&mut self) -> Result<Value, String> {
        let word = if self.started { "again" } else { "go" };
        self.started = true;
        writeln!(self.stdin, "{word}").map_err(|e| e.to_string())?;
        let result = self.line()?;
        let fields = result
            .strip_prefix("RESULT ")
            .ok_or(format!("CuratorBench said {result}"))?;
        let mut out = serde_json::Map::new();
        for kv in fields.split(' ') {
            if let Some((k, v)) = kv.split_once('=') {
                out.insert(k.into(), json!(v.parse::<f64>().unwrap_or(f64::NAN)));
            }
        }
        Ok(Value::Object(out))
    }
}

impl Drop for Curator {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "exit");
        let _ = self.child.wait();
    }
}

/// One Curator slice, and the server requests it sent.
fn counted_slice(curator: &mut Curator, server: &ZooKeeperServer) -> (Result<Value, String>, f64) {
    let before = packets_received(server);
    let r = curator.slice();
    (r, packets_received(server) - before - 1.0)
}

/// `CuratorBench`'s arguments after the mode's own: the primitive (and N).
fn primitive_args(p: Primitive) -> Vec<String> {
    let mut args = vec![p.label().to_owned()];
    if let Primitive::Permit(n) = p {
        args.push(n.to_string());
    }
    args
}

/// Uncontended pairs/s of `p`, fencelock and Curator taking turns: the median ratio.
fn uncontended(
    rt: &tokio::runtime::Runtime,
    server: &ZooKeeperServer,
    p: Primitive,
    plan: Plan,
) -> Value {
    let client = rt.block_on(Client::connect(&server.url())).unwrap();
    let taker = p.taker(&client, &format!("solo-{}", p.label()), None);
    // The folder is created, and the code warmed, before measuring.
    rt.block_on(rate(0.5, || taker.pair()));
    let mut args = vec!["solo".to_owned(), plan.slice_secs.to_string()];
    args.extend(primitive_args(p));
    let mut curator = match Curator::start(server, &args) {
        Ok(c) => c,
        Err(e) => return json!({ "not_measured": e }),
    };
    let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut our_requests, mut their_requests) = (Vec::new(), Vec::new());
    for i in 0..plan.slices {
        // Who goes first alternates, so that neither side always follows the other.
        let early = (i % 2 == 1).then(|| counted_slice(&mut curator, server));
        let before = packets_received(server);
        let mine = rt.block_on(rate(plan.slice_secs, || taker.pair()));
        let mine_requests = packets_received(server) - before - 1.0;
        let (r, peer_requests) = match early.unwrap_or_else(|| counted_slice(&mut curator, server))
        {
            (Ok(r), requests) => (r, requests),
            (Err(e), _) => return json!({ "not_measured": e }),
        };
        let pairs = r["pairs"].as_f64().unwrap_or(0.0);
        let peer = pairs / r["secs"].as_f64().unwrap_or(1.0);
        our_requests.push(mine_requests / (mine * plan.slice_secs));
        their_requests.push(peer_requests / pairs);
        ours.push(mine);
        theirs.push(peer);
        ratios.push(mine / peer);
    }
    drop(curator);
    rt.block_on(client.close()).unwrap();
    json!({
        "pairs_per_sec": median(ours.clone()),
        "curator_pairs_per_sec": median(theirs.clone()),
        "ratio": median(ratios.clone()),
        "requests_per_pair": median(our_requests),
        "curator_requests_per_pair": median(their_requests),
        "slices": { "fencelock": ours, "curator": theirs, "ratio": ratios },
        "met": median(ratios) >= 1.0,
    })
}

/// The handoff gap of `p` under [`WORKERS`] workers, fencelock and Curator taking turns.
fn contended(
    rt: &tokio::runtime::Runtime,
    server: &ZooKeeperServer,
    p: Primitive,
    plan: Plan,
) -> Value {
    let client = rt.block_on(Client::connect(&server.url())).unwrap();
    let name = format!("contend-{}", p.label());
    let takers: Vec<_> = (0..WORKERS)
        .map(|w| p.taker(&client, &name, Some(w)))
        .collect();
    let limit = match p {
        Primitive::Permit(n) => u64::from(n),
        _ => u64::MAX,
    };
    let mixed = p == Primitive::Read;
    rt.block_on(contend(takers.clone(), limit, mixed, Hold::Spin(HOLD), 0.5));
    let mut args = vec![
        "contend".to_owned(),
        plan.contend_secs.to_string(),
        WORKERS.to_string(),
        HOLD.as_micros().to_string(),
    ];
    args.extend(primitive_args(p));
    let mut curator = match Curator::start(server, &args) {
        Ok(c) => c,
        Err(e) => return json!({ "not_measured": e }),
    };
    let mut rows = Vec::new();
    for i in 0..plan.contend_slices {
        // Who goes first alternates, so that neither side always follows the other.
        let early = (i % 2 == 1).then(|| curator.slice());
        let ours = rt.block_on(contend(
            takers.clone(),
            limit,
            mixed,
            Hold::Spin(HOLD),
            plan.contend_secs,
        ));
        let theirs = match early.unwrap_or_else(|| curator.slice()) {
            Ok(r) => r,
            Err(e) => return json!({ "not_measured": e }),
        };
        rows.push(json!({
            "gap_p50_us": ours.gap_p50_us,
            "gap_p99_us": ours.gap_p99_us,
            "writer_gap_p50_us": ours.writer_gap_p50_us,
            "writer_gap_p99_us": ours.writer_gap_p99_us,
            "gaps": ours.gaps,
            "acquisitions": ours.per_worker.iter().sum::<u64>(),
            "overlaps": ours.overlaps,
            "curator": theirs,
        }));
    }
    drop(curator);
    rt.block_on(client.close()).unwrap();
    summary(rows)
}

/// The medians over the contended slices, and whether fencelock is at least as good.
fn summary(rows: Vec<Value>) -> Value {
    let med = |f: &dyn Fn(&Value) -> &Value| {
        median(
            rows.iter()
                .map(|r| f(r).as_f64().unwrap_or(f64::NAN))
                .collect(),
        )
    };
    let ours = (med(&|r| &r["gap_p50_us"]), med(&|r| &r["gap_p99_us"]));
    let theirs = (
        med(&|r| &r["curator"]["gap_p50_us"]),
        med(&|r| &r["curator"]["gap_p99_us"]),
    );
    let overlaps: f64 = rows
        .iter()
        .map(|r| r["overlaps"].as_f64().unwrap_or(0.0))
        .sum();
    json!({
        "gap_p50_us": ours.0,
        "gap_p99_us": ours.1,
        "writer_gap_p50_us": med(&|r| &r["writer_gap_p50_us"]),
        "writer_gap_p99_us": med(&|r| &r["writer_gap_p99_us"]),
        "curator_gap_p50_us": theirs.0,
        "curator_gap_p99_us": theirs.1,
        "curator_writer_gap_p50_us": med(&|r| &r["curator"]["w_gap_p50_us"]),
        "curator_writer_gap_p99_us": med(&|r| &r["curator"]["w_gap_p99_us"]),
        "ratio_p50": theirs.0 / ours.0,
        "ratio_p99": theirs.1 / ours.1,
        "overlaps": overlaps,
        "met": ours.0 <= theirs.0 && ours.1 <= theirs.1 && overlaps == 0.0,
        "slices": rows,
    })
}

/// Every ZooKeeper row on one server of the test kit.
/// Uncontended rows run on the current-thread runtime `single` (as `bench.rs` measures the
/// mutex), contended ones on `multi`.
pub fn run(multi: &tokio::runtime::Runtime, single: &tokio::runtime::Runtime, plan: Plan) -> Value {
    let server = ZooKeeperServer::start().expect("ZooKeeper");
    let mut rows = serde_json::Map::new();
    for p in [
        Primitive::Read,
        Primitive::Write,
        Primitive::Permit(PERMITS),
    ] {
        let solo = uncontended(single, &server, p, plan);
        let busy = contended(multi, &server, p, plan);
        rows.insert(
            p.label().into(),
            json!({ "uncontended": solo, "contended": busy }),
        );
    }
    json!({
        "permits": PERMITS,
        "workers": WORKERS,
        "hold_us": HOLD.as_micros() as u64,
        "rows": rows,
    })
}
