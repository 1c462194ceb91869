//! The lock family in `fencelock run` and `status` (issue 24, point 5): `run -s` / `-x` (the
//! read and write sides of a read-write lock), `run --permits N` (one of N permits),
//! `run NAME --also NAME2` (a multi-lock, all or none), the usage errors of the combinations
//! that make no sense (before any contact), and `status` listing several holders with their
//! origin. Real servers and processes; every wait is for a file, a status or an exit, bounded.
//!
//! The read-write lock and the semaphore are checked on Redis, ZooKeeper and etcd; each test
//! first makes sure the service offers the primitive (a refusal fails the test).

mod common;

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use common::*;
use fencelock::{Client, Error};
use tokio::process::{Child, ChildStdin};

/// A `fencelock run` whose PROGRAM writes its environment's tokens to a file once it holds,
/// then waits for a line on stdin (the test ends it by closing stdin).
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    file: PathBuf,
}

/// PROGRAM: `TOKEN TOKENS PID` into `$OUT` (written whole, then renamed), then `read`.
const PROGRAM: &str = "echo \"$FENCELOCK_TOKEN $FENCELOCK_TOKENS $$\" > \"$OUT.tmp\" && \
                       mv \"$OUT.tmp\" \"$OUT\"; read x || true";

impl Holder {
    /// Starts `fencelock run ARGS --shell PROGRAM` on `server`; PROGRAM writes `dir/tag`.
    fn start(server: &Server, dir: &Path, tag: &str, args: &[&str]) -> Holder {
        let file = dir.join(tag);
        let mut argv = vec!["run"];
        argv.extend_from_slice(args);
        argv.extend(["--shell", PROGRAM]);
        let mut child = server
            .cli(&argv)
            .env("OUT", &file)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        Holder { child, stdin, file }
    }

    /// Waits until PROGRAM runs (it holds); its line: token, tokens, pid.
    async fn holds(&self) -> Vec<String> {
        let line = wait_for_file(&self.file).await;
        line.split_whitespace().map(str::to_owned).collect()
    }

    /// Whether PROGRAM has started.
    fn started(&self) -> bool {
        self.file.exists()
    }

    /// Ends PROGRAM (stdin closed) and waits for `fencelock run` to exit.
    async fn finish(mut self) -> ExitStatus {
        self.stdin.take();
        within(30, "the holder exits", self.child.wait())
            .await
            .unwrap()
    }
}

async fn client(server: &Server) -> Client {
    Client::connect(&server.url()).await.unwrap()
}

