//! Each primitive's recipe decided in the one atomic step that enters the queue (issue 31,
//! defects 1, 2, 3, 6, 7 and 8), on every deployment that offers the primitive: two kinds
//! started at the same moment on a free name give one holder and one refusal; two first
//! acquires of one owner at the same moment both keep their holding; a semaphore holds at
//! most the current N whatever resizes happen; tokens increase in holding order through a
//! downgrade; a semaphore's N lives exactly as long as its entries. Two actors start at the
//! same moment behind a barrier, never after a sleep.

use std::sync::Arc;
use std::time::Duration;

use fencelock::{Client, Error, Guard, Released};
use tokio::sync::Barrier;

use super::{connect, lease, until_more_entries, within, Deployment};

/// Two clients with long leases (an etcd client has one key per name).
async fn two(d: &dyn Deployment) -> (Client, Client) {
    (
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
    )
}

/// Defect 2: two tasks of one owner (one handle) take the read side, or one owner's
/// permits, at the same moment: each guard's hold is recorded, so each release gives back
/// its own (never `NotHeld`), a writer then holds, and a forced unlock tells both guards.
pub(super) async fn first_acquires_of_one_owner_together_keep_each_hold(d: &dyn Deployment) {
    let (a, b) = two(d).await;
    let caps = d.caps();
    let mut cases: Vec<(&str, Box<Take>)> = Vec::new();
    if caps.rw_lock {
        let lock = a.rw_lock("owner-rw");
        cases.push((
            "owner-rw",
            Box::new(move || {
                let lock = lock.clone();
                Box::pin(async move { lock.read().acquire().await })
            }),
        ));
    }
    if caps.semaphore {
        let sem = a.semaphore("owner-sem", 2).with_owner("one-owner");
        cases.push((
            "owner-sem",
            Box::new(move || {
                let sem = sem.clone();
                Box::pin(async move { sem.acquire().await })
            }),
        ));
    }
    for (name, take) in &cases {
        for ending in [Ending::Release, Ending::ForceUnlock] {
            let (one, other) = together(take).await;
            match ending {
                Ending::Release => {
                    for g in [one, other] {
                        let released = g.release().await.unwrap();
                        assert!(
                            matches!(released, Released::Released | Released::StillHeld { .. }),
                            "{name}: a guard's release: {released:?}"
                        );
                    }
                    let next = exclusive(&b, name, 10).await;
                    assert_eq!(next.release().await.unwrap(), Released::Released);
                }
                Ending::ForceUnlock => {
                    b.force_unlock(name).await.unwrap();
                    within(10.0, &format!("{name}: both guards told"), async {
                        one.lost().await;
                        other.lost().await;
                    })
                    .await;
                    let next = exclusive(&b, name, 10).await;
                    assert_eq!(next.release().await.unwrap(), Released::Released);
                }
            }
            assert_eq!(d.entries(name).await, [], "{name}");
        }
    }
}

type BoxTake = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Guard, Error>> + Send>>;
/// One acquire of a case, made anew for each run.
type Take = dyn Fn() -> BoxTake + Send + Sync;

/// How a case of [`first_acquires_of_one_owner_together_keep_each_hold`] ends.
#[derive(Clone, Copy)]
enum Ending {
    Release,
    ForceUnlock,
}

/// Runs `take` twice at the same moment; both must hold.
async fn together(take: &Take) -> (Guard, Guard) {
    let barrier = Arc::new(Barrier::new(2));
    let go = |f: BoxTake| {
        let barrier = barrier.clone();
        tokio::spawn(async move {
            barrier.wait().await;
            f.await
        })
    };
    let (one, other) = (go(take()), go(take()));
    within(20.0, "both acquires of one owner hold", async {
        (one.await.unwrap().unwrap(), other.await.unwrap().unwrap())
    })
    .await
}

