//! The hidden `fencelock demo-worker`: one holder's work on the record, run under
//! `fencelock run`, or an active service under `fencelock elect` (`--serve`). The record is a Redis key whose writes are checked by `record.lua`; it
//! stays on Redis whichever service the lock lives on, since fencing tokens are numbers that
//! any store can compare.

use std::time::Duration;

use clap::Args;
use redis::AsyncCommands;
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::exit;
use crate::parse_duration;

/// The record's value.
pub(super) const VALUE: &str = "demo:value";
/// The highest fencing token the record has accepted.
const HIGHEST: &str = "demo:highest";
/// Every accepted token, in the order of the writes.
pub(super) const TOKENS: &str = "demo:tokens";
/// How many late writes the record rejected for their stale token.
pub(super) const STALE: &str = "demo:stale";
/// Overlapping holders and lost updates that the record noticed.
pub(super) const VIOLATIONS: &str = "demo:violations";
/// How many workers are between their read and their write now.
const INSIDE: &str = "demo:inside";

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
    /// Write only after SIGTERM has come (`fencelock run` sends it when the lock is lost),
    /// or after WRITE_AFTER_TERM_AT_MOST, and write anyway: the frozen worker's late write, from
    /// a program too slow to stop.
    #[arg(long)]
    write_after_term: bool,
    /// An active service under `fencelock elect`: write at once (then publish the PID under
    /// --ready), and serve until SIGTERM (the end of its term); with --write-after-term, write
    /// once more then, with the same token: a deposed leader's late write.
    #[arg(long)]
    serve: bool,
}

/// A connection to the record's Redis.
pub(super) async fn record_connection(
    url: &str,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}

/// How long a `--write-after-term` worker waits for SIGTERM before it writes anyway.
const WRITE_AFTER_TERM_AT_MOST: Duration = Duration::from_secs(10);

/// Runs one demo worker: read the record, work, write it back with the fencing token.
pub async fn worker(args: WorkerArgs) -> u8 {
    // Handling SIGTERM replaces its default action, termination: the worker goes on to its
    // late write. Set up before the read, so that no SIGTERM can come unhandled.
    let term = if args.write_after_term || args.serve {
        match signal(SignalKind::terminate()) {
            Ok(term) => Some(term),
            Err(e) => {
                eprintln!("demo-worker: cannot handle SIGTERM: {e}");
                return exit::CANNOT_EXECUTE;
            }
        }
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
    let steps = match (args.serve, term) {
        (true, Some(term)) => serve_steps(&args, token, term).await,
        (_, term) => worker_steps(&args, token, term).await,
    };
    match steps {
        Ok(outcome) => {
            outln!(
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

/// An active service's steps (`--serve`): write, publish, wait for the end of the term, and
/// with `--write-after-term` write once more.
async fn serve_steps(
    args: &WorkerArgs,
    token: u64,
    mut term: Signal,
) -> redis::RedisResult<String> {
    let mut con = record_connection(&args.record).await?;
    let first = write(&mut con, token).await?;
    if let Some(key) = &args.ready {
        let _: () = con.set(key, std::process::id()).await?;
    }
    let _ = term.recv().await;
    if !args.write_after_term {
        return Ok(first);
    }
    let late = write(&mut con, token).await?;
    Ok(format!("{first}, late write {late}"))
}

/// Reads the record and writes it back, one more, with `token`.
async fn write(
    con: &mut redis::aio::MultiplexedConnection,
    token: u64,
) -> redis::RedisResult<String> {
    let read: Option<String> = con.get(VALUE).await?;
    let read = read.unwrap_or_else(|| "0".into());
    record(con, token, &read).await
}

/// Writes `read` + 1 to the record with `token`; the record's verdict.
async fn record(
    con: &mut redis::aio::MultiplexedConnection,
    token: u64,
    read: &str,
) -> redis::RedisResult<String> {
    let next = read.parse::<u64>().unwrap_or(0) + 1;
    redis::Script::new(include_str!("record.lua"))
        .key(VALUE)
        .key(HIGHEST)
        .key(TOKENS)
        .key(STALE)
        .key(VIOLATIONS)
        .arg(token)
        .arg(read)
        .arg(next)
        .invoke_async(con)
        .await
}

async fn worker_steps(
    args: &WorkerArgs,
    token: u64,
    term: Option<Signal>,
) -> redis::RedisResult<String> {
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
    if let Some(mut term) = term {
        // Without this wait the write could race `fencelock run`'s own reaction to the loss:
        // a worker thawed together with it could write and exit before it saw the loss.
        let _ = tokio::time::timeout(WRITE_AFTER_TERM_AT_MOST, term.recv()).await;
    }
    if args.check_overlap {
        let _: i64 = con.decr(INSIDE, 1).await?;
    }
    record(&mut con, token, &read).await
}
