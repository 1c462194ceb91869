//! Sentinel: the client follows the master through a failover; WAIT-based replica acks.
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use common::*;
use fencelock::{Client, ClientOptions, Error, InputError, LockOptions, Released};
use fencelock_testkit::SentinelSet;

/// A held lock that replicated survives `SENTINEL FAILOVER`: its renewals reach the new
/// master and a waiter gets it there afterwards. The lease outlasts the failover with room
/// to spare: renewals the old master took after the promotion never reach the new one, so
/// there the lock lives on the last renewal that replicated, and a lease shorter than the
/// time from the promotion to the client's switch (a second or two on a loaded machine) is
/// rightly lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_waiters_follow_a_sentinel_failover() {
    let set = SentinelSet::start().unwrap();
    let options = ClientOptions::default().default_lease(Duration::from_secs(5));
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
    let (set, new_master) = failover(set).await;
    assert_ne!(new_master, first_master);

    // The watchdog finds the new master (the sentinels announce it; READONLY from the demoted
    // one would tell too) and keeps the lock.
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

/// A waiter on a client that sends nothing else follows the failover too, and is woken by
/// the release on the new master long before its bound (the holder's 20 s lease) runs out.
/// The sentinels' `+switch-master` wakes the waiter, whose next attempt moves the client to
/// the new master (later, the sentinels end the demoted master's client connections, pub/sub
/// ones included, which would wake it too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_an_idle_client_follows_the_failover() {
    let set = SentinelSet::start().unwrap();
    let holder = Client::connect(&set.url()).await.unwrap();
    let waiter_client = Client::connect(&set.url()).await.unwrap();
    let old = set.master_port().unwrap();
    // The replica has the lock before the failover (WAIT), so the new master has it too.
    let guard = holder
        .lock("announced")
        .with_options(
            LockOptions::default()
                .lease(Duration::from_secs(20))
                .min_replica_acks(1, Duration::from_secs(2)),
        )
        .acquire()
        .await
        .unwrap();
    let waiter = waiter_client.lock("announced");
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    eventually(5.0, "the waiter subscribed on the old master", || {
        set.servers[0].command_calls("subscribe") >= 1
    })
    .await;
    let (set, promoted) = failover(set).await;
    assert_ne!(promoted, old);
    let new_master = set.servers.iter().find(|s| s.port() == promoted).unwrap();
    eventually(10.0, "the waiter subscribed on the new master", || {
        new_master.command_calls("subscribe") >= 1
    })
    .await;
    assert!(!waiting.is_finished());
    let token = guard.fencing_token();
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    let next = within(5.0, "the waiter woken on the new master", waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
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

    // Two replicas cannot acknowledge: a clear error, and no lock left behind. Meanwhile the
    // WAIT holds up nothing else: another lock of the same client is taken and given back
    // while it is still waiting.
    let two = client
        .lock("unacked")
        .with_options(LockOptions::default().min_replica_acks(2, Duration::from_millis(1500)));
    let waiting = tokio::spawn(async move { two.acquire().await });
    within(5.0, "the acquisition reaches its WAIT", async {
        while !client.status("unacked").await.unwrap().held {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let other = client.lock("other").try_acquire().await.unwrap().unwrap();
    other.release().await.unwrap();
    assert!(
        !waiting.is_finished(),
        "another lock had to wait for the WAIT of the first"
    );
    match within(5.0, "the WAIT times out", waiting).await.unwrap() {
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
    // A WAIT as long as the lease could outlast the lock.
    let outlasting = client.lock("x").with_options(
        LockOptions::default()
            .lease(Duration::from_secs(1))
            .min_replica_acks(1, Duration::from_secs(1)),
    );
    assert!(matches!(
        outlasting.acquire().await,
        Err(Error::InvalidInput(InputError::InvalidOption {
            option: "min_replica_acks",
            ..
        }))
    ));
}

/// The master dies outright (no demotion, so no READONLY): the watchdog's renewals fail
/// until the sentinels promote the replica, then find the new master and keep the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_find_the_new_master_after_the_old_one_dies() {
    let mut set = SentinelSet::start().unwrap();
    let options = ClientOptions::default()
        .default_lease(Duration::from_secs(8))
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300));
    let client = Client::connect_with(&set.url(), options).await.unwrap();
    let guard = client.lock("orphaned").acquire().await.unwrap();
    let old = set.master_port().unwrap();
    // Let the lock replicate, then kill the master.
    tokio::time::sleep(Duration::from_millis(200)).await;
    set.servers[0].kill();
    let promoted = within(30.0, "the sentinels promote the replica", async {
        loop {
            match set.master_port() {
                Some(p) if p != old => break p,
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await;
    assert_eq!(promoted, set.servers[1].port());
    // The next renewals reach the new master: its copy of the lock gets a fresh TTL.
    let new_master = &set.servers[1];
    let ttl = |s: &fencelock_testkit::RedisServer| {
        s.command(&["PTTL", "fencelock:{orphaned}"])
            .ok()
            .and_then(|r| r.int())
            .unwrap_or(-2)
    };
    let after_promotion = ttl(new_master);
    eventually(10.0, "renewed on the new master", || {
        ttl(new_master) > after_promotion + 500
    })
    .await;
    assert!(guard.is_held(), "{:?}", guard.lost_reason());
    assert_eq!(guard.release().await.unwrap(), Released::Released);
}

/// `SENTINEL FAILOVER` promotes the replica but leaves the old master a writable master
/// until a sentinel converts it, about ten seconds later: a client that waited for READONLY
/// or a closed connection would lock on the old master all that time, while clients that
/// switched lock on the new one (two holders; `fencelock verify --backend sentinel --faults
/// sentinel-failover` saw it). The client hears the sentinels' `+switch-master` and moves at
/// once: a lock taken within seconds of the promotion is on the new master, and not on the
/// old one.
///
/// What the old master still holds until its conversion is not checked, only that it does
/// not hold the lock just taken: a hold it granted before the client heard the
/// announcement, and released after the switch (on the new master, where every client that
/// heard the sentinels looks), stays there until the conversion throws it away, as SAFETY.md
/// says. (Checking the key alone failed about 1 run in 10 on a loaded machine: the
/// announcement came between an acquire and its release.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_moves_the_client_at_once() {
    let set = SentinelSet::start().unwrap();
    let client = Client::connect(&set.url()).await.unwrap();
    let old = set.master_port().unwrap();
    let lock = client.lock("moved");
    lock.acquire().await.unwrap().release().await.unwrap();
    let (set, promoted) = failover(set).await;
    assert_ne!(promoted, old);
    // The hold `token` of this lock, on a server that is a master. The old one becomes a
    // replica of the new one when a sentinel converts it, and then holds the new master's
    // keys by replication, which is no second lock.
    let holds = |port: u16, token: u64| {
        let server = set.servers.iter().find(|s| s.port() == port).unwrap();
        let master = || server.info_field("role").as_deref() == Some("master");
        let held = || {
            let reply = server.command(&["HGET", "fencelock:{moved}", "=token"]);
            reply.unwrap().text() == Some(token.to_string())
        };
        master() && held() && master()
    };
    within(4.0, "a lock on the new master", async {
        loop {
            let guard = lock.acquire().await.unwrap();
            let token = guard.fencing_token();
            let (on_new, on_old) = (holds(promoted, token), holds(old, token));
            guard.release().await.unwrap();
            if on_new {
                assert!(!on_old, "the lock was on both masters");
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// `SENTINEL FAILOVER`, waited for off the runtime's threads; the set and the new master's
/// port.
async fn failover(set: SentinelSet) -> (SentinelSet, u16) {
    tokio::task::spawn_blocking(move || {
        let port = set.failover().unwrap();
        (set, port)
    })
    .await
    .unwrap()
}
