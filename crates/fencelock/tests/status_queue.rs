//! `status` shows the server's wait queue: the waiters in arrival order with the age of each
//! place and how long it stays valid, places whose window ran out (dead waiters) marked as
//! expired, and queue entries that cannot be read shown as such, never as a failed status.
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use common::*;
use fencelock::{LockOptions, Released, Waiter};
use fencelock_testkit::RedisServer;

/// Queues `owner` in the wait queue of `name` by hand, with `place` as its stored place
/// (`None`: no place at all), as a waiter that died (or another program) would leave it.
fn queue_by_hand(server: &RedisServer, name: &str, owner: &str, place: Option<&str>) {
    server
        .command(&["RPUSH", &format!("fencelock:{{{name}}}:queue"), owner])
        .unwrap();
    if let Some(place) = place {
        server
            .command(&[
                "HSET",
                &format!("fencelock:{{{name}}}:waiting"),
                owner,
                place,
            ])
            .unwrap();
    }
}

fn owners(waiters: &[Waiter]) -> Vec<&str> {
    waiters.iter().map(|w| w.owner.as_str()).collect()
}

/// A live place: valid, readable, and `age + remaining == window` (both from one server
/// clock reading).
fn assert_live(w: &Waiter, window: Duration) {
    assert!(!w.expired, "{w:?}");
    assert_eq!(w.unreadable, None, "{w:?}");
    assert_eq!(w.window, window, "{w:?}");
    assert_eq!(w.age + w.remaining, window, "{w:?}");
    // The place was taken (or renewed) a moment ago: waiters renew at half the window.
    assert!(w.age < Duration::from_secs(3), "{w:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_the_waiters_in_arrival_order_with_their_places() {
    let server = server();
    let holder = client(&server).await;
    let guard = holder.lock("line").acquire().await.unwrap();
    assert_eq!(holder.status("line").await.unwrap().waiters, vec![]);

    // Two waiters of two clients: one renewed by its watchdog (a 5 s place window), one with
    // a fixed 20 s lease (the lease is its window).
    let (a, b) = (client(&server).await, client(&server).await);
    let first = a.lock("line");
    let second = b
        .lock("line")
        .with_options(LockOptions::default().lease(Duration::from_secs(20)));
    let owners_in_order = vec![first.owner().to_owned(), second.owner().to_owned()];
    let mut tasks = Vec::new();
    for (i, lock) in [first, second].into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let g = lock.acquire().await.unwrap();
            assert_eq!(g.release().await.unwrap(), Released::Released);
        }));
        eventually(5.0, "the waiter took its place", || {
            queue_len(&server, "line") == i as i64 + 1
        })
        .await;
    }

    let status = within(5.0, "status", holder.status("line")).await.unwrap();
    assert!(status.held);
    assert_eq!(owners(&status.waiters), owners_in_order);
    assert_live(&status.waiters[0], Duration::from_secs(5));
    assert_live(&status.waiters[1], Duration::from_secs(20));
    // The handle's status reads the same queue.
    let status = within(5.0, "status", holder.lock("line").status())
        .await
        .unwrap();
    assert_eq!(owners(&status.waiters), owners_in_order);

    // Each is served in turn; then the queue is empty.
    guard.release().await.unwrap();
    for task in tasks {
        within(10.0, "every waiter served", task).await.unwrap();
    }
    let status = holder.status("line").await.unwrap();
    assert!(!status.held);
    assert_eq!(status.waiters, vec![]);
}

/// A waiter that died while waiting (here: its place written by hand, 10 s old with a 1 s
/// window) stays listed, marked expired, ahead of a live waiter; the release skips it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiters_place_is_listed_as_expired() {
    let server = server();
    let holder = client(&server).await;
    let guard = holder.lock("stale").acquire().await.unwrap();
    let since = server_micros(&server) - 10_000_000;
    queue_by_hand(
        &server,
        "stale",
        "dead",
        Some(&format!("7 1000 {since} 0badc0de")),
    );
    // An owner the queue names without a place (the release skips it too).
    queue_by_hand(&server, "stale", "gone", None);
    let waiter = client(&server).await;
    let live = waiter.lock("stale");
    let live_owner = live.owner().to_owned();
    let task = tokio::spawn(async move { live.acquire().await.unwrap() });
    eventually(5.0, "the live waiter queued behind", || {
        queue_len(&server, "stale") == 3
    })
    .await;

    let status = within(5.0, "status", holder.status("stale")).await.unwrap();
    assert_eq!(
        owners(&status.waiters),
        ["dead", "gone", live_owner.as_str()]
    );
    let dead = &status.waiters[0];
    assert!(dead.expired, "{dead:?}");
    assert_eq!(dead.unreadable, None);
    assert_eq!(dead.window, Duration::from_secs(1));
    assert_eq!(dead.remaining, Duration::ZERO);
    assert!(
        dead.age >= Duration::from_secs(10) && dead.age < Duration::from_secs(60),
        "{dead:?}"
    );
    let gone = &status.waiters[1];
    assert!(gone.expired, "{gone:?}");
    assert_eq!(gone.unreadable.as_deref(), Some("no place recorded"));
    assert_eq!(gone.age, Duration::ZERO);
    assert_live(&status.waiters[2], Duration::from_secs(5));

    // The release hands the lock to the live waiter, past both.
    guard.release().await.unwrap();
    let next = within(5.0, "the live waiter is served", task)
        .await
        .unwrap();
    let status = holder.status("stale").await.unwrap();
    assert_eq!(status.owners, vec![(live_owner, 1)]);
    assert_eq!(status.waiters, vec![]);
    next.release().await.unwrap();
}

