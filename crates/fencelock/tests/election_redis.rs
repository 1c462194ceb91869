//! Leader elections on Redis (issue 25, points 1 and 2): one server, Sentinel and Cluster
//! elect through the lock of the election's name (its queue, handover, watchdog and fencing
//! counter); the value lives in the lock's slot; `observe` follows the lock's channel and the
//! leader's lease; RedLock refuses with a typed error.
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use common::*;
use fencelock::{Client, ClientOptions, Error, Leader, Leadership, Observer, Released};
use fencelock_testkit::{RedisCluster, RedisServer, Reply, SentinelSet};

/// What an observer reported: the value and term, or `None`.
fn seen(reported: &Option<Leader>) -> Option<(&str, u64)> {
    reported.as_ref().map(|l| (l.value.as_str(), l.term))
}

/// The observer's next report, within `secs` seconds.
async fn next(observer: &mut Observer, secs: f64, what: &str) -> Option<Leader> {
    within(secs, what, observer.changed())
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// A campaign on its own task, for a participant that waits.
fn campaigning(
    client: &Client,
    name: &str,
    value: &str,
) -> tokio::task::JoinHandle<fencelock::Result<Leadership>> {
    let election = client.election(name);
    let value = value.to_owned();
    tokio::spawn(async move { election.campaign(&value).await })
}

async fn leading(task: tokio::task::JoinHandle<fencelock::Result<Leadership>>) -> Leadership {
    within(10.0, "the participant leads", task)
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_leads_until_it_resigns() {
    let server = server();
    let client = client(&server).await;
    let election = client.election("resign");
    assert_eq!(election.leader().await.unwrap(), None);
    let leadership = election.try_campaign("node-1:8080").await.unwrap().unwrap();
    assert!(leadership.is_leading());
    assert_eq!(leadership.value(), "node-1:8080");
    let now = election.leader().await.unwrap();
    assert_eq!(seen(&now), Some(("node-1:8080", leadership.term())));
    // Another participant does not lead meanwhile.
    let other = client
        .election("resign")
        .try_campaign("node-2")
        .await
        .unwrap();
    assert!(other.is_err(), "two leaders");
    // The value is the lock hash's '=v' field, next to the holder and its token.
    let stored = server
        .command(&["HGET", "fencelock:{resign}", "=v"])
        .unwrap();
    assert_eq!(stored.text().as_deref(), Some("node-1:8080"));
    assert_eq!(leadership.resign().await.unwrap(), Released::Released);
    assert_eq!(election.leader().await.unwrap(), None);
    assert!(!has_key(&server, "resign"));
}

/// Participants lead in arrival order, each with a strictly higher term; a value with spaces,
/// a newline, `=` and NUL survives the wait in the queue and the handover; `status` reads an
/// election's places.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_participant_leads_in_arrival_order_with_a_higher_term() {
    let server = server();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let name = "order";
    let first = a.election(name).campaign("a").await.unwrap();
    let odd = "b: spaces and\nnewlines = ✓ \0 ";
    let second = campaigning(&b, name, odd);
    eventually(5.0, "b queued", || queue_len(&server, name) == 1).await;
    let third = campaigning(&c, name, "c");
    eventually(5.0, "c queued", || queue_len(&server, name) == 2).await;
    let status = a.status(name).await.unwrap();
    assert_eq!(status.waiters.len(), 2);
    assert!(
        status.waiters.iter().all(|w| w.unreadable.is_none()),
        "{status:?}"
    );

    let term_a = first.term();
    first.resign().await.unwrap();
    let second = leading(second).await;
    assert!(second.term() > term_a);
    assert_eq!(second.value(), odd);
    let now = a.election(name).leader().await.unwrap();
    assert_eq!(seen(&now), Some((odd, second.term())));
    assert!(!third.is_finished(), "c led before b resigned");

    let term_b = second.term();
    drop(second); // resigned in the background, as a dropped guard is released
    let third = leading(third).await;
    assert!(third.term() > term_b);
    assert_eq!(
        seen(&c.election(name).leader().await.unwrap()),
        Some(("c", third.term()))
    );
    third.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proclaim_changes_the_value_only_while_leading() {
    let server = server();
    let client = client(&server).await;
    let election = client.election("proclaim");
    let mut leadership = election.campaign("before").await.unwrap();
    leadership.proclaim("after").await.unwrap();
    assert_eq!(leadership.value(), "after");
    assert_eq!(
        seen(&election.leader().await.unwrap()),
        Some(("after", leadership.term()))
    );
    // Deposed behind its back (the key deleted): proclaim fails typed, changes nothing, and
    // the leadership counts as lost.
    server.command(&["DEL", "fencelock:{proclaim}"]).unwrap();
    match leadership.proclaim("late").await {
        Err(Error::LockLost { .. }) => {}
        other => panic!("expected LockLost, got {other:?}"),
    }
    assert!(!leadership.is_leading());
    assert_eq!(leadership.value(), "after");
    assert!(!has_key(&server, "proclaim"));
    assert_eq!(election.leader().await.unwrap(), None);
}

/// `observe` reports the leader as it is, then every change in order: a leader, its new
/// value, the next leader (higher term), nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_reports_each_change_in_order() {
    let server = server();
    let (a, b, watcher) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let name = "watched";
    let mut observer = watcher.election(name).observe().await.unwrap();
    assert_eq!(next(&mut observer, 2.0, "nobody at first").await, None);

    let mut first = a.election(name).campaign("a").await.unwrap();
    let term_a = first.term();
    let got = next(&mut observer, 2.0, "a leads").await;
    assert_eq!(seen(&got), Some(("a", term_a)));
    first.proclaim("a2").await.unwrap();
    let got = next(&mut observer, 2.0, "a's new value").await;
    assert_eq!(seen(&got), Some(("a2", term_a)));

    let second = campaigning(&b, name, "b");
    eventually(5.0, "b queued", || queue_len(&server, name) == 1).await;
    first.resign().await.unwrap();
    let got = next(&mut observer, 2.0, "b leads after the handover").await;
    let second = leading(second).await;
    assert_eq!(seen(&got), Some(("b", second.term())));
    assert!(second.term() > term_a);

    second.resign().await.unwrap();
    assert_eq!(next(&mut observer, 2.0, "nobody after b").await, None);
}

/// An election on the same server as busy mutexes costs the mutexes nothing: a mutex's
/// acquire + release pair is 2 scripts and 9 server commands in all, no `PUBLISH`, as before
/// elections existed; a campaign + resign pair is 2 scripts and 11 commands, its 2 more the
/// `PUBLISH`es that tell observers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_and_resign_cost_two_publishes_more_than_a_mutex() {
    let server = server();
    let client = client(&server).await;
    // Warm up: scripts loaded, the first acquire's extra work done.
    client
        .lock("m")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let mutex = commands(&server, async {
        let guard = client.lock("m").acquire().await.unwrap();
        guard.release().await.unwrap();
    })
    .await;
    let election = commands(&server, async {
        let leadership = client.election("e").campaign("v").await.unwrap();
        leadership.resign().await.unwrap();
    })
    .await;
    eprintln!("mutex pair: {mutex:?}\nelection pair: {election:?}");
    let count = |stats: &[(String, u64)], cmd: &str| {
        stats.iter().find(|(c, _)| c == cmd).map_or(0, |(_, n)| *n)
    };
    let total = |stats: &[(String, u64)]| stats.iter().map(|(_, n)| n).sum::<u64>();
    assert_eq!(count(&mutex, "evalsha"), 2);
    assert_eq!(count(&mutex, "publish"), 0);
    assert_eq!(total(&mutex), 9, "{mutex:?}");
    assert_eq!(count(&election, "evalsha"), 2);
    assert_eq!(count(&election, "publish"), 2);
    assert_eq!(total(&election), 11, "{election:?}");
}

