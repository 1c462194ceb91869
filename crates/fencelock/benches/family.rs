//! The lock family's figures (issue 24, "Figures"): read-write locks and semaphores on
//! ZooKeeper, Redis and etcd, each beside its reference measured in the same run, reported as
//! ratios. The machine is shared and noisy, so each row and its reference take turns in short
//! slices and the median of the per-slice figures is read.
//!
//! - **ZooKeeper**: the read pair, write pair and permit pair beside Curator's
//!   `InterProcessReadWriteLock` and `InterProcessSemaphoreV2` (`CuratorBench` of the test
//!   kit): pairs/s uncontended, and the handoff gap (from a release to the acquisition that
//!   waited for it, median and p99) under 8 contending workers.
//! - **Redis**: the server time (`INFO commandstats` usec) of an uncontended read pair and
//!   permit pair against the mutex pair's; 8 workers on a semaphore of 3: utilisation of the
//!   3 permits and the spread of acquisitions between workers.
//! - **etcd**: read, write and permit pairs/s against a raw `put` + `delete` pair.
//!
//! `cargo bench -p fencelock --features redis,zookeeper,etcd --bench family -- [--quick]
//! [--markdown docs/PERFORMANCE-family.md] [--json PATH] [--only zookeeper|redis|etcd]`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{Client, Guard, Lock, Semaphore};
use serde_json::json;

#[path = "family/etcd.rs"]
mod etcd;
#[path = "family/markdown.rs"]
mod markdown;
#[path = "family/redis.rs"]
mod redis_rows;
#[path = "family/zookeeper.rs"]
mod zookeeper;

/// How long and how often each row runs.
#[derive(Clone, Copy)]
pub struct Plan {
    /// Uncontended slices per row (each row and its reference take turns).
    pub slices: usize,
    /// Seconds of one uncontended slice.
    pub slice_secs: f64,
    /// Contended slices per row.
    pub contend_slices: usize,
    /// Seconds of one contended slice.
    pub contend_secs: f64,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |flag: &str| {
        let at = args.iter().position(|a| a == flag)?;
        args.get(at + 1).cloned()
    };
    let quick = args.iter().any(|a| a == "--quick");
    let plan = if quick {
        Plan {
            slices: 5,
            slice_secs: 0.2,
            contend_slices: 3,
            contend_secs: 0.5,
        }
    } else {
        Plan {
            slices: 21,
            slice_secs: 0.4,
            contend_slices: 7,
            contend_secs: 1.5,
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // Uncontended rows run on a current-thread runtime, as `bench.rs` measures the mutex.
    let single = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let json_path = arg("--json").unwrap_or_else(|| root("target/bench-family.json"));
    let only = arg("--only");
    let wanted = |service: &str| only.as_deref().is_none_or(|o| o == service);
    let mut zookeeper = json!(null);
    if wanted("zookeeper") {
        zookeeper = zookeeper::run(&runtime, &single, plan);
    }
    let mut redis = json!(null);
    if wanted("redis") {
        redis = redis_rows::run(&runtime, &single, plan);
    }
    let mut etcd = json!(null);
    if wanted("etcd") {
        etcd = single.block_on(etcd::run(plan));
    }
    let report = json!({
        "quick": quick,
        "plan": {
            "slices": plan.slices, "slice_secs": plan.slice_secs,
            "contend_slices": plan.contend_slices, "contend_secs": plan.contend_secs,
        },
        "zookeeper": zookeeper,
        "redis": redis,
        "etcd": etcd,
    });
    std::fs::write(&json_path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let text = markdown::markdown(&report);
    println!("{text}");
    if let Some(path) = arg("--markdown") {
        std::fs::write(root(&path), text).unwrap();
    }
}

/// `path` from the workspace root, unless it is absolute.
fn root(path: &str) -> String {
    if path.starts_with('/') {
        return path.to_owned();
    }
    format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"))
}

/// The median of `values`.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The `p` percentile of sorted `samples`, in µs.
pub fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// Which member of the family a row measures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Primitive {
    /// The mutex (the reference of the Redis rows).
    Mutex,
    /// The read side of a read-write lock; contended, the even workers write.
    Read,
    /// The write side of a read-write lock.
    Write,
    /// One permit of a semaphore of this many.
    Permit(u32),
}

impl Primitive {
    /// The name of the row (and of `CuratorBench`'s mode).
    pub fn label(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::Read => "rw-read",
            Primitive::Write => "rw-write",
            Primitive::Permit(_) => "semaphore",
        }
    }

    /// Worker `w`'s handle on `name` (`w` is `None` uncontended: the read side for `Read`).
    pub fn taker(self, client: &Client, name: &str, w: Option<usize>) -> Taker {
        match self {
            Primitive::Mutex => Taker::Lock(client.lock(name), true),
            Primitive::Read if w.is_some_and(|w| w % 2 == 0) => {
                Taker::Lock(client.rw_lock(name).write().clone(), true)
            }
            Primitive::Read => Taker::Lock(client.rw_lock(name).read().clone(), false),
            Primitive::Write => Taker::Lock(client.rw_lock(name).write().clone(), true),
            Primitive::Permit(n) => Taker::Permit(client.semaphore(name, n)),
        }
    }
}

/// A worker's handle: a lock (and whether it is exclusive) or a semaphore.
#[derive(Clone)]
pub enum Taker {
    /// A mutex or a side of a read-write lock.
    Lock(Lock, bool),
    /// A semaphore: each acquire is one permit.
    Permit(Semaphore),
}

impl Taker {
    /// Acquires (waiting).
    pub async fn take(&self) -> fencelock::Result<Guard> {
        match self {
            Taker::Lock(lock, _) => lock.acquire().await,
            Taker::Permit(semaphore) => semaphore.acquire().await,
        }
    }

