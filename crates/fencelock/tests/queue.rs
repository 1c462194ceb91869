//! The server-side wait queue: waiters of different clients are served in arrival order, the
//! release script hands the lock over (one command per handover), and places of waiters that
//! gave up or died do not block the lock.
#![cfg(feature = "redis")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use fencelock::{Client, Error, Guard, Lock, LockOptions, Released};
use fencelock_testkit::RedisServer;

/// The length of one of the lock's queue keys (`LLEN` of the list, `HLEN` of the hash).
fn length(server: &RedisServer, command: &str, key: &str) -> i64 {
    server
        .command(&[command, key])
        .ok()
        .and_then(|r| r.int())
        .unwrap_or(-1)
}

/// Places recorded for `name`.
fn places(server: &RedisServer, name: &str) -> i64 {
    length(server, "HLEN", &format!("fencelock:{{{name}}}:waiting"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_different_clients_are_served_in_arrival_order() {
    let server = server();
    let holder = client(&server).await;
    let guard = holder.lock("line").acquire().await.unwrap();
    let first_token = guard.fencing_token();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let waiter = client(&server).await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = waiter.lock("line").acquire().await.unwrap();
            order.lock().unwrap().push((i, g.fencing_token()));
            assert_eq!(g.hold_count(), 1);
            assert_eq!(g.release().await.unwrap(), Released::Released);
        }));
        // Each takes its place before the next one comes.
        eventually(5.0, "the waiter took its place", || {
            queue_len(&server, "line") == i + 1
        })
        .await;
    }
    // Load the release script now, so that its first NOSCRIPT round does not count below.
    assert_eq!(
        holder.lock("warm").release().await.unwrap(),
        Released::NotHeld
    );
    let base = server.command_calls("evalsha");
    guard.release().await.unwrap();
    for task in tasks {
        within(10.0, "every waiter served", task).await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let who: Vec<i64> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(who, vec![0, 1, 2, 3], "not served in arrival order");
    let mut last = first_token;
    for (_, token) in &order {
        assert!(*token > last, "tokens {order:?} after {first_token}");
        last = *token;
    }
    // Five releases, each handing the lock to the next place; no waiter had to ask again.
    assert_eq!(server.command_calls("evalsha") - base, 5);
    assert_eq!(queue_len(&server, "line"), 0);
    assert_eq!(places(&server, "line"), 0);
    assert!(!has_key(&server, "line"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_give_up_leave_the_queue() {
    let server = server();
    let holder = client(&server).await;
    let guard = holder.lock("patience").acquire().await.unwrap();
    let waiter = client(&server).await;

    // A timed-out wait gives its place up before it returns.
    let timed_out = waiter
        .lock("patience")
        .acquire_timeout(Duration::from_millis(300))
        .await;
    assert!(
        matches!(timed_out, Err(Error::Timeout { .. })),
        "{timed_out:?}"
    );
    assert_eq!(queue_len(&server, "patience"), 0);
    assert_eq!(places(&server, "patience"), 0);

    // A wait that is dropped gives it up in the background.
    let lock = waiter.lock("patience");
    let task = tokio::spawn(async move { lock.acquire().await });
    eventually(5.0, "the waiter took its place", || {
        queue_len(&server, "patience") == 1
    })
    .await;
    task.abort();
    eventually(5.0, "the dropped wait left the queue", || {
        queue_len(&server, "patience") == 0 && places(&server, "patience") == 0
    })
    .await;

    // Nobody is handed the lock: the release frees it.
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    assert!(!has_key(&server, "patience"));
}

/// A place left by a waiter that died is skipped once its window has passed; while the window
/// lasts, the dead waiter is handed the lock, which then runs out, and the live waiter behind
/// it gets the lock when it renews its place (within half a window), not after a whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn places_of_dead_waiters_do_not_block_the_lock() {
    let server = server();
    let holder = client(&server).await;
    let waiter = client(&server).await;

    // A place whose window has passed is skipped.
    let past = server_micros(&server) - 2_000_000;
    let (guard, task) = ghost_ahead(&server, &holder, &waiter, "expired", past).await;
    guard.release().await.unwrap();
    let next = within(5.0, "handed past the expired place", task)
        .await
        .unwrap();
    let status = waiter.status("ghosts").await.unwrap();
    assert_eq!(status.owners.len(), 1);
    assert_ne!(status.owners[0].0, "expired");
    next.release().await.unwrap();

    // A place whose window still runs: the dead waiter is handed the lock for what is left.
    let now = server_micros(&server);
    let (guard, task) = ghost_ahead(&server, &holder, &waiter, "dead", now).await;
    guard.release().await.unwrap();
    let status = waiter.status("ghosts").await.unwrap();
    assert_eq!(status.owners, vec![("dead".to_owned(), 1)]);
    assert!(status.remaining_lease.unwrap() <= Duration::from_millis(1000));
    // The dead waiter's holding runs out after at most 1 s; the live waiter renews its place
    // every 2.5 s at the latest (half the 5 s window) and then takes the free lock.
    let next = within(5.0, "the live waiter after the dead one", task)
        .await
        .unwrap();
    assert!(next.is_held());
    next.release().await.unwrap();
}

/// `holder` takes the lock "ghosts"; a place for the dead waiter `ghost` (a 1 s window from
/// `since` µs) is queued by hand, then a live waiter of `waiter` queues behind it.
async fn ghost_ahead(
    server: &RedisServer,
    holder: &Client,
    waiter: &Client,
    ghost: &str,
    since: u64,
) -> (Guard, tokio::task::JoinHandle<Guard>) {
    let guard = holder.lock("ghosts").acquire().await.unwrap();
    server
        .command(&["RPUSH", "fencelock:{ghosts}:queue", ghost])
        .unwrap();
    let place = format!("{} 1000 {since} 0badc0de", since % 1000 + 1);
    server
        .command(&["HSET", "fencelock:{ghosts}:waiting", ghost, &place])
        .unwrap();
    let lock = waiter.lock("ghosts");
    let task = tokio::spawn(async move { lock.acquire().await.unwrap() });
    eventually(5.0, "the live waiter queued behind", || {
        queue_len(server, "ghosts") == 2
    })
    .await;
    (guard, task)
}

/// A handover whose message never arrived (the subscription was down) is claimed by the
/// waiter's next attempt: one hold, not two, and the lock is free after one release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_whose_message_was_lost_is_claimed() {
    let server = server();
    let holder = client(&server).await;
    let guard = holder.lock("quiet").acquire().await.unwrap();
    let waiter = client(&server).await;
    let lock = waiter.lock("quiet");
    let task = tokio::spawn(async move { lock.acquire().await.unwrap() });
    eventually(5.0, "the waiter took its place", || {
        queue_len(&server, "quiet") == 1
    })
    .await;
    // Hand the lock to the waiter's place as release.lua does, but without the message.
    let owner = server
        .command(&["LINDEX", "fencelock:{quiet}:queue", "0"])
        .unwrap()
        .text()
        .unwrap();
    let place = server
        .command(&["HGET", "fencelock:{quiet}:waiting", &owner])
        .unwrap()
        .text()
        .unwrap();
    let attempt = place.split(' ').next().unwrap().to_owned();
    let token = (guard.fencing_token() + 1).to_string();
    let handed = server
        .command(&[
            "EVAL",
            "redis.call('DEL', KEYS[1]) \
             redis.call('LPOP', KEYS[2]) redis.call('HDEL', KEYS[3], ARGV[1]) \
             redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], '=token', ARGV[3]) \
             redis.call('PEXPIRE', KEYS[1], 5000) return 1",
            "3",
            "fencelock:{quiet}",
            "fencelock:{quiet}:queue",
            "fencelock:{quiet}:waiting",
            &owner,
            &attempt,
            &token,
        ])
        .unwrap();
    assert_eq!(handed.int(), Some(1));
    assert!(!task.is_finished());
    // The subscription drops (as in a network failure); the waiter asks again and claims it.
    server
        .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .unwrap();
    let next = within(5.0, "the waiter claims the handover", task)
        .await
        .unwrap();
    assert_eq!(next.hold_count(), 1);
    assert_eq!(next.fencing_token().to_string(), token);
    assert_eq!(next.release().await.unwrap(), Released::Released);
    assert!(!has_key(&server, "quiet"));
    // The old holder's lock was taken from it by hand: its release changes nothing.
    assert_eq!(guard.release().await.unwrap(), Released::NotHeld);
}

/// A waiter with a fixed lease (no watchdog) that is handed the lock holds it for its whole
/// lease from the handover, not only for what was left of its place's window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_handed_over_is_a_whole_lease() {
    let server = server();
    let holder = client(&server).await;
    let guard = holder.lock("fixed").acquire().await.unwrap();
    let waiter = client(&server).await;
    let lock = waiter
        .lock("fixed")
        .with_options(LockOptions::default().lease(Duration::from_secs(2)));
    let task = tokio::spawn(async move { lock.acquire().await.unwrap() });
    eventually(5.0, "the waiter took its place", || {
        queue_len(&server, "fixed") == 1
    })
    .await;
    // Part of the place's 2 s window passes before the handover: what is left of it is
    // below the 1.5 s asked of the lease below. The waiter renews its place at half the
    // window (1 s after taking it): the release and the handover come well before that, so
    // that the only script call counted is the release.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let base = server.command_calls("evalsha");
    guard.release().await.unwrap();
    let next = within(5.0, "handed over", task).await.unwrap();
    // The handover carried the whole lease: the waiter sent nothing more (no extension).
    assert_eq!(
        server.command_calls("evalsha") - base,
        1,
        "only the release"
    );
    let validity = next.remaining_validity().unwrap();
    assert!(validity > Duration::from_millis(1500), "{validity:?}");
    let ttl = server
        .command(&["PTTL", "fencelock:{fixed}"])
        .unwrap()
        .int()
        .unwrap();
    assert!(ttl > 1500, "PTTL {ttl}");
    // The guard's deadline comes before the server's expiry.
    assert!(
        validity <= Duration::from_millis(ttl as u64),
        "{validity:?} vs PTTL {ttl}"
    );
    next.release().await.unwrap();
}

