//! The demo's scenes: contention, a frozen holder, a killed holder, an active/standby pair
//! under `fencelock elect` whose leader is frozen, and the summary. Each returns the
//! violations it saw; the record counts the ones it can see itself.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

use super::stage::{Job, Stage, ELECTION};
use super::worker::{record_connection, STALE, TOKENS, VALUE, VIOLATIONS};
use super::DemoArgs;
use crate::exit;
use crate::procs::signal;

/// The lease (or session timeout) of the holders that are neither frozen nor killed: long
/// enough that no live holder loses its lock on a busy machine.
const LEASE: Duration = Duration::from_secs(5);

/// How much longer than its short lease or session the frozen holder stays frozen: time
/// for the next worker to take the lock and write before the frozen one wakes up.
const FREEZE_MARGIN: Duration = Duration::from_millis(1500);

/// How long the frozen holder's `fencelock run` gives its worker after SIGTERM: longer than
/// the rest of the worker's work, so that it makes its late write.
const FROZEN_KILL_GRACE: Duration = Duration::from_secs(3);

fn text<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Plays every scene and prints the summary; returns the number of violations.
pub(super) async fn play(stage: &Stage, args: &DemoArgs) -> Result<u64, String> {
    let started_at = Instant::now();
    let mut con = record_connection(&stage.record.url()).await.map_err(text)?;
    let mut violations = contend(stage, &mut con, args).await?;
    violations += frozen(stage, &mut con).await?;
    violations += killed(stage, &mut con).await?;
    violations += standby(stage, &mut con).await?;
    violations += summary(stage, &mut con, violations, started_at).await?;
    Ok(violations)
}

/// A number from the record, 0 if it was never written.
async fn count(con: &mut MultiplexedConnection, key: &str) -> Result<u64, String> {
    let n: Option<u64> = con.get(key).await.map_err(text)?;
    Ok(n.unwrap_or(0))
}

/// Scene 1: worker processes contend for the lock, `rounds` holdings each.
async fn contend(
    stage: &Stage,
    con: &mut MultiplexedConnection,
    args: &DemoArgs,
) -> Result<u64, String> {
    stage.ui.line(&format!(
        "1. {} worker processes x {} rounds, each `fencelock run` -> read the record, work 10 ms, write it back",
        args.workers, args.rounds
    ));
    let done = &Mutex::new(0usize);
    let total = args.workers * args.rounds;
    let job = &Job {
        check_overlap: true,
        ..Job::with_lease(LEASE)
    };
    // Each worker loop runs its rounds one after another; the loops run side by side.
    let run_rounds = move || async move {
        let mut failures = Vec::new();
        for _ in 0..args.rounds {
            let holder = stage.start(job).map_err(text)?;
            let (code, stderr) = stage.finish(holder).await.map_err(text)?;
            if code != 0 {
                failures.push(format!("exit {code}: {}", stderr.trim()));
            }
            let mut d = done.lock().unwrap();
            *d += 1;
            stage.ui.progress(&format!("   {}/{total} runs done", *d));
        }
        Ok::<_, String>(failures)
    };
    let mut violations = 0;
    let loops = (0..args.workers).map(|_| run_rounds());
    for failures in futures_util::future::join_all(loops).await {
        for f in failures? {
            stage.ui.line(&format!("   a run failed: {f}"));
            violations += 1;
        }
    }
    let tokens: Vec<u64> = con.lrange(TOKENS, 0, -1).await.map_err(text)?;
    let value = count(con, VALUE).await?;
    let overlaps = count(con, VIOLATIONS).await?;
    stage.ui.line(&format!(
        "   {} handovers, record = {value} (expected {total}), overlapping holders: {overlaps}",
        tokens.len()
    ));
    // Overlaps are counted once, in the summary, from the record.
    Ok(violations + u64::from(value != total as u64))
}

