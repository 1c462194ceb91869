//! `fencelock run`: hold a lock while a program runs, under the supervision of `held.rs`
//! (shared with `fencelock elect`): PROGRAM's whole group is gone before the lock is released,
//! and a lock lost while PROGRAM runs stops it, with 79.

use std::time::Duration;

use clap::Args;
use fencelock::{Error, Guard};

use crate::held::{self, HoldArgs, Signals};
use crate::{exit, init_logging, Connection};

/// Arguments of `fencelock run`, as clap reads them ([`RunArgs::resolve`] checks the rest).
#[derive(Args, Debug)]
#[command(
    override_usage = "fencelock run [OPTIONS] NAME [--] PROGRAM [ARGS]...\n       \
                            fencelock run [OPTIONS] NAME --shell [--] 'COMMAND LINE'"
)]
pub struct RunArgs {
    #[command(flatten)]
    conn: Connection,
    /// The lock name (the older spelling of NAME; PROGRAM then comes first).
    #[arg(long, value_name = "NAME", hide_short_help = true)]
    key: Option<String>,
    #[command(flatten)]
    hold: HoldArgs,
    /// The owner id of the holding (default: one that names this host, this process's id,
    /// PROGRAM and the start time, which `status` shows). Two processes given the same id
    /// are one owner to the lock: the second re-enters it. Use with care.
    #[arg(long, value_name = "ID")]
    owner: Option<String>,
    /// Reserved for the read side of the read-write lock (flock's -s).
    #[arg(short = 's', hide = true)]
    shared: bool,
    /// Reserved for the write side of the read-write lock (flock's -x).
    #[arg(short = 'x', hide = true)]
    exclusive: bool,
    /// The lock name.
    #[arg(value_name = "NAME")]
    name: Option<String>,
    /// The program and its arguments. It gets FENCELOCK_KEY (NAME) and FENCELOCK_TOKEN (the
    /// fencing token) in its environment, and runs in its own process group, which it does
    /// not outlive: if fencelock dies, PROGRAM is killed; when PROGRAM ends, what it left
    /// running in its group is killed before the lock is released. Every word before PROGRAM that
    /// starts with `-` must be an option (put `--` before a PROGRAM that starts with `-`).
    #[arg(trailing_var_arg = true, value_name = "PROGRAM")]
    program: Vec<String>,
}

/// What `fencelock run` was asked to do, checked.
#[derive(Debug)]
pub struct Job {
    conn: Connection,
    key: String,
    hold: HoldArgs,
    /// `--owner`, if given.
    owner: Option<String>,
    /// PROGRAM's name as the owner id shows it (with `--shell`, the line's first word).
    program_name: String,
    /// The command to run: PROGRAM and its arguments, or `sh -c LINE`.
    program: Vec<String>,
}

impl RunArgs {
    /// Checks what clap cannot: NAME and PROGRAM, `--key`, `--shell`'s one command line,
    /// the reserved flags. The error is a usage error's text.
    pub fn resolve(self) -> Result<Job, String> {
        if self.shared || self.exclusive {
            return Err(
                "-s and -x are reserved for the read and write sides of the read-write \
                        lock; `fencelock run` takes the (exclusive) lock without them"
                    .into(),
            );
        }
        let (key, program) = match self.key {
            // The older spelling: every positional word is PROGRAM.
            Some(key) => (key, self.name.into_iter().chain(self.program).collect()),
            None => match self.name {
                Some(name) => (name, self.program),
                None => return Err("missing the lock NAME and PROGRAM".into()),
            },
        };
        let (program_name, program) = self.hold.command(program, &format!("lock {key:?}"))?;
        Ok(Job {
            conn: self.conn,
            key,
            hold: self.hold,
            owner: self.owner,
            program_name,
            program,
        })
    }
}