/// A handover (the release that gives the lock to the first place) is one script for both
/// kinds; an election's costs one `PUBLISH` more (`=leader`, for observers) and nothing else:
/// the participant's value came with its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_costs_an_election_one_publish_more() {
    let server = server();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut costs = Vec::new();
    for election in [false, true] {
        let name = if election { "he" } else { "hm" };
        let (released, taken) = if election {
            let first = a.election(name).campaign("a").await.unwrap();
            let second = campaigning(&b, name, "b");
            eventually(5.0, "b queued", || queue_len(&server, name) == 1).await;
            let cost = commands(&server, async {
                first.resign().await.unwrap();
            })
            .await;
            (cost, leading(second).await.resign().await.unwrap())
        } else {
            let first = a.lock(name).acquire().await.unwrap();
            let lock = b.lock(name);
            let second = tokio::spawn(async move { lock.acquire().await.unwrap() });
            eventually(5.0, "b queued", || queue_len(&server, name) == 1).await;
            let cost = commands(&server, async {
                first.release().await.unwrap();
            })
            .await;
            let second = within(5.0, "handed over", second).await.unwrap();
            (cost, second.release().await.unwrap())
        };
        assert_eq!(taken, Released::Released);
        eprintln!("handover (election: {election}): {released:?}");
        costs.push(released);
    }
    let count = |stats: &[(String, u64)], cmd: &str| {
        stats.iter().find(|(c, _)| c == cmd).map_or(0, |(_, n)| *n)
    };
    let total = |stats: &[(String, u64)]| stats.iter().map(|(_, n)| n).sum::<u64>();
    let (mutex, election) = (&costs[0], &costs[1]);
    assert_eq!(count(mutex, "evalsha"), 1);
    assert_eq!(count(election, "evalsha"), 1);
    assert_eq!(count(election, "publish"), count(mutex, "publish") + 1);
    assert_eq!(total(election), total(mutex) + 1, "{mutex:?} {election:?}");
}

