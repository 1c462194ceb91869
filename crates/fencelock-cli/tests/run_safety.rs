//! `fencelock run` is at least as safe as flock(1) (issue 23, points 1-4): PROGRAM never
//! outlives the runner, an interactive PROGRAM gets the terminal, a mistyped flag is a usage
//! error before anything is contacted, and a lock lost before PROGRAM ended is exit 79.
//! Real servers of every service, real processes.

mod common;

use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

/// PROGRAM for the kill tests: a shell that starts `sleep` in the background and writes
/// "SHELL_PID SLEEP_PID" to `file`.
fn pids_program(file: &std::path::Path) -> String {
    format!("sleep 100 & echo \"$$ $!\" > {}; wait", file.display())
}

async fn started(file: &std::path::Path) -> Vec<i32> {
    let pids = wait_for_file(file).await;
    pids.split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// Point 1: `kill -9` of `fencelock run` takes PROGRAM's whole process group with it within a
/// second (the lease is far from over: nothing but the runner's death can stop it).
async fn sigkill_of_the_runner_kills_programs_group(kind: Kind) {
    let server = Server::start(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let mut runner = server
        .cli(&[
            "run",
            "--lease",
            "30s",
            "job",
            "--shell",
            &pids_program(&file),
        ])
        .spawn()
        .unwrap();
    let pids = started(&file).await;
    assert!(pids.iter().all(|&p| alive(p)));
    signal(runner.id().unwrap() as i32, Signal::SIGKILL);
    within(10, "runner reaped", runner.wait()).await.unwrap();
    let took = all_gone(&pids, Duration::from_secs(1)).await;
    println!("{kind:?}: PROGRAM's group gone {took:?} after the runner was reaped");
}

#[tokio::test]
async fn sigkill_of_the_runner_kills_programs_group_redis() {
    sigkill_of_the_runner_kills_programs_group(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_runner_kills_programs_group_zookeeper() {
    sigkill_of_the_runner_kills_programs_group(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_runner_kills_programs_group_etcd() {
    sigkill_of_the_runner_kills_programs_group(Kind::Etcd).await;
}

/// Point 1, the other way round: SIGKILL to the process between the runner and PROGRAM (the
/// leader of PROGRAM's group) kills PROGRAM's group too, and the runner says so (137).
#[tokio::test]
async fn sigkill_of_programs_supervisor_kills_programs_group() {
    let server = Server::start(Kind::Redis).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let runner = server
        .cli(&["run", "job", "--shell", &pids_program(&file)])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pids = started(&file).await;
    let leader = group_of(pids[0]);
    assert_ne!(leader, pids[0], "PROGRAM is not its group's leader");
    assert_ne!(leader, runner.id().unwrap() as i32);
    signal(leader, Signal::SIGKILL);
    all_gone(&pids, Duration::from_secs(1)).await;
    let out = within(10, "runner exits", runner.wait_with_output())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(128 + 9), "{:?}", text(&out));
    assert!(
        text(&out).1.contains("supervisor was killed"),
        "{:?}",
        text(&out)
    );
}

/// Point 2: an interactive PROGRAM under a terminal reads it (it is the foreground group,
/// not stopped by SIGTTIN), and the runner exits with its status.
#[tokio::test]
async fn an_interactive_program_reads_the_terminal() {
    let server = Server::start(Kind::Redis).await;
    let (seen, code) = on_a_terminal(
        &server,
        "name?",
        "fence\n",
        "got fence",
        &[
            "run",
            "tty-job",
            "--shell",
            "printf 'name?'; read a; echo got $a; exit 3",
        ],
    )
    .await;
    assert!(seen.contains("got fence"), "{seen}");
    assert_eq!(code, 3, "{seen}");
}

/// Point 2: Ctrl-C on the terminal reaches PROGRAM (the foreground group), and the lock is
/// free afterwards.
#[tokio::test]
async fn ctrl_c_on_the_terminal_reaches_program() {
    let server = Server::start(Kind::Redis).await;
    let (seen, code) = on_a_terminal(
        &server,
        "ready",
        "\x03",
        "",
        &[
            "run",
            "tty-job",
            "--shell",
            "echo ready; read a; echo not reached",
        ],
    )
    .await;
    assert_eq!(code, 130, "{seen}");
    assert!(!seen.contains("not reached"), "{seen}");
    let out = server.output(&["run", "-n", "tty-job", "true"]).await;
    assert!(out.status.success(), "{:?}", text(&out));
}

/// Point 3: a mistyped or foreign flag before PROGRAM is a usage error (64), before any
/// server is contacted (the URL's listener sees no connection), and never becomes PROGRAM.
#[tokio::test]
async fn unknown_flags_before_program_are_usage_errors_before_any_contact() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("redis://{}", listener.local_addr().unwrap());
    for args in [
        &["run", "--key", "x", "--wiat", "5m", "--", "echo", "hi"][..],
        &["run", "x", "--wiat", "5m", "--", "echo", "hi"],
        &["run", "x", "--timeout", "10s", "--", "echo", "hi"],
        &["run", "x", "--ttl", "10", "echo", "hi"],
        &["run", "x", "-timeout", "10", "echo", "hi"],
        &["run", "x", "-s", "echo", "hi"],
        &["run", "x", "-x", "echo", "hi"],
        &["run", "--key", "x", "echo", "-n", "hi"],
        &["run", "x"],
        &["run", "x", "--shell", "echo a", "echo b"],
    ] {
        let out = within(10, "usage error", cli_at(&url, args).output())
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {:?}", text(&out));
        assert!(!text(&out).0.contains("hi"), "{args:?}: {:?}", text(&out));
    }
    assert!(listener.accept().is_err(), "a server was contacted");
}

/// Point 3: flock's spellings: `-n` is `--no-wait`, `-w SECONDS` a wait bound; options may
/// come between NAME and PROGRAM; PROGRAM's own options stay PROGRAM's.
#[tokio::test]
async fn flocks_spellings_work() {
    let server = Server::start(Kind::Redis).await;
    let out = server.output(&["run", "x", "-n", "echo", "-n", "hi"]).await;
    assert_eq!(text(&out).0, "hi", "{:?}", text(&out));
    let holder = fencelock::Client::connect(&server.url()).await.unwrap();
    let _guard = holder.lock("x").acquire().await.unwrap();
    let out = server.output(&["run", "-n", "x", "true"]).await;
    assert_eq!(out.status.code(), Some(CONFLICT), "{:?}", text(&out));
    let out = server
        .output(&["run", "-n", "--conflict-exit-code", "9", "x", "true"])
        .await;
    assert_eq!(out.status.code(), Some(9), "{:?}", text(&out));
    let started = std::time::Instant::now();
    let out = server.output(&["run", "-w", "0.3", "x", "true"]).await;
    assert_eq!(out.status.code(), Some(CONFLICT), "{:?}", text(&out));
    assert!(started.elapsed() >= Duration::from_millis(300));
}

/// Point 4 (CLI side): a lock lost before PROGRAM ended is exit 79, never PROGRAM's 0, even
/// when PROGRAM ends before the holder hears of the loss.
async fn a_loss_before_program_ended_is_exit_79(kind: Kind) {
    let server = Server::start(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("started");
    let go = dir.path().join("go");
    let body = format!(
        "echo started > {}; while [ ! -e {} ]; do sleep 0.01; done; exit 0",
        file.display(),
        go.display()
    );
    let runner = server
        .cli(&["run", "--lease", "30s", "ul", "--shell", &body])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&file).await;
    let out = server.output(&["unlock", "--force", "--yes", "ul"]).await;
    assert!(out.status.success(), "{:?}", text(&out));
    std::fs::write(&go, "").unwrap();
    let out = within(20, "runner exits", runner.wait_with_output())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(LOCK_LOST), "{:?}", text(&out));
}

#[tokio::test]
async fn a_loss_before_program_ended_is_exit_79_redis() {
    a_loss_before_program_ended_is_exit_79(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_before_program_ended_is_exit_79_zookeeper() {
    a_loss_before_program_ended_is_exit_79(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_before_program_ended_is_exit_79_etcd() {
    a_loss_before_program_ended_is_exit_79(Kind::Etcd).await;
}

/// Point 4: a forced unlock stops the holder's PROGRAM within a second or two (the lease is
/// 30 s: renewals at lease/3 would take 10 s), with 79. On Redis this needs the library to
/// hear the forced unlock's message (Track R).
async fn a_forced_unlock_stops_program_at_once(kind: Kind) {
    let server = Server::start(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let runner = server
        .cli(&[
            "run",
            "--lease",
            "30s",
            "fu",
            "--shell",
            &pids_program(&file),
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pids = started(&file).await;
    let out = server.output(&["unlock", "--force", "--yes", "fu"]).await;
    assert!(out.status.success(), "{:?}", text(&out));
    let start = std::time::Instant::now();
    let took = all_gone(&pids, Duration::from_secs(3)).await;
    println!("{kind:?}: PROGRAM's group gone {took:?} after `unlock --force` returned");
    let out = within(10, "runner exits", runner.wait_with_output())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(LOCK_LOST), "{:?}", text(&out));
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_forced_unlock_stops_program_at_once_redis() {
    a_forced_unlock_stops_program_at_once(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_unlock_stops_program_at_once_zookeeper() {
    a_forced_unlock_stops_program_at_once(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_unlock_stops_program_at_once_etcd() {
    a_forced_unlock_stops_program_at_once(Kind::Etcd).await;
}

/// Point 2: on loss, an interactive PROGRAM holding the terminal is still stopped (79).
/// ZooKeeper: its holder hears of a forced unlock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_program_is_stopped_on_loss() {
    let server = Server::start(Kind::ZooKeeper).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("started");
    let body = format!(
        "echo started > {}; printf 'name?'; read a; echo got $a",
        file.display()
    );
    let unlock = async {
        wait_for_file(&file).await;
        let out = server
            .output(&["unlock", "--force", "--yes", "tty-job"])
            .await;
        assert!(out.status.success(), "{:?}", text(&out));
    };
    let ((seen, code), ()) = futures_util::future::join(
        on_a_terminal(
            &server,
            "name?",
            "",
            "lost",
            &["run", "tty-job", "--shell", &body],
        ),
        unlock,
    )
    .await;
    assert_eq!(code, LOCK_LOST, "{seen}");
    assert!(!seen.contains("got"), "{seen}");
}

/// Stops the job with Ctrl-Z on a pseudo-terminal, checks that the runner (the job, as a
/// shell sees it) stopped, continues it as `fg` would (SIGCONT), types a line; prints what
/// it saw and the exit status.
const CTRL_Z_DRIVER: &str = r#"
import os, pty, signal, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
seen = b""
def wait_for(what):
    global seen
    deadline = time.time() + 20
    while what not in seen:
        if time.time() > deadline:
            sys.exit("timed out waiting for %r; saw %r" % (what, seen))
        seen += os.read(fd, 1024)
wait_for(b"ready")
os.write(fd, b"\x1a")
deadline = time.time() + 20
while True:
    if time.time() > deadline:
        sys.exit("the runner did not stop; saw %r" % seen)
    p, status = os.waitpid(pid, os.WUNTRACED | os.WNOHANG)
    if p and os.WIFSTOPPED(status):
        break
    time.sleep(0.01)
os.kill(pid, signal.SIGCONT)
os.write(fd, b"fence\n")
wait_for(b"got fence")
_, status = os.waitpid(pid, 0)
print(seen.decode(errors="replace"))
print(os.waitstatus_to_exitcode(status))
"#;

/// Point 2: Ctrl-Z stops PROGRAM and gives the shell its job back (the runner stops); `fg`
/// (SIGCONT to the runner) hands the terminal back to PROGRAM, which reads it.
#[tokio::test]
async fn ctrl_z_stops_the_job_and_fg_continues_it() {
    let server = Server::start(Kind::Redis).await;
    let dir = tempfile::tempdir().unwrap();
    let driver = dir.path().join("drive_ctrl_z.py");
    std::fs::write(&driver, CTRL_Z_DRIVER).unwrap();
    let body = "echo ready; read a; echo got $a";
    let out = within(
        40,
        "the terminal session",
        tokio::process::Command::new("python3")
            .arg(&driver)
            .arg(env!("CARGO_BIN_EXE_fencelock"))
            .args(["run", "tty-job", "--shell", body])
            .env("FENCELOCK_URL", server.url())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("got fence"), "{stdout}");
    assert_eq!(stdout.trim_end().rsplit('\n').next(), Some("0"), "{stdout}");
}
