//! What the scripts do with keys they did not write: a key of the wrong type is named and
//! nothing is changed; fencing tokens stay exact up to 2^64 - 1 and never repeat (issue 9,
//! items 8 and 9). No key lives forever: the fencing counter expires a horizon after its last
//! token, and tokens keep increasing across its expiry (issue 27).
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use common::*;
use fencelock::{Client, ClientOptions, Error, InputError, LockOptions, Released};
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
        // The acquire wrote the counter before it checked it (`SET ... GET`): it put the old
        // value back.
        assert_eq!(counter(&server, "top"), u64::MAX.to_string());
    }
    // A counter beyond the range, or not a number, is refused the same way.
    for bad in ["18446744073709551616", "99999999999999999999999", "12abc"] {
        set_counter(&server, "top", bad);
        assert!(
            matches!(lock.acquire().await, Err(Error::FencingExhausted { .. })),
            "counter {bad} was accepted"
        );
        assert!(!has_key(&server, "top"));
        assert_eq!(counter(&server, "top"), bad);
    }
}

fn counter(server: &RedisServer, name: &str) -> String {
    let key = format!("fencelock:{{{name}}}:fence");
    server.command(&["GET", &key]).unwrap().text().unwrap()
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

/// Keys on the server, and the TTL of each (ms; -1: none).
fn keys_and_ttls(server: &RedisServer) -> Vec<(String, i64)> {
    let keys = match server.command(&["KEYS", "*"]).unwrap() {
        fencelock_testkit::Reply::Array(Some(keys)) => keys,
        other => panic!("KEYS replied {other:?}"),
    };
    keys.iter()
        .map(|k| {
            let key = k.text().unwrap();
            let ttl = server.command(&["PTTL", &key]).unwrap().int().unwrap();
            (key, ttl)
        })
        .collect()
}

fn fenced(horizon_ms: u64) -> ClientOptions {
    ClientOptions::default().fence_horizon(Duration::from_millis(horizon_ms))
}

/// The fencing counter expires a horizon after its last token; the next token starts again
/// from the server's clock in µs, above every earlier one.
#[tokio::test]
async fn a_token_after_the_counters_horizon_is_above_every_earlier_one() {
    let server = server();
    let client = client_with(&server, fenced(1_000)).await;
    let lock = client.lock("horizon");
    let mut earlier = Vec::new();
    for _ in 0..3 {
        let guard = lock.acquire().await.unwrap();
        earlier.push(guard.fencing_token());
        guard.release().await.unwrap();
    }
    let ttl = server
        .command(&["PTTL", "fencelock:{horizon}:fence"])
        .unwrap()
        .int()
        .unwrap();
    // -2: already expired (a busy machine stalled this test for the whole horizon).
    assert!(
        ttl == -2 || (0 < ttl && ttl <= 1_000),
        "the counter's TTL is the horizon: {ttl}"
    );
    eventually(5.0, "the counter expired", || {
        keys_and_ttls(&server).is_empty()
    })
    .await;
    let guard = lock.acquire().await.unwrap();
    let highest = earlier.iter().copied().max().unwrap();
    assert!(
        guard.fencing_token() > highest,
        "{} <= {highest}",
        guard.fencing_token()
    );
    guard.release().await.unwrap();
}

/// No key lives forever: after locks were taken, waited for (a queue), handed over and
/// released, every key has a TTL, and none is left once the horizon has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_is_left_after_the_horizon() {
    let server = server();
    let holder = client_with(&server, fenced(1000)).await;
    let waiter = client_with(&server, fenced(1000)).await;
    for i in 0..5 {
        let name = format!("order:{i}");
        let guard = holder.lock(&name).acquire().await.unwrap();
        // A waiter with a fixed lease of 500 ms: its place's window, and its queue keys' TTL.
        let lock = waiter
            .lock(&name)
            .with_options(LockOptions::default().lease(Duration::from_millis(500)));
        let task = tokio::spawn(async move { lock.acquire().await.unwrap() });
        eventually(5.0, "the waiter took its place", || {
            queue_len(&server, &name) == 1
        })
        .await;
        guard.release().await.unwrap();
        within(5.0, "handed over", task)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let left = keys_and_ttls(&server);
    assert!(!left.is_empty());
    // -2: the key expired between the listing and its PTTL.
    assert!(
        left.iter()
            .all(|(_, ttl)| *ttl == -2 || (0..=1000).contains(ttl)),
        "every key expires within the horizon: {left:?}"
    );
    eventually(5.0, "no key left", || keys_and_ttls(&server).is_empty()).await;
}

/// A horizon under a second, not whole milliseconds, or longer than ten years is refused when
/// the client connects, with a typed error naming the option.
#[tokio::test]
async fn a_bad_fence_horizon_is_refused() {
    let server = server();
    for bad in [
        Duration::ZERO,
        fencelock::MIN_FENCE_HORIZON - Duration::from_millis(1),
        Duration::from_micros(1_000_500),
        fencelock::MAX_FENCE_HORIZON + Duration::from_millis(1),
        Duration::MAX,
    ] {
        let options = ClientOptions::default().fence_horizon(bad);
        let refused = Client::connect_with(&server.url(), options).await;
        assert!(
            matches!(
                refused,
                Err(Error::InvalidInput(InputError::InvalidOption {
                    option: "fence_horizon",
                    ..
                }))
            ),
            "{bad:?}: {:?}",
            refused.map(|_| ())
        );
    }
    let options = ClientOptions::default().fence_horizon(fencelock::MAX_FENCE_HORIZON);
    Client::connect_with(&server.url(), options).await.unwrap();
}
