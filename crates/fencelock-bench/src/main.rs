//! fencelock beside rslock 0.10 (issue 12): the same scenarios, driven the same way, against
//! the same `redis-server`s (started by the test kit), in the same run, on a tokio
//! multi-thread runtime. Writes JSON and, with `--markdown`, docs/PERFORMANCE-rslock.md.
//!
//! ```text
//! cargo run --release --manifest-path crates/fencelock-bench/Cargo.toml -- [--secs 2] [--rounds 3] [--callgrind]
//!     [--json target/bench-rslock.json] [--markdown docs/PERFORMANCE-rslock.md]
//! ```
//! `--only uncontended,distinct,contended,redlock,script_costs,footprint` runs some scenarios
//! (`footprint`: 100,000 lock names taken and released once, with a short fence horizon, and
//! what the server keeps during and after it; `--names N` for another count). `--callgrind` adds the
//! instructions (and allocations) per uncontended pair, counted by valgrind, in the client and
//! in the server.

mod footprint;
mod libs;
mod markdown;
mod profile;
mod scenarios;
mod server;
mod server_profile;

use std::collections::BTreeMap;

use fencelock_testkit::RedisServer;
use serde_json::{json, Map, Value};

use libs::Variant;
use scenarios::Measured;

/// The command line.
pub struct Args {
    secs: f64,
    rounds: usize,
    json: String,
    markdown: Option<String>,
    only: Vec<String>,
    callgrind: bool,
    names: usize,
}

fn args() -> Args {
    let mut a = Args {
        secs: 2.0,
        rounds: 3,
        json: "target/bench-rslock.json".into(),
        markdown: None,
        only: Vec::new(),
        callgrind: false,
        names: 100_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--secs" => a.secs = it.next().and_then(|s| s.parse().ok()).expect("--secs N"),
            "--rounds" => a.rounds = it.next().and_then(|s| s.parse().ok()).expect("--rounds N"),
            "--json" => a.json = it.next().expect("--json PATH"),
            "--markdown" => a.markdown = it.next(),
            "--only" => {
                a.only = it
                    .next()
                    .expect("--only A,B")
                    .split(',')
                    .map(Into::into)
                    .collect()
            }
            "--callgrind" => a.callgrind = true,
            "--names" => a.names = it.next().and_then(|s| s.parse().ok()).expect("--names N"),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn main() {
    if profile::child() {
        return;
    }
    let args = args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let servers: Vec<RedisServer> = (0..5)
        .map(|_| RedisServer::start().expect("redis-server"))
        .collect();
    let mut report = Map::new();
    report.insert("secs_per_run".into(), json!(args.secs));
    report.insert("rounds".into(), json!(args.rounds));
    let wanted = |s: &str| args.only.is_empty() || args.only.iter().any(|o| o == s);
    let (n1, one) = ((20_000.0 * args.secs) as u32, &servers[0]);
    let (set, del, ceiling) = server::two_round_trips(one, n1 / 2);
    report.insert(
        "ceiling".into(),
        json!({"set_nx_px_rps": set, "evalsha_compare_and_delete_rps": del, "pairs_per_sec": ceiling}),
    );
    let url = one.url();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let scenarios: [(&str, &[&RedisServer]); 4] = [
        ("uncontended", &[one]),
        ("distinct", &[one]),
        ("contended", &[one]),
        ("redlock", &servers.iter().collect::<Vec<_>>()),
    ];
    for (name, on) in scenarios {
        if !wanted(name) {
            continue;
        }
        eprintln!("{name}…");
        let result = rounds(&args, on, |variant| {
            let (url, urls) = (url.clone(), urls.clone());
            runtime.block_on(async move {
                match name {
                    "uncontended" => {
                        scenarios::uncontended(variant, &[url], "bench:solo", args.secs).await
                    }
                    "distinct" => scenarios::distinct(variant, &url, 64, args.secs).await,
                    "contended" => scenarios::contended(variant, &url, 8, args.secs).await,
                    _ => scenarios::uncontended(variant, &urls, "bench:redlock", args.secs).await,
                }
            })
        });
        report.insert(name.into(), result);
    }
    if wanted("script_costs") {
        let costs: Vec<Value> = server::script_costs(one, n1 / 2)
            .into_iter()
            .map(|(what, us)| json!({"script": what, "us_per_call": us}))
            .collect();
        report.insert("script_costs".into(), json!(costs));
    }
    if wanted("footprint") {
        eprintln!("footprint…");
        let measured = runtime.block_on(footprint::measure(one, args.names));
        report.insert("footprint".into(), measured);
    }
    if args.callgrind {
        report.insert("callgrind".into(), profile::measure(one));
        report.insert("server_callgrind".into(), server_profile::measure(&runtime));
    }
    let report = Value::Object(report);
    if let Some(dir) = std::path::Path::new(&args.json).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(
        &args.json,
        serde_json::to_string_pretty(&report).expect("json"),
    )
    .expect("write JSON");
    eprintln!("wrote {}", args.json);
    if let Some(path) = &args.markdown {
        std::fs::write(path, markdown::render(&report)).expect("write markdown");
        eprintln!("wrote {path}");
    }
}

/// Runs `run` for every variant, `args.rounds` times, the variants taking turns (the order
/// rotates every round) so that other load on the machine hits them alike. Counts the server
/// commands of each run. Returns every round and the median of each figure.
fn rounds(args: &Args, on: &[&RedisServer], run: impl Fn(Variant) -> Measured) -> Value {
    let mut all: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for round in 0..args.rounds {
        for i in 0..Variant::ALL.len() {
            let variant = Variant::ALL[(i + round) % Variant::ALL.len()];
            for s in on {
                s.command(&["FLUSHALL"]).expect("FLUSHALL");
            }
            let before: Vec<_> = on.iter().map(|s| server::counts(s)).collect();
            let cpu_before: f64 = on.iter().map(|s| server::cpu_us(s)).sum();
            let scripts_before: f64 = on.iter().map(|s| server::script_us(s)).sum();
            let measured = run(variant);
            let cpu: f64 = on.iter().map(|s| server::cpu_us(s)).sum::<f64>() - cpu_before;
            let scripts = on.iter().map(|s| server::script_us(s)).sum::<f64>() - scripts_before;
            let mut commands = BTreeMap::new();
            for (s, before) in on.iter().zip(&before) {
                for (name, n) in server::per(before, &server::counts(s), measured.count) {
                    *commands.entry(name).or_insert(0.0) += n;
                }
            }
            let mut value = measured.value;
            value["server_commands_per_op"] = json!(server::total(&commands));
            value["server_commands"] = json!(commands);
            value["server_cpu_us_per_op"] = json!(cpu / measured.count.max(1) as f64);
            value["server_script_us_per_op"] = json!(scripts / measured.count.max(1) as f64);
            all.entry(variant.name()).or_default().push(value);
        }
    }
    let mut out = Map::new();
    for (variant, runs) in all {
        out.insert(
            variant.into(),
            json!({"median": median(&runs), "runs": runs}),
        );
    }
    Value::Object(out)
}

/// The median of every numeric field over the runs (other fields from the first run).
fn median(runs: &[Value]) -> Value {
    let mut out = runs[0].clone();
    let Some(fields) = out.as_object_mut() else {
        return out;
    };
    for (key, value) in fields.iter_mut() {
        if value.is_number() {
            let mut v: Vec<f64> = runs.iter().filter_map(|r| r[key].as_f64()).collect();
            v.sort_by(f64::total_cmp);
            *value = json!(v[v.len() / 2]);
        }
    }
    out
}
