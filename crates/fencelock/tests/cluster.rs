//! Redis Cluster: one slot per lock, sharded pub/sub, resharding and failover while held.
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use common::*;
use fencelock::{Client, ClientOptions, LockOptions, Released};
use fencelock_testkit::RedisCluster;

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
