//! The supervisor between `fencelock run` and PROGRAM: PROGRAM (its whole process group)
//! never outlives the runner, whatever ends the runner (`kill -9`, the OOM killer, a crash).
//!
//! The workspace forbids `unsafe`, so the runner cannot set a parent-death signal in PROGRAM
//! between fork and exec. Instead the runner starts this program (`fencelock` itself,
//! re-executed from `/proc/self/exe`, as the hidden `supervise` subcommand) as the leader of
//! a new process group, and the supervisor starts PROGRAM as its child, in that group:
//!
//! ```text
//! fencelock run (runner) ──> fencelock supervise (group leader) ──> PROGRAM (same group)
//!        holds the pipe's write end      reads the pipe; EOF: SIGKILL to its own group
//! ```
//!
//! - **The runner dies**: the runner made a pipe whose write end only it holds (close-on-exec,
//!   so neither the supervisor nor PROGRAM inherits it), and passed the read end. The kernel
//!   closes the write end when the runner dies, by any cause; the supervisor's blocking read
//!   then returns end-of-file and the supervisor sends SIGKILL to its own process group,
//!   PROGRAM and everything PROGRAM started in it, then itself. There is no race with a runner
//!   that died before the supervisor was set up: the read returns end-of-file at once. A
//!   parent-death signal was not chosen: it fires when the *thread* that forked exits, not
//!   the process, and the runner is multi-threaded.
//! - **PROGRAM ends**: the supervisor writes PROGRAM's status to a second pipe (`--status-fd`,
//!   whose read end only the runner holds) and then sends SIGKILL to its own process group:
//!   whatever PROGRAM left running in its group (`sleep 30 &`, a child that ignores SIGTERM)
//!   dies before the runner releases the lock. (flock(1) keeps the lock while such processes
//!   hold its inherited descriptor; `fencelock run` cannot, so it ends them.)
//! - **The supervisor dies** (SIGKILL to it alone, the OOM killer) before it reported: the
//!   runner is alive, sees its child ended by a signal without a status in the pipe, and sends
//!   SIGKILL to the group (its id is the supervisor's id, which the kernel does not hand out
//!   again while PROGRAM is left in the group).
//! - **Signals to the group** (the runner's forwarding of SIGINT/SIGTERM/SIGHUP, the terminal's
//!   Ctrl-C): the supervisor catches them and does nothing, so that it lives to report
//!   PROGRAM's status; PROGRAM starts with their default actions and an empty signal mask
//!   (`posix_spawnp` sets both; a blocked or ignored signal would otherwise be inherited) and
//!   acts on them.
//!   SIGINT, SIGTERM and SIGHUP are blocked in the supervisor instead, and read from a
//!   signalfd once PROGRAM ended: one that came to the group is reported with PROGRAM's status.
//!   On a terminal the runner is not in the foreground group while PROGRAM runs, so Ctrl-C
//!   and a hangup reach only PROGRAM's group: this is how the runner learns that the job was
//!   told to end (`elect --again` then ends instead of campaigning again). Blocked, not caught,
//!   because a blocked signal is pending the moment it is sent, before PROGRAM can die of it:
//!   no race between PROGRAM's end and the signal's report. The runner follows
//!   a forwarded SIGTERM/SIGINT/SIGHUP with SIGCONT, as shells do for `kill %1`, so that a
//!   stopped PROGRAM acts on it too. SIGKILL (the runner's last resort) ends both. One signal
//!   that arrives before the supervisor catches them ends it before PROGRAM starts; the
//!   runner then sees it killed, as below.
//! - **A terminal** (the controlling terminal, `/dev/tty`, even when stdin is a pipe): when
//!   the runner is in the terminal's foreground group, the supervisor makes its own group the
//!   foreground group before it starts PROGRAM (SIGTTOU is blocked, so the kernel allows it),
//!   so that an interactive PROGRAM can read the terminal and Ctrl-C reaches it; the runner
//!   takes the terminal back when the supervisor has ended, if PROGRAM's group still has it.
//!
//! - **Ctrl-Z** stops PROGRAM (the supervisor catches SIGTSTP); the supervisor then gives the
//!   terminal back to the runner's group (if PROGRAM's group had it) and stops it (SIGSTOP),
//!   so that the shell sees its job stopped. `fg` continues the runner in the foreground; the
//!   runner hands the terminal to PROGRAM's group again and continues it. `bg` continues the
//!   runner in the background; the runner continues PROGRAM without the terminal (PROGRAM
//!   reading it stops the job again, as any background job). The lease is not renewed while
//!   the runner is stopped: a job stopped past its lease loses the lock, and when it is
//!   continued the runner does not continue PROGRAM but stops it (SIGTERM, which a stopped
//!   PROGRAM acts on before anything else when the SIGCONT that follows continues it; 79).
//!
//! The supervisor reports two bytes: PROGRAM's status, or 128+N when PROGRAM was killed by
//! signal N, and 126/127 when PROGRAM could not be executed / was not found; then the ending
//! signal (SIGINT, SIGTERM or SIGHUP) the group got while PROGRAM ran, or 0.
//!
//! Not covered: processes PROGRAM moves out of its group (`setsid`, daemons), as with
//! `flock(1)`.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;

