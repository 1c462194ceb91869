//! PROGRAM while something is held: a lock (`fencelock run`) or an election's leadership
//! (`fencelock elect`). One supervision for both, so that both are equally safe.
//!
//! PROGRAM runs in a process group of its own under a supervisor (`supervise.rs`), and the
//! holding is given back only once that whole group is gone: when PROGRAM ends, what it left
//! in its group is killed; when the holding is lost, the group gets SIGTERM (and SIGCONT,
//! should it be stopped), then SIGKILL after `--kill-grace`, and the exit status is 79, also
//! when the loss is found only at the give-back, or when a job stopped past its lease (Ctrl-Z)
//! is continued. SIGINT, SIGTERM and SIGHUP are passed on to the group (followed by SIGCONT).
//! One the group got without this process (the terminal's Ctrl-C or hangup, which reach only
//! the foreground group, PROGRAM's) comes back in the supervisor's report: [`Ran::signalled`]
//! says the job was told to end either way. Messages after PROGRAM's start never panic on a
//! terminal that hung up (`errln!`).
//!
//! [`HoldArgs`] are the flags of both commands that say how to wait for the holding and how
//! to treat PROGRAM; [`Held`] is what both hold; [`run_held`] runs PROGRAM under it.

use std::fs::File;
use std::future::Future;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use clap::Args;
use fencelock::{Guard, Leadership, LostReason, MultiGuard, Released};
use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::{getpgrp, pipe2, Pid};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use crate::{exit, parse_duration, supervise, Connection};

/// The flags `run` and `elect` share: how long to wait, the lease, and PROGRAM's treatment.
#[derive(Args, Debug)]
pub struct HoldArgs {
    /// Wait at most this long for the lock, up to 7d (default: forever).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,
    /// Wait at most SECONDS (flock's -w; fractions allowed).
    #[arg(short = 'w', value_name = "SECONDS", value_parser = parse_seconds,
          conflicts_with_all = ["no_wait", "wait"])]
    pub wait_seconds: Option<Duration>,
    /// Fail at once if the lock is held (flock's -n).
    #[arg(long, short = 'n')]
    pub no_wait: bool,
    /// The lease (10ms to 7d); renewed every lease/3 while PROGRAM runs.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    pub lease: Duration,
    /// Exit status when the lock is held or the wait timed out.
    #[arg(long, value_name = "N", default_value_t = exit::CONFLICT)]
    pub conflict_exit_code: u8,
    /// On a loss, how long PROGRAM gets between SIGTERM and SIGKILL (up to 7d).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "5s")]
    pub kill_grace: Duration,
    /// PROGRAM is one command line, run by `sh -c` (as flock's -c).
    #[arg(long)]
    pub shell: bool,
}

impl HoldArgs {
    /// The wait bound: `--wait` or `-w`.
    pub fn wait_bound(&self) -> Option<Duration> {
        self.wait.or(self.wait_seconds)
    }

    /// PROGRAM's name (with `--shell`, the line's first word) and the command to run (PROGRAM
    /// and its arguments, or `sh -c LINE`); `what` names what PROGRAM runs under, for the
    /// usage error when PROGRAM is missing.
    pub fn command(
        &self,
        program: Vec<String>,
        what: &str,
    ) -> Result<(String, Vec<String>), String> {
        let name = match self.shell {
            true => program.first().and_then(|l| l.split_whitespace().next()),
            false => program.first().map(String::as_str),
        }
        .unwrap_or("")
        .to_string();
        let command = match (self.shell, program.len()) {
            (_, 0) => return Err(format!("missing PROGRAM to run under {what}")),
            (true, 1) => vec!["sh".into(), "-c".into(), program[0].clone()],
            (true, n) => {
                return Err(format!(
                    "--shell takes PROGRAM as one command line, as `sh -c` does, but {n} words \
                     were given; quote the whole line: --shell 'echo a; echo b'"
                ))
            }
            (false, _) => program,
        };
        Ok((name, command))
    }
}

