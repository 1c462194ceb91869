//! Every message says what to do (issue 23, points 5-14): the CLI's words for what went
//! wrong, one way to name a lock, no panic on a closed pipe, the exit-code table.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;

/// Point 6: a closed stdout pipe ends the command quietly, never with a panic (101).
#[tokio::test]
async fn a_closed_stdout_pipe_is_no_panic() {
    let server = Server::start(Kind::Redis).await;
    for args in [
        &["status", "x"][..],
        &["status", "x", "--json"],
        &["--help"],
    ] {
        let mut child = server
            .cli(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reading end closes before the command writes (`fencelock status x | true`).
        drop(child.stdout.take());
        let out = within(30, "exits", child.wait_with_output()).await.unwrap();
        let (_, err) = text(&out);
        assert_ne!(out.status.code(), Some(101), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Point 6: `fencelock demo | head -1`: the demo reads one line, then its stdout closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_piped_into_head_is_no_panic() {
    use tokio::io::AsyncBufReadExt;
    let mut child = cli_at("redis://127.0.0.1:1", &["demo"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    within(60, "first line", lines.next_line()).await.unwrap();
    drop(lines);
    let out = within(120, "demo exits", child.wait_with_output())
        .await
        .unwrap();
    let (_, err) = text(&out);
    assert_ne!(out.status.code(), Some(101), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Point 9: NAME is positional for `run`, `status` and `unlock`; `--key NAME` still works;
/// with FENCELOCK_URL set, no usage line shows `--url` as required.
#[tokio::test]
async fn name_is_positional_everywhere_and_key_an_alias() {
    let server = Server::start(Kind::Redis).await;
    let out = server
        .output(&["run", "job", "--", "sh", "-c", "echo $FENCELOCK_KEY"])
        .await;
    assert_eq!(text(&out).0, "job\n", "{:?}", text(&out));
    let out = server.output(&["run", "job", "echo", "hi"]).await;
    assert_eq!(text(&out).0, "hi\n", "{:?}", text(&out));
    let out = server
        .output(&["run", "--key", "job", "--", "echo", "hi"])
        .await;
    assert_eq!(text(&out).0, "hi\n", "{:?}", text(&out));
    let out = server.output(&["status", "--key", "job"]).await;
    assert!(text(&out).0.contains("\"job\""), "{:?}", text(&out));
    for args in [&["run"][..], &["run", "job"], &["unlock", "--yes"]] {
        let out = server.output(args).await;
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}");
        let usage = text(&out).1;
        assert!(usage.contains("Usage:"), "{args:?}: {usage}");
        assert!(!usage.contains("--url"), "{args:?}: {usage}");
    }
    let out = server.output(&["run", "--help"]).await;
    assert!(
        text(&out).0.contains("fencelock run [OPTIONS] NAME"),
        "{:?}",
        text(&out)
    );
}

/// Point 10: a Redis that needs a password says so and names the flag and the variable.
#[tokio::test]
async fn a_missing_password_names_the_flag() {
    let server = fencelock_testkit::RedisServer::builder()
        .config("requirepass", "s3cret")
        .start()
        .unwrap();
    let out = cli_at(&server.url(), &["status", "x"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(CONNECTION));
    let err = text(&out).1;
    assert!(err.contains("needs a password"), "{err}");
    assert!(
        err.contains("--password") && err.contains("FENCELOCK_PASSWORD"),
        "{err}"
    );
    assert!(!err.contains("NOAUTH") && !err.contains("HELLO"), "{err}");
    let out = cli_at(&server.url(), &["status", "x", "--password", "nope"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(CONNECTION));
    let err = text(&out).1;
    assert!(err.contains("refused the password"), "{err}");
    assert!(!err.contains("nope"), "{err}");
}

/// Point 10: a URL pointed at another kind of server, or at nothing, says so in the CLI's
/// words (no parser, HTTP/2 or tonic text), with exit 69.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_at_the_wrong_server_or_at_nothing_says_so() {
    let redis = Server::start(Kind::Redis).await;
    let etcd = Server::start(Kind::Etcd).await;
    let zk = Server::start(Kind::ZooKeeper).await;
    let zk_addr = zk.url().trim_start_matches("zk://").to_string();
    let free = fencelock_testkit::free_port().unwrap();
    let redis_addr = redis.url().trim_start_matches("redis://").to_string();
    let etcd_addr = etcd.url().trim_start_matches("etcd://").to_string();
    let cases = [
        (
            format!("redis://{etcd_addr}"),
            "does not answer as a Redis server",
        ),
        (
            format!("etcd://{redis_addr}"),
            "does not answer as an etcd server",
        ),
        (format!("redis://{zk_addr}"), "is it another kind of server"),
        (format!("zk://{redis_addr}"), "is it a ZooKeeper server"),
        (format!("etcd://{zk_addr}"), "is it another kind of server"),
        (format!("zk://{etcd_addr}"), "is it a ZooKeeper server"),
        (
            format!("etcd://127.0.0.1:{free}"),
            "is the etcd server running",
        ),
        (
            format!("zk://127.0.0.1:{free}"),
            "is the ZooKeeper server running",
        ),
        (
            format!("redis://127.0.0.1:{free}"),
            "is the Redis server running",
        ),
    ];
    for (url, expected) in cases {
        let out = within(60, "status", cli_at(&url, &["status", "x"]).output())
            .await
            .unwrap();
        let err = text(&out).1;
        assert_eq!(out.status.code(), Some(CONNECTION), "{url}: {err}");
        assert!(err.contains(expected), "{url}: {err}");
        for jargon in [
            "Parse error",
            "Unexpected",
            "h2",
            "tonic",
            "GoAway",
            "request bound",
        ] {
            assert!(!err.contains(jargon), "{url}: {err}");
        }
    }
}

/// Point 10: an even number of RedLock URLs is a configuration error (69), like every other
/// unusable URL, and says how many were given.
#[tokio::test]
async fn an_even_number_of_redlock_urls_is_a_configuration_error() {
    let a = fencelock_testkit::free_port().unwrap();
    let b = fencelock_testkit::free_port().unwrap();
    let (ua, ub) = (
        format!("redis://127.0.0.1:{a}"),
        format!("redis://127.0.0.1:{b}"),
    );
    let out = cli_at(&ua, &["status", "x", "--url", &ua, "--url", &ub])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(CONNECTION), "{:?}", text(&out));
    assert!(
        text(&out).1.contains("--url was given 2 times"),
        "{:?}",
        text(&out)
    );
}

/// The exit-code table: PROGRAM not executable is 126, not found 127, a signal while
/// waiting 128+N (the other codes have tests of their own: 64, 69, 75, 79 above and in
/// run_safety.rs).
#[tokio::test]
async fn programs_that_cannot_run_give_126_and_127() {
    let server = Server::start(Kind::Redis).await;
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("not-executable");
    std::fs::write(&plain, "echo hi\n").unwrap();
    let out = server.output(&["run", "x", plain.to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(126), "{:?}", text(&out));
    let out = server.output(&["run", "x", "/nonexistent/program"]).await;
    assert_eq!(out.status.code(), Some(127), "{:?}", text(&out));
    assert!(text(&out).1.contains("cannot run"), "{:?}", text(&out));
    let _ = Duration::ZERO;
}

/// Point 5: a Redis whose `maxmemory-policy` can evict lock keys is a warning shown without
/// `-v` (whatever its `maxmemory`).
#[tokio::test]
async fn an_evicting_redis_is_a_warning_without_verbose() {
    let server = fencelock_testkit::RedisServer::builder()
        .config("maxmemory-policy", "allkeys-lru")
        .start()
        .unwrap();
    let out = cli_at(&server.url(), &["run", "x", "true"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let err = text(&out).1;
    assert!(
        err.contains("warning") && err.contains("maxmemory-policy"),
        "{err}"
    );
}

/// Point 5: a ZooKeeper session timeout below `--lease` is a warning shown without `-v`,
/// naming `--lease` (not the library's option).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_lease_cut_short_is_a_warning_naming_the_flag() {
    let server = Server::start(Kind::ZooKeeper).await;
    let out = server.output(&["run", "--lease", "2h", "x", "true"]).await;
    assert!(out.status.success(), "{:?}", text(&out));
    let err = text(&out).1;
    assert!(err.contains("warning") && err.contains("--lease"), "{err}");
    assert!(!err.contains("ClientOptions"), "{err}");
}

/// Point 14: `-v` shows fencelock's events (acquired, released), not script loading.
#[tokio::test]
async fn verbose_shows_fencelocks_events_not_script_loading() {
    let server = Server::start(Kind::Redis).await;
    let out = server.output(&["run", "-v", "x", "true"]).await;
    let err = text(&out).1;
    assert!(err.contains("acquired") && err.contains("release"), "{err}");
    assert!(!err.contains("loading a script"), "{err}");
}

/// Point 14: `demo --workers 0` (or 1: no contention) is a usage error; `--shell` takes one
/// command line, as `sh -c` does.
#[tokio::test]
async fn small_things_demo_workers_and_shell() {
    let server = Server::start(Kind::Redis).await;
    for workers in ["0", "1", "none"] {
        let out = server.output(&["demo", "--workers", workers]).await;
        assert_eq!(out.status.code(), Some(USAGE), "{:?}", text(&out));
    }
    let out = server
        .output(&["run", "x", "--shell", "echo a; echo b"])
        .await;
    assert_eq!(text(&out).0, "a\nb\n", "{:?}", text(&out));
    let out = server
        .output(&["run", "x", "--shell", "echo a", "echo b"])
        .await;
    assert_eq!(out.status.code(), Some(USAGE), "{:?}", text(&out));
    assert!(
        text(&out).1.contains("one command line"),
        "{:?}",
        text(&out)
    );
}

/// Point 14: a Redis lock lost for want of renewals (the server frozen) names no "session",
/// which Redis locks do not have.
#[tokio::test]
async fn a_redis_loss_names_no_session() {
    let server = fencelock_testkit::RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("started");
    let body = format!("echo started > {}; sleep 30", file.display());
    let runner = cli_at(
        &server.url(),
        &["run", "--lease", "1s", "x", "--shell", &body],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_for_file(&file).await;
    server.pause();
    let out = within(20, "runner exits", runner.wait_with_output())
        .await
        .unwrap();
    server.resume();
    assert_eq!(out.status.code(), Some(LOCK_LOST), "{:?}", text(&out));
    let err = text(&out).1;
    assert!(err.contains("lost"), "{err}");
    assert!(!err.contains("session"), "{err}");
}

/// Points 7 and 8 on one service: `status` tells the truth (a free lock that issued tokens
/// is not "never taken"; a session-bound lease is not "no expiry"; a waiter is not "valid
/// for 0s"), says who holds the lock (host and pid of the `fencelock run`), lines its values
/// up, exits 0 when held and 1 when free, and `--json` has the same facts; `--no-wait` says
/// what `status` says.
async fn status_tells_the_truth(kind: Kind) {
    let server = Server::start(kind).await;
    let out = server.output(&["run", "job", "true"]).await;
    assert!(out.status.success(), "{:?}", text(&out));
    let out = server.output(&["status", "job"]).await;
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    let free = text(&out).0;
    assert!(free.contains("is free"), "{free}");
    if !matches!(kind, Kind::Redis) {
        assert!(!free.contains("never taken"), "{free}");
    }

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("started");
    let body = format!("echo started > {}; sleep 30", file.display());
    let holder = server
        .cli(&["run", "job", "--shell", &body])
        .spawn()
        .unwrap();
    let runner_pid = holder.id().unwrap();
    wait_for_file(&file).await;
    let _waiter = server.cli(&["run", "job", "true"]).spawn().unwrap();
    let queued = async {
        loop {
            let out = server.output(&["status", "job", "--json"]).await;
            let json: serde_json::Value = serde_json::from_str(&text(&out).0).unwrap();
            if json["waiters"].as_array().is_some_and(|w| !w.is_empty()) {
                return (out, json);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (out, json) = within(30, "a waiter queued", queued).await;
    assert_eq!(out.status.code(), Some(0), "{json}");
    assert_eq!(json["owners"][0]["origin"]["pid"], runner_pid, "{json}");
    assert_eq!(json["owners"][0]["origin"]["program"], "echo", "{json}");
    assert_eq!(json["waiters"][0]["expired"], false, "{json}");

    let out = server.output(&["status", "job"]).await;
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let held = text(&out).0;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert!(
        held.contains(&format!(
            "held by:         {}, pid {runner_pid}",
            host.trim()
        )),
        "{held}"
    );
    assert!(
        !held.contains("no expiry") && !held.contains("valid for 0s"),
        "{held}"
    );
    for l in held
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
    {
        // The value starts in column 19, after the padded label.
        assert!(l[..19].trim_end().ends_with(':'), "{held}");
        assert!(!l[19..].starts_with(' '), "{held}");
    }

    let out = server.output(&["run", "-n", "job", "true"]).await;
    assert_eq!(out.status.code(), Some(CONFLICT), "{:?}", text(&out));
    let err = text(&out).1;
    assert!(err.contains(&format!("pid {runner_pid}")), "{err}");
    assert!(!err.contains("no expiry"), "{err}");
    if !matches!(kind, Kind::ZooKeeper) {
        assert!(err.contains("lease left: "), "{err}");
    }
}

#[tokio::test]
async fn status_tells_the_truth_redis() {
    status_tells_the_truth(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_tells_the_truth_zookeeper() {
    status_tells_the_truth(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_tells_the_truth_etcd() {
    status_tells_the_truth(Kind::Etcd).await;
}

/// Point 8: `--owner ID` is the holding's owner id (Lock::with_owner), shown by `status`.
#[tokio::test]
async fn owner_sets_the_owner_id() {
    let server = Server::start(Kind::Redis).await;
    let out = server
        .output(&[
            "run",
            "--owner",
            "deploy-42",
            "job",
            env!("CARGO_BIN_EXE_fencelock"),
            "status",
            "job",
        ])
        .await;
    assert!(
        text(&out).0.contains("owner id:        deploy-42"),
        "{:?}",
        text(&out)
    );
    let out = server
        .output(&["run", "--owner", "two words", "job", "true"])
        .await;
    assert_eq!(out.status.code(), Some(USAGE), "{:?}", text(&out));
}

/// The exit-code table: `unlock --force` not confirmed at its prompt exits 1 and deletes
/// nothing; the prompt says who holds the lock (host and pid).
#[tokio::test]
async fn unlock_not_confirmed_exits_1_and_names_the_holder() {
    let server = Server::start(Kind::Redis).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("started");
    let body = format!("echo started > {}; sleep 30", file.display());
    let holder = server
        .cli(&["run", "job", "--shell", &body])
        .spawn()
        .unwrap();
    wait_for_file(&file).await;
    let (seen, code) = on_a_terminal(
        &server,
        "[y/N]",
        "n\n",
        "not removed",
        &["unlock", "--force", "job"],
    )
    .await;
    assert_eq!(code, 1, "{seen}");
    assert!(
        seen.contains(&format!("pid {}", holder.id().unwrap())),
        "{seen}"
    );
    let out = server.output(&["status", "job"]).await;
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
}

/// Point 13, and the one exit-code table: README states the facts a user must plan for (a
/// fencing counter per lock name for a horizon, tokens comparable within one service only, a token floor,
/// the first commands install packages), shows the new command shapes, and its table has
/// every code `run --help` lists.
#[test]
fn readme_states_the_facts_and_every_exit_code() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    for fact in [
        "A lock name leaves its fencing counter behind for a horizon",
        "Tokens are comparable only within one service",
        "token floor",
        "installs redis-server if missing",
        "fencelock run [OPTIONS] NAME [--] PROGRAM [ARGS]...",
        "`--key NAME`, the older",
        "fencelock elect [OPTIONS] NAME [--] PROGRAM [ARGS]...",
        "`--again`",
    ] {
        assert!(readme.contains(fact), "README lacks {fact:?}");
    }
    for code in [
        "| 64 |",
        "| 69 |",
        "| 74 |",
        "| 75 |",
        "| 79 |",
        "| 126 / 127 |",
        "| 0 / 1 / 2 |",
        "| 0 / 1 |",
        "| 128+N |",
    ] {
        assert!(
            readme.contains(code),
            "README's exit-code table lacks {code}"
        );
    }
}

/// `--url`'s help lists the URL form of every service the library's registry has.
#[tokio::test]
async fn url_help_comes_from_the_registry() {
    let out = cli_at("redis://127.0.0.1:1", &["status", "--help"])
        .output()
        .await
        .unwrap();
    // Without the wrapping's line breaks and indentation.
    let squeeze = |s: &str| s.split_whitespace().collect::<String>();
    let help = squeeze(&text(&out).0);
    for service in fencelock::services().iter().filter(|s| s.is_built()) {
        assert!(help.contains(&squeeze(service.url_form())), "{help}");
    }
}
