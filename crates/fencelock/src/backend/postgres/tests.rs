//! The lease, the tables and the listener on real servers: PostgreSQL from Debian's package
//! and PgBouncer in front of it, in transaction pooling (the test kit's).

use std::sync::Arc;
use std::time::Duration;

use fencelock_testkit::{PgBouncer, PostgresServer};

use super::conn::Fault;
use super::entries::{Entered, Entering, Which};
use super::schema;
use super::session::Session;
use super::url::parse_target;
use crate::options::ClientOptions;

/// A client connection to `url`, for the test's own look at the tables.
async fn psql(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("test connection");
    tokio::spawn(connection);
    client
}

/// The servers, started off the runtime's threads.
fn servers(bouncer: bool) -> (PostgresServer, Option<PgBouncer>) {
    tokio::task::block_in_place(|| {
        let server = PostgresServer::start().expect("postgres");
        let bouncer = bouncer.then(|| PgBouncer::start(&server).expect("pgbouncer"));
        (server, bouncer)
    })
}

async fn open(url: &str, lease: Duration) -> Arc<Session> {
    let target = parse_target(url).expect("url");
    let options = ClientOptions::default().default_lease(lease);
    Session::open(&target, &options, "test-client")
        .await
        .expect("session")
}

/// Polls `check` every 20 ms until it holds, at most `bound`.
async fn until(bound: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + bound;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

async fn expires_ms(client: &tokio_postgres::Client, lease: i64) -> Option<f64> {
    let rows = client
        .query(
            "SELECT extract(epoch FROM expires)::float8 * 1000 FROM fencelock.fencelock_leases \
             WHERE id = $1",
            &[&lease],
        )
        .await
        .expect("read lease");
    rows.first().map(|r| r.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_row_is_renewed_on_the_servers_clock() {
    for bouncer in [false, true] {
        let (server, bouncer) = servers(bouncer);
        let url = bouncer
            .as_ref()
            .map_or_else(|| server.url(), PgBouncer::url);
        let session = open(&url, Duration::from_millis(900)).await;
        let look = psql(&server.url()).await;
        let first = expires_ms(&look, session.lease).await.expect("lease row");
        let first_deadline = session.holds.deadline();
        // Three renewals later the row lasts longer, and so do the client's holds.
        let renewed = until(Duration::from_secs(10), async || {
            expires_ms(&look, session.lease).await.unwrap() > first + 500.0
        })
        .await;
        assert!(
            renewed,
            "the lease row was not renewed (bouncer: {})",
            bouncer.is_some()
        );
        assert!(session.holds.deadline() > first_deadline);
        assert!(!session.holds.ended.is_cancelled());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_deleted_or_expired_ends_the_session_and_is_not_revived() {
    let (server, _) = servers(false);
    let look = psql(&server.url()).await;
    let deleted = open(&server.url(), Duration::from_millis(600)).await;
    look.execute(
        "DELETE FROM fencelock.fencelock_leases WHERE id = $1",
        &[&deleted.lease],
    )
    .await
    .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), deleted.holds.ended.cancelled());
    assert!(ended.await.is_ok(), "a deleted lease must end the session");

    // A lease the server counts as expired (as after a long pause of the client) stays so.
    let expired = open(&server.url(), Duration::from_millis(600)).await;
    look.execute(
        "UPDATE fencelock.fencelock_leases SET expires = clock_timestamp() - interval '1 s' \
         WHERE id = $1",
        &[&expired.lease],
    )
    .await
    .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), expired.holds.ended.cancelled());
    assert!(ended.await.is_ok(), "an expired lease must end the session");
    let expires = expires_ms(&look, expired.lease).await.unwrap();
    let now: f64 = look
        .query_one(
            "SELECT extract(epoch FROM clock_timestamp())::float8 * 1000",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(expires < now, "the expired lease was renewed again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_starting_together_create_the_tables_once_in_the_urls_schema() {
    let (server, _) = servers(false);
    let url = format!("{}?schema=team_a", server.url());
    let opened = futures_util::future::join_all((0..4).map(|_| open(&url, Duration::from_secs(5))));
    let sessions = tokio::time::timeout(Duration::from_secs(30), opened)
        .await
        .expect("opened in time");
    let look = psql(&server.url()).await;
    let tables: Vec<String> = look
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = 'team_a' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        tables,
        ["fencelock_entries", "fencelock_leases", "fencelock_names"]
    );
    let leases: i64 = look
        .query_one("SELECT count(*) FROM team_a.fencelock_leases", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(leases, sessions.len() as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_created_the_tables_needs_no_create_privilege() {
    let (server, _) = servers(false);
    let admin = psql(&server.url()).await;
    admin
        .batch_execute(&format!(
            "{}CREATE ROLE app LOGIN; GRANT USAGE ON SCHEMA fencelock TO app; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA fencelock TO app; \
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA fencelock TO app; \
             REVOKE CREATE ON DATABASE postgres FROM PUBLIC; REVOKE CREATE ON SCHEMA public FROM PUBLIC;",
            schema::ddl("fencelock")
        ))
        .await
        .unwrap();
    let url = format!("postgres://app@127.0.0.1:{}/postgres", server.port());
    let session = open(&url, Duration::from_secs(5)).await;
    assert!(session.lease > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_wake_waiters_and_are_trusted_only_once_seen() {
    let (server, bouncer) = servers(true);
    let bouncer = bouncer.unwrap();
    // Directly: the probe comes back, and a notification wakes the name's waiter at once.
    let direct = open(&server.url(), Duration::from_secs(5)).await;
    let listening = until(Duration::from_secs(10), async || direct.wakes.listening()).await;
    assert!(
        listening,
        "the probe never came back from PostgreSQL itself"
    );
    let mut wake = direct.wakes.subscribe("orders");
    let look = psql(&server.url()).await;
    look.execute("SELECT pg_notify('fencelock.fencelock', 'orders')", &[])
        .await
        .unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(2), wake.next());
    assert!(woken.await.is_ok());

    // Through PgBouncer in transaction pooling, LISTEN is accepted and nothing arrives:
    // waiters keep re-checking at the documented interval.
    let pooled = open(&bouncer.url(), Duration::from_secs(5)).await;
    // The direct session's probe came back in milliseconds; this one has seconds.
    let heard = until(Duration::from_secs(2), async || pooled.wakes.listening()).await;
    assert!(
        !heard,
        "PgBouncer delivered a notification in transaction pooling"
    );
    assert_eq!(pooled.wakes.recheck(), super::listen::RECHECK_POLLING);
    let off = open(
        &format!("{}?listen=off", server.url()),
        Duration::from_secs(5),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!off.wakes.listening(), "listen=off never listens");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_session_deletes_its_lease() {
    let (server, _) = servers(false);
    let (session, other) = (
        open(&server.url(), Duration::from_secs(5)).await,
        open(&server.url(), Duration::from_secs(5)).await,
    );
    for (name, s) in [
        ("a", &session),
        ("b", &other),
        ("shared", &session),
        ("shared", &other),
    ] {
        got_in(s.enter(&entering(name, "mutex", "o")).await.unwrap());
    }
    let look = psql(&server.url()).await;
    assert!(expires_ms(&look, session.lease).await.is_some());
    session.stop().expect("first stop").await;
    assert!(session.stop().is_none());
    assert_eq!(expires_ms(&look, session.lease).await, None);
    // Its entries went, and the kind of the names it alone used; the others keep theirs.
    let kinds: Vec<(String, Option<String>, i64)> = look
        .query(
            "SELECT n.name, n.kind, (SELECT count(*) FROM fencelock.fencelock_entries e \
             WHERE e.name = n.name) FROM fencelock.fencelock_names n ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let mutex = || Some("mutex".to_owned());
    assert_eq!(
        kinds,
        [
            ("a".into(), None, 0),
            ("b".into(), mutex(), 1),
            ("shared".into(), mutex(), 1)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backends_are_replaced_and_waiters_look_again() {
    let (server, _) = servers(false);
    let session = open(&server.url(), Duration::from_millis(900)).await;
    let listening = until(Duration::from_secs(10), async || session.wakes.listening()).await;
    assert!(listening);
    let mut wake = session.wakes.subscribe("orders");
    let look = psql(&server.url()).await;
    let killed: i64 = look
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'fencelock'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 2, "the link and the listener");
    // The listener's loss wakes every waiter (notifications may have been missed) ...
    let woken = tokio::time::timeout(Duration::from_secs(2), wake.next());
    assert!(woken.await.is_ok());
    // ... it listens again once its probe came back, and the lease is still renewed.
    let listening = until(Duration::from_secs(10), async || session.wakes.listening()).await;
    assert!(listening, "the listener did not come back");
    let before = expires_ms(&look, session.lease).await.unwrap();
    let renewed = until(Duration::from_secs(10), async || {
        expires_ms(&look, session.lease).await.unwrap() > before
    })
    .await;
    assert!(renewed && !session.holds.ended.is_cancelled());
}

/// An entry of kind `kind` for `name`, owned by `owner`.
fn entering<'a>(name: &'a str, kind: &'a str, owner: &'a str) -> Entering<'a> {
    Entering {
        name,
        attempt: rand::random(),
        kind,
        side: kind,
        owner,
        value: None,
        permits: None,
    }
}

/// The token of an entry that got in, and the tokens of the queue it saw.
fn got_in(entered: Entered) -> (i64, Vec<i64>) {
    match entered {
        Entered::In { token, queue } => (token, queue.iter().map(|e| e.token).collect()),
        refused => panic!("refused: {refused:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_follow_commit_order_per_name_and_survive_a_restart() {
    let (mut server, _) = servers(false);
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(open(&server.url(), Duration::from_secs(30)).await);
    }
    // Three clients enter two names at once, 20 times each.
    let entering_all = sessions.iter().enumerate().map(|(i, s)| async move {
        let mut seen = Vec::new();
        for k in 0..20 {
            let name = ["a", "b"][k % 2];
            let owner = format!("client-{i}");
            seen.push((
                name,
                got_in(s.enter(&entering(name, "mutex", &owner)).await.unwrap()),
            ));
        }
        seen
    });
    let seen: Vec<_> = futures_util::future::join_all(entering_all)
        .await
        .into_iter()
        .flatten()
        .collect();
    for name in ["a", "b"] {
        let mut tokens: Vec<i64> = seen
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, (t, _))| *t)
            .collect();
        tokens.sort();
        assert_eq!(
            tokens,
            (1..=30).collect::<Vec<_>>(),
            "{name}: one token each, no gap"
        );
        // Every entry saw every entry of a smaller token: the name's changes commit in
        // token order (a sequence's values alone would not).
        for (_, (token, queue)) in seen.iter().filter(|(n, _)| *n == name) {
            assert_eq!(*queue, (1..=*token).collect::<Vec<_>>());
        }
    }
    let before = sessions[0].queue("a").await.unwrap();
    assert_eq!(before.len(), 30);
    tokio::task::block_in_place(|| server.restart()).expect("restart");
    // The lease outlived the restart; the next entry's token goes on from the last.
    let entered = loop {
        match sessions[0].enter(&entering("a", "mutex", "client-0")).await {
            Err(e) if e.transient() => tokio::time::sleep(Duration::from_millis(50)).await,
            other => break other.unwrap(),
        }
    };
    assert_eq!(got_in(entered).0, 31);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_is_one_kind_and_its_n_goes_with_its_last_entry() {
    let (server, bouncer) = servers(true);
    for url in [server.url(), bouncer.as_ref().unwrap().url()] {
        one_kind_and_n(&server, &url).await;
    }
}

/// The kind and N checks, through `url` (the server itself, or PgBouncer).
async fn one_kind_and_n(server: &PostgresServer, url: &str) {
    let session = open(url, Duration::from_secs(30)).await;
    let look = psql(&server.url()).await;
    look.execute(
        "DELETE FROM fencelock.fencelock_names WHERE name = 'n'",
        &[],
    )
    .await
    .unwrap();
    let look = psql(&server.url()).await;
    let name_row = async |name: &str| -> (i64, Option<String>, Option<i64>) {
        let row = look
            .query_one(
                "SELECT token, kind, permits FROM fencelock.fencelock_names WHERE name = $1",
                &[&name],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    let (mutex, _) = got_in(session.enter(&entering("n", "mutex", "m")).await.unwrap());
    let permit = |permits, resize| Entering {
        permits: Some((permits, resize)),
        ..entering("n", "permit", "p")
    };
    // Another kind is refused and stores nothing: no entry, no token, no N.
    let refused = session.enter(&permit(2, false)).await.unwrap();
    assert_eq!(
        refused,
        Entered::Refused {
            kind: Some("mutex".into()),
            permits: None
        }
    );
    assert_eq!(name_row("n").await, (1, Some("mutex".into()), None));
    assert!(session.remove("n", Which::Held(mutex)).await.unwrap());
    assert!(
        !session.remove("n", Which::Token(mutex)).await.unwrap(),
        "removed once"
    );
    assert_eq!(
        name_row("n").await,
        (1, None, None),
        "the kind goes with the last entry"
    );

    // A semaphore's N is set by its first permit, checked by the others, changed by a resize.
    let (first, _) = got_in(session.enter(&permit(2, false)).await.unwrap());
    let other_n = session.enter(&permit(3, false)).await.unwrap();
    assert_eq!(
        other_n,
        Entered::Refused {
            kind: Some("permit".into()),
            permits: Some(2)
        }
    );
    let (resized, queue) = got_in(session.enter(&permit(3, true)).await.unwrap());
    assert_eq!(queue, [first, resized]);
    assert_eq!(name_row("n").await, (3, Some("permit".into()), Some(3)));
    for token in [first, resized] {
        assert!(session.remove("n", Which::Token(token)).await.unwrap());
    }
    assert_eq!(
        name_row("n").await,
        (3, None, None),
        "N goes with the last permit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_of_an_expired_lease_are_dead_and_swept_by_the_next_change() {
    let (server, _) = servers(false);
    let (gone, live) = (
        open(&server.url(), Duration::from_secs(30)).await,
        open(&server.url(), Duration::from_secs(30)).await,
    );
    let look = psql(&server.url()).await;
    got_in(gone.enter(&entering("x", "mutex", "gone")).await.unwrap());
    let listening = until(Duration::from_secs(10), async || live.wakes.listening()).await;
    assert!(listening);
    let mut wake = live.wakes.subscribe("x");
    look.execute(
        "UPDATE fencelock.fencelock_leases SET expires = clock_timestamp() WHERE id = $1",
        &[&gone.lease],
    )
    .await
    .unwrap();
    assert_eq!(
        live.queue("x").await.unwrap(),
        [],
        "a dead entry is not listed"
    );
    let (_, queue) = got_in(live.enter(&entering("x", "mutex", "live")).await.unwrap());
    assert_eq!(queue.len(), 1);
    let left: i64 = look
        .query_one(
            "SELECT count(*) FROM fencelock.fencelock_entries WHERE lease = $1",
            &[&gone.lease],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "swept under the name's lock");
    let woken = tokio::time::timeout(Duration::from_secs(2), wake.next());
    assert!(woken.await.is_ok(), "the sweep wakes the name's waiters");
    // The expired client's next entry ends its session and stores nothing.
    assert!(matches!(
        gone.enter(&entering("x", "mutex", "gone")).await,
        Err(Fault::Ended)
    ));
    assert!(gone.holds.ended.is_cancelled());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_whose_reply_was_lost_is_undone_by_its_attempt() {
    let (server, _) = servers(false);
    let proxy = fencelock_testkit::TcpProxy::start(server.port()).expect("proxy");
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?listen=off",
        proxy.port()
    );
    let target = parse_target(&url).unwrap();
    let options = ClientOptions::default()
        .default_lease(Duration::from_secs(30))
        .response_timeout(Duration::from_millis(500));
    let session = Session::open(&target, &options, "test-client")
        .await
        .unwrap();
    let look = psql(&server.url()).await;
    let mine = entering("lost", "mutex", "me");
    // The entry is made on the server; its reply never reaches the client.
    proxy.swallow_replies();
    assert!(matches!(session.enter(&mine).await, Err(Fault::Timeout)));
    proxy.cut();
    let entries = async || -> i64 {
        let row = look
            .query_one(
                "SELECT count(*) FROM fencelock.fencelock_entries WHERE name = 'lost'",
                &[],
            )
            .await
            .unwrap();
        row.get(0)
    };
    assert_eq!(entries().await, 1, "the server carried the entry out");
    // The undo finds it by the attempt's id (on a new connection), and only once.
    assert!(session
        .remove("lost", Which::Attempt(mine.attempt))
        .await
        .unwrap());
    assert!(!session
        .remove("lost", Which::Attempt(mine.attempt))
        .await
        .unwrap());
    assert_eq!(entries().await, 0);
}
