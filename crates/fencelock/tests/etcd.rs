//! etcd as the lock service, against real etcd members from the test kit (Debian's
//! etcd-server 3.4), and `etcdctl lock` for interop.
#![cfg(feature = "etcd")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::within;
use fencelock::{Client, ClientOptions, Error, InputError, LockOptions, Released};
use fencelock_testkit::{etcdctl, EtcdCluster, EtcdServer, EtcdctlLock};
use tokio::time::Instant;

fn server() -> EtcdServer {
    EtcdServer::start().expect("start an etcd server")
}

/// A client whose lease TTL (the lease of its locks) is `ms`, rounded up to seconds.
async fn client(url: &str, ms: u64) -> Client {
    let options = ClientOptions::default().default_lease(Duration::from_millis(ms));
    Client::connect_with(url, options)
        .await
        .expect("connect to etcd")
}

/// The lock's keys (key, create revision, lease), read with a client of its own (not the
/// library under test).
async fn keys(endpoints: &str, name: &str) -> Vec<(String, i64, i64)> {
    let eps: Vec<String> = endpoints
        .split(',')
        .map(|e| format!("http://{e}"))
        .collect();
    let mut c = etcd_client::Client::connect(eps, None)
        .await
        .expect("raw etcd client");
    let prefix = format!("/fencelock/{name}/");
    let got = c
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .expect("get the lock's keys");
    got.kvs()
        .iter()
        .map(|kv| {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            (key, kv.create_revision(), kv.lease())
        })
        .collect()
}

/// Waits until the lock has `n` keys.
async fn until_keys(endpoints: &str, name: &str, n: usize) {
    while keys(endpoints, name).await.len() != n {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Mutual exclusion across clients with strictly increasing tokens (the keys' create
/// revisions), re-entry, two owners of one client, and the input the service refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exclusion_reentry_tokens_and_refusals() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(60.0, "exclusion", async {
        let clients = [
            client(&url, 10_000).await,
            client(&url, 10_000).await,
            client(&url, 10_000).await,
        ];
        let inside = Arc::new(AtomicBool::new(false));
        let tokens = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Two owners (lock handles) in each client: they take turns on the client's key.
        for c in clients.iter().chain(clients.iter()) {
            let (lock, inside, tokens) = (c.lock("excl"), inside.clone(), tokens.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let g = lock.acquire().await.expect("acquire");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
                    tokens.lock().unwrap().push(g.fencing_token());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    inside.store(false, Ordering::SeqCst);
                    assert_eq!(g.release().await.expect("release"), Released::Released);
                }
            }));
        }
        for t in tasks {
            t.await.expect("worker");
        }
        let tokens = tokens.lock().unwrap().clone();
        assert_eq!(tokens.len(), 30);
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
        assert!(keys(&eps, "excl").await.is_empty());

        // Re-entry: counted in the client, one key, one token.
        let lock = clients[0].lock("re");
        let first = lock.acquire().await.unwrap();
        let second = lock.clone().acquire().await.unwrap();
        assert_eq!((first.hold_count(), second.hold_count()), (1, 2));
        assert_eq!(first.fencing_token(), second.fencing_token());
        let held = keys(&eps, "re").await;
        assert_eq!(held.len(), 1);
        assert_eq!(
            held[0].1 as u64,
            first.fencing_token(),
            "token = create revision"
        );
        let status = clients[1].status("re").await.unwrap();
        assert!(status.held);
        assert_eq!(status.owners, vec![(lock.owner().to_owned(), 1)]);
        assert_eq!(status.fencing_token, Some(first.fencing_token()));
        assert!(status
            .remaining_lease
            .is_some_and(|r| r <= Duration::from_secs(10)));
        assert_eq!(
            first.release().await.unwrap(),
            Released::StillHeld { count: 1 }
        );
        assert!(second.is_held());

        // Refused: extend, per-lock leases, Redis options, foreign re-entry, bad names.
        assert!(matches!(
            second.extend(Duration::from_secs(5)).await,
            Err(Error::Unsupported { .. })
        ));
        let foreign = clients[1].lock("re").with_owner(lock.owner());
        assert!(matches!(
            foreign.acquire().await,
            Err(Error::Unsupported { .. })
        ));
        assert!(matches!(
            foreign.release().await,
            Err(Error::Unsupported { .. })
        ));
        assert_eq!(
            keys(&eps, "re").await.len(),
            1,
            "the refused attempt left a key"
        );
        let fixed = LockOptions::default().lease(Duration::from_secs(1));
        let acks = LockOptions::default().min_replica_acks(1, Duration::from_millis(10));
        for options in [fixed, acks] {
            let r = clients[1]
                .lock("x")
                .with_options(options)
                .try_acquire()
                .await;
            assert!(matches!(
                r,
                Err(Error::InvalidInput(InputError::InvalidOption { .. }))
            ));
        }
        for bad in ["a/b", "a\u{1}"] {
            let r = clients[1].lock(bad).try_acquire().await;
            assert!(
                matches!(r, Err(Error::InvalidInput(InputError::InvalidName { .. }))),
                "{bad:?}"
            );
        }
        let two = [url.clone(), url.clone()];
        let urls: Vec<&str> = two.iter().map(String::as_str).collect();
        assert!(matches!(
            Client::connect_all(&urls).await,
            Err(Error::InvalidInput(InputError::InvalidUrl { .. }))
        ));
        let password = ClientOptions::default().password("s3cret");
        let r = Client::connect_with(&url, password).await;
        let e = r.expect_err("a password without a user");
        assert!(matches!(
            e,
            Error::InvalidInput(InputError::InvalidUrl { .. })
        ));
        assert!(!e.to_string().contains("s3cret"));
        assert_eq!(second.release().await.unwrap(), Released::Released);
        assert!(keys(&eps, "re").await.is_empty());
    })
    .await;
}

