//! Helpers shared by the CLI test files: throwaway servers of each service, the `fencelock`
//! binary pointed at one, bounded waits, and process checks by PID.

#![allow(dead_code)]

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use tokio::process::Command;

pub const CONFLICT: i32 = 75;
pub const LOCK_LOST: i32 = 79;
pub const USAGE: i32 = 64;
pub const CONNECTION: i32 = 69;

/// A throwaway server of one service, stopped by PID on drop.
pub enum Server {
    Redis(fencelock_testkit::RedisServer),
    ZooKeeper(fencelock_testkit::ZooKeeperServer),
    Etcd(fencelock_testkit::EtcdServer),
}

/// The services `fencelock` speaks to.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Redis,
    ZooKeeper,
    Etcd,
}

impl Server {
    /// Starts a server of `kind` on a free loopback port.
    pub async fn start(kind: Kind) -> Server {
        tokio::task::spawn_blocking(move || match kind {
            Kind::Redis => Server::Redis(fencelock_testkit::RedisServer::start().unwrap()),
            Kind::ZooKeeper => {
                Server::ZooKeeper(fencelock_testkit::ZooKeeperServer::start().unwrap())
            }
            Kind::Etcd => Server::Etcd(fencelock_testkit::EtcdServer::start().unwrap()),
        })
        .await
        .unwrap()
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        match self {
            Server::Redis(s) => s.url(),
            Server::ZooKeeper(s) => s.url(),
            Server::Etcd(s) => s.url(),
        }
    }

    /// `fencelock ARGS` against this server (`FENCELOCK_URL`), killed if dropped.
    pub fn cli(&self, args: &[&str]) -> Command {
        cli_at(&self.url(), args)
    }

    /// Runs `fencelock ARGS` to completion, bounded.
    pub async fn output(&self, args: &[&str]) -> Output {
        within(60, "fencelock exits", self.cli(args).output())
            .await
            .unwrap()
    }
}

/// `fencelock ARGS` with `FENCELOCK_URL=url`, killed if dropped.
pub fn cli_at(url: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fencelock"));
    c.env_remove("FENCELOCK_PASSWORD")
        .env("FENCELOCK_URL", url)
        .args(args)
        .kill_on_drop(true);
    c
}

/// stdout and stderr as text.
pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Awaits `f`, failing the test after `secs` seconds.
pub async fn within<T>(secs: u64, what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// Waits (bounded) until `path` has content; returns it.
pub async fn wait_for_file(path: &Path) -> String {
    within(30, "file written", async {
        loop {
            if let Ok(s) = std::fs::read_to_string(path) {
                if s.ends_with('\n') {
                    return s;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// Whether process `pid` still runs (a zombie, dead but not reaped, does not).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// The process group of `pid`.
pub fn group_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit_once(')').unwrap().1;
    rest.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// Waits until none of `pids` runs, failing after `limit`; returns how long it took.
pub async fn all_gone(pids: &[i32], limit: Duration) -> Duration {
    let start = Instant::now();
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            start.elapsed() < limit,
            "still running after {limit:?}: {:?}",
            pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

/// Sends `signal` to process `pid`.
pub fn signal(pid: i32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
}

/// Drives `fencelock ARGS` on a pseudo-terminal (python's `pty`): waits for `expect_first`,
/// types `input`, waits for `expect_then`; prints the exit status as the last line.
const PTY_DRIVER: &str = r#"
import os, pty, sys, time
first, typed, then = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3].encode()
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[4], sys.argv[4:])
seen = b""
def wait_for(what):
    global seen
    deadline = time.time() + 20
    while what not in seen:
        if time.time() > deadline:
            sys.exit("timed out waiting for %r; saw %r" % (what, seen))
        try:
            seen += os.read(fd, 1024)
        except OSError:
            sys.exit("terminal closed waiting for %r; saw %r" % (what, seen))
wait_for(first)
os.write(fd, typed)
wait_for(then)
_, status = os.waitpid(pid, 0)
print(seen.decode(errors="replace"))
print(os.waitstatus_to_exitcode(status))
"#;

/// An interactive PROGRAM under `fencelock ARGS... --shell LINE` on a terminal: it prompts,
/// reads the terminal (its group is the terminal's foreground group, not stopped by SIGTTIN)
/// and exits 3, which `fencelock` exits with.
pub async fn an_interactive_program_reads_the_terminal_under(server: &Server, args: &[&str]) {
    let mut argv = args.to_vec();
    argv.extend(["--shell", "printf 'name?'; read a; echo got $a; exit 3"]);
    let (seen, code) = on_a_terminal(server, "name?", "fence\n", "got fence", &argv).await;
    assert!(seen.contains("got fence"), "{seen}");
    assert_eq!(code, 3, "{seen}");
}

pub async fn on_a_terminal(
    server: &Server,
    first: &str,
    typed: &str,
    then: &str,
    args: &[&str],
) -> (String, i32) {
    let mut argv = vec![env!("CARGO_BIN_EXE_fencelock")];
    argv.extend_from_slice(args);
    on_a_terminal_argv(server, first, typed, then, &argv).await
}

/// As [`on_a_terminal`], for any program (`argv`, a path first) in place of `fencelock ARGS`.
pub async fn on_a_terminal_argv(
    server: &Server,
    first: &str,
    typed: &str,
    then: &str,
    argv: &[&str],
) -> (String, i32) {
    let dir = tempfile::tempdir().unwrap();
    let driver = dir.path().join("drive_terminal.py");
    std::fs::write(&driver, PTY_DRIVER).unwrap();
    let out = within(
        40,
        "the terminal session",
        Command::new("python3")
            .arg(&driver)
            .args([first, typed, then])
            .args(argv)
            .env("FENCELOCK_URL", server.url())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let (seen, code) = stdout.trim_end().rsplit_once('\n').unwrap();
    (seen.to_string(), code.trim().parse().unwrap())
}
