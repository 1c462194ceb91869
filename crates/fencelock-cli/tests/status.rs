//! Issue 33, points 1 to 3, on Redis, ZooKeeper and etcd: `status NAME` speaks of each kind
//! (a semaphore's k of N and its exit status, a read-write lock's readers, an election's
//! leader, value and term; each holder with its own token; "since" only where the grant time
//! is known, "queued at" where only the entry's is); `status` without NAME lists every kind,
//! filters by --kind and --older-than with the exit status a cron alert reads, and leaves
//! nothing behind (etcd: no lease); `unlock --holder ID` removes one permit, whose guard is
//! told at once, and `--force` says how many of what it removes. Holders are the library's;
//! the commands are the binary's, against real servers.

mod common;

use std::time::Duration;

use common::*;
use fencelock::{Client, Guard};

/// `fencelock status ARGS --json`: the exit code and the document.
async fn json(server: &Server, args: &[&str]) -> (i32, serde_json::Value) {
    let mut argv = vec!["status", "--json"];
    argv.extend_from_slice(args);
    let out = server.output(&argv).await;
    let doc =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", text(&out)));
    (out.status.code().unwrap_or(-1), doc)
}

/// The tokens of a status document's holders.
fn tokens(doc: &serde_json::Value) -> Vec<u64> {
    doc["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["token"].as_u64().unwrap())
        .collect()
}

async fn permit(client: &Client, name: &str, n: u32) -> Guard {
    within(20, "permit", client.semaphore(name, n).acquire())
        .await
        .unwrap()
}

/// Point 2: a semaphore with 2 of 3 permits taken is not "held" (exit 1), says so in words
/// and JSON, shows N and each holder's own token; with all 3 taken it exits 0. A read-write
/// lock names its readers (exit 0); an election shows its leader's value and term (exit 0).
async fn each_kind_speaks_for_itself(kind: Kind) {
    let server = Server::start(kind).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (a, b) = (
        permit(&client, "sem", 3).await,
        permit(&client, "sem", 3).await,
    );
    let out = server.output(&["status", "sem"]).await;
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    assert!(
        text(&out)
            .0
            .starts_with("semaphore \"sem\": 2 of 3 permits held"),
        "{:?}",
        text(&out)
    );
    let (code, doc) = json(&server, &["sem"]).await;
    assert_eq!(code, 1, "{doc}");
    assert_eq!(doc["kind"], "semaphore", "{doc}");
    assert_eq!(doc["permits"], 3, "{doc}");
    assert_eq!(doc["permits_held"], 2, "{doc}");
    let mut expected = vec![a.fencing_token(), b.fencing_token()];
    expected.sort_unstable();
    let mut shown = tokens(&doc);
    shown.sort_unstable();
    assert_eq!(shown, expected, "{doc}");
    for h in doc["holders"].as_array().unwrap() {
        let since_is = h["since_is"].as_str();
        match kind {
            Kind::Redis => assert_eq!(since_is, Some("granted"), "{doc}"),
            Kind::ZooKeeper => assert_eq!(since_is, Some("queued"), "{doc}"),
            Kind::Etcd => assert_eq!(since_is, None, "{doc}"),
        }
    }
    let text_out = text(&server.output(&["status", "sem"]).await).0;
    if matches!(kind, Kind::ZooKeeper) {
        assert!(text_out.contains("queued at:"), "{text_out}");
        assert!(!text_out.contains("  since:"), "{text_out}");
    }
    let c = permit(&client, "sem", 3).await;
    let (code, doc) = json(&server, &["sem"]).await;
    assert_eq!((code, doc["full"].as_bool()), (0, Some(true)), "{doc}");

    let rw = client.rw_lock("rw");
    let (r1, r2) = (
        rw.read().acquire().await.unwrap(),
        rw.read().acquire().await.unwrap(),
    );
    let out = server.output(&["status", "rw"]).await;
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let shown = text(&out).0;
    assert!(
        shown.starts_with("read-write lock \"rw\" is held by"),
        "{shown}"
    );
    assert!(shown.contains("  reader:"), "{shown}");
    let (_, doc) = json(&server, &["rw"]).await;
    assert_eq!(doc["kind"], "rwlock", "{doc}");
    assert!(doc["holders"][0]["role"] == "reader", "{doc}");

    let leading = client.election("ele").campaign("the value").await.unwrap();
    let (code, doc) = json(&server, &["ele"]).await;
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["kind"], "election", "{doc}");
    assert_eq!(doc["leader"]["value"], "the value", "{doc}");
    assert_eq!(doc["leader"]["term"], leading.term(), "{doc}");
    let shown = text(&server.output(&["status", "ele"]).await).0;
    assert!(shown.contains("leader value:    the value"), "{shown}");
    leading.resign().await.unwrap();
    let (code, _) = json(&server, &["ele"]).await;
    assert_eq!(code, 1);
    drop((a, b, c, r1, r2));
    client.close().await.unwrap();
}