/// Scene 2: a holder is frozen past its lease or session; the lock passes on, and the frozen
/// holder's late write is rejected by its token.
async fn frozen(stage: &Stage, con: &mut MultiplexedConnection) -> Result<u64, String> {
    let service = &stage.service;
    let freeze = service.short + FREEZE_MARGIN;
    stage.ui.line(&format!(
        "2. a holder with {} reads the record and is frozen (SIGSTOP) for {} s",
        service.short_liveness(),
        freeze.as_secs_f64()
    ));
    let ready = "demo:ready:frozen";
    let frozen = stage
        .start(&Job {
            kill_grace: Some(FROZEN_KILL_GRACE),
            work: Some(Duration::from_millis(300)),
            ready: Some(ready),
            write_after_term: true,
            ..Job::with_lease(service.short)
        })
        .map_err(text)?;
    let worker = stage.ready(con, ready).await?;
    // Both: `fencelock run` stops renewing its lease (or sending its session's heartbeats),
    // and its worker stops between its read and its write.
    let pids = [frozen.pid, worker];
    signal(&pids, Signal::SIGSTOP);
    let frozen_at = Instant::now();
    let mut violations = u64::from(!stage.next_worker(LEASE).await?);
    stage.ui.line(&format!(
        "   {}; the next worker took over and wrote after {:.1} s",
        service.frozen_outcome(),
        frozen_at.elapsed().as_secs_f64()
    ));
    tokio::time::sleep(freeze.saturating_sub(frozen_at.elapsed())).await;
    signal(&pids, Signal::SIGCONT);
    stage.started.remove(worker);
    let (code, stderr) = stage.finish(frozen).await.map_err(text)?;
    let stale = count(con, STALE).await?;
    stage.ui.line(&format!(
        "   thawed, told of the loss (SIGTERM), it wrote anyway: its late write was {}; its `fencelock run` exited {code} (lock lost = {})",
        if stale >= 1 {
            "rejected (stale fencing token)"
        } else {
            "NOT rejected"
        },
        exit::LOCK_LOST
    ));
    if let Some(line) = stderr.lines().find(|l| l.contains("lost")) {
        stage.ui.line(&format!("   it said: {line}"));
        if let Some(note) = service
            .deadline_note()
            .filter(|_| line.contains("deadline"))
        {
            stage.ui.line(&format!("   {note}"));
        }
    }
    violations += u64::from(stale == 0 || code != i32::from(exit::LOCK_LOST));
    Ok(violations)
}

/// Scene 3: a holder is killed outright; the lock passes on when its lease or session ends.
async fn killed(stage: &Stage, con: &mut MultiplexedConnection) -> Result<u64, String> {
    let service = &stage.service;
    stage.ui.line(&format!(
        "3. a holder with {} is killed (SIGKILL) while holding the lock",
        service.short_liveness()
    ));
    let ready = "demo:ready:killed";
    let killed = stage
        .start(&Job {
            work: Some(Duration::from_secs(30)),
            ready: Some(ready),
            ..Job::with_lease(service.short)
        })
        .map_err(text)?;
    let worker = stage.ready(con, ready).await?;
    signal(&[killed.pid, worker], Signal::SIGKILL);
    stage.started.remove(worker);
    let killed_at = Instant::now();
    let _ = stage.finish(killed).await;
    let violations = u64::from(!stage.next_worker(LEASE).await?);
    stage.ui.line(&format!(
        "   {}; the next worker took over after {:.1} s",
        service.killed_outcome(),
        killed_at.elapsed().as_secs_f64()
    ));
    Ok(violations)
}

/// Whether the service holds elections (a build whose service has none skips scene 4).
async fn elections_supported(url: &str) -> Result<bool, String> {
    let client = fencelock::Client::connect(url).await.map_err(text)?;
    let leader = client.election(ELECTION).leader().await;
    let _ = client.close().await;
    match leader {
        Err(fencelock::Error::Unsupported { .. }) => Ok(false),
        Err(e) => Err(e.to_string()),
        Ok(_) => Ok(true),
    }
}