impl HoldArgs {
    /// PROGRAM (`program`, with `env`) under `what` (`lock "k"`), held in turns with an
    /// `other` (`holder`), with this `--kill-grace`.
    pub fn spec<'a>(
        &self,
        conn: &'a Connection,
        what: String,
        other: &'static str,
        program: &'a [String],
        env: Vec<(&'static str, String)>,
    ) -> Spec<'a> {
        let kill_grace = self.kill_grace;
        Spec {
            conn,
            what,
            other,
            program,
            env,
            kill_grace,
        }
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

/// What PROGRAM runs under: a lock's [`Guard`] (also a read side's, a permit's), a
/// multi-lock's [`MultiGuard`], or an election's [`Leadership`].
pub trait Held {
    /// Resolves when the holding is lost.
    fn lost(&self) -> impl Future<Output = ()> + '_;
    /// Whether it is still held, from local state only.
    fn is_held(&self) -> bool;
    /// Why it was lost, if it was.
    fn lost_reason(&self) -> Option<LostReason>;
    /// Gives it back: releases the lock, resigns the leadership.
    fn give_back(self) -> impl Future<Output = fencelock::Result<Released>>;
}

impl Held for Guard {
    fn lost(&self) -> impl Future<Output = ()> + '_ {
        Guard::lost(self)
    }
    fn is_held(&self) -> bool {
        Guard::is_held(self)
    }
    fn lost_reason(&self) -> Option<LostReason> {
        Guard::lost_reason(self)
    }
    fn give_back(self) -> impl Future<Output = fencelock::Result<Released>> {
        self.release()
    }
}

impl Held for Leadership {
    fn lost(&self) -> impl Future<Output = ()> + '_ {
        Leadership::lost(self)
    }
    fn is_held(&self) -> bool {
        self.is_leading()
    }
    fn lost_reason(&self) -> Option<LostReason> {
        Leadership::lost_reason(self)
    }
    fn give_back(self) -> impl Future<Output = fencelock::Result<Released>> {
        self.resign()
    }
}

impl Held for MultiGuard {
    fn lost(&self) -> impl Future<Output = ()> + '_ {
        MultiGuard::lost(self)
    }
    fn is_held(&self) -> bool {
        MultiGuard::is_held(self)
    }
    /// The first lost lock's reason.
    fn lost_reason(&self) -> Option<LostReason> {
        self.guards().iter().find_map(Guard::lost_reason)
    }
    /// Releases every lock: `NotHeld` if any was no longer held (lost), else the first
    /// lock's outcome.
    async fn give_back(self) -> fencelock::Result<Released> {
        let released = self.release().await?;
        let outcomes = released.into_iter().map(|(_, r)| r);
        let mut first = None;
        for outcome in outcomes {
            if outcome == Released::NotHeld {
                return Ok(Released::NotHeld);
            }
            first.get_or_insert(outcome);
        }
        Ok(first.unwrap_or(Released::NotHeld))
    }
}

/// PROGRAM and what it runs under, for [`run_held`].
pub struct Spec<'a> {
    /// Where the service is (for the words of a loss's reason).
    pub conn: &'a Connection,
    /// What is held, in messages: `lock "k"`, `leadership of election "e"`.
    pub what: String,
    /// Who else may have run meanwhile after a loss: `holder`, `leader`.
    pub other: &'static str,
    /// The command: PROGRAM and its arguments.
    pub program: &'a [String],
    /// PROGRAM's extra environment.
    pub env: Vec<(&'static str, String)>,
    /// `--kill-grace`.
    pub kill_grace: Duration,
}

/// How PROGRAM's run under a holding ended; the holding is given back.
#[derive(Debug, Clone, Copy)]
pub struct Ran {
    /// The exit status: PROGRAM's, 79 when the holding was lost before PROGRAM ended, 126
    /// when PROGRAM's supervisor could not start.
    pub code: u8,
    /// The last SIGINT, SIGTERM or SIGHUP this process got (and passed on) while PROGRAM ran,
    /// else the one PROGRAM's group got (the terminal's Ctrl-C or hangup).
    pub signalled: Option<Signal>,
}

/// SIGINT, SIGTERM and SIGHUP, as one stream; and SIGCONT, which only a running PROGRAM's
/// group is told of.
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    cont: tokio::signal::unix::Signal,
}

