//! A re-entry by a current holder is decided at once (issue 31, defect 4), on every
//! deployment: while another owner of the same client waits for the lock, the holder's
//! re-entry (mutex, read side, write side), a writer's downgrade and a reader's upgrade
//! (refused) return at once, never queued behind that waiter, which waits for the holder.
//! Failed before the fix on Redis: the re-entry queued behind the client's own waiter and
//! did not return (read side and mutex).

use std::time::Duration;

use fencelock::{Client, Error, Guard, Lock, Released};

use super::{connect, describe, lease, until_entries, until_more_entries, within, Deployment};

/// What the holder takes first, and what it asks for again while the waiter waits.
#[derive(Debug, Clone, Copy)]
enum Case {
    Mutex,
    Read,
    Write,
    /// Holds the write side, asks for the read side.
    Downgrade,
    /// Holds the read side, asks for the write side: refused at once.
    Upgrade,
}

impl Case {
    /// The holder's first lock, its second ask, and the waiter's lock (another owner of the
    /// same client), on name `name`.
    fn locks(self, client: &Client, name: &str) -> (Lock, Lock, Lock) {
        if let Case::Mutex = self {
            let lock = client.lock(name);
            return (lock.clone(), lock, client.lock(name));
        }
        let (rw, other) = (client.rw_lock(name), client.rw_lock(name));
        let (first, again) = match self {
            Case::Read => (rw.read(), rw.read()),
            Case::Write => (rw.write(), rw.write()),
            Case::Downgrade => (rw.write(), rw.read()),
            Case::Mutex | Case::Upgrade => (rw.read(), rw.write()),
        };
        (first.clone(), again.clone(), other.write().clone())
    }
}

/// While another owner of the holder's client waits for the lock, the holder's re-entry,
/// downgrade or upgrade is decided at once: granted (hold count 2 for a re-entry), or
/// refused with `UpgradeRefused`. The waiter holds once the holder gave everything back.
pub(super) async fn a_reentry_never_waits_behind_the_clients_waiters(d: &dyn Deployment) {
    let caps = d.caps();
    let client = connect(d, lease(20_000)).await;
    let mut cases = vec![Case::Mutex];
    if caps.rw_lock {
        cases.extend([Case::Read, Case::Write, Case::Downgrade, Case::Upgrade]);
    }
    for case in cases {
        let name = format!("reentry-{case:?}").to_lowercase();
        let (first, again, waiter) = case.locks(&client, &name);
        let held = first.acquire().await.unwrap();
        let waiting = waiting_behind(d, &name, waiter).await;
        let second = within(5.0, &format!("{case:?}: decided at once"), again.acquire()).await;
        let second = match (case, second) {
            (Case::Upgrade, Err(Error::UpgradeRefused { .. })) => None,
            (Case::Upgrade, other) => panic!("an upgrade: {}", describe(&other)),
            (_, Ok(g)) => Some(g),
            (_, other) => panic!("{case:?}: {}", describe(&other)),
        };
        if let (Case::Mutex | Case::Read | Case::Write, Some(g)) = (case, &second) {
            assert_eq!(g.hold_count(), 2, "{case:?}");
        }
        assert!(
            !waiting.is_finished(),
            "{case:?}: the waiter held beside the holder"
        );
        give_back(second.into_iter().chain([held])).await;
        let next = within(10.0, &format!("{case:?}: the waiter holds"), waiting)
            .await
            .unwrap();
        assert_eq!(next.release().await.unwrap(), Released::Released);
        nothing_left(d, &name).await;
    }
}

/// Another client's owner id re-entered (`Lock::with_owner`, where the deployment offers it)
/// while the re-entering client has a waiter of its own for the lock: at once as well.
pub(super) async fn a_foreign_owners_reentry_never_waits_behind_the_clients_waiters(
    d: &dyn Deployment,
) {
    if !d.caps().foreign_owner_reentry {
        return;
    }
    let (holder, client) = (
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
    );
    let name = "reentry-foreign";
    let held = holder.lock(name).with_owner("reentry-owner");
    let held = held.acquire().await.unwrap();
    let waiting = waiting_behind(d, name, client.lock(name)).await;
    let again = client.lock(name).with_owner("reentry-owner");
    let second = within(5.0, "a foreign owner's re-entry at once", again.acquire())
        .await
        .unwrap();
    assert_eq!(second.hold_count(), 2);
    assert!(!waiting.is_finished(), "the waiter held beside the holder");
    give_back([second, held]).await;
    let next = within(10.0, "the waiter holds", waiting).await.unwrap();
    assert_eq!(next.release().await.unwrap(), Released::Released);
    nothing_left(d, name).await;
}

/// Waits until lock `name` has no entry left: on RedLock the waiter's attempts that a
/// minority of servers granted while the holder let go are given back in the background.
async fn nothing_left(d: &dyn Deployment, name: &str) {
    until_entries(d, name, 0).await;
}

/// Starts `waiter`'s acquire on a task, and returns once it waits: where a waiter leaves an
/// entry on the servers (a place in the queue, a node, a key), once that entry is there;
/// otherwise (RedLock keeps no queue; an etcd client's other owners wait in the client for
/// its one key) once its first attempt had time to find the lock held.
async fn waiting_behind(
    d: &dyn Deployment,
    name: &str,
    waiter: Lock,
) -> tokio::task::JoinHandle<Guard> {
    let caps = d.caps();
    let before = d.entries(name).await.len();
    let waiting = tokio::spawn(async move { waiter.acquire().await.unwrap() });
    if caps.waiter_queue && !caps.client_slot {
        until_more_entries(d, name, before).await;
    } else {
        // Nothing on the servers shows this waiter: give its first attempt time to run.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    waiting
}

/// Gives back each guard, the newest first.
async fn give_back(guards: impl IntoIterator<Item = Guard>) {
    for g in guards {
        let released = g.release().await.unwrap();
        assert!(
            matches!(released, Released::Released | Released::StillHeld { .. }),
            "{released:?}"
        );
    }
}
