//! A worker that stops writing the moment its lock is lost, and takes the lock again.
//!
//! `cargo run -p fencelock --example lost_worker [URL]` (no URL: a throwaway redis-server).
//! An operator's forced unlock stands for any loss (a lease that ran out, a failover).

use std::time::Duration;

use fencelock::{Client, ClientOptions};
use fencelock_testkit::RedisServer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = match std::env::args().nth(1) {
        Some(_) => None,
        None => Some(RedisServer::start()?),
    };
    let url = match (std::env::args().nth(1), &server) {
        (Some(url), _) => url,
        (None, server) => server.as_ref().map(RedisServer::url).unwrap_or_default(),
    };
    // A short lease: the watchdog renews it every 300 ms, and a renewal that finds the lock
    // gone fires `lost()` (the default, 30 s, would notice within 10 s).
    let options = ClientOptions::default().default_lease(Duration::from_millis(900));
    let client = Client::connect_with(&url, options).await?;
    let operator = Client::connect(&url).await?;
    let lock = client.lock("ingest");
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let removed = operator.force_unlock("ingest").await;
        println!("operator: force-unlocked ingest: {removed:?}");
    });

    let mut batches = 0;
    for holding in 1..=2 {
        let guard = lock.acquire().await?;
        println!("holding {holding}: token {}", guard.fencing_token());
        loop {
            tokio::select! {
                // Stop writing at once: another worker may hold the lock now.
                _ = guard.lost() => {
                    println!("holding {holding}: lost ({:?}); stop, then take it again",
                        guard.lost_reason());
                    break;
                }
                _ = tokio::time::sleep(Duration::from_millis(60)) => {
                    batches += 1;
                    println!("holding {holding}: batch {batches} written with token {}",
                        guard.fencing_token());
                    if batches == 14 {
                        guard.release().await?;
                        client.close().await?;
                        return Ok(());
                    }
                }
            }
        }
    }
    client.close().await?;
    Ok(())
}
