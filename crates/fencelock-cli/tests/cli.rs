//! The real `fencelock` binary against real servers.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use fencelock::{Client, LockOptions};
use fencelock_testkit::RedisServer;
use nix::sys::signal::Signal;
use tokio::process::Command;

const CONFLICT: i32 = 75;
const LOCK_LOST: i32 = 79;
const USAGE: i32 = 64;
const CONNECTION: i32 = 69;

fn fencelock(server: &RedisServer) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fencelock"));
    c.env_remove("FENCELOCK_PASSWORD")
        .env("FENCELOCK_URL", server.url())
        .kill_on_drop(true);
    c
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn within<T>(secs: u64, what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

async fn wait_for_file(path: &Path) -> String {
    within(10, "file written", async {
        loop {
            if let Ok(s) = std::fs::read_to_string(path) {
                if !s.is_empty() {
                    return s;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// Holds `name` with a 30 s lease (no renewal), as "someone else" would.
async fn hold(server: &RedisServer, name: &str) -> (Client, fencelock::Guard) {
    let client = Client::connect(&server.url()).await.unwrap();
    let opts = LockOptions::default().lease(Duration::from_secs(30));
    let guard = client
        .lock(name)
        .with_options(opts)
        .acquire()
        .await
        .unwrap();
    (client, guard)
}

/// Waits until a waiting `fencelock run` has subscribed to the release notifications of
/// lock `name` (every client also subscribes a channel of its own on connect: counting
/// SUBSCRIBE calls would count the holder's).
async fn waiter_subscribed(server: &RedisServer, name: &str) {
    let channel = format!("fencelock:{{{name}}}:released");
    within(10, "waiter subscribed", async {
        loop {
            let reply = server.command(&["PUBSUB", "NUMSUB", &channel]).unwrap();
            if let fencelock_testkit::Reply::Array(Some(items)) = reply {
                if matches!(items.get(1), Some(fencelock_testkit::Reply::Int(n)) if *n > 0) {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// Runs `fencelock ARGS` to completion.
async fn output(server: &RedisServer, args: &[&str]) -> Output {
    fencelock(server).args(args).output().await.unwrap()
}

/// Sends `signal` to a running `fencelock` and waits (bounded) for it to exit.
async fn signal_and_wait(child: tokio::process::Child, signal: Signal) -> Output {
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, signal).unwrap();
    within(10, "fencelock exits", child.wait_with_output())
        .await
        .unwrap()
}

/// Checks an enter/exit log: no "enter" while another process is inside.
fn overlaps(log: &str) -> usize {
    let mut inside: Option<&str> = None;
    let mut overlaps = 0;
    for line in log.lines() {
        match line.split_once(' ') {
            Some(("enter", id)) => {
                if inside.is_some() {
                    overlaps += 1;
                }
                inside = Some(id);
            }
            Some(("exit", _)) => inside = None,
            _ => panic!("bad line {line:?}"),
        }
    }
    overlaps
}

#[tokio::test]
async fn two_runs_never_overlap() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let body = format!(
        "echo \"enter $$\" >> {0}; sleep 0.02; echo \"exit $$\" >> {0}",
        log.display()
    );
    let run_loop = |locked: bool| {
        let body = body.clone();
        let mut cmd = fencelock(&server);
        async move {
            for _ in 0..8 {
                let status = if locked {
                    cmd.args(["run", "--key", "cron", "--shell", "--"])
                        .arg(&body);
                    let s = cmd.status().await.unwrap();
                    cmd = fencelock_cmd_like(&cmd);
                    s
                } else {
                    Command::new("sh")
                        .arg("-c")
                        .arg(&body)
                        .status()
                        .await
                        .unwrap()
                };
                assert!(status.success());
            }
        }
    };
    within(
        60,
        "locked runs",
        futures_util::future::join(run_loop(true), run_loop(true)),
    )
    .await;
    let locked_log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(locked_log.lines().count(), 32);
    assert_eq!(overlaps(&locked_log), 0, "{locked_log}");

    // Negative control: the same runs without fencelock do overlap.
    std::fs::remove_file(&log).unwrap();
    within(
        60,
        "unlocked runs",
        futures_util::future::join(run_loop(false), run_loop(false)),
    )
    .await;
    assert!(overlaps(&std::fs::read_to_string(&log).unwrap()) > 0);
}

/// A fresh command with the same program and environment as `cmd` (a `Command` is spent once
/// its arguments are set).
fn fencelock_cmd_like(cmd: &Command) -> Command {
    let mut c = Command::new(cmd.as_std().get_program());
    for (k, v) in cmd.as_std().get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.kill_on_drop(true);
    c
}

#[tokio::test]
async fn no_wait_and_wait_timeout_exit_with_the_conflict_code() {
    let server = RedisServer::start().unwrap();
    let (_client, guard) = hold(&server, "busy").await;

    let out = output(
        &server,
        &["run", "--key", "busy", "--no-wait", "--", "true"],
    )
    .await;
    assert_eq!(out.status.code(), Some(CONFLICT), "{:?}", text(&out));
    assert!(text(&out).1.contains("held by someone else"));

    let out = output(
        &server,
        &[
            "run",
            "--key",
            "busy",
            "--no-wait",
            "--conflict-exit-code",
            "3",
            "--",
            "true",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(3));

    let started = Instant::now();
    let out = output(
        &server,
        &["run", "--key", "busy", "--wait", "1s", "--", "true"],
    )
    .await;
    assert_eq!(out.status.code(), Some(CONFLICT), "{:?}", text(&out));
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(text(&out).1.contains("after 1s"), "{:?}", text(&out));
    guard.release().await.unwrap();

    // Free again: PROGRAM's own status comes through.
    let out = output(
        &server,
        &[
            "run",
            "--key",
            "busy",
            "--no-wait",
            "--",
            "sh",
            "-c",
            "exit 42",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(42));
}

#[tokio::test]
async fn program_gets_key_and_strictly_increasing_tokens() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    for _ in 0..5 {
        let body = format!(
            "test \"$FENCELOCK_KEY\" = tokens && echo \"$FENCELOCK_TOKEN\" >> {}",
            file.display()
        );
        let status = fencelock(&server)
            .args(["run", "--key", "tokens", "--shell", "--"])
            .arg(body)
            .status()
            .await
            .unwrap();
        assert!(status.success());
    }
    let tokens: Vec<u64> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(tokens.len(), 5);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

#[tokio::test]
async fn deleting_the_key_stops_the_program_with_the_lock_lost_code() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let body = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    let child = fencelock(&server)
        .args([
            "run",
            "--key",
            "victim",
            "--lease",
            "1s",
            "--kill-grace",
            "1s",
            "--shell",
            "--",
        ])
        .arg(body)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid: i32 = wait_for_file(&pidfile).await.trim().parse().unwrap();
    server.command(&["DEL", "fencelock:{victim}"]).unwrap();
    let out = within(10, "fencelock exits", child.wait_with_output())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(LOCK_LOST), "{:?}", text(&out));
    assert!(text(&out).1.contains("lost"), "{:?}", text(&out));
    // PROGRAM is gone.
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
    assert!(!alive, "PROGRAM {pid} still runs");
}

#[tokio::test]
async fn sigterm_reaches_the_program_and_the_lock_is_released() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ready, got) = (dir.path().join("ready"), dir.path().join("got"));
    let body = format!(
        "trap 'echo TERM > {}; exit 7' TERM; echo up > {}; while true; do sleep 0.05; done",
        got.display(),
        ready.display()
    );
    let child = fencelock(&server)
        .args(["run", "--key", "signalled", "--shell", "--"])
        .arg(body)
        .spawn()
        .unwrap();
    wait_for_file(&ready).await;
    let out = signal_and_wait(child, Signal::SIGTERM).await;
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), "TERM");
    let client = Client::connect(&server.url()).await.unwrap();
    assert!(!client.status("signalled").await.unwrap().held);
}

#[tokio::test]
async fn a_signal_while_waiting_cancels_cleanly() {
    let server = RedisServer::start().unwrap();
    let (client, guard) = hold(&server, "queue").await;
    let child = fencelock(&server)
        .args(["run", "--key", "queue", "--", "true"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    waiter_subscribed(&server, "queue").await;
    let out = signal_and_wait(child, Signal::SIGINT).await;
    assert_eq!(out.status.code(), Some(130), "{:?}", text(&out));
    // Only the original holder is left.
    let status = client.status("queue").await.unwrap();
    assert_eq!(status.owners, vec![(guard.owner().to_owned(), 1)]);
    guard.release().await.unwrap();
    assert!(!client.status("queue").await.unwrap().held);
}

#[tokio::test]
async fn status_json_parses() {
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let guard = client.lock("report").acquire().await.unwrap();
    let out = output(&server, &["status", "report", "--json"]).await;
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["name"], "report");
    assert_eq!(v["held"], true);
    assert_eq!(v["owners"][0]["owner"], guard.owner());
    assert_eq!(v["owners"][0]["hold_count"], 1);
    assert_eq!(v["fencing_token"], guard.fencing_token());
    assert!(v["remaining_lease_ms"].as_u64().unwrap() > 20_000);
    let token = guard.fencing_token();
    guard.release().await.unwrap();

    let out = output(&server, &["status", "report", "--json"]).await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["held"], false);
    assert_eq!(v["last_token"], token);
    let out = output(&server, &["status", "report"]).await;
    assert!(text(&out).0.contains("is free"));
}

#[tokio::test]
async fn unlock_force_removes_a_stale_lock_and_wakes_a_waiter() {
    let server = RedisServer::start().unwrap();
    let (_client, stale) = hold(&server, "stuck").await;
    let waiter = fencelock(&server)
        .args(["run", "--key", "stuck", "--", "true"])
        .spawn()
        .unwrap();
    waiter_subscribed(&server, "stuck").await;

    // Without --force, or without --yes and no terminal to ask on: refused.
    let out = output(&server, &["unlock", "stuck"]).await;
    assert_eq!(out.status.code(), Some(USAGE));
    let out = fencelock(&server)
        .args(["unlock", "--force", "stuck"])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(USAGE), "{:?}", text(&out));
    assert!(text(&out).1.contains("--yes"));

    let started = Instant::now();
    let out = output(&server, &["unlock", "--force", "--yes", "stuck"]).await;
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(text(&out).0.contains(stale.owner()), "{:?}", text(&out));
    // The waiter ran long before the 30 s lease would have ended.
    let status = within(10, "waiter ran", waiter.wait_with_output())
        .await
        .unwrap();
    assert!(status.status.success());
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn bad_flags_and_urls_give_usage_and_configuration_errors() {
    let server = RedisServer::start().unwrap();
    let cases: [(&[&str], i32, &str); 8] = [
        (&["run", "--", "true"], USAGE, "missing PROGRAM"),
        (&["run", "--key", "k"], USAGE, "PROGRAM"),
        (
            &["run", "--key", "k", "--wait", "soon", "--", "true"],
            USAGE,
            "examples",
        ),
        (
            &[
                "run",
                "--key",
                "k",
                "--wait",
                "1s",
                "--no-wait",
                "--",
                "true",
            ],
            USAGE,
            "cannot be used",
        ),
        (
            &["run", "--key", "k", "--lease", "5ms", "--", "true"],
            USAGE,
            "lease",
        ),
        (&["run", "--key", "a{b}", "--", "true"], USAGE, "hash tag"),
        (&["frobnicate"], USAGE, "unrecognized"),
        (
            &["demo", "--backend", "etcd2"],
            USAGE,
            "possible values: redis, zookeeper",
        ),
    ];
    for (args, code, message) in cases {
        let out = fencelock(&server).args(args).output().await.unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {:?}", text(&out));
        assert!(text(&out).1.contains(message), "{args:?}: {:?}", text(&out));
    }
    // A URL fencelock cannot use, and a server that is not there: configuration/connection.
    let port = fencelock_testkit::free_port().unwrap();
    for url in [
        "http://:hunter2@127.0.0.1:1".to_owned(),
        format!("redis://:hunter2@127.0.0.1:{port}"),
    ] {
        let out = output(&server, &["run", "--url", &url, "--key", "k", "--", "true"]).await;
        assert_eq!(
            out.status.code(),
            Some(CONNECTION),
            "{url}: {:?}",
            text(&out)
        );
        let (_, err) = text(&out);
        assert!(!err.contains("hunter2"), "password printed: {err}");
        assert!(err.contains("fencelock:"), "{err}");
    }
    // A program that does not exist.
    let out = output(
        &server,
        &["run", "--key", "k", "--", "/nonexistent/program"],
    )
    .await;
    assert_eq!(out.status.code(), Some(127));
    // The exit codes are documented in --help.
    let out = output(&server, &["run", "--help"]).await;
    assert!(out.status.success());
    assert!(text(&out).0.contains("EXIT STATUS"));
}

#[tokio::test]
async fn the_password_can_come_from_the_environment() {
    let server = RedisServer::builder()
        .config("requirepass", "s3cret")
        .start()
        .unwrap();
    let out = fencelock(&server)
        .env("FENCELOCK_PASSWORD", "s3cret")
        .args(["run", "--key", "k", "--", "true"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let out = fencelock(&server)
        .env("FENCELOCK_PASSWORD", "wrong-one")
        .args(["run", "--key", "k", "--", "true"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(CONNECTION), "{:?}", text(&out));
    assert!(!text(&out).1.contains("wrong-one"));
}

#[tokio::test]
async fn the_demo_reports_no_violations() {
    let server = RedisServer::start().unwrap(); // only for the environment; the demo starts its own
    let out = within(90, "demo", fencelock(&server).arg("demo").output())
        .await
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("violations: 0"), "{stdout}");
    assert!(stdout.contains(stale_writes_rejected(&stdout)), "{stdout}");
    assert!(!stdout.contains('\x1b'), "no terminal codes when not a TTY");
}

/// The summary's count of stale writes: the frozen holder's (scene 2), and the frozen
/// leader's (scene 4, an active/standby pair under `fencelock elect`), which the demo skips
/// where the service has no elections in this build. Checks scene 4's outcome.
fn stale_writes_rejected(stdout: &str) -> &'static str {
    if stdout.contains("4. (no elections on") {
        return "stale writes rejected: 1";
    }
    for outcome in [
        "4. an active/standby pair under `fencelock elect --again`",
        "the standby led and wrote with its term",
        "late write was rejected (older term)",
    ] {
        assert!(stdout.contains(outcome), "no {outcome:?} in:\n{stdout}");
    }
    "stale writes rejected: 2"
}

/// The demo with its lock on a throwaway ZooKeeper (the record stays on Redis): the frozen
/// holder's session expires, the lock passes on, and its late write is rejected by its token.
#[tokio::test]
async fn the_demo_on_zk_rejects_the_late_write() {
    let server = RedisServer::start().unwrap(); // only for the environment; the demo starts its own
    let demo = fencelock(&server)
        .args(["demo", "--backend", "zookeeper"])
        .output();
    let out = within(90, "demo on ZooKeeper", demo).await.unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for outcome in [
        "the lock lives on ZooKeeper at zk://127.0.0.1:",
        "overlapping holders: 0",
        "a 2 s ZooKeeper session",
        "expired its session",
        "late write was rejected (stale fencing token)",
        "exited 79",
        "tokens in order: yes",
        stale_writes_rejected(&stdout),
        "violations: 0",
    ] {
        assert!(stdout.contains(outcome), "no {outcome:?} in:\n{stdout}");
    }
    // The session is the lease on ZooKeeper: the demo's own words say so.
    assert!(!stdout.contains("lease ran out"), "{stdout}");
    assert!(!stdout.contains("lease expired"), "{stdout}");
}

#[tokio::test]
async fn the_demo_runs_on_etcd() {
    let server = RedisServer::start().unwrap(); // only for the environment; the demo starts its own
    let demo = fencelock(&server)
        .args(["demo", "--backend", "etcd"])
        .output();
    let out = within(90, "demo on etcd", demo).await.unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("etcd://"), "{stdout}");
    assert!(stdout.contains("violations: 0"), "{stdout}");
    assert!(stdout.contains(stale_writes_rejected(&stdout)), "{stdout}");
}

#[tokio::test]
async fn several_urls_mean_redlock() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start().unwrap()).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let mut args: Vec<&str> = vec!["run"];
    for url in &urls {
        args.extend(["--url", url.as_str()]);
    }
    args.extend(["--key", "quorum", "--shell", "--", "echo $FENCELOCK_TOKEN"]);
    let out = output(&servers[0], &args).await;
    assert!(out.status.success(), "{:?}", text(&out));
    let first: u64 = text(&out).0.trim().parse().unwrap();
    // The release reached every server before `fencelock` exited, not only a majority.
    for server in &servers {
        let left = server.command(&["EXISTS", "fencelock:{quorum}"]).unwrap();
        assert_eq!(left.int(), Some(0), "lock left on {}", server.port());
    }

    // One server down: a majority is left.
    servers[0].kill();
    let out = output(&servers[1], &args).await;
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(text(&out).0.trim().parse::<u64>().unwrap() > first);

    // status over the majority; an even count is a configuration error, as other URL errors.
    let mut status: Vec<&str> = vec!["status", "quorum", "--json"];
    for url in &urls[1..] {
        status.extend(["--url", url.as_str()]);
    }
    let out = output(&servers[1], &status).await;
    assert_eq!(out.status.code(), Some(CONNECTION), "{:?}", text(&out));
    assert!(text(&out).1.contains("odd number"));
}

/// Waits until the wait queue of `name` holds `n` places.
async fn queued(server: &RedisServer, name: &str, n: i64) {
    let key = format!("fencelock:{{{name}}}:queue");
    within(10, "waiters queued", async {
        while server.command(&["LLEN", &key]).ok().and_then(|r| r.int()) != Some(n) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// `fencelock status` lists the waiters in arrival order with the age of each place; a
/// waiter killed while waiting keeps its place, which is shown as expired once its window
/// (here 2 s: `--lease 2s`) has run out.
#[tokio::test]
async fn status_shows_the_waiters_and_a_dead_ones_expired_place() {
    let server = RedisServer::start().unwrap();
    let (client, guard) = hold(&server, "busy").await;
    let out = output(&server, &["status", "busy"]).await;
    assert!(
        text(&out).0.contains("\n  waiters:         none\n"),
        "{:?}",
        text(&out)
    );
    let doomed = fencelock(&server)
        .args(["run", "--key", "busy", "--lease", "2s", "--", "true"])
        .spawn()
        .unwrap();
    queued(&server, "busy", 1).await;
    // A live waiter behind it (a 5 s place, renewed) keeps the queue keys alive.
    let live = client.lock("busy").with_owner("live-waiter");
    let task = tokio::spawn(async move { live.acquire().await.unwrap() });
    queued(&server, "busy", 2).await;

    let out = output(&server, &["status", "busy", "--json"]).await;
    assert!(out.status.success(), "{:?}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let waiters = v["waiters"].as_array().unwrap();
    assert_eq!(waiters.len(), 2, "{v}");
    let dead = waiters[0]["owner"].as_str().unwrap().to_owned();
    assert_eq!(waiters[1]["owner"], "live-waiter");
    assert_eq!(waiters[0]["window_ms"], 2000);
    assert_eq!(waiters[1]["window_ms"], 5000);
    for w in waiters {
        assert_eq!(w["expired"], false, "{v}");
        assert_eq!(w["unreadable"], serde_json::Value::Null, "{v}");
        let (age, window) = (w["age_ms"].as_u64(), w["window_ms"].as_u64());
        assert!(age.unwrap() < window.unwrap(), "{v}");
        assert!(w["remaining_ms"].as_u64().unwrap() > 0, "{v}");
    }
    let out = output(&server, &["status", "busy"]).await;
    let stdout = text(&out).0;
    assert!(
        stdout.contains("  waiters:         2 in arrival order\n"),
        "{stdout}"
    );
    let first = format!("    1. {dead}  age ");
    assert!(stdout.contains(&first), "{stdout}");
    assert!(stdout.contains(", valid for "), "{stdout}");
    assert!(stdout.contains("    2. live-waiter"), "{stdout}");

    // Killed while waiting: it cannot give its place up.
    signal_and_wait(doomed, Signal::SIGKILL).await;
    within(10, "the dead waiter's place expired", async {
        loop {
            let out = output(&server, &["status", "busy", "--json"]).await;
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            if v["waiters"][0]["expired"] == true {
                assert_eq!(v["waiters"][0]["owner"].as_str(), Some(dead.as_str()));
                assert_eq!(v["waiters"][0]["remaining_ms"], 0);
                assert_eq!(v["waiters"][1]["expired"], false, "{v}");
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let out = output(&server, &["status", "busy"]).await;
    let stdout = text(&out).0;
    assert!(
        stdout.contains("  waiters:         2 in arrival order (1 expired)\n"),
        "{stdout}"
    );
    let line = stdout.lines().find(|l| l.contains(&dead)).unwrap();
    assert!(
        line.contains(", expired ") && line.ends_with(" ago"),
        "{stdout}"
    );

    // The release skips the dead place and hands the lock to the live waiter.
    guard.release().await.unwrap();
    let next = within(10, "the live waiter is served", task).await;
    let next = next.unwrap();
    assert_eq!(next.owner(), "live-waiter");
    next.release().await.unwrap();
}

#[tokio::test]
async fn huge_durations_are_usage_errors() {
    let server = RedisServer::start().unwrap();
    // Durations beyond 7 days are usage errors, not a panic (--wait) nor "forever"
    // (--kill-grace).
    for (flag, value) in [
        ("--wait", "1000years"),
        ("--wait", "7days 1ms"),
        ("--kill-grace", "30d"),
        ("--lease", "8d"),
        ("--wait", "99999999999999999999999s"),
    ] {
        let out = output(&server, &["run", "--key", "k", flag, value, "--", "true"]).await;
        assert_eq!(
            out.status.code(),
            Some(USAGE),
            "{flag} {value}: {:?}",
            text(&out)
        );
        let (_, err) = text(&out);
        assert!(err.contains(flag), "{flag} {value}: {err}");
        assert!(!err.contains("panicked"), "{flag} {value}: {err}");
    }
    // The longest values are accepted.
    let out = output(
        &server,
        &[
            "run",
            "--key",
            "k",
            "--wait",
            "7d",
            "--kill-grace",
            "7d",
            "--",
            "true",
        ],
    )
    .await;
    assert!(out.status.success(), "{:?}", text(&out));
}

#[tokio::test]
async fn one_server_named_three_times_is_a_configuration_error() {
    let server = RedisServer::start().unwrap();
    // `localhost` and 127.0.0.1 are one server; the message names the URLs, without password.
    let urls = [
        format!("redis://:hunter2@localhost:{}", server.port()),
        server.url(),
        server.url(),
    ];
    let mut args = vec!["run"];
    for u in &urls {
        args.extend(["--url", u]);
    }
    args.extend(["--key", "k", "--", "true"]);
    let out = output(&server, &args).await;
    assert_eq!(out.status.code(), Some(CONNECTION), "{:?}", text(&out));
    let (_, err) = text(&out);
    assert!(err.contains("same server"), "{err}");
    assert!(!err.contains("hunter2"), "password printed: {err}");
}

/// The same commands on ZooKeeper: a program runs under a `zk://` lock, `status` shows who
/// holds it and its waiters, and `unlock --force` hands it to the next waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_status_and_unlock_take_zk_urls() {
    let zk = tokio::task::spawn_blocking(fencelock_testkit::ZooKeeperServer::start)
        .await
        .unwrap()
        .expect("start ZooKeeper");
    let url = zk.url();
    let cli = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fencelock"));
        c.env_remove("FENCELOCK_PASSWORD")
            .env("FENCELOCK_URL", &url)
            .args(args)
            .kill_on_drop(true);
        c
    };
    let out = within(
        30,
        "run",
        cli(&["run", "--key", "zk-job", "--lease", "5s", "--", "true"]).output(),
    )
    .await
    .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let holder = Client::connect(&url).await.unwrap();
    let guard = holder.lock("zk-job").acquire().await.unwrap();
    let out = within(30, "status", cli(&["status", "zk-job", "--json"]).output())
        .await
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(text(&out).0.contains(holder.id()), "{:?}", text(&out));
    let mut waiting = cli(&["run", "--key", "zk-job", "--lease", "5s", "--", "true"]);
    let waiting = waiting.spawn().unwrap();
    let out = within(
        30,
        "unlock",
        cli(&["unlock", "zk-job", "--force", "--yes"]).output(),
    )
    .await
    .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    within(10, "the holder is told", guard.lost()).await;
    let out = within(30, "the waiter runs", waiting.wait_with_output())
        .await
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
}

/// The same commands on etcd: a program runs under an `etcd://` lock, `status` shows who
/// holds it, its token and its waiters, and `unlock --force` hands it to the next waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_status_and_unlock_take_etcd_urls() {
    let etcd = tokio::task::spawn_blocking(fencelock_testkit::EtcdServer::start)
        .await
        .unwrap()
        .expect("start etcd");
    let url = etcd.url();
    let cli = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fencelock"));
        c.env_remove("FENCELOCK_PASSWORD")
            .env("FENCELOCK_URL", &url)
            .args(args)
            .kill_on_drop(true);
        c
    };
    let mut run = cli(&[
        "run",
        "--key",
        "etcd-job",
        "--lease",
        "5s",
        "--shell",
        "--",
        "echo $FENCELOCK_TOKEN",
    ]);
    let out = within(30, "run", run.output()).await.unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(
        text(&out).0.trim().parse::<u64>().is_ok_and(|t| t > 0),
        "{:?}",
        text(&out)
    );
    let holder = Client::connect(&url).await.unwrap();
    let guard = holder.lock("etcd-job").acquire().await.unwrap();
    let mut waiting = cli(&["run", "--key", "etcd-job", "--lease", "5s", "--", "true"]);
    let waiting = waiting.spawn().unwrap();
    let queued = async {
        while holder.status("etcd-job").await.unwrap().waiters.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within(30, "the waiter queues", queued).await;
    let out = within(
        30,
        "status",
        cli(&["status", "etcd-job", "--json"]).output(),
    )
    .await
    .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let json: serde_json::Value = serde_json::from_str(&text(&out).0).unwrap();
    assert_eq!(json["fencing_token"], guard.fencing_token(), "{json}");
    assert_eq!(json["waiters"].as_array().map(Vec::len), Some(1), "{json}");
    assert!(text(&out).0.contains(holder.id()), "{:?}", text(&out));
    let out = within(
        30,
        "unlock",
        cli(&["unlock", "etcd-job", "--force", "--yes"]).output(),
    )
    .await
    .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    within(10, "the holder is told", guard.lost()).await;
    let out = within(30, "the waiter runs", waiting.wait_with_output())
        .await
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
}
