//! Connections the server closes (its `timeout` for idle clients, `CLIENT KILL`) are not
//! errors for the caller: they are replaced, channels are subscribed again, and requests that
//! may be sent twice are sent once more on the fresh connection.
#![cfg(feature = "redis")]

mod common;

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use common::*;
use fencelock::{Error, LockOptions, Released};
use fencelock_testkit::RedisServer;

/// A server that closes clients idle for more than a second, as production servers do with
/// `timeout 300`.
fn server_with_idle_timeout() -> RedisServer {
    RedisServer::builder()
        .config("timeout", "1")
        .start()
        .expect("start redis-server")
}

/// One client connection as `CLIENT LIST` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Conn {
    id: String,
    /// Subscribed to at least one channel.
    subscriber: bool,
}

/// The server's client connections, without the one that asks.
fn connections(server: &RedisServer) -> HashSet<Conn> {
    let list = server
        .command(&["CLIENT", "LIST"])
        .expect("CLIENT LIST")
        .text()
        .unwrap_or_default();
    list.lines()
        .filter(|line| !line.contains("cmd=client|list"))
        .filter_map(|line| {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|f| f.strip_prefix(name).map(str::to_owned))
            };
            Some(Conn {
                id: field("id=")?,
                subscriber: field("sub=").is_some_and(|n| n != "0"),
            })
        })
        .collect()
}

/// Whether none of `ids` is connected any more.
fn all_closed(server: &RedisServer, ids: &HashSet<String>) -> bool {
    connections(server).iter().all(|c| !ids.contains(&c.id))
}

/// The ids of connections whose command the server holds (`CLIENT PAUSE`).
fn held(server: &RedisServer) -> Vec<String> {
    let list = server
        .command(&["CLIENT", "LIST"])
        .expect("CLIENT LIST")
        .text()
        .unwrap_or_default();
    list.lines()
        .filter(|line| line.split(' ').any(|f| f == "flags=b"))
        .filter_map(|line| {
            line.split(' ')
                .find_map(|f| f.strip_prefix("id=").map(str::to_owned))
        })
        .collect()
}

/// Runs `request` while the server holds write commands (the lock scripts are writes) for
/// 300 ms, and kills the connection of the request it holds: the request never runs, and its
/// reply is lost.
async fn cut_off<T>(server: &RedisServer, request: impl Future<Output = T>) -> T {
    server
        .command(&["CLIENT", "PAUSE", "300", "WRITE"])
        .expect("CLIENT PAUSE");
    let cut = async {
        eventually(5.0, "the server holds the request", || {
            !held(server).is_empty()
        })
        .await;
        for id in held(server) {
            server.command(&["CLIENT", "KILL", "ID", &id]).unwrap();
        }
    };
    let (reply, ()) = tokio::join!(within(5.0, "the request", request), cut);
    reply
}

/// A client that sat idle until the server closed its connections acquires, reads the status
/// and releases as if nothing happened (before: `Unavailable … broken pipe`).
#[tokio::test]
async fn a_client_idle_past_the_server_timeout_works_on() {
    let server = server_with_idle_timeout();
    let client = client(&server).await;
    let conns = connections(&server);
    assert_eq!(conns.len(), 2, "a command and a subscriber connection");
    // The subscriber connection listens on the client's own channel (forced unlocks), which
    // exempts it from the server's timeout; the command connection is closed after a second
    // or two of idleness.
    let (sub, cmd): (HashSet<Conn>, HashSet<Conn>) = conns.into_iter().partition(|c| c.subscriber);
    assert_eq!(sub.len(), 1, "{sub:?}");
    let ids: HashSet<String> = cmd.into_iter().map(|c| c.id).collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    eventually(5.0, "the server closed the idle command connection", || {
        all_closed(&server, &ids)
    })
    .await;

    let lock = client.lock("idle");
    let guard = within(5.0, "acquire", lock.acquire()).await.unwrap();
    let status = within(5.0, "status", client.status("idle")).await.unwrap();
    assert!(status.held);
    assert_eq!(status.fencing_token, Some(guard.fencing_token()));
    assert!(
        within(5.0, "lock status", lock.status())
            .await
            .unwrap()
            .held
    );
    let released = within(5.0, "release", guard.release()).await.unwrap();
    assert_eq!(released, Released::Released);
    assert!(!has_key(&server, "idle"));
}