/// The next holder of `name` after the owner's: the write side of a read-write lock, a
/// permit of the stored N.
async fn exclusive(client: &Client, name: &str, secs: u64) -> Guard {
    let timeout = Duration::from_secs(secs);
    let taken = match name {
        "owner-rw" => client.rw_lock(name).write().acquire_timeout(timeout).await,
        _ => client.semaphore(name, 2).acquire_timeout(timeout).await,
    };
    taken.unwrap_or_else(|e| panic!("{name}: the next holder: {e:?}"))
}

/// Defect 3: a semaphore holds at most its current N whatever resizes happen. N = 1 is
/// raised to 3 (two waiters join the holder), then lowered back to 1 while the three hold;
/// a waiter queued then holds only once every earlier holder is gone, never beside one.
pub(super) async fn a_semaphore_holds_at_most_the_current_n_through_resizes(d: &dyn Deployment) {
    if !d.caps().semaphore {
        return;
    }
    let clients = [
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
    ];
    let name = "sem-resize";
    let first = clients[0].semaphore(name, 1).acquire().await.unwrap();
    let entries = d.entries(name).await.len();
    let waiting = {
        let sem = clients[1].semaphore(name, 1);
        tokio::spawn(async move { sem.acquire().await.unwrap() })
    };
    until_more_entries(d, name, entries).await;
    let raised = clients[2].semaphore(name, 3).resize();
    let third = within(10.0, "the raising attempt holds", raised.acquire())
        .await
        .unwrap();
    let second = within(10.0, "the waiter holds once N is 3", waiting)
        .await
        .unwrap();
    // Lowered back to 1 by an attempt that does not get a permit: the resize counts when
    // its attempt enters the queue.
    let lowered = clients[3].semaphore(name, 1).resize().try_acquire().await;
    assert!(
        matches!(lowered, Ok(Err(_))),
        "a permit of 1 beside three: {:?}",
        lowered.map(|r| r.is_ok())
    );
    let entries = d.entries(name).await.len();
    let late = {
        let sem = clients[4].semaphore(name, 1);
        tokio::spawn(async move { sem.acquire().await.unwrap() })
    };
    until_more_entries(d, name, entries).await;
    for (holder, left) in [(first, 2), (second, 1)] {
        assert_eq!(holder.release().await.unwrap(), Released::Released);
        let busy = tokio::time::timeout(Duration::from_millis(300), async {
            while !late.is_finished() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        assert!(
            busy.await.is_err(),
            "a permit of N = 1 granted beside {left} holder(s)"
        );
    }
    assert_eq!(third.release().await.unwrap(), Released::Released);
    let last = within(10.0, "the late waiter holds alone", late)
        .await
        .unwrap();
    assert_eq!(last.release().await.unwrap(), Released::Released);
    assert_eq!(d.entries(name).await, []);
}

/// Defect 6: tokens increase in holding order through a downgrade. A writer holds, a second
/// writer queues behind it, the first takes the read side (a downgrade) and gives back both
/// sides: the second writer's token is above every token the first held.
pub(super) async fn tokens_increase_in_holding_order_through_a_downgrade(d: &dyn Deployment) {
    if !d.caps().rw_lock {
        return;
    }
    let (a, b) = two(d).await;
    let name = "down-order";
    let lock = a.rw_lock(name);
    let w = lock.write().acquire().await.unwrap();
    let entries = d.entries(name).await.len();
    let next = {
        let lock = b.rw_lock(name);
        tokio::spawn(async move { lock.write().acquire().await.unwrap() })
    };
    until_more_entries(d, name, entries).await;
    let r = lock.read().acquire().await.unwrap();
    let top = w.fencing_token().max(r.fencing_token());
    w.release().await.unwrap();
    assert!(
        !next.is_finished(),
        "a writer held beside the downgraded reader"
    );
    r.release().await.unwrap();
    let next = within(10.0, "the queued writer holds", next).await.unwrap();
    assert!(
        next.fencing_token() > top,
        "the next writer's token {} is not above the downgraded holder's {top}",
        next.fencing_token()
    );
    next.release().await.unwrap();
    assert_eq!(d.entries(name).await, []);
}
