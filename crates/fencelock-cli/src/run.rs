//! `fencelock run`: hold a lock while a program runs.
//!
//! PROGRAM runs in a process group of its own under a supervisor (`supervise.rs`), and the
//! lock is released only once that whole group is gone: when PROGRAM ends, what it left in
//! its group is killed; when the lock is lost, the group gets SIGTERM (and SIGCONT, should
//! it be stopped), then SIGKILL after `--kill-grace`, and the exit status is 79, also when
//! the loss is found only at the release, or when a job stopped past its lease (Ctrl-Z) is
//! continued. SIGINT, SIGTERM and SIGHUP are passed on to the group (followed by SIGCONT).

use std::time::Duration;

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};

use clap::Args;
use fencelock::{Error, Guard, Released};
use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::{getpgrp, pipe2, Pid};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use crate::{exit, supervise};
use crate::{init_logging, parse_duration, Connection};

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
    /// Wait at most this long for the lock, up to 7d (default: wait forever).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_wait")]
    wait: Option<Duration>,
    /// Wait at most SECONDS for the lock (flock's -w; fractions allowed).
    #[arg(short = 'w', value_name = "SECONDS", value_parser = parse_seconds,
          conflicts_with_all = ["no_wait", "wait"])]
    wait_seconds: Option<Duration>,
    /// Fail at once if the lock is held by someone else (flock's -n).
    #[arg(long, short = 'n')]
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
    /// The owner id of the holding (default: one that names this host, this process's id,
    /// PROGRAM and the start time, which `status` shows). Two processes given the same id
    /// are one owner to the lock: the second re-enters it. Use with care.
    #[arg(long, value_name = "ID")]
    owner: Option<String>,
    /// PROGRAM is one command line, run by `sh -c` (as flock's -c).
    #[arg(long)]
    shell: bool,
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
    wait: Option<Duration>,
    no_wait: bool,
    lease: Duration,
    conflict_exit_code: u8,
    kill_grace: Duration,
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
        let program_name = match self.shell {
            true => program.first().and_then(|l| l.split_whitespace().next()),
            false => program.first().map(String::as_str),
        }
        .unwrap_or("")
        .to_string();
        let program: Vec<String> = match (self.shell, program.len()) {
            (_, 0) => return Err(format!("missing PROGRAM to run under lock {key:?}")),
            (true, 1) => vec!["sh".into(), "-c".into(), program[0].clone()],
            (true, n) => {
                return Err(format!(
                    "--shell takes PROGRAM as one command line, as `sh -c` does, but {n} words \
                     were given; quote the whole line: --shell 'echo a; echo b'"
                ))
            }
            (false, _) => program,
        };
        Ok(Job {
            conn: self.conn,
            key,
            wait: self.wait.or(self.wait_seconds),
            no_wait: self.no_wait,
            lease: self.lease,
            conflict_exit_code: self.conflict_exit_code,
            kill_grace: self.kill_grace,
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

/// Parses flock's `-w SECONDS` (a number, fractions allowed), at most 7 days.
fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds (for a duration use --wait 5m)"))?;
    if !(0.0..=crate::duration::MAX_DURATION.as_secs_f64()).contains(&secs) {
        return Err(format!("{s:?} seconds is out of range (0 to 7 days)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// SIGINT, SIGTERM and SIGHUP, as one stream; and SIGCONT, which only a running PROGRAM's
/// group is told of.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    cont: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            cont: signal(SignalKind::from_raw(nix::libc::SIGCONT))?,
        })
    }

    /// The next SIGINT, SIGTERM or SIGHUP.
    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
        }
    }

    /// The next SIGINT, SIGTERM, SIGHUP or SIGCONT.
    async fn next_or_cont(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.cont.recv() => Signal::SIGCONT,
        }
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
        c = args.conn.connect(Some(args.lease)) => match c {
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
    if args.no_wait {
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
            Ok(None) => return args.conflict_exit_code,
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

    let mut program = match Program::spawn(args, guard.fencing_token()) {
        Ok(program) => program,
        Err(e) => {
            let _ = guard.release().await;
            eprintln!("fencelock: cannot start PROGRAM's supervisor: {e}");
            return exit::CANNOT_EXECUTE;
        }
    };
    // Biased: when PROGRAM's end and the loss are both ready, `finish` decides from the
    // guard's state; a SIGCONT never goes before a loss that is ready.
    let code = loop {
        tokio::select! {
            biased;
            status = program.child.wait() => break program.ended(status),
            _ = guard.lost() => return stop_after_loss(args, guard, &mut program).await,
            sig = signals.next_or_cont() => {
                // `fg` after a stop past the lease: PROGRAM must not go on without the lock.
                if sig == Signal::SIGCONT && !guard.is_held() {
                    return stop_after_loss(args, guard, &mut program).await;
                }
                program.forward(sig);
            }
        }
    };
    finish(args, guard, code).await
}

/// PROGRAM ended with `code` (and its group is gone): releases the lock; returns `code`, or
/// 79 if the lock was lost before PROGRAM ended.
async fn finish(args: &Job, guard: Guard, code: u8) -> u8 {
    // Lost before PROGRAM ended (the lost signal may have fired as PROGRAM exited).
    let lost = guard.lost_reason().is_some() || !guard.is_held();
    match guard.release().await {
        Ok(Released::NotHeld) => {}
        Ok(_) if !lost => return code,
        Ok(_) => {}
        Err(e) if lost => eprintln!("fencelock: warning: release failed ({e})"),
        Err(e) => {
            eprintln!("fencelock: warning: release failed ({e}); the lease will expire");
            return code;
        }
    }
    eprintln!(
        "fencelock: lock {:?} was lost before PROGRAM ended (PROGRAM exited with {code}); \
         another holder may have run at the same time",
        args.key
    );
    exit::LOCK_LOST
}

/// PROGRAM under its supervisor (`supervise.rs`), the leader of PROGRAM's process group.
struct Program {
    /// The supervisor.
    child: Child,
    /// PROGRAM's process group (the supervisor's id).
    group: Pid,
    /// The pipe's write end, which only this process holds: when this process ends, by any
    /// cause, the supervisor reads end-of-file and kills the group.
    _runner_end: OwnedFd,
    /// The read end (non-blocking) of the pipe on which the supervisor reports PROGRAM's
    /// status before it kills its group.
    status: File,
    /// The controlling terminal, if this process was in its foreground group at the start
    /// (the supervisor then took the foreground for PROGRAM's group).
    tty: Option<File>,
}

impl Program {
    fn spawn(args: &Job, token: u64) -> std::io::Result<Program> {
        let (watch, runner_end) = pipe2(OFlag::O_CLOEXEC)?;
        let (status, supervisor_end) = pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        // The supervisor's ends alone are inherited (it opens them again and closes these).
        fcntl(&watch, FcntlArg::F_SETFD(FdFlag::empty()))?;
        fcntl(&supervisor_end, FcntlArg::F_SETFD(FdFlag::empty()))?;
        let tty = supervise::controlling_terminal()
            .filter(|tty| supervise::in_foreground(tty, getpgrp()));
        // `/proc/self/exe`: this very binary, even if its file was replaced meanwhile.
        let mut command = Command::new("/proc/self/exe");
        command
            .arg("supervise")
            .arg("--watch-fd")
            .arg(watch.as_raw_fd().to_string())
            .arg("--status-fd")
            .arg(supervisor_end.as_raw_fd().to_string());
        if tty.is_some() {
            command.arg("--foreground");
        }
        command.arg("--").args(&args.program);
        let child = command
            .env("FENCELOCK_KEY", &args.key)
            .env("FENCELOCK_TOKEN", token.to_string())
            // Its own group, so that a signal reaches PROGRAM and everything it started.
            .process_group(0)
            .spawn()?;
        drop((watch, supervisor_end));
        let group = Pid::from_raw(child.id().map_or(0, |id| id as i32));
        Ok(Program {
            child,
            group,
            _runner_end: runner_end,
            status: File::from(status),
            tty,
        })
    }

    /// The supervisor ended: takes the terminal back and returns the exit status PROGRAM's
    /// supervisor reported (having killed PROGRAM's group). If it reported none because it
    /// was killed (so PROGRAM may still run), kills PROGRAM's group.
    fn ended(&mut self, status: std::io::Result<std::process::ExitStatus>) -> u8 {
        use std::os::unix::process::ExitStatusExt;
        self.take_terminal();
        let mut reported = [0u8; 1];
        if let Ok(1) = (&self.status).read(&mut reported) {
            return reported[0];
        }
        match status {
            Ok(status) if status.signal().is_some() => {
                let _ = killpg(self.group, Signal::SIGKILL);
                eprintln!(
                    "fencelock: PROGRAM's supervisor was killed by signal {}; PROGRAM was killed",
                    status.signal().unwrap_or(0)
                );
                exit::program_status(status)
            }
            // It could not set itself up, said why, and started nothing.
            Ok(status) => exit::program_status(status),
            Err(e) => {
                let _ = killpg(self.group, Signal::SIGKILL);
                eprintln!("fencelock: waiting for PROGRAM failed: {e}");
                exit::CANNOT_EXECUTE
            }
        }
    }

    /// Passes a signal this process got on to PROGRAM's group, followed by SIGCONT (as shells
    /// do for `kill %1`: a stopped PROGRAM acts on it too). SIGCONT itself is the shell's
    /// `fg` or `bg` after Ctrl-Z stopped the job: on `fg` (this process's group has the
    /// terminal) the terminal goes to PROGRAM's group first; on `bg` it stays the shell's.
    fn forward(&self, sig: Signal) {
        tracing::debug!(%sig, "forwarding to PROGRAM's process group");
        let tty = self.tty.as_ref();
        if let Some(tty) = tty.filter(|tty| sig == Signal::SIGCONT && in_foreground(tty)) {
            supervise::give_foreground(tty, self.group);
        }
        let _ = killpg(self.group, sig);
        if sig != Signal::SIGCONT {
            let _ = killpg(self.group, Signal::SIGCONT);
        }
    }

    /// Makes this process's group the terminal's foreground group again, if PROGRAM's group
    /// has it (not after a `bg`: the shell has it then).
    fn take_terminal(&mut self) {
        if let Some(tty) = self.tty.take() {
            if supervise::in_foreground(&tty, self.group) {
                supervise::give_foreground(&tty, getpgrp());
            }
        }
    }
}

/// Whether this process's group is the foreground group of `tty`.
fn in_foreground(tty: &File) -> bool {
    supervise::in_foreground(tty, getpgrp())
}

/// The lost-lock signal fired (or the loss was found when the job was continued): stop
/// PROGRAM's whole group, politely first. SIGCONT after SIGTERM: a stopped PROGRAM acts on
/// the SIGTERM before anything else.
async fn stop_after_loss(args: &Job, guard: Guard, program: &mut Program) -> u8 {
    eprintln!(
        "fencelock: lock {:?} lost ({}); stopping PROGRAM (SIGTERM, then SIGKILL after {})",
        args.key,
        crate::explain::lost_reason(
            guard.lost_reason().map(|r| r.to_string()).as_deref(),
            &args.conn,
        ),
        humantime::format_duration(args.kill_grace)
    );
    let _ = killpg(program.group, Signal::SIGTERM);
    let _ = killpg(program.group, Signal::SIGCONT);
    match tokio::time::timeout(args.kill_grace, program.child.wait()).await {
        // The supervisor killed the group when PROGRAM ended (or was killed itself: then
        // `ended` kills the group).
        Ok(status) => {
            program.ended(status);
        }
        Err(_) => {
            let _ = killpg(program.group, Signal::SIGKILL);
            let _ = program.child.wait().await;
            program.take_terminal();
        }
    }
    // Harmless if the lock is gone; gives it back if the server was only slow.
    let _ = guard.release().await;
    exit::LOCK_LOST
}
