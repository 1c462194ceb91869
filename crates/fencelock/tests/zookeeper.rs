//! ZooKeeper as the lock service, against real servers from the test kit (JVMs: few starts,
//! each shared by the assertions of one test).
//!
//! The fault tests at the end kill an ensemble's leader, lose a `create` reply (through the
//! test kit's `TcpProxy`), partition a holder from a running server, and restart a standalone
//! server.
//!
//! What every service shares (exclusion, re-entry, waiting, cleanup, forced unlocks, pauses,
//! failed and dropped releases, the end of a session, the negotiated lease, the read-write
//! lock, the semaphore and elections) is in `conformance.rs`, run on a standalone server and
//! an ensemble; this file keeps what is ZooKeeper's own: Curator interop, the node layout,
//! the fast path, fresh servers and faults.
#![cfg(feature = "zookeeper")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{client_at, within, zk_children};
use fencelock::{Client, ClientOptions, Error, Released};
use fencelock_testkit::{CuratorLock, TcpProxy, ZooKeeperEnsemble, ZooKeeperServer};
use tokio::time::Instant;

fn server() -> ZooKeeperServer {
    ZooKeeperServer::start().expect("start a ZooKeeper server")
}

/// Curator's InterProcessMutex and fencelock exclude each other on the same path.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn curator_interop() {
    let zk = server();
    within(90.0, "curator", async {
        let c = client_at(&zk.url(), 10_000).await;
        let mut curator = CuratorLock::spawn(&zk.connect_string(), "/fencelock/job").unwrap();
        curator.wait_acquired(Duration::from_secs(30)).unwrap();
        assert!(c.lock("job").try_acquire().await.unwrap().is_err());
        let waiting = tokio::spawn({
            let lock = c.lock("job");
            async move { lock.acquire().await }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !waiting.is_finished(),
            "fencelock took a lock Curator holds"
        );
        tokio::task::spawn_blocking(move || curator.release().map(|()| curator))
            .await
            .unwrap()
            .unwrap();
        let guard = within(10.0, "after Curator's release", waiting)
            .await
            .unwrap()
            .unwrap();

        let curator = CuratorLock::spawn(&zk.connect_string(), "/fencelock/job").unwrap();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert!(
            curator.acquired().is_none(),
            "Curator took a lock fencelock holds"
        );
        guard.release().await.unwrap();
        tokio::task::spawn_blocking(move || curator.wait_acquired(Duration::from_secs(15)))
            .await
            .unwrap()
            .expect("Curator acquires after fencelock's release");
    })
    .await;
}

// ---- Faults (issue 10, section 3): a leader killed, a lost `create` reply, a partition, a
// restart. Each awaits the fault's effect on the server (a node, a watch, a leader) rather
// than sleeping, and the test kit prints the servers' logs when one fails.

/// A lock child as the server has it: its name, the attempt's GUID, and the session that owns
/// it (`ephemeralOwner`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Child {
    name: String,
    guid: String,
    session: i64,
}

/// `_c_<guid>-lock-<seq>` → `<guid>`.
fn guid_of(child: &str) -> String {
    let rest = child.strip_prefix("_c_").unwrap_or(child);
    rest.rsplit_once("-lock-")
        .map_or(rest, |(guid, _)| guid)
        .to_owned()
}

/// Reads the lock folders with a raw client of its own (not the library under test),
/// connected straight to the servers.
struct Peek {
    zk: zookeeper_client::Client,
}

impl Peek {
    async fn connect(connect_string: &str) -> Self {
        Self {
            zk: common::zk_raw(connect_string).await,
        }
    }

    /// The lock's children in sequence order, with their GUIDs and owners.
    async fn children(&self, name: &str) -> Vec<Child> {
        let children = common::zk_children_of(&self.zk, name).await;
        children
            .into_iter()
            .map(|(name, session)| Child {
                guid: guid_of(&name),
                session,
                name,
            })
            .collect()
    }

