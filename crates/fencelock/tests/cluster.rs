//! Redis Cluster: one slot per lock, sharded pub/sub, resharding and failover while held.
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use common::*;
use fencelock::{Client, ClientOptions, LockOptions, Released};
use fencelock_testkit::{RedisCluster, Reply};

async fn start() -> (RedisCluster, ClientOptions) {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start().unwrap())
        .await
        .unwrap();
    let options = ClientOptions::default().default_lease(Duration::from_millis(1500));
    (cluster, options)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_lock_lives_in_one_slot_and_wakes_waiters_through_its_shard() {
    let (cluster, options) = start().await;
    let client = Client::connect_with(&cluster.url(), options.clone())
        .await
        .unwrap();
    let other = Client::connect_with(&cluster.url(), options).await.unwrap();
    let lock = client.lock("orders:42");
    let guard = lock.acquire().await.unwrap();
    let again = lock.acquire().await.unwrap();
    assert_eq!(again.hold_count(), 2);
    again.release().await.unwrap();

    // Both keys of the lock sit on the master of the name's slot.
    let slot = cluster.slot("orders:42");
    let master = cluster.master_of(slot).unwrap();
    assert_eq!(
        master
            .command(&["EXISTS", "fencelock:{orders:42}"])
            .unwrap()
            .int(),
        Some(1)
    );
    assert_eq!(
        master
            .command(&["EXISTS", "fencelock:{orders:42}:fence"])
            .unwrap()
            .int(),
        Some(1)
    );

    // A waiter on another client subscribes on that shard and is woken by the release.
    let waiter = other.lock("orders:42");
    let token = guard.fencing_token();
    let base = master.command_calls("evalsha");
    let waiting = tokio::spawn(async move { waiter.acquire().await.unwrap() });
    // Its attempt, SSUBSCRIBE, and one attempt more (a release in between must not be missed).
    eventually(10.0, "waiter subscribed on the shard", || {
        master.command_calls("ssubscribe") >= 1 && master.command_calls("evalsha") >= base + 2
    })
    .await;
    let before = master.command_calls("evalsha");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(master.command_calls("evalsha"), before, "the waiter polled");
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    let next = within(5.0, "waiter woken", waiting).await.unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_survives_the_resharding_of_its_slot() {
    let (cluster, options) = start().await;
    let client = Client::connect_with(&cluster.url(), options).await.unwrap();
    let guard = client.lock("moving").acquire().await.unwrap();
    let token = guard.fencing_token();
    let slot = cluster.slot("moving");
    let from = cluster.master_of(slot).unwrap().port();
    let to = cluster
        .topology()
        .into_iter()
        .find(|n| n.master && n.port != from)
        .unwrap()
        .port;
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.migrate_slot(slot, to).unwrap();
        cluster
    })
    .await
    .unwrap();
    assert_eq!(cluster.master_of(slot).unwrap().port(), to);
    let target = cluster.node(to).unwrap();
    assert_eq!(
        target
            .command(&["EXISTS", "fencelock:{moving}"])
            .unwrap()
            .int(),
        Some(1)
    );

    // Renewals follow MOVED to the new owner for several lease periods.
    tokio::select! {
        _ = guard.lost() => panic!("lost in the resharding: {:?}", guard.lost_reason()),
        _ = tokio::time::sleep(Duration::from_millis(3500)) => {}
    }
    assert!(guard.is_held());
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    for node in &cluster.nodes {
        assert_ne!(
            node.command(&["EXISTS", "fencelock:{moving}"])
                .ok()
                .and_then(|r| r.int()),
            Some(1)
        );
    }
    let again = client.lock("moving").try_acquire().await.unwrap().unwrap();
    assert!(again.fencing_token() > token);
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_survives_a_failover_of_its_master() {
    let (cluster, options) = start().await;
    let client = Client::connect_with(&cluster.url(), options).await.unwrap();
    let lock = client
        .lock("failing")
        .with_options(LockOptions::default().min_replica_acks(1, Duration::from_millis(1000)));
    let guard = lock.acquire().await.unwrap();
    let token = guard.fencing_token();
    let master = cluster.master_of(cluster.slot("failing")).unwrap().port();
    let (cluster, promoted) = tokio::task::spawn_blocking(move || {
        let promoted = cluster.failover(master).unwrap();
        (cluster, promoted)
    })
    .await
    .unwrap();
    assert_ne!(promoted, master);
    tokio::select! {
        _ = guard.lost() => panic!("lost in the failover: {:?}", guard.lost_reason()),
        _ = tokio::time::sleep(Duration::from_millis(3500)) => {}
    }
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    let next = client.lock("failing").acquire().await.unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
    drop(cluster);
}