/// try_acquire, a timeout and a dropped acquire leave no key; a waiter is woken by the
/// release itself; status counts waiters; force_unlock hands over to the next waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_wakeups_cleanup_and_force_unlock() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(60.0, "waiting", async {
        let (a, b, c) = (
            client(&url, 20_000).await,
            client(&url, 20_000).await,
            client(&url, 20_000).await,
        );
        let held = a.lock("w").acquire().await.unwrap();
        assert!(b.lock("w").try_acquire().await.unwrap().is_err());
        assert_eq!(keys(&eps, "w").await.len(), 1, "try_acquire left a key");
        let timed = b
            .lock("w")
            .acquire_timeout(Duration::from_millis(300))
            .await;
        assert!(matches!(timed, Err(Error::Timeout { .. })), "{timed:?}");
        assert_eq!(keys(&eps, "w").await.len(), 1, "the timeout left a key");
        let dropped = tokio::spawn({
            let lock = b.lock("w");
            async move { lock.acquire().await }
        });
        until_keys(&eps, "w", 2).await;
        dropped.abort();
        until_keys(&eps, "w", 1).await;

        // Woken by the release, not by a timer (the lease TTL is 20 s).
        let waiter = tokio::spawn({
            let lock = b.lock("w");
            async move { (lock.acquire().await, Instant::now()) }
        });
        until_keys(&eps, "w", 2).await;
        let status = c.status("w").await.unwrap();
        assert_eq!(status.waiters.len(), 1);
        let released = Instant::now();
        held.release().await.unwrap();
        let (got, at) = waiter.await.unwrap();
        let got = got.expect("the waiter acquires");
        assert!(
            at - released < Duration::from_millis(500),
            "woken after {:?}",
            at - released
        );

        // A forced unlock deletes the holder's key: the holder is told, the next waits no more.
        let next = tokio::spawn({
            let lock = c.lock("w");
            async move { lock.acquire().await }
        });
        until_keys(&eps, "w", 2).await;
        let removed = a.force_unlock("w").await.unwrap();
        assert_eq!(removed.len(), 1);
        within(5.0, "the holder is told", got.lost()).await;
        let taken = within(5.0, "hand-over", next).await.unwrap().unwrap();
        assert!(taken.fencing_token() > got.fencing_token());
        assert_eq!(got.release().await.unwrap(), Released::NotHeld);
        taken.release().await.unwrap();
        assert!(keys(&eps, "w").await.is_empty());
    })
    .await;
}

