//! Leader elections (issue 25), on every deployment of the suite: one leader at a time, in
//! arrival order, with strictly increasing terms; `leader()` and `observe()` as the servers
//! have it; a leader cut off is told before another participant leads. A deployment that
//! offers no election ([`Caps::election`] false: RedLock) refuses every election call with
//! `Error::Unsupported`, before any I/O.

use std::time::Duration;

use fencelock::{Client, ClientOptions, Error, InputError, Leader, Observer, Released};
use tokio::time::Instant;

use super::{connect, describe, is_input, lease, until_entries, within, Caps, Deployment, Proxied};

/// The next change an observer reports, bounded.
async fn next(observer: &mut Observer, what: &str) -> Option<Leader> {
    within(10.0, what, observer.changed())
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The value and term of a reported leader, for assertions.
fn seen(leader: &Option<Leader>) -> Option<(&str, u64)> {
    leader.as_ref().map(|l| (l.value.as_str(), l.term))
}

/// Where elections are offered, a value longer than `MAX_VALUE_LEN` is refused before any
/// I/O; where they are not, `campaign`, `try_campaign`, `leader` and `observe` fail with
/// `Error::Unsupported` and leave nothing on the servers.
pub(super) async fn elections_are_offered_or_refused(d: &dyn Deployment) {
    let client = connect(d, ClientOptions::default()).await;
    let election = client.election("offered");
    let long = "v".repeat(fencelock::MAX_VALUE_LEN + 1);
    let too_long = election.campaign(&long).await;
    assert!(
        is_input(&too_long, |e| matches!(e, InputError::ValueTooLong { .. })),
        "{}",
        describe(&too_long)
    );
    let bad_name = client.election("").leader().await;
    assert!(
        is_input(&bad_name, |e| matches!(e, InputError::EmptyName)),
        "{}",
        describe(&bad_name)
    );
    if d.caps().election {
        let leading = election.campaign("v").await.unwrap();
        assert_eq!(leading.resign().await.unwrap(), Released::Released);
        assert_eq!(d.entries("offered").await, []);
        return;
    }
    let unsupported = |what: &str, e: Option<&Error>| {
        assert!(
            matches!(e, Some(Error::Unsupported { .. })),
            "{what}: {e:?}"
        );
    };
    unsupported("campaign", election.campaign("v").await.err().as_ref());
    unsupported(
        "try_campaign",
        election.try_campaign("v").await.err().as_ref(),
    );
    unsupported("leader", election.leader().await.err().as_ref());
    unsupported("observe", election.observe().await.err().as_ref());
    assert_eq!(d.entries("offered").await, []);
}

/// Three participants on three clients: the first leads and `leader()` names its value and
/// term; `try_campaign` and a timed-out campaign leave nothing behind; the two others, queued
/// one after the other, lead in arrival order once the one before resigns, each with a
/// greater term, one at a time; at the end nobody leads and no entry is left.
pub(super) async fn one_leader_at_a_time_in_arrival_order(d: &dyn Deployment) {
    if !d.caps().election {
        return;
    }
    let clients = [
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
    ];
    let name = "elect";
    assert_eq!(clients[0].election(name).leader().await.unwrap(), None);
    let first = clients[0].election(name).campaign("p0").await.unwrap();
    assert_eq!(first.value(), "p0");
    let leader = clients[1].election(name).leader().await.unwrap();
    assert_eq!(seen(&leader), Some(("p0", first.term())));

    let tried = clients[1].election(name).try_campaign("p1").await.unwrap();
    assert!(tried.is_err(), "try_campaign led beside a leader");
    let timed = clients[1]
        .election(name)
        .campaign_timeout("p1", Duration::from_millis(300))
        .await;
    assert!(
        matches!(timed, Err(Error::Timeout { .. })),
        "{}",
        describe(&timed)
    );
    assert_eq!(
        d.entries(name).await.len(),
        1,
        "a given-up campaign left an entry"
    );

    let mut waiting = Vec::new();
    for (i, client) in clients.iter().enumerate().skip(1) {
        let election = client.election(name);
        waiting.push(tokio::spawn(async move {
            let leading = election.campaign(&format!("p{i}")).await;
            (leading, Instant::now())
        }));
        until_entries(d, name, i + 1).await;
    }
    let mut term = first.term();
    let mut previous = first;
    for (i, participant) in waiting.into_iter().enumerate() {
        assert!(
            !participant.is_finished(),
            "participant {} led too early",
            i + 1
        );
        let resigned = Instant::now();
        assert_eq!(previous.resign().await.unwrap(), Released::Released);
        let (leading, at) = within(10.0, "the next participant leads", participant)
            .await
            .unwrap();
        let leading = leading.unwrap_or_else(|e| panic!("participant {}: {e}", i + 1));
        assert!(at >= resigned);
        assert_eq!(leading.value(), format!("p{}", i + 1), "arrival order");
        assert!(leading.term() > term, "terms strictly increase");
        term = leading.term();
        let leader = clients[0].election(name).leader().await.unwrap();
        assert_eq!(seen(&leader), Some((leading.value(), term)));
        previous = leading;
    }
    assert_eq!(previous.resign().await.unwrap(), Released::Released);
    assert_eq!(clients[0].election(name).leader().await.unwrap(), None);
    assert_eq!(d.entries(name).await, []);
    for client in clients {
        client.close().await.unwrap();
    }
}

/// An observer reports nobody first, then each leader in order: the first, its new value
/// after `proclaim` (same term), the next participant after a resign (with a greater term,
/// possibly after a report of nobody), and nobody at the end. A second observer started
/// while someone leads reports that leader first.
pub(super) async fn observers_see_each_leader_in_order(d: &dyn Deployment) {
    if !d.caps().election {
        return;
    }
    let watcher = connect(d, lease(20_000)).await;
    let (a, b) = (
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
    );
    let name = "watched";
    let mut observer = watcher.election(name).observe().await.unwrap();
    assert_eq!(next(&mut observer, "nobody leads at first").await, None);

    let mut leading = a.election(name).campaign("a").await.unwrap();
    let first = next(&mut observer, "a leads").await;
    assert_eq!(seen(&first), Some(("a", leading.term())));
    leading.proclaim("a-2").await.unwrap();
    let proclaimed = next(&mut observer, "a's new value").await;
    assert_eq!(seen(&proclaimed), Some(("a-2", leading.term())));
    assert_eq!(
        seen(&a.election(name).leader().await.unwrap()),
        Some(("a-2", leading.term()))
    );

    let mut late = watcher.election(name).observe().await.unwrap();
    let now = next(&mut late, "a late observer sees the leader").await;
    assert_eq!(seen(&now), Some(("a-2", leading.term())));

    let election = b.election(name);
    let standby = tokio::spawn(async move { election.campaign("b").await });
    until_entries(d, name, 2).await;
    let term = leading.term();
    assert_eq!(leading.resign().await.unwrap(), Released::Released);
    let successor = within(10.0, "b leads", standby).await.unwrap().unwrap();
    for observer in [&mut observer, &mut late] {
        let mut change = next(observer, "the next leader").await;
        if change.is_none() {
            change = next(observer, "the next leader after nobody").await;
        }
        assert_eq!(seen(&change), Some(("b", successor.term())));
        assert!(successor.term() > term);
    }
    assert_eq!(successor.resign().await.unwrap(), Released::Released);
    assert_eq!(next(&mut observer, "nobody leads at the end").await, None);
    drop((observer, late));
    for client in [watcher, a, b] {
        client.close().await.unwrap();
    }
}

/// Never two leaders: a leader whose client is cut off from the servers (where a proxy can
/// cut one) is told it lost leadership (`lost()`) before the standby leads, and the standby's
/// term is greater; an observer sees the handover; the cut-off leader's late `proclaim` fails.
pub(super) async fn a_cut_off_leader_is_told_before_the_next_leads(d: &dyn Deployment) {
    let caps: Caps = d.caps();
    if !caps.election {
        return;
    }
    let Some(Proxied { proxy, url }) = d.proxied() else {
        return;
    };
    let cut_off = Client::connect_with(&url, lease(2_000)).await.unwrap();
    let standby = connect(d, lease(2_000)).await;
    let name = "cut-leader";
    let mut observer = standby.election(name).observe().await.unwrap();
    assert_eq!(next(&mut observer, "nobody leads at first").await, None);
    let mut leading = cut_off.election(name).campaign("old").await.unwrap();
    let first = next(&mut observer, "the first leader").await;
    assert_eq!(seen(&first), Some(("old", leading.term())));
    let election = standby.election(name);
    let old_lost = leading.lost_token();
    let standing = tokio::spawn(async move {
        let leading = election.campaign("new").await;
        // Read at once, in the task the campaign returned in: was the old leader told first?
        (leading, old_lost.is_cancelled())
    });
    until_entries(d, name, 2).await;
    proxy.refuse_new(true);
    assert!(proxy.cut() >= 1);
    within(5.0, "the cut-off leader is told", leading.lost()).await;
    let (successor, told_first) = within(15.0, "the standby leads", standing).await.unwrap();
    let successor = successor.unwrap();
    assert!(told_first, "the standby led before the old leader was told");
    assert!(successor.term() > leading.term());
    let mut handover = next(&mut observer, "the handover").await;
    if handover.is_none() {
        handover = next(&mut observer, "the handover after nobody").await;
    }
    assert_eq!(seen(&handover), Some(("new", successor.term())));
    assert!(
        leading.proclaim("late").await.is_err(),
        "a deposed leader proclaimed"
    );
    assert_eq!(
        standby
            .election(name)
            .leader()
            .await
            .unwrap()
            .map(|l| l.value),
        Some("new".to_owned())
    );
    proxy.refuse_new(false);
    assert_eq!(successor.resign().await.unwrap(), Released::Released);
    drop(leading);
    standby.close().await.unwrap();
}

/// Participants of two clients (two each) campaign and resign ten times each: never two
/// leaders at once, every leader's term above the one before,
/// and an observer's reports in term order (never an older leader after a newer one).
pub(super) async fn participants_of_two_clients_lead_one_at_a_time(d: &dyn Deployment) {
    if !d.caps().election {
        return;
    }
    let (a, b) = (
        connect(d, lease(10_000)).await,
        connect(d, lease(10_000)).await,
    );
    let (name, rounds) = ("turns", 10);
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let inside = Arc::new(AtomicBool::new(false));
    let last = Arc::new(Mutex::new(0u64));
    let mut observer = b.election(name).observe().await.expect("observe");
    let watching = tokio::spawn(async move {
        let mut high = 0;
        let mut leaders = 0;
        while let Ok(seen) = observer.changed().await {
            if let Some(leader) = seen {
                assert!(
                    leader.term >= high,
                    "an older leader reported after a newer one"
                );
                high = leader.term;
                leaders += 1;
            }
        }
        leaders
    });
    let elections = [
        a.election(name),
        a.election(name),
        b.election(name),
        b.election(name),
    ];
    let mut tasks = Vec::new();
    for (i, election) in elections.into_iter().enumerate() {
        let (inside, last) = (inside.clone(), last.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..rounds {
                let leading = election.campaign(&format!("p{i}")).await.expect("campaign");
                assert!(!inside.swap(true, Ordering::SeqCst), "two leaders");
                {
                    let mut last = last.lock().unwrap();
                    assert!(leading.term() > *last, "a term that does not grow");
                    *last = leading.term();
                }
                tokio::time::sleep(Duration::from_millis(1 + (round + i as u64) % 3)).await;
                inside.store(false, Ordering::SeqCst);
                leading.resign().await.expect("resign");
            }
        }));
    }
    for t in tasks {
        t.await.expect("participant");
    }
    assert_eq!(b.election(name).leader().await.expect("leader"), None);
    // A failed check ends the observer's task: its panic is the test's.
    if watching.is_finished() {
        watching.await.expect("the observer's checks");
    } else {
        watching.abort();
    }
}

