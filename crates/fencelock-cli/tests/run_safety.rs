//! `fencelock run` is at least as safe as flock(1) (issue 23, points 1-4): PROGRAM never
//! outlives the runner, an interactive PROGRAM gets the terminal, a mistyped flag is a usage
//! error before anything is contacted, and a lock lost before PROGRAM ended is exit 79.
//! Also the review of that work (its points 1-7). Real servers, real processes, and a
//! pseudo-terminal with a job-control shell where a terminal matters.

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
    an_interactive_program_reads_the_terminal_under(&server, &["run", "tty-job"]).await;
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
        // -s and -x take the read and write sides; together, or with --permits, they make
        // no sense (tests/family.rs has the other combinations).
        &["run", "x", "-s", "-x", "echo", "hi"],
        &["run", "x", "-x", "--permits", "2", "echo", "hi"],
        &["run", "x", "-s", "--also", "y", "echo", "hi"],
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

/// `fencelock run --lease LEASE ul` of a PROGRAM that waits for the file `go` in `dir` to
/// exit 0; returns the runner (stderr piped), once PROGRAM started, PROGRAM's pid and `go`.
async fn waiting_program(
    server: &Server,
    lease: &str,
    dir: &std::path::Path,
) -> (tokio::process::Child, i32, std::path::PathBuf) {
    let (file, go) = (dir.join("started"), dir.join("go"));
    let body = format!(
        "echo $$ > {}; while [ ! -e {} ]; do sleep 0.01; done; exit 0",
        file.display(),
        go.display()
    );
    let runner = server
        .cli(&["run", "--lease", lease, "ul", "--shell", &body])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let program = wait_for_file(&file).await.trim().parse().unwrap();
    (runner, program, go)
}

/// Point 4 (CLI side): a lock lost before PROGRAM ended is exit 79, never PROGRAM's 0, even
/// when the holder hears of the loss only at the release: the key is deleted behind its
/// back (no message; the next renewal is 10 s away) while PROGRAM waits.
#[tokio::test]
async fn a_silent_loss_before_program_ended_is_exit_79() {
    let server = Server::start(Kind::Redis).await;
    let dir = tempfile::tempdir().unwrap();
    let (runner, _, go) = waiting_program(&server, "30s", dir.path()).await;
    let del = tokio::process::Command::new("redis-cli")
        .args(["-u", &server.url(), "DEL", "fencelock:{ul}"])
        .output();
    let del = within(10, "redis-cli", del).await.unwrap();
    assert_eq!(text(&del).0.trim(), "1", "{:?}", text(&del));
    std::fs::write(&go, "").unwrap();
    let out = within(20, "runner exits", runner.wait_with_output())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(LOCK_LOST), "{:?}", text(&out));
    assert!(
        text(&out).1.contains("lost before PROGRAM ended"),
        "{:?}",
        text(&out)
    );
}

/// Review point 2: a lock known lost when PROGRAM ended is 79 also when the release then
/// fails. The runner is stopped while PROGRAM ends and its lease runs out (another holder
/// takes the lock), the server is stopped, and the runner continued: it finds PROGRAM ended
/// and the lock lost, and cannot reach the server.
#[tokio::test]
async fn a_known_loss_is_exit_79_when_the_release_fails() {
    let server = Server::start(Kind::Redis).await;
    let dir = tempfile::tempdir().unwrap();
    let (runner, program, go) = waiting_program(&server, "1s", dir.path()).await;
    signal(runner.id().unwrap() as i32, Signal::SIGSTOP);
    std::fs::write(&go, "").unwrap();
    all_gone(&[program], Duration::from_secs(10)).await;
    let other = server.output(&["run", "-w", "20", "ul", "true"]).await;
    assert!(other.status.success(), "{:?}", text(&other));
    tokio::task::spawn_blocking(move || drop(server))
        .await
        .unwrap();
    signal(runner.id().unwrap() as i32, Signal::SIGCONT);
    let out = within(60, "runner exits", runner.wait_with_output())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(LOCK_LOST), "{:?}", text(&out));
}

