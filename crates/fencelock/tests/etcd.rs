//! etcd as the lock service, against real etcd members from the test kit (Debian's
//! etcd-server 3.4), and `etcdctl lock` for interop.
//!
//! What every service shares (exclusion, re-entry, waiting, cleanup, forced unlocks, pauses,
//! failed and dropped releases, a revoked lease, the rounded TTL, the read-write lock, the
//! semaphore and elections) is in `conformance.rs`, run on one member and on three; this file
//! keeps what is etcd's own: `etcdctl` interop, the key layout, the lease audit, leader
//! kills, credentials.
#![cfg(feature = "etcd")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{client_at, etcd_keys, etcd_lease_ttl, within};
use fencelock::{Client, ClientOptions, Error, InputError, Released};
use fencelock_testkit::{etcdctl, EtcdCluster, EtcdServer, EtcdctlElect, EtcdctlLock};
use tokio::time::Instant;

fn server() -> EtcdServer {
    EtcdServer::start().expect("start an etcd server")
}

/// Waits until the lock has `n` keys, for at most 10 s.
async fn until_keys(endpoints: &str, name: &str, n: usize) {
    within(10.0, &format!("{n} keys of {name}"), async {
        while etcd_keys(endpoints, name).await.len() != n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// `etcdctl lock` (etcd's concurrency.Mutex) and fencelock exclude each other on one name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcdctl_lock_interop() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(60.0, "etcdctl", async {
        let c = client_at(&url, 10_000).await;
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
        let (a, b) = (client_at(&url, 3_000).await, client_at(&url, 3_000).await);
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
/// and put again, never adopted: the new holding gets a fresh, larger token, its key's
/// create revision, which re-entry keeps (one key, one token).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leftover_key_is_replaced_not_adopted() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(30.0, "leftover", async {
        let a = client_at(&url, 10_000).await;
        let probe = a.lock("probe").acquire().await.unwrap();
        let (_, _, lease) = etcd_keys(&eps, "probe").await.remove(0);
        probe.release().await.unwrap();
        let mut raw = common::etcd_raw(&eps).await;
        let leftover = format!("/fencelock/left/{lease:x}");
        let put = etcd_client::PutOptions::new().with_lease(lease);
        raw.put(leftover.clone(), "", Some(put)).await.unwrap();
        let (_, old_revision, _) = etcd_keys(&eps, "left").await.remove(0);
        let lock = a.lock("left");
        let guard = lock.acquire().await.unwrap();
        assert!(guard.fencing_token() > old_revision as u64);
        let now = etcd_keys(&eps, "left").await;
        assert_eq!(now.len(), 1, "{now:?}");
        assert_eq!(
            now[0].1 as u64,
            guard.fencing_token(),
            "token = create revision"
        );
        let again = lock.acquire().await.unwrap();
        assert_eq!(again.hold_count(), 2);
        assert_eq!(etcd_keys(&eps, "left").await, now, "re-entry keeps the key");
        assert_eq!(again.fencing_token(), guard.fencing_token());
        again.release().await.unwrap();
        guard.release().await.unwrap();
        assert!(etcd_keys(&eps, "left").await.is_empty());
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
        let (a, b) = (client_at(&url, 10_000).await, client_at(&url, 10_000).await);
        let held = a.lock("wl").acquire().await.unwrap();
        let waiter = tokio::spawn({
            let lock = b.lock("wl");
            async move { lock.acquire().await }
        });
        until_keys(&eps, "wl", 2).await;
        let (_, _, lease) = etcd_keys(&eps, "wl").await.remove(1);
        let lease = format!("{lease:x}");
        let eps2 = eps.clone();
        tokio::task::spawn_blocking(move || etcdctl(&eps2, &["lease", "revoke", &lease]))
            .await
            .unwrap()
            .expect("etcdctl lease revoke");
        held.release().await.unwrap();
        let got = within(10.0, "the waiter gives up", waiter).await.unwrap();
        assert!(matches!(got, Err(Error::Unavailable { .. })), "{got:?}");
        assert!(etcd_keys(&eps, "wl").await.is_empty());
    })
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
        let a = client_at(&url, 3_000).await;
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
            assert!(etcd_keys(&eps, &name).await.is_empty(), "{name} left a key");
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
        let mut raw = common::etcd_raw(&eps).await;
        let b = client_at(&url, 30_000).await;
        for close in [true, false] {
            let name = if close { "left-close" } else { "left-drop" };
            let a = client_at(&url, 30_000).await;
            let probe = a.lock("probe").acquire().await.unwrap();
            let (_, _, lease) = etcd_keys(&eps, "probe").await.remove(0);
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
            assert_eq!(etcd_lease_ttl(&eps, lease).await.0, -1, "the lease is gone");
            assert_eq!(got.release().await.unwrap(), Released::Released);
            assert!(etcd_keys(&eps, name).await.is_empty());
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
        let a = client_at(&proxied, 30_000).await;
        let held = a.lock("closing").acquire().await.unwrap();
        let (_, _, lease) = etcd_keys(&eps, "closing").await.remove(0);
        assert_eq!(held.release().await.unwrap(), Released::Released);
        assert!(etcd_lease_ttl(&eps, lease).await.0 > 0, "the lease is live");
        proxy.set_latency(Duration::from_millis(300));
        let closing = Instant::now();
        a.close().await.expect("close");
        let took = closing.elapsed();
        assert_eq!(
            etcd_lease_ttl(&eps, lease).await.0,
            -1,
            "the lease is gone when close returns (after {took:?})"
        );
        assert!(took >= Duration::from_millis(600), "a round trip: {took:?}");
    })
    .await;
}

