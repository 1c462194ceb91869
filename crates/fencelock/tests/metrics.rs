//! The metrics named in README.md, read through a recorder (cargo feature `metrics`).
#![cfg(feature = "metrics")]

mod common;

use std::time::Duration;

use common::*;
use fencelock::LockOptions;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;

type Labels = Vec<(String, String)>;

/// Every metric's value so far, summed over the recorder's snapshots.
#[derive(Default)]
struct Seen {
    counters: Vec<(String, Labels, u64)>,
    histograms: Vec<(String, usize)>,
    /// Gauges: the sum of what each snapshot handed out (the recorder hands out a gauge's
    /// change since its last snapshot), and the last value set.
    gauges: Vec<(String, Labels, f64, f64)>,
}

impl Seen {
    fn update(&mut self, snapshotter: &Snapshotter) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let k = key.key();
            let labels: Labels = k
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            match (key.kind(), value) {
                (MetricKind::Counter, DebugValue::Counter(n)) => {
                    match self
                        .counters
                        .iter_mut()
                        .find(|(name, l, _)| name == k.name() && *l == labels)
                    {
                        // The recorder hands out what was added since its last snapshot.
                        Some(entry) => entry.2 += n,
                        None => self.counters.push((k.name().to_owned(), labels, n)),
                    }
                }
                (MetricKind::Gauge, DebugValue::Gauge(v)) => {
                    let v = v.into_inner();
                    match self
                        .gauges
                        .iter_mut()
                        .find(|(name, l, _, _)| name == k.name() && *l == labels)
                    {
                        Some(entry) => {
                            entry.2 += v;
                            if v != 0.0 {
                                entry.3 = v;
                            }
                        }
                        None => self.gauges.push((k.name().to_owned(), labels, v, v)),
                    }
                }
                (_, DebugValue::Histogram(v)) => match self
                    .histograms
                    .iter_mut()
                    .find(|(name, _)| name == k.name())
                {
                    Some(entry) => entry.1 += v.len(),
                    None => self.histograms.push((k.name().to_owned(), v.len())),
                },
                _ => {}
            }
        }
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.counters
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, v)| *v)
            .sum()
    }

    /// A gauge's value, from its increments and decrements.
    fn gauge(&self, name: &str, label: (&str, &str)) -> f64 {
        self.gauge_entry(name, label).map_or(0.0, |g| g.2)
    }

    /// The last value a gauge was set to.
    fn gauge_set(&self, name: &str, label: (&str, &str)) -> f64 {
        self.gauge_entry(name, label).map_or(0.0, |g| g.3)
    }

    fn gauge_entry(&self, name: &str, (k, v): (&str, &str)) -> Option<&(String, Labels, f64, f64)> {
        self.gauges
            .iter()
            .find(|(n, l, _, _)| n == name && l.iter().any(|(lk, lv)| lk == k && lv == v))
    }

    fn histogram_len(&self, name: &str) -> usize {
        self.histograms
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, len)| *len)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_waits_handovers_renewals_and_losses_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test process");

    let server = server();
    let client = client_with(&server, short_lease(600)).await;
    let lock = client.lock("metered");
    let first = lock.acquire().await.unwrap();
    let again = lock.acquire().await.unwrap();
    let mut seen = Seen::default();
    seen.update(&snapshotter);
    assert_eq!(
        seen.counter("fencelock_acquisitions_total", &[("kind", "first")]),
        1
    );
    assert_eq!(
        seen.counter("fencelock_acquisitions_total", &[("kind", "reentry")]),
        1
    );
    assert_eq!(seen.histogram_len("fencelock_acquire_wait_seconds"), 2);

    // Renewals: the watchdog renews a 600 ms lease every 200 ms.
    eventually(5.0, "a renewal counted", || {
        seen.update(&snapshotter);
        seen.counter("fencelock_renewals_total", &[("outcome", "renewed")]) >= 1
    })
    .await;

    // A handover to another client's waiter. A handover gives the whole lease, and the
    // watchdog renews it at a third of it: a short lease, so that the renewal below finds
    // the loss within the test's bound.
    let other = client_with(&server, short_lease(600)).await;
    let waiter = {
        let lock = other.lock("metered");
        tokio::spawn(async move { lock.acquire().await.unwrap() })
    };
    eventually(5.0, "the waiter queued", || {
        server
            .command(&["LLEN", "fencelock:{metered}:queue"])
            .unwrap()
            .int()
            == Some(1)
    })
    .await;
    again.release().await.unwrap();
    first.release().await.unwrap();
    let handed = within(5.0, "handover", waiter).await.unwrap();
    seen.update(&snapshotter);
    assert_eq!(seen.counter("fencelock_handovers_total", &[]), 1);

    // A loss found by a renewal.
    server.command(&["DEL", "fencelock:{metered}"]).unwrap();
    within(5.0, "lost", handed.lost()).await;
    seen.update(&snapshotter);
    assert_eq!(
        seen.counter("fencelock_holds_lost_total", &[("reason", "renewal")]),
        1
    );
    assert!(seen.counter("fencelock_renewals_total", &[("outcome", "not_held")]) >= 1);
    let _ = tokio::time::timeout(Duration::from_secs(1), handed.release()).await;

    // The other reasons and outcomes, each in a scene of its own. One test, since a process
    // has one global recorder.
    redis_deadline_extension_and_failed_renewals(&server, &snapshotter).await;
    #[cfg(feature = "etcd")]
    etcd_session_and_deleted(&snapshotter).await;
    redis_holds_waiters_and_leaders(&server, &snapshotter).await;
    #[cfg(feature = "etcd")]
    etcd_leader(&snapshotter).await;
}