/// Review point 1: when PROGRAM ends, what it left in its group is gone before the lock is
/// free (flock keeps the lock while it runs; `fencelock run` kills it).
#[tokio::test]
async fn what_program_leaves_in_its_group_dies_before_the_lock_is_free() {
    let server = Server::start(Kind::Redis).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    // The sleep keeps no pipe of the test's open: only the lock ties it to the runner.
    let body = format!(
        "sleep 30 >/dev/null 2>&1 & echo $! > {}; exit 0",
        file.display()
    );
    let mut runner = server
        .cli(&["run", "job1", "--shell", &body])
        .spawn()
        .unwrap();
    let pids = started(&file).await;
    let other = server.cli(&["run", "-w", "20", "job1", "true"]).output();
    let (status, other) = within(30, "both runners exit", async {
        futures_util::future::join(runner.wait(), other).await
    })
    .await;
    assert_eq!(status.unwrap().code(), Some(0));
    let other = other.unwrap();
    assert!(other.status.success(), "{:?}", text(&other));
    all_gone(&pids, Duration::from_secs(1)).await;
}

/// Review point 1, after a loss: a group member that ignores SIGTERM does not outlive the
/// runner's 79, although PROGRAM ended within the grace.
#[tokio::test]
async fn a_member_ignoring_sigterm_does_not_outlive_a_loss() {
    let server = Server::start(Kind::Redis).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let body = format!(
        "(trap '' TERM; exec sleep 30 >/dev/null 2>&1) & echo $! > {}; wait",
        file.display()
    );
    let mut runner = server
        .cli(&["run", "--kill-grace", "30s", "fu", "--shell", &body])
        .spawn()
        .unwrap();
    let pids = started(&file).await;
    let out = server.output(&["unlock", "--force", "--yes", "fu"]).await;
    assert!(out.status.success(), "{:?}", text(&out));
    let status = within(20, "runner exits", runner.wait()).await.unwrap();
    assert_eq!(status.code(), Some(LOCK_LOST));
    all_gone(&pids, Duration::from_secs(1)).await;
}

