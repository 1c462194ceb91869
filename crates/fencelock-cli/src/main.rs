//! `fencelock`: run a program while holding a distributed lock or leading an election, inspect
//! locks, clear stale ones, and a demo that shows why it is safe. It uses only the library's
//! public API, plus the test kit for the throwaway servers of `demo` and `verify`.
//!
//! - `run.rs`: `fencelock run` (flags checked before anything is contacted): a mutex, a side
//!   of a read-write lock (`-s`/`-x`), a permit (`--permits`) or a multi-lock (`--also`),
//!   each with the owner id of `owner.rs` (its role in it); PROGRAM runs
//!   (`held.rs`: spawned, signals passed on, stopped on a loss) under
//!   the hidden `supervise` subcommand (`supervise.rs`): fencelock re-executed as the leader of
//!   PROGRAM's process group, which kills the group when the runner's pipe reads end-of-file,
//!   and hands the terminal to PROGRAM.
//! - `elect.rs`: `fencelock elect` (campaign and run PROGRAM while leading, under the same
//!   supervision as `run`: `held.rs`, which both share; `--again`; `--observe`).
//! - `status.rs`: `status` (holder, lease, tokens and the wait queue; 0 held, 1 free) and
//!   `unlock --force`, printed by `show.rs` in each service's words, as text and JSON.
//! - `args.rs`: `--url`/`FENCELOCK_URL`, `--password`, NAME or `--key`. `owner.rs`: the owner id
//!   `run` makes, `<client id>:<host>/<pid>/<program>/<since>`, read back by `status` (the
//!   client id first, so that a Redis forced unlock reaches the holder's client).
//! - `usage.rs`: clap's "unexpected argument" reworded where the user meant a negative value
//!   or another command's flag (`run --permits -1`, `elect -s`).
//! - `explain.rs`: library errors and warnings in the CLI's words, with their exit codes
//!   (`exit.rs`). `services.rs`: service names, which service a URL names, `--url`'s help and
//!   hints, from the library's registry (`fencelock::services()`).
//! - `demo/` and the hidden `demo-worker`: `service.rs` the backends and their throwaway
//!   servers, each described as a `LockService` (URL, name, lease or session, timeouts);
//!   `stage.rs` the holder processes (`run`, and `elect --again` pairs), started, frozen and
//!   killed by PID; `scenes.rs` the scenes and summary; `worker.rs` the worker and its fenced record script `record.lua` (the record
//!   lives on a throwaway Redis with every backend). A backend is one more `Backend` variant
//!   and one function that starts its server.
//! - `verify/` and the hidden `verify-client`: `args.rs` flags, backends and faults;
//!   `servers.rs` throwaway deployments or `--url`, plus the register's Redis; `clients/` the
//!   client loop and the `Fleet` that starts, pauses, kills and respawns clients by PID;
//!   `faults.rs` planning (skipped with a reason), the seeded schedule and each fault with its
//!   evidence; `net.rs` partitions and delay around a server in a namespace; `events.rs`
//!   JSON-lines events on `CLOCK_MONOTONIC`; `check.rs` the pure checker (`check/tests.rs`);
//!   `run.rs` one run; `report/` JSON and the self-contained HTML (`svg.rs` the timeline,
//!   `guide.rs` the parts that explain it); `progress.rs` the live line.
//! - `ui.rs`, `procs.rs`: the progress line and the started-process set (`demo`, `verify`);
//!   `duration.rs`: duration flags, at most 7 days (also compiled into `fuzz/`).

/// `println!` that does not panic when stdout is a closed pipe (`fencelock status x | true`):
/// the line is dropped, as other Unix tools stop writing.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `print!` that does not panic when stdout is a closed pipe; see `outln!`.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that does not panic when stderr cannot be written (a terminal that hung up
/// answers EIO; `elect` and `run` still resign or release and exit after a hangup).
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod args;
mod demo;
mod duration;
mod elect;
mod exit;
mod explain;
mod held;
mod owner;
mod procs;
mod run;
mod services;
mod show;
mod status;
mod supervise;
mod ui;
mod usage;
mod verify;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

pub use args::Connection;

pub use duration::parse_duration;

