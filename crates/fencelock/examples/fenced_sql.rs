//! A fenced write to PostgreSQL: a holder that paused past its lease finds its write
//! rejected, because a later holder's token is already in the row.
//!
//! `cargo run -p fencelock --example fenced_sql` starts a throwaway Redis (the lock) and
//! PostgreSQL (the store) through the test kit (`apt-get install redis-server postgresql`).

use std::time::Duration;

use fencelock::fenced::{FencedUpdate, FencedWrite};
use fencelock::{Client, LockOptions};
use fencelock_testkit::{PostgresServer, RedisServer};
use tokio_postgres::NoTls;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let redis = RedisServer::start()?;
    let pg = tokio::task::spawn_blocking(PostgresServer::start).await??;
    let (db, connection) = tokio_postgres::connect(&pg.url(), NoTls).await?;
    tokio::spawn(connection);
    db.batch_execute(
        "CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, \
         fence BIGINT NOT NULL DEFAULT 0);
         INSERT INTO accounts (id, balance) VALUES (1, 100);",
    )
    .await?;
    // UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2
    let update = FencedUpdate::new("accounts", &["balance"])?;
    let write = |balance: i64, token: u64| {
        let (db, update) = (&db, &update);
        async move {
            let rows = db
                .execute(update.sql(), &[&balance, &update.token(token)?, &1i64])
                .await?;
            Ok::<FencedWrite, Box<dyn std::error::Error>>(update.outcome(rows)?)
        }
    };

    let client = Client::connect(&redis.url()).await?;
    let short = LockOptions::default().lease(Duration::from_millis(300));
    let slow = client.lock("account:1").with_options(short.clone());
    let a = slow.acquire().await?;
    println!("A holds the lock with token {}", a.fencing_token());
    // A pauses past its lease (a GC pause, a frozen VM): the lock passes to B.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b = client
        .lock("account:1")
        .with_options(short)
        .acquire()
        .await?;
    println!("B holds the lock with token {}", b.fencing_token());
    println!("B writes 150: {:?}", write(150, b.fencing_token()).await?);
    b.release().await?;
    // A wakes and writes what it computed before its pause: refused by the row's fence.
    let late = write(90, a.fencing_token()).await?;
    println!("A writes 90 late: {late:?}");
    assert_eq!(late, FencedWrite::Rejected { highest: None });
    let row = db
        .query_one("SELECT balance, fence FROM accounts WHERE id = 1", &[])
        .await?;
    println!(
        "row: balance {}, fence {}",
        row.get::<_, i64>(0),
        row.get::<_, i64>(1)
    );
    client.close().await?;
    Ok(())
}
