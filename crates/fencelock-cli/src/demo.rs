//! `fencelock demo`: worker processes under `fencelock run` contend for one lock and update a
//! record that checks fencing tokens; then a holder is frozen past its lease, and another is
//! killed. Everything runs on throwaway local servers started through the test kit.

use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use fencelock_testkit::{EtcdServer, RedisServer};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use redis::AsyncCommands;
use tokio::process::Command;

use crate::exit;
use crate::parse_duration;

const LOCK: &str = "demo:record";
const VALUE: &str = "demo:value";
const HIGHEST: &str = "demo:highest";
const TOKENS: &str = "demo:tokens";
const STALE: &str = "demo:stale";
const VIOLATIONS: &str = "demo:violations";
const INSIDE: &str = "demo:inside";

/// Arguments of `fencelock demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Worker processes contending in the first scene.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Lock acquisitions per worker in the first scene.
    #[arg(long, default_value_t = 6)]
    rounds: usize,
    /// The lock service the demo starts (the record the workers update is always on a
    /// throwaway Redis).
    #[arg(long, value_enum, default_value_t = Backend::Redis)]
    backend: Backend,
}

/// The lock services `fencelock demo` can start.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Backend {
    /// A throwaway redis-server.
    Redis,
    /// A throwaway one-member etcd (Debian's etcd-server).
    Etcd,
}

/// The demo's lock server, stopped when dropped.
enum LockServer {
    Redis(RedisServer),
    Etcd(EtcdServer),
}

impl LockServer {
    fn start(backend: Backend) -> Result<Self, fencelock_testkit::TestkitError> {
        Ok(match backend {
            Backend::Redis => Self::Redis(RedisServer::start()?),
            Backend::Etcd => Self::Etcd(EtcdServer::start()?),
        })
    }

    fn url(&self) -> String {
        match self {
            Self::Redis(s) => s.url(),
            Self::Etcd(s) => s.url(),
        }
    }

    fn program(&self) -> &'static str {
        match self {
            Self::Redis(_) => "redis-server",
            Self::Etcd(_) => "etcd",
        }
    }
}

/// Arguments of the hidden `fencelock demo-worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// The record server.
    #[arg(long)]
    record: String,
    /// How long the worker holds the record between reading and writing.
    #[arg(long, value_parser = parse_duration, default_value = "10ms")]
    work: Duration,
    /// After reading, store this process's PID under this key (so the demo can freeze or kill
    /// it at that point).
    #[arg(long)]
    ready: Option<String>,
    /// Count overlapping workers in the critical section.
    #[arg(long)]
    check_overlap: bool,
    /// Keep going after SIGTERM (the frozen worker must attempt its late write).
    #[arg(long)]
    survive_term: bool,
}

async fn record_connection(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}

/// Runs one demo worker: read the record, work, write it back with the fencing token.
pub async fn worker(args: WorkerArgs) -> u8 {
    let _term = if args.survive_term {
        // Handling SIGTERM (and doing nothing) replaces its default action, termination.
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok()
    } else {
        None
    };
    let Some(token) = std::env::var("FENCELOCK_TOKEN")
        .ok()
        .and_then(|t| t.parse::<u64>().ok())
    else {
        eprintln!("demo-worker: FENCELOCK_TOKEN is not set; run it under `fencelock run`");
        return exit::USAGE;
    };
    match worker_steps(&args, token).await {
        Ok(outcome) => {
            println!(
                "worker {} token {token}: write {outcome}",
                std::process::id()
            );
            0
        }
        Err(e) => {
            eprintln!("demo-worker: {e}");
            exit::CONNECTION
        }
    }
}

async fn worker_steps(args: &WorkerArgs, token: u64) -> redis::RedisResult<String> {
    let mut con = record_connection(&args.record).await?;
    if args.check_overlap {
        let inside: i64 = con.incr(INSIDE, 1).await?;
        if inside > 1 {
            let _: i64 = con.incr(VIOLATIONS, 1).await?;
        }
    }
    let read: Option<String> = con.get(VALUE).await?;
    let read = read.unwrap_or_else(|| "0".into());
    if let Some(key) = &args.ready {
        let _: () = con.set(key, std::process::id()).await?;
    }
    tokio::time::sleep(args.work).await;
    if args.check_overlap {
        let _: i64 = con.decr(INSIDE, 1).await?;
    }
    let next = read.parse::<u64>().unwrap_or(0) + 1;
    redis::Script::new(include_str!("record.lua"))
        .key(VALUE)
        .key(HIGHEST)
        .key(TOKENS)
        .key(STALE)
        .key(VIOLATIONS)
        .arg(token)
        .arg(&read)
        .arg(next)
        .invoke_async(&mut con)
        .await
}

/// Progress on a terminal (one line redrawn in place), plain lines otherwise.
struct Ui {
    tty: bool,
}