/// A holder whose server stops answering is told (`lost()`) before the server can expire its
/// lease and hand the lock to another client.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paused_server_fires_lost_before_another_client_acquires() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(60.0, "pause", async {
        let (a, b) = (client(&url, 2_000).await, client(&url, 20_000).await);
        let held = a.lock("p").acquire().await.unwrap();
        let waiter = tokio::spawn({
            let lock = b.lock("p");
            async move {
                let g = lock.acquire_timeout(Duration::from_secs(40)).await;
                (g, Instant::now())
            }
        });
        until_keys(&eps, "p", 2).await;
        etcd.pause();
        let paused = Instant::now();
        within(5.0, "lost while the server is paused", held.lost()).await;
        let lost_at = Instant::now();
        assert!(lost_at - paused <= Duration::from_millis(2_000));
        tokio::time::sleep(Duration::from_millis(3_000)).await;
        etcd.resume();
        let (got, acquired_at) = waiter.await.unwrap();
        let got = got.expect("the waiter gets the lock once the lease expired");
        assert!(lost_at < acquired_at);
        assert!(got.fencing_token() > held.fencing_token());
        assert!(!held.is_held());
        got.release().await.unwrap();
        drop(held);
    })
    .await;
}

/// A lease revoked behind the holder's back (an operator, `etcdctl lease revoke`) fires
/// `lost()`; the client then grants itself a new lease at its next operation (as it does
/// after an expiry), so it locks again, with a larger token and a key of the new lease, and
/// the old guard's release finds nothing to give back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn revoked_lease_fires_lost_and_the_client_goes_on_with_a_new_one() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(30.0, "revoke", async {
        let a = client(&url, 10_000).await;
        let held = a.lock("r").acquire().await.unwrap();
        let (_, _, old_lease) = keys(&eps, "r").await.remove(0);
        let lease = format!("{old_lease:x}");
        let eps2 = eps.clone();
        tokio::task::spawn_blocking(move || etcdctl(&eps2, &["lease", "revoke", &lease]))
            .await
            .unwrap()
            .expect("etcdctl lease revoke");
        within(5.0, "lost after the revoke", held.lost()).await;
        assert!(!held.is_held());
        assert!(keys(&eps, "r").await.is_empty());
        let again = a.lock("r").try_acquire().await.unwrap().expect("free");
        assert!(again.fencing_token() > held.fencing_token());
        let (_, _, new_lease) = keys(&eps, "r").await.remove(0);
        assert_ne!(new_lease, old_lease, "the key is of a new lease");
        let other = client(&url, 10_000).await;
        let busy = other.lock("r").try_acquire().await.unwrap();
        assert!(busy.is_err(), "the new holding excludes others");
        assert_eq!(held.release().await.unwrap(), Released::NotHeld);
        assert!(
            again.is_held(),
            "the old guard's release left the new holding alone"
        );
        assert_eq!(again.release().await.unwrap(), Released::Released);
        assert!(keys(&eps, "r").await.is_empty());
    })
    .await;
}

