//! `fencelock status` without NAME on a Redis with many names (issue 33): how long the
//! listing takes and how much memory the `fencelock` process needs, for 10,000 and 100,000
//! held locks, so that the two rows show whether memory grows with the count.
//!
//! `cargo bench -p fencelock-cli --bench listing [-- N...]` (default: 10000 100000). The test
//! kit's `redis-server` on a free port; the names are mutexes taken by the library with a
//! fixed 10-minute lease (no renewals meanwhile), 64 at a time; the `fencelock` binary of
//! this build lists them as JSON into a pipe that counts lines. Its peak resident memory is
//! its `ru_maxrss` (`wait4`). Prints one Markdown row per count.

use std::process::Stdio;
use std::time::{Duration, Instant};

use fencelock::{Client, LockOptions};
use futures_util::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Takes `n` locks `bench-<offset + i>` with a long fixed lease; returns the guards.
async fn fill(client: &Client, offset: usize, n: usize) -> Vec<fencelock::Guard> {
    let options = LockOptions::default().lease(Duration::from_secs(600));
    futures_util::stream::iter(offset..offset + n)
        .map(|i| {
            let lock = client
                .lock(&format!("bench-{i}"))
                .with_options(options.clone());
            async move { lock.acquire().await.expect("acquire") }
        })
        .buffer_unordered(64)
        .collect()
        .await
}

/// Runs `fencelock status --json` against `url` under `/usr/bin/time -f %M`: the names
/// listed, the wall time and the process's peak resident memory in KiB.
async fn list(url: &str) -> (usize, Duration, u64) {
    let start = Instant::now();
    let mut child = tokio::process::Command::new("/usr/bin/time")
        .args([
            "-f",
            "%M",
            env!("CARGO_BIN_EXE_fencelock"),
            "status",
            "--json",
        ])
        .env("FENCELOCK_URL", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("/usr/bin/time and fencelock run");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut listed = 0;
    while let Some(line) = lines.next_line().await.expect("read") {
        listed += usize::from(line.contains("\"name\""));
    }
    let out = child.wait_with_output().await.expect("wait");
    let elapsed = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "fencelock status failed: {stderr}");
    let kib = stderr
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .expect("time's %M");
    (listed, elapsed, kib)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let counts = match counts.is_empty() {
        true => vec![10_000, 100_000],
        false => counts,
    };
    let server = fencelock_testkit::RedisServer::start().expect("redis-server");
    let client = Client::connect(&server.url()).await.expect("connect");
    println!(
        "| names held | listed | `fencelock status --json` wall time | peak RSS of `fencelock` |"
    );
    println!("|---|---|---|---|");
    let mut guards = Vec::new();
    for n in counts {
        let more = n.saturating_sub(guards.len());
        let offset = guards.len();
        guards.extend(fill(&client, offset, more).await);
        let (listed, took, kib) = list(&server.url()).await;
        println!(
            "| {n} | {listed} | {:.2} s | {:.1} MiB |",
            took.as_secs_f64(),
            kib as f64 / 1024.0
        );
    }
}
