//! ZooKeeper as the lock service, against real servers from the test kit (JVMs: few starts,
//! each shared by the assertions of one test).
#![cfg(feature = "zookeeper")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::within;
use fencelock::{Client, ClientOptions, Error, InputError, LockOptions, Released};
use fencelock_testkit::{CuratorLock, ZooKeeperServer};
use tokio::time::Instant;

fn server() -> ZooKeeperServer {
    ZooKeeperServer::start().expect("start a ZooKeeper server")
}

/// A client whose session timeout (the lease of its locks) is `ms`.
async fn client(server: &ZooKeeperServer, ms: u64) -> Client {
    let options = ClientOptions::default().default_lease(Duration::from_millis(ms));
    Client::connect_with(&server.url(), options)
        .await
        .expect("connect to ZooKeeper")
}

/// The lock's children, read with a client of its own (not the library under test).
async fn children(server: &ZooKeeperServer, name: &str) -> Vec<String> {
    let zk = zookeeper_client::Client::connect(&server.connect_string())
        .await
        .expect("raw ZooKeeper client");
    match zk.list_children(&format!("/fencelock/{name}")).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list children: {e}"),
    }
}

/// Mutual exclusion across clients with strictly increasing tokens, re-entry, and the
/// input the service refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exclusion_reentry_tokens_and_refusals() {
    let zk = server();
    within(60.0, "exclusion", async {
        let clients = [
            client(&zk, 10_000).await,
            client(&zk, 10_000).await,
            client(&zk, 10_000).await,
        ];
        let inside = Arc::new(AtomicBool::new(false));
        let tokens = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for c in &clients {
            let (lock, inside, tokens) = (c.lock("excl"), inside.clone(), tokens.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let g = lock.acquire().await.expect("acquire");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
                    tokens.lock().unwrap().push(g.fencing_token());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    inside.store(false, Ordering::SeqCst);
                    assert_eq!(g.release().await.expect("release"), Released::Released);
                }
            }));
        }
        for t in tasks {
            t.await.expect("worker");
        }
        let tokens = tokens.lock().unwrap().clone();
        assert_eq!(tokens.len(), 15);
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
        assert!(children(&zk, "excl").await.is_empty());

        // Re-entry: counted in the client, one token, each guard gives back its own hold.
        let lock = clients[0].lock("re");
        let first = lock.acquire().await.unwrap();
        let second = lock.clone().acquire().await.unwrap();
        assert_eq!((first.hold_count(), second.hold_count()), (1, 2));
        assert_eq!(first.fencing_token(), second.fencing_token());
        assert_eq!(children(&zk, "re").await.len(), 1);
        let status = clients[1].status("re").await.unwrap();
        assert!(status.held);
        assert_eq!(status.owners, vec![(lock.owner().to_owned(), 1)]);
        assert_eq!(status.fencing_token, Some(first.fencing_token()));
        assert_eq!(
            first.release().await.unwrap(),
            Released::StillHeld { count: 1 }
        );
        assert!(second.is_held());

        // Refused: extend, per-lock leases, Redis options, foreign re-entry, bad names.
        assert!(matches!(
            second.extend(Duration::from_secs(5)).await,
            Err(Error::Unsupported { .. })
        ));
        let foreign = clients[1].lock("re").with_owner(lock.owner());
        assert!(matches!(
            foreign.acquire().await,
            Err(Error::Unsupported { .. })
        ));
        assert!(matches!(
            foreign.release().await,
            Err(Error::Unsupported { .. })
        ));
        assert_eq!(
            children(&zk, "re").await.len(),
            1,
            "the refused attempt left a node"
        );
        let fixed = LockOptions::default().lease(Duration::from_secs(1));
        let acks = LockOptions::default().min_replica_acks(1, Duration::from_millis(10));
        for options in [fixed, acks] {
            let r = clients[1]
                .lock("x")
                .with_options(options)
                .try_acquire()
                .await;
            assert!(matches!(
                r,
                Err(Error::InvalidInput(InputError::InvalidOption { .. }))
            ));
        }
        for bad in ["a/b", "..", "a\u{1}"] {
            let r = clients[1].lock(bad).try_acquire().await;
            assert!(
                matches!(r, Err(Error::InvalidInput(InputError::InvalidName { .. }))),
                "{bad:?}"
            );
        }
        let two = [zk.url(), zk.url()];
        let urls: Vec<&str> = two.iter().map(String::as_str).collect();
        assert!(matches!(
            Client::connect_all(&urls).await,
            Err(Error::InvalidInput(InputError::InvalidUrl { .. }))
        ));
        assert_eq!(second.release().await.unwrap(), Released::Released);
        assert!(children(&zk, "re").await.is_empty());
    })
    .await;
}