/// Point 1: without NAME every kind is listed, `--kind` filters, `--older-than` keeps the
/// holdings held longer (exit 0 when some are, 1 when none), and the JSON is one document.
/// On etcd, `status` leaves no lease behind.
async fn status_lists_every_kind(kind: Kind) {
    let server = Server::start(kind).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let _m = client.lock("m").acquire().await.unwrap();
    let _s = permit(&client, "s", 2).await;
    let _r = client.rw_lock("r").write().acquire().await.unwrap();
    let _e = client.election("e").campaign("v").await.unwrap();
    let (code, doc) = json(&server, &[]).await;
    assert_eq!(code, 0, "{doc}");
    let mut listed: Vec<(String, String)> = doc["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].to_string(), l["kind"].to_string()))
        .collect();
    listed.sort();
    let expected: Vec<(String, String)> = [
        ("e", "election"),
        ("m", "mutex"),
        ("r", "rwlock"),
        ("s", "semaphore"),
    ]
    .iter()
    .map(|(n, k)| (format!("{n:?}"), format!("{k:?}")))
    .collect();
    assert_eq!(listed, expected, "{doc}");
    let (code, doc) = json(&server, &["--kind", "semaphore"]).await;
    assert_eq!(code, 0);
    assert_eq!(doc["locks"].as_array().unwrap().len(), 1, "{doc}");
    let out = server.output(&["status", "--older-than", "1h"]).await;
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let out = server
        .output(&["status", "--older-than", "1s", "--kind", "mutex"])
        .await;
    match kind {
        // etcd keeps no time with a key: nothing is known to be older; it says so.
        Kind::Etcd => {
            assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
            assert!(text(&out).1.contains("unknown age"), "{:?}", text(&out));
        }
        _ => {
            assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
            assert!(
                text(&out).0.starts_with("lock \"m\" is held"),
                "{:?}",
                text(&out)
            );
        }
    }
    if let Server::Etcd(etcd) = &server {
        let mut raw = etcd_client::Client::connect(
            etcd.endpoints()
                .split(",")
                .map(str::to_owned)
                .collect::<Vec<_>>(),
            None,
        )
        .await
        .unwrap();
        let before = raw.leases().await.unwrap().leases().len();
        let out = server.output(&["status"]).await;
        assert_eq!(out.status.code(), Some(0));
        let out = server.output(&["status", "m"]).await;
        assert_eq!(out.status.code(), Some(0));
        let after = raw.leases().await.unwrap().leases().len();
        assert_eq!(after, before, "status left a lease behind");
    }
    client.close().await.unwrap();
}

/// Point 3: `unlock --holder ID` removes that permit only; its guard is told at once, the
/// other permit stays. `--force` says how many permits of which semaphore it removes.
async fn unlock_one_holder(kind: Kind) {
    let server = Server::start(kind).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (a, b) = (
        permit(&client, "sem", 2).await,
        permit(&client, "sem", 2).await,
    );
    let out = server
        .output(&["unlock", "sem", "--holder", a.owner(), "--yes"])
        .await;
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(text(&out).0.contains("permit"), "{:?}", text(&out));
    within(5, "the removed permit's holder is told", a.lost()).await;
    assert!(b.is_held());
    let (_, doc) = json(&server, &["sem"]).await;
    assert_eq!(tokens(&doc), vec![b.fencing_token()], "{doc}");
    let out = server.output(&["unlock", "sem", "--force", "--yes"]).await;
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(
        text(&out).0.contains("1 permit(s) of semaphore \"sem\""),
        "{:?}",
        text(&out)
    );
    within(5, "the other holder is told", b.lost()).await;
    client.close().await.unwrap();
}

/// Point 3: `run --permits N --resize` changes a semaphore's N from the command line (without
/// `--resize`, another N is refused: 69); `status` shows the new N while the semaphore has
/// entries.
async fn resize_changes_n_from_the_cli(kind: Kind) {
    let server = Server::start(kind).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let held = permit(&client, "sized", 2).await;
    let out = server
        .output(&["run", "--permits", "3", "sized", "true"])
        .await;
    assert_eq!(out.status.code(), Some(CONNECTION), "{:?}", text(&out));
    let out = server
        .output(&["run", "--permits", "3", "--resize", "sized", "true"])
        .await;
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let (code, doc) = json(&server, &["sized"]).await;
    assert_eq!((code, &doc["permits"]), (1, &serde_json::json!(3)), "{doc}");
    let out = server.output(&["run", "--resize", "sized", "true"]).await;
    assert_eq!(out.status.code(), Some(USAGE), "{:?}", text(&out));
    drop(held);
    client.close().await.unwrap();
}

macro_rules! on_every_service {
    ($($test:ident),*) => {
        mod redis {
            use super::*;
            $(#[tokio::test]
            async fn $test() {
                super::$test(Kind::Redis).await
            })*
        }
        mod zookeeper {
            use super::*;
            $(#[tokio::test]
            async fn $test() {
                super::$test(Kind::ZooKeeper).await
            })*
        }
        mod etcd {
            use super::*;
            $(#[tokio::test]
            async fn $test() {
                super::$test(Kind::Etcd).await
            })*
        }
    };
}

on_every_service!(
    each_kind_speaks_for_itself,
    status_lists_every_kind,
    unlock_one_holder,
    resize_changes_n_from_the_cli
);
