//! `fencelock run`: hold a lock while a program runs.

use std::time::Duration;

use clap::Args;
use fencelock::{Error, Guard, Released};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use crate::exit;
use crate::{init_logging, parse_duration, Connection};

/// Arguments of `fencelock run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    conn: Connection,
    /// The lock name.
    #[arg(long, value_name = "NAME")]
    key: String,
    /// Wait at most this long for the lock, up to 7d (default: wait forever).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_wait")]
    wait: Option<Duration>,
    /// Fail at once if the lock is held by someone else.
    #[arg(long)]
    no_wait: bool,
    /// The lease (10ms to 7d); renewed every lease/3 while PROGRAM runs.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    lease: Duration,
    /// Exit status when the lock is held by someone else or --wait times out.
    #[arg(long, value_name = "N", default_value_t = exit::CONFLICT)]
    conflict_exit_code: u8,
    /// When the lock is lost, how long PROGRAM gets between SIGTERM and SIGKILL (up to 7d).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "5s")]
    kill_grace: Duration,
    /// Run PROGRAM and ARGS as one command line through `sh -c`.
    #[arg(long)]
    shell: bool,
    /// The program and its arguments (after `--`). It gets FENCELOCK_KEY and FENCELOCK_TOKEN
    /// (the fencing token) in its environment, and runs in its own process group.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    program: Vec<String>,
}

/// SIGINT, SIGTERM and SIGHUP, as one stream.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
        }
    }
}

fn fail(e: &Error) -> u8 {
    eprintln!("fencelock: {e}");
    exit::for_error(e)
}

/// Runs `fencelock run`; returns the exit status.
pub async fn run(args: RunArgs) -> u8 {
    init_logging(args.conn.verbose);
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fencelock: cannot handle signals: {e}");
            return exit::CONNECTION;
        }
    };
    if let Err(e) = fencelock::validate_name(&args.key) {
        return fail(&e.into());
    }
    let client = tokio::select! {
        c = args.conn.connect(args.lease) => match c {
            Ok(c) => c,
            Err(e) => return fail(&e),
        },
        sig = signals.next() => return 128 + sig as u8,
    };
    let code = hold_and_run(&client, &args, &mut signals).await;
    // A RedLock release is decided by a majority; let it reach the other servers too before
    // this process exits, and say so if it could not.
    if let Err(e) = client.close().await {
        eprintln!("fencelock: warning: {e}; a server may keep the lock until its lease ends");
    }
    code
}

/// Acquires the lock, runs PROGRAM under it, releases it; returns the exit status.
async fn hold_and_run(client: &fencelock::Client, args: &RunArgs, signals: &mut Signals) -> u8 {
    let lock = client.lock(&args.key);
    let acquire = async {
        if args.no_wait {
            match lock.try_acquire().await? {
                Ok(guard) => Ok(Some(guard)),
                Err(busy) => {
                    eprintln!(
                        "fencelock: lock {:?} is held by someone else (lease left: {})",
                        args.key,
                        busy.remaining_lease
                            .map_or("no expiry".into(), |d| humantime::format_duration(d)
                                .to_string())
                    );
                    Ok(None)
                }
            }
        } else if let Some(wait) = args.wait {
            match lock.acquire_timeout(wait).await {
                Ok(guard) => Ok(Some(guard)),
                Err(Error::Timeout { .. }) => {
                    eprintln!(
                        "fencelock: lock {:?} still held by someone else after {}",
                        args.key,
                        humantime::format_duration(wait)
                    );
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        } else {
            lock.acquire().await.map(Some)
        }
    };
    let guard = tokio::select! {
        r = acquire => match r {
            Ok(Some(guard)) => guard,
            Ok(None) => return args.conflict_exit_code,
            Err(e) => return fail(&e),
        },
        sig = signals.next() => {
            // The dropped attempt may have reached the server. The owner id is this process's
            // alone, so an owner-checked release leaves no lock behind.
            let _ = tokio::time::timeout(Duration::from_secs(2), lock.release()).await;
            eprintln!("fencelock: {sig} while waiting for lock {:?}; gave up", args.key);
            return 128 + sig as u8;
        }
    };
    tracing::debug!(key = %args.key, token = guard.fencing_token(), "lock acquired; starting PROGRAM");

    let mut child = match spawn(args, guard.fencing_token()) {
        Ok(child) => child,
        Err(e) => {
            let _ = guard.release().await;
            eprintln!("fencelock: cannot run {:?}: {e}", args.program[0]);
            return if e.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
        }
    };
    let group = child.id().map(|id| Pid::from_raw(id as i32));
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = guard.lost() => return stop_after_loss(args, guard, &mut child, group).await,
            sig = signals.next() => {
                tracing::debug!(%sig, "forwarding to PROGRAM's process group");
                if let Some(group) = group {
                    let _ = killpg(group, sig);
                }
            }
        }
    };
    match guard.release().await {
        Ok(Released::NotHeld) => eprintln!(
            "fencelock: warning: lock {:?} was no longer held when PROGRAM exited",
            args.key
        ),
        Ok(_) => {}
        Err(e) => eprintln!("fencelock: warning: release failed ({e}); the lease will expire"),
    }
    match status {
        Ok(status) => exit_status(status),
        Err(e) => {
            eprintln!("fencelock: waiting for PROGRAM failed: {e}");
            exit::CANNOT_EXECUTE
        }
    }
}

fn spawn(args: &RunArgs, token: u64) -> std::io::Result<Child> {
    let mut command = if args.shell {
        let mut c = Command::new("sh");
        c.arg("-c").arg(args.program.join(" "));
        c
    } else {
        let mut c = Command::new(&args.program[0]);
        c.args(&args.program[1..]);
        c
    };
    command
        .env("FENCELOCK_KEY", &args.key)
        .env("FENCELOCK_TOKEN", token.to_string())
        // Its own group, so that a signal reaches PROGRAM and everything it started.
        .process_group(0)
        .spawn()
}

/// The lost-lock signal fired: stop PROGRAM's whole group, politely first.
async fn stop_after_loss(
    args: &RunArgs,
    guard: Guard,
    child: &mut Child,
    group: Option<Pid>,
) -> u8 {
    eprintln!(
        "fencelock: lock {:?} lost ({}); stopping PROGRAM (SIGTERM, then SIGKILL after {})",
        args.key,
        guard
            .lost_reason()
            .map_or("lease expired".to_owned(), |r| r.to_string()),
        humantime::format_duration(args.kill_grace)
    );
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGTERM);
    }
    if tokio::time::timeout(args.kill_grace, child.wait())
        .await
        .is_err()
    {
        if let Some(group) = group {
            let _ = killpg(group, Signal::SIGKILL);
        }
        let _ = child.wait().await;
    }
    // Harmless if the lock is gone; gives it back if the server was only slow.
    let _ = guard.release().await;
    exit::LOCK_LOST
}

fn exit_status(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.saturating_add(sig as u8),
        (None, None) => exit::CANNOT_EXECUTE,
    }
}
