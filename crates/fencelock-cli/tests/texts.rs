//! The texts issue 33 found wrong (its "What was found" 5, point 7), each checked as a user
//! meets it: usage errors that name the option and say what is wrong, help that speaks of what
//! the command does, loss reasons in each service's words, a close warning that tells how
//! long it waited, an observer's one line per change. Real servers where one is needed.

mod common;

use std::process::Stdio;
use std::time::Instant;

use common::*;
use tokio::io::AsyncBufReadExt;

/// Usage errors name the option and say what is wrong in the CLI's words (not clap's
/// "unexpected argument" with a tip towards `--password` or `-- -1`), before any server is
/// contacted (the URL's listener sees no connection).
#[tokio::test]
async fn usage_errors_name_the_option_and_what_is_wrong() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("redis://{}", listener.local_addr().unwrap());
    let cases: [(&[&str], &[&str]); 9] = [
        (
            &["elect", "-s", "e", "true"],
            &["elect` has no -s", "read-write lock"],
        ),
        (
            &["elect", "-x", "e", "true"],
            &["elect` has no -x", "read-write lock"],
        ),
        (
            &["elect", "--permits", "3", "e", "true"],
            &["elect` has no --permits", "semaphore"],
        ),
        (
            &["run", "--permits", "-1", "e", "true"],
            &["--permits was given -1, a negative value", "1 to 10000"],
        ),
        (
            &["run", "--wait", "-1", "e", "true"],
            &["--wait was given -1, a negative value", "duration"],
        ),
        (
            &["run", "--wait", "-5s", "e", "true"],
            &["--wait was given -5s, a negative value"],
        ),
        (
            &["elect", "-w", "-1", "e", "true"],
            &["-w was given -1, a negative value", "seconds"],
        ),
        (
            &["verify", "--primitive", "mutex", "--permits", "3"],
            &[
                "--permits is the number of permits of a semaphore",
                "--primitive mutex",
            ],
        ),
        (
            &["elect", "--value", "a\nb", "e", "true"],
            &["--value \"a\\nb\" has a control character", "one line"],
        ),
    ];
    for (args, says) in cases {
        let out = within(10, "usage error", cli_at(&url, args).output())
            .await
            .unwrap();
        let err = text(&out).1;
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {err}");
        for words in says {
            assert!(err.contains(words), "{args:?}: {words:?} in {err}");
        }
        for clap_words in ["unexpected argument", "--password", "tip:"] {
            assert!(!err.contains(clap_words), "{args:?}: {err}");
        }
    }
    assert!(listener.accept().is_err(), "a server was contacted");
}

/// `fencelock CMD --help`, as text.
async fn help(args: &[&str]) -> String {
    let out = within(10, "help", cli_at("redis://127.0.0.1:1", args).output())
        .await
        .unwrap();
    assert!(out.status.success(), "{args:?}: {:?}", text(&out));
    text(&out).0
}

/// `elect --help` speaks of leading an election, never of "the lock"; every subcommand's help
/// (but `status` and `unlock`, whose help is written elsewhere) has an exit status section.
#[tokio::test]
async fn help_speaks_each_commands_words_and_gives_exit_statuses() {
    let elect = help(&["elect", "--help"]).await.to_lowercase();
    let words = elect
        .replace("fencelock", "")
        .replace("redlock", "")
        .replace("flock", "");
    assert!(!words.contains("lock"), "{elect}");
    for command in ["run", "elect", "demo", "verify"] {
        let text = help(&[command, "--help"]).await;
        assert!(text.contains("\nEXIT STATUS:\n  "), "{command}: {text}");
        assert!(text.contains("  64 "), "{command}: {text}");
    }
}

/// "an election", "a semaphore": a name in use as another primitive is said with the right
/// article (once "… it was asked for as a election").
#[tokio::test]
async fn a_name_in_use_as_another_primitive_reads_right() {
    let server = Server::start(Kind::Redis).await;
    let client = fencelock::Client::connect(&server.url()).await.unwrap();
    let guard = client.semaphore("m", 2).acquire().await.unwrap();
    let out = server.output(&["elect", "-n", "m", "true"]).await;
    let err = text(&out).1;
    assert_eq!(out.status.code(), Some(CONNECTION), "{err}");
    assert!(err.contains("is used as a semaphore"), "{err}");
    assert!(err.contains("asked for as an election"), "{err}");
    guard.release().await.unwrap();
}

