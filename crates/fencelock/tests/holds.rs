//! A release, renewal, heal or undo acts only on the hold it belongs to: a stale guard, a lost
//! attempt or a given-up wait never touches a newer holding (issue 9, items 1-6).
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use common::*;
use fencelock::{Client, ClientOptions, Error, LockOptions, Released};
use fencelock_testkit::RedisServer;

/// The hold ids the lock's holder has on `server` (empty when nobody holds it).
fn holds(server: &RedisServer, name: &str) -> Vec<String> {
    let key = format!("fencelock:{{{name}}}");
    match server.command(&["HGETALL", &key]).unwrap() {
        fencelock_testkit::Reply::Array(Some(fields)) => fields
            .chunks(2)
            .filter(|pair| !pair[0].text().unwrap().starts_with('='))
            .flat_map(|pair| {
                let ids = pair[1].text().unwrap();
                ids.split_whitespace()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect(),
        other => panic!("HGETALL replied {other:?}"),
    }
}

/// Waits until the client's background work (releases of dropped guards, undos) is done.
async fn settle(client: &Client) {
    within(5.0, "background work", client.clone().close())
        .await
        .expect("background work finished");
}

#[tokio::test]
async fn the_drop_of_a_lost_guard_never_releases_the_next_holding() {
    let server = server();
    let client = client_with(&server, short_lease(600)).await;
    let lock = client.lock("relost");
    for _ in 0..5 {
        let g1 = lock.acquire().await.unwrap();
        server.command(&["DEL", "fencelock:{relost}"]).unwrap();
        within(3.0, "g1 told it lost the lock", g1.lost()).await;
        // The shape of every "re-acquire when lost" loop.
        drop(g1);
        let g2 = lock.acquire().await.unwrap();
        settle(&client).await;
        assert!(g2.is_held());
        assert_eq!(
            holds(&server, "relost").len(),
            1,
            "g2's hold is still there"
        );
        let other = client_with(&server, short_lease(600)).await;
        assert!(
            other.lock("relost").try_acquire().await.unwrap().is_err(),
            "another client got in while g2 holds the lock"
        );
        assert_eq!(g2.release().await.unwrap(), Released::Released);
    }
}

#[tokio::test]
async fn retries_after_a_stalled_server_take_one_hold() {
    let server = server();
    let options = ClientOptions::default().response_timeout(Duration::from_millis(300));
    let client = client_with(&server, options).await;
    let lock = client.lock("stalled");
    // The server stalls for 0.9 s (an inline command on a socket of its own; its reply is
    // read at the end).
    let mut stall = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    std::io::Write::write_all(&mut stall, b"DEBUG SLEEP 0.9\r\n").unwrap();
    // Let DEBUG SLEEP reach the server first.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut failures = 0;
    let guard = within(10.0, "acquire after the stall", async {
        loop {
            match lock.acquire().await {
                Ok(guard) => break guard,
                Err(Error::Unavailable { .. }) => failures += 1,
                Err(e) => panic!("unexpected {e}"),
            }
        }
    })
    .await;
    let mut reply = [0u8; 5];
    std::io::Read::read_exact(&mut stall, &mut reply).unwrap();
    assert_eq!(&reply, b"+OK\r\n", "DEBUG SLEEP ran");
    assert!(failures >= 1, "the stall made no attempt fail");
    assert_eq!(
        guard.hold_count(),
        1,
        "a given-up attempt counted as a re-entry"
    );
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    settle(&client).await;
    assert!(!has_key(&server, "stalled"), "an orphan hold is left");
}

#[tokio::test]
async fn a_wait_cancelled_at_its_handover_then_retried_takes_one_hold() {
    let server = server();
    let holder = client(&server).await;
    let held = holder.lock("handed").acquire().await.unwrap();
    let client = client(&server).await;
    let lock = client.lock("handed");
    let mut waiting = Box::pin(lock.acquire());
    tokio::select! {
        _ = &mut waiting => panic!("acquired while held"),
        _ = eventually(5.0, "the waiter took its place", || queue_len(&server, "handed") == 1) => {}
    }
    // The release hands the lock to the waiter's place; the waiter stops caring just then
    // (as `timeout(d, lock.acquire())` does) and tries again.
    assert_eq!(held.release().await.unwrap(), Released::Released);
    assert_eq!(holds(&server, "handed").len(), 1, "handed over");
    drop(waiting);
    let guard = within(5.0, "the retry", lock.acquire()).await.unwrap();
    assert_eq!(
        guard.hold_count(),
        1,
        "the retry re-entered the abandoned handover"
    );
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    settle(&client).await;
    assert!(!has_key(&server, "handed"), "an orphan hold is left");
}

#[tokio::test]
async fn a_waiter_that_re_enters_leaves_the_queue() {
    let server = server();
    let holder = client(&server).await;
    let _held = holder.lock("reenter").acquire().await.unwrap();
    // A fixed lease is its own place window: the waiter does not renew its place (which
    // could take the lock first) during the test.
    let client = client(&server).await;
    let lock = client
        .lock("reenter")
        .with_options(LockOptions::default().lease(Duration::from_secs(20)));
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire().await.unwrap() })
    };
    eventually(5.0, "the waiter took its place", || {
        queue_len(&server, "reenter") == 1
    })
    .await;
    // The holder's key goes; a clone of the waiting handle takes the lock at once.
    server.command(&["DEL", "fencelock:{reenter}"]).unwrap();
    let first = lock.try_acquire().await.unwrap().expect("free");
    // Wake the waiter (a release message, as the deleted holder's release would have sent).
    server
        .command(&["PUBLISH", "fencelock:{reenter}:released", "x"])
        .unwrap();
    let second = within(5.0, "the waiter re-enters", waiter).await.unwrap();
    assert_eq!(second.hold_count(), 2);
    assert_eq!(
        queue_len(&server, "reenter"),
        0,
        "the re-entry kept its place"
    );
    assert!(matches!(
        second.release().await.unwrap(),
        Released::StillHeld { count: 1 }
    ));
    assert_eq!(first.release().await.unwrap(), Released::Released);
    assert!(
        !has_key(&server, "reenter"),
        "the lock was handed to a stale place"
    );
}

