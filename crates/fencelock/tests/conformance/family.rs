//! Read-write locks and semaphores (issue 24, points 1, 2, 7 and 8), on every deployment of
//! the suite: readers share and a writer is alone, in arrival order (no reader passes a
//! waiting writer); re-entry, downgrade, upgrade refused; a semaphore never has more than N
//! holders, serves waiters in arrival order, refuses another N unless resized, and a name is
//! one kind. A deployment that does not offer a primitive ([`Caps::rw_lock`],
//! [`Caps::semaphore`]) refuses it with `Error::Unsupported` before any I/O.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fencelock::{Client, Error, Guard, Released};

use super::{connect, describe, lease, until_entries, until_more_entries, within, Deployment};

/// Five clients with long leases: each participant whose entry a test counts has a client
/// of its own (an etcd client has one key per name).
async fn clients(d: &dyn Deployment) -> [Client; 5] {
    [
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
    ]
}

/// Whether `r` is the typed refusal of a primitive the deployment does not offer.
fn unsupported<T>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::Unsupported { .. }))
}

/// Readers share, a writer waits for them and then holds alone; a reader that comes after a
/// waiting writer waits behind it (arrival order: no reader passes a writer), and holds once
/// the writer lets go. Each holding has its own token, later holdings larger ones.
pub(super) async fn readers_share_and_a_writer_waits_its_turn(d: &dyn Deployment) {
    let [a, b, c, late, _] = clients(d).await;
    if !d.caps().rw_lock {
        let refused = a.rw_lock("rw").read().try_acquire().await;
        assert!(unsupported(&refused), "{}", describe(&refused));
        return;
    }
    let r1 = a.rw_lock("rw").read().acquire().await.unwrap();
    let r2 = b.rw_lock("rw").read().try_acquire().await.unwrap();
    let r2 = r2.expect("a second reader shares the lock");
    assert_ne!(
        r1.fencing_token(),
        r2.fencing_token(),
        "each reader has its token"
    );
    let writer = tokio::spawn({
        let lock = c.rw_lock("rw");
        async move { lock.write().acquire().await }
    });
    until_entries(d, "rw", 3).await;
    let late = late.rw_lock("rw");
    let late_reader = tokio::spawn(async move { late.read().acquire().await });
    until_entries(d, "rw", 4).await;
    assert!(!writer.is_finished() && !late_reader.is_finished());
    assert_eq!(r1.release().await.unwrap(), Released::Released);
    assert!(!writer.is_finished(), "the writer held beside a reader");
    let top = r2.fencing_token();
    assert_eq!(r2.release().await.unwrap(), Released::Released);
    let w = within(10.0, "the writer holds", writer)
        .await
        .unwrap()
        .unwrap();
    assert!(w.fencing_token() > top);
    assert!(!late_reader.is_finished(), "a reader passed the writer");
    let written = w.fencing_token();
    assert_eq!(w.release().await.unwrap(), Released::Released);
    let r3 = within(10.0, "the late reader holds", late_reader)
        .await
        .unwrap()
        .unwrap();
    assert!(r3.fencing_token() > written);
    assert_eq!(r3.release().await.unwrap(), Released::Released);
    assert_eq!(d.entries("rw").await, []);
}

/// Both sides re-enter for their owner; the writer takes the read side at once (downgrade)
/// and keeps it after giving back the write side (where [`Caps::downgrade_shares`], other
/// readers then share it); a reader asking for the write side is
/// refused at once with `UpgradeRefused`, and its read hold stays.
pub(super) async fn rw_reentry_downgrade_and_refused_upgrade(d: &dyn Deployment) {
    let [a, b, ..] = clients(d).await;
    if !d.caps().rw_lock {
        return;
    }
    let lock = a.rw_lock("rw-down");
    let w = lock.write().acquire().await.unwrap();
    let w2 = lock.write().acquire().await.unwrap();
    assert_eq!(w2.hold_count(), 2);
    assert_eq!(
        w2.release().await.unwrap(),
        Released::StillHeld { count: 1 }
    );
    let r = within(5.0, "a downgrade is granted at once", lock.read().acquire())
        .await
        .unwrap();
    // The owner still reads: Redis counts the read hold (`StillHeld`), ZooKeeper and etcd
    // report the write side's holding given back (`Released`).
    let released = w.release().await.unwrap();
    assert!(
        matches!(
            released,
            Released::Released | Released::StillHeld { count: 1 }
        ),
        "{released:?}"
    );
    assert!(r.is_held());
    let other = b.rw_lock("rw-down").read().try_acquire().await.unwrap();
    let other = match (other, d.caps().downgrade_shares) {
        (Ok(other), true) => Some(other),
        (Err(_), false) => None,
        (other, shares) => {
            panic!("after the downgrade, another reader: {other:?} (shares: {shares})")
        }
    };
    let upgrade = within(5.0, "an upgrade is refused at once", lock.write().acquire()).await;
    assert!(
        matches!(upgrade, Err(Error::UpgradeRefused { .. })),
        "{}",
        describe(&upgrade)
    );
    assert!(r.is_held(), "the refused upgrade kept the read hold");
    let r2 = lock.read().acquire().await.unwrap();
    assert_eq!(r2.hold_count(), 2);
    for g in [Some(r2), Some(r), other].into_iter().flatten() {
        g.release().await.unwrap();
    }
    assert_eq!(d.entries("rw-down").await, []);
}