/// Waits until process `pid` is stopped.
async fn stopped(pid: i32) {
    within(10, "PROGRAM stops", async {
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            if stat
                .rsplit_once(')')
                .unwrap()
                .1
                .trim_start()
                .starts_with('T')
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// Review point 4: a stopped PROGRAM acts on a SIGTERM passed on to it (the runner exits
/// with 143 at once), and on the loss's SIGTERM (79 well before a 60 s grace).
#[tokio::test]
async fn a_stopped_program_acts_on_sigterm_and_on_a_loss() {
    let server = Server::start(Kind::Redis).await;
    let dir = tempfile::tempdir().unwrap();
    for (i, loss) in [false, true].into_iter().enumerate() {
        let file = dir.path().join(format!("pid{i}"));
        let body = format!(
            "echo $$ > {}; kill -STOP $$; echo continued",
            file.display()
        );
        let runner = server
            .cli(&["run", "--kill-grace", "60s", "st", "--shell", &body])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let program: i32 = wait_for_file(&file).await.trim().parse().unwrap();
        stopped(program).await;
        if loss {
            let out = server.output(&["unlock", "--force", "--yes", "st"]).await;
            assert!(out.status.success(), "{:?}", text(&out));
        } else {
            signal(runner.id().unwrap() as i32, Signal::SIGTERM);
        }
        let out = within(15, "runner exits", runner.wait_with_output())
            .await
            .unwrap();
        let code = if loss { LOCK_LOST } else { 128 + 15 };
        assert_eq!(out.status.code(), Some(code), "{:?}", text(&out));
        assert!(!text(&out).0.contains("continued"), "{:?}", text(&out));
    }
}

/// Review point 6: with stdin a pipe (`cmd | fencelock run …`), PROGRAM still gets the
/// controlling terminal and reads it (`/dev/tty`), instead of stopping on SIGTTIN.
#[tokio::test]
async fn program_gets_the_terminal_when_stdin_is_a_pipe() {
    let server = Server::start(Kind::Redis).await;
    let line = format!(
        "true | exec {} run tty-job --shell 'printf name?; read a < /dev/tty; echo got $a'",
        env!("CARGO_BIN_EXE_fencelock")
    );
    let (seen, code) = on_a_terminal_argv(
        &server,
        "name?",
        "fence\n",
        "got fence",
        &["/bin/sh", "-c", &line],
    )
    .await;
    assert!(seen.contains("got fence"), "{seen}");
    assert_eq!(code, 0, "{seen}");
}

/// Review point 7: the supervisor refuses a --watch-fd that is not a pipe (0 would silently
/// turn the runner-death watch off), before it starts PROGRAM.
#[tokio::test]
async fn the_supervisor_refuses_a_watch_fd_that_is_not_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ran");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fencelock"))
        .args(["supervise", "--watch-fd", "0", "--status-fd", "1", "--"])
        .args(["touch", file.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .output();
    let out = within(10, "supervisor exits", out).await.unwrap();
    assert_eq!(out.status.code(), Some(126), "{:?}", text(&out));
    assert!(
        text(&out).1.contains("--watch-fd 0: not a pipe"),
        "{:?}",
        text(&out)
    );
    assert!(!file.exists());
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
    let took = all_gone(&pids, Duration::from_secs(3)).await;
    println!("{kind:?}: PROGRAM's group gone {took:?} after `unlock --force` returned");
    let out = within(10, "runner exits", runner.wait_with_output())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(LOCK_LOST), "{:?}", text(&out));
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

/// A job-control shell on a pseudo-terminal, as far as these tests need one. The pty's
/// child is the shell: it runs `fencelock ARGS` as a job (its own group, in the foreground),
/// and reports on the terminal what it sees. The driver (outside) waits for PROGRAM's
/// "ready", types Ctrl-Z; the shell waits (blocking) for the job to stop, takes the terminal
/// back, then per MODE: `fg` continues the job in the foreground; `bg` continues it in the
/// background, waits for it to stop again (PROGRAM reads the terminal) and says whose the
/// terminal is, then `fg`; `late` says "stopped" on the driver's stdout and waits for a line
/// on its stdin, then types "go" (the shell's cue for `fg`) and "fence" at once, so that
/// PROGRAM has its input the moment it is continued. Otherwise the driver types "fence"
/// after `fg`. Every wait is bounded by the caller's (the driver is killed with the test) and
/// by an alarm in the shell.
const JOB_DRIVER: &str = r#"
import os, pty, signal, sys
mode = sys.argv[1]
pid, fd = pty.fork()
if pid == 0:
    signal.alarm(30)
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    job = os.fork()
    if job == 0:
        os.setpgid(0, 0)
        os.tcsetpgrp(0, os.getpgrp())
        signal.signal(signal.SIGTTOU, signal.SIG_DFL)
        os.execv(sys.argv[2], sys.argv[2:])
    try:
        os.setpgid(job, job)
    except OSError:
        pass
    os.tcsetpgrp(0, job)
    def say(what):
        os.write(1, (what + "\n").encode())
    def wait_job(flags):
        _, status = os.waitpid(job, flags)
        if not os.WIFSTOPPED(status):
            say("shell: exit %d" % os.waitstatus_to_exitcode(status))
            os._exit(0)
    wait_job(os.WUNTRACED)
    os.tcsetpgrp(0, os.getpgrp())
    say("shell: stopped")
    if mode == "bg":
        os.killpg(job, signal.SIGCONT)
        wait_job(os.WUNTRACED)
        mine = os.tcgetpgrp(0) == os.getpgrp()
        say("shell: stopped again, terminal %s" % ("mine" if mine else "taken"))
    if mode == "late":
        os.read(0, 1024)
    os.tcsetpgrp(0, job)
    os.killpg(job, signal.SIGCONT)
    say("shell: continued")
    wait_job(0)
seen = b""
def wait_for(what):
    global seen
    while what not in seen:
        try:
            seen += os.read(fd, 1024)
        except OSError:
            sys.exit("terminal closed waiting for %r; saw %r" % (what, seen))
wait_for(b"ready")
os.write(fd, b"\x1a")
wait_for(b"shell: stopped")
if mode == "late":
    print("stopped", flush=True)
    sys.stdin.readline()
    os.write(fd, b"go\nfence\n")
wait_for(b"shell: continued")
if mode != "late":
    os.write(fd, b"fence\n")
wait_for(b"shell: exit ")
while True:
    try:
        chunk = os.read(fd, 1024)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
os.waitpid(pid, 0)
print(seen.decode(errors="replace"))
"#;

/// `fencelock ARGS` as a job of [`JOB_DRIVER`]'s shell in MODE, the driver's stdin piped.
fn job_on_a_terminal(
    server: &Server,
    dir: &std::path::Path,
    mode: &str,
    args: &[&str],
) -> tokio::process::Child {
    let driver = dir.join("drive_job.py");
    std::fs::write(&driver, JOB_DRIVER).unwrap();
    tokio::process::Command::new("python3")
        .arg(&driver)
        .arg(mode)
        .arg(env!("CARGO_BIN_EXE_fencelock"))
        .args(args)
        .env("FENCELOCK_URL", server.url())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// The job's exit status as the shell reported it.
fn job_exit(seen: &str) -> Option<i32> {
    let rest = seen.split("shell: exit ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

const TTY_BODY: &str = "echo ready; read a; echo got $a";

/// Point 2: Ctrl-Z stops PROGRAM and gives the shell its job back (the runner stops); `fg`
/// hands the terminal back to PROGRAM, which reads it.
#[tokio::test]
async fn ctrl_z_stops_the_job_and_fg_continues_it() {
    let server = Server::start(Kind::Redis).await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["run", "tty-job", "--shell", TTY_BODY];
    let driver = job_on_a_terminal(&server, dir.path(), "fg", &args);
    let out = within(40, "the terminal session", driver.wait_with_output())
        .await
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("got fence"), "{stdout}");
    assert_eq!(job_exit(&stdout), Some(0), "{stdout}");
}

/// Review point 5: `bg` after Ctrl-Z continues PROGRAM in the background, leaving the
/// terminal to the shell: PROGRAM reading it stops the job again (SIGTTIN), and the shell
/// still has the terminal; `fg` then gives it to PROGRAM.
#[tokio::test]
async fn bg_leaves_the_terminal_to_the_shell() {
    let server = Server::start(Kind::Redis).await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["run", "tty-job", "--shell", TTY_BODY];
    let driver = job_on_a_terminal(&server, dir.path(), "bg", &args);
    let out = within(40, "the terminal session", driver.wait_with_output())
        .await
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("stopped again, terminal mine"), "{stdout}");
    assert!(stdout.contains("got fence"), "{stdout}");
    assert_eq!(job_exit(&stdout), Some(0), "{stdout}");
}

/// Review point 3: a job stopped (Ctrl-Z) past its lease, while another holder took the lock,
/// is not continued by `fg`: PROGRAM, its input waiting, never reads or prints again, and the
/// runner exits 79 at once (not after the grace: point 4).
async fn fg_after_the_lease_ran_out_stops_program(kind: Kind) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let server = Server::start(kind).await;
    let dir = tempfile::tempdir().unwrap();
    // A long grace: PROGRAM, stopped, must be told to stop in a way it acts on at once.
    let args = [
        "run",
        "--lease",
        "1s",
        "--kill-grace",
        "60s",
        "tty-job",
        "--shell",
        TTY_BODY,
    ];
    let mut driver = job_on_a_terminal(&server, dir.path(), "late", &args);
    let mut stdout = tokio::io::BufReader::new(driver.stdout.take().unwrap()).lines();
    let line = within(30, "the job stops", stdout.next_line()).await;
    assert_eq!(line.unwrap().as_deref(), Some("stopped"));
    // Another holder gets the lock once the stopped job's lease ran out.
    let other = server
        .output(&["run", "-w", "20", "tty-job", "echo", "other"])
        .await;
    assert_eq!(text(&other).0, "other\n", "{:?}", text(&other));
    let mut stdin = driver.stdin.take().unwrap();
    stdin.write_all(b"go\n").await.unwrap();
    let mut rest = String::new();
    while let Some(line) = within(30, "the session ends", stdout.next_line())
        .await
        .unwrap()
    {
        rest.push_str(&line);
        rest.push('\n');
    }
    let out = within(10, "the driver exits", driver.wait_with_output())
        .await
        .unwrap();
    assert!(out.status.success(), "{rest}\n{}", text(&out).1);
    assert!(!rest.contains("got"), "{rest}");
    assert_eq!(job_exit(&rest), Some(LOCK_LOST), "{rest}");
}

#[tokio::test]
async fn fg_after_the_lease_ran_out_stops_program_redis() {
    fg_after_the_lease_ran_out_stops_program(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fg_after_the_lease_ran_out_stops_program_zookeeper() {
    fg_after_the_lease_ran_out_stops_program(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fg_after_the_lease_ran_out_stops_program_etcd() {
    fg_after_the_lease_ran_out_stops_program(Kind::Etcd).await;
}