#[tokio::test]
async fn a_renewal_of_a_stale_guard_does_not_keep_it_alive() {
    let server = server();
    let client = client(&server).await;
    let lock = client
        .lock("stale")
        .with_options(LockOptions::default().lease(Duration::from_secs(10)));
    let g1 = lock.acquire().await.unwrap();
    server.command(&["DEL", "fencelock:{stale}"]).unwrap();
    let g2 = lock.acquire().await.unwrap();
    assert_eq!(g2.hold_count(), 1);
    assert!(
        matches!(
            g1.extend(Duration::from_secs(10)).await,
            Err(Error::LockLost { .. })
        ),
        "a stale guard renewed the newer holding"
    );
    assert!(!g1.is_held());
    assert!(g2.is_held());
    assert_eq!(g2.release().await.unwrap(), Released::Released);
}

#[tokio::test]
async fn a_redlock_heal_never_lands_after_the_release() {
    let servers = servers(3);
    let client = redlock(&servers, ClientOptions::default()).await;
    let lock = client
        .lock("healed")
        .with_options(LockOptions::default().lease(Duration::from_secs(20)));
    for _ in 0..5 {
        let guard = lock.acquire().await.unwrap();
        // Server 0 loses the lock (as a restart without persistence would), and answers the
        // extension first, while the other two are held up: the majority renews, server 0
        // says it lost it, and a heal is handed to the background task.
        servers[0].command(&["DEL", "fencelock:{healed}"]).unwrap();
        servers[1].pause();
        servers[2].pause();
        let extend = guard.extend(Duration::from_secs(20));
        let resume = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            servers[1].resume();
            servers[2].resume();
        };
        let (extended, ()) = tokio::join!(extend, resume);
        extended.unwrap();
        // The release follows at once, before the background task has run the heal.
        assert_eq!(guard.release().await.unwrap(), Released::Released);
        settle(&client).await;
        for (i, s) in servers.iter().enumerate() {
            assert!(
                !has_key(s, "healed"),
                "server {i} kept a grant after release"
            );
        }
    }
}

#[tokio::test]
async fn a_release_cut_short_is_finished_in_the_background() {
    let server = server();
    let options = ClientOptions::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(3));
    let client = client_with(&server, options).await;
    let guard = client.lock("cut").acquire().await.unwrap();
    server.pause();
    // The caller stops waiting for the release (a timeout around it, a cancelled task).
    let cut = tokio::time::timeout(Duration::from_millis(200), guard.release()).await;
    assert!(cut.is_err(), "released on a paused server");
    server.resume();
    settle(&client).await;
    assert!(
        !has_key(&server, "cut"),
        "the hold stayed after its release was cut short"
    );
}