/// try_acquire, a timeout and a dropped acquire leave no node; a waiter is woken by the
/// release itself; status counts waiters; force_unlock hands over to the next waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_wakeups_cleanup_and_force_unlock() {
    let zk = server();
    within(60.0, "waiting", async {
        let (a, b, c) = (
            client(&zk, 20_000).await,
            client(&zk, 20_000).await,
            client(&zk, 20_000).await,
        );
        let held = a.lock("w").acquire().await.unwrap();
        assert!(b.lock("w").try_acquire().await.unwrap().is_err());
        assert_eq!(children(&zk, "w").await.len(), 1, "try_acquire left a node");
        let timed = b
            .lock("w")
            .acquire_timeout(Duration::from_millis(300))
            .await;
        assert!(matches!(timed, Err(Error::Timeout { .. })), "{timed:?}");
        assert_eq!(children(&zk, "w").await.len(), 1, "the timeout left a node");
        let dropped = tokio::spawn({
            let lock = b.lock("w");
            async move { lock.acquire().await }
        });
        while children(&zk, "w").await.len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        dropped.abort();
        while children(&zk, "w").await.len() > 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // Woken by the release, not by a timer (the session timeout is 20 s).
        let waiter = tokio::spawn({
            let lock = b.lock("w");
            async move { (lock.acquire().await, Instant::now()) }
        });
        while children(&zk, "w").await.len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let status = c.status("w").await.unwrap();
        assert_eq!(status.waiters.len(), 1);
        let released = Instant::now();
        held.release().await.unwrap();
        let (got, at) = waiter.await.unwrap();
        let got = got.expect("the waiter acquires");
        assert!(
            at - released < Duration::from_secs(2),
            "woken after {:?}",
            at - released
        );

        // A forced unlock deletes the holder's node: the holder is told, the next waits no more.
        let next = tokio::spawn({
            let lock = c.lock("w");
            async move { lock.acquire().await }
        });
        while children(&zk, "w").await.len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let removed = a.force_unlock("w").await.unwrap();
        assert_eq!(removed.len(), 1);
        within(5.0, "the holder is told", got.lost()).await;
        let taken = within(5.0, "hand-over", next).await.unwrap().unwrap();
        assert!(taken.fencing_token() > got.fencing_token());
        taken.release().await.unwrap();
        assert!(children(&zk, "w").await.is_empty());
    })
    .await;
}

/// A holder whose server stops answering is told (`lost()`) before the server can expire its
/// session and hand the lock to another client.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paused_server_fires_lost_before_another_client_acquires() {
    let zk = server();
    within(60.0, "pause", async {
        let (a, b) = (client(&zk, 2_000).await, client(&zk, 20_000).await);
        let held = a.lock("p").acquire().await.unwrap();
        let waiter = tokio::spawn({
            let lock = b.lock("p");
            async move {
                let g = lock.acquire_timeout(Duration::from_secs(40)).await;
                (g, Instant::now())
            }
        });
        while children(&zk, "p").await.len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        zk.pause();
        let paused = Instant::now();
        within(5.0, "lost while the server is paused", held.lost()).await;
        let lost_at = Instant::now();
        assert!(lost_at - paused <= Duration::from_millis(2_000));
        tokio::time::sleep(Duration::from_millis(3_000)).await;
        zk.resume();
        let (got, acquired_at) = waiter.await.unwrap();
        let got = got.expect("the waiter gets the lock once the session expired");
        assert!(lost_at < acquired_at);
        assert!(got.fencing_token() > held.fencing_token());
        assert!(!held.is_held());
        got.release().await.unwrap();
        drop(held);
    })
    .await;
}

/// Curator's InterProcessMutex and fencelock exclude each other on the same path.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn curator_interop() {
    let zk = server();
    within(90.0, "curator", async {
        let c = client(&zk, 10_000).await;
        let mut curator = CuratorLock::spawn(&zk.connect_string(), "/fencelock/job").unwrap();
        curator.wait_acquired(Duration::from_secs(30)).unwrap();
        assert!(c.lock("job").try_acquire().await.unwrap().is_err());
        let waiting = tokio::spawn({
            let lock = c.lock("job");
            async move { lock.acquire().await }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !waiting.is_finished(),
            "fencelock took a lock Curator holds"
        );
        tokio::task::spawn_blocking(move || curator.release().map(|()| curator))
            .await
            .unwrap()
            .unwrap();
        let guard = within(10.0, "after Curator's release", waiting)
            .await
            .unwrap()
            .unwrap();

        let curator = CuratorLock::spawn(&zk.connect_string(), "/fencelock/job").unwrap();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert!(
            curator.acquired().is_none(),
            "Curator took a lock fencelock holds"
        );
        guard.release().await.unwrap();
        tokio::task::spawn_blocking(move || curator.wait_acquired(Duration::from_secs(15)))
            .await
            .unwrap()
            .expect("Curator acquires after fencelock's release");
    })
    .await;
}
