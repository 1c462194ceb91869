//! The lease, the tables and the listener on real servers: PostgreSQL from Debian's package
//! and PgBouncer in front of it, in transaction pooling (the test kit's).

use std::sync::Arc;
use std::time::Duration;

use fencelock_testkit::{PgBouncer, PostgresServer};

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
    let session = open(&server.url(), Duration::from_secs(5)).await;
    let look = psql(&server.url()).await;
    assert!(expires_ms(&look, session.lease).await.is_some());
    session.stop().expect("first stop").await;
    assert!(session.stop().is_none());
    assert_eq!(expires_ms(&look, session.lease).await, None);
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