/// Every command's calls (INFO commandstats) that `f` caused, but the INFO calls themselves.
async fn commands(
    server: &RedisServer,
    f: impl std::future::Future<Output = ()>,
) -> Vec<(String, u64)> {
    let before = commandstats(server);
    f.await;
    let after = commandstats(server);
    after
        .into_iter()
        .filter(|(cmd, _)| cmd != "info")
        .filter_map(|(cmd, n)| {
            let was = before
                .iter()
                .find(|(c, _)| *c == cmd)
                .map_or(0, |(_, n)| *n);
            (n > was).then(|| (cmd, n - was))
        })
        .collect()
}

fn commandstats(server: &RedisServer) -> Vec<(String, u64)> {
    let info = server
        .command(&["INFO", "commandstats"])
        .unwrap()
        .text()
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?;
            let (cmd, stats) = rest.split_once(":calls=")?;
            let calls = stats.split(',').next()?.parse().ok()?;
            Some((cmd.to_owned(), calls))
        })
        .collect()
}

/// The environment variable that makes [`participant_process`] campaign on this server URL.
const PARTICIPANT_URL: &str = "FENCELOCK_TEST_PARTICIPANT_URL";

/// Not a test of its own: the participant process of
/// [`a_killed_leader_is_out_after_its_lease_and_the_next_leads`], which starts this test
/// binary again to run it and kills it with SIGKILL while it leads. Without
/// [`PARTICIPANT_URL`] it does nothing; with it, it leads "failover" with a 1.5 s lease and
/// ends by itself after 60 s at the latest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn participant_process() {
    let Ok(url) = std::env::var(PARTICIPANT_URL) else {
        return;
    };
    let client = client_at(&url, 1500).await;
    let led = tokio::time::timeout(Duration::from_secs(60), async {
        let _leading = client.election("failover").campaign("child").await.unwrap();
        std::future::pending::<()>().await
    });
    let _ = led.await;
}

/// A child process, killed (SIGKILL, by its PID) and reaped when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 25: a participant whose process is gone (SIGKILL) is out after its lease; the next
/// participant leads with a higher term, and an observer sees the change without polling
/// (the leader's expiry wakes it, the new leader's `=leader` message too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_out_after_its_lease_and_the_next_leads() {
    let server = server();
    let mut child = Child(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "participant_process", "--nocapture"])
            .env(PARTICIPANT_URL, server.url())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let watcher = client(&server).await;
    let mut observer = watcher.election("failover").observe().await.unwrap();
    let mut reported = next(&mut observer, 20.0, "the first report").await;
    if reported.is_none() {
        reported = next(&mut observer, 20.0, "the child leads").await;
    }
    let (value, term) = seen(&reported).unwrap();
    assert_eq!(value, "child");
    let standby = client_at(&server.url(), 1500).await;
    let next_leader = campaigning(&standby, "failover", "standby");
    eventually(5.0, "the standby queued", || {
        queue_len(&server, "failover") == 1
    })
    .await;
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let killed = std::time::Instant::now();
    let leadership = within(5.0, "the standby leads", next_leader)
        .await
        .unwrap()
        .unwrap();
    // At most the child's lease (1.5 s) plus half the standby's place window (0.75 s), and
    // some room for a busy machine.
    assert!(
        killed.elapsed() < Duration::from_millis(3500),
        "{:?}",
        killed.elapsed()
    );
    assert!(leadership.term() > term);
    loop {
        let got = next(&mut observer, 5.0, "the observer sees the standby").await;
        match seen(&got) {
            None => continue, // the child's lease ran out before the standby took over
            Some((value, now)) => {
                assert_eq!((value, now), ("standby", leadership.term()));
                break;
            }
        }
    }
    leadership.resign().await.unwrap();
}