/// An etcd with authentication on: a user with a role that may read and write the lock
/// prefix. The password works from the URL and from `ClientOptions::password` (which the CLI
/// fills from `FENCELOCK_PASSWORD`); a wrong or missing one is refused, and no error shows
/// the password. Without authentication, a password without a user is refused before any I/O,
/// and not shown either.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn credentials_from_the_url_or_the_options_and_never_shown() {
    const SECRET: &str = "s3cret-Pa55";
    let etcd = server();
    let eps = etcd.endpoints();
    let password = ClientOptions::default().password("s3cret");
    let r = Client::connect_with(&etcd.url(), password).await;
    let e = r.expect_err("a password without a user");
    assert!(matches!(
        e,
        Error::InvalidInput(InputError::InvalidUrl { .. })
    ));
    assert!(!e.to_string().contains("s3cret"));
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

// ---- Elections (issue 25): `concurrency.Election`'s layout, `<prefix>/<name>/<lease hex>`
// with the value as the key's value; the lowest create revision leads and is the term.

/// The next report of an observer, within 10 s.
async fn next_leader(observer: &mut fencelock::Observer) -> Option<fencelock::Leader> {
    within(10.0, "the observer's next report", observer.changed())
        .await
        .expect("the observer follows")
}

/// Runs `f` on an `etcdctl elect` process in a blocking task, and hands the process back.
async fn blocking<T: Send + 'static>(
    mut elect: EtcdctlElect,
    f: impl FnOnce(&mut EtcdctlElect) -> T + Send + 'static,
) -> (EtcdctlElect, T) {
    tokio::task::spawn_blocking(move || {
        let got = f(&mut elect);
        (elect, got)
    })
    .await
    .unwrap()
}