    /// Polls until the lock has `n` children, at most `secs` seconds.
    async fn until_count(&self, name: &str, n: usize, secs: f64) -> Vec<Child> {
        let what = format!("{n} children under {name}");
        within(secs, &what, async {
            loop {
                let children = self.children(name).await;
                if children.len() == n {
                    return children;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
    }

    /// Makes the lock's folder (persistent), so that a create needs no other request first.
    async fn make_dir(&self, name: &str) {
        let mode = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        match self
            .zk
            .create(&format!("/fencelock/{name}"), &[], &mode)
            .await
        {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => panic!("create the lock folder: {e}"),
        }
    }
}

/// No two children come from one attempt (the GUID is the attempt's).
fn assert_no_duplicate(children: &[Child]) {
    let mut guids: Vec<&str> = children.iter().map(|c| c.guid.as_str()).collect();
    guids.sort_unstable();
    guids.dedup();
    assert_eq!(
        guids.len(),
        children.len(),
        "one attempt made two nodes: {children:?}"
    );
}

/// `0x<hex>` as the four-letter words print a session id.
fn sid(session: i64) -> String {
    format!("0x{:x}", session as u64)
}

/// Whether session `session` has a watch registered on `server` (`wchc`).
fn watches(server: &ZooKeeperServer, session: i64) -> bool {
    let sid = sid(session);
    server
        .four_letter("wchc")
        .map(|out| {
            let mut lines = out.lines();
            while let Some(line) = lines.next() {
                if line.trim() == sid {
                    return lines.next().is_some_and(|l| l.starts_with('\t'));
                }
            }
            false
        })
        .unwrap_or(false)
}

/// A client connected through `proxy` whose session timeout is `ms`.
async fn proxied_client(proxy: &TcpProxy, ms: u64) -> Client {
    client_at(&format!("zk://{}", proxy.connect_string()), ms).await
}

/// The lost `create` reply of every test below: `start` sends the create through the
/// proxy, whose server→client bytes are dropped from before it; once the node is on the
/// server (seen by `peek`, `before` children being there already) the connection is cut, so
/// that the client gets a connection loss for a create the server carried out, and
/// reconnects through the proxy (same session).
async fn lose_the_create_reply<F>(
    proxy: &TcpProxy,
    peek: &Peek,
    name: &str,
    before: usize,
    start: F,
) -> Vec<Child>
where
    F: FnOnce(),
{
    assert_eq!(
        proxy.swallow_replies(),
        1,
        "one connection through the proxy"
    );
    start();
    let children = peek.until_count(name, before + 1, 5.0).await;
    assert!(proxy.swallowed() > 0, "the server's reply was not dropped");
    cut_and_reconnect(proxy).await;
    children
}

/// Cuts the one connection through the proxy and waits until the client has opened a new
/// one.
async fn cut_and_reconnect(proxy: &TcpProxy) {
    let accepted = proxy.accepted();
    assert_eq!(proxy.cut(), 1);
    within(10.0, "the client reconnects through the proxy", async {
        while proxy.accepted() == accepted {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// A create whose reply is lost (the server made the node, the connection broke before the
/// answer came back) is found again by its GUID: the acquire holds with that one node, makes
/// no second one, and the release leaves the folder empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_create_reply_is_found_again_not_made_twice() {
    let zk = server();
    let proxy = TcpProxy::start(zk.port()).expect("proxy");
    within(60.0, "lost create reply", async {
        let peek = Peek::connect(&zk.connect_string()).await;
        let c = proxied_client(&proxy, 10_000).await;
        peek.make_dir("lcr").await;
        let started = Instant::now();
        let mut acquiring = None;
        let seen = lose_the_create_reply(&proxy, &peek, "lcr", 0, || {
            let lock = c.lock("lcr");
            acquiring = Some(tokio::spawn(async move { lock.acquire().await }));
        })
        .await;
        let guard = within(
            10.0,
            "the acquire after the reconnection",
            acquiring.unwrap(),
        )
        .await
        .unwrap()
        .expect("the attempt finds its node and holds");
        eprintln!("acquired {:?} after the fault began", started.elapsed());
        let children = peek.children("lcr").await;
        assert_eq!(children, seen, "the node the server made is the only one");
        assert_eq!(guard.fencing_token(), {
            let (_, stat) = peek
                .zk
                .get_data(&format!("/fencelock/lcr/{}", seen[0].name))
                .await
                .unwrap();
            stat.czxid as u64
        });
        let status = c.status("lcr").await.unwrap();
        assert_eq!(status.owners, vec![(guard.owner().to_owned(), 1)]);
        assert!(guard.is_held());
        assert_eq!(guard.release().await.unwrap(), Released::Released);
        assert!(peek.children("lcr").await.is_empty(), "release left a node");
    })
    .await;
}

/// The same lost reply while the lock is busy: the waiter finds its node, queues with it
/// alone (one node of its session, watching its predecessor) and takes over at the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_create_reply_while_waiting_keeps_one_node() {
    let zk = server();
    let proxy = TcpProxy::start(zk.port()).expect("proxy");
    within(60.0, "lost create reply while waiting", async {
        let peek = Peek::connect(&zk.connect_string()).await;
        let holder = client_at(&zk.url(), 10_000).await;
        let held = holder.lock("lcw").acquire().await.unwrap();
        let w = proxied_client(&proxy, 10_000).await;
        let mut waiting = None;
        let seen = lose_the_create_reply(&proxy, &peek, "lcw", 1, || {
            let lock = w.lock("lcw");
            waiting = Some(tokio::spawn(async move { lock.acquire().await }));
        })
        .await;
        let mine = seen[1].clone();
        // Settled: the waiter's session watches (its predecessor) again.
        within(10.0, "the waiter watches its predecessor", async {
            while !tokio::task::block_in_place(|| watches(&zk, mine.session)) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        let waiting = waiting.unwrap();
        assert!(!waiting.is_finished(), "{:?}", waiting.await);
        let children = peek.children("lcw").await;
        assert_eq!(children, seen, "the waiter made a second node");
        assert_no_duplicate(&children);
        assert_eq!(w.status("lcw").await.unwrap().waiters.len(), 1);

        let released = Instant::now();
        held.release().await.unwrap();
        let got = within(5.0, "the waiter takes over", waiting)
            .await
            .unwrap()
            .expect("the waiter acquires");
        eprintln!("handed over in {:?}", released.elapsed());
        assert_eq!(peek.children("lcw").await, vec![mine]);
        assert_eq!(got.release().await.unwrap(), Released::Released);
        assert!(peek.children("lcw").await.is_empty());
    })
    .await;
}

/// A waiting acquire whose create reply is lost and whose timeout passes meanwhile ends in
/// `Timeout` and removes the node it found again: only the holder's node is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_create_reply_then_timeout_leaves_no_node() {
    let zk = server();
    let proxy = TcpProxy::start(zk.port()).expect("proxy");
    within(60.0, "lost create reply, then timeout", async {
        let peek = Peek::connect(&zk.connect_string()).await;
        let holder = client_at(&zk.url(), 10_000).await;
        let held = holder.lock("lct").acquire().await.unwrap();
        let mine = peek.children("lct").await;
        let w = proxied_client(&proxy, 10_000).await;
        let mut timed = None;
        lose_the_create_reply(&proxy, &peek, "lct", 1, || {
            let lock = w.lock("lct");
            timed = Some(tokio::spawn(async move {
                lock.acquire_timeout(Duration::from_millis(200)).await
            }));
        })
        .await;
        let r = within(10.0, "the timed acquire ends", timed.unwrap())
            .await
            .unwrap();
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        assert_eq!(
            peek.children("lct").await,
            mine,
            "the timed-out attempt left a node"
        );
        held.release().await.unwrap();
        assert!(peek.children("lct").await.is_empty());
        // The client works on: a new attempt holds at once.
        let g = w.lock("lct").try_acquire().await.unwrap().expect("free");
        g.release().await.unwrap();
    })
    .await;
}

/// A waiting acquire dropped while its create reply is lost: the background undo finds the
/// node by its GUID once the client has reconnected and removes it.
///
/// Failed before the undo was retried: its first request (listing the children to find the
/// node by GUID) was lost with the connection too, so the node stayed for as long as the
/// session lived, and the lock was held by nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_create_reply_then_dropped_acquire_leaves_no_node() {
    let zk = server();
    let proxy = TcpProxy::start(zk.port()).expect("proxy");
    within(60.0, "lost create reply, then drop", async {
        let peek = Peek::connect(&zk.connect_string()).await;
        let holder = client_at(&zk.url(), 10_000).await;
        let held = holder.lock("lcd").acquire().await.unwrap();
        let mine = peek.children("lcd").await;
        let w = proxied_client(&proxy, 10_000).await;
        assert_eq!(proxy.swallow_replies(), 1);
        let lock = w.lock("lcd");
        let waiting = tokio::spawn(async move { lock.acquire().await });
        peek.until_count("lcd", 2, 5.0).await;
        // Dropped with its create unanswered: the undo that follows asks the server for the
        // node (on the same, silent connection) before the cut.
        let sent = proxy.forwarded_to_server();
        waiting.abort();
        let _ = waiting.await;
        within(5.0, "the undo's request goes out", async {
            while proxy.forwarded_to_server() == sent {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        cut_and_reconnect(&proxy).await;
        peek.until_count("lcd", 1, 10.0).await;
        assert_eq!(
            peek.children("lcd").await,
            mine,
            "the dropped attempt left a node"
        );
        held.release().await.unwrap();
        assert!(peek.children("lcd").await.is_empty());
        let g = w.lock("lcd").try_acquire().await.unwrap().expect("free");
        g.release().await.unwrap();
    })
    .await;
}

/// Which member serves session `session` now (`cons` lists each connection's session).
fn serving(ensemble: &ZooKeeperEnsemble, session: i64) -> Option<usize> {
    let needle = format!("sid={},", sid(session));
    ensemble
        .members()
        .iter()
        .position(|m| m.four_letter("cons").is_ok_and(|c| c.contains(&needle)))
}

/// Retries `status` until the client reaches the servers again (after a fault), at most
/// `secs` seconds.
async fn status_when_reachable(client: &Client, name: &str, secs: f64) -> fencelock::LockStatus {
    within(secs, "the client reaches the servers again", async {
        loop {
            match client.status(name).await {
                Ok(status) => return status,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
}

/// The ensemble's leader is killed (SIGKILL) while A holds a lock, with A's session on the
/// leader, and B trying to take the lock all along. A keeps the lock through its session's
/// move to another member (or is told it lost it); B never holds it while A believes it
/// does; once A releases, B holds it with a larger token; the killed member rejoins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ensemble_leader_killed_while_a_lock_is_held() {
    let started = Instant::now();
    let mut ensemble = tokio::task::spawn_blocking(ZooKeeperEnsemble::start)
        .await
        .unwrap()
        .expect("start a ZooKeeper ensemble");
    eprintln!("ensemble up in {:?}", started.elapsed());
    let (url, connect) = (ensemble.url(), ensemble.connect_string());
    let ensemble = &mut ensemble;
    within(100.0, "leader killed while held", async move {
        let peek = Peek::connect(&connect).await;
        let options = ClientOptions::default().default_lease(Duration::from_secs(10));
        let leader =
            tokio::task::block_in_place(|| ensemble.wait_for_leader(Duration::from_secs(30)))
                .expect("a leader");
        // A's session on the leader, so that killing it moves the session (the client
        // shuffles the members it connects to: try a few clients).
        let mut tries = 0;
        let (a, held, session, on) = loop {
            tries += 1;
            let a = Client::connect_with(&url, options.clone())
                .await
                .expect("connect A");
            let held = a.lock("lk").acquire().await.unwrap();
            let session = peek.children("lk").await[0].session;
            let on = tokio::task::block_in_place(|| serving(ensemble, session));
            if on == Some(leader) || tries == 12 {
                break (a, held, session, on);
            }
            held.release().await.unwrap();
            a.close().await.unwrap();
        };
        eprintln!(
            "A's session {} on member {on:?}, leader {leader} ({tries} tries)",
            sid(session)
        );
        let token = held.fencing_token();
        let (a_lost, a_done) = (held.lost_token(), Arc::new(AtomicBool::new(false)));

        let b = Client::connect_with(&url, options.clone())
            .await
            .expect("connect B");
        let attempts = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let b_tries = tokio::spawn({
            let (lock, a_lost, a_done) = (b.lock("lk"), a_lost.clone(), a_done.clone());
            let counter = attempts.clone();
            async move {
                let mut errors = Vec::new();
                loop {
                    let attempts = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    match lock.acquire_timeout(Duration::from_millis(500)).await {
                        Ok(g) => {
                            // A was told (or had given the lock back) before B got it.
                            let a_told = a_lost.is_cancelled() || a_done.load(Ordering::SeqCst);
                            return (g, Instant::now(), a_told, attempts, errors);
                        }
                        Err(Error::Timeout { .. }) => {}
                        Err(e) => {
                            errors.push(e.to_string());
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
            }
        });
        peek.until_count("lk", 2, 10.0).await;

        let killed = Instant::now();
        tokio::task::block_in_place(|| ensemble.member_mut(leader).kill());
        let new_leader =
            tokio::task::block_in_place(|| ensemble.wait_for_leader(Duration::from_secs(30)))
                .expect("a new leader");
        let elected = killed.elapsed();
        assert_ne!(new_leader, leader);
        let status = status_when_reachable(&a, "lk", 20.0).await;
        let back = killed.elapsed();
        let moved_to = tokio::task::block_in_place(|| serving(ensemble, session));
        eprintln!(
            "leader {leader} killed; member {new_leader} leads after {elected:?}; A back after \
             {back:?} on member {moved_to:?}; A told it lost the lock: {}",
            a_lost.is_cancelled()
        );
        if a_lost.is_cancelled() {
            assert!(!held.is_held());
        } else {
            // A kept it: same session, same node, same token, and B still tries.
            assert!(held.is_held());
            assert_ne!(moved_to, Some(leader));
            assert_eq!(status.owners, vec![(held.owner().to_owned(), 1)]);
            assert_eq!(status.fencing_token, Some(token));
            assert_eq!(peek.children("lk").await[0].session, session);
            // B's attempts against the new quorum time out while A holds.
            let now = attempts.load(Ordering::SeqCst);
            within(10.0, "B tries on after the election", async {
                while attempts.load(Ordering::SeqCst) < now + 2 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await;
            assert!(held.is_held());
            assert!(!b_tries.is_finished(), "B holds the lock A still holds");
        }

        a_done.store(true, Ordering::SeqCst);
        let released = held.release().await;
        eprintln!("A's release: {released:?}");
        let (got, _, a_told, attempts, errors) = within(20.0, "B gets the lock after A", b_tries)
            .await
            .unwrap();
        eprintln!("B: {attempts} attempts, errors {errors:?}");
        assert!(a_told, "B got the lock while A held it and was not told");
        assert!(
            got.fencing_token() > token,
            "{} !> {token}",
            got.fencing_token()
        );
        assert!(!a_lost.is_cancelled() || !got.lost_token().is_cancelled());

        let rejoin = Instant::now();
        tokio::task::block_in_place(|| ensemble.member_mut(leader).restart())
            .expect("the killed member restarts");
        tokio::task::block_in_place(|| ensemble.wait_for_leader(Duration::from_secs(30))).unwrap();
        assert!(
            ensemble.modes().iter().all(Option::is_some),
            "{:?}",
            ensemble.modes()
        );
        eprintln!("member {leader} rejoined in {:?}", rejoin.elapsed());
        assert!(got.is_held());
        assert_eq!(got.release().await.unwrap(), Released::Released);
        assert!(peek.children("lk").await.is_empty());
    })
    .await;
}

/// A holder cut off from a server that keeps running (a partition: its connection closed,
/// new ones refused) is told before the server expires its session and hands the lock to a
/// waiter; a new client using the holder's owner id meanwhile is refused; once the partition
/// heals, the expired session is never taken for a live one: the same client opens a new
/// session and acquires in it, and its stale guard's release leaves the new holder alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partitioned_holder_is_told_before_the_server_expires_its_session() {
    let zk = server();
    let proxy = TcpProxy::start(zk.port()).expect("proxy");
    within(60.0, "partition", async {
        let peek = Peek::connect(&zk.connect_string()).await;
        let a = proxied_client(&proxy, 2_000).await;
        let b = client_at(&zk.url(), 20_000).await;
        let held = a.lock("part").acquire().await.unwrap();
        let a_session = peek.children("part").await[0].session;
        let waiter = tokio::spawn({
            let lock = b.lock("part");
            async move {
                let g = lock.acquire_timeout(Duration::from_secs(30)).await;
                (g, Instant::now())
            }
        });
        peek.until_count("part", 2, 5.0).await;

        proxy.refuse_new(true);
        let cut = Instant::now();
        assert_eq!(proxy.cut(), 1);
        // While A's node still stands, a new client with A's owner id does not take it for
        // its own (apache/curator#1121: only a node of the current session counts).
        let again = client_at(&zk.url(), 2_000).await;
        let r = again
            .lock("part")
            .with_owner(held.owner())
            .try_acquire()
            .await;
        assert!(
            !matches!(r, Ok(Ok(_))),
            "a new session took A's node: {r:?}"
        );
        let window = peek
            .children("part")
            .await
            .iter()
            .any(|c| c.session == a_session);
        eprintln!("same owner id, new session, A's node still there ({window}): {r:?}");
        within(5.0, "lost() while partitioned", held.lost()).await;
        let lost_at = Instant::now();
        let (got, acquired_at) = within(10.0, "the server expires A's session", waiter)
            .await
            .unwrap();
        let got = got.expect("B gets the lock once A's session expired");
        eprintln!(
            "A told after {:?}; B acquired after {:?}",
            lost_at - cut,
            acquired_at - cut
        );
        assert!(lost_at < acquired_at, "B acquired before A was told");
        // Told by t + T − drift (t: the last answered request, before the cut), with room for a
        // busy scheduler.
        assert!(
            lost_at - cut <= Duration::from_millis(2_500),
            "{:?}",
            lost_at - cut
        );
        assert!(got.fencing_token() > held.fencing_token());
        assert!(!held.is_held());
        let children = peek.children("part").await;
        assert_eq!(children.len(), 1);
        assert_ne!(
            children[0].session, a_session,
            "A's node outlived its session"
        );

        // Healed: A's client finds its session expired and opens a new one; it never takes
        // the old session's node for its own, and a new attempt gets a node of the new session.
        proxy.refuse_new(false);
        let busy = within(20.0, "A's client works again, in a new session", async {
            loop {
                match a.lock("part").try_acquire().await {
                    Ok(busy) => return busy,
                    Err(Error::Unavailable { .. }) => {
                        tokio::time::sleep(Duration::from_millis(100)).await
                    }
                    other => panic!("an acquire after the heal: {other:?}"),
                }
            }
        })
        .await;
        assert!(busy.is_err(), "B holds the lock: {busy:?}");
        let other = a.lock("other").try_acquire().await.unwrap().expect("free");
        let fresh_node = peek.children("other").await;
        assert_eq!(fresh_node.len(), 1);
        assert_ne!(
            fresh_node[0].session, a_session,
            "a node of the expired session"
        );
        assert_eq!(other.release().await.unwrap(), Released::Released);
        assert!(peek.children("other").await.is_empty());
        let stale = held.release().await;
        assert!(matches!(stale, Ok(Released::NotHeld) | Err(_)), "{stale:?}");
        assert_eq!(
            peek.children("part").await,
            children,
            "the stale release touched B's node"
        );
        assert!(got.is_held());
        assert_eq!(got.release().await.unwrap(), Released::Released);
        let fresh = client_at(&zk.url(), 2_000).await;
        let g = fresh
            .lock("part")
            .try_acquire()
            .await
            .unwrap()
            .expect("free");
        g.release().await.unwrap();
    })
    .await;
}

/// A standalone server killed (SIGKILL) and restarted with its data while A holds a lock and
/// B waits: both sessions come back (within their timeout), A keeps its node and token (or
/// is told it lost it), B still waits, and A's release wakes B through the watch its client
/// set again after reconnecting.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standalone_restart_keeps_the_lock_and_wakes_the_waiter() {
    let mut zk = server();
    let zk = &mut zk;
    within(90.0, "restart", async move {
        let peek = Peek::connect(&zk.connect_string()).await;
        let (a, b) = (
            client_at(&zk.url(), 20_000).await,
            client_at(&zk.url(), 20_000).await,
        );
        let held = a.lock("rs").acquire().await.unwrap();
        let waiter = tokio::spawn({
            let lock = b.lock("rs");
            async move { (lock.acquire().await, Instant::now()) }
        });
        let before = peek.until_count("rs", 2, 5.0).await;

        let pid = zk.pid();
        let restarting = Instant::now();
        tokio::task::block_in_place(|| zk.restart()).expect("restart the server");
        assert_ne!(zk.pid(), pid);
        let serving = restarting.elapsed();
        let status = status_when_reachable(&a, "rs", 20.0).await;
        eprintln!(
            "serving again after {serving:?}, A back after {:?}; A told: {}",
            restarting.elapsed(),
            held.lost_token().is_cancelled()
        );
        let told = held.lost_token().is_cancelled();
        if !told {
            assert!(held.is_held());
            assert_eq!(status.owners, vec![(held.owner().to_owned(), 1)]);
            assert_eq!(status.fencing_token, Some(held.fencing_token()));
            assert_eq!(
                peek.children("rs").await,
                before,
                "the nodes did not survive"
            );
            assert!(!waiter.is_finished(), "B holds the lock A still holds");
        }
        let token = held.fencing_token();
        let released = Instant::now();
        held.release().await.unwrap();
        let (got, at) = within(10.0, "B is woken after the restart", waiter)
            .await
            .unwrap();
        let got = got.expect("B acquires");
        eprintln!("B woken {:?} after the release", at - released);
        if !told {
            assert!(
                at - released < Duration::from_secs(2),
                "woken by a timer, not the watch"
            );
        }
        assert!(got.fencing_token() > token);
        got.release().await.unwrap();
        assert!(peek.children("rs").await.is_empty());
    })
    .await;
}

/// A create carried out by the server whose reply does not come back within the response
/// timeout (the connection stays open but silent, until the client's own connection timeout
/// drops it and it reconnects): the acquire fails, or holds with its one node; a failed one
/// leaves no node once the client has reconnected.
///
/// Failed before the undo was retried, like the dropped acquire above: the acquire failed
/// after three response timeouts (the create, the listing that looks for its node, the undo's
/// listing), the background undo's listing failed too, and nothing tried again after the
/// reconnection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_reply_later_than_the_response_timeout_leaves_no_node() {
    let zk = server();
    let proxy = TcpProxy::start(zk.port()).expect("proxy");
    within(60.0, "slow create reply", async {
        let peek = Peek::connect(&zk.connect_string()).await;
        let holder = client_at(&zk.url(), 10_000).await;
        let held = holder.lock("slow").acquire().await.unwrap();
        let mine = peek.children("slow").await;
        let options = ClientOptions::default()
            .default_lease(Duration::from_millis(5_000))
            .response_timeout(Duration::from_millis(500));
        let url = format!("zk://{}", proxy.connect_string());
        let w = Client::connect_with(&url, options).await.unwrap();
        assert_eq!(proxy.swallow_replies(), 1);
        let accepted = proxy.accepted();
        let started = Instant::now();
        let r = within(20.0, "the acquire ends", w.lock("slow").acquire()).await;
        eprintln!(
            "acquire after {:?}: {:?}",
            started.elapsed(),
            r.as_ref().map(|g| g.fencing_token())
        );
        within(10.0, "the client reconnects by itself", async {
            while proxy.accepted() == accepted {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        eprintln!("reconnected after {:?}", started.elapsed());
        match r {
            Ok(g) => {
                let children = peek.children("slow").await;
                assert_eq!(children.len(), 2, "{children:?}");
                assert_no_duplicate(&children);
                held.release().await.unwrap();
                drop(g);
            }
            Err(e) => {
                assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
                let left = within(10.0, "the failed attempt's node goes", async {
                    loop {
                        let children = peek.children("slow").await;
                        if children == mine {
                            return children;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                })
                .await;
                assert_eq!(left, mine);
                held.release().await.unwrap();
            }
        }
        let g = w
            .lock("slow")
            .acquire_timeout(Duration::from_secs(5))
            .await
            .expect("the lock is free again");
        g.release().await.unwrap();
        assert!(peek.children("slow").await.is_empty());
    })
    .await;
}

/// A base path whose ACL lets this client read but not create: the acquire is refused with
/// `Error::Denied` naming the lock (trying again does not help), and nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_path_the_acl_closes_is_denied() {
    use zookeeper_client::{Acls, CreateMode};
    let zk = server();
    within(30.0, "denied", async {
        let peek = Peek::connect(&zk.connect_string()).await;
        let read_only = CreateMode::Persistent.with_acls(Acls::anyone_read());
        peek.zk.create("/guarded", b"", &read_only).await.unwrap();
        let url = format!("zk://{}/guarded", zk.connect_string());
        let client = Client::connect(&url).await.unwrap();
        match client.lock("x").acquire().await {
            Err(Error::Denied { lock, .. }) => assert_eq!(lock.as_deref(), Some("x")),
            other => panic!("expected Denied, got {other:?}"),
        }
        assert!(peek.zk.list_children("/guarded").await.unwrap().is_empty());
    })
    .await;
}

// The uncontended fast path: a lock this client last held alone is taken again without
// listing the queue, when its node's number follows its last one and the folder's watch saw
// nothing else (see `backend/zookeeper/quiet.rs`).

/// The requests the server received since `before` (a reading of `mntr`, which counts
/// pings and the session probe too, and each reading itself), this reading left out.
fn requests_since(server: &ZooKeeperServer, before: u64) -> u64 {
    received(server) - before - 1
}

/// `mntr`'s count of requests received.
fn received(server: &ZooKeeperServer) -> u64 {
    let mntr = server.four_letter("mntr").expect("mntr");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_packets_received"))
        .and_then(|v| v.trim().parse().ok())
        .expect("zk_packets_received in mntr")
}

/// `n` acquire + release pairs, one after the other (the first of a session lists the queue
/// and leaves the folder calm for the next).
async fn pairs(lock: &fencelock::Lock, n: usize) {
    for _ in 0..n {
        lock.acquire().await.unwrap().release().await.unwrap();
    }
}

/// A raw client's ephemeral lock node in `/fencelock/{name}`, named as Curator names them:
/// the lock is held by it while it is the lowest.
async fn raw_node(zk: &zookeeper_client::Client, name: &str) -> String {
    let mode = zookeeper_client::CreateMode::EphemeralSequential
        .with_acls(zookeeper_client::Acls::anyone_all());
    let prefix = format!("/fencelock/{name}/_c_00000000-0000-0000-0000-000000000000-lock-");
    let (_, seq) = zk.create(&prefix, b"raw", &mode).await.expect("raw node");
    format!("{prefix}{seq}")
}

/// A lock taken and released again and again by one client costs two requests per pair
/// (create, delete) once it has been held alone; tokens still increase, and the lock is
/// really held (another client is refused) on the fast path too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lock_held_alone_is_taken_again_with_two_requests() {
    let zk = server();
    within(60.0, "fast path", async {
        let (a, b) = (
            client_at(&zk.url(), 10_000).await,
            client_at(&zk.url(), 10_000).await,
        );
        let lock = a.lock("calm");
        let mut last = 0;
        for _ in 0..2 {
            let g = lock.acquire().await.unwrap();
            last = g.fencing_token();
            g.release().await.unwrap();
        }
        let before = received(&zk);
        for _ in 0..20 {
            let g = lock.acquire().await.unwrap();
            assert!(g.fencing_token() > last);
            last = g.fencing_token();
            g.release().await.unwrap();
        }
        let per_pair = requests_since(&zk, before) as f64 / 20.0;
        // A ping or the session probe may fall in the loop.
        assert!(per_pair <= 2.05, "{per_pair} requests per pair");
        let g = lock.acquire().await.unwrap();
        assert!(b.lock("calm").try_acquire().await.unwrap().is_err());
        assert_eq!(
            b.status("calm").await.unwrap().fencing_token,
            Some(g.fencing_token())
        );
        g.release().await.unwrap();
        assert!(zk_children(&zk.connect_string(), "calm").await.is_empty());
    })
    .await;
}

/// Nodes other clients made between two pairs send the next attempt back to the queue: a
/// node that holds the lock, and one made and deleted (the numbers no longer follow).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn other_nodes_between_pairs_end_the_fast_path() {
    let zk = server();
    within(60.0, "others", async {
        let (a, b) = (
            client_at(&zk.url(), 10_000).await,
            client_at(&zk.url(), 10_000).await,
        );
        let raw = zookeeper_client::Client::connect(&zk.connect_string())
            .await
            .unwrap();
        let lock = a.lock("others");
        pairs(&lock, 2).await;
        let held = b.lock("others").acquire().await.unwrap();
        assert!(lock.try_acquire().await.unwrap().is_err(), "two holders");
        let token = held.fencing_token();
        held.release().await.unwrap();
        pairs(&lock, 2).await;
        let node = raw_node(&raw, "others").await;
        assert!(
            lock.try_acquire().await.unwrap().is_err(),
            "held by a raw node"
        );
        raw.delete(&node, None).await.unwrap();
        let g = lock.acquire().await.unwrap();
        assert!(g.fencing_token() > token);
        g.release().await.unwrap();
    })
    .await;
}

/// The folder deleted and made again between two pairs, with as many nodes created in it as
/// make the next number follow the last one, the lowest still held by another session: the
/// attempt waits for it (the folder's watch saw the delete), never holding it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_folder_made_again_is_not_taken_for_calm() {
    let zk = server();
    within(60.0, "folder made again", async {
        let a = client_at(&zk.url(), 10_000).await;
        let raw = zookeeper_client::Client::connect(&zk.connect_string())
            .await
            .unwrap();
        let lock = a.lock("again");
        pairs(&lock, 3).await;
        // ZooKeeper numbers a child by the creates in its folder: the next is `creates`.
        let dir = "/fencelock/again";
        let (_, stat) = raw.get_children(dir).await.unwrap();
        let creates = (stat.cversion + stat.num_children) / 2;
        raw.delete(dir, None).await.unwrap();
        let persistent = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        raw.create(dir, &[], &persistent).await.unwrap();
        let holder = raw_node(&raw, "again").await;
        for _ in 1..creates {
            let extra = raw_node(&raw, "again").await;
            raw.delete(&extra, None).await.unwrap();
        }
        let waiter = tokio::spawn({
            let lock = lock.clone();
            async move { lock.acquire().await }
        });
        let mine = loop {
            let listed = zk_children(&zk.connect_string(), "again").await;
            let mut names = listed.into_iter().map(|(name, _)| name);
            if let Some(mine) = names.find(|c| !c.starts_with("_c_00000000")) {
                break mine;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            mine.ends_with(&format!("{creates:010}")),
            "{mine} is not number {creates}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "took a lock another session holds");
        raw.delete(&holder, None).await.unwrap();
        let g = within(5.0, "the waiter takes over", waiter)
            .await
            .unwrap()
            .unwrap();
        g.release().await.unwrap();
    })
    .await;
}

/// A holding taken on the fast path is told when its node is deleted (a forced unlock), as
/// one taken after a listing is; so is one whose folder watch ended because another owner of
/// the same client queued behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forced_unlock_of_a_holding_taken_on_the_fast_path_fires_lost() {
    let zk = server();
    within(60.0, "forced", async {
        // A 30 s session: its probe (every quarter) stays out of the one-request count.
        let (a, b) = (
            client_at(&zk.url(), 30_000).await,
            client_at(&zk.url(), 10_000).await,
        );
        let lock = a.lock("forced");
        pairs(&lock, 2).await;
        let before = received(&zk);
        let g = lock.acquire().await.unwrap();
        assert_eq!(requests_since(&zk, before), 1, "not taken on the fast path");
        assert_eq!(b.force_unlock("forced").await.unwrap().len(), 1);
        within(5.0, "lost() on the fast path", g.lost()).await;
        drop(g);

        pairs(&lock, 2).await;
        let g = lock.acquire().await.unwrap();
        let other = tokio::spawn({
            let lock = a.lock("forced").with_owner("second");
            async move { lock.acquire().await }
        });
        while zk_children(&zk.connect_string(), "forced").await.len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(b.force_unlock("forced").await.unwrap().len(), 1);
        within(5.0, "lost() after another owner queued", g.lost()).await;
        let next = within(5.0, "the other owner takes over", other)
            .await
            .unwrap()
            .unwrap();
        next.release().await.unwrap();
    })
    .await;
}

/// Two owners of one client take turns on the fast path; then they and a second client
/// contend, with pauses that leave the lock free now and then: acquires take the fast path,
/// the listing, or wait, in every mix, and two holders never meet.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owners_of_one_client_and_another_client_never_hold_at_once() {
    let zk = server();
    within(60.0, "mixed", async {
        let (a, b) = (
            client_at(&zk.url(), 30_000).await,
            client_at(&zk.url(), 10_000).await,
        );
        // One after the other, the two owners of one client share the fast path: the folder's
        // calm is the client's, whichever owner made the last node.
        let (first, second) = (
            a.lock("mixed").with_owner("first"),
            a.lock("mixed").with_owner("second"),
        );
        first.acquire().await.unwrap().release().await.unwrap();
        let before = received(&zk);
        for lock in [&second, &first, &second, &first] {
            lock.acquire().await.unwrap().release().await.unwrap();
        }
        assert!(requests_since(&zk, before) <= 9, "not on the fast path");
        let inside = Arc::new(AtomicBool::new(false));
        let locks = [
            a.lock("mixed").with_owner("first"),
            a.lock("mixed").with_owner("second"),
            b.lock("mixed"),
        ];
        let mut tasks = Vec::new();
        for (i, lock) in locks.into_iter().enumerate() {
            let inside = inside.clone();
            tasks.push(tokio::spawn(async move {
                let mut last = 0;
                for round in 0..15u64 {
                    let g = lock.acquire().await.expect("acquire");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
                    assert!(g.fencing_token() > last);
                    last = g.fencing_token();
                    tokio::time::sleep(Duration::from_millis(1 + (round + i as u64) % 3)).await;
                    inside.store(false, Ordering::SeqCst);
                    g.release().await.expect("release");
                    // Now and then nobody wants the lock for a while: the next acquire of
                    // whoever comes first may take the fast path.
                    if (round + i as u64).is_multiple_of(4) {
                        tokio::time::sleep(Duration::from_millis(15)).await;
                    }
                }
            }));
        }
        for t in tasks {
            t.await.expect("worker");
        }
        assert!(zk_children(&zk.connect_string(), "mixed").await.is_empty());
    })
    .await;
}

// ---- Fresh servers (issue 31, point 7): a ZooKeeper that answers `ruok` accepts
// connections but closes new sessions for a moment while it starts.

/// A server that closes every new session (a proxy in front of it closes each connection as
/// soon as it is accepted, as a ZooKeeper still starting does) is tried again until
/// `connect_timeout`: the connect returns once the server keeps a session, and fails with
/// `Unavailable` only after more than one try. Failed before the fix: the first closed
/// session failed the connect at once (the CLI's "nothing answers", exit 69).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_tries_again_while_the_server_closes_new_sessions() {
    let zk = server();
    let proxy = TcpProxy::start(zk.port()).expect("proxy");
    let url = format!("zk://{}", proxy.connect_string());
    proxy.refuse_new(true);
    let connecting = tokio::spawn({
        let (url, long) = (url.clone(), Duration::from_secs(20));
        async move { Client::connect_with(&url, ClientOptions::default().connect_timeout(long)).await }
    });
    let closed_twice_or_done = || proxy.refused() >= 2 || connecting.is_finished();
    common::eventually(20.0, "two sessions closed", closed_twice_or_done).await;
    assert!(!connecting.is_finished(), "the connect gave up");
    proxy.refuse_new(false);
    let client = within(25.0, "the connect", connecting)
        .await
        .unwrap()
        .expect("a session once the server keeps it");
    let g = client.lock("fresh").acquire().await.unwrap();
    assert_eq!(g.release().await.unwrap(), Released::Released);
    client.close().await.unwrap();

    proxy.refuse_new(true);
    let before = proxy.refused();
    let short = ClientOptions::default().connect_timeout(Duration::from_millis(300));
    match Client::connect_with(&url, short).await {
        Err(Error::Unavailable { .. }) => {}
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("a session where every one is closed"),
    }
    assert!(proxy.refused() >= before + 2, "tried once only");
}

/// A fresh server connected to as soon as it answers `ruok` (as a script waiting for `imok`
/// does): the connect waits until the server serves. Failed before the fix in 2 of 3 starts
/// ("cannot open a session: no available hosts").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_server_is_connected_right_after_ruok() {
    let start = || ZooKeeperServer::builder().start_accepting();
    let zk = tokio::task::spawn_blocking(start)
        .await
        .unwrap()
        .expect("start ZooKeeper");
    // Room for a JVM that loads its data slowly on a busy machine.
    let options = ClientOptions::default().connect_timeout(Duration::from_secs(20));
    let client = Client::connect_with(&zk.url(), options)
        .await
        .expect("a session once the server serves");
    let g = client.lock("fresh").acquire().await.unwrap();
    assert_eq!(g.release().await.unwrap(), Released::Released);
    client.close().await.unwrap();
}

// ---- Elections (issue 25): Curator's LeaderLatch layout, `_c_<uuid>-latch-<seq>` with the
// value as data; the lowest leads, its czxid is the term.

/// The next report of an observer, within 10 s.
async fn next_leader(observer: &mut fencelock::Observer) -> Option<fencelock::Leader> {
    within(10.0, "the observer's next report", observer.changed())
        .await
        .expect("the observer follows")
}

/// A Java `LeaderLatch` and fencelock participants in one election see one leader at a time,
/// both ways: fencelock waits while Java leads and leads once Java closes its latch; Java
/// waits while fencelock leads and leads once fencelock resigns. Each side reads the other's
/// value as the leader's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn curator_leader_latch_interop() {
    let zk = server();
    within(90.0, "LeaderLatch", async {
        let c = client_at(&zk.url(), 10_000).await;
        let peek = Peek::connect(&zk.connect_string()).await;
        let election = c.election("leader");
        let spawn = |id: &str| {
            fencelock_testkit::CuratorLatch::spawn(
                &zk.connect_string(),
                "/fencelock/leader",
                id,
                Duration::from_secs(4),
            )
            .unwrap()
        };
        let java = spawn("java-1");
        let java = tokio::task::spawn_blocking(move || {
            java.wait_leading(Duration::from_secs(30))
                .map(|node| (java, node))
        });
        let (mut java, node) = java.await.unwrap().unwrap();
        assert!(node.contains("/_c_") && node.contains("-latch-"), "{node}");
        let leader = election.leader().await.unwrap().expect("Java leads");
        assert_eq!(leader.value, "java-1", "LeaderLatch stores its id as data");
        assert!(election.try_campaign("rust-1").await.unwrap().is_err());

        let campaign = tokio::spawn({
            let election = election.clone();
            async move { election.campaign("rust-1").await }
        });
        let children = peek.until_count("leader", 2, 10.0).await;
        assert!(children[1].name.contains("-latch-"), "{children:?}");
        assert!(!campaign.is_finished(), "fencelock leads while Java does");
        let java = tokio::task::spawn_blocking(move || java.close().map(|()| java));
        java.await.unwrap().unwrap();
        let leading = within(10.0, "fencelock leads after Java closed", campaign)
            .await
            .unwrap()
            .unwrap();
        assert!(leading.term() > leader.term, "terms grow across leaders");
        let now = election.leader().await.unwrap().unwrap();
        assert_eq!((now.value.as_str(), now.term), ("rust-1", leading.term()));

        let java = spawn("java-2");
        let java = tokio::task::spawn_blocking(move || {
            java.wait_started(Duration::from_secs(30)).map(|_| java)
        });
        let java = java.await.unwrap().unwrap();
        // The latch has made its node and read the folder; give it a moment to act on it.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!java.leading(), "Java leads while fencelock does");
        leading.resign().await.unwrap();
        let java = tokio::task::spawn_blocking(move || {
            java.wait_leading(Duration::from_secs(15)).map(|_| java)
        });
        let mut java = java
            .await
            .unwrap()
            .expect("Java leads after fencelock resigned");
        let leader = election.leader().await.unwrap().unwrap();
        assert_eq!(leader.value, "java-2");
        tokio::task::spawn_blocking(move || java.close())
            .await
            .unwrap()
            .unwrap();
    })
    .await;
}

/// One name cannot be a mutex and an election at once on ZooKeeper (two queues in one folder
/// that would ignore each other): the attempt that finds the other kind ahead fails with
/// `PrimitiveMismatch` naming both, and leaves no node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mutex_and_an_election_of_one_name_refuse_each_other() {
    let zk = server();
    within(60.0, "mixed kinds", async {
        let (a, b) = (
            client_at(&zk.url(), 10_000).await,
            client_at(&zk.url(), 10_000).await,
        );
        let peek = Peek::connect(&zk.connect_string()).await;
        let guard = a.lock("both").acquire().await.unwrap();
        for wait in [false, true] {
            let tried = match wait {
                false => b.election("both").try_campaign("x").await.map(|_| ()),
                true => b.election("both").campaign("x").await.map(|_| ()),
            };
            match tried {
                Err(Error::PrimitiveMismatch { asked, found, .. }) => {
                    assert_eq!(asked, "election");
                    assert!(
                        found.contains("mutex") && found.contains("-lock-"),
                        "{found}"
                    );
                }
                other => panic!("a campaign behind a mutex: {other:?}"),
            }
            assert_eq!(peek.until_count("both", 1, 5.0).await.len(), 1);
        }
        guard.release().await.unwrap();

        let leading = a.election("both").campaign("x").await.unwrap();
        match b.lock("both").acquire_timeout(Duration::from_secs(5)).await {
            Err(Error::PrimitiveMismatch { asked, found, .. }) => {
                assert_eq!(asked, "mutex");
                assert!(
                    found.contains("election") && found.contains("-latch-"),
                    "{found}"
                );
            }
            other => panic!("a mutex behind a leader: {other:?}"),
        }
        peek.until_count("both", 1, 5.0).await;
        leading.resign().await.unwrap();
        // Either kind alone is fine again.
        b.lock("both")
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    })
    .await;
}

/// An observer whose session is cut off fails (it cannot know what it missed) instead of
/// reporting a stale leader for ever; called again once the servers can be reached, it
/// follows anew and reports the leader as it is then, one that came meanwhile, never an
/// older one. A participant that campaigns again and again alone leads with growing terms
/// (the uncontended fast path takes the folder again).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_observer_cut_off_fails_then_follows_anew() {
    let zk = server();
    within(60.0, "observer cut off", async {
        let proxy = TcpProxy::start(zk.port()).unwrap();
        let watching = proxied_client(&proxy, 2_000).await;
        let c = client_at(&zk.url(), 10_000).await;
        let election = c.election("cut");
        let mut term = 0;
        for _ in 0..3 {
            let leading = election.campaign("alone").await.unwrap();
            assert!(leading.term() > term);
            term = leading.term();
            leading.resign().await.unwrap();
        }
        let first = election.campaign("first").await.unwrap();
        let mut observer = watching.election("cut").observe().await.unwrap();
        assert_eq!(next_leader(&mut observer).await.unwrap().term, first.term());
        proxy.refuse_new(true);
        proxy.cut();
        let failed = within(10.0, "the cut-off observer fails", observer.changed()).await;
        assert!(
            matches!(failed, Err(Error::Unavailable { .. })),
            "{failed:?}"
        );
        first.resign().await.unwrap();
        let second = election.campaign("second").await.unwrap();
        proxy.refuse_new(false);
        let seen = within(20.0, "the observer follows anew", async {
            loop {
                match observer.changed().await {
                    Ok(seen) => return seen,
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        })
        .await
        .expect("a leader");
        assert_eq!((seen.value.as_str(), seen.term), ("second", second.term()));
    })
    .await;
}

/// An observer that failed because its session went unheard (cut off, neither heard nor
/// ended) and is called again waits: its new follower waits for the session to be heard,
/// where it used to fail at once, again and again (`Current::live` hands back a session
/// that is unheard but not ended, and the new follower's `unheard` resolved at once), so a
/// caller that follows anew after an error spun without I/O. Once the servers can be
/// reached, it reports the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_observer_called_again_while_unheard_waits() {
    let zk = server();
    within(60.0, "observer called again while unheard", async {
        let proxy = TcpProxy::start(zk.port()).unwrap();
        let watching = proxied_client(&proxy, 2_000).await;
        let c = client_at(&zk.url(), 10_000).await;
        let leading = c.election("unheard").campaign("first").await.unwrap();
        let mut observer = watching.election("unheard").observe().await.unwrap();
        assert_eq!(
            next_leader(&mut observer).await.unwrap().term,
            leading.term()
        );
        proxy.refuse_new(true);
        proxy.cut();
        let failed = within(10.0, "the cut-off observer fails", observer.changed()).await;
        assert!(
            matches!(failed, Err(Error::Unavailable { .. })),
            "{failed:?}"
        );
        let again = tokio::time::timeout(Duration::from_millis(500), observer.changed()).await;
        assert!(
            again.is_err(),
            "failed again at once while unheard: {again:?}"
        );
        proxy.refuse_new(false);
        let seen = within(20.0, "the observer once the server is reached", async {
            loop {
                // The session may have expired meanwhile: that ends the follower once.
                if let Ok(seen) = observer.changed().await {
                    return seen;
                }
            }
        })
        .await
        .expect("a leader");
        assert_eq!(seen.term, leading.term());
    })
    .await;
}

/// A Java `LeaderLatch` that leads and is killed (SIGKILL): once the server expires its
/// session (2 s), the waiting fencelock participant leads, and an observer sees the handover
/// from Java's participant id to fencelock's value, with a larger term.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_leader_latch_hands_leadership_on() {
    let zk = server();
    within(60.0, "a killed LeaderLatch", async {
        let c = client_at(&zk.url(), 10_000).await;
        let mut observer = c.election("killed").observe().await.unwrap();
        assert_eq!(next_leader(&mut observer).await, None);
        let java = fencelock_testkit::CuratorLatch::spawn(
            &zk.connect_string(),
            "/fencelock/killed",
            "java-killed",
            Duration::from_secs(2),
        )
        .unwrap();
        let java = tokio::task::spawn_blocking(move || {
            java.wait_leading(Duration::from_secs(30)).map(|_| java)
        });
        let mut java = java.await.unwrap().unwrap();
        let theirs = next_leader(&mut observer).await.unwrap();
        assert_eq!(theirs.value, "java-killed");
        let waiting = tokio::spawn({
            let election = c.election("killed");
            async move { election.campaign("rust").await }
        });
        Peek::connect(&zk.connect_string())
            .await
            .until_count("killed", 2, 10.0)
            .await;
        java.kill();
        let leading = within(15.0, "fencelock leads once Java's session expired", waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(leading.term() > theirs.term);
        let seen = next_leader(&mut observer).await.unwrap();
        assert_eq!((seen.value.as_str(), seen.term), ("rust", leading.term()));
        leading.resign().await.unwrap();
    })
    .await;
}

// ---- Read-write locks (issue 24): Curator's `InterProcessReadWriteLock` layout,
// `_c_<uuid>-__READ__<seq>` and `_c_<uuid>-__WRIT__<seq>` in one folder, one queue.

/// Curator's `InterProcessReadWriteLock` and fencelock's exclude each other both ways: a
/// Java writer keeps fencelock's readers and writers out; a fencelock writer keeps a Java
/// reader out; Java and fencelock readers share.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rw_curator_interop() {
    let zk = server();
    within(120.0, "curator rw", async {
        let c = client_at(&zk.url(), 10_000).await;
        let spawn = |kind: &str| {
            CuratorLock::builder(&zk.connect_string(), "/fencelock/rw-java")
                .kind(kind)
                .session_timeout(Duration::from_secs(10))
                .spawn()
                .unwrap()
        };
        let acquired = |java: CuratorLock, secs: u64| {
            tokio::task::spawn_blocking(move || {
                let node = java.wait_acquired(Duration::from_secs(secs));
                (java, node)
            })
        };
        let release = |mut java: CuratorLock| tokio::task::spawn_blocking(move || java.release());
        // A Java writer: fencelock's readers and writers wait.
        let (writer, node) = acquired(spawn("write"), 30).await.unwrap();
        assert!(node.unwrap().contains("-__WRIT__"));
        assert!(common::busy(&c, "rw-java", false).await);
        assert!(common::busy(&c, "rw-java", true).await);
        let reading = tokio::spawn({
            let rw = c.rw_lock("rw-java");
            async move { rw.read().acquire().await }
        });
        common::until_queue(&c, "rw-java", 1, 1).await;
        release(writer).await.unwrap().unwrap();
        let reading = within(10.0, "fencelock reads after Java", reading)
            .await
            .unwrap()
            .unwrap();
        // Java and fencelock readers share.
        let (reader, node) = acquired(spawn("read"), 30).await.unwrap();
        assert!(node.unwrap().contains("-__READ__"));
        common::until_queue(&c, "rw-java", 2, 0).await;
        // A Java writer waits for both readers.
        let writer = spawn("write");
        common::until_queue(&c, "rw-java", 2, 1).await;
        assert!(writer.acquired().is_none());
        release(reader).await.unwrap().unwrap();
        common::until_queue(&c, "rw-java", 1, 1).await;
        assert!(
            writer.acquired().is_none(),
            "Java wrote beside a fencelock reader"
        );
        reading.release().await.unwrap();
        let (writer, node) = acquired(writer, 15).await.unwrap();
        node.expect("Java writes after the readers");
        release(writer).await.unwrap().unwrap();
        // A fencelock writer: a Java reader waits.
        let writing = c.rw_lock("rw-java").write().acquire().await.unwrap();
        let reader = spawn("read");
        common::until_queue(&c, "rw-java", 1, 1).await;
        assert!(
            reader.acquired().is_none(),
            "Java read beside a fencelock writer"
        );
        writing.release().await.unwrap();
        let (reader, node) = acquired(reader, 15).await.unwrap();
        node.expect("Java reads after fencelock's writer");
        release(reader).await.unwrap().unwrap();
    })
    .await;
}

// ---- Semaphores (issue 24): Curator's `InterProcessSemaphoreV2` layout, `locks/` (its
// mutex) and `leases/` (`_c_<uuid>-lease-<seq>`), N as the folder's data.

/// Curator's `InterProcessSemaphoreV2` of 2 and fencelock permits of the same semaphore
/// never hold more than 2 together, and hand permits to each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn semaphore_curator_interop() {
    let zk = server();
    within(120.0, "curator semaphore", async {
        let c = client_at(&zk.url(), 10_000).await;
        let spawn = || {
            CuratorLock::builder(&zk.connect_string(), "/fencelock/sem-java")
                .kind("semaphore:2")
                .session_timeout(Duration::from_secs(10))
                .spawn()
                .unwrap()
        };
        let acquired = |java: CuratorLock, secs: u64| {
            tokio::task::spawn_blocking(move || {
                let node = java.wait_acquired(Duration::from_secs(secs));
                (java, node)
            })
        };
        let release = |mut java: CuratorLock| tokio::task::spawn_blocking(move || java.release());
        // One Java lease and one fencelock permit: the semaphore is full for both.
        let (java, node) = acquired(spawn(), 30).await.unwrap();
        assert!(node.unwrap().contains("/leases/_c_"));
        let mine = c.semaphore("sem-java", 2).acquire().await.unwrap();
        assert!(common::no_permit(&c, "sem-java", 2).await);
        let java2 = spawn();
        java2
            .wait_line("CONNECTED", Duration::from_secs(30))
            .unwrap();
        common::until_queue(&c, "sem-java", 2, 1).await;
        assert!(java2.acquired().is_none(), "a third lease of two");
        // fencelock's release hands its permit to the Java waiter.
        mine.release().await.unwrap();
        let (java2, node) = acquired(java2, 15).await.unwrap();
        node.expect("Java takes the permit fencelock gave back");
        // Two Java leases: a fencelock permit waits for one of them.
        let waiting = tokio::spawn({
            let semaphore = c.semaphore("sem-java", 2);
            async move { semaphore.acquire().await }
        });
        common::until_queue(&c, "sem-java", 2, 1).await;
        assert!(!waiting.is_finished(), "a third permit of two");
        release(java).await.unwrap().unwrap();
        within(15.0, "fencelock takes the permit Java gave back", waiting)
            .await
            .unwrap()
            .unwrap()
            .release()
            .await
            .unwrap();
        release(java2).await.unwrap().unwrap();
    })
    .await;
}
