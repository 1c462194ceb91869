//! Sentinel: the client follows the master through a failover; WAIT-based replica acks.

mod common;

use std::time::Duration;

use common::*;
use fencelock::{Client, ClientOptions, Error, LockOptions, Released};
use fencelock_testkit::SentinelSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_waiters_follow_a_sentinel_failover() {
    let set = SentinelSet::start().unwrap();
    let options = ClientOptions::default().default_lease(Duration::from_millis(1500));
    let holder = Client::connect_with(&set.url(), options.clone())
        .await
        .unwrap();
    let waiter_client = Client::connect_with(&set.url(), options).await.unwrap();
    let first_master = set.master_port().unwrap();
    assert!(holder.server().contains("mymaster"));

    let guard = holder.lock("failover").acquire().await.unwrap();
    let token = guard.fencing_token();
    let waiter = waiter_client.lock("failover");
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    // Let the lock replicate, then fail over while it is held and the waiter waits.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let new_master = tokio::task::spawn_blocking(move || {
        let port = set.failover().unwrap();
        (set, port)
    })
    .await
    .unwrap();
    let (set, new_master) = new_master;
    assert_ne!(new_master, first_master);

    // The watchdog finds the new master (READONLY from the demoted one) and keeps the lock.
    tokio::select! {
        _ = guard.lost() => panic!("lost in the failover: {:?}", guard.lost_reason()),
        _ = tokio::time::sleep(Duration::from_millis(2500)) => {}
    }
    assert!(guard.is_held());
    let status = holder.status("failover").await.unwrap();
    assert!(status.held, "{status:?}");
    assert!(!waiting.is_finished());

    // Release on the new master wakes the waiter, which gets a larger token.
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    let next = within(10.0, "waiter after failover", waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
    drop(set);
}

#[tokio::test]
async fn replica_acknowledgement_is_awaited_or_the_lock_is_given_back() {
    let set = SentinelSet::start().unwrap();
    let client = Client::connect(&set.url()).await.unwrap();
    let acked = client
        .lock("acked")
        .with_options(LockOptions::default().min_replica_acks(1, Duration::from_millis(500)));
    let guard = acked.acquire().await.unwrap();
    // The replica has it.
    let replica = &set.servers[1];
    assert_eq!(
        replica
            .command(&["EXISTS", "fencelock:{acked}"])
            .unwrap()
            .int(),
        Some(1)
    );
    guard.release().await.unwrap();

    // Two replicas cannot acknowledge: a clear error, and no lock left behind.
    let two = client
        .lock("unacked")
        .with_options(LockOptions::default().min_replica_acks(2, Duration::from_millis(200)));
    match two.acquire().await {
        Err(Error::ReplicaAcks {
            lock,
            acked,
            needed,
            ..
        }) => {
            assert_eq!((lock.as_str(), acked, needed), ("unacked", 1, 2));
        }
        other => panic!("expected ReplicaAcks, got {other:?}"),
    }
    assert!(!client.status("unacked").await.unwrap().held);

    // Bad settings are input errors.
    let zero = client
        .lock("x")
        .with_options(LockOptions::default().min_replica_acks(0, Duration::from_millis(10)));
    assert!(matches!(zero.acquire().await, Err(Error::InvalidInput(_))));
}