/// A killed subscriber connection ends the observer's feed with an error (changes may have
/// been missed); the next `changed()` follows anew and reports the leader as it is then, and
/// the changes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_subscription_ends_observe_with_an_error_and_it_picks_up_again() {
    let server = server();
    let (a, watcher) = (client(&server).await, client(&server).await);
    let mut observer = watcher.election("cut").observe().await.unwrap();
    assert_eq!(next(&mut observer, 2.0, "nobody").await, None);
    server
        .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .unwrap();
    match within(10.0, "the observer hears of the cut", observer.changed()).await {
        Err(Error::Unavailable { detail, .. }) => assert!(detail.contains("lost"), "{detail}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let leadership = a.election("cut").campaign("a").await.unwrap();
    let got = next(&mut observer, 10.0, "following anew").await;
    assert_eq!(seen(&got), Some(("a", leadership.term())));
    leadership.resign().await.unwrap();
    assert_eq!(next(&mut observer, 2.0, "nobody again").await, None);
}

/// RedLock has no queue, so no election: each operation refuses with `Unsupported` before
/// any I/O, and no key is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_elections() {
    let servers = servers(3);
    let client = redlock(&servers, ClientOptions::default()).await;
    let election = client.election("refused");
    let unsupported = |result: Result<(), Error>, op: &str| match result {
        Err(Error::Unsupported { what, why, .. }) => {
            assert!(what.starts_with(op), "{what}");
            assert!(why.contains("queue"), "{why}");
        }
        other => panic!("{op}: expected Unsupported, got {other:?}"),
    };
    unsupported(
        election.try_campaign("x").await.map(|_| ()),
        "Election::campaign",
    );
    unsupported(
        election.campaign("x").await.map(|_| ()),
        "Election::campaign",
    );
    unsupported(election.leader().await.map(|_| ()), "Election::leader");
    unsupported(election.observe().await.map(|_| ()), "Election::observe");
    for server in &servers {
        assert_eq!(keys(server), Vec::<String>::new());
    }
}

fn keys(server: &RedisServer) -> Vec<String> {
    match server.command(&["KEYS", "*"]).unwrap() {
        Reply::Array(Some(keys)) => keys.iter().filter_map(|k| k.text()).collect(),
        other => panic!("KEYS replied {other:?}"),
    }
}

/// No key is left behind by an election: after a campaign, a participant queued with its
/// value, a handover, a proclaim and the resignations, only the fencing counter is left (with
/// its horizon as TTL), and nothing once the horizon passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_is_left_after_the_participants_resign() {
    let server = server();
    let options = ClientOptions::default().fence_horizon(Duration::from_millis(1000));
    let a = client_with(&server, options.clone()).await;
    let b = client_with(&server, options).await;
    let first = a.election("tidy").campaign("a").await.unwrap();
    let second = campaigning(&b, "tidy", "b");
    eventually(5.0, "b queued", || queue_len(&server, "tidy") == 1).await;
    first.resign().await.unwrap();
    let mut second = leading(second).await;
    second.proclaim("b2").await.unwrap();
    second.resign().await.unwrap();
    assert_eq!(keys(&server), vec!["fencelock:{tidy}:fence".to_owned()]);
    let ttl = server
        .command(&["PTTL", "fencelock:{tidy}:fence"])
        .unwrap()
        .int()
        .unwrap();
    assert!(ttl == -2 || (0 < ttl && ttl <= 1000), "{ttl}");
    eventually(5.0, "the counter expired", || keys(&server).is_empty()).await;
}

/// Sentinel: elections go to the master the sentinels name, with the same queue, handover
/// and observer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_through_sentinel() {
    let set = tokio::task::spawn_blocking(|| SentinelSet::start().unwrap())
        .await
        .unwrap();
    elect_through(&set.url()).await;
    drop(set);
}