#[tokio::test]
async fn an_attempt_stopped_by_a_server_error_keeps_what_it_carried() {
    let server = server();
    let client = client(&server).await;
    let lock = client.lock("carried");
    let guard = lock.acquire().await.unwrap();
    // A damaged queue key makes the background release of the dropped guard fail, and the
    // next attempt too, before it could give the hold back. (A release looks at the queue
    // only when the lock's '=q' marker says it may have entries: set it, as a waiter would.)
    server
        .command(&["SET", "fencelock:{carried}:queue", "oops"])
        .unwrap();
    server
        .command(&["HSET", "fencelock:{carried}", "=q", "1"])
        .unwrap();
    drop(guard);
    within(5.0, "background release", client.clone().close())
        .await
        .expect_err("the failed background release is reported");
    assert!(matches!(
        lock.try_acquire().await,
        Err(Error::WrongType { .. })
    ));
    server
        .command(&["DEL", "fencelock:{carried}:queue"])
        .unwrap();
    let again = lock.acquire().await.unwrap();
    assert_eq!(
        again.hold_count(),
        1,
        "the dropped guard's hold was re-entered"
    );
    assert_eq!(again.release().await.unwrap(), Released::Released);
    assert!(!has_key(&server, "carried"));
}

#[tokio::test]
async fn close_says_when_background_work_is_unfinished() {
    let servers = servers(3);
    let options = ClientOptions::default()
        .connect_timeout(Duration::from_millis(200))
        .response_timeout(Duration::from_millis(300));
    let client = redlock(&servers, options).await;
    let guard = client.lock("slow").acquire().await.unwrap();
    servers[2].pause();
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    let closed = within(5.0, "close", client.close()).await;
    servers[2].resume();
    assert!(
        matches!(closed, Err(Error::Unfinished { .. })),
        "close hid unfinished work: {closed:?}"
    );
}

#[tokio::test]
async fn attempts_dropped_while_the_server_is_paused_are_not_re_entered() {
    let server = server();
    let client = client(&server).await;
    let lock = client.lock("paused");
    server.pause();
    // The shape of `timeout(d, lock.acquire())` in a retry loop: each attempt reaches the
    // server's socket, and each future is dropped before its reply.
    for _ in 0..3 {
        let gave_up = tokio::time::timeout(Duration::from_millis(100), lock.acquire()).await;
        assert!(gave_up.is_err(), "acquired from a paused server");
    }
    let retry = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.resume();
    let guard = within(5.0, "the retry", retry).await.unwrap();
    assert_eq!(
        guard.hold_count(),
        1,
        "dropped attempts counted as re-entries"
    );
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    settle(&client).await;
    assert!(!has_key(&server, "paused"), "an orphan hold is left");
}

#[tokio::test]
async fn the_undo_of_a_dropped_attempt_gives_back_only_its_own_hold() {
    let server = server();
    let client = client(&server).await;
    let lock = client.lock("concurrent");
    server.pause();
    // Two attempts of one owner reach the paused server; the caller drops the first.
    let mut first = Box::pin(lock.acquire());
    let second = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await.unwrap() }
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(100), &mut first)
            .await
            .is_err(),
        "acquired from a paused server"
    );
    drop(first);
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.resume();
    let guard = within(5.0, "the second attempt", second).await.unwrap();
    settle(&client).await;
    // The first attempt's hold went with its undo; the second's is the only one left.
    assert_eq!(holds(&server, "concurrent").len(), 1);
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    assert!(!has_key(&server, "concurrent"), "an orphan hold is left");
}