/// Scene 4: an active/standby pair under `fencelock elect --again`; the leader is frozen past
/// its lease or session, the standby takes over (and writes with its term), and the thawed
/// former leader's late write is refused by its older term; it then campaigns again.
async fn standby(stage: &Stage, con: &mut MultiplexedConnection) -> Result<u64, String> {
    let service = &stage.service;
    if !elections_supported(&service.url).await? {
        stage.ui.line(&format!(
            "4. (no elections on {} in this build: skipped)",
            service.name
        ));
        return Ok(0);
    }
    stage.ui.line(&format!(
        "4. an active/standby pair under `fencelock elect --again` with {}; the leader (active) is frozen (SIGSTOP)",
        service.short_liveness()
    ));
    let ready = "demo:ready:leader";
    let job = |write_after_term| Job {
        kill_grace: Some(FROZEN_KILL_GRACE),
        ready: Some(ready),
        serve: true,
        write_after_term,
        ..Job::with_lease(service.short)
    };
    let active = stage.start_participant(&job(true)).map_err(text)?;
    let worker = stage.ready(con, ready).await?;
    let _: () = con.del(ready).await.map_err(text)?;
    let standby = stage.start_participant(&job(false)).map_err(text)?;
    let stale_before = count(con, STALE).await?;
    let pids = [active.pid, worker];
    signal(&pids, Signal::SIGSTOP);
    let frozen_at = Instant::now();
    let took_over = stage.ready(con, ready).await;
    stage.ui.line(&match &took_over {
        Ok(_) => format!(
            "   {}; the standby led and wrote with its term after {:.1} s",
            service.frozen_outcome(),
            frozen_at.elapsed().as_secs_f64()
        ),
        Err(e) => format!("   the standby did not take over: {e}"),
    });
    signal(&pids, Signal::SIGCONT);
    stage.started.remove(worker);
    let late = late_write(con, stale_before).await?;
    stage.ui.line(&format!(
        "   thawed, told of the loss (SIGTERM), the former leader wrote anyway: its late write was {}; it campaigns again, now the standby",
        if late { "rejected (older term)" } else { "NOT rejected" }
    ));
    signal(&[active.pid], Signal::SIGTERM);
    let (active_code, _) = stage.finish(active).await.map_err(text)?;
    signal(&[standby.pid], Signal::SIGTERM);
    let (standby_code, stderr) = stage.finish(standby).await.map_err(text)?;
    if standby_code != 0 {
        stage.ui.line(&format!(
            "   the leader ended with {standby_code}: {}",
            stderr.trim()
        ));
    }
    stage
        .ui
        .line("   both stopped (SIGTERM): the standby at once, the leader after its PROGRAM");
    let failed = [
        took_over.is_err(),
        !late,
        active_code != 128 + 15,
        standby_code != 0,
    ];
    Ok(failed.iter().filter(|f| **f).count() as u64)
}

/// Waits (bounded) until the record has rejected one more stale write than `before`.
async fn late_write(con: &mut MultiplexedConnection, before: u64) -> Result<bool, String> {
    let deadline = Instant::now() + FROZEN_KILL_GRACE + LEASE;
    while Instant::now() < deadline {
        if count(con, STALE).await? > before {
            return Ok(true);
        }
        // The former leader's worker writes from another process: nothing to await but the key.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(false)
}

/// The summary line; returns the violations only the record saw (overlaps, lost updates,
/// tokens out of order).
async fn summary(
    stage: &Stage,
    con: &mut MultiplexedConnection,
    seen: u64,
    started_at: Instant,
) -> Result<u64, String> {
    let tokens: Vec<u64> = con.lrange(TOKENS, 0, -1).await.map_err(text)?;
    let in_order = tokens.windows(2).all(|w| w[0] < w[1]);
    let recorded = count(con, VIOLATIONS).await? + u64::from(!in_order);
    let stale = count(con, STALE).await?;
    stage.ui.line(&format!(
        "summary: handovers {}, tokens in order: {}, stale writes rejected: {stale}, violations: {} ({:.1} s)",
        tokens.len(),
        if in_order { "yes" } else { "NO" },
        seen + recorded,
        started_at.elapsed().as_secs_f64()
    ));
    Ok(recorded)
}