/// Cluster: the value, queue and channel live in the election's slot; observers hear the
/// changes through sharded pub/sub.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start().unwrap())
        .await
        .unwrap();
    elect_through(&cluster.url()).await;
    let master = cluster.master_of(cluster.slot("deployed")).unwrap();
    assert_eq!(
        master
            .command(&["EXISTS", "fencelock:{deployed}"])
            .unwrap()
            .int(),
        Some(0)
    );
}

/// A campaign, a participant queued behind, an observer that sees the leader, its new value,
/// the handover and nobody, on the deployment at `url`.
async fn elect_through(url: &str) {
    let a = Client::connect(url).await.unwrap();
    let b = Client::connect(url).await.unwrap();
    let watcher = Client::connect(url).await.unwrap();
    let name = "deployed";
    let mut observer = watcher.election(name).observe().await.unwrap();
    assert_eq!(next(&mut observer, 5.0, "nobody").await, None);
    let mut first = a.election(name).campaign("a").await.unwrap();
    assert_eq!(
        seen(&next(&mut observer, 5.0, "a").await),
        Some(("a", first.term()))
    );
    first.proclaim("a2").await.unwrap();
    assert_eq!(
        seen(&next(&mut observer, 5.0, "a2").await),
        Some(("a2", first.term()))
    );
    let second = campaigning(&b, name, "b");
    within(5.0, "b queued", async {
        while a.status(name).await.unwrap().waiters.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    first.resign().await.unwrap();
    let got = next(&mut observer, 5.0, "b").await;
    let second = leading(second).await;
    assert_eq!(seen(&got), Some(("b", second.term())));
    assert_eq!(
        seen(&watcher.election(name).leader().await.unwrap()),
        Some(("b", second.term()))
    );
    second.resign().await.unwrap();
    assert_eq!(next(&mut observer, 5.0, "nobody at the end").await, None);
}

/// A participant that gives up (`campaign_timeout`) leaves the queue with its value, and is
/// never handed the leadership afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_that_gives_up_leaves_no_place() {
    let server = server();
    let (a, b) = (client(&server).await, client(&server).await);
    let first = a.election("patience").campaign("a").await.unwrap();
    let started = std::time::Instant::now();
    match b
        .election("patience")
        .campaign_timeout("b", Duration::from_millis(300))
        .await
    {
        Err(Error::Timeout { .. }) => {}
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(queue_len(&server, "patience"), 0);
    assert!(!keys(&server).contains(&"fencelock:{patience}:waiting".to_owned()));
    first.resign().await.unwrap();
    assert_eq!(a.election("patience").leader().await.unwrap(), None);
}

/// A leader's lease that runs out publishes nothing: the observer wakes at the end of the
/// lease it read, and reports nobody. (The leader here is written by hand, as another tool
/// would: the layout is the lock's hash with `=token` and `=v`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_a_lease_run_out_without_a_message() {
    let server = server();
    let watcher = client(&server).await;
    let key = "fencelock:{expiring}";
    server
        .command(&[
            "HSET",
            key,
            "someone:1",
            "7",
            "=token",
            "42",
            "=v",
            "by hand",
        ])
        .unwrap();
    server.command(&["PEXPIRE", key, "800"]).unwrap();
    let election = watcher.election("expiring");
    assert_eq!(
        seen(&election.leader().await.unwrap()),
        Some(("by hand", 42))
    );
    let mut observer = election.observe().await.unwrap();
    let first = next(&mut observer, 2.0, "the leader").await;
    assert_eq!(seen(&first), Some(("by hand", 42)));
    let read = std::time::Instant::now();
    assert_eq!(
        next(&mut observer, 4.0, "nobody once the lease ran out").await,
        None
    );
    // Woken at the lease's end (800 ms), not by a window of seconds: room for a busy machine.
    let waited = read.elapsed();
    assert!(waited <= Duration::from_millis(2500), "{waited:?}");
    // A holder without a value (a mutex of the same name) leads with the empty value.
    let guard = watcher.lock("expiring").acquire().await.unwrap();
    assert_eq!(
        seen(&election.leader().await.unwrap()),
        Some(("", guard.fencing_token()))
    );
    guard.release().await.unwrap();
}

/// One client that observes and campaigns shares one subscription for both: its campaign
/// (which then queues at once) leads, its observer sees it, and dropping the observer while
/// the leadership lives leaves the campaign's subscription alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_observes_and_campaigns() {
    let server = server();
    let client = client(&server).await;
    let other = client_at(&server.url(), 30_000).await;
    let election = client.election("both");
    let mut observer = election.observe().await.unwrap();
    assert_eq!(next(&mut observer, 2.0, "nobody").await, None);
    let first = election.campaign("mine").await.unwrap();
    assert_eq!(
        seen(&next(&mut observer, 2.0, "mine").await),
        Some(("mine", first.term()))
    );
    drop(observer);
    // A participant of this client queued behind another client's leader is still handed the
    // leadership through the shared subscription.
    first.resign().await.unwrap();
    let theirs = other.election("both").campaign("theirs").await.unwrap();
    let mine = campaigning(&client, "both", "mine again");
    eventually(5.0, "queued", || queue_len(&server, "both") == 1).await;
    theirs.resign().await.unwrap();
    let again = leading(mine).await;
    assert_eq!(again.value(), "mine again");
    again.resign().await.unwrap();
}

