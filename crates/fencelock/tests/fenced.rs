//! Fenced resources on real servers: the Redis register and the SQL update on PostgreSQL.
#![cfg(feature = "redis")]

use std::time::Duration;

use fencelock::fenced::{Fenced, FencedRegister, FencedUpdate, FencedWrite, Placeholders};
use fencelock::{Client, LockOptions};
use fencelock_testkit::{PostgresServer, RedisServer};

mod common;
use common::within;

async fn redis(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The register accepts equal and higher tokens, rejects lower ones (saying which token was
/// higher), compares every u64 exactly, and reports a key of the wrong type as an error.
#[tokio::test]
async fn register_accepts_only_tokens_at_least_the_highest() {
    let server = RedisServer::start().unwrap();
    let mut conn = redis(&server).await;
    let reg = FencedRegister::new("reg").unwrap();
    assert_eq!(reg.read(&mut conn).await.unwrap(), None);
    assert_eq!(
        reg.write(&mut conn, 5, b"a").await.unwrap(),
        FencedWrite::Accepted
    );
    assert_eq!(
        reg.write(&mut conn, 5, b"b").await.unwrap(),
        FencedWrite::Accepted
    );
    assert_eq!(
        reg.write(&mut conn, 4, b"stale").await.unwrap(),
        FencedWrite::Rejected { highest: Some(5) }
    );
    let read = reg.read(&mut conn).await.unwrap();
    assert_eq!(
        read,
        Some(Fenced {
            value: b"b".to_vec(),
            token: 5
        })
    );
    // Above 2^53 a Lua number would round: these differ by one.
    let big = u64::MAX - 1;
    assert!(reg
        .write(&mut conn, big, b"big")
        .await
        .unwrap()
        .is_accepted());
    assert_eq!(
        reg.write(&mut conn, big - 1, b"x").await.unwrap(),
        FencedWrite::Rejected { highest: Some(big) }
    );
    assert!(reg
        .write(&mut conn, u64::MAX, b"max")
        .await
        .unwrap()
        .is_accepted());
    assert_eq!(reg.read(&mut conn).await.unwrap().unwrap().token, u64::MAX);

    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    let wrong = FencedRegister::new("plain").unwrap();
    assert!(wrong.write(&mut conn, 1, b"v").await.is_err());
    assert!(wrong.read(&mut conn).await.is_err());
    assert!(FencedRegister::new("").is_err());
}

/// A holder that paused past its lease writes after the next holder: the register keeps the
/// next holder's value.
#[tokio::test]
async fn register_rejects_a_holder_that_paused_past_its_lease() {
    let server = RedisServer::start().unwrap();
    let mut conn = redis(&server).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let short = LockOptions::default().lease(Duration::from_millis(200));
    let reg = FencedRegister::new("job:state").unwrap();
    let a = client
        .lock("job")
        .with_options(short.clone())
        .acquire()
        .await
        .unwrap();
    within(5.0, "A's lease runs out", a.lost()).await;
    let b = client
        .lock("job")
        .with_options(short)
        .acquire()
        .await
        .unwrap();
    assert!(b.fencing_token() > a.fencing_token());
    assert!(reg
        .write(&mut conn, b.fencing_token(), b"B")
        .await
        .unwrap()
        .is_accepted());
    let late = reg.write(&mut conn, a.fencing_token(), b"A").await.unwrap();
    assert!(!late.is_accepted(), "{late:?}");
    assert_eq!(reg.read(&mut conn).await.unwrap().unwrap().value, b"B");
    b.release().await.unwrap();
    client.close().await.unwrap();
}

/// The SQL pattern on a real PostgreSQL: the built statement updates the row with an equal or
/// higher token, refuses a lower one, and refuses a missing row (no silent insert).
#[tokio::test]
async fn sql_update_is_fenced_on_postgres() {
    let pg = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .unwrap()
        .expect("start PostgreSQL");
    let (db, connection) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    db.batch_execute(
        "CREATE TABLE jobs (job_id BIGINT PRIMARY KEY, state TEXT NOT NULL, \
         epoch BIGINT NOT NULL DEFAULT 0);
         INSERT INTO jobs (job_id, state) VALUES (7, 'new');",
    )
    .await
    .unwrap();
    let update = FencedUpdate::new("jobs", &["state"])
        .and_then(|u| u.id_column("job_id"))
        .and_then(|u| u.fence_column("epoch"))
        .and_then(|u| u.placeholders(Placeholders::Numbered))
        .unwrap();
    let write = |state: &'static str, token: u64, id: i64| {
        let (db, update) = (&db, &update);
        async move {
            let token = update.token(token).unwrap();
            let rows = db
                .execute(update.sql(), &[&state, &token, &id])
                .await
                .unwrap();
            update.outcome(rows).unwrap()
        }
    };
    assert_eq!(write("run", 10, 7).await, FencedWrite::Accepted);
    assert_eq!(write("run2", 10, 7).await, FencedWrite::Accepted);
    assert_eq!(
        write("late", 9, 7).await,
        FencedWrite::Rejected { highest: None }
    );
    assert_eq!(
        write("ghost", 11, 8).await,
        FencedWrite::Rejected { highest: None }
    );
    let row = db
        .query_one("SELECT state, epoch FROM jobs WHERE job_id = 7", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, &str>(0), "run2");
    assert_eq!(row.get::<_, i64>(1), 10);
    let rows = db.query("SELECT 1 FROM jobs", &[]).await.unwrap();
    assert_eq!(rows.len(), 1, "a fenced update never inserts");
}
