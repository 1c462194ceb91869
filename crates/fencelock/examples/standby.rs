//! An active/standby pair: two workers campaign in one election; the leader works with its
//! term, the standby waits and takes over when the leader goes, and an observer prints each
//! change of leader.
//!
//! `cargo run -p fencelock --example standby [URL]` (no URL: a throwaway redis-server).
//! The first leader resigns after three batches, standing for a deploy that stops it.

use std::time::Duration;

use fencelock::{Client, Election};
use fencelock_testkit::RedisServer;
use tokio::sync::oneshot;

/// One worker: campaigns, says when it leads, works in its term until it has done
/// `batches`, then resigns.
async fn worker(
    election: Election,
    name: &'static str,
    batches: u32,
    led: oneshot::Sender<()>,
) -> fencelock::Result<()> {
    let leading = election.campaign(name).await?;
    let term = leading.term();
    println!("{name}: leading in term {term}");
    let _ = led.send(());
    for batch in 1..=batches {
        tokio::select! {
            _ = leading.lost() => {
                println!("{name}: deposed in term {term}; stop writing");
                return Ok(());
            }
            _ = tokio::time::sleep(Duration::from_millis(50)) => {
                println!("{name}: batch {batch} written with term {term}");
            }
        }
    }
    leading.resign().await?;
    println!("{name}: resigned");
    Ok(())
}

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
    let (a, b) = (Client::connect(&url).await?, Client::connect(&url).await?);
    let watcher = Client::connect(&url).await?;
    let mut observer = watcher.election("billing").observe().await?;
    let observed = tokio::spawn(async move {
        // Nobody, the active one, the standby, nobody: four reports.
        for _ in 0..4 {
            match observer.changed().await {
                Ok(Some(now)) => println!("observer: {} leads (term {})", now.value, now.term),
                Ok(None) => println!("observer: nobody leads"),
                Err(e) => println!("observer: cannot follow: {e}"),
            }
        }
    });
    let (led, leads) = oneshot::channel();
    let active = tokio::spawn(worker(a.election("billing"), "active", 3, led));
    leads.await?;
    // The standby campaigns while the active one leads: it waits, and leads once the active
    // one resigned.
    let (led, _) = oneshot::channel();
    let standby = tokio::spawn(worker(b.election("billing"), "standby", 2, led));
    active.await??;
    standby.await??;
    tokio::time::timeout(Duration::from_secs(10), observed).await??;
    for client in [a, b, watcher] {
        client.close().await?;
    }
    Ok(())
}
