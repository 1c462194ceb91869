//! The same program on Redis, ZooKeeper and etcd: only the URL differs.
//!
//! `cargo run -p fencelock --features zookeeper,etcd --example any_backend [URL...]`
//! (no URL: throwaway redis-server, ZooKeeper and etcd from the test kit, one after another).

use fencelock::Client;
use fencelock_testkit::{EtcdServer, RedisServer, ZooKeeperServer};

/// Takes the lock twice in a row and shows that the token grew: the whole program.
async fn run(url: &str) -> fencelock::Result<()> {
    let client = Client::connect(url).await?;
    let lock = client.lock("invoice-42");
    let first = lock.acquire().await?;
    let token = first.fencing_token();
    first.release().await?;
    let second = lock.acquire().await?;
    assert!(second.fencing_token() > token);
    println!(
        "{}: tokens {token} then {}",
        fencelock::redact_url(url),
        second.fencing_token()
    );
    second.release().await?;
    client.close().await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = std::env::args().skip(1).collect();
    if !urls.is_empty() {
        for url in &urls {
            run(url).await?;
        }
        return Ok(());
    }
    let redis = RedisServer::start()?;
    run(&redis.url()).await?;
    let zookeeper = tokio::task::spawn_blocking(ZooKeeperServer::start).await??;
    run(&zookeeper.url()).await?;
    let etcd = tokio::task::spawn_blocking(EtcdServer::start).await??;
    run(&etcd.url()).await?;
    Ok(())
}