/// `Client::force_unlock` of an election's name deposes its leader: the leader is told
/// (`lost()`), its proclaim fails with `LockLost`, status showed it as the holder, and the
/// waiting participant leads with a larger term.
pub(super) async fn a_forced_unlock_deposes_the_leader(d: &dyn Deployment) {
    if !d.caps().election {
        return;
    }
    let (a, b) = (
        connect(d, lease(10_000)).await,
        connect(d, lease(10_000)).await,
    );
    let name = "deposed";
    let mut leading = a.election(name).campaign("first").await.expect("campaign");
    let status = b.status(name).await.expect("status");
    assert!(
        status.held,
        "status shows the election's leader as the holder"
    );
    let waiting = tokio::spawn({
        let election = b.election(name);
        async move { election.campaign("second").await }
    });
    within(10.0, "the waiter queues", async {
        while b.status(name).await.expect("status").waiters.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let removed = b.force_unlock(name).await.expect("force_unlock");
    assert_eq!(removed.len(), 1, "{removed:?}");
    within(10.0, "the deposed leader is told", leading.lost()).await;
    assert!(matches!(
        leading.proclaim("late").await,
        Err(Error::LockLost { .. })
    ));
    let next = within(10.0, "the waiter leads", waiting)
        .await
        .expect("task")
        .expect("campaign");
    assert!(next.term() > leading.term());
    let leader = a
        .election(name)
        .leader()
        .await
        .expect("leader")
        .expect("one");
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("second", next.term())
    );
    next.resign().await.expect("resign");
}
