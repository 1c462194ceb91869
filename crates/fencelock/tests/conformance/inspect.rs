//! What an operator reads and fixes (issue 33, points 1 to 3), on every deployment: every
//! name with a holding is listed, a page at a time, also past the first page, with its kind
//! and each holder's own token; a listing leaves nothing behind; `force_unlock_holder`
//! removes one permit only and its guard is told, the other permit stays. RedLock refuses the
//! listing with `Error::Unsupported` (no one server has every lock).

use std::collections::BTreeSet;

use fencelock::{Error, LockKind};

use super::{connect, lease, within, Deployment};

/// More names than one page of any service holds (ZooKeeper 500, etcd 1000 keys, a Redis
/// `SCAN` step 1000 keys).
const NAMES: usize = 1200;

/// Every name held is listed (at least once: Redis's `SCAN` may return a name twice), with
/// its kind and holder; nothing is left on the servers by the listing.
pub(super) async fn every_name_is_listed_with_its_kind(d: &dyn Deployment) {
    let client = connect(d, lease(20_000)).await;
    if d.urls().len() > 1 {
        let refused = client.list().next().await;
        assert!(
            matches!(refused, Some(Err(Error::Unsupported { .. }))),
            "{refused:?}"
        );
        return;
    }
    let mut guards = Vec::new();
    for i in 0..NAMES {
        guards.push(
            client
                .lock(&format!("listed-{i:04}"))
                .acquire()
                .await
                .unwrap(),
        );
    }
    let mut listing = client.list();
    let mut seen = BTreeSet::new();
    while let Some(next) = within(30.0, "a page", listing.next()).await {
        let status = next.unwrap();
        let Some(i) = status.name.strip_prefix("listed-") else {
            continue;
        };
        let i: usize = i.parse().unwrap();
        assert_eq!(status.kind, Some(LockKind::Mutex), "{status:?}");
        assert_eq!(status.holders.len(), 1, "{status:?}");
        assert_eq!(status.holders[0].owner, guards[i].owner(), "{status:?}");
        assert_eq!(
            status.holders[0].token,
            Some(guards[i].fencing_token()),
            "{status:?}"
        );
        seen.insert(i);
    }
    assert_eq!(seen.len(), NAMES, "every name listed");
    assert_eq!(
        d.entries("listed-0000").await.len(),
        1,
        "the listing wrote nothing"
    );
    for g in guards {
        g.release().await.unwrap();
    }
    let mut listing = client.list();
    while let Some(next) = listing.next().await {
        let status = next.unwrap();
        assert!(!status.name.starts_with("listed-"), "{status:?}");
    }
}

/// `force_unlock_holder` removes one permit: its guard is told, the other holder keeps its
/// own, the status lists only it, each with its own token.
pub(super) async fn one_holder_is_removed_and_told(d: &dyn Deployment) {
    if !d.caps().semaphore {
        return;
    }
    let holder_lease = if d.caps().told_of_force_unlock {
        20_000
    } else {
        3_000
    };
    let (a, b, op) = (
        connect(d, lease(holder_lease)).await,
        connect(d, lease(holder_lease)).await,
        connect(d, lease(20_000)).await,
    );
    let first = a.semaphore("one-holder", 2).acquire().await.unwrap();
    let second = b.semaphore("one-holder", 2).acquire().await.unwrap();
    let status = op.status("one-holder").await.unwrap();
    assert_eq!(status.kind, Some(LockKind::Semaphore), "{status:?}");
    let mut tokens: Vec<_> = status.holders.iter().map(|h| h.token).collect();
    tokens.sort();
    let mut expected = vec![Some(first.fencing_token()), Some(second.fencing_token())];
    expected.sort();
    assert_eq!(tokens, expected, "{status:?}");
    let removed = op
        .force_unlock_holder("one-holder", first.owner())
        .await
        .unwrap();
    assert_eq!(removed.len(), 1, "{removed:?}");
    within(5.0, "the removed holder is told", first.lost()).await;
    assert!(second.is_held());
    let status = op.status("one-holder").await.unwrap();
    let owners: Vec<_> = status.holders.iter().map(|h| h.owner.as_str()).collect();
    assert_eq!(owners, [second.owner()], "{status:?}");
    let nothing = op
        .force_unlock_holder("one-holder", "nobody")
        .await
        .unwrap();
    assert!(nothing.is_empty(), "{nothing:?}");
    second.release().await.unwrap();
}