/// With `--key`, PROGRAM starts at the first positional word: an option after it belongs to
/// PROGRAM, but clap took it as fencelock's. Refused, with the way out.
pub fn check_key_order(matches: &clap::ArgMatches) -> Result<(), clap::Error> {
    use clap::parser::ValueSource;
    let (Some(_), Some(first)) = (matches.get_raw("key"), matches.index_of("name")) else {
        return Ok(());
    };
    let late = matches.ids().find(|id| {
        matches.value_source(id.as_str()) == Some(ValueSource::CommandLine)
            && matches
                .indices_of(id.as_str())
                .is_some_and(|mut i| i.any(|i| i > first))
            && !matches!(id.as_str(), "name" | "program")
    });
    match late {
        Some(id) => Err(clap::Error::raw(
            clap::error::ErrorKind::ArgumentConflict,
            format!(
                "with --key, PROGRAM starts at its first word, but the option {} came after \
                 it; put `--` before PROGRAM so that its own options reach it\n",
                match id.as_str() {
                    "wait_seconds" => "-w".to_string(),
                    id => format!("--{}", id.replace('_', "-")),
                }
            ),
        )),
        None => Ok(()),
    }
}

/// Runs `fencelock run`; returns the exit status.
pub async fn run(args: RunArgs) -> u8 {
    let args = match args.resolve() {
        Ok(job) => job,
        Err(message) => return crate::usage_error("run", &message),
    };
    init_logging(args.conn.verbose);
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fencelock: cannot handle signals: {e}");
            return exit::CONNECTION;
        }
    };
    if let Err(e) = fencelock::validate_name(&args.key) {
        return crate::explain::report(&e.into(), &args.conn);
    }
    let client = tokio::select! {
        c = args.conn.connect(Some(args.hold.lease)) => match c {
            Ok(c) => c,
            Err(e) => return crate::explain::report_connect(&e, &args.conn),
        },
        sig = signals.next() => return 128 + sig as u8,
    };
    let code = hold_and_run(&client, &args, &mut signals).await;
    // A RedLock release is decided by a majority; let it reach the other servers too before
    // this process exits, and say so if it could not.
    if let Err(e) = client.close().await {
        // The error says what a server may keep, and until when.
        eprintln!("fencelock: warning: {e}");
    }
    code
}

/// Takes the lock as asked (`--no-wait`, `--wait`, or waiting for ever); `None` when it is
/// held by someone else or the wait timed out (said on stderr).
async fn acquire(lock: &fencelock::Lock, args: &Job) -> Result<Option<Guard>, Error> {
    if args.hold.no_wait {
        match lock.try_acquire().await? {
            Ok(guard) => Ok(Some(guard)),
            Err(busy) => {
                eprintln!(
                    "fencelock: lock {:?} is held by someone else{}",
                    args.key,
                    holder(lock, busy.remaining_lease).await
                );
                Ok(None)
            }
        }
    } else if let Some(wait) = args.hold.wait_bound() {
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
}

/// Who holds `lock` and for how long, as far as its status says (one more request, on the
/// conflict path only): ` (held by HOST, pid PID (PROGRAM), since …; lease left: 27s)`.
async fn holder(lock: &fencelock::Lock, remaining: Option<Duration>) -> String {
    let Ok(status) = lock.status().await else {
        return String::new();
    };
    let mut facts: Vec<String> = status
        .owners
        .iter()
        .filter_map(|(owner, _)| crate::owner::parse(owner))
        .map(|origin| format!("held by {}", origin.describe()))
        .collect();
    if let Some(left) = remaining.or(status.remaining_lease) {
        let left = Duration::from_millis(left.as_millis() as u64);
        facts.push(format!("lease left: {}", humantime::format_duration(left)));
    }
    match facts.is_empty() {
        true => String::new(),
        false => format!(" ({})", facts.join("; ")),
    }
}

/// Acquires the lock, runs PROGRAM under it, releases it; returns the exit status.
async fn hold_and_run(client: &fencelock::Client, args: &Job, signals: &mut Signals) -> u8 {
    let owner = match &args.owner {
        Some(owner) => owner.clone(),
        // PROGRAM's own name, not `sh` (--shell).
        None => crate::owner::for_run(&args.program_name, client.id()),
    };
    let lock = client.lock(&args.key).with_owner(&owner);
    let guard = tokio::select! {
        r = acquire(&lock, args) => match r {
            Ok(Some(guard)) => guard,
            Ok(None) => return args.hold.conflict_exit_code,
            Err(e) => return crate::explain::report(&e, &args.conn),
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
    let token = guard.fencing_token().to_string();
    let env = vec![
        ("FENCELOCK_KEY", args.key.clone()),
        ("FENCELOCK_TOKEN", token),
    ];
    let what = format!("lock {:?}", args.key);
    let spec = args
        .hold
        .spec(&args.conn, what, "holder", &args.program, env);
    held::run_held(&spec, guard, signals).await.code
}