/// `etcdctl lock` (etcd's concurrency.Mutex) and fencelock exclude each other on one name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcdctl_lock_interop() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(60.0, "etcdctl", async {
        let c = client(&url, 10_000).await;
        let mut theirs = EtcdctlLock::spawn(&eps, "/fencelock/job", 10).unwrap();
        let (theirs, (key, _)) = tokio::task::spawn_blocking(move || {
            let held = theirs.wait_held(Duration::from_secs(20));
            (theirs, held.unwrap())
        })
        .await
        .unwrap();
        assert!(key.starts_with("/fencelock/job/"));
        assert!(c.lock("job").try_acquire().await.unwrap().is_err());
        let status = c.status("job").await.unwrap();
        assert!(status.held && status.owners[0].0.starts_with("etcd lease "));
        let waiting = tokio::spawn({
            let lock = c.lock("job");
            async move { lock.acquire().await }
        });
        until_keys(&eps, "job", 2).await;
        assert!(
            !waiting.is_finished(),
            "fencelock took a lock etcdctl holds"
        );
        tokio::task::spawn_blocking(move || theirs.release())
            .await
            .unwrap()
            .unwrap();
        let guard = within(10.0, "after etcdctl's release", waiting)
            .await
            .unwrap()
            .unwrap();

        let mut theirs = EtcdctlLock::spawn(&eps, "/fencelock/job", 10).unwrap();
        until_keys(&eps, "job", 2).await;
        let (mut theirs, early) = tokio::task::spawn_blocking(move || {
            let early = theirs.held_within(Duration::from_millis(1_000));
            (theirs, early)
        })
        .await
        .unwrap();
        assert!(!early, "etcdctl took a lock fencelock holds");
        let token = guard.fencing_token();
        guard.release().await.unwrap();
        let (_, revision) = tokio::task::spawn_blocking(move || {
            let held = theirs.wait_held(Duration::from_secs(10));
            theirs.release().map(|()| held)
        })
        .await
        .unwrap()
        .unwrap()
        .expect("etcdctl acquires after fencelock's release");
        assert!(revision > token);
    })
    .await;
}

/// The leader is killed while a lock is held and a second client tries all along: the holder
/// keeps the lock or is told it lost it before the other gets it; never both at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_killed_while_held() {
    let mut cluster = tokio::task::spawn_blocking(EtcdCluster::start)
        .await
        .unwrap()
        .expect("start an etcd cluster");
    let url = cluster.url();
    within(90.0, "leader kill", async {
        let (a, b) = (client(&url, 3_000).await, client(&url, 3_000).await);
        let held = a.lock("k").acquire().await.unwrap();
        let lost_at: Arc<Mutex<Option<Instant>>> = Arc::default();
        tokio::spawn({
            let (token, lost_at) = (held.lost_token(), lost_at.clone());
            async move {
                token.cancelled().await;
                *lost_at.lock().unwrap() = Some(Instant::now());
            }
        });
        let other = tokio::spawn({
            let lock = b.lock("k");
            async move {
                loop {
                    match lock.acquire_timeout(Duration::from_secs(2)).await {
                        Ok(g) => return (g, Instant::now()),
                        Err(Error::Timeout { .. } | Error::Unavailable { .. }) => {}
                        Err(e) => panic!("the second client: {e}"),
                    }
                }
            }
        });
        let leader = cluster.leader().expect("a leader");
        cluster.member_mut(leader).kill();
        let cluster = tokio::task::spawn_blocking(move || {
            cluster
                .wait_for_leader(Duration::from_secs(30))
                .map(|_| cluster)
        })
        .await
        .unwrap()
        .expect("a new leader");
        tokio::time::sleep(Duration::from_secs(6)).await;
        if other.is_finished() {
            let (_, acquired_at) = other.await.unwrap();
            let lost = lost_at.lock().unwrap().expect("the holder was told");
            assert!(lost < acquired_at, "both held the lock");
            eprintln!("leader kill: the holder was told it lost the lock, then the other took it");
        } else {
            assert!(held.is_held(), "neither holds the lock");
            eprintln!("leader kill: the holder kept the lock through the election");
            let before = held.fencing_token();
            held.release().await.unwrap();
            let (next, _) = within(10.0, "hand-over", other).await.unwrap();
            assert!(next.fencing_token() > before);
            next.release().await.unwrap();
        }
        drop(cluster);
    })
    .await;
}

/// A key of the client's own lease already on the lock (a give-back that failed) is deleted
/// and put again, never adopted: the new holding gets a fresh, larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leftover_key_is_replaced_not_adopted() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(30.0, "leftover", async {
        let a = client(&url, 10_000).await;
        let probe = a.lock("probe").acquire().await.unwrap();
        let (_, _, lease) = keys(&eps, "probe").await.remove(0);
        probe.release().await.unwrap();
        let mut raw = etcd_client::Client::connect([format!("http://{eps}")], None)
            .await
            .unwrap();
        let leftover = format!("/fencelock/left/{lease:x}");
        let put = etcd_client::PutOptions::new().with_lease(lease);
        raw.put(leftover.clone(), "", Some(put)).await.unwrap();
        let (_, old_revision, _) = keys(&eps, "left").await.remove(0);
        let guard = a.lock("left").acquire().await.unwrap();
        assert!(guard.fencing_token() > old_revision as u64);
        let now = keys(&eps, "left").await;
        assert_eq!(now.len(), 1, "{now:?}");
        assert_eq!(now[0].1 as u64, guard.fencing_token());
        guard.release().await.unwrap();
        assert!(keys(&eps, "left").await.is_empty());
    })
    .await;
}