impl Signals {
    /// Starts catching the signals.
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            cont: signal(SignalKind::from_raw(nix::libc::SIGCONT))?,
        })
    }

    /// The next SIGINT, SIGTERM or SIGHUP.
    pub async fn next(&mut self) -> Signal {
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

/// Runs PROGRAM under `held` until PROGRAM ends or `held` is lost, then gives `held` back.
pub async fn run_held(spec: &Spec<'_>, held: impl Held, signals: &mut Signals) -> Ran {
    let mut signalled = None;
    let mut program = match Program::spawn(spec) {
        Ok(program) => program,
        Err(e) => {
            let _ = held.give_back().await;
            errln!("fencelock: cannot start PROGRAM's supervisor: {e}");
            let code = exit::CANNOT_EXECUTE;
            return Ran { code, signalled };
        }
    };
    // Biased: when PROGRAM's end and the loss are both ready, `finish` decides from the
    // holding's state; a SIGCONT never goes before a loss that is ready.
    let code = loop {
        tokio::select! {
            biased;
            status = program.child.wait() => break program.ended(status),
            _ = held.lost() => {
                let code = stop_after_loss(spec, held, &mut program).await;
                return Ran { code, signalled };
            }
            sig = signals.next_or_cont() => {
                // `fg` after a stop past the lease: PROGRAM must not go on without the lock.
                if sig == Signal::SIGCONT && !held.is_held() {
                    let code = stop_after_loss(spec, held, &mut program).await;
                    return Ran { code, signalled };
                }
                if sig != Signal::SIGCONT {
                    signalled = Some(sig);
                }
                program.forward(sig);
            }
        }
    };
    let code = finish(spec, held, code).await;
    let signalled = signalled.or(program.told);
    Ran { code, signalled }
}

/// PROGRAM ended with `code` (and its group is gone): gives the holding back; returns `code`,
/// or 79 if the holding was lost before PROGRAM ended.
async fn finish(spec: &Spec<'_>, held: impl Held, code: u8) -> u8 {
    // Lost before PROGRAM ended (the lost signal may have fired as PROGRAM exited).
    let lost = held.lost_reason().is_some() || !held.is_held();
    match held.give_back().await {
        Ok(Released::NotHeld) => {}
        Ok(_) if !lost => return code,
        Ok(_) => {}
        Err(e) if lost => errln!("fencelock: warning: release failed: {e}"),
        Err(e) => {
            errln!("fencelock: warning: release failed: {e}; the lease will expire");
            return code;
        }
    }
    errln!(
        "fencelock: {} was lost before PROGRAM ended (PROGRAM exited with {code}); \
         another {} may have run at the same time",
        spec.what,
        spec.other
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
    /// The SIGINT, SIGTERM or SIGHUP PROGRAM's group got while PROGRAM ran, as its supervisor
    /// reported it: from this process, or from the terminal (Ctrl-C, a hangup), which sends
    /// them to PROGRAM's group alone while it is in the foreground.
    told: Option<Signal>,
}

impl Program {
    fn spawn(spec: &Spec<'_>) -> std::io::Result<Program> {
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
        command.arg("--").args(spec.program);
        let child = command
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
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
            told: None,
        })
    }

    /// The supervisor ended: takes the terminal back and returns the exit status PROGRAM's
    /// supervisor reported (having killed PROGRAM's group). If it reported none because it
    /// was killed (so PROGRAM may still run), kills PROGRAM's group.
    fn ended(&mut self, status: std::io::Result<std::process::ExitStatus>) -> u8 {
        use std::os::unix::process::ExitStatusExt;
        self.take_terminal();
        let mut reported = [0u8; 2];
        if let Ok(n @ 1..) = (&self.status).read(&mut reported) {
            if n == 2 {
                self.told = Signal::try_from(i32::from(reported[1])).ok();
            }
            return reported[0];
        }
        match status {
            Ok(status) if status.signal().is_some() => {
                let _ = killpg(self.group, Signal::SIGKILL);
                errln!(
                    "fencelock: PROGRAM's supervisor was killed by signal {}; PROGRAM was killed",
                    status.signal().unwrap_or(0)
                );
                exit::program_status(status)
            }
            // It could not set itself up, said why, and started nothing.
            Ok(status) => exit::program_status(status),
            Err(e) => {
                let _ = killpg(self.group, Signal::SIGKILL);
                errln!("fencelock: waiting for PROGRAM failed: {e}");
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

/// The lost signal fired (or the loss was found when the job was continued): stop PROGRAM's
/// whole group, politely first. SIGCONT after SIGTERM: a stopped PROGRAM acts on the SIGTERM
/// before anything else.
async fn stop_after_loss(spec: &Spec<'_>, held: impl Held, program: &mut Program) -> u8 {
    errln!(
        "fencelock: {} lost: {}; stopping PROGRAM (SIGTERM, then SIGKILL after {})",
        spec.what,
        crate::explain::lost_reason(held.lost_reason(), spec.conn),
        humantime::format_duration(spec.kill_grace)
    );
    let _ = killpg(program.group, Signal::SIGTERM);
    let _ = killpg(program.group, Signal::SIGCONT);
    match tokio::time::timeout(spec.kill_grace, program.child.wait()).await {
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
    // Harmless if the holding is gone; gives it back if the server was only slow.
    let _ = held.give_back().await;
    exit::LOCK_LOST
}