/// Whether `line` has a parenthesis inside another.
fn nested_parentheses(line: &str) -> bool {
    let mut depth = 0;
    for c in line.chars() {
        match c {
            '(' if depth > 0 => return true,
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
    }
    false
}

/// A forced unlock's loss, in the words of the service: Redis's key, ZooKeeper's node, etcd's
/// key (never "node or key"), and no parentheses inside parentheses.
async fn a_forced_unlocks_loss_names_the_services_entry(kind: Kind, entry: &str) {
    let server = Server::start(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("started");
    let body = format!("echo started > {}; sleep 30", file.display());
    let runner = server
        .cli(&["run", "fu", "--shell", &body])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&file).await;
    let out = server.output(&["unlock", "--force", "--yes", "fu"]).await;
    assert!(out.status.success(), "{:?}", text(&out));
    let out = within(20, "runner exits", runner.wait_with_output())
        .await
        .unwrap();
    let err = text(&out).1;
    assert_eq!(out.status.code(), Some(LOCK_LOST), "{err}");
    let lost = err.lines().find(|l| l.contains(" lost")).unwrap_or("");
    assert!(!lost.contains("node or key"), "{err}");
    assert!(!nested_parentheses(lost), "{err}");
    assert!(lost.contains(&format!(" {entry} ")), "{kind:?}: {err}");
    println!("{kind:?}: {lost}");
}

#[tokio::test]
async fn a_forced_unlocks_loss_names_the_services_entry_redis() {
    a_forced_unlocks_loss_names_the_services_entry(Kind::Redis, "key").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_unlocks_loss_names_the_services_entry_zookeeper() {
    a_forced_unlocks_loss_names_the_services_entry(Kind::ZooKeeper, "node").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_unlocks_loss_names_the_services_entry_etcd() {
    a_forced_unlocks_loss_names_the_services_entry(Kind::Etcd, "key").await;
}

/// The close warning says how long close really waited: the server died while PROGRAM ran,
/// the release failed at once, and the warning came well before the close's bound (once it
/// said "after 4s", 0.3 s after the server died).
#[tokio::test]
async fn the_close_warning_tells_how_long_it_waited() {
    let server = Server::start(Kind::Redis).await;
    let dir = tempfile::tempdir().unwrap();
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    let body = format!(
        "echo started > {}; while [ ! -e {} ]; do sleep 0.02; done",
        started.display(),
        go.display()
    );
    let runner = server
        .cli(&["run", "--lease", "30s", "cw", "--shell", &body])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&started).await;
    drop(server);
    let since = Instant::now();
    std::fs::write(&go, "").unwrap();
    let out = within(30, "runner exits", runner.wait_with_output())
        .await
        .unwrap();
    let took = since.elapsed();
    let err = text(&out).1;
    let waited = err
        .split("after waiting ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no close warning with its wait: {err}"));
    let waited = humantime::parse_duration(waited).unwrap();
    assert!(waited <= took, "said {waited:?}, took {took:?}: {err}");
    println!("close said it waited {waited:?}; PROGRAM's end to the runner's {took:?}");
}

/// A value another client advertises with a newline stays on `--observe`'s one line per
/// change, escaped (`--value` itself refuses one: usage_errors_name_the_option_…).
#[tokio::test]
async fn an_observed_value_with_a_newline_stays_on_one_line() {
    let server = Server::start(Kind::Redis).await;
    let client = fencelock::Client::connect(&server.url()).await.unwrap();
    let leading = client.election("nl").campaign("a\nb").await.unwrap();
    let mut observer = server
        .cli(&["elect", "nl", "--observe"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(observer.stdout.take().unwrap()).lines();
    let line = within(30, "the observer's line", lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert!(line.starts_with("leader: a\\nb, term "), "{line}");
    observer.kill().await.unwrap();
    leading.resign().await.unwrap();
}
