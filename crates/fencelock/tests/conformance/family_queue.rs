//! The read-write lock's and the semaphore's queue as a client's `status` shows it, on every
//! deployment that offers them (issue 31, point 8: written once here, where the ZooKeeper and
//! etcd test files each had a copy): readers behind a writer hold together, a downgrade keeps
//! later writers out, a holder whose client dies ends alone, a paused server loses every
//! reader and permit, another N is refused unless resized, a raised N wakes a waiter, and a
//! name is one primitive. A deployment that does not offer a primitive skips its behaviours
//! here (`family.rs` checks the refusal). Every wait is bounded; a waiter's place is awaited
//! through `status`, never slept for.

use std::time::Duration;

use fencelock::{Client, Error, Guard, Released};
use tokio::task::JoinHandle;

use super::common::{busy, no_permit, until_listed, until_queue};
use super::{connect, lease, within, Deployment, Paused, Proxied};

/// Two clients with long leases.
async fn two(d: &dyn Deployment) -> (Client, Client) {
    (
        connect(d, lease(10_000)).await,
        connect(d, lease(10_000)).await,
    )
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

/// Takes a permit of semaphore `name` of `n` in a task of its own.
fn permit(client: &Client, name: &str, n: u32) -> JoinHandle<fencelock::Result<Guard>> {
    let semaphore = client.semaphore(name, n);
    tokio::spawn(async move { semaphore.acquire().await })
}

async fn got(what: &str, waiting: JoinHandle<fencelock::Result<Guard>>) -> Guard {
    within(10.0, what, waiting).await.unwrap().unwrap()
}

/// Readers of two clients hold together; a writer queues behind them, and a reader that
/// comes after the writer waits for it (no writer starves); when the readers leave, the
/// writer holds alone; when it leaves, the readers queued behind it hold together (not one
/// after another). Tokens grow with each holding; `status` lists every holder and the
/// waiters in order.
pub(super) async fn readers_behind_a_writer_hold_together(d: &dyn Deployment) {
    if !d.caps().rw_lock {
        return;
    }
    // A client each: a Redis client queues its own waiters on one lock in the client, one at
    // a time on the server, where `status` would not list them all.
    let ((a, b), (c, e), name) = (two(d).await, two(d).await, "rw-order");
    let r1 = a.rw_lock(name).read().acquire().await.unwrap();
    let r2 = within(5.0, "a second reader", b.rw_lock(name).read().acquire())
        .await
        .unwrap();
    until_queue(&a, name, 2, 0).await;
    let writer = acquiring(&b, name, true);
    until_queue(&a, name, 2, 1).await;
    assert!(
        busy(&a, name, false).await,
        "a reader got ahead of a waiting writer"
    );
    let late1 = acquiring(&c, name, false);
    until_queue(&a, name, 2, 2).await;
    let late2 = acquiring(&e, name, false);
    until_queue(&a, name, 2, 3).await;
    let readers = r1.fencing_token().max(r2.fencing_token());
    r1.release().await.unwrap();
    until_queue(&a, name, 1, 3).await;
    assert!(!writer.is_finished(), "the writer beside a reader");
    r2.release().await.unwrap();
    let w = got("the writer after the readers", writer).await;
    assert!(w.fencing_token() > readers, "the writer's token");
    until_queue(&a, name, 1, 2).await;
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
    until_queue(&a, name, 2, 0).await;
    l1.release().await.unwrap();
    l2.release().await.unwrap();
    until_queue(&a, name, 0, 0).await;
    assert_eq!(d.entries(name).await, []);
}

/// Both sides re-enter; the writer takes the read side at once (a downgrade) and keeps it
/// when it gives the write side back, so another client's writer still waits
/// (CURATOR-621); another client's reader joins it where [`super::Caps::downgrade_shares`];
/// an owner holding only the read side is refused the write side at once (`UpgradeRefused`),
/// waiting or not, and a writer queued meanwhile holds after the re-entered reader.
pub(super) async fn a_downgrade_keeps_later_writers_out(d: &dyn Deployment) {
    if !d.caps().rw_lock {
        return;
    }
    let ((a, b), name) = (two(d).await, "rw-down");
    let readers_join = d.caps().downgrade_shares;
    let rw = a.rw_lock(name);
    let w1 = rw.write().acquire().await.unwrap();
    let w2 = within(5.0, "write re-entry", rw.write().acquire())
        .await
        .unwrap();
    assert_eq!(w2.hold_count(), 2);
    let r = within(5.0, "a downgrade holds at once", rw.read().acquire())
        .await
        .unwrap();
    assert!(busy(&b, name, false).await, "a reader beside a writer");
    assert!(busy(&b, name, true).await, "a writer beside a writer");
    // Redis counts the read hold in the owner's holding, ZooKeeper and etcd keep it apart.
    let released = w1.release().await.unwrap();
    assert!(
        matches!(released, Released::StillHeld { .. }),
        "{released:?}"
    );
    let released = w2.release().await.unwrap();
    assert!(
        matches!(
            released,
            Released::Released | Released::StillHeld { count: 1 }
        ),
        "{released:?}"
    );
    assert!(
        r.is_held(),
        "the downgraded read side went with the write side"
    );
    assert_eq!(
        busy(&b, name, false).await,
        !readers_join,
        "a reader beside a downgraded reader"
    );
    assert!(
        busy(&b, name, true).await,
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
    let writer = acquiring(&b, name, true);
    until_queue(&a, name, 1, 1).await;
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
    assert_eq!(d.entries(name).await, []);
}

/// A client that dies (cut off from the servers through a proxy, never back: its session or
/// lease ends on the servers, as a killed process's does), where a proxy can cut one: a
/// reader's holding of it ends alone (the other reader keeps its holding, and a writer holds
/// only once that one leaves too), and a permit of it comes back to the waiter.
pub(super) async fn a_dead_clients_reader_and_permit_end_alone(d: &dyn Deployment) {
    let caps = d.caps();
    if !caps.rw_lock && !caps.semaphore {
        return;
    }
    let Some(Proxied { proxy, url }) = d.proxied() else {
        return;
    };
    let dying = Client::connect_with(&url, lease(2_000)).await.unwrap();
    let ((live, other), (rw, sem)) = (two(d).await, ("rw-killed", "sem-killed"));
    let reading = match caps.rw_lock {
        true => Some(dying.rw_lock(rw).read().acquire().await.unwrap()),
        false => None,
    };
    let holding = match caps.semaphore {
        true => Some(dying.semaphore(sem, 1).acquire().await.unwrap()),
        false => None,
    };
    let mine = match caps.rw_lock {
        true => Some(live.rw_lock(rw).read().acquire().await.unwrap()),
        false => None,
    };
    let writer = caps.rw_lock.then(|| acquiring(&other, rw, true));
    let waiter = caps.semaphore.then(|| permit(&live, sem, 1));
    if caps.rw_lock {
        until_queue(&live, rw, 2, 1).await;
    }
    if caps.semaphore {
        until_queue(&live, sem, 1, 1).await;
    }
    proxy.refuse_new(true);
    assert!(proxy.cut() >= 1);
    if let Some(waiter) = waiter {
        let back = within(20.0, "the dead holder's permit comes back", waiter).await;
        back.unwrap().unwrap().release().await.unwrap();
    }
    if let (Some(mine), Some(writer)) = (mine, writer) {
        let ends = until_queue(&live, rw, 1, 1);
        within(20.0, "the dead reader's holding ends", ends).await;
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
    drop((reading, holding));
    proxy.refuse_new(false);
}

/// One name, one primitive: a read-write lock's side asked for where a mutex holds, a mutex
/// or an election where a reader holds, and a semaphore against a mutex and a read-write
/// lock, both ways: each fails with `PrimitiveMismatch` naming both.
pub(super) async fn the_family_refuses_other_kinds_by_name(d: &dyn Deployment) {
    let caps = d.caps();
    let (a, b) = two(d).await;
    if caps.rw_lock {
        a_read_write_lock_is_one_primitive(&a, &b, "rw-kind", caps.election).await;
    }
    if caps.rw_lock && caps.semaphore {
        a_semaphore_is_one_primitive(&a, &b, "sem-kind").await;
    }
}

async fn a_read_write_lock_is_one_primitive(a: &Client, b: &Client, name: &str, election: bool) {
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
    if election {
        match b.election(name).try_campaign("x").await.map(drop) {
            Err(Error::PrimitiveMismatch { asked, found, .. }) => {
                assert_eq!(asked, "election");
                assert!(found.contains("read-write lock"), "{found}");
            }
            other => panic!("an election behind a reader: {other:?}"),
        }
    }
    reading.release().await.unwrap();
    until_queue(a, name, 0, 0).await;
}

async fn a_semaphore_is_one_primitive(a: &Client, b: &Client, name: &str) {
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

/// N permits at most, each a holding of its own (its token, its release); waiters of two
/// clients are served in arrival order, as `status` lists them; a release gives back its
/// own permit only; any permit given back lets a waiter hold, not only the oldest one.
pub(super) async fn permits_go_in_arrival_order_on_any_release(d: &dyn Deployment) {
    if !d.caps().semaphore {
        return;
    }
    let ((a, b), name) = (two(d).await, "sem-order");
    let p1 = a.semaphore(name, 2).acquire().await.unwrap();
    let p2 = within(5.0, "a second permit", b.semaphore(name, 2).acquire())
        .await
        .unwrap();
    assert_ne!(p1.fencing_token(), p2.fencing_token());
    until_queue(&a, name, 2, 0).await;
    assert!(no_permit(&b, name, 2).await, "a third permit of two");
    let w1 = permit(&a, name, 2);
    until_queue(&a, name, 2, 1).await;
    let w2 = permit(&b, name, 2);
    until_queue(&a, name, 2, 2).await;
    p1.release().await.unwrap();
    let g1 = got("the first waiter", w1).await;
    assert!(p2.is_held(), "a release gave back another's permit");
    until_queue(&a, name, 2, 1).await;
    assert!(!w2.is_finished(), "a third permit of two");
    assert!(g1.fencing_token() > p2.fencing_token());
    // The newer holder (g1) gives back: the waiter holds while the older (p2) still does.
    g1.release().await.unwrap();
    let g2 = got("the second waiter, after the newer holder's release", w2).await;
    assert!(p2.is_held() && g2.is_held());
    p2.release().await.unwrap();
    g2.release().await.unwrap();
    until_queue(&a, name, 0, 0).await;
}

/// N is stored with the semaphore: another N is refused (`PermitsMismatch`) unless it
/// resizes; lowering N revokes nothing, and a waiter holds once fewer than the new N hold;
/// the old N is refused after the resize while a permit is held.
pub(super) async fn another_n_is_refused_unless_resized(d: &dyn Deployment) {
    if !d.caps().semaphore {
        return;
    }
    let ((a, b), name) = (two(d).await, "sem-n");
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
    let lowered = b.semaphore(name, 1).resize().try_acquire().await.unwrap();
    assert!(lowered.is_err());
    assert!(p1.is_held() && p2.is_held(), "lowering N revoked a permit");
    assert!(no_permit(&b, name, 1).await);
    let waiter = permit(&b, name, 1);
    // (etcd's status counts the first N as holders, not those granted under an older N.)
    until_listed(&a, name, 3).await;
    p1.release().await.unwrap();
    until_listed(&a, name, 2).await;
    assert!(no_permit(&a, name, 1).await, "a permit beside the one left");
    assert!(!waiter.is_finished(), "two permits of one");
    p2.release().await.unwrap();
    let last = got("the waiter under the new N", waiter).await;
    // While a permit is held (N goes with the semaphore's last entry).
    match a.semaphore(name, 2).try_acquire().await.map(drop) {
        Err(Error::PermitsMismatch { stored: 1, .. }) => {}
        other => panic!("the old N after a resize: {other:?}"),
    }
    last.release().await.unwrap();
}

/// A raised N lets a waiter hold at once: with one permit of one held and a waiter, another
/// attempt raises N to 3 and holds; the waiter holds too, without any release (it must be
/// woken by the resize, not by a release).
pub(super) async fn a_raised_n_wakes_a_waiter(d: &dyn Deployment) {
    if !d.caps().semaphore {
        return;
    }
    let ((a, b), name) = (two(d).await, "sem-raised");
    let held = a.semaphore(name, 1).acquire().await.unwrap();
    let waiting = permit(&b, name, 1);
    until_listed(&a, name, 2).await;
    let raised = a.semaphore(name, 3).resize();
    let third = within(5.0, "a permit of three", raised.acquire()).await;
    let third = third.unwrap();
    let got = within(5.0, "the waiter under the raised N", waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(held.is_held() && third.is_held() && got.is_held());
    for guard in [held, third, got] {
        guard.release().await.unwrap();
    }
}

/// A paused server (SIGSTOP) where the deployment can be paused for longer than a lease:
/// every reader's and every permit's holding is told lost (`lost()`) once the session or
/// lease may have ended, each on its own; once the servers run again, the client takes both
/// primitives anew.
pub(super) async fn a_paused_server_loses_readers_and_permits(d: &dyn Deployment) {
    let caps = d.caps();
    if !(caps.long_pause && caps.rw_lock && caps.semaphore) {
        return;
    }
    let client = connect(d, lease(2_000)).await;
    let r1 = client.rw_lock("rw-paused").read().acquire().await.unwrap();
    let r2 = client.rw_lock("rw-paused").read().acquire().await.unwrap();
    let p = client.semaphore("sem-paused", 2).acquire().await.unwrap();
    assert_ne!(r1.fencing_token(), r2.fencing_token());
    {
        let _paused = Paused::new(d);
        within(20.0, "every holding told lost", async {
            r1.lost().await;
            r2.lost().await;
            p.lost().await;
        })
        .await;
    }
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