/// Item 2 on RedLock: a majority of the servers stalls past the response timeout, and the
/// caller retries at once. When the servers run the queued attempts, none of the given-up
/// ones counts as a re-entry of the attempt that finally succeeds, and its one release frees
/// the lock on every server.
#[tokio::test]
async fn redlock_retries_after_a_stalled_majority_take_one_hold() {
    let servers = servers(3);
    let options = ClientOptions::default().response_timeout(Duration::from_millis(300));
    let client = redlock(&servers, options).await;
    let lock = client.lock("stalled-majority");
    // Load the scripts everywhere first, so that only the stall makes attempts fail.
    lock.acquire().await.unwrap().release().await.unwrap();
    settle(&client).await;
    // Two of three servers stall for 0.9 s (three response timeouts); their sockets keep
    // every request sent meanwhile, which they run when they wake.
    servers[0].pause();
    servers[1].pause();
    let mut failures = 0;
    let retries = async {
        loop {
            match lock.acquire().await {
                Ok(guard) => break guard,
                Err(Error::Unavailable { .. } | Error::Quorum { .. }) => failures += 1,
                Err(e) => panic!("unexpected {e}"),
            }
        }
    };
    let wake = async {
        tokio::time::sleep(Duration::from_millis(900)).await;
        servers[0].resume();
        servers[1].resume();
    };
    let (guard, ()) = within(15.0, "acquire after the stall", async {
        tokio::join!(retries, wake)
    })
    .await;
    assert!(failures >= 1, "the stall made no attempt fail");
    assert_eq!(
        guard.hold_count(),
        1,
        "a given-up attempt counted as a re-entry ({failures} attempts failed)"
    );
    let owner = lock.owner().to_owned();
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    // The release went to every server; the lease is 30 s, so a key still there after a
    // second is an orphan.
    eventually(1.0, "released on every server", || {
        servers.iter().all(|s| !has_key(s, "stalled-majority"))
    })
    .await;
    let other = redlock(&servers, ClientOptions::default()).await;
    let next = other
        .lock("stalled-majority")
        .try_acquire()
        .await
        .unwrap()
        .expect("the lock is free after the one release");
    for (i, s) in servers.iter().enumerate() {
        assert!(
            !granted_to(s, "stalled-majority", &owner),
            "server {i} kept a grant of the released owner"
        );
    }
    assert_eq!(next.release().await.unwrap(), Released::Released);
}

/// A RedLock lock under the watchdog (3 s lease) whose key server 0 lost: the renewal that
/// finds it gone answers there first while servers 1 and 2 are held up, so it succeeds on
/// the majority and hands a heal of server 0 to the background. Returns once that renewal
/// has been decided (servers 1 and 2 running again).
async fn heal_under_way(servers: &[RedisServer], name: &str) {
    let key = format!("fencelock:{{{name}}}");
    // A renewal in flight now would find the key still there: start from a clean count.
    let before = servers[0].command_calls("evalsha");
    servers[1].pause();
    servers[2].pause();
    servers[0].command(&["DEL", &key]).unwrap();
    // The next renewal (a third of the lease after the last) reaches server 0, which has
    // lost the lock, while the two others cannot answer yet.
    eventually(3.0, "a renewal reached server 0", || {
        servers[0].command_calls("evalsha") > before && !has_key(&servers[0], name)
    })
    .await;
    servers[1].resume();
    servers[2].resume();
}

/// Item 5 with the watchdog: a heal started by a renewal never leaves a grant behind the
/// release that follows it, whether the release comes at once or after the heal landed.
#[tokio::test]
async fn a_watchdog_heal_leaves_no_grant_after_the_release() {
    let servers = servers(3);
    let options = ClientOptions::default().default_lease(Duration::from_secs(3));
    let client = redlock(&servers, options).await;
    let lock = client.lock("watchdog-healed");
    for round in 0..4 {
        let guard = lock.acquire().await.unwrap();
        heal_under_way(&servers, "watchdog-healed").await;
        if round % 2 == 1 {
            // The heal runs: server 0 has the lock again before the release.
            eventually(2.0, "server 0 healed", || {
                has_key(&servers[0], "watchdog-healed")
            })
            .await;
        }
        assert!(guard.is_held(), "lost: {:?}", guard.lost_reason());
        assert_eq!(guard.release().await.unwrap(), Released::Released);
        // Well within the 3 s lease that a heal landing after the release would give.
        eventually(1.0, "no server keeps a grant after the release", || {
            servers.iter().all(|s| !has_key(s, "watchdog-healed"))
        })
        .await;
    }
}

/// Item 5: after a heal and the release, the same handle's next acquire takes a fresh
/// holding (one hold), not a re-entry of a hold the heal put back.
#[tokio::test]
async fn an_acquire_after_a_healed_release_takes_one_hold() {
    let servers = servers(3);
    let options = ClientOptions::default().default_lease(Duration::from_secs(3));
    let client = redlock(&servers, options).await;
    let lock = client.lock("heal-then-again");
    for _ in 0..4 {
        let guard = lock.acquire().await.unwrap();
        heal_under_way(&servers, "heal-then-again").await;
        assert_eq!(guard.release().await.unwrap(), Released::Released);
        // At once: a heal still under way would be re-entered.
        let again = lock.acquire().await.unwrap();
        assert_eq!(again.hold_count(), 1, "re-entered a stale hold");
        assert_eq!(again.release().await.unwrap(), Released::Released);
        eventually(1.0, "released on every server", || {
            servers.iter().all(|s| !has_key(s, "heal-then-again"))
        })
        .await;
    }
}