/// Calls of each command the server ran (those inside scripts included), from
/// `INFO commandstats`.
fn calls(server: &RedisServer, commands: &[&str]) -> Vec<u64> {
    commands.iter().map(|c| server.command_calls(c)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_pair_runs_no_queue_command_and_publishes_nothing() {
    let server = server();
    let client = client(&server).await;
    let lock = client.lock("alone");
    lock.acquire().await.unwrap().release().await.unwrap(); // scripts loaded
    let watched = [
        "evalsha", "publish", "llen", "lpop", "hlen", "rpush", "exists", "pttl", "hmget", "hset",
        "get", "set", "time", "pexpire", "del",
    ];
    let before = calls(&server, &watched);
    for _ in 0..10 {
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    let ran: Vec<u64> = calls(&server, &watched)
        .iter()
        .zip(&before)
        .map(|(a, b)| a - b)
        .collect();
    let per_pair: Vec<(&str, u64)> = watched.iter().copied().zip(ran).collect();
    // Acquire: EXISTS (the lock and its queue), TIME, the counter's SET ... GET, HSET,
    // PEXPIRE. Release: HMGET (the holder and the queue marker), DEL. Nobody waits: no queue
    // command, no PUBLISH.
    let expected = [
        ("evalsha", 20),
        ("publish", 0),
        ("llen", 0),
        ("lpop", 0),
        ("hlen", 0),
        ("rpush", 0),
        ("exists", 10),
        ("pttl", 0),
        ("hmget", 10),
        ("hset", 10),
        ("get", 0),
        ("set", 10),
        ("time", 10),
        ("pexpire", 10),
        ("del", 10),
    ];
    assert_eq!(per_pair, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_with_a_waiter_hands_over_and_marks_the_queue() {
    let server = server();
    let holder = client(&server).await;
    let guard = holder.lock("marked").acquire().await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..2 {
        let waiter = client(&server).await;
        tasks.push(tokio::spawn(async move {
            let g = waiter.lock("marked").acquire().await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            g.release().await.unwrap();
        }));
        eventually(5.0, "the waiter took its place", || {
            queue_len(&server, "marked") == i + 1
        })
        .await;
    }
    let marker = |s: &RedisServer| {
        s.command(&["HGET", "fencelock:{marked}", "=q"])
            .ok()
            .and_then(|r| r.text())
    };
    assert_eq!(
        marker(&server).as_deref(),
        Some("1"),
        "a waiter marks the lock"
    );
    let published = server.command_calls("publish");
    guard.release().await.unwrap();
    // The first waiter holds it now, with the second still queued: the mark stays.
    eventually(5.0, "handed over", || queue_len(&server, "marked") == 1).await;
    assert_eq!(
        marker(&server).as_deref(),
        Some("1"),
        "the handover keeps the mark"
    );
    for task in tasks {
        within(10.0, "both served", task).await.unwrap();
    }
    // Two handovers (one '=grant' each); the last release found nobody and published nothing.
    assert_eq!(server.command_calls("publish") - published, 2);
    assert!(!has_key(&server, "marked"));
}

/// A handover goes to the new holder's client alone, on the lock's channel followed by
/// `:<client id>`: another client waiting for the same lock is not woken to read it (on a
/// 2-core machine, seven clients woken per handover cost the new holder its turn). The place
/// names the client, whatever the owner id: here one chosen by hand that looks like a
/// client's (`<id>:<n>`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_reaches_the_new_holders_client_alone() {
    use futures_util::StreamExt;
    let server = server();
    let channel = "fencelock:{aimed}:released";
    let redis = redis::Client::open(server.url()).unwrap();
    let mut observer = redis.get_async_pubsub().await.unwrap();
    observer.subscribe(channel).await.unwrap();
    observer.psubscribe(format!("{channel}:*")).await.unwrap();
    let holder = client(&server).await;
    let guard = holder.lock("aimed").acquire().await.unwrap();
    let waiter = client(&server).await;
    let waiting = tokio::spawn(async move {
        let lock = waiter.lock("aimed").with_owner("deploy-bot:1");
        let guard = lock.acquire().await.unwrap();
        (waiter, guard)
    });
    eventually(5.0, "the waiter's place", || places(&server, "aimed") == 1).await;
    guard.release().await.unwrap();
    let (waiter, taken) = within(10.0, "handed over", waiting).await.unwrap();
    // Published after the handover, so it arrives after anything the handover published.
    server.command(&["PUBLISH", channel, "end"]).unwrap();
    let mut messages = Vec::new();
    let mut stream = observer.on_message();
    within(5.0, "the end marker", async {
        while let Some(m) = stream.next().await {
            let text: String = m.get_payload().unwrap();
            if text == "end" {
                break;
            }
            messages.push((m.get_channel_name().to_owned(), text));
        }
    })
    .await;
    let aimed = format!("{channel}:{}", waiter.id());
    assert_eq!(messages.len(), 1, "one handover message: {messages:?}");
    assert_eq!(
        messages[0].0, aimed,
        "on the new holder's channel: {messages:?}"
    );
    assert!(
        messages[0].1.starts_with("=grant "),
        "a grant: {messages:?}"
    );
    taken.release().await.unwrap();
}

/// A master with one replica in sync with it, for `min_replica_acks`.
async fn master_with_replica() -> (RedisServer, RedisServer) {
    let master = server();
    let replica = RedisServer::builder()
        .config("replicaof", &format!("127.0.0.1 {}", master.port()))
        .start()
        .unwrap();
    eventually(10.0, "replica in sync", || {
        replica.info_field("master_link_status").as_deref() == Some("up")
    })
    .await;
    (master, replica)
}

/// Two clients of `server` taking turns on `name` (100 ms holds) until `stop` is set; each
/// task returns how many turns it took.
async fn take_turns(
    server: &RedisServer,
    name: &str,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<usize>> {
    let mut turns = Vec::new();
    for _ in 0..2 {
        let c = client(server).await;
        let (stop, name) = (stop.clone(), name.to_owned());
        turns.push(tokio::spawn(async move {
            let lock = c.lock(&name);
            let mut taken = 0;
            while !stop.load(Ordering::Relaxed) && taken < 200 {
                let g = lock.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
                g.release().await.unwrap();
                taken += 1;
            }
            taken
        }));
    }
    turns
}

/// Stops the clients of [`take_turns`], after checking that they were still taking turns.
async fn stop_turns(stop: &AtomicBool, turns: Vec<tokio::task::JoinHandle<usize>>) {
    assert!(
        turns.iter().all(|t| !t.is_finished()),
        "the others had stopped"
    );
    stop.store(true, Ordering::Relaxed);
    for t in turns {
        within(5.0, "the others stop", t).await.unwrap();
    }
}

/// The owners in the wait queue of `name`, in order.
fn queued_owners(server: &RedisServer, name: &str) -> Vec<String> {
    let key = format!("fencelock:{{{name}}}:queue");
    match server.command(&["LRANGE", &key, "0", "-1"]).unwrap() {
        fencelock_testkit::Reply::Array(Some(items)) => {
            items.iter().map(|i| i.text().unwrap()).collect()
        }
        other => panic!("LRANGE replied {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_wants_replica_acks_is_served_under_contention() {
    let (master, _replica) = master_with_replica().await;
    let stop = Arc::new(AtomicBool::new(false));
    let turns = take_turns(&master, "acked", &stop).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let acked = client(&master).await;
    let lock = acked
        .lock("acked")
        .with_options(LockOptions::default().min_replica_acks(1, Duration::from_millis(500)));
    let guard = lock
        .acquire_timeout(Duration::from_secs(5))
        .await
        .expect("the replica-ack waiter was served while others took turns");
    assert!(guard.is_held());
    assert!(
        turns.iter().all(|t| !t.is_finished()),
        "the others had stopped"
    );
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    stop_turns(&stop, turns).await;
}

/// Waits for `lock`, records `who` in `served`, holds it briefly and releases it.
fn serve(
    lock: Lock,
    who: &'static str,
    served: &Arc<Mutex<Vec<&'static str>>>,
) -> tokio::task::JoinHandle<()> {
    let served = served.clone();
    tokio::spawn(async move {
        let guard = lock.acquire().await.unwrap();
        assert!(guard.is_held());
        assert_eq!(guard.hold_count(), 1);
        served.lock().unwrap().push(who);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(guard.release().await.unwrap(), Released::Released);
    })
}

/// Issue 9 item 13: ordinary waiters that queue in their client behind a waiter wanting
/// replica acks are served too, in bounded time, while two other clients take turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_behind_a_replica_ack_waiter_of_their_client_are_served_under_contention() {
    let (master, _replica) = master_with_replica().await;
    let stop = Arc::new(AtomicBool::new(false));
    let turns = take_turns(&master, "acked-line", &stop).await;
    eventually(5.0, "the others contend", || {
        queue_len(&master, "acked-line") >= 1
    })
    .await;
    let client = client(&master).await;
    let acked = client
        .lock("acked-line")
        .with_options(LockOptions::default().min_replica_acks(1, Duration::from_millis(500)));
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = vec![serve(acked.clone(), "acks", &served)];
    eventually(5.0, "the replica-ack waiter took its place", || {
        queued_owners(&master, "acked-line").contains(&acked.owner().to_owned())
    })
    .await;
    // Two ordinary handles of the same client (owners of their own): they queue in the
    // client behind the replica-ack waiter.
    for who in ["plain 1", "plain 2"] {
        tasks.push(serve(client.lock("acked-line"), who, &served));
    }
    within(
        10.0,
        "every waiter of the client served under contention",
        async {
            for t in tasks {
                t.await.unwrap();
            }
        },
    )
    .await;
    let served = served.lock().unwrap().clone();
    assert_eq!(served.len(), 3, "{served:?}");
    assert_eq!(served[0], "acks", "{served:?}");
    stop_turns(&stop, turns).await;
}

/// Issue 9 item 13: a waiter whose place in the server's queue went when a clone of its
/// owner released (`Lock::release` without a guard, holding nothing, leaves the queue) is
/// told nothing when the lock changes hands, yet is still served in bounded time while two
/// other clients take turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_place_a_clone_gave_up_is_served_under_contention() {
    let server = server();
    // A long holder, so that nothing is handed over while the place goes.
    let first = client(&server).await;
    let held = first
        .lock("regained")
        .with_options(LockOptions::default().lease(Duration::from_secs(20)))
        .acquire()
        .await
        .unwrap();
    let client = client(&server).await;
    let lock = client.lock("regained");
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await }
    });
    let owner = lock.owner().to_owned();
    eventually(5.0, "the waiter took its place", || {
        queued_owners(&server, "regained") == [owner.clone()]
    })
    .await;
    assert_eq!(lock.release().await.unwrap(), Released::NotHeld);
    assert!(
        queued_owners(&server, "regained").is_empty(),
        "the owner's place stayed"
    );
    // Two other clients queue behind the holder, then take turns.
    let stop = Arc::new(AtomicBool::new(false));
    let turns = take_turns(&server, "regained", &stop).await;
    eventually(5.0, "the others queued", || {
        queue_len(&server, "regained") == 2
    })
    .await;
    assert_eq!(held.release().await.unwrap(), Released::Released);
    let guard = within(6.0, "the waiter whose place went is served", waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(guard.is_held());
    assert_eq!(guard.hold_count(), 1);
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    stop_turns(&stop, turns).await;
}

/// The environment variable that makes [`waiter_process`] wait for a lock on this server URL.
const WAITER_URL: &str = "FENCELOCK_TEST_WAITER_URL";

/// Not a test of its own: the waiting process of
/// [`a_waiter_killed_while_queued_costs_others_one_window`], which starts this test binary
/// again to run it and kills it with SIGKILL while it waits. Without [`WAITER_URL`] it does
/// nothing; with it, it waits for the lock "dead" and ends by itself after 60 s at the latest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_process() {
    let Ok(url) = std::env::var(WAITER_URL) else {
        return;
    };
    let client = Client::connect(&url).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        let _guard = client.lock("dead").acquire().await.unwrap();
        std::future::pending::<()>().await
    });
    let _ = waited.await;
}