use clap::Args;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::spawn::{posix_spawnp, PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags};
use nix::sys::signal::{killpg, pthread_sigmask, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::stat::{fstat, SFlag};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getpgid, getpgrp, getppid, tcgetpgrp, tcsetpgrp, Pid};

use crate::exit;

/// Arguments of the hidden `fencelock supervise`.
#[derive(Args, Debug)]
pub struct SuperviseArgs {
    /// The read end of the runner's pipe (end-of-file: the runner is gone).
    #[arg(long, value_name = "FD")]
    watch_fd: i32,
    /// The write end of the pipe that takes PROGRAM's status to the runner.
    #[arg(long, value_name = "FD")]
    status_fd: i32,
    /// Make this process group the terminal's foreground group before PROGRAM starts.
    #[arg(long)]
    foreground: bool,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    program: Vec<String>,
}

/// The signals that end a job: blocked in the supervisor and reported with PROGRAM's status.
const ENDING: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// The other signals sent to the group that PROGRAM should act on and the supervisor must
/// outlive, to report PROGRAM's status.
const OUTLIVED: [i32; 7] = [
    nix::libc::SIGQUIT,
    nix::libc::SIGUSR1,
    nix::libc::SIGUSR2,
    nix::libc::SIGALRM,
    // Ctrl-Z, or PROGRAM using the terminal from the background (after `bg`), stops
    // PROGRAM; the supervisor stays to pass the stop on (see `wait_for`).
    nix::libc::SIGTSTP,
    nix::libc::SIGTTIN,
    nix::libc::SIGTTOU,
];

/// Catches [`OUTLIVED`] for the rest of this process's life (tokio never uninstalls a
/// handler), doing nothing with them. Caught, not blocked: these need no report, and a caught
/// signal leaves nothing pending (PROGRAM starts with their default actions either way, see
/// [`spawn_program`]).
fn outlive_group_signals() -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        for sig in OUTLIVED {
            let _ = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(sig))?;
        }
        Ok(())
    })
}

/// The controlling terminal (`/dev/tty`, whatever stdin is), if this process has one.
pub fn controlling_terminal() -> Option<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()
}

/// Whether `group` is the foreground group of the terminal `tty`.
pub fn in_foreground(tty: &File, group: Pid) -> bool {
    tcgetpgrp(tty).is_ok_and(|pgrp| pgrp == group)
}

/// Makes `group` the foreground group of the terminal `tty`, with SIGTTOU blocked on this
/// thread meanwhile (a background group may then change it).
pub fn give_foreground(tty: &File, group: Pid) {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    if pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old)).is_ok() {
        let _ = tcsetpgrp(tty, group);
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
}

/// Runs the supervisor: reports PROGRAM's exit status to the runner, then kills its own
/// group (what PROGRAM left in it, and itself). Returns only when it cannot report.
pub fn supervise(args: SuperviseArgs) -> u8 {
    // First, before any thread starts: threads inherit the mask.
    let ending = match block_ending_signals() {
        Ok(ending) => ending,
        Err(e) => {
            eprintln!("fencelock: cannot handle signals: {e}");
            return exit::CANNOT_EXECUTE;
        }
    };
    if let Err(e) = outlive_group_signals() {
        eprintln!("fencelock: cannot handle signals: {e}");
        return exit::CANNOT_EXECUTE;
    }
    let pipes = open_pipe(args.watch_fd, "--watch-fd", OFlag::O_RDONLY).and_then(|watch| {
        open_pipe(args.status_fd, "--status-fd", OFlag::O_WRONLY).map(|status| (watch, status))
    });
    let (watch, mut status) = match pipes {
        Ok(pipes) => pipes,
        Err(e) => {
            eprintln!("fencelock: cannot watch the runner: {e}");
            return exit::CANNOT_EXECUTE;
        }
    };
    let tty = controlling_terminal().filter(|_| args.foreground);
    if let Some(tty) = &tty {
        give_foreground(tty, getpgrp());
    }
    let code = match spawn_program(&args.program) {
        Ok(child) => {
            std::thread::spawn(move || watch_runner(watch));
            wait_for(child, tty.as_ref())
        }
        Err(e) => {
            eprintln!("fencelock: cannot run {:?}: {e}", args.program[0]);
            match e {
                nix::errno::Errno::ENOENT => exit::NOT_FOUND,
                _ => exit::CANNOT_EXECUTE,
            }
        }
    };
    // The runner may be gone (then the watch thread kills the group anyway).
    let _ = status.write_all(&[code, ending_signal(&ending)]);
    let _ = killpg(getpgrp(), Signal::SIGKILL);
    code
}

/// Blocks [`ENDING`] in this thread (and so in every thread started after) and opens a
/// signalfd that reads them.
fn block_ending_signals() -> nix::Result<SignalFd> {
    let mut mask = SigSet::empty();
    for sig in ENDING {
        mask.add(sig);
    }
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)?;
    SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
}