/// Issue 33, point 4: holds and waiters by kind (gauges), hold times, renewal latency, and
/// an election's leader and term gauges, labelled by the election's name.
async fn redis_holds_waiters_and_leaders(
    server: &fencelock_testkit::RedisServer,
    snapshotter: &Snapshotter,
) {
    let mut seen = Seen::default();
    seen.update(snapshotter);
    let holds = |seen: &Seen, kind| seen.gauge("fencelock_holds", ("kind", kind));
    let waiters = |seen: &Seen, kind| seen.gauge("fencelock_waiters", ("kind", kind));
    let before = ["mutex", "permit", "read", "leader"].map(|k| holds(&seen, k));
    let held_before = seen.histogram_len("fencelock_hold_seconds");
    let renewals_before = seen.histogram_len("fencelock_renew_seconds");

    let client = client_with(server, short_lease(600)).await;
    let mutex = client.lock("gauged").acquire().await.unwrap();
    let permit = client
        .semaphore("gauged-permits", 2)
        .acquire()
        .await
        .unwrap();
    let read = client.rw_lock("gauged-rw").read().acquire().await.unwrap();
    seen.update(snapshotter);
    for (i, kind) in ["mutex", "permit", "read"].into_iter().enumerate() {
        assert_eq!(holds(&seen, kind), before[i] + 1.0, "{kind}");
    }

    // A waiter counts while it waits, and its hold once it holds.
    let other = client_with(server, short_lease(600)).await;
    let waiter = {
        let lock = other.lock("gauged");
        tokio::spawn(async move { lock.acquire().await.unwrap() })
    };
    eventually(5.0, "the waiter counted", || {
        seen.update(snapshotter);
        waiters(&seen, "mutex") == 1.0
    })
    .await;
    mutex.release().await.unwrap();
    let handed = within(5.0, "handover", waiter).await.unwrap();
    seen.update(snapshotter);
    assert_eq!(waiters(&seen, "mutex"), 0.0);
    assert_eq!(
        holds(&seen, "mutex"),
        before[0] + 1.0,
        "one ended, one began"
    );
    assert!(seen.histogram_len("fencelock_hold_seconds") > held_before);
    eventually(5.0, "a renewal's latency", || {
        seen.update(snapshotter);
        seen.histogram_len("fencelock_renew_seconds") > renewals_before
    })
    .await;
    for guard in [handed, permit, read] {
        guard.release().await.unwrap();
    }
    seen.update(snapshotter);
    for (i, kind) in ["mutex", "permit", "read"].into_iter().enumerate() {
        assert_eq!(holds(&seen, kind), before[i], "{kind} after release");
    }

    let leadership = client
        .election("gauged-election")
        .campaign("a")
        .await
        .unwrap();
    seen.update(snapshotter);
    let election = ("election", "gauged-election");
    assert_eq!(seen.gauge("fencelock_leader", election), 1.0);
    let term = seen.gauge_set("fencelock_leader_term", election);
    assert_eq!(term, leadership.term() as f64);
    assert_eq!(holds(&seen, "leader"), before[3] + 1.0);
    leadership.resign().await.unwrap();
    seen.update(snapshotter);
    assert_eq!(seen.gauge("fencelock_leader", election), 0.0);
}