/// A waiter whose lease is revoked while it waits stops waiting with an error, and does not
/// take the holder's release for the lock (etcd-io/etcd#11456, etcd-io/etcd#19597).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_whose_lease_ends_does_not_acquire() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(30.0, "waiter's lease", async {
        let (a, b) = (client(&url, 10_000).await, client(&url, 10_000).await);
        let held = a.lock("wl").acquire().await.unwrap();
        let waiter = tokio::spawn({
            let lock = b.lock("wl");
            async move { lock.acquire().await }
        });
        until_keys(&eps, "wl", 2).await;
        let (_, _, lease) = keys(&eps, "wl").await.remove(1);
        let lease = format!("{lease:x}");
        let eps2 = eps.clone();
        tokio::task::spawn_blocking(move || etcdctl(&eps2, &["lease", "revoke", &lease]))
            .await
            .unwrap()
            .expect("etcdctl lease revoke");
        held.release().await.unwrap();
        let got = within(10.0, "the waiter gives up", waiter).await.unwrap();
        assert!(matches!(got, Err(Error::Unavailable { .. })), "{got:?}");
        assert!(keys(&eps, "wl").await.is_empty());
    })
    .await;
}

/// `common::failed_release_is_never_reentered`. Failed before the fix: the failed delete made
/// the holding re-enterable, and the owner's next `try_acquire` returned the old token at once,
/// with no request, while another client held the lock (found by `fencelock verify
/// --faults netem`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_release_is_never_reentered() {
    let etcd = server();
    let proxy = fencelock_testkit::TcpProxy::start(etcd.port()).expect("proxy");
    let proxied = format!("etcd://{}", proxy.connect_string());
    within(
        60.0,
        "failed release",
        common::failed_release_is_never_reentered(&proxied, &etcd.url(), &proxy),
    )
    .await;
}

/// `common::a_dropped_release_is_finished`. Failed before the fix: the release marked the
/// holding closed and the delete was never sent again, so the key stayed under the live lease
/// (nobody could take the lock while the client lived), or, when the delete did arrive, the
/// client's slot for the lock stayed taken (its other handles waited forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_release_is_finished() {
    let etcd = server();
    let proxy = fencelock_testkit::TcpProxy::start(etcd.port()).expect("proxy");
    let proxied = format!("etcd://{}", proxy.connect_string());
    within(
        60.0,
        "dropped release",
        common::a_dropped_release_is_finished(&proxied, &etcd.url(), &proxy),
    )
    .await;
}

/// The lease audit matches a holding by its token, never by its key alone: owners that
/// release and take their locks again while an audit is in flight never see `lost()`, and
/// leave no key behind. The client has two endpoints, one of them slow (400 ms each way), so
/// that an audit read sent to it lands after a release and before the re-acquire that went
/// to the fast one (the same key, since the key is named by the lease). Failed before the fix:
/// the audit took the new holding for the old one that vanished, fired its `lost()` ("forced
/// unlock") and freed its slot, and its key stayed under the live lease: its release said
/// `NotHeld`, and nobody could take the lock while the client lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_audit_never_takes_a_new_holding_for_a_vanished_one() {
    let etcd = server();
    let slow = fencelock_testkit::TcpProxy::start(etcd.port()).expect("proxy");
    slow.set_latency(Duration::from_millis(400));
    let url = format!("etcd://{},{}", slow.connect_string(), etcd.endpoints());
    let eps = etcd.endpoints();
    within(90.0, "audit during re-acquires", async {
        let a = client(&url, 3_000).await;
        let mut tasks = Vec::new();
        for i in 0..16 {
            let lock = a.lock(&format!("audit-{i}"));
            tasks.push(tokio::spawn(async move {
                let until = Instant::now() + Duration::from_secs(12);
                let mut rounds = 0;
                while Instant::now() < until {
                    let g = lock.acquire_timeout(Duration::from_secs(10)).await;
                    let g = g.expect("the lock is free: only this owner takes it");
                    tokio::time::sleep(Duration::from_millis(300 + 5 * i)).await;
                    assert!(g.is_held(), "lost while held: {:?}", g.lost_reason());
                    let released = g.release().await.expect("release");
                    assert_eq!(released, Released::Released, "round {rounds}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    rounds += 1;
                }
                rounds
            }));
        }
        for t in tasks {
            assert!(t.await.expect("owner") > 0);
        }
        for i in 0..16 {
            let name = format!("audit-{i}");
            assert!(keys(&eps, &name).await.is_empty(), "{name} left a key");
        }
    })
    .await;
}

