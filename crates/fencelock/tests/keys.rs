//! What the scripts do with keys they did not write: a key of the wrong type is named and
//! nothing is changed; fencing tokens stay exact up to 2^64 - 1 and never repeat (issue 9,
//! items 8 and 9).
#![cfg(feature = "redis")]

mod common;

use common::*;
use fencelock::{Error, Released};
use fencelock_testkit::RedisServer;

fn set_counter(server: &RedisServer, name: &str, value: &str) {
    let key = format!("fencelock:{{{name}}}:fence");
    server.command(&["SET", &key, value]).unwrap();
}

#[tokio::test]
async fn tokens_stay_exact_above_2_pow_53() {
    let server = server();
    let client = client(&server).await;
    let lock = client.lock("big");
    let start: u64 = (1 << 53) - 2;
    set_counter(&server, "big", &start.to_string());
    let mut tokens = Vec::new();
    for _ in 0..4 {
        let guard = lock.acquire().await.unwrap();
        tokens.push(guard.fencing_token());
        guard.release().await.unwrap();
    }
    assert_eq!(tokens, [start + 1, start + 2, start + 3, start + 4]);
}

/// A counter written by hand with leading zeros: its value decides, not its length, on both
/// sides of the server's clock (the scripts compare the clock and the counter as text).
#[tokio::test]
async fn a_counter_with_leading_zeros_counts_by_its_value() {
    let server = server();
    let client = client(&server).await;
    let lock = client.lock("zeros");
    let ahead: u64 = 1 << 60; // far ahead of the clock in microseconds
    set_counter(&server, "zeros", &format!("0000{ahead}"));
    let guard = lock.acquire().await.unwrap();
    assert_eq!(guard.fencing_token(), ahead + 1);
    guard.release().await.unwrap();
    // Behind the clock, however long it is written: the clock decides.
    set_counter(&server, "zeros", &format!("{:0>17}", 42));
    let guard = lock.acquire().await.unwrap();
    assert!(
        guard.fencing_token() > 1_600_000_000_000_000,
        "a clock-based token"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn tokens_reach_2_pow_64_minus_1_and_then_refuse_leaving_nothing() {
    let server = server();
    let client = client(&server).await;
    let lock = client.lock("top");
    set_counter(&server, "top", &(u64::MAX - 1).to_string());
    let guard = lock.acquire().await.unwrap();
    assert_eq!(guard.fencing_token(), u64::MAX);
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    for _ in 0..2 {
        match lock.acquire().await {
            Err(Error::FencingExhausted { detail, .. }) => {
                assert!(detail.contains("fencelock:{top}:fence"), "{detail}")
            }
            other => panic!("expected FencingExhausted, got {other:?}"),
        }
        assert!(
            !has_key(&server, "top"),
            "the failed acquire left the lock behind"
        );
    }
    // A counter beyond the range, or not a number, is refused the same way.
    for bad in ["18446744073709551616", "99999999999999999999999", "12abc"] {
        set_counter(&server, "top", bad);
        assert!(
            matches!(lock.acquire().await, Err(Error::FencingExhausted { .. })),
            "counter {bad} was accepted"
        );
        assert!(!has_key(&server, "top"));
    }
}

#[tokio::test]
async fn a_wrong_typed_fence_counter_is_named_and_nothing_changes() {
    let server = server();
    let client = client(&server).await;
    server
        .command(&["RPUSH", "fencelock:{typed-fence}:fence", "x"])
        .unwrap();
    match client.lock("typed-fence").acquire().await {
        Err(Error::WrongType { key, .. }) => assert_eq!(key, "fencelock:{typed-fence}:fence"),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert!(!has_key(&server, "typed-fence"));
}

#[tokio::test]
async fn a_wrong_typed_queue_fails_the_release_before_it_changes_anything() {
    let server = server();
    let client = client(&server).await;
    let lock = client.lock("typed-queue");
    let guard = lock.acquire().await.unwrap();
    server
        .command(&["SET", "fencelock:{typed-queue}:queue", "not a list"])
        .unwrap();
    // The release reads the queue only when the lock's '=q' marker says it may have entries
    // (every waiter that takes a place sets it).
    server
        .command(&["HSET", "fencelock:{typed-queue}", "=q", "1"])
        .unwrap();
    match guard.release().await {
        Err(Error::WrongType { key, .. }) => assert_eq!(key, "fencelock:{typed-queue}:queue"),
        other => panic!("expected WrongType, got {other:?}"),
    }
    // The error says the release did not happen, and it did not.
    assert!(
        has_key(&server, "typed-queue"),
        "the lock was deleted anyway"
    );
    server
        .command(&["DEL", "fencelock:{typed-queue}:queue"])
        .unwrap();
    assert_eq!(lock.release().await.unwrap(), Released::Released);
}

#[tokio::test]
async fn status_names_the_wrong_typed_key() {
    let server = server();
    let client = client(&server).await;
    let lock = client.lock("typed-status");
    let _guard = lock.acquire().await.unwrap();
    // Each of the lock's other keys in turn holds a string where a list, a hash or a counter
    // belongs: status fails with an error that names that key, not the lock's.
    for (key, bad) in [
        (
            "fencelock:{typed-status}:queue",
            &["SET", "x", "not a list"][..],
        ),
        (
            "fencelock:{typed-status}:waiting",
            &["SET", "x", "not a hash"][..],
        ),
        (
            "fencelock:{typed-status}:fence",
            &["RPUSH", "x", "not a counter"][..],
        ),
    ] {
        server.command(&["DEL", key]).unwrap();
        let mut write: Vec<&str> = bad.to_vec();
        write[1] = key;
        server.command(&write).unwrap();
        if key.ends_with(":waiting") {
            // The places are read only for owners the queue names.
            server
                .command(&["RPUSH", "fencelock:{typed-status}:queue", "someone"])
                .unwrap();
        }
        match lock.status().await {
            Err(Error::WrongType { key: named, .. }) => assert_eq!(named, key),
            other => panic!("expected WrongType naming {key}, got {other:?}"),
        }
        server
            .command(&["DEL", key, "fencelock:{typed-status}:queue"])
            .unwrap();
    }
    assert!(lock.status().await.unwrap().held);
}