/// Two lock names whose slots differ but have the same master.
fn two_slots_on_one_master(cluster: &RedisCluster) -> (String, String, u16) {
    let mut seen: Vec<(String, u16, u16)> = Vec::new();
    for i in 0..2_000 {
        let name = format!("job:{i}");
        let slot = cluster.slot(&name);
        let port = cluster.master_of(slot).expect("a master").port();
        if let Some((other, _, _)) = seen.iter().find(|(_, s, p)| *p == port && *s != slot) {
            return (other.clone(), name, port);
        }
        seen.push((name, slot, port));
    }
    panic!("no two slots on one master among 2000 names");
}

/// The ids of a server's clients with shard subscriptions (`ssub` in `CLIENT LIST`).
fn shard_subscribers(server: &fencelock_testkit::RedisServer) -> Vec<String> {
    let list = server.command(&["CLIENT", "LIST"]).unwrap().text();
    let list = list.unwrap_or_default();
    list.lines()
        .filter(|l| {
            l.split(' ')
                .any(|f| f.starts_with("ssub=") && f != "ssub=0")
        })
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(str::to_owned)
        .collect()
}

/// A client waiting on two locks whose slots share a master has its connection to that
/// master dropped (as a server `timeout` or a network reset would). It subscribes again lock
/// by lock (Redis refuses one SSUBSCRIBE across slots: CROSSSLOT, which is what redis-rs
/// sends for all of a node's channels), so a release then wakes its waiter in milliseconds,
/// not at the waiter's bound (its place's renewal, seconds later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_two_slots_of_one_master_are_woken_after_a_reconnection() {
    let (cluster, _) = start().await;
    let options = ClientOptions::default().default_lease(Duration::from_secs(20));
    let holder = Client::connect_with(&cluster.url(), options.clone())
        .await
        .unwrap();
    let waiter = Client::connect_with(&cluster.url(), options).await.unwrap();
    let (a, b, port) = two_slots_on_one_master(&cluster);
    let master = cluster.node(port).unwrap();
    let (held_a, held_b) = (
        holder.lock(&a).acquire().await.unwrap(),
        holder.lock(&b).acquire().await.unwrap(),
    );
    let waiting_a = tokio::spawn({
        let lock = waiter.lock(&a);
        async move { lock.acquire().await }
    });
    let waiting_b = tokio::spawn({
        let lock = waiter.lock(&b);
        async move { lock.acquire().await }
    });
    // `PUBSUB SHARDNUMSUB channel` answers [channel, count].
    let numsub = |name: &str| {
        let channel = format!("fencelock:{{{name}}}:released");
        match master
            .command(&["PUBSUB", "SHARDNUMSUB", &channel])
            .unwrap()
        {
            Reply::Array(Some(pair)) => pair.get(1).and_then(Reply::int).unwrap_or(0),
            _ => 0,
        }
    };
    eventually(10.0, "both waiters subscribed", || {
        numsub(&a) >= 1 && numsub(&b) >= 1
    })
    .await;
    for id in shard_subscribers(master) {
        master.command(&["CLIENT", "KILL", "ID", &id]).unwrap();
    }
    eventually(10.0, "subscribed again, lock by lock", || {
        numsub(&a) >= 1 && numsub(&b) >= 1
    })
    .await;
    let released = tokio::time::Instant::now();
    held_a.release().await.unwrap();
    let got = within(5.0, "the waiter on a", waiting_a)
        .await
        .unwrap()
        .unwrap();
    assert!(
        released.elapsed() < Duration::from_millis(1500),
        "woken after {:?}",
        released.elapsed()
    );
    got.release().await.unwrap();
    held_b.release().await.unwrap();
    within(5.0, "the waiter on b", waiting_b)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
}