/// The lease `lease` as the server has it: (remaining TTL, granted TTL) in seconds, a
/// remaining TTL of -1 when there is no such lease (revoked or expired); read with a client of
/// its own (not the library under test).
async fn lease_ttl(endpoints: &str, lease: i64) -> (i64, i64) {
    let mut raw = etcd_client::Client::connect([format!("http://{endpoints}")], None)
        .await
        .expect("raw etcd client");
    let got = raw
        .lease_time_to_live(lease, None)
        .await
        .expect("the lease's TTL");
    (got.ttl(), got.granted_ttl())
}

/// A lease revoked behind the client's back fires `lost()` on every guard of the client at
/// once, not on one: guards of two handles on two names, and both holds of a re-entered lock
/// (counted in the client). The TTL is 30 s, so the guards are told by the lease's end, not by
/// their deadlines.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_lease_fires_lost_on_every_guard() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(60.0, "revoke, every guard", async {
        let a = client(&url, 30_000).await;
        let first = a.lock("every-1").acquire().await.unwrap();
        let second = a.lock("every-2").acquire().await.unwrap();
        let lock = a.lock("every-3");
        let outer = lock.acquire().await.unwrap();
        let inner = lock.acquire().await.unwrap();
        assert_eq!((outer.hold_count(), inner.hold_count()), (1, 2));
        let (_, _, lease) = keys(&eps, "every-1").await.remove(0);
        for name in ["every-2", "every-3"] {
            let held = keys(&eps, name).await;
            assert_eq!(held.len(), 1, "{held:?}");
            assert_eq!(held[0].2, lease, "one lease for every lock of the client");
        }
        let revoke = format!("{lease:x}");
        let eps2 = eps.clone();
        tokio::task::spawn_blocking(move || etcdctl(&eps2, &["lease", "revoke", &revoke]))
            .await
            .unwrap()
            .expect("etcdctl lease revoke");
        let revoked = Instant::now();
        let guards = [&first, &second, &outer, &inner];
        for (i, g) in guards.iter().enumerate() {
            within(
                5.0,
                &format!("lost() of guard {i} after the revoke"),
                g.lost(),
            )
            .await;
            assert!(!g.is_held(), "guard {i}");
            let why = g.lost_reason().map(|r| r.to_string()).unwrap_or_default();
            assert!(
                why.contains("revoked"),
                "guard {i} was told by something else than the lease's end: {why:?}"
            );
        }
        assert!(
            revoked.elapsed() < Duration::from_secs(10),
            "told after {:?}: by the deadline, not the revoke",
            revoked.elapsed()
        );
        for name in ["every-1", "every-2", "every-3"] {
            assert!(keys(&eps, name).await.is_empty(), "{name}");
        }
        drop((first, second, outer, inner));
    })
    .await;
}