/// A child process, killed (SIGKILL, by its PID) and reaped when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 22 point 7: a waiter whose process is killed (SIGKILL) while it has a place in the
/// server's queue costs the waiters behind it at most one window (5 s with the watchdog), not
/// the 30 s lease: the release hands the dead waiter's place one window, not the whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_killed_while_queued_costs_others_one_window() {
    let server = server();
    let holder = client(&server).await;
    let guard = holder.lock("dead").acquire().await.unwrap();
    let mut dead = Child(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "waiter_process", "--nocapture"])
            .env(WAITER_URL, server.url())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    eventually(20.0, "the waiting process took its place", || {
        queue_len(&server, "dead") == 1
    })
    .await;
    dead.0.kill().unwrap();
    dead.0.wait().unwrap();
    let waiter = client(&server).await;
    let lock = waiter.lock("dead");
    let task = tokio::spawn(async move { lock.acquire().await.unwrap() });
    eventually(5.0, "the live waiter queued behind", || {
        queue_len(&server, "dead") == 2
    })
    .await;
    let released = std::time::Instant::now();
    guard.release().await.unwrap();
    // The dead waiter's place was handed the lock, for one window.
    let status = waiter.status("dead").await.unwrap();
    assert_eq!(status.owners.len(), 1);
    let left = status.remaining_lease.unwrap();
    assert!(
        left <= Duration::from_secs(5),
        "the dead waiter holds {left:?}"
    );
    let next = within(7.0, "the live waiter after the dead one", task)
        .await
        .unwrap();
    let waited = released.elapsed();
    assert!(waited <= Duration::from_millis(6500), "waited {waited:?}");
    assert!(next.is_held());
    next.release().await.unwrap();
}

