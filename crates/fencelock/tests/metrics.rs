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