/// etcd counts lease TTLs in whole seconds: a `default_lease` that is not a whole number of
/// seconds is rounded up (2.2 s asks for 3 s, not the nearest 2 s); the TTL the server
/// granted is every guard's `lease()`, and `Client::warnings()` says so. A whole number of
/// seconds is granted as asked, without a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_ttl_is_rounded_up_to_whole_seconds_and_reported() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(60.0, "rounded TTL", async {
        for (asked_ms, granted_s) in [(2_200, 3), (2_500, 3), (3_000, 3)] {
            let asked = Duration::from_millis(asked_ms);
            let granted = Duration::from_secs(granted_s);
            let c = client(&url, asked_ms).await;
            let g = c.lock("ttl").acquire().await.unwrap();
            assert_eq!(g.lease(), granted, "asked for {asked:?}");
            let (_, _, lease) = keys(&eps, "ttl").await.remove(0);
            let (_, on_server) = lease_ttl(&eps, lease).await;
            assert_eq!(
                on_server, granted_s as i64,
                "the server's TTL, asked {asked:?}"
            );
            common::assert_lease_reported(c.warnings(), asked, granted);
            assert_eq!(g.release().await.unwrap(), Released::Released);
            c.close().await.unwrap();
        }
    })
    .await;
}

/// Keys of the client's lease that the client could not delete (as a give-back that failed)
/// go with its lease when the client ends: the last handle closed (`Client::close`) or
/// dropped revokes the lease, so another client gets the lock at once rather than after the
/// TTL (30 s). The leftover here is a key put under the client's lease behind its back: the
/// client does not know it, so only the lease's end can remove it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_lease_is_revoked_when_the_client_is_closed_or_dropped() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(60.0, "revoked at the end", async {
        let mut raw = etcd_client::Client::connect([format!("http://{eps}")], None)
            .await
            .unwrap();
        let b = client(&url, 30_000).await;
        for close in [true, false] {
            let name = if close { "left-close" } else { "left-drop" };
            let a = client(&url, 30_000).await;
            let probe = a.lock("probe").acquire().await.unwrap();
            let (_, _, lease) = keys(&eps, "probe").await.remove(0);
            assert_eq!(probe.release().await.unwrap(), Released::Released);
            let leftover = format!("/fencelock/{name}/{lease:x}");
            let put = etcd_client::PutOptions::new().with_lease(lease);
            raw.put(leftover, "", Some(put)).await.unwrap();
            let busy = b.lock(name).try_acquire().await.unwrap();
            assert!(busy.is_err(), "the leftover key holds the lock");
            let ended = Instant::now();
            if close {
                a.close().await.expect("close");
            } else {
                drop(a);
            }
            let got = within(
                5.0,
                "the lock is free long before the 30 s TTL",
                b.lock(name).acquire(),
            )
            .await
            .unwrap();
            eprintln!(
                "{}: B acquired {:?} after",
                if close { "close" } else { "drop" },
                ended.elapsed()
            );
            assert_eq!(lease_ttl(&eps, lease).await.0, -1, "the lease is gone");
            assert_eq!(got.release().await.unwrap(), Released::Released);
            assert!(keys(&eps, name).await.is_empty());
        }
    })
    .await;
}

/// `Client::close` on the client's last handle returns once the lease is revoked (bounded by
/// the request bound), not before: a program that exits right after it leaves no lease behind
/// for a TTL. The client reaches the server through a slow link (300 ms each way), so a revoke
/// left to the background is still on its way when `close` returns. Failed before the fix:
/// `close` returned at once and the lease was still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn close_returns_once_the_lease_is_revoked() {
    let etcd = server();
    let eps = etcd.endpoints();
    let proxy = fencelock_testkit::TcpProxy::start(etcd.port()).expect("proxy");
    let proxied = format!("etcd://{}", proxy.connect_string());
    within(30.0, "close revokes", async {
        let a = client(&proxied, 30_000).await;
        let held = a.lock("closing").acquire().await.unwrap();
        let (_, _, lease) = keys(&eps, "closing").await.remove(0);
        assert_eq!(held.release().await.unwrap(), Released::Released);
        assert!(lease_ttl(&eps, lease).await.0 > 0, "the lease is live");
        proxy.set_latency(Duration::from_millis(300));
        let closing = Instant::now();
        a.close().await.expect("close");
        let took = closing.elapsed();
        assert_eq!(
            lease_ttl(&eps, lease).await.0,
            -1,
            "the lease is gone when close returns (after {took:?})"
        );
        assert!(took >= Duration::from_millis(600), "a round trip: {took:?}");
    })
    .await;
}