/// A waiter blocked in `acquire()` behind a holder, while the server's timeout closes the
/// command connections of both clients (and the holder's subscriber connection, subscribed to
/// nothing; a subscribed one is exempt from the timeout), gets the lock when the holder
/// releases. Meanwhile the waiter renewed its place in the server's queue on a fresh
/// connection, and the holder's release went out on one too (before: `Unavailable … broken
/// pipe` for both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_survives_the_server_timeout() {
    let server = server_with_idle_timeout();
    let holder = client(&server).await;
    let guard = holder
        .lock("patient")
        .with_options(LockOptions::default().lease(Duration::from_secs(20)))
        .acquire()
        .await
        .unwrap();
    // The waiter renews its place (a 5 s window) every 2.5 s: long enough for the server to
    // close its idle command connection in between.
    let waiter = client(&server).await;
    let lock = waiter.lock("patient");
    let task = tokio::spawn(async move { lock.acquire().await });
    eventually(5.0, "the waiter took its place", || {
        queue_len(&server, "patient") == 1
    })
    .await;
    let commands: HashSet<String> = connections(&server)
        .into_iter()
        .filter(|c| !c.subscriber)
        .map(|c| c.id)
        .collect();
    assert!(commands.len() >= 2, "{commands:?}");
    let evalsha = server.command_calls("evalsha");
    eventually(
        5.0,
        "the server closed the idle command connections",
        || all_closed(&server, &commands),
    )
    .await;
    eventually(5.0, "the waiter renewed its place (or failed)", || {
        task.is_finished() || server.command_calls("evalsha") > evalsha
    })
    .await;
    assert!(!task.is_finished(), "the waiter gave up: {:?}", task.await);

    let token = guard.fencing_token();
    let released = within(5.0, "the holder's release", guard.release()).await;
    assert_eq!(released.unwrap(), Released::Released);
    let next = within(3.0, "the waiter gets the lock", task)
        .await
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > token);
    assert_eq!(next.release().await.unwrap(), Released::Released);
}

/// `CLIENT KILL` of a waiting client's command and subscriber connections: the waiter keeps
/// waiting (before: its retry after the lost subscription met the dead command connection,
/// `Unavailable … broken pipe`), its channel is subscribed again, and the holder's release
/// wakes it long before its bound (the holder's 20 s lease; its own place lasts 20 s too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_survives_client_kill() {
    let server = server();
    let holder = client(&server).await;
    let twenty = LockOptions::default().lease(Duration::from_secs(20));
    let guard = holder
        .lock("killed")
        .with_options(twenty.clone())
        .acquire()
        .await
        .unwrap();
    let before = connections(&server);
    let waiter = client(&server).await;
    let lock = waiter.lock("killed").with_options(twenty);
    let task = tokio::spawn(async move { lock.acquire().await });
    eventually(5.0, "the waiter took its place", || {
        queue_len(&server, "killed") == 1
    })
    .await;
    let mut theirs: Vec<Conn> = connections(&server).difference(&before).cloned().collect();
    // The command connection first: the lost subscription then makes the waiter ask again at
    // once, on a command connection that is already gone.
    theirs.sort_by_key(|c| c.subscriber);
    assert_eq!(theirs.len(), 2, "the waiter's connections: {theirs:?}");
    assert!(theirs.iter().any(|c| c.subscriber), "{theirs:?}");
    let subscribes = server.command_calls("subscribe");
    for conn in &theirs {
        let killed = server.command(&["CLIENT", "KILL", "ID", &conn.id]).unwrap();
        assert_eq!(killed.int(), Some(1));
    }
    eventually(5.0, "the waiter subscribed again", || {
        server.command_calls("subscribe") > subscribes
    })
    .await;
    assert!(!task.is_finished(), "the waiter gave up: {:?}", task.await);

    let token = guard.fencing_token();
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    let next = within(3.0, "the release wakes the waiter", task)
        .await
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > token);
    assert_eq!(next.release().await.unwrap(), Released::Released);
}