/// A live waiter handed the lock gets one window (5 s with the watchdog) without a request
/// of its own (the handover is one command, the release), and its watchdog renews it to the
/// whole lease a third into that window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_waiter_handed_over_renews_to_its_whole_lease() {
    let server = server();
    let holder = client(&server).await;
    let guard = holder.lock("live").acquire().await.unwrap();
    let waiter = client(&server).await;
    let lock = waiter.lock("live");
    let task = tokio::spawn(async move { lock.acquire().await.unwrap() });
    eventually(5.0, "the waiter took its place", || {
        queue_len(&server, "live") == 1
    })
    .await;
    let base = server.command_calls("evalsha");
    guard.release().await.unwrap();
    let next = within(5.0, "handed over", task).await.unwrap();
    let pttl = || {
        server
            .command(&["PTTL", "fencelock:{live}"])
            .unwrap()
            .int()
            .unwrap()
    };
    assert!(pttl() <= 5000, "PTTL {}", pttl());
    let validity = next.remaining_validity().unwrap();
    assert!(validity <= Duration::from_secs(5), "{validity:?}");
    assert_eq!(
        server.command_calls("evalsha") - base,
        1,
        "only the release"
    );
    // Renewed about 1.7 s after the handover (a third into the 5 s window).
    eventually(4.5, "renewed to the whole lease", || pttl() > 20_000).await;
    within(1.0, "the guard's deadline follows", async {
        while next.remaining_validity().unwrap() <= Duration::from_secs(20) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(next.is_held());
    next.release().await.unwrap();
}

/// `holder` holds `name` while a waiter (fixed lease of 20 s: its place's window, renewed at
/// half of it) is queued; the lock then expires silently, as when the holder's process
/// stopped. Another client takes the free lock with an attempt that does not queue
/// (`try_acquire`, or the first quick attempt of `acquire`) and releases it: the queued waiter
/// is handed the lock at once, not 10 s later when its own timer runs out.
async fn a_lock_taken_past_its_queue_is_handed_over(name: &str, try_acquire: bool) {
    let server = server();
    let holder = client(&server).await;
    let _expires = holder.lock(name).acquire().await.unwrap();
    let waiter = client(&server).await;
    let lock = waiter
        .lock(name)
        .with_options(LockOptions::default().lease(Duration::from_secs(20)));
    let task = tokio::spawn(async move { lock.acquire().await.unwrap() });
    eventually(5.0, "the waiter took its place", || {
        queue_len(&server, name) == 1
    })
    .await;
    server
        .command(&["PEXPIRE", &format!("fencelock:{{{name}}}"), "1"])
        .unwrap();
    eventually(5.0, "the lock expired", || !has_key(&server, name)).await;
    let other = client(&server).await;
    let lock = other.lock(name);
    let guard = if try_acquire {
        lock.try_acquire().await.unwrap().unwrap()
    } else {
        lock.acquire().await.unwrap()
    };
    guard.release().await.unwrap();
    let next = within(2.0, "handed to the queued waiter at the release", task)
        .await
        .unwrap();
    assert!(next.is_held());
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_past_its_queue_by_try_acquire_is_handed_over() {
    a_lock_taken_past_its_queue_is_handed_over("past-try", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_past_its_queue_by_a_quick_attempt_is_handed_over() {
    a_lock_taken_past_its_queue_is_handed_over("past-quick", false).await;
}