/// `etcdctl elect NAME VALUE` (etcd's `concurrency.Election`) and fencelock participants
/// elect one leader at a time, both ways; `etcdctl elect -l NAME` sees fencelock's leader and
/// `Election::observe` sees etcdctl's, and each side reads the other's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcdctl_elect_interop() {
    let etcd = server();
    let (url, eps) = (etcd.url(), etcd.endpoints());
    within(90.0, "etcdctl elect", async {
        let c = client_at(&url, 10_000).await;
        let election = c.election("leader");
        let mut observer = election.observe().await.unwrap();
        assert_eq!(next_leader(&mut observer).await, None);
        let theirs = EtcdctlElect::campaign(&eps, "/fencelock/leader", "theirs-1").unwrap();
        let (theirs, led) = blocking(theirs, |e| e.next_leader(Duration::from_secs(20))).await;
        let (key, value) = led.unwrap();
        assert!(key.starts_with("/fencelock/leader/"), "{key}");
        assert_eq!(value, "theirs-1");
        let leader = election.leader().await.unwrap().expect("etcdctl leads");
        assert_eq!(leader.value, "theirs-1");
        let seen = next_leader(&mut observer).await.unwrap();
        assert_eq!(seen, leader);
        assert!(election.try_campaign("rust-1").await.unwrap().is_err());

        let campaign = tokio::spawn({
            let election = election.clone();
            async move { election.campaign("rust-1").await }
        });
        until_keys(&eps, "leader", 2).await;
        assert!(
            !campaign.is_finished(),
            "fencelock leads while etcdctl does"
        );
        tokio::task::spawn_blocking(move || theirs.resign())
            .await
            .unwrap()
            .unwrap();
        let leading = within(10.0, "fencelock leads after etcdctl resigned", campaign)
            .await
            .unwrap()
            .unwrap();
        assert!(leading.term() > leader.term);
        let seen = next_leader(&mut observer).await.unwrap();
        assert_eq!((seen.value.as_str(), seen.term), ("rust-1", leading.term()));
        let watcher = EtcdctlElect::observe(&eps, "/fencelock/leader").unwrap();
        let (watcher, seen) = blocking(watcher, |e| e.next_leader(Duration::from_secs(20))).await;
        let (key, value) = seen.unwrap();
        assert_eq!(
            value, "rust-1",
            "etcdctl elect -l sees fencelock's leader ({key})"
        );

        let theirs = EtcdctlElect::campaign(&eps, "/fencelock/leader", "theirs-2").unwrap();
        until_keys(&eps, "leader", 2).await;
        let (theirs, early) = blocking(theirs, |e| e.leads_within(Duration::from_secs(1))).await;
        assert!(!early, "etcdctl leads while fencelock does");
        leading.resign().await.unwrap();
        let (theirs, led) = blocking(theirs, |e| e.next_leader(Duration::from_secs(10))).await;
        assert_eq!(
            led.expect("etcdctl leads after fencelock resigned").1,
            "theirs-2"
        );
        let seen = next_leader(&mut observer).await.unwrap();
        assert_eq!(seen.value, "theirs-2");
        let (watcher, seen) = blocking(watcher, |e| e.next_leader(Duration::from_secs(10))).await;
        assert_eq!(seen.unwrap().1, "theirs-2");
        drop(watcher);
        tokio::task::spawn_blocking(move || theirs.resign())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(next_leader(&mut observer).await, None);
    })
    .await;
}

// ---- Read-write locks (issue 24): etcd's `recipes.RWMutex` layout, `<name>/read/<unique>`
// and `<name>/write/<unique>` keys under the client's lease, in create-revision order.

/// The layout is etcd's `recipes.RWMutex`'s: a writer's key put as `RWMutex.Lock` puts it
/// (`<pfx>/write/<nanos>` under a lease of its own) keeps fencelock's readers and writers
/// out until it is deleted; fencelock's keys are where `RWMutex.RLock` looks for writers
/// ahead (the last `<pfx>/write` key below its revision) and where `Lock` looks for
/// anyone ahead (the last `<pfx>/` key).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rw_keys_are_where_etcds_rwmutex_looks() {
    let etcd = server();
    within(60.0, "rwmutex layout", async {
        let c = client_at(&etcd.url(), 10_000).await;
        let mut raw = common::etcd_raw(&etcd.endpoints()).await;
        let lease = raw.lease_grant(30, None).await.unwrap().id();
        let theirs = "/fencelock/rw-etcd/write/1700000000000000000";
        let put = etcd_client::PutOptions::new().with_lease(lease);
        raw.put(theirs, "", Some(put)).await.unwrap();
        assert!(common::busy(&c, "rw-etcd", false).await);
        assert!(common::busy(&c, "rw-etcd", true).await);
        let reading = tokio::spawn({
            let rw = c.rw_lock("rw-etcd");
            async move { rw.read().acquire().await }
        });
        common::until_queue(&c, "rw-etcd", 1, 1).await;
        raw.delete(theirs, None).await.unwrap();
        let reading = within(10.0, "a reader after etcd's writer", reading)
            .await
            .unwrap()
            .unwrap();
        // RWMutex.Lock's look for anyone ahead of a key at the current revision.
        let reader = raw.clone();
        let last = |pfx: &str, rev: i64| {
            let pfx = pfx.to_owned();
            let mut raw = reader.clone();
            async move {
                let options = etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_max_mod_revision(rev - 1)
                    .with_sort(
                        etcd_client::SortTarget::Mod,
                        etcd_client::SortOrder::Descend,
                    )
                    .with_limit(1);
                let got = raw.get(pfx, Some(options)).await.unwrap();
                got.kvs().first().map(|kv| kv.key_str().unwrap().to_owned())
            }
        };
        let now = raw
            .get("x", None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision()
            + 1;
        let ahead = last("/fencelock/rw-etcd/", now).await.expect("a key ahead");
        assert!(ahead.starts_with("/fencelock/rw-etcd/read/"), "{ahead}");
        assert_eq!(last("/fencelock/rw-etcd/write", now).await, None);
        reading.release().await.unwrap();
        let writing = c.rw_lock("rw-etcd").write().acquire().await.unwrap();
        let ahead = last("/fencelock/rw-etcd/write", now + 10)
            .await
            .expect("a writer");
        assert!(ahead.starts_with("/fencelock/rw-etcd/write/"), "{ahead}");
        writing.release().await.unwrap();
        until_keys(&etcd.endpoints(), "rw-etcd", 0).await;
    })
    .await;
}