#[derive(Parser)]
#[command(
    name = "fencelock",
    version,
    about = "Distributed locks with fencing tokens, on Redis, ZooKeeper or etcd"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run PROGRAM while holding the lock NAME; release it when PROGRAM exits. With -s or -x,
    /// the read or write side of the read-write lock NAME; with --permits N, one of N permits;
    /// with --also, several locks, all or none.
    #[command(after_help = exit::TABLE)]
    Run(run::RunArgs),
    /// Run PROGRAM while leading the election NAME (one leader at a time, with a term to fence
    /// with), or follow its leader (--observe).
    #[command(after_help = exit::ELECT_TABLE)]
    Elect(elect::ElectArgs),
    /// Show whether a lock is held, by whom, for how long, its last fencing token, and the
    /// waiters queued for it (with the age of each place; expired places are dead waiters).
    Status(status::StatusArgs),
    /// Delete a lock whoever holds it (for a lock you know is stale), and wake its waiters.
    Unlock(status::UnlockArgs),
    /// Show on throwaway local servers what the lock promises: exclusion, fencing, takeover.
    #[command(after_help = exit::DEMO_TABLE)]
    Demo(demo::DemoArgs),
    /// One worker of the demo (used by `fencelock demo`).
    #[command(hide = true)]
    DemoWorker(demo::WorkerArgs),
    /// Check what holds on a deployment under faults: client processes contend for a lock
    /// and write a fenced register while faults come on a seeded schedule; a checker reads
    /// the history; a report (JSON, HTML) shows it. Exit status 0 when every safety check
    /// passed with at least one fault taking effect, 1 on violations, 2 when inconclusive
    /// (no fault happened: nothing was tested under faults).
    #[command(after_help = exit::VERIFY_TABLE)]
    Verify(verify::VerifyArgs),
    /// One client of `fencelock verify`.
    #[command(hide = true)]
    VerifyClient(verify::ClientArgs),
    /// The process between `fencelock run` and PROGRAM (used by `fencelock run`).
    #[command(hide = true)]
    Supervise(supervise::SuperviseArgs),
}

/// Parses the command line; `elect` checks its flags' combinations; `run --key` also checks that no option follows PROGRAM's first
/// word (with `--key`, that word was NAME's place, and clap would read PROGRAM's own options
/// as fencelock's: `--key k echo -n hi`).
fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let argv: Vec<String> = std::env::args().collect();
    let matches = Cli::command()
        .try_get_matches_from(&argv)
        .map_err(|e| usage::reword(e, &argv))?;
    match matches.subcommand() {
        Some(("run", run)) => run::check_key_order(run)?,
        Some(("elect", elect)) => elect::check_combinations(elect)?,
        Some(("verify", verify)) => verify::check_permits(verify)?,
        _ => {}
    }
    Cli::from_arg_matches(&matches)
}

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let cli = match cli.command {
        // Without the multi-threaded runtime: the supervisor catches the group's signals with
        // a runtime of its own (see `supervise.rs`) and forks PROGRAM from its main thread.
        Command::Supervise(args) => return ExitCode::from(supervise::supervise(args)),
        command => Cli { command },
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fencelock: cannot start the runtime: {e}");
            return ExitCode::from(exit::CONNECTION);
        }
    };
    let code = runtime.block_on(async move {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Elect(args) => elect::elect(args).await,
            Command::Status(args) => status::status(args).await,
            Command::Unlock(args) => status::unlock(args).await,
            Command::Demo(args) => demo::demo(args).await,
            Command::DemoWorker(args) => demo::worker(args).await,
            Command::Verify(args) => verify::verify(args).await,
            Command::VerifyClient(args) => verify::client(args).await,
            // Started above, before the runtime; here for completeness.
            Command::Supervise(args) => supervise::supervise(args),
        }
    });
    // Do not wait for blocking tasks (a stdin read) to finish.
    runtime.shutdown_timeout(Duration::from_millis(100));
    ExitCode::from(code)
}

/// Prints a usage error for `subcommand` the way clap prints its own; returns the exit code.
pub fn usage_error(subcommand: &str, message: &str) -> u8 {
    let kind = clap::error::ErrorKind::MissingRequiredArgument;
    let _ = command_error(subcommand, kind, message).print();
    exit::USAGE
}

/// A usage error of `kind` for `subcommand`, with its usage lines, as clap makes its own.
pub fn command_error(subcommand: &str, kind: clap::error::ErrorKind, message: &str) -> clap::Error {
    use clap::CommandFactory;
    let mut cli = Cli::command();
    let command = cli.find_subcommand_mut(subcommand).cloned();
    command.unwrap_or(cli).error(kind, message)
}

/// Turns on `tracing` output to stderr for `--verbose` (`FENCELOCK_LOG` sets another filter).
pub fn init_logging(verbose: bool) {
    if verbose {
        use std::io::IsTerminal;
        let _ = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("FENCELOCK_LOG").unwrap_or_else(|_| {
                    // fencelock's events (connect, acquire, renewals, release, loss), not the
                    // plumbing below them (script loading).
                    "fencelock=debug,fencelock::backend::redis::server::exec=info".into()
                }),
            )
            .with_target(false)
            .try_init();
    }
}