/// The guards of a lease that ended stay lost, and the release of each finds nothing
/// (`NotHeld`), a re-entered lock's two guards included: neither says the lock is still held
/// (`StillHeld`) when the client has no lease that could hold it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn guards_of_a_revoked_lease_release_as_not_held() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(30.0, "releases after the revoke", async {
        let a = client(&url, 30_000).await;
        let single = a.lock("gone-1").acquire().await.unwrap();
        let lock = a.lock("gone-2");
        let outer = lock.acquire().await.unwrap();
        let inner = lock.acquire().await.unwrap();
        let (_, _, lease) = keys(&eps, "gone-1").await.remove(0);
        let revoke = format!("{lease:x}");
        let eps2 = eps.clone();
        tokio::task::spawn_blocking(move || etcdctl(&eps2, &["lease", "revoke", &revoke]))
            .await
            .unwrap()
            .expect("etcdctl lease revoke");
        for g in [&single, &outer, &inner] {
            within(5.0, "lost() after the revoke", g.lost()).await;
        }
        let released = [
            single.release().await.unwrap(),
            outer.release().await.unwrap(),
            inner.release().await.unwrap(),
        ];
        assert_eq!(released, [Released::NotHeld; 3], "single, outer, inner");
    })
    .await;
}

/// An etcd with authentication on: a user with a role that may read and write the lock
/// prefix. The password works from the URL and from `ClientOptions::password` (which the CLI
/// fills from `FENCELOCK_PASSWORD`); a wrong or missing one is refused, and no error shows
/// the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn credentials_from_the_url_or_the_options_and_never_shown() {
    const SECRET: &str = "s3cret-Pa55";
    let etcd = server();
    let eps = etcd.endpoints();
    let admin = ["--user", "root:rootpw"];
    let setup: [&[&str]; 6] = [
        &["user", "add", "root:rootpw"],
        &["role", "add", "locker"],
        &[
            "role",
            "grant-permission",
            "locker",
            "--prefix=true",
            "readwrite",
            "/fencelock/",
        ],
        &["user", "add", &format!("app:{SECRET}")],
        &["user", "grant-role", "app", "locker"],
        &["auth", "enable"],
    ];
    for args in setup {
        etcdctl(&eps, args).expect("set up authentication");
    }
    within(60.0, "authenticated locking", async {
        let host = eps.as_str();
        let in_url = Client::connect(&format!("etcd://app:{SECRET}@{host}")).await;
        let options = ClientOptions::default().password(SECRET);
        let in_options = Client::connect_with(&format!("etcd://app@{host}"), options).await;
        for client in [in_url.unwrap(), in_options.unwrap()] {
            let guard = client.lock("authed").acquire().await.unwrap();
            assert!(guard.fencing_token() > 0);
            assert_eq!(guard.release().await.unwrap(), Released::Released);
            client.close().await.unwrap();
        }
        let wrong = ClientOptions::default().password("not-it");
        for refused in [
            Client::connect_with(&format!("etcd://app@{host}"), wrong).await,
            Client::connect(&format!("etcd://app:wr0ng-{SECRET}@{host}")).await,
        ] {
            let Err(e) = refused else {
                panic!("a wrong password was accepted")
            };
            assert!(matches!(e, Error::Denied { .. }), "{e:?}");
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains(SECRET), "{shown}");
            assert!(!shown.contains("not-it"), "{shown}");
        }
        // Without credentials the server refuses every request: the lock is not taken.
        match Client::connect(&format!("etcd://{host}")).await {
            Ok(anonymous) => {
                let refused = anonymous.lock("authed").try_acquire().await;
                assert!(matches!(refused, Err(Error::Denied { .. })), "{refused:?}");
            }
            Err(e) => assert!(matches!(e, Error::Denied { .. }), "{e:?}"),
        }
    })
    .await;
    let _ = etcdctl(&eps, &[&admin[..], &["auth", "disable"]].concat());
}