/// The same, but the holder's release comes right after the kill, racing the waiter's
/// reconnection and resubscription: the waiter either hears of the release or finds the lock
/// handed to its place when it asks again after the lost subscription. Never a wait for its
/// 20 s bound, never an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_right_after_client_kill_reaches_the_waiter() {
    let server = server();
    let holder = client(&server).await;
    let twenty = LockOptions::default().lease(Duration::from_secs(20));
    let guard = holder
        .lock("raced")
        .with_options(twenty.clone())
        .acquire()
        .await
        .unwrap();
    let before = connections(&server);
    let waiter = client(&server).await;
    let lock = waiter.lock("raced").with_options(twenty);
    let task = tokio::spawn(async move { lock.acquire().await });
    eventually(5.0, "the waiter took its place", || {
        queue_len(&server, "raced") == 1
    })
    .await;
    let mut theirs: Vec<Conn> = connections(&server).difference(&before).cloned().collect();
    // The command connection first: the lost subscription then makes the waiter ask again at
    // once, on a command connection that is already gone.
    theirs.sort_by_key(|c| c.subscriber);
    assert_eq!(theirs.len(), 2, "the waiter's connections: {theirs:?}");
    for conn in &theirs {
        server.command(&["CLIENT", "KILL", "ID", &conn.id]).unwrap();
    }
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    let next = within(3.0, "the waiter gets the lock", task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.release().await.unwrap(), Released::Released);
}

/// Renewals of a held lock (600 ms lease, renewed every 200 ms) while the client's command
/// connection is killed every 50 ms, for 2 s: each renewal that meets a dead connection is
/// sent once more on the fresh one, and the lock is never lost. Before, every renewal met a
/// connection killed since the previous request, and the lock was lost within a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_survive_client_kill() {
    let server = server();
    let client = client_with(&server, short_lease(600)).await;
    let guard = client.lock("renewed").acquire().await.unwrap();
    assert!(guard.is_renewed());
    let killing = async {
        let mut kills = 0;
        let mut every = tokio::time::interval(Duration::from_millis(50));
        for _ in 0..40 {
            every.tick().await;
            let killed = server
                .command(&["CLIENT", "KILL", "TYPE", "normal"])
                .unwrap();
            kills += killed.int().unwrap_or(0);
        }
        kills
    };
    let kills = tokio::select! {
        _ = guard.lost() => panic!("lock lost: {:?}", guard.lost_reason()),
        kills = within(10.0, "40 kills", killing) => kills,
    };
    assert!(kills >= 20, "only {kills} connections killed");
    assert!(guard.is_held());
    let status = within(5.0, "status", client.status("renewed"))
        .await
        .unwrap();
    assert_eq!(status.fencing_token, Some(guard.fencing_token()));
    assert_eq!(guard.release().await.unwrap(), Released::Released);
}

/// Requests whose connection is killed while the server holds them (so they never ran, and
/// their replies are lost): an acquire (checked by its attempt id, sent again with the same
/// one) and a status are sent once more on a fresh connection and succeed. A release by owner
/// only is not: had it run, a second one could give back a second hold. Its caller gets
/// `Unavailable`, and the lock is still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_cut_off_in_flight_are_resent_if_they_may_run_twice() {
    let server = server();
    let client = client(&server).await;
    let lock = client.lock("cut");

    let guard = cut_off(&server, lock.acquire()).await.unwrap();
    assert_eq!(guard.hold_count(), 1);
    let status = cut_off(&server, lock.status()).await.unwrap();
    assert_eq!(status.owners, vec![(lock.owner().to_owned(), 1)]);
    assert_eq!(status.fencing_token, Some(guard.fencing_token()));

    let release = cut_off(&server, lock.release()).await;
    assert!(
        matches!(release, Err(Error::Unavailable { .. })),
        "{release:?}"
    );
    let status = within(5.0, "status", lock.status()).await.unwrap();
    assert_eq!(status.owners, vec![(lock.owner().to_owned(), 1)]);
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    assert!(!has_key(&server, "cut"));
}