/// Places that are not in the `attempt window_ms since_us` format, or stamped ahead of the
/// server's clock, are reported, not a failed status; missing queue keys are an empty queue.
#[tokio::test]
async fn odd_places_are_reported_without_failing_the_status() {
    let server = server();
    let client = client(&server).await;
    let status = client.status("nothing").await.unwrap();
    assert!(!status.held);
    assert_eq!(status.waiters, vec![]);

    let ahead = server_micros(&server) + 60_000_000;
    let cases = [
        ("words", "not a place".to_owned()),
        ("short", "1 1000".to_owned()),
        ("signed", "1 -1000 5".to_owned()),
        ("huge", "1 1000 99999999999999999999999".to_owned()),
        ("empty", String::new()),
        ("ahead", format!("3 1000 {ahead} 0badc0de")),
    ];
    for (owner, place) in &cases {
        queue_by_hand(&server, "odd", owner, Some(place));
    }
    let status = within(5.0, "status", client.status("odd")).await.unwrap();
    assert!(!status.held);
    let expected: Vec<&str> = cases.iter().map(|(o, _)| *o).collect();
    assert_eq!(owners(&status.waiters), expected);
    for (w, (_, place)) in status.waiters.iter().zip(&cases).take(5) {
        assert!(w.expired, "{w:?}");
        let why = w.unreadable.as_deref().unwrap_or_else(|| panic!("{w:?}"));
        assert!(why.contains(&format!("{place:?}")), "{w:?}");
    }
    // A place stamped a minute ahead (a clock that went back): no age, and it stays valid
    // for its window plus that minute, as the release script counts it.
    let ahead = &status.waiters[5];
    assert!(!ahead.expired, "{ahead:?}");
    assert_eq!(ahead.age, Duration::ZERO);
    assert!(ahead.remaining > Duration::from_secs(60), "{ahead:?}");
}

/// RedLock keeps no queue on the servers: a waiter is not listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_status_has_no_waiters() {
    let servers = servers(3);
    let holder = redlock(&servers, Default::default()).await;
    let guard = holder.lock("quorum").acquire().await.unwrap();
    let waiter = redlock(&servers, Default::default()).await;
    // Each client subscribed its own channel when it connected.
    let subscribed: Vec<u64> = servers
        .iter()
        .map(|s| s.command_calls("subscribe"))
        .collect();
    let lock = waiter.lock("quorum");
    let task = tokio::spawn(async move { lock.acquire().await.unwrap() });
    eventually(5.0, "the waiter subscribed", || {
        servers
            .iter()
            .zip(&subscribed)
            .filter(|(s, before)| s.command_calls("subscribe") > **before)
            .count()
            >= 2
    })
    .await;
    let status = within(5.0, "status", holder.status("quorum"))
        .await
        .unwrap();
    assert!(status.held);
    assert_eq!(status.waiters, vec![]);
    guard.release().await.unwrap();
    let next = within(10.0, "the waiter is served", task).await.unwrap();
    next.release().await.unwrap();
}

/// On a Redis Cluster the queue keys live in the lock's slot: the status script reads them
/// there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_status_lists_its_waiters() {
    let cluster = tokio::task::spawn_blocking(|| fencelock_testkit::RedisCluster::start().unwrap())
        .await
        .unwrap();
    let holder = fencelock::Client::connect(&cluster.url()).await.unwrap();
    let waiter = fencelock::Client::connect(&cluster.url()).await.unwrap();
    let guard = holder.lock("orders:7").acquire().await.unwrap();
    let lock = waiter.lock("orders:7");
    let owner = lock.owner().to_owned();
    let task = tokio::spawn(async move { lock.acquire().await.unwrap() });
    let master = cluster.master_of(cluster.slot("orders:7")).unwrap();
    eventually(10.0, "the waiter took its place", || {
        queue_len(master, "orders:7") == 1
    })
    .await;
    let status = within(5.0, "status", holder.status("orders:7"))
        .await
        .unwrap();
    assert_eq!(owners(&status.waiters), [owner.as_str()]);
    assert_live(&status.waiters[0], Duration::from_secs(5));
    guard.release().await.unwrap();
    let next = within(10.0, "the waiter is served", task).await.unwrap();
    next.release().await.unwrap();
}
