//! Each primitive's recipe decided in the one atomic step that enters the queue (issue 31,
//! defects 1, 2, 3, 6, 7 and 8), on every deployment that offers the primitive: two kinds
//! started at the same moment on a free name give one holder and one refusal; two first
//! acquires of one owner at the same moment both keep their holding; a semaphore holds at
//! most the current N whatever resizes happen; tokens increase in holding order through a
//! downgrade; a semaphore's N lives exactly as long as its entries. Two actors start at the
//! same moment behind a barrier, never after a sleep.

use std::sync::Arc;
use std::time::Duration;

use fencelock::{Client, Error, Guard, Leadership, Released};
use tokio::sync::Barrier;

use super::{connect, describe, lease, until_entries, until_more_entries, within, Deployment};

/// What one actor asks for on a name.
#[derive(Debug, Clone, Copy)]
enum Want {
    Mutex,
    Leader,
    Read,
    Write,
    Permits(u32),
}

impl Want {
    /// Whether the deployment offers it.
    fn offered(self, d: &dyn Deployment) -> bool {
        let caps = d.caps();
        match self {
            Want::Mutex => true,
            Want::Leader => caps.election,
            Want::Read | Want::Write => caps.rw_lock,
            Want::Permits(_) => caps.semaphore,
        }
    }

    /// Takes it on `name`, waiting at most `secs` seconds.
    async fn take(self, client: &Client, name: &str, secs: u64) -> Result<Holding, Error> {
        let timeout = Duration::from_secs(secs);
        Ok(match self {
            Want::Mutex => Holding::Guard(client.lock(name).acquire_timeout(timeout).await?),
            Want::Leader => Holding::Leader(
                client
                    .election(name)
                    .campaign_timeout("value", timeout)
                    .await?,
            ),
            Want::Read => {
                Holding::Guard(client.rw_lock(name).read().acquire_timeout(timeout).await?)
            }
            Want::Write => Holding::Guard(
                client
                    .rw_lock(name)
                    .write()
                    .acquire_timeout(timeout)
                    .await?,
            ),
            Want::Permits(n) => {
                Holding::Guard(client.semaphore(name, n).acquire_timeout(timeout).await?)
            }
        })
    }
}

/// A guard or a leadership.
enum Holding {
    Guard(Guard),
    Leader(Leadership),
}

impl Holding {
    async fn release(self) -> Released {
        match self {
            Holding::Guard(g) => g.release().await.unwrap(),
            Holding::Leader(l) => l.resign().await.unwrap(),
        }
    }
}

/// Two clients with long leases (an etcd client has one key per name).
async fn two(d: &dyn Deployment) -> (Client, Client) {
    (
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
    )
}

/// Defect 1: two kinds started at the same moment on a free name: one holds, the other is
/// refused with `PrimitiveMismatch` (never both holding, never one waiting on the other),
/// whichever goes first, a mutex against an election included. Nothing is left behind.
pub(super) async fn two_kinds_started_together_give_one_refusal(d: &dyn Deployment) {
    const ROUNDS: usize = 8;
    let (a, b) = two(d).await;
    let pairs = [
        (Want::Mutex, Want::Permits(1)),
        (Want::Write, Want::Permits(1)),
        (Want::Read, Want::Permits(2)),
        (Want::Leader, Want::Permits(1)),
        (Want::Mutex, Want::Leader),
        (Want::Mutex, Want::Read),
        (Want::Leader, Want::Write),
    ];
    for (p, (x, y)) in pairs.into_iter().enumerate() {
        if !x.offered(d) || !y.offered(d) {
            continue;
        }
        for round in 0..ROUNDS {
            let name = format!("kinds-{p}-{round}");
            let (x, y) = if round % 2 == 0 { (x, y) } else { (y, x) };
            let barrier = Arc::new(Barrier::new(2));
            let go = |want: Want, client: &Client| {
                let (barrier, name, client) = (barrier.clone(), name.clone(), client.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    want.take(&client, &name, 5).await
                })
            };
            let (first, second) = (go(x, &a), go(y, &b));
            let (first, second) = within(20.0, "both attempts end", async {
                (first.await.unwrap(), second.await.unwrap())
            })
            .await;
            let refused =
                |r: &Result<Holding, Error>| matches!(r, Err(Error::PrimitiveMismatch { .. }));
            let (held, other) = match (first, second) {
                (Ok(held), other) | (other, Ok(held)) => (held, other),
                (one, other) => panic!(
                    "{x:?} and {y:?} on {name}: nobody holds: {} and {}",
                    describe(&one),
                    describe(&other)
                ),
            };
            assert!(
                refused(&other),
                "{x:?} and {y:?} on {name}: one holds, the other: {}",
                describe(&other)
            );
            assert_eq!(held.release().await, Released::Released);
            // The refused attempt's entries may go in its client's background.
            until_entries(d, &name, 0).await;
        }
    }
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

/// Defects 7 and 8: a semaphore's N lives exactly as long as its entries. Once the last
/// permit is given back, another N is taken at once; an attempt refused because the name is
/// another kind stores none; a forced unlock removes every permit (also those granted
/// under a larger N) and N with them.
pub(super) async fn a_semaphores_n_lives_as_long_as_its_entries(d: &dyn Deployment) {
    if !d.caps().semaphore {
        return;
    }
    let (a, b) = two(d).await;
    let name = "sem-life";
    let p = a.semaphore(name, 2).acquire().await.unwrap();
    p.release().await.unwrap();
    let three = b.semaphore(name, 3).try_acquire().await;
    let three = three.unwrap().expect("N went with the last permit");
    three.release().await.unwrap();
    // Refused as another kind: nothing stored.
    let m = a.lock(name).acquire().await.unwrap();
    let refused = b.semaphore(name, 4).try_acquire().await;
    assert!(
        matches!(refused, Err(Error::PrimitiveMismatch { .. })),
        "{}",
        describe(&refused.map(|r| r.is_ok()))
    );
    m.release().await.unwrap();
    let five = b.semaphore(name, 5).try_acquire().await;
    let five = five.unwrap().expect("a refused attempt stored no N");
    five.release().await.unwrap();
    // A forced unlock after N was lowered: every permit goes, and N.
    let mut held = Vec::new();
    for client in [&a, &b, &a] {
        held.push(client.semaphore(name, 3).acquire().await.unwrap());
    }
    let lowered = b.semaphore(name, 1).resize().try_acquire().await.unwrap();
    assert!(lowered.is_err(), "a permit of 1 beside three");
    a.force_unlock(name).await.unwrap();
    within(10.0, "every permit told of the forced unlock", async {
        for g in &held {
            g.lost().await;
        }
    })
    .await;
    assert_eq!(d.entries(name).await, []);
    let two = b.semaphore(name, 2).try_acquire().await;
    let two = two.unwrap().expect("a forced unlock removed N");
    two.release().await.unwrap();
    assert_eq!(d.entries(name).await, []);
}
