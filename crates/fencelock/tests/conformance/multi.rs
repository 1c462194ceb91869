//! Multi-locks (issue 24, point 3), on every deployment of the suite: all or nothing, in
//! one global order whatever order the names are given in, one guard whose `lost()` fires
//! when any lock is lost, each lock's token by name, bad input refused before any I/O.

use std::time::Duration;

use fencelock::{ClientOptions, Error, InputError, Released};

use super::{connect, describe, is_input, lease, until_entries, within, Deployment};

/// A busy lock makes the whole multi-lock fail, and the locks taken before it are given back
/// (`try_acquire` and a timeout alike); once free, all are taken, in name order, by one
/// owner, each with its token, and released together, leaving nothing behind.
pub(super) async fn a_multi_lock_is_all_or_nothing(d: &dyn Deployment) {
    let (a, b) = (
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
    );
    let busy = a.lock("m-b").acquire().await.unwrap();
    let multi = b.multi_lock(&["m-c", "m-a", "m-b"]);
    assert_eq!(multi.names(), ["m-a", "m-b", "m-c"]);
    let tried = multi.try_acquire().await.unwrap();
    let contended = tried.expect_err("a multi-lock over a held lock");
    assert_eq!(contended.name, "m-b");
    assert_eq!(d.entries("m-a").await, [], "m-a was not given back");
    assert_eq!(d.entries("m-c").await, [], "m-c was taken past a busy lock");
    let timed = multi.acquire_timeout(Duration::from_millis(300)).await;
    assert!(
        matches!(timed, Err(Error::Timeout { .. })),
        "{}",
        describe(&timed)
    );
    assert_eq!(d.entries("m-a").await, [], "m-a was not given back");
    assert_eq!(d.entries("m-b").await.len(), 1, "the timeout left a waiter");

    assert_eq!(busy.release().await.unwrap(), Released::Released);
    let held = multi.acquire().await.unwrap();
    let tokens = held.tokens();
    let names: Vec<&str> = tokens.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["m-a", "m-b", "m-c"]);
    assert_eq!(held.fencing_token("m-b"), Some(tokens[1].1));
    assert_eq!(held.fencing_token("m-x"), None);
    let owner = held.guards()[0].owner().to_owned();
    for name in ["m-a", "m-b", "m-c"] {
        let status = a.status(name).await.unwrap();
        assert_eq!(status.owners, vec![(owner.clone(), 1)], "{name}");
    }
    assert!(held.is_held());
    let released = held.release().await.unwrap();
    assert_eq!(released.len(), 3);
    assert!(released.iter().all(|(_, r)| *r == Released::Released));
    for name in ["m-a", "m-b", "m-c"] {
        assert_eq!(d.entries(name).await, [], "{name} left behind");
    }
}

/// Two clients take the same two locks named in opposite orders, over and over, at the same
/// time: the global order means neither ever waits for the other in a cycle.
pub(super) async fn multi_locks_in_opposite_orders_never_deadlock(d: &dyn Deployment) {
    let (a, b) = (
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
    );
    let run = |client: fencelock::Client, names: [&'static str; 2]| {
        tokio::spawn(async move {
            let multi = client.multi_lock(&names);
            for _ in 0..10 {
                let held = multi.acquire().await.unwrap();
                tokio::task::yield_now().await;
                held.release().await.unwrap();
            }
        })
    };
    let one = run(a, ["x-1", "x-2"]);
    let two = run(b, ["x-2", "x-1"]);
    within(30.0, "opposite orders finish", async {
        one.await.unwrap();
        two.await.unwrap();
    })
    .await;
}

/// A multi-lock whose acquire is dropped while it waits for its second lock gives back the
/// first one; one that loses any of its locks tells its holder through `lost()`.
pub(super) async fn a_multi_lock_gives_back_and_tells_of_any_loss(d: &dyn Deployment) {
    let (a, b) = (
        connect(d, lease(1_500)).await,
        connect(d, lease(1_500)).await,
    );
    let busy = a.lock("d-b").acquire().await.unwrap();
    let multi = b.multi_lock(&["d-b", "d-a"]);
    let waiting = tokio::spawn({
        let multi = multi.clone();
        async move { multi.acquire().await }
    });
    until_entries(d, "d-a", 1).await;
    waiting.abort();
    until_entries(d, "d-a", 0).await;
    assert_eq!(busy.release().await.unwrap(), Released::Released);

    let held = multi.acquire().await.unwrap();
    let lost = held.lost_token();
    d.lose("d-b").await;
    within(
        3.0,
        "lost() after one of the locks was taken away",
        held.lost(),
    )
    .await;
    assert!(lost.is_cancelled());
    assert!(!held.is_held());
    assert!(held.guards()[0].is_held(), "d-a is still held");
    let released = held.release().await.unwrap();
    assert_eq!(
        released,
        [
            ("d-b".to_owned(), Released::NotHeld),
            ("d-a".to_owned(), Released::Released)
        ]
    );
}

/// No names, too many, a name twice, or one name a service refuses among good ones: an input
/// error before any I/O (the good names are left untouched).
pub(super) async fn bad_multi_locks_are_refused_before_any_io(d: &dyn Deployment) {
    let client = connect(d, ClientOptions::default()).await;
    let none = client.multi_lock(&[]).acquire().await;
    assert!(
        is_input(&none, |e| matches!(e, InputError::MultiLockSize { .. })),
        "{}",
        describe(&none)
    );
    let names: Vec<String> = (0..=fencelock::MAX_MULTI_LOCKS)
        .map(|i| format!("n{i}"))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let many = client.multi_lock(&names).try_acquire().await;
    assert!(
        is_input(&many, |e| matches!(e, InputError::MultiLockSize { .. })),
        "{}",
        describe(&many)
    );
    let twice = client.multi_lock(&["t", "u", "t"]).acquire().await;
    assert!(
        is_input(
            &twice,
            |e| matches!(e, InputError::DuplicateName { name } if name == "t")
        ),
        "{}",
        describe(&twice)
    );
    let empty = client.multi_lock(&["z-good", ""]).acquire().await;
    assert!(
        is_input(&empty, |e| matches!(e, InputError::EmptyName)),
        "{}",
        describe(&empty)
    );
    assert_eq!(
        d.entries("z-good").await,
        [],
        "a lock taken before the check"
    );
}

/// With a fixed lease (where offered), a lock whose lease runs out while a later one is
/// awaited is not handed over lost: the multi-lock gives all back and takes them again, and
/// returns with every lock held.
pub(super) async fn a_multi_lock_returns_only_with_every_lock_held(d: &dyn Deployment) {
    if !d.caps().fixed_lease {
        return;
    }
    let (a, b) = (
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
    );
    let busy = a.lock("f-b").acquire().await.unwrap();
    let fixed = fencelock::LockOptions::default().lease(Duration::from_millis(300));
    let multi = b.multi_lock(&["f-a", "f-b"]).with_options(fixed);
    let waiting = tokio::spawn(async move { multi.acquire().await });
    until_entries(d, "f-a", 1).await;
    // f-a's 300 ms lease runs out while f-b is still busy.
    until_entries(d, "f-a", 0).await;
    assert_eq!(busy.release().await.unwrap(), Released::Released);
    let held = within(10.0, "the multi-lock is taken", waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(held.is_held(), "returned with a lock already lost");
    held.release().await.unwrap();
}