impl Ui {
    fn line(&self, text: &str) {
        if self.tty {
            print!("\r\x1b[2K");
        }
        println!("{text}");
    }

    fn progress(&self, text: &str) {
        if self.tty {
            print!("\r\x1b[2K{text}");
            let _ = std::io::stdout().flush();
        }
    }
}

/// Processes this demo started that may still run; killed on the way out.
#[derive(Default, Clone)]
struct Started(Arc<Mutex<HashSet<u32>>>);

impl Started {
    fn add(&self, pid: u32) {
        self.0.lock().unwrap().insert(pid);
    }
    fn remove(&self, pid: u32) {
        self.0.lock().unwrap().remove(&pid);
    }
    fn kill_all(&self) {
        for pid in self.0.lock().unwrap().drain() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
    }
}

struct Demo {
    exe: std::path::PathBuf,
    lock_url: String,
    record_url: String,
    started: Started,
    ui: Ui,
}

/// A `fencelock run` holder started by the demo.
struct Holder {
    child: tokio::process::Child,
    pid: u32,
}

impl Demo {
    /// Starts `fencelock run ... -- fencelock demo-worker ...`.
    fn start(&self, run: &[&str], worker: &[&str]) -> std::io::Result<Holder> {
        let mut command = Command::new(&self.exe);
        command
            .args(["run", "--url", &self.lock_url, "--key", LOCK])
            .args(run)
            .arg("--")
            .arg(&self.exe)
            .args(["demo-worker", "--record", &self.record_url])
            .args(worker)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = command.spawn()?;
        let pid = child.id().unwrap_or(0);
        self.started.add(pid);
        Ok(Holder { child, pid })
    }

    async fn finish(&self, mut holder: Holder) -> std::io::Result<(i32, String)> {
        let mut stderr = String::new();
        if let Some(mut err) = holder.child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let _ = err.read_to_string(&mut stderr).await;
        }
        let status = holder.child.wait().await?;
        self.started.remove(holder.pid);
        use std::os::unix::process::ExitStatusExt;
        let code = status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        Ok((code, stderr))
    }

    /// Runs one ordinary worker to its end (it waits for the lock); says whether it succeeded.
    async fn next_worker(&self) -> Result<bool, String> {
        let next = self
            .start(&["--lease", "5s"], &[])
            .map_err(|e| e.to_string())?;
        let (code, stderr) = self.finish(next).await.map_err(|e| e.to_string())?;
        if code != 0 {
            self.ui.line(&format!(
                "   the next worker failed: exit {code}: {}",
                stderr.trim()
            ));
        }
        Ok(code == 0)
    }

    /// Waits until a worker has read the record and published its PID under `key`.
    async fn ready(
        &self,
        con: &mut redis::aio::MultiplexedConnection,
        key: &str,
    ) -> Result<u32, String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let pid: Option<u32> = con.get(key).await.map_err(|e| e.to_string())?;
            if let Some(pid) = pid {
                self.started.add(pid);
                return Ok(pid);
            }
            if Instant::now() > deadline {
                return Err(format!("no worker became ready under {key}"));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Runs `fencelock demo`.
pub async fn demo(args: DemoArgs) -> u8 {
    let ui = Ui {
        tty: std::io::stdout().is_terminal(),
    };
    let servers = (LockServer::start(args.backend), RedisServer::start());
    let (lock_server, record_server) = match servers {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("fencelock demo: {e}");
            return exit::CONNECTION;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("fencelock demo: cannot find my own executable: {e}");
            return exit::CANNOT_EXECUTE;
        }
    };
    ui.line(&format!(
        "fencelock demo: lock server {} ({}) and record server {} (redis-server), both throwaway",
        lock_server.url(),
        lock_server.program(),
        record_server.url()
    ));
    let demo = Demo {
        exe,
        lock_url: lock_server.url(),
        record_url: record_server.url(),
        started: Started::default(),
        ui,
    };
    let outcome = tokio::select! {
        r = scenes(&demo, &args) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
    };
    demo.started.kill_all();
    match outcome {
        Ok(0) => 0,
        Ok(_) => 1,
        Err(e) => {
            demo.ui.line(&format!("fencelock demo: {e}"));
            1
        }
    }
}