/// The observer's next report, within `secs` seconds, after the errors of a failover: each
/// sentinel's announcement and the client's switch to the new master end the feed (changes
/// may have been missed), and each `changed()` after an error follows anew. Returns the
/// report and the number of errors.
async fn next_after_errors(
    observer: &mut Observer,
    secs: f64,
    what: &str,
) -> (Option<Leader>, u32) {
    within(secs, what, async {
        let mut errors = 0;
        loop {
            match observer.changed().await {
                Ok(got) => return (got, errors),
                Err(Error::Unavailable { .. }) if errors < 10 => errors += 1,
                Err(e) => panic!("{what}: {e}"),
            }
        }
    })
    .await
}

/// A Sentinel failover while an election is observed and led: the observer's feed ends with
/// an error (changes on the old master may have been missed; a failover may tell it a few
/// times: each sentinel announces it, and the client then switches), and following anew
/// reports the leader as the new master has it; the leadership, replicated, lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_follow_anew_after_a_sentinel_failover() {
    let set = tokio::task::spawn_blocking(|| SentinelSet::start().unwrap())
        .await
        .unwrap();
    let options = ClientOptions::default().default_lease(Duration::from_secs(5));
    let a = Client::connect_with(&set.url(), options.clone())
        .await
        .unwrap();
    let watcher = Client::connect_with(&set.url(), options).await.unwrap();
    let leadership = a.election("switch").campaign("a").await.unwrap();
    let term = leadership.term();
    let mut observer = watcher.election("switch").observe().await.unwrap();
    assert_eq!(
        seen(&next(&mut observer, 5.0, "a").await),
        Some(("a", term))
    );
    tokio::time::sleep(Duration::from_millis(200)).await; // replicated
    let set = tokio::task::spawn_blocking(move || {
        set.failover().unwrap();
        set
    })
    .await
    .unwrap();
    let (got, errors) = next_after_errors(&mut observer, 15.0, "following anew").await;
    eprintln!("errors told by the failover before following anew: {errors}");
    assert!(errors >= 1, "the switch was not told");
    assert_eq!(seen(&got), Some(("a", term)));
    assert!(leadership.is_leading());
    leadership.resign().await.unwrap();
    // Until nobody leads: a late announcement may make it follow anew first, and report the
    // leader as it was then (the same one).
    within(15.0, "nobody after the resign", async {
        loop {
            match next_after_errors(&mut observer, 15.0, "nobody").await.0 {
                None => break,
                Some(leader) => assert_eq!(seen(&Some(leader)), Some(("a", term))),
            }
        }
    })
    .await;
    drop(set);
}

/// An `observe()` given up half-way (its future dropped while it subscribes or reads), and
/// an observer dropped, leave no observer behind: once nobody listens, the lock's channel is
/// unsubscribed (an observer left registered would keep it, and every message on it, for the
/// client's life).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observe_given_up_half_way_leaves_no_subscription() {
    let server = server();
    let watcher = client(&server).await;
    let election = watcher.election("half");
    for _ in 0..20 {
        let observe = election.observe();
        let _ = tokio::time::timeout(std::time::Duration::from_micros(50), observe).await;
    }
    drop(watcher.election("half").observe().await.unwrap());
    let channels = || match server.command(&["PUBSUB", "CHANNELS", "*half*"]) {
        Ok(fencelock_testkit::Reply::Array(Some(names))) => names.len(),
        other => panic!("PUBSUB CHANNELS: {other:?}"),
    };
    within(5.0, "the channel is unsubscribed", async {
        while channels() > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}
