//! The lock on one real Redis server: exclusion, re-entry, ownership, leases, tokens.
#![cfg(feature = "redis")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use fencelock::{Client, Error, LockOptions, Released};
use fencelock_testkit::RedisServer;
use redis::AsyncCommands;

/// Many tasks over several clients do a non-atomic read-modify-write of one counter. Under
/// the lock the count is exact; the same workload without the lock loses updates (the
/// negative control shows the check would catch a broken lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_keeps_a_racy_counter_exact() {
    let server = server();
    const CLIENTS: usize = 3;
    const TASKS: usize = 4;
    const ROUNDS: usize = 15;

    async fn bump(con: &mut redis::aio::MultiplexedConnection, key: &str) {
        let n: i64 = con.get(key).await.unwrap_or(0);
        // Widen the race window: another writer between GET and SET loses an update.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let _: () = con.set(key, n + 1).await.unwrap();
    }

    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = client(&server).await;
        for _ in 0..TASKS {
            let lock = client.lock("counter");
            let mut con = raw(&server).await;
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = lock.acquire().await.unwrap();
                    bump(&mut con, "locked-count").await;
                    assert_eq!(guard.release().await.unwrap(), Released::Released);
                }
            }));
        }
    }
    within(60.0, "locked workers", async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    let mut con = raw(&server).await;
    let count: i64 = con.get("locked-count").await.unwrap();
    assert_eq!(count, (CLIENTS * TASKS * ROUNDS) as i64);

    // Negative control: the same workload without the lock.
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS * TASKS {
        let mut con = raw(&server).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                bump(&mut con, "unlocked-count").await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let count: i64 = con.get("unlocked-count").await.unwrap();
    assert!(
        count < (CLIENTS * TASKS * ROUNDS) as i64,
        "without the lock updates should be lost, got {count}"
    );
}

#[tokio::test]
async fn reentry_counts_holds_and_shares_the_token() {
    let server = server();
    let client = client(&server).await;
    let lock = client.lock("reentrant");
    let first = lock.acquire().await.unwrap();
    let second = lock.clone().acquire().await.unwrap();
    assert_eq!((first.hold_count(), second.hold_count()), (1, 2));
    assert_eq!(first.fencing_token(), second.fencing_token());

    // Another handle of the same client is another owner.
    let other = client.lock("reentrant");
    assert!(other.try_acquire().await.unwrap().is_err());

    let status = lock.status().await.unwrap();
    assert_eq!(status.owners, vec![(lock.owner().to_owned(), 2)]);
    assert_eq!(status.fencing_token, Some(first.fencing_token()));

    assert_eq!(
        second.release().await.unwrap(),
        Released::StillHeld { count: 1 }
    );
    assert!(lock.status().await.unwrap().held);
    assert_eq!(first.release().await.unwrap(), Released::Released);
    assert!(!lock.status().await.unwrap().held);
    // Releasing again is harmless and reported.
    assert_eq!(lock.release().await.unwrap(), Released::NotHeld);
}

#[tokio::test]
async fn a_non_owner_cannot_release_but_a_shared_owner_id_can() {
    let server = server();
    let a = client(&server).await;
    let b = client(&server).await;
    let guard = a.lock("owned").acquire().await.unwrap();

    assert_eq!(b.lock("owned").release().await.unwrap(), Released::NotHeld);
    assert!(b.status("owned").await.unwrap().held);

    // Another process that knows the owner id may re-enter and release.
    let same = b.lock("owned").with_owner(guard.owner());
    let again = same.acquire().await.unwrap();
    assert_eq!(again.hold_count(), 2);
    assert_eq!(
        again.release().await.unwrap(),
        Released::StillHeld { count: 1 }
    );
    assert_eq!(same.release().await.unwrap(), Released::Released);
    // The guard learns at release that its hold is gone.
    assert_eq!(guard.release().await.unwrap(), Released::NotHeld);
}

#[tokio::test]
async fn explicit_extend_keeps_a_fixed_lease_alive() {
    let server = server();
    let client = client(&server).await;
    let lock = client
        .lock("extended")
        .with_options(LockOptions::default().lease(Duration::from_millis(400)));
    let guard = lock.acquire().await.unwrap();
    assert!(!guard.is_renewed());
    guard.extend(Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await; // twice the original lease
    assert!(guard.is_held());
    let status = lock.status().await.unwrap();
    assert!(status.held);
    assert!(status.remaining_lease.unwrap() > Duration::from_secs(3));
    assert!(guard.remaining_validity().unwrap() > Duration::from_secs(3));
    assert_eq!(guard.release().await.unwrap(), Released::Released);
}

/// The lock key's remaining time to live on the server, in ms, read by `PTTL`.
fn pttl(server: &RedisServer, name: &str) -> i64 {
    let key = format!("fencelock:{{{name}}}");
    let reply = server.command(&["PTTL", &key]).expect("PTTL");
    reply.int().expect("PTTL answers an integer")
}

/// A 30 s fixed lease, and then something that asks for a 2 s one: what SAFETY.md promises
/// is that the server keeps the longer lease. 20 s leaves ample room for a slow machine and
/// is far above the 2 s that a shortened lease would show.
const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_secs(2);
const KEPT_MS: i64 = 20_000;

fn fixed(lease: Duration) -> LockOptions {
    LockOptions::default().lease(lease)
}

/// Re-entering with a shorter fixed lease keeps the longer one: the first guard relies on it
/// (acquire.lua, "Never shorten the lease").
#[tokio::test]
async fn a_reentry_with_a_shorter_lease_keeps_the_longer_one() {
    let server = server();
    let client = client(&server).await;
    let lock = client.lock("never-shorter").with_options(fixed(LONG));
    let long = lock.acquire().await.unwrap();
    assert!(pttl(&server, "never-shorter") > KEPT_MS);

    // A clone with other options is the same owner: a re-entry.
    let short = lock
        .clone()
        .with_options(fixed(SHORT))
        .acquire()
        .await
        .unwrap();
    assert_eq!((short.hold_count(), short.lease()), (2, SHORT));
    assert_eq!(short.fencing_token(), long.fencing_token());
    let left = pttl(&server, "never-shorter");
    assert!(
        left > KEPT_MS,
        "the re-entry shortened the lease to {left} ms"
    );
    assert!(long.is_held());
    assert!(long.remaining_validity().unwrap() > Duration::from_millis(KEPT_MS as u64));
    assert_eq!(
        short.release().await.unwrap(),
        Released::StillHeld { count: 1 }
    );
    assert_eq!(long.release().await.unwrap(), Released::Released);
}

/// `Guard::extend` with a shorter lease than the one left changes nothing: it extends "to at
/// least" the lease asked (extend.lua), on the server and in the guard.
#[tokio::test]
async fn extend_with_a_shorter_lease_keeps_the_longer_one() {
    let server = server();
    let client = client(&server).await;
    let guard = client
        .lock("extend-shorter")
        .with_options(fixed(LONG))
        .acquire()
        .await
        .unwrap();
    guard.extend(SHORT).await.unwrap();
    let left = pttl(&server, "extend-shorter");
    assert!(left > KEPT_MS, "extend shortened the lease to {left} ms");
    assert!(guard.is_held());
    assert!(guard.remaining_validity().unwrap() > Duration::from_millis(KEPT_MS as u64));
    assert_eq!(guard.release().await.unwrap(), Released::Released);
}

/// The watchdog's renewals of a re-entry with a short renewed lease (1.5 s, every 0.5 s) do
/// not cut the 30 s fixed lease of the first guard down to theirs (extend.lua).
#[tokio::test]
async fn renewals_of_a_shorter_reentry_keep_the_longer_lease() {
    let server = server();
    let client = client_with(&server, short_lease(1_500)).await;
    let lock = client.lock("renew-shorter");
    let long = lock
        .clone()
        .with_options(fixed(LONG))
        .acquire()
        .await
        .unwrap();
    let renewed = lock.acquire().await.unwrap();
    assert!(renewed.is_renewed());
    assert_eq!(renewed.hold_count(), 2);
    // The fixed lease has no watchdog: every script call from now on is a renewal. Three,
    // so that at least two ran the script even if the first met NOSCRIPT.
    let before = server.command_calls("evalsha");
    eventually(5.0, "three renewals", || {
        server.command_calls("evalsha") >= before + 3
    })
    .await;
    let left = pttl(&server, "renew-shorter");
    assert!(left > KEPT_MS, "a renewal shortened the lease to {left} ms");
    assert!(long.is_held() && renewed.is_held());
    assert_eq!(
        renewed.release().await.unwrap(),
        Released::StillHeld { count: 1 }
    );
    assert_eq!(long.release().await.unwrap(), Released::Released);
}

#[tokio::test]
async fn a_fixed_lease_expires_and_the_guard_says_so() {
    let server = server();
    let client = client(&server).await;
    let lock = client
        .lock("fixed")
        .with_options(LockOptions::default().lease(Duration::from_millis(300)));
    let guard = lock.acquire().await.unwrap();
    within(2.0, "lost after the fixed lease", guard.lost()).await;
    assert!(!guard.is_held());
    assert!(guard
        .lost_reason()
        .unwrap()
        .to_string()
        .contains("deadline"));
    assert!(matches!(
        guard.extend(Duration::from_secs(1)).await,
        Err(Error::LockLost { .. })
    ));
    // The server let it go too: another owner gets it.
    let other = client
        .lock("fixed")
        .acquire_timeout(Duration::from_secs(2))
        .await
        .unwrap();
    assert!(other.fencing_token() > guard.fencing_token());
}

/// A 300 ms lease, renewed by the watchdog, survives ten lease periods.
#[tokio::test]
async fn the_watchdog_keeps_a_short_lease_alive() {
    let server = server();
    let client = client_with(&server, short_lease(300)).await;
    let guard = client.lock("renewed").acquire().await.unwrap();
    assert!(guard.is_renewed());
    let renewals_before = server.command_calls("evalsha");
    tokio::select! {
        _ = guard.lost() => panic!("lost: {:?}", guard.lost_reason()),
        _ = tokio::time::sleep(Duration::from_secs(3)) => {}
    }
    assert!(guard.is_held());
    let status = client.status("renewed").await.unwrap();
    assert_eq!(status.owners, vec![(guard.owner().to_owned(), 1)]);
    // About 30 renewals at lease/3; allow for batching slack.
    let renewals = server.command_calls("evalsha") - renewals_before;
    assert!((15..=45).contains(&renewals), "{renewals} renewals");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn lost_fires_when_the_key_is_deleted_behind_the_holder() {
    let server = server();
    let client = client_with(&server, short_lease(600)).await;
    let guard = client.lock("deleted").acquire().await.unwrap();
    let token = guard.lost_token();
    let mut con = raw(&server).await;
    let _: () = con.del("fencelock:{deleted}").await.unwrap();
    // The next renewal (within lease/3) finds no key.
    within(2.0, "lost after DEL", guard.lost()).await;
    assert!(token.is_cancelled());
    assert!(!guard.is_held());
    assert!(guard
        .lost_reason()
        .unwrap()
        .to_string()
        .contains("deleted or held by another"));
    assert_eq!(guard.release().await.unwrap(), Released::NotHeld);
}

#[tokio::test]
async fn lost_fires_when_the_server_is_paused_past_the_lease() {
    let server = server();
    let options = short_lease(500).response_timeout(Duration::from_secs(5));
    let client = client_with(&server, options).await;
    // The deadline counts from when the acquire was sent: measure from before it.
    let acquired = tokio::time::Instant::now();
    let guard = client.lock("paused").acquire().await.unwrap();
    server.pause();
    within(3.0, "lost while the server is paused", guard.lost()).await;
    // Not before the deadline (lease minus drift), and not much after.
    let after = acquired.elapsed();
    server.resume();
    assert!(after >= Duration::from_millis(480), "fired after {after:?}");
    assert!(after < Duration::from_millis(1500), "fired after {after:?}");
    assert!(!guard.is_held());
    assert!(guard
        .lost_reason()
        .unwrap()
        .to_string()
        .contains("deadline"));
}

/// A waiter is woken by the release message: it sends no command while it waits, and gets
/// the lock long before the holder's 30 s lease would have run out.
#[tokio::test]
async fn a_waiter_wakes_on_release_without_polling() {
    let server = server();
    let holder = client(&server).await;
    let waiter = client(&server).await;
    let opts = LockOptions::default().lease(Duration::from_secs(30));
    let guard = holder
        .lock("wake")
        .with_options(opts)
        .acquire()
        .await
        .unwrap();
    // Load the release script now, so that its first NOSCRIPT round does not count below.
    assert_eq!(
        holder.lock("warm").release().await.unwrap(),
        Released::NotHeld
    );

    let base = server.command_calls("evalsha");
    // Each client subscribed its own channel when it connected.
    let subscribed = server.command_calls("subscribe");
    let lock = waiter.lock("wake");
    let task = tokio::spawn(async move {
        let g = lock.acquire().await.unwrap();
        let at = tokio::time::Instant::now();
        (g, at)
    });
    // The waiter's attempt, SUBSCRIBE, and one attempt more (a release between the first
    // attempt and the subscription must not be missed).
    eventually(5.0, "waiter subscribed", || {
        server.command_calls("subscribe") == subscribed + 1
            && server.command_calls("evalsha") == base + 2
    })
    .await;
    let attempts_before = server.command_calls("evalsha");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        server.command_calls("evalsha"),
        attempts_before,
        "the waiter polled"
    );
    assert!(!task.is_finished());

    let released_at = tokio::time::Instant::now();
    guard.release().await.unwrap();
    let (g, acquired_at) = within(5.0, "waiter woken", task).await.unwrap();
    let gap = acquired_at - released_at;
    assert!(gap < Duration::from_secs(2), "handover took {gap:?}");
    // The release alone: it hands the lock to the waiter's place in the queue, and the
    // waiter learns its token from the message.
    assert_eq!(server.command_calls("evalsha") - attempts_before, 1);
    g.release().await.unwrap();
}

#[tokio::test]
async fn local_waiters_are_served_in_arrival_order() {
    let server = server();
    let client = client(&server).await;
    let guard = client.lock("fifo").acquire().await.unwrap();
    let subscribed = server.command_calls("subscribe");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let lock = client.lock("fifo");
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = lock.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            g.release().await.unwrap();
        }));
        // Each joins the queue before the next starts (the first one subscribes; the others
        // queue behind it locally, without a command).
        if i == 0 {
            eventually(5.0, "subscribed", || {
                server.command_calls("subscribe") > subscribed
            })
            .await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    guard.release().await.unwrap();
    within(10.0, "waiters", async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn acquire_timeout_gives_a_typed_error_and_try_acquire_the_remaining_lease() {
    let server = server();
    let client = client(&server).await;
    let opts = LockOptions::default().lease(Duration::from_secs(20));
    let guard = client
        .lock("busy")
        .with_options(opts)
        .acquire()
        .await
        .unwrap();
    let other = client.lock("busy");
    let started = tokio::time::Instant::now();
    match other.acquire_timeout(Duration::from_millis(300)).await {
        Err(Error::Timeout { lock, waited }) => {
            assert_eq!(lock, "busy");
            assert_eq!(waited, Duration::from_millis(300));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    let busy = other.try_acquire().await.unwrap().unwrap_err();
    let remaining = busy.remaining_lease.unwrap();
    assert!(remaining > Duration::from_secs(15) && remaining <= Duration::from_secs(20));
    guard.release().await.unwrap();
    // Dropping a waiting acquire cancels it cleanly: the queue moves on.
    assert!(other.try_acquire().await.unwrap().is_ok());
}

#[tokio::test]
async fn a_dropped_guard_is_released_in_the_background() {
    let server = server();
    let client = client(&server).await;
    let guard = client.lock("dropped").acquire().await.unwrap();
    drop(guard);
    let other = client.lock("dropped");
    // Far sooner than the 30 s lease.
    let guard = within(3.0, "released after drop", other.acquire())
        .await
        .unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_across_holders() {
    let server = server();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut tokens = Vec::new();
    for i in 0..20 {
        let client = if i % 2 == 0 { &a } else { &b };
        let guard = client.lock("fenced").acquire().await.unwrap();
        tokens.push(guard.fencing_token());
        guard.release().await.unwrap();
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    // A counter ahead of the clock still goes up by one.
    let mut con = raw(&server).await;
    let ahead = tokens[19] + 1_000_000_000_000;
    let _: () = con.set("fencelock:{fenced}:fence", ahead).await.unwrap();
    let guard = a.lock("fenced").acquire().await.unwrap();
    assert_eq!(guard.fencing_token(), ahead + 1);
    guard.release().await.unwrap();
    assert_eq!(
        a.status("fenced").await.unwrap().last_token,
        Some(ahead + 1)
    );
}

#[tokio::test]
async fn fencing_tokens_increase_across_a_restart_that_lost_the_data() {
    let mut server = server();
    let before = {
        let client = client(&server).await;
        let guard = client.lock("restarted").acquire().await.unwrap();
        let t = guard.fencing_token();
        guard.release().await.unwrap();
        t
    };
    server.restart().unwrap();
    let mut con = raw(&server).await;
    let keys: Vec<String> = con.keys("*").await.unwrap();
    assert!(
        keys.is_empty(),
        "the restart should have lost the data: {keys:?}"
    );
    let client = client(&server).await;
    let guard = client.lock("restarted").acquire().await.unwrap();
    assert!(
        guard.fencing_token() > before,
        "{} <= {before}",
        guard.fencing_token()
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn scripts_survive_script_flush() {
    let server = server();
    let client = client_with(&server, short_lease(300)).await;
    let lock = client.lock("flushed");
    lock.acquire().await.unwrap().release().await.unwrap();
    server.command(&["SCRIPT", "FLUSH"]).unwrap();
    let guard = lock.acquire().await.unwrap();
    // The watchdog's pipelined renewals recover from NOSCRIPT too.
    server.command(&["SCRIPT", "FLUSH"]).unwrap();
    tokio::select! {
        _ = guard.lost() => panic!("lost after SCRIPT FLUSH: {:?}", guard.lost_reason()),
        _ = tokio::time::sleep(Duration::from_millis(1000)) => {}
    }
    server.command(&["SCRIPT", "FLUSH"]).unwrap();
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    assert!(server.command_calls("script|load") + server.command_calls("eval") >= 2);
}

#[tokio::test]
async fn a_key_of_the_wrong_type_is_a_clear_error() {
    let server = server();
    let client = client(&server).await;
    let mut con = raw(&server).await;
    let _: () = con.set("fencelock:{typed}", "not a hash").await.unwrap();
    match client.lock("typed").acquire().await {
        Err(Error::WrongType { lock, key, .. }) => {
            assert_eq!(lock, "typed");
            assert_eq!(key, "fencelock:{typed}");
        }
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert!(matches!(
        client.lock("typed").release().await,
        Err(Error::WrongType { .. })
    ));
}

#[tokio::test]
async fn a_dead_server_gives_a_bounded_error_and_a_restarted_one_works_again() {
    let mut server = server();
    let options = fencelock::ClientOptions::default()
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300));
    let client = client_with(&server, options).await;
    let lock = client.lock("dead");
    server.kill();
    let started = tokio::time::Instant::now();
    match lock.try_acquire().await {
        Err(Error::Unavailable {
            server: s, lock: l, ..
        }) => {
            assert_eq!(s, format!("127.0.0.1:{}", server.port()));
            assert_eq!(l.as_deref(), Some("dead"));
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // A paused server (no reply at all) is bounded too.
    server.restart().unwrap();
    server.pause();
    let started = tokio::time::Instant::now();
    assert!(matches!(
        lock.try_acquire().await,
        Err(Error::Unavailable { .. })
    ));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    server.resume();
    // Back: the same client works again (it reconnects on its own).
    let guard = within(10.0, "reconnect", async {
        loop {
            if let Ok(Ok(g)) = lock.try_acquire().await {
                break g;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    guard.release().await.unwrap();
}

/// An acquire whose reply never arrived is undone in the background, so the lock does not
/// stay taken for a whole (30 s) lease.
#[tokio::test]
async fn an_acquire_with_a_lost_reply_leaves_no_orphan() {
    let server = server();
    let options = fencelock::ClientOptions::default().response_timeout(Duration::from_millis(300));
    let client = client_with(&server, options).await;
    let lock = client.lock("orphan");
    server.pause();
    assert!(matches!(
        lock.try_acquire().await,
        Err(Error::Unavailable { .. })
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.resume();
    // The acquire reaches the server once it runs again; the undo follows it.
    eventually(10.0, "orphan removed", || {
        server.command_calls("evalsha") >= 2
            && server
                .command(&["EXISTS", "fencelock:{orphan}"])
                .unwrap()
                .int()
                == Some(0)
    })
    .await;
    let other = client_with(&server, Default::default()).await;
    assert!(other.lock("orphan").try_acquire().await.unwrap().is_ok());
}

#[tokio::test]
async fn an_evicting_server_is_reported_and_a_disabled_config_is_skipped() {
    let evicting = fencelock_testkit::RedisServer::builder()
        .config("maxmemory-policy", "allkeys-lru")
        .start()
        .unwrap();
    let c = client(&evicting).await;
    assert_eq!(c.warnings().len(), 1);
    assert!(c.warnings()[0].to_string().contains("allkeys-lru"));

    let plain = server();
    assert!(client(&plain).await.warnings().is_empty());

    let no_config = fencelock_testkit::RedisServer::builder()
        .config("rename-command", "CONFIG \"\"")
        .config("maxmemory-policy", "allkeys-lru")
        .start()
        .unwrap();
    // CONFIG is really gone, so the evicting policy cannot be seen: skipped quietly.
    assert!(no_config
        .command(&["CONFIG", "GET", "maxmemory-policy"])
        .is_err());
    let c = client(&no_config).await;
    assert!(c.warnings().is_empty());
    let guard = c.lock("x").acquire().await.unwrap();
    guard.release().await.unwrap();
}

/// The background task holds only a weak reference: dropping the client and its guards ends
/// it, and a dropped guard's background release still reaches the server first.
#[tokio::test]
async fn the_background_task_ends_with_the_client() {
    let server = server();
    let metrics = tokio::runtime::Handle::current().metrics();
    let idle = metrics.num_alive_tasks();
    let client = client(&server).await;
    assert!(metrics.num_alive_tasks() > idle);
    let guard = client.lock("ending").acquire().await.unwrap();
    drop(client);
    drop(guard);
    eventually(5.0, "task ended", || metrics.num_alive_tasks() == idle).await;
    eventually(5.0, "released", || {
        server
            .command(&["EXISTS", "fencelock:{ending}"])
            .unwrap()
            .int()
            == Some(0)
    })
    .await;
}

/// With `appendfsync always` a crash loses nothing: the lock, its owner and its fencing
/// counter are there after a restart (the contrast to the restart without persistence above).
#[tokio::test]
async fn a_lock_survives_a_crash_with_aof_always() {
    let mut server = fencelock_testkit::RedisServer::builder()
        .persistence(fencelock_testkit::Persistence::AofAlways)
        .start()
        .unwrap();
    let options = fencelock::ClientOptions::default()
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300));
    let client = client_with(&server, options).await;
    let lock = client
        .lock("durable")
        .with_options(LockOptions::default().lease(Duration::from_secs(30)));
    let guard = lock.acquire().await.unwrap();
    server.kill();
    server.restart().unwrap();
    let status = within(10.0, "status after restart", async {
        loop {
            if let Ok(s) = client.status("durable").await {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(status.held);
    assert_eq!(status.owners, vec![(guard.owner().to_owned(), 1)]);
    assert_eq!(status.last_token, Some(guard.fencing_token()));
    assert_eq!(guard.release().await.unwrap(), Released::Released);
}

/// Renewals that fail (the server is paused for less than the lease) are retried, and resume
/// when the server answers again: one bad round does not end the watchdog.
#[tokio::test]
async fn renewals_resume_after_a_short_outage() {
    let server = server();
    let options = short_lease(1500).response_timeout(Duration::from_millis(250));
    let client = client_with(&server, options).await;
    let guard = client.lock("outage").acquire().await.unwrap();
    // Let a renewal go out, then stop the server across the next ones.
    tokio::time::sleep(Duration::from_millis(550)).await;
    server.pause();
    tokio::time::sleep(Duration::from_millis(700)).await;
    server.resume();
    let before = server.command_calls("evalsha");
    tokio::select! {
        _ = guard.lost() => panic!("lost after a short outage: {:?}", guard.lost_reason()),
        _ = tokio::time::sleep(Duration::from_millis(2000)) => {}
    }
    assert!(guard.is_held());
    // Renewals went on after the outage.
    assert!(server.command_calls("evalsha") >= before + 2);
    assert_eq!(guard.release().await.unwrap(), Released::Released);
}

/// A wrong password, and a user whose ACL does not cover the lock's keys, are refused with
/// `Error::Denied` (not `Unavailable`: trying again does not help), and nothing is locked.
#[tokio::test]
async fn credentials_and_acls_the_server_refuses_are_denied() {
    let server = fencelock_testkit::RedisServer::builder()
        .config("requirepass", "s3cret")
        .start()
        .unwrap();
    let url = |auth: &str| format!("redis://{auth}@127.0.0.1:{}", server.port());
    let wrong = Client::connect(&url(":not-it")).await.err();
    assert!(matches!(wrong, Some(Error::Denied { .. })), "{wrong:?}");
    assert!(!format!("{wrong:?}").contains("not-it"));
    // A user that may run commands on other keys only.
    let mut admin_conn = redis::Client::open(url(":s3cret"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let rules = ["SETUSER", "app", "on", ">apppw", "~other:*", "+@all"];
    let _: () = redis::cmd("ACL")
        .arg(&rules)
        .query_async(&mut admin_conn)
        .await
        .unwrap();
    let app = Client::connect(&url("app:apppw")).await.unwrap();
    let refused = app.lock("guarded").acquire().await;
    match refused {
        Err(Error::Denied { lock, .. }) => assert_eq!(lock.as_deref(), Some("guarded")),
        other => panic!("expected Denied, got {other:?}"),
    }
    let admin = Client::connect(&url(":s3cret")).await.unwrap();
    assert!(!admin.status("guarded").await.unwrap().held);
}

/// A server that restarts without persistence has lost every lock. The client hears of the
/// restart (its connections drop) and renews every lease at once, so a holder is told within
/// moments, not at its next renewal a third of a lease (here 10 s) later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_lost_the_lock_is_heard_at_once() {
    let mut server = server();
    let client = client_with(&server, short_lease(30_000)).await;
    let guard = client.lock("restarted").acquire().await.unwrap();
    tokio::task::block_in_place(|| server.restart()).unwrap();
    within(5.0, "lost soon after the restart", guard.lost()).await;
    let why = guard
        .lost_reason()
        .map(|r| r.to_string())
        .unwrap_or_default();
    assert!(why.contains("renewal"), "{why}");
    // Meanwhile the lock is free for others.
    let other = client_with(&server, short_lease(30_000)).await;
    assert!(other.lock("restarted").try_acquire().await.unwrap().is_ok());
}

/// Issue 23 point 4: a holder hears of a forced unlock by another client at once (its
/// client's own channel, subscribed on connect), not at its next renewal a third of the lease
/// later, and `lost()` fires with the forced-unlock reason. Another holding of the same client
/// is not touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_hears_of_a_forced_unlock_at_once() {
    let server = server();
    let holder = client(&server).await;
    let guard = holder.lock("forced").acquire().await.unwrap();
    let kept = holder.lock("kept").acquire().await.unwrap();
    let admin = client(&server).await;
    let removed = admin.force_unlock("forced").await.unwrap();
    assert_eq!(removed.len(), 1, "{removed:?}");
    within(1.0, "lost after the forced unlock", guard.lost()).await;
    let reason = guard.lost_reason().unwrap().to_string();
    assert!(reason.contains("forced unlock"), "{reason}");
    assert!(kept.is_held());
    assert_eq!(kept.release().await.unwrap(), Released::Released);
}

/// Issue 23 points 4 and 8: an explicit owner id that starts with the client's id and a
/// colon (the CLI names its holdings `<client id>:<host>/<pid>/<program>/<since>`) is told of
/// a forced unlock at once too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_id_after_the_client_id_hears_of_a_forced_unlock_at_once() {
    let server = server();
    let holder = client(&server).await;
    let owner = format!("{}:web1/4242/report.sh/1795744801", holder.id());
    let guard = holder
        .lock("forced")
        .with_owner(&owner)
        .acquire()
        .await
        .unwrap();
    let admin = client(&server).await;
    let removed = admin.force_unlock("forced").await.unwrap();
    assert_eq!(removed.len(), 1, "{removed:?}");
    within(1.0, "lost after the forced unlock", guard.lost()).await;
}