async fn scenes(demo: &Demo, args: &DemoArgs) -> Result<u64, String> {
    let started_at = Instant::now();
    let mut con = record_connection(&demo.record_url)
        .await
        .map_err(|e| e.to_string())?;
    let mut violations = 0u64;

    // 1. Worker processes contend for the lock.
    demo.ui.line(&format!(
        "1. {} worker processes x {} rounds, each `fencelock run` -> read the record, work 10 ms, write it back",
        args.workers, args.rounds
    ));
    let done = Arc::new(Mutex::new(0usize));
    let total = args.workers * args.rounds;
    let mut loops = Vec::new();
    for _ in 0..args.workers {
        let done = done.clone();
        let rounds = args.rounds;
        loops.push(async move {
            let mut failures = Vec::new();
            for _ in 0..rounds {
                let holder = demo
                    .start(&["--lease", "5s"], &["--check-overlap"])
                    .map_err(|e| e.to_string())?;
                let (code, stderr) = demo.finish(holder).await.map_err(|e| e.to_string())?;
                if code != 0 {
                    failures.push(format!("exit {code}: {}", stderr.trim()));
                }
                let mut d = done.lock().unwrap();
                *d += 1;
                demo.ui.progress(&format!("   {}/{total} runs done", *d));
            }
            Ok::<_, String>(failures)
        });
    }
    for failures in futures_util::future::join_all(loops).await {
        for f in failures? {
            demo.ui.line(&format!("   a run failed: {f}"));
            violations += 1;
        }
    }
    let tokens: Vec<u64> = con.lrange(TOKENS, 0, -1).await.map_err(|e| e.to_string())?;
    let value: u64 = con.get(VALUE).await.map_err(|e| e.to_string())?;
    let overlaps: u64 = con
        .get::<_, Option<u64>>(VIOLATIONS)
        .await
        .map_err(|e| e.to_string())?
        .unwrap_or(0);
    demo.ui.line(&format!(
        "   {} handovers, record = {value} (expected {total}), overlapping holders: {overlaps}",
        tokens.len()
    ));
    if value != total as u64 {
        violations += 1;
    }

    // 2. A holder frozen past its lease.
    demo.ui
        .line("2. a holder with a 1 s lease reads the record and is frozen (SIGSTOP) for 2.5 s");
    let frozen = demo
        .start(
            &["--lease", "1s", "--kill-grace", "3s"],
            &[
                "--work",
                "300ms",
                "--ready",
                "demo:ready:frozen",
                "--survive-term",
            ],
        )
        .map_err(|e| e.to_string())?;
    let frozen_worker = demo.ready(&mut con, "demo:ready:frozen").await?;
    let frozen_pids = [frozen.pid, frozen_worker];
    for pid in frozen_pids {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGSTOP);
    }
    let frozen_at = Instant::now();
    if !demo.next_worker().await? {
        violations += 1;
    }
    demo.ui.line(&format!(
        "   the lease ran out and the next worker took over and wrote after {:.1} s",
        frozen_at.elapsed().as_secs_f64()
    ));
    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(frozen_at.elapsed())).await;
    for pid in frozen_pids {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
    }
    demo.started.remove(frozen_worker);
    let (code, stderr) = demo.finish(frozen).await.map_err(|e| e.to_string())?;
    let stale: u64 = con
        .get::<_, Option<u64>>(STALE)
        .await
        .map_err(|e| e.to_string())?
        .unwrap_or(0);
    demo.ui.line(&format!(
        "   thawed: its late write was {}; its `fencelock run` exited {code} (lock lost = {})",
        if stale >= 1 {
            "rejected (stale fencing token)"
        } else {
            "NOT rejected"
        },
        exit::LOCK_LOST
    ));
    if let Some(line) = stderr.lines().find(|l| l.contains("lost")) {
        demo.ui.line(&format!("   it said: {line}"));
    }
    if stale == 0 || code != i32::from(exit::LOCK_LOST) {
        violations += 1;
    }

    // 3. A holder killed outright.
    demo.ui
        .line("3. a holder with a 1 s lease is killed (SIGKILL) while holding the lock");
    let killed = demo
        .start(
            &["--lease", "1s"],
            &["--work", "30s", "--ready", "demo:ready:killed"],
        )
        .map_err(|e| e.to_string())?;
    let killed_worker = demo.ready(&mut con, "demo:ready:killed").await?;
    for pid in [killed.pid, killed_worker] {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    demo.started.remove(killed_worker);
    let killed_at = Instant::now();
    let _ = demo.finish(killed).await;
    if !demo.next_worker().await? {
        violations += 1;
    }
    demo.ui.line(&format!(
        "   the lease expired and the next worker took over after {:.1} s",
        killed_at.elapsed().as_secs_f64()
    ));

    // Summary.
    let tokens: Vec<u64> = con.lrange(TOKENS, 0, -1).await.map_err(|e| e.to_string())?;
    let in_order = tokens.windows(2).all(|w| w[0] < w[1]);
    let recorded: u64 = con
        .get::<_, Option<u64>>(VIOLATIONS)
        .await
        .map_err(|e| e.to_string())?
        .unwrap_or(0);
    violations += recorded + u64::from(!in_order);
    demo.ui.line(&format!(
        "summary: handovers {}, tokens in order: {}, stale writes rejected: {stale}, violations: {violations} ({:.1} s)",
        tokens.len(),
        if in_order { "yes" } else { "NO" },
        started_at.elapsed().as_secs_f64()
    ));
    Ok(violations)
}