// ---- Semaphores (issue 24): `<name>/permit/<lease hex>-<unique>` keys under the client's
// lease in create-revision order (the first N hold), N in the key `<name>`.

/// A permit's holder released while a waiter was between its look at the queue and its
/// watch of the range: the waiter holds. The waiter reads the keys ahead of its own, then
/// watches the range from the current revision, then reads again to find a deletion that
/// came in between. That second read was a count-only range, which etcd counts over the
/// whole range (its `max_create_revision` is ignored there): the waiter's own key kept the
/// count at one, so a release in that window was never seen and the waiter never held.
/// The waiter's client goes through a proxy with 50 ms of latency each way, which widens
/// the window to about 100 ms at the server; the release is swept across the waiter's first
/// round trips in 25 ms steps (the sweep is the fault's timing, not a wait for an event), so
/// that some rounds release inside the window whatever the number of round trips before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn semaphore_a_release_while_a_waiter_starts_watching_wakes_it() {
    let etcd = server();
    let slow = fencelock_testkit::TcpProxy::start(etcd.port()).expect("proxy");
    slow.set_latency(Duration::from_millis(50));
    let what = "releases across a waiter's first round trips";
    within(120.0, what, async {
        let holder = client_at(&etcd.url(), 10_000).await;
        let waiter = client_at(&format!("etcd://{}", slow.connect_string()), 10_000).await;
        let mut raw = common::etcd_raw(&etcd.endpoints()).await;
        for round in 0..20 {
            let delay = Duration::from_millis(25 * round);
            release_after_the_waiters_put(&holder, &waiter, &mut raw, delay).await;
        }
        assert!(permit_keys(&mut raw, "sem-window").await.is_empty());
    })
    .await;
}

/// One round of [`semaphore_a_release_while_a_waiter_starts_watching_wakes_it`]: `holder`
/// holds the one permit of "sem-window", `waiter` waits for it; `delay` after the waiter's
/// key is there, the holder releases, and the waiter must hold within 5 s.
async fn release_after_the_waiters_put(
    holder: &Client,
    waiter: &Client,
    raw: &mut etcd_client::Client,
    delay: Duration,
) {
    let held = holder.semaphore("sem-window", 1).acquire().await.unwrap();
    let semaphore = waiter.semaphore("sem-window", 1);
    let waiting = tokio::spawn(async move { semaphore.acquire().await });
    within(10.0, "the waiter's key", async {
        while permit_keys(raw, "sem-window").await.len() < 2 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    tokio::time::sleep(delay).await;
    held.release().await.unwrap();
    let what = format!("the waiter, the holder released {delay:?} after its put");
    let got = within(5.0, &what, waiting).await.unwrap().unwrap();
    got.release().await.unwrap();
}

/// The permit keys of semaphore `name`, read with a raw client.
async fn permit_keys(raw: &mut etcd_client::Client, name: &str) -> Vec<String> {
    let range = format!("/fencelock/{name}/permit/");
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_keys_only();
    let got = raw
        .get(range, Some(options))
        .await
        .expect("the permit keys");
    let keys = got.kvs().iter();
    keys.map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}
