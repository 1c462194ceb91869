//! Client-side cost per uncontended pair, free of timing noise: the benchmark runs itself
//! under valgrind (callgrind for instructions, DHAT for heap allocations) twice, with a few
//! and with many pairs, and divides the difference by the difference in pairs, so that
//! start-up and connecting cancel out. The server is not under valgrind.

use std::process::Command;

use fencelock_testkit::RedisServer;
use serde_json::{json, Map, Value};

use crate::libs::{Locker, Variant};
use crate::scenarios::RSLOCK_RETRY;

/// Set (to "variant url pairs") in the process valgrind runs.
const CHILD: &str = "FENCELOCK_BENCH_PAIRS";

/// Pair counts of the two runs whose difference is measured.
const FEW: u64 = 200;
const MANY: u64 = 1200;

/// In the process valgrind runs: makes the pairs and returns true.
pub fn child() -> bool {
    let Ok(spec) = std::env::var(CHILD) else {
        return false;
    };
    let mut parts = spec.split(' ');
    let variant = parts.next().and_then(Variant::parse).expect("variant");
    let url = parts.next().expect("url").to_owned();
    let pairs: u64 = parts.next().and_then(|n| n.parse().ok()).expect("pairs");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let locker = Locker::connect(variant, &[url], RSLOCK_RETRY).await;
        let lock = locker.handle("bench:profile");
        for _ in 0..pairs {
            lock.pair().await;
        }
    });
    true
}

/// Runs `pairs` pairs of `variant` under `tool`; returns what the tool printed on stderr and
/// the contents of its output file.
fn under(tool: &str, variant: Variant, url: &str, pairs: u64) -> (String, String) {
    let out = std::env::temp_dir().join(format!("fencelock-bench.{tool}.{}", std::process::id()));
    let run = Command::new("valgrind")
        .arg(format!("--tool={tool}"))
        .arg(format!("--{tool}-out-file={}", out.display()))
        .arg(std::env::current_exe().expect("own path"))
        .env(CHILD, format!("{} {url} {pairs}", variant.name()))
        .output()
        .expect("valgrind (apt-get install valgrind)");
    let file = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    (String::from_utf8_lossy(&run.stderr).into_owned(), file)
}

/// Instructions of a callgrind run (its `summary:` line).
fn instructions(variant: Variant, url: &str, pairs: u64) -> f64 {
    let (_, file) = under("callgrind", variant, url, pairs);
    file.lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("callgrind summary")
}

/// Heap blocks allocated in a DHAT run (its "Total: … in N blocks" line).
fn allocations(variant: Variant, url: &str, pairs: u64) -> f64 {
    let (stderr, _) = under("dhat", variant, url, pairs);
    stderr
        .lines()
        .find_map(|l| l.split("Total:").nth(1))
        .and_then(|l| l.split(" in ").nth(1))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.replace(',', "").parse().ok())
        .expect("dhat total")
}

/// Instructions and heap allocations per uncontended pair, for every variant.
pub fn measure(server: &RedisServer) -> Value {
    let url = server.url();
    let mut out = Map::new();
    for variant in Variant::ALL {
        eprintln!("valgrind: {}…", variant.name());
        let pairs = (MANY - FEW) as f64;
        let ins = (instructions(variant, &url, MANY) - instructions(variant, &url, FEW)) / pairs;
        let allocs = (allocations(variant, &url, MANY) - allocations(variant, &url, FEW)) / pairs;
        out.insert(
            variant.name().into(),
            json!({"instructions_per_pair": ins, "allocations_per_pair": allocs}),
        );
    }
    Value::Object(out)
}