/// Waits until `name`'s status has `owners` holders and `waiters` waiters.
async fn shows(client: &Client, name: &str, owners: usize, waiters: usize) {
    let what = format!("{name}: {owners} holders, {waiters} waiters");
    within(30, &what, async {
        loop {
            let status = client.status(name).await.unwrap();
            if status.owners.len() == owners && status.waiters.len() == waiters {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// What the service says of a read-write lock or a semaphore: offered, or refused with
/// `Error::Unsupported`.
async fn offers(client: &Client, semaphore: bool) -> bool {
    let taken = match semaphore {
        true => client.semaphore("offer-probe-s", 1).try_acquire().await,
        false => client.rw_lock("offer-probe-rw").read().try_acquire().await,
    };
    match taken {
        Ok(Ok(guard)) => {
            guard.release().await.unwrap();
            true
        }
        Err(Error::Unsupported { .. }) => false,
        other => panic!("probe: {other:?}"),
    }
}

/// `fencelock status NAME` as text and JSON.
async fn status(server: &Server, name: &str) -> (String, serde_json::Value) {
    let out = server.output(&["status", name]).await;
    let text = text(&out).0;
    let out = server.output(&["status", "--json", name]).await;
    let json = serde_json::from_slice(&out.stdout).unwrap();
    (text, json)
}

/// The roles of `status --json`'s owners (their origin's `role`).
fn roles(json: &serde_json::Value) -> Vec<String> {
    json["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["origin"]["role"].as_str().unwrap_or("none").to_owned())
        .collect()
}

/// Two `run -s` hold together; `run -x` waits for both (queued), holds once both ended, and
/// its token is above theirs; `status` lists both readers with their origin.
async fn readers_share_and_a_writer_waits(kind: Kind) {
    let server = Server::start(kind).await;
    let observer = client(&server).await;
    assert!(
        offers(&observer, false).await,
        "no read-write lock on {}",
        server.url()
    );
    let dir = tempfile::tempdir().unwrap();
    let r1 = Holder::start(&server, dir.path(), "r1", &["-s", "rw"]);
    let r2 = Holder::start(&server, dir.path(), "r2", &["--shared", "rw"]);
    let (t1, t2) = (r1.holds().await, r2.holds().await);
    let (shown, json) = status(&server, "rw").await;
    assert!(shown.contains("holders:         2"), "{shown}");
    assert_eq!(shown.matches("  reader:  ").count(), 2, "{shown}");
    assert_eq!(roles(&json), ["read", "read"], "{json}");
    let w = Holder::start(&server, dir.path(), "w", &["-x", "rw"]);
    shows(&observer, "rw", 2, 1).await;
    assert!(r1.finish().await.success());
    shows(&observer, "rw", 1, 1).await;
    assert!(!w.started(), "the writer ran beside a reader");
    assert!(r2.finish().await.success());
    let tw = w.holds().await;
    let token = |t: &[String]| t[0].parse::<u64>().unwrap();
    assert!(
        token(&tw) > token(&t1).max(token(&t2)),
        "{tw:?} {t1:?} {t2:?}"
    );
    let (shown, json) = status(&server, "rw").await;
    assert!(shown.contains("  writer:  "), "{shown}");
    assert_eq!(roles(&json), ["write"], "{json}");
    // A reader waits for the writer: -n says so and gives 75.
    let out = server.output(&["run", "-s", "-n", "rw", "true"]).await;
    assert_eq!(out.status.code(), Some(CONFLICT), "{:?}", text(&out));
    assert!(
        text(&out).1.contains("held for writing"),
        "{:?}",
        text(&out)
    );
    assert!(w.finish().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_waits_redis() {
    readers_share_and_a_writer_waits(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_waits_zookeeper() {
    readers_share_and_a_writer_waits(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_waits_etcd() {
    readers_share_and_a_writer_waits(Kind::Etcd).await;
}

/// `--permits 2`: two hold, the third waits (queued) and holds once one ended; each permit
/// has its own token; `status` lists both permit holders; another N is refused with 69.
async fn two_permits_let_two_in(kind: Kind) {
    let server = Server::start(kind).await;
    let observer = client(&server).await;
    assert!(
        offers(&observer, true).await,
        "no semaphore on {}",
        server.url()
    );
    let dir = tempfile::tempdir().unwrap();
    let p1 = Holder::start(&server, dir.path(), "p1", &["--permits", "2", "sem"]);
    let p2 = Holder::start(&server, dir.path(), "p2", &["--permits", "2", "sem"]);
    let (t1, t2) = (p1.holds().await, p2.holds().await);
    assert_ne!(t1[0], t2[0], "each permit its own token");
    let (shown, json) = status(&server, "sem").await;
    assert_eq!(shown.matches("  permit holder:  ").count(), 2, "{shown}");
    assert!(shown.contains("one of 2 permits"), "{shown}");
    assert_eq!(roles(&json), ["permit", "permit"], "{json}");
    assert_eq!(json["owners"][0]["origin"]["permits"], 2, "{json}");
    let p3 = Holder::start(&server, dir.path(), "p3", &["--permits", "2", "sem"]);
    shows(&observer, "sem", 2, 1).await;
    assert!(!p3.started(), "a third permit holder ran");
    let out = server
        .output(&["run", "--permits", "2", "-n", "sem", "true"])
        .await;
    assert_eq!(out.status.code(), Some(CONFLICT), "{:?}", text(&out));
    assert!(text(&out).1.contains("no free permit"), "{:?}", text(&out));
    let out = server
        .output(&["run", "--permits", "3", "-n", "sem", "true"])
        .await;
    assert_eq!(out.status.code(), Some(CONNECTION), "{:?}", text(&out));
    assert!(text(&out).1.contains("--permits 2"), "{:?}", text(&out));
    assert!(p1.finish().await.success());
    p3.holds().await;
    assert!(p2.finish().await.success());
    assert!(p3.finish().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_permits_let_two_in_redis() {
    two_permits_let_two_in(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_permits_let_two_in_zookeeper() {
    two_permits_let_two_in(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_permits_let_two_in_etcd() {
    two_permits_let_two_in(Kind::Etcd).await;
}

/// `run a --also b --also c` holds all three (each lock's status names this run), PROGRAM
/// gets every token; a second run naming them in another order waits, then holds; with one
/// of them busy, `-n` gives 75 and takes none.
async fn also_takes_all_or_none(kind: Kind) {
    let server = Server::start(kind).await;
    let observer = client(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let all = Holder::start(
        &server,
        dir.path(),
        "all",
        &["ma", "--also", "mb", "--also", "mc"],
    );
    let seen = all.holds().await;
    let tokens: Vec<(&str, u64)> = seen[1]
        .split(',')
        .map(|kv| kv.split_once('=').unwrap())
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect();
    assert_eq!(
        tokens.iter().map(|t| t.0).collect::<Vec<_>>(),
        ["ma", "mb", "mc"]
    );
    assert_eq!(
        seen[0],
        tokens[0].1.to_string(),
        "FENCELOCK_TOKEN is NAME's"
    );
    for name in ["ma", "mb", "mc"] {
        let (shown, json) = status(&server, name).await;
        assert!(shown.contains("  held by:  "), "{shown}");
        assert_eq!(json["owners"].as_array().unwrap().len(), 1, "{json}");
    }
    // Another order: waits behind the first (never a deadlock), holds after it.
    let other = Holder::start(&server, dir.path(), "other", &["mc", "--also", "ma"]);
    shows(&observer, "ma", 1, 1).await;
    assert!(!other.started());
    assert!(all.finish().await.success());
    let seen = other.holds().await;
    assert!(seen[1].starts_with("mc="), "{seen:?}");
    // mb is free, ma held: -n fails at once, and mb is not left taken.
    let out = server
        .output(&["run", "mb", "--also", "ma", "-n", "true"])
        .await;
    assert_eq!(out.status.code(), Some(CONFLICT), "{:?}", text(&out));
    let stderr = text(&out).1;
    assert!(
        stderr.contains("lock \"ma\" is held by someone else"),
        "{stderr}"
    );
    assert!(
        stderr.contains("none of locks \"mb\", \"ma\" was taken"),
        "{stderr}"
    );
    assert!(!observer.status("mb").await.unwrap().held);
    assert!(other.finish().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn also_takes_all_or_none_redis() {
    also_takes_all_or_none(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn also_takes_all_or_none_zookeeper() {
    also_takes_all_or_none(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn also_takes_all_or_none_etcd() {
    also_takes_all_or_none(Kind::Etcd).await;
}

/// One of the locks of `--also` deleted behind the run's back: PROGRAM is stopped, 79.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_any_of_the_locks_stops_program() {
    let server = Server::start(Kind::Redis).await;
    let observer = client(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let all = Holder::start(&server, dir.path(), "all", &["la", "--also", "lb"]);
    let pid: i32 = all.holds().await[2].parse().unwrap();
    observer.force_unlock("lb").await.unwrap();
    let status = within(30, "the run ends", { all }.child.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(LOCK_LOST));
    assert!(!alive(pid), "PROGRAM outlived the loss");
}

/// A run of `--also` waiting for its second lock (the first one taken) gives up on SIGTERM
/// with 143, and leaves neither lock taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_while_waiting_for_also_gives_everything_back() {
    let server = Server::start(Kind::Redis).await;
    let observer = client(&server).await;
    let busy = observer.lock("wb").acquire().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let waiting = Holder::start(&server, dir.path(), "w", &["wa", "--also", "wb"]);
    shows(&observer, "wb", 1, 1).await;
    assert!(
        observer.status("wa").await.unwrap().held,
        "wa is taken first"
    );
    signal(
        waiting.child.id().unwrap() as i32,
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = waiting.finish().await;
    assert_eq!(status.code(), Some(128 + 15));
    assert!(!observer.status("wa").await.unwrap().held, "wa left taken");
    shows(&observer, "wb", 1, 0).await;
    busy.release().await.unwrap();
}

/// Combinations that make no sense are usage errors before any server is contacted (the URL
/// names a port nobody listens on: contact would give 69).
#[tokio::test]
async fn senseless_combinations_are_usage_errors() {
    let nowhere = "redis://127.0.0.1:1";
    for args in [
        &["run", "-s", "-x", "k", "true"][..],
        &["run", "-s", "--permits", "2", "k", "true"],
        &["run", "-x", "--permits", "2", "k", "true"],
        &["run", "-s", "k", "--also", "j", "true"],
        &["run", "-x", "k", "--also", "j", "true"],
        &["run", "--permits", "2", "k", "--also", "j", "true"],
        &["run", "--permits", "0", "k", "true"],
        &["run", "--permits", "10001", "k", "true"],
        &["run", "k", "--also", "k", "true"],
        &["run", "k", "--also", "j", "--also", "j", "true"],
        &["run", "k", "--also", "a,b", "true"],
        &["run", "k", "--also", "a=b", "true"],
        &["run", "k", "--also", "", "true"],
        &["run", "-s", "k"],
    ] {
        let out = within(30, "fencelock exits", cli_at(nowhere, args).output())
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {:?}", text(&out));
    }
}
