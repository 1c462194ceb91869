//! The scenarios of issue 12, each run the same way for every [`Variant`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::libs::{Locker, Variant};

/// rslock's polling interval while it waits for a contended lock (its default is 200 ms).
pub const RSLOCK_RETRY: Duration = Duration::from_millis(2);

/// The `p` quantile of sorted durations, in µs.
pub fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// What a scenario measured, and how many pairs (or acquisitions) it made.
pub struct Measured {
    pub value: Value,
    pub count: u64,
}

/// One task, one client: acquire + release pairs for `secs` on one key.
pub async fn uncontended(variant: Variant, urls: &[String], key: &str, secs: f64) -> Measured {
    let locker = Locker::connect(variant, urls, RSLOCK_RETRY).await;
    let lock = locker.handle(key);
    lock.pair().await; // connections up, scripts loaded
    let mut pairs = Vec::with_capacity(100_000);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let t = Instant::now();
        lock.pair().await;
        pairs.push(t.elapsed());
    }
    let elapsed = start.elapsed().as_secs_f64();
    pairs.sort();
    Measured {
        count: pairs.len() as u64,
        value: json!({
            "pairs_per_sec": pairs.len() as f64 / elapsed,
            "pair_p50_us": percentile(&pairs, 0.5),
            "pair_p99_us": percentile(&pairs, 0.99),
        }),
    }
}

/// `tasks` tasks on distinct keys over one client, for `secs`.
pub async fn distinct(variant: Variant, url: &str, tasks: usize, secs: f64) -> Measured {
    let locker = Locker::connect(variant, &[url.to_owned()], RSLOCK_RETRY).await;
    let pairs = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|i| locker.handle(&format!("bench:distinct:{i}")))
        .collect();
    for lock in &handles {
        lock.pair().await;
    }
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = handles
        .into_iter()
        .map(|lock| {
            let pairs = pairs.clone();
            tokio::spawn(async move {
                while Instant::now() < end {
                    lock.pair().await;
                    pairs.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let n = pairs.load(Ordering::Relaxed);
    Measured {
        count: n,
        value: json!({ "pairs_per_sec": n as f64 / start.elapsed().as_secs_f64() }),
    }
}

/// What the contended workers record.
#[derive(Default)]
struct Record {
    last_release: Mutex<Option<Instant>>,
    gaps: Mutex<Vec<Duration>>,
    waits: Mutex<Vec<Duration>>,
    inside: AtomicU64,
    overlaps: AtomicU64,
}

/// `clients` clients, one worker each, on one key, each holding it `hold`: the handoff gap
/// (from the holder sending its release to the next holder's acquire returning), waits,
/// fairness (acquisitions per client).
pub async fn contended(variant: Variant, url: &str, clients: usize, secs: f64) -> Measured {
    let hold = Duration::from_millis(1);
    let mut locks = Vec::new();
    for _ in 0..clients {
        let locker = Locker::connect(variant, &[url.to_owned()], RSLOCK_RETRY).await;
        let lock = locker.handle("bench:contended");
        lock.pair().await;
        locks.push(lock);
    }
    let record = Arc::new(Record::default());
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let workers: Vec<_> = locks
        .into_iter()
        .map(|lock| {
            let record = record.clone();
            tokio::spawn(async move {
                let mut mine = 0u64;
                while Instant::now() < end {
                    let asked = Instant::now();
                    let held = lock.acquire().await;
                    let got = Instant::now();
                    if record.inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        record.overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    record.waits.lock().unwrap().push(got - asked);
                    if let Some(r) = *record.last_release.lock().unwrap() {
                        record
                            .gaps
                            .lock()
                            .unwrap()
                            .push(got.saturating_duration_since(r));
                    }
                    let until = Instant::now() + hold;
                    while Instant::now() < until {
                        tokio::task::yield_now().await;
                    }
                    record.inside.fetch_sub(1, Ordering::SeqCst);
                    *record.last_release.lock().unwrap() = Some(Instant::now());
                    lock.release(held).await;
                    mine += 1;
                }
                mine
            })
        })
        .collect();
    let mut per_client = Vec::new();
    for w in workers {
        per_client.push(w.await.expect("worker"));
    }
    contended_summary(&record, per_client, secs)
}

fn contended_summary(record: &Record, per_client: Vec<u64>, secs: f64) -> Measured {
    let n: u64 = per_client.iter().sum();
    let mut gaps = record.gaps.lock().unwrap().clone();
    gaps.sort();
    let mut waits = record.waits.lock().unwrap().clone();
    waits.sort();
    let (min, max) = (
        per_client.iter().copied().min().unwrap_or(0),
        per_client.iter().copied().max().unwrap_or(0),
    );
    Measured {
        count: n,
        value: json!({
            "acquisitions_per_sec": n as f64 / secs,
            "handoff_gap_p50_us": percentile(&gaps, 0.5),
            "handoff_gap_p99_us": percentile(&gaps, 0.99),
            "wait_p50_us": percentile(&waits, 0.5),
            "wait_p99_us": percentile(&waits, 0.99),
            "per_client": per_client,
            "fairness_max_over_min": max as f64 / min.max(1) as f64,
            "overlaps": record.overlaps.load(Ordering::SeqCst),
        }),
    }
}
