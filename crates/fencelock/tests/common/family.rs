//! The read-write lock's behaviours (issue 24), written once and run on each session
//! service's real servers (ZooKeeper and etcd in their own test files). Every wait is
//! bounded; a waiter's place is awaited through `status`, never slept for.

use std::time::Duration;

use fencelock::{Client, Error, Guard, Released};
use tokio::task::JoinHandle;

use super::within;

/// Waits until lock `name` shows `holders` holders and `waiters` waiters (bounded).
pub async fn until_queue(client: &Client, name: &str, holders: usize, waiters: usize) {
    let what = format!("{name}: {holders} holders and {waiters} waiters");
    within(10.0, &what, async {
        loop {
            let status = client.status(name).await.unwrap();
            if status.owners.len() == holders && status.waiters.len() == waiters {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// Waits until lock `name` shows `n` holders and waiters together (bounded).
pub async fn until_entries(client: &Client, name: &str, n: usize) {
    within(10.0, &format!("{name}: {n} entries"), async {
        loop {
            let status = client.status(name).await.unwrap();
            if status.owners.len() + status.waiters.len() == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// Whether a side of the read-write lock is busy for a new owner of `client` right now.
pub async fn busy(client: &Client, name: &str, write: bool) -> bool {
    let rw = client.rw_lock(name);
    let side = if write { rw.write() } else { rw.read() };
    match side.try_acquire().await.unwrap() {
        Ok(guard) => {
            guard.release().await.unwrap();
            false
        }
        Err(_) => true,
    }
}

fn acquiring(client: &Client, name: &str, write: bool) -> JoinHandle<fencelock::Result<Guard>> {
    let rw = client.rw_lock(name);
    tokio::spawn(async move {
        match write {
            true => rw.write().acquire().await,
            false => rw.read().acquire().await,
        }
    })
}

async fn got(what: &str, waiting: JoinHandle<fencelock::Result<Guard>>) -> Guard {
    within(10.0, what, waiting).await.unwrap().unwrap()
}

/// Readers of two clients hold together; a writer queues behind them, and a reader that
/// comes after the writer waits for it (no writer starves); when the readers leave, the
/// writer holds alone; when it leaves, the readers queued behind it hold together (not one
/// after another). Tokens grow with each holding; `status` lists every holder and the
/// waiters in order.
pub async fn readers_share_and_writers_wait_in_arrival_order(a: &Client, b: &Client, name: &str) {
    let r1 = a.rw_lock(name).read().acquire().await.unwrap();
    let r2 = within(5.0, "a second reader", b.rw_lock(name).read().acquire())
        .await
        .unwrap();
    until_queue(a, name, 2, 0).await;
    let writer = acquiring(b, name, true);
    until_queue(a, name, 2, 1).await;
    assert!(
        busy(a, name, false).await,
        "a reader got ahead of a waiting writer"
    );
    let late1 = acquiring(a, name, false);
    until_queue(a, name, 2, 2).await;
    let late2 = acquiring(b, name, false);
    until_queue(a, name, 2, 3).await;
    let readers = r1.fencing_token().max(r2.fencing_token());
    r1.release().await.unwrap();
    until_queue(a, name, 1, 3).await;
    assert!(!writer.is_finished(), "the writer beside a reader");
    r2.release().await.unwrap();
    let w = got("the writer after the readers", writer).await;
    assert!(w.fencing_token() > readers, "the writer's token");
    until_queue(a, name, 1, 2).await;
    assert!(
        !late1.is_finished() && !late2.is_finished(),
        "a reader beside the writer"
    );
    let status = a.status(name).await.unwrap();
    assert_eq!(status.owners.len(), 1);
    assert_eq!(status.owners[0].0, w.owner());
    let written = w.fencing_token();
    w.release().await.unwrap();
    let (l1, l2) = (
        got("late reader 1", late1).await,
        got("late reader 2", late2).await,
    );
    assert!(l1.fencing_token() > written && l2.fencing_token() > written);
    until_queue(a, name, 2, 0).await;
    l1.release().await.unwrap();
    l2.release().await.unwrap();
    until_queue(a, name, 0, 0).await;
}

/// Both sides re-enter; the writer takes the read side at once (a downgrade) and keeps it
/// when it gives the write side back, so another client's writer still waits; another
/// client's reader joins it where `readers_join` (ZooKeeper puts the read node at the write
/// node's place; etcd keeps the write key, so readers wait too); an owner holding only the
/// read side is refused the write side at once (`UpgradeRefused`).
pub async fn reentry_downgrade_and_refused_upgrade(
    a: &Client,
    b: &Client,
    name: &str,
    readers_join: bool,
) {
    let rw = a.rw_lock(name);
    let w1 = rw.write().acquire().await.unwrap();
    let w2 = within(5.0, "write re-entry", rw.write().acquire())
        .await
        .unwrap();
    assert_eq!(w2.hold_count(), 2);
    let r = within(5.0, "a downgrade holds at once", rw.read().acquire())
        .await
        .unwrap();
    assert!(busy(b, name, false).await, "a reader beside a writer");
    assert!(busy(b, name, true).await, "a writer beside a writer");
    assert_eq!(
        w1.release().await.unwrap(),
        Released::StillHeld { count: 1 }
    );
    assert_eq!(w2.release().await.unwrap(), Released::Released);
    assert!(
        r.is_held(),
        "the downgraded read side went with the write side"
    );
    assert_eq!(
        busy(b, name, false).await,
        !readers_join,
        "a reader beside a downgraded reader"
    );
    assert!(
        busy(b, name, true).await,
        "a writer got in after a downgrade (CURATOR-621)"
    );
    let r2 = within(5.0, "read re-entry", rw.read().acquire())
        .await
        .unwrap();
    assert_eq!(r2.hold_count(), 2);
    for upgrade in [
        within(5.0, "an upgrade", rw.write().acquire())
            .await
            .map(drop),
        rw.write().try_acquire().await.map(drop),
    ] {
        match upgrade {
            Err(Error::UpgradeRefused { lock, owner }) => {
                assert_eq!((lock.as_str(), owner.as_str()), (name, rw.owner()));
            }
            other => panic!("an upgrade: {other:?}"),
        }
    }
    let writer = acquiring(b, name, true);
    until_queue(a, name, 1, 1).await;
    r.release().await.unwrap();
    assert!(
        !writer.is_finished(),
        "the writer beside a re-entered reader"
    );
    r2.release().await.unwrap();
    got("the writer after the downgraded reader", writer)
        .await
        .release()
        .await
        .unwrap();
}

/// A reader's holding lost with its client's session ends alone: the other reader keeps
/// its holding (and its `lost()` stays quiet), and the writer holds only once that one
/// leaves too. `kill` ends the dying reader's client (the caller's SIGKILL of a process),
/// returning once it is gone.
pub async fn a_dead_readers_holding_ends_alone(
    live: &Client,
    writer_client: &Client,
    name: &str,
    kill: impl std::future::Future<Output = ()>,
) {
    until_queue(live, name, 1, 0).await;
    let mine = live.rw_lock(name).read().acquire().await.unwrap();
    until_queue(live, name, 2, 0).await;
    let writer = acquiring(writer_client, name, true);
    until_queue(live, name, 2, 1).await;
    kill.await;
    within(
        20.0,
        "the dead reader's holding ends",
        until_queue(live, name, 1, 1),
    )
    .await;
    assert!(
        mine.is_held(),
        "the live reader's holding ended with the dead one's"
    );
    assert!(!writer.is_finished(), "the writer beside a live reader");
    mine.release().await.unwrap();
    got("the writer after the live reader", writer)
        .await
        .release()
        .await
        .unwrap();
}

/// One name, one primitive: a read-write lock's side asked for where a mutex or an
/// election holds (and the other way) fails with `PrimitiveMismatch` naming both.
pub async fn a_name_is_one_primitive(a: &Client, b: &Client, name: &str) {
    let mutex = a.lock(name).acquire().await.unwrap();
    for write in [false, true] {
        let rw = b.rw_lock(name);
        let side = if write { rw.write() } else { rw.read() };
        match side.acquire_timeout(Duration::from_secs(5)).await {
            Err(Error::PrimitiveMismatch { asked, found, .. }) => {
                assert_eq!(asked, "read-write lock");
                assert!(found.contains("mutex"), "{found}");
            }
            other => panic!("a read-write lock behind a mutex: {other:?}"),
        }
    }
    mutex.release().await.unwrap();
    let reading = a.rw_lock(name).read().acquire().await.unwrap();
    match b.lock(name).acquire_timeout(Duration::from_secs(5)).await {
        Err(Error::PrimitiveMismatch { asked, found, .. }) => {
            assert_eq!(asked, "mutex");
            assert!(found.contains("read-write lock"), "{found}");
        }
        other => panic!("a mutex behind a reader: {other:?}"),
    }
    match b.election(name).try_campaign("x").await.map(drop) {
        Err(Error::PrimitiveMismatch { asked, found, .. }) => {
            assert_eq!(asked, "election");
            assert!(found.contains("read-write lock"), "{found}");
        }
        other => panic!("an election behind a reader: {other:?}"),
    }
    reading.release().await.unwrap();
    until_queue(a, name, 0, 0).await;
}

/// Takes a permit of semaphore `name` of `n` in a task of its own.
fn permit(client: &Client, name: &str, n: u32) -> JoinHandle<fencelock::Result<Guard>> {
    let semaphore = client.semaphore(name, n);
    tokio::spawn(async move { semaphore.acquire().await })
}

/// Whether semaphore `name` of `n` has no permit free for `client` right now.
pub async fn no_permit(client: &Client, name: &str, n: u32) -> bool {
    match client.semaphore(name, n).try_acquire().await.unwrap() {
        Ok(guard) => {
            guard.release().await.unwrap();
            false
        }
        Err(_) => true,
    }
}

/// N permits at most, each a holding of its own (its token, its release); waiters of two
/// clients are served in arrival order; a release gives back its own permit only.
pub async fn permits_never_exceed_n_and_go_in_arrival_order(a: &Client, b: &Client, name: &str) {
    let p1 = a.semaphore(name, 2).acquire().await.unwrap();
    let p2 = within(5.0, "a second permit", b.semaphore(name, 2).acquire())
        .await
        .unwrap();
    assert_ne!(p1.fencing_token(), p2.fencing_token());
    until_queue(a, name, 2, 0).await;
    assert!(no_permit(b, name, 2).await, "a third permit of two");
    let w1 = permit(a, name, 2);
    until_queue(a, name, 2, 1).await;
    let w2 = permit(b, name, 2);
    until_queue(a, name, 2, 2).await;
    p1.release().await.unwrap();
    let g1 = got("the first waiter", w1).await;
    assert!(p2.is_held(), "a release gave back another's permit");
    until_queue(a, name, 2, 1).await;
    assert!(!w2.is_finished(), "a third permit of two");
    assert!(g1.fencing_token() > p2.fencing_token());
    p2.release().await.unwrap();
    let g2 = got("the second waiter", w2).await;
    assert!(g1.is_held() && g2.is_held());
    g1.release().await.unwrap();
    g2.release().await.unwrap();
    until_queue(a, name, 0, 0).await;
}

/// N is stored with the semaphore: another N is refused (`PermitsMismatch`) unless it
/// resizes; lowering N revokes nothing, and a waiter holds once fewer than the new N hold.
pub async fn another_n_is_refused_unless_resized(a: &Client, b: &Client, name: &str) {
    let p1 = a.semaphore(name, 2).acquire().await.unwrap();
    let p2 = a.semaphore(name, 2).acquire().await.unwrap();
    match b.semaphore(name, 3).try_acquire().await.map(drop) {
        Err(Error::PermitsMismatch {
            lock,
            stored,
            asked,
        }) => assert_eq!((lock.as_str(), stored, asked), (name, 2, 3)),
        other => panic!("another N: {other:?}"),
    }
    // Lowered to 1 with two held: both stay, and nobody else gets one.
    assert!(b
        .semaphore(name, 1)
        .resize()
        .try_acquire()
        .await
        .unwrap()
        .is_err());
    assert!(p1.is_held() && p2.is_held(), "lowering N revoked a permit");
    assert!(no_permit(b, name, 1).await);
    let waiter = permit(b, name, 1);
    // (etcd's status counts the first N as holders, not those granted under an older N.)
    until_entries(a, name, 3).await;
    p1.release().await.unwrap();
    until_entries(a, name, 2).await;
    assert!(no_permit(a, name, 1).await, "a permit beside the one left");
    assert!(!waiter.is_finished(), "two permits of one");
    p2.release().await.unwrap();
    got("the waiter under the new N", waiter)
        .await
        .release()
        .await
        .unwrap();
    // N goes with the last permit: the conformance suite's
    // `a_semaphores_n_lives_as_long_as_its_entries`.
}

/// A permit's holding lost with its client's session or lease (`kill` ends it) comes back:
/// the waiter holds it.
pub async fn a_dead_holders_permit_comes_back(
    live: &Client,
    name: &str,
    kill: impl std::future::Future<Output = ()>,
) {
    until_queue(live, name, 1, 0).await;
    let waiter = permit(live, name, 1);
    until_queue(live, name, 1, 1).await;
    kill.await;
    within(20.0, "the dead holder's permit comes back", waiter)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// One name, one primitive: a semaphore against a mutex and a read-write lock, both ways.
pub async fn a_semaphore_is_one_primitive(a: &Client, b: &Client, name: &str) {
    let mutex = a.lock(name).acquire().await.unwrap();
    match b.semaphore(name, 1).try_acquire().await.map(drop) {
        Err(Error::PrimitiveMismatch { asked, found, .. }) => {
            assert_eq!(asked, "semaphore");
            assert!(found.contains("mutex"), "{found}");
        }
        other => panic!("a semaphore beside a mutex: {other:?}"),
    }
    mutex.release().await.unwrap();
    let held = b.semaphore(name, 1).acquire().await.unwrap();
    match a.lock(name).acquire_timeout(Duration::from_secs(5)).await {
        Err(Error::PrimitiveMismatch { asked, found, .. }) => {
            assert_eq!(asked, "mutex");
            assert!(found.contains("semaphore"), "{found}");
        }
        other => panic!("a mutex beside a semaphore: {other:?}"),
    }
    match a.rw_lock(name).write().try_acquire().await.map(drop) {
        Err(Error::PrimitiveMismatch { asked, found, .. }) => {
            assert_eq!(asked, "read-write lock");
            assert!(found.contains("semaphore"), "{found}");
        }
        other => panic!("a read-write lock beside a semaphore: {other:?}"),
    }
    held.release().await.unwrap();
}

/// A paused server (SIGSTOP): every reader's and every permit's holding is told lost
/// (`lost()`) once the session or lease may have ended, each on its own; once the server
/// runs again, the client takes both primitives anew.
pub async fn a_paused_server_loses_readers_and_permits(
    client: &Client,
    pause: impl FnOnce(),
    resume: impl FnOnce(),
) {
    let r1 = client.rw_lock("rw-paused").read().acquire().await.unwrap();
    let r2 = client.rw_lock("rw-paused").read().acquire().await.unwrap();
    let p = client.semaphore("sem-paused", 2).acquire().await.unwrap();
    assert_ne!(r1.fencing_token(), r2.fencing_token());
    pause();
    within(20.0, "every holding told lost", async {
        r1.lost().await;
        r2.lost().await;
        p.lost().await;
    })
    .await;
    resume();
    within(30.0, "read and permit again", async {
        loop {
            let read = client.rw_lock("rw-paused").read().acquire().await;
            let permit = client.semaphore("sem-paused", 2).acquire().await;
            if let (Ok(read), Ok(permit)) = (read, permit) {
                read.release().await.unwrap();
                permit.release().await.unwrap();
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
}

/// Any permit given back lets a waiter hold, not only the oldest one: N=2, the newer of two
/// holders releases, the waiter holds while the older still does.
pub async fn any_release_lets_a_waiter_hold(a: &Client, b: &Client, name: &str) {
    let older = a.semaphore(name, 2).acquire().await.unwrap();
    let newer = b.semaphore(name, 2).acquire().await.unwrap();
    let waiter = permit(a, name, 2);
    until_queue(a, name, 2, 1).await;
    newer.release().await.unwrap();
    let got = got("the waiter after the newer holder's release", waiter).await;
    assert!(older.is_held());
    older.release().await.unwrap();
    got.release().await.unwrap();
}