/// etcd: the leader gauge follows a leadership, and a loss (a forced delete) ends it.
#[cfg(feature = "etcd")]
async fn etcd_leader(snapshotter: &Snapshotter) {
    let mut seen = Seen::default();
    let etcd = fencelock_testkit::EtcdServer::start().expect("start etcd");
    let client = fencelock::Client::connect(&etcd.url()).await.unwrap();
    let other = fencelock::Client::connect(&etcd.url()).await.unwrap();
    let election = ("election", "etcd-gauged");
    let leadership = client.election("etcd-gauged").campaign("a").await.unwrap();
    seen.update(snapshotter);
    assert_eq!(seen.gauge("fencelock_leader", election), 1.0);
    let term = seen.gauge_set("fencelock_leader_term", election);
    assert_eq!(term, leadership.term() as f64);
    other.force_unlock("etcd-gauged").await.unwrap();
    within(5.0, "lost after the forced unlock", leadership.lost()).await;
    seen.update(snapshotter);
    assert_eq!(seen.gauge("fencelock_leader", election), 0.0);
}

/// A fixed lease that runs out (`deadline`), an extension that finds the lock gone
/// (`extension`), and renewals that fail while the server is stopped (`failed`).
async fn redis_deadline_extension_and_failed_renewals(
    server: &fencelock_testkit::RedisServer,
    snapshotter: &Snapshotter,
) {
    let mut seen = Seen::default();
    let client = client(server).await;
    let fixed = |ms| LockOptions::default().lease(Duration::from_millis(ms));
    let short = client.lock("deadline").with_options(fixed(300));
    let guard = short.acquire().await.unwrap();
    within(3.0, "lost at the deadline", guard.lost()).await;
    seen.update(snapshotter);
    assert_eq!(lost(&seen, "deadline"), 1);

    let guard = client
        .lock("extended")
        .with_options(fixed(10_000))
        .acquire()
        .await
        .unwrap();
    server.command(&["DEL", "fencelock:{extended}"]).unwrap();
    assert!(guard.extend(Duration::from_secs(10)).await.is_err());
    seen.update(snapshotter);
    assert_eq!(lost(&seen, "extension"), 1);

    // Renewals every 500 ms that time out after 100 ms while the server is stopped.
    let options = short_lease(1_500).response_timeout(Duration::from_millis(100));
    let renewed = client_with(server, options).await;
    let guard = renewed.lock("stalled").acquire().await.unwrap();
    server.pause();
    eventually(5.0, "a failed renewal counted", || {
        seen.update(snapshotter);
        seen.counter("fencelock_renewals_total", &[("outcome", "failed")]) >= 1
    })
    .await;
    server.resume();
    let _ = tokio::time::timeout(Duration::from_secs(2), guard.release()).await;
}

/// etcd: a revoked lease (`session`) and a forced unlock by another client (`deleted`).
#[cfg(feature = "etcd")]
async fn etcd_session_and_deleted(snapshotter: &Snapshotter) {
    let mut seen = Seen::default();
    let etcd = fencelock_testkit::EtcdServer::start().expect("start etcd");
    let url = etcd.url();
    let (holder, other) = (
        fencelock::Client::connect(&url),
        fencelock::Client::connect(&url),
    );
    let (holder, other) = (holder.await.unwrap(), other.await.unwrap());
    let guard = holder.lock("forced").acquire().await.unwrap();
    other.force_unlock("forced").await.unwrap();
    within(5.0, "lost after the forced unlock", guard.lost()).await;
    seen.update(snapshotter);
    assert_eq!(lost(&seen, "deleted"), 1);

    let guard = holder.lock("revoked").acquire().await.unwrap();
    let eps = etcd.endpoints();
    let lease = within(10.0, "the holder's lease", holder_lease(&eps, "revoked")).await;
    let revoke = move || fencelock_testkit::etcdctl(&eps, &["lease", "revoke", &lease]);
    tokio::task::spawn_blocking(revoke).await.unwrap().unwrap();
    within(5.0, "lost after the revoke", guard.lost()).await;
    seen.update(snapshotter);
    assert_eq!(lost(&seen, "session"), 1);
}

/// The lease (hex, as etcdctl takes it) of the one key of lock `name`.
#[cfg(feature = "etcd")]
async fn holder_lease(endpoints: &str, name: &str) -> String {
    format!("{:x}", etcd_keys(endpoints, name).await[0].2)
}

fn lost(seen: &Seen, reason: &str) -> u64 {
    seen.counter("fencelock_holds_lost_total", &[("reason", reason)])
}