/// A semaphore of three permits: three holders at once, and a fourth attempt is refused; then
/// eight tasks on three clients contend and never more than three hold at once. Each permit
/// has its own token.
pub(super) async fn a_semaphore_never_has_more_than_n_holders(d: &dyn Deployment) {
    let clients = clients(d).await;
    if !d.caps().semaphore {
        let refused = clients[0].semaphore("sem", 3).try_acquire().await;
        assert!(unsupported(&refused), "{}", describe(&refused));
        return;
    }
    let mut three = Vec::new();
    for client in &clients[..3] {
        three.push(client.semaphore("sem", 3).acquire().await.unwrap());
    }
    let tokens: std::collections::HashSet<u64> = three.iter().map(Guard::fencing_token).collect();
    assert_eq!(tokens.len(), 3, "a token per permit");
    let fourth = clients[3].semaphore("sem", 3).try_acquire().await.unwrap();
    assert!(fourth.is_err(), "a fourth permit of three");
    for permit in three {
        assert_eq!(permit.release().await.unwrap(), Released::Released);
    }
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let sem = clients[i % 3].semaphore("sem", 3);
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                let permit = sem.acquire().await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(permit.release().await.unwrap(), Released::Released);
            }
        }));
    }
    within(60.0, "24 permits taken and given back", async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    assert!(
        most.load(Ordering::SeqCst) <= 3,
        "more than 3 holders at once"
    );
    assert_eq!(d.entries("sem").await, []);
}

/// Waiters are served in arrival order; a release gives back its own permit only (the other
/// holders keep theirs); another N is refused unless resized; lowering N revokes nothing.
pub(super) async fn semaphore_order_release_and_resize(d: &dyn Deployment) {
    let [a, b, c, e, f] = clients(d).await;
    if !d.caps().semaphore {
        return;
    }
    let sem = a.semaphore("sem-2", 2);
    let p1 = sem.acquire().await.unwrap();
    let p2 = b.semaphore("sem-2", 2).acquire().await.unwrap();
    assert_ne!(p1.fencing_token(), p2.fencing_token());
    assert!(b
        .semaphore("sem-2", 2)
        .try_acquire()
        .await
        .unwrap()
        .is_err());
    let mismatch = c.semaphore("sem-2", 5).try_acquire().await;
    assert!(
        matches!(
            mismatch,
            Err(Error::PermitsMismatch {
                stored: 2,
                asked: 5,
                ..
            })
        ),
        "{}",
        describe(&mismatch)
    );
    let mut waiting: Vec<tokio::task::JoinHandle<Guard>> = Vec::new();
    let mut entries = d.entries("sem-2").await.len();
    for client in [&c, &e] {
        let sem = client.semaphore("sem-2", 2);
        waiting.push(tokio::spawn(async move { sem.acquire().await.unwrap() }));
        entries = until_more_entries(d, "sem-2", entries).await;
    }
    assert_eq!(p1.release().await.unwrap(), Released::Released);
    let first = within(10.0, "the first waiter holds", &mut waiting[0])
        .await
        .unwrap();
    assert!(
        !waiting[1].is_finished(),
        "the second waiter passed the first"
    );
    assert!(p2.is_held(), "a release freed another's permit");
    // Lowering N to 1 revokes nothing: both permits stay held; the waiter holds only once
    // fewer than one are ahead of it.
    let lowered = f.semaphore("sem-2", 1).resize();
    let entries = d.entries("sem-2").await.len();
    let lowering = tokio::spawn(async move { lowered.acquire().await.unwrap() });
    until_more_entries(d, "sem-2", entries).await;
    assert!(p2.is_held() && first.is_held());
    assert_eq!(p2.release().await.unwrap(), Released::Released);
    assert_eq!(first.release().await.unwrap(), Released::Released);
    let second = within(10.0, "the second waiter holds", &mut waiting[1])
        .await
        .unwrap();
    assert!(!lowering.is_finished(), "two permits held under N = 1");
    assert_eq!(second.release().await.unwrap(), Released::Released);
    let last = within(10.0, "the resizing waiter holds", lowering)
        .await
        .unwrap();
    assert_eq!(last.release().await.unwrap(), Released::Released);
    assert_eq!(d.entries("sem-2").await, []);
}

/// One name, one kind: a name held as a mutex, as a read-write lock or as a semaphore is
/// refused as either of the others with `PrimitiveMismatch`, and nothing is left behind by
/// the refused attempts.
pub(super) async fn one_name_is_one_kind(d: &dyn Deployment) {
    let [a, b, ..] = clients(d).await;
    let caps = d.caps();
    let mismatch = |r: &Result<_, Error>| matches!(r, Err(Error::PrimitiveMismatch { .. }));
    if caps.rw_lock {
        let m = a.lock("kind-m").acquire().await.unwrap();
        let as_rw = b.rw_lock("kind-m").read().try_acquire().await;
        assert!(mismatch(&as_rw), "{}", describe(&as_rw));
        m.release().await.unwrap();
        let r = a.rw_lock("kind-r").read().acquire().await.unwrap();
        let as_mutex = b.lock("kind-r").try_acquire().await;
        assert!(mismatch(&as_mutex), "{}", describe(&as_mutex));
        r.release().await.unwrap();
    }
    if caps.semaphore {
        let p = a.semaphore("kind-s", 2).acquire().await.unwrap();
        let as_mutex = b.lock("kind-s").try_acquire().await;
        assert!(mismatch(&as_mutex), "{}", describe(&as_mutex));
        if caps.rw_lock {
            let as_rw = b.rw_lock("kind-s").write().try_acquire().await;
            assert!(mismatch(&as_rw), "{}", describe(&as_rw));
        }
        p.release().await.unwrap();
    }
    for name in ["kind-m", "kind-r", "kind-s"] {
        assert_eq!(d.entries(name).await, [], "{name}");
    }
}