/// Starts PROGRAM (searched in `PATH`) with this process's environment, an empty signal
/// mask and the default action of every signal this process catches, blocks or ignores
/// ([`ENDING`], [`OUTLIVED`], and SIGPIPE, which Rust ignores). `posix_spawnp` sets both in
/// the child before the exec, where `std::process::Command` would leave the mask inherited.
fn spawn_program(program: &[String]) -> nix::Result<Pid> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |bytes: &[u8]| CString::new(bytes).map_err(|_| nix::errno::Errno::EINVAL);
    let argv = program
        .iter()
        .map(|a| c(a.as_bytes()))
        .collect::<nix::Result<Vec<_>>>()?;
    let env = std::env::vars_os()
        .map(|(k, v)| c(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
        .collect::<nix::Result<Vec<_>>>()?;
    let mut defaults = SigSet::empty();
    let raw = ENDING.iter().map(|s| *s as i32);
    for sig in raw.chain(OUTLIVED).chain([nix::libc::SIGPIPE]) {
        if let Ok(sig) = Signal::try_from(sig) {
            defaults.add(sig);
        }
    }
    let mut attr = PosixSpawnAttr::init()?;
    attr.set_sigmask(&SigSet::empty())?;
    attr.set_sigdefault(&defaults)?;
    attr.set_flags(
        PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
    )?;
    let actions = PosixSpawnFileActions::init()?;
    posix_spawnp(&argv[0], &actions, &attr, &argv, &env)
}

/// The last of [`ENDING`] the group got (pending, read from `ending`), or 0.
fn ending_signal(ending: &SignalFd) -> u8 {
    let mut last = 0;
    while let Ok(Some(info)) = ending.read_signal() {
        last = u8::try_from(info.ssi_signo).unwrap_or(0);
    }
    last
}

/// Waits for PROGRAM to end; returns its exit status. On a terminal, PROGRAM stopped by
/// Ctrl-Z stops the runner's job too, so that the shell gets the terminal back (`fg`
/// continues the runner, which continues PROGRAM's group).
fn wait_for(pid: Pid, tty: Option<&File>) -> u8 {
    loop {
        match waitpid(pid, Some(WaitPidFlag::WUNTRACED)) {
            Ok(WaitStatus::Exited(_, code)) => return code as u8,
            Ok(WaitStatus::Signaled(_, sig, _)) => return 128u8.saturating_add(sig as u8),
            Ok(WaitStatus::Stopped(_, _)) => {
                if let Some(tty) = tty {
                    stop_the_job(tty);
                }
            }
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                eprintln!("fencelock: waiting for PROGRAM failed: {e}");
                return exit::CANNOT_EXECUTE;
            }
        }
    }
}

/// PROGRAM was stopped (Ctrl-Z, or reading the terminal in the background): the terminal
/// goes back to the runner's group if PROGRAM's group has it, and the runner's group is
/// stopped, as the terminal would have stopped it (the shell's job).
fn stop_the_job(tty: &File) {
    let Ok(runner_group) = getpgid(Some(getppid())) else {
        return;
    };
    if in_foreground(tty, getpgrp()) {
        give_foreground(tty, runner_group);
    }
    // SIGSTOP: the kernel drops SIGTSTP sent to an orphaned group (a runner that leads its
    // session, as under `script` or `setsid`).
    let _ = killpg(runner_group, Signal::SIGSTOP);
}

/// Opens the runner's pipe end `fd` again, close-on-exec (so that PROGRAM does not inherit
/// it), and closes the inherited descriptor. Through `/proc/self/fd`, since taking ownership
/// of a descriptor by number is `unsafe`. Refuses anything but a pipe (a wrong number such as
/// 0 would silently turn the watch off). Non-blocking to open (a pipe without writers would
/// block the open), blocking to use.
fn open_pipe(fd: i32, flag: &str, access: OFlag) -> std::io::Result<File> {
    let bad = |what: String| std::io::Error::other(format!("{flag} {fd}: {what}"));
    let file = std::fs::OpenOptions::new()
        .read(access == OFlag::O_RDONLY)
        .write(access == OFlag::O_WRONLY)
        .custom_flags(OFlag::O_NONBLOCK.bits())
        .open(format!("/proc/self/fd/{fd}"))
        .map_err(|e| bad(format!("{e} (is /proc mounted?)")))?;
    let mode = fstat(&file).map_err(|e| bad(e.to_string()))?.st_mode;
    if SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits()) != SFlag::S_IFIFO {
        return Err(bad("not a pipe".into()));
    }
    let _ = nix::unistd::close(fd);
    fcntl(&file, FcntlArg::F_SETFL(OFlag::empty()))?;
    Ok(file)
}

/// Blocks until the runner is gone (end-of-file: the kernel closed its write end), then
/// kills this process group: PROGRAM, what it started, and this process.
fn watch_runner(mut watch: File) {
    let mut buf = [0u8; 16];
    loop {
        match watch.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let _ = killpg(getpgrp(), Signal::SIGKILL);
}