    /// One uncontended pair.
    pub async fn pair(&self) {
        self.take().await.unwrap().release().await.unwrap();
    }

    fn exclusive(&self) -> bool {
        matches!(self, Taker::Lock(_, true))
    }
}

/// What the contending workers share (as `CuratorBench`'s `Shared`).
#[derive(Default)]
struct Shared {
    last_release: Mutex<Option<Instant>>,
    inside: AtomicU64,
    writers: AtomicU64,
    overlaps: AtomicU64,
    gaps: Mutex<Vec<Duration>>,
    writer_gaps: Mutex<Vec<Duration>>,
    busy_nanos: AtomicU64,
}

/// One contended run's figures.
pub struct Contended {
    /// Median handoff gap (the readers' in a mixed run), µs.
    pub gap_p50_us: f64,
    /// p99 handoff gap (the readers' in a mixed run), µs.
    pub gap_p99_us: f64,
    /// The writers' median gap in a mixed read-write run, µs.
    pub writer_gap_p50_us: f64,
    /// The writers' p99 gap in a mixed read-write run, µs.
    pub writer_gap_p99_us: f64,
    /// Gaps counted.
    pub gaps: usize,
    /// Acquisitions per worker.
    pub per_worker: Vec<u64>,
    /// Acquisitions that broke the rule (a writer beside anyone, more than `limit` holders).
    pub overlaps: u64,
    /// Busy holder-time over the run's wall time (in holders: 3.0 is 3 permits always busy).
    pub busy_holders: f64,
}

/// How a contending worker holds its acquisition.
#[derive(Clone, Copy)]
pub enum Hold {
    /// Busy, yielding to the runtime (as `CuratorBench`'s workers spin).
    Spin(Duration),
    /// Asleep (work that waits, leaving the cores to the server and the other clients).
    Sleep(Duration),
}

impl Hold {
    async fn hold(self) {
        match self {
            Hold::Sleep(hold) => tokio::time::sleep(hold).await,
            Hold::Spin(hold) => {
                let until = Instant::now() + hold;
                while Instant::now() < until {
                    tokio::task::yield_now().await;
                }
            }
        }
    }
}

/// One acquisition, hold and release; as `CuratorBench`'s `turn`.
async fn turn(
    sh: &Shared,
    t: &Taker,
    mixed: bool,
    limit: u64,
    hold: Hold,
    window: (Instant, Instant),
) {
    let asked = Instant::now();
    let guard = t.take().await.unwrap();
    let got = Instant::now();
    let now = sh.inside.fetch_add(1, Ordering::SeqCst) + 1;
    let writers = if t.exclusive() {
        sh.writers.fetch_add(1, Ordering::SeqCst) + 1
    } else {
        sh.writers.load(Ordering::SeqCst)
    };
    if now > limit || (writers > 0 && now > 1) {
        sh.overlaps.fetch_add(1, Ordering::SeqCst);
    }
    let last = *sh.last_release.lock().unwrap();
    if let Some(r) = last.filter(|r| *r > asked) {
        let gaps = if mixed && t.exclusive() {
            &sh.writer_gaps
        } else {
            &sh.gaps
        };
        gaps.lock().unwrap().push(got - r);
    }
    hold.hold().await;
    if t.exclusive() {
        sh.writers.fetch_sub(1, Ordering::SeqCst);
    }
    sh.inside.fetch_sub(1, Ordering::SeqCst);
    let released = Instant::now();
    let (from, to) = (got.max(window.0), released.min(window.1));
    let busy = to.saturating_duration_since(from).as_nanos() as u64;
    sh.busy_nanos.fetch_add(busy, Ordering::SeqCst);
    // The handover starts when the release is sent.
    *sh.last_release.lock().unwrap() = Some(released);
    guard.release().await.unwrap();
}

/// `takers` contend for `secs`, each holding `hold` per acquisition.
pub async fn contend(
    takers: Vec<Taker>,
    limit: u64,
    mixed: bool,
    hold: Hold,
    secs: f64,
) -> Contended {
    let sh = Arc::new(Shared::default());
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let handles: Vec<_> = takers
        .into_iter()
        .map(|t| {
            let sh = sh.clone();
            tokio::spawn(async move {
                let mut mine = 0u64;
                while Instant::now() < end {
                    turn(&sh, &t, mixed, limit, hold, (start, end)).await;
                    mine += 1;
                }
                mine
            })
        })
        .collect();
    let mut per_worker = Vec::new();
    for h in handles {
        per_worker.push(h.await.unwrap());
    }
    let sorted = |v: &Mutex<Vec<Duration>>| {
        let mut v = v.lock().unwrap().clone();
        v.sort();
        v
    };
    let (gaps, writer_gaps) = (sorted(&sh.gaps), sorted(&sh.writer_gaps));
    let wall = (end - start).as_nanos() as f64;
    Contended {
        gap_p50_us: percentile_us(&gaps, 0.5),
        gap_p99_us: percentile_us(&gaps, 0.99),
        writer_gap_p50_us: percentile_us(&writer_gaps, 0.5),
        writer_gap_p99_us: percentile_us(&writer_gaps, 0.99),
        gaps: gaps.len(),
        per_worker,
        overlaps: sh.overlaps.load(Ordering::SeqCst),
        busy_holders: sh.busy_nanos.load(Ordering::SeqCst) as f64 / wall,
    }
}

/// Pairs/s of `pair` over `secs`.
pub async fn rate<F: std::future::Future<Output = ()>>(
    secs: f64,
    mut pair: impl FnMut() -> F,
) -> f64 {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (mut pairs, start) = (0u64, Instant::now());
    while Instant::now() < end {
        pair().await;
        pairs += 1;
    }
    pairs as f64 / start.elapsed().as_secs_f64()
}
