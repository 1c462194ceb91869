//! A cron job guard: the nightly report runs on one machine at a time. An instance started
//! while another runs skips its turn at once, and a job that loses the lock stops.
//!
//! `cargo run -p fencelock --example cron_guard [URL]` (no URL: a throwaway redis-server).

use std::time::Duration;

use fencelock::{Client, Lock};
use fencelock_testkit::RedisServer;

/// The job: three steps, abandoned (false) if the lock is lost meanwhile.
async fn nightly_report(guard: &fencelock::Guard) -> bool {
    for step in 1..=3 {
        tokio::select! {
            _ = guard.lost() => return false,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                println!("  step {step}/3 (fencing token {})", guard.fencing_token());
            }
        }
    }
    true
}

/// One cron run: the job if the lock is free, nothing if another instance holds it.
async fn cron_run(lock: &Lock, who: &str) -> fencelock::Result<()> {
    match lock.try_acquire().await? {
        Err(busy) => println!("{who}: skipped, the job runs elsewhere ({busy:?})"),
        Ok(guard) => {
            println!("{who}: running the nightly report");
            let done = nightly_report(&guard).await;
            println!(
                "{who}: {}",
                if done { "done" } else { "lock lost, stopped" }
            );
            guard.release().await?;
        }
    }
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
    let client = Client::connect(&url).await?;
    // Two instances of the job: two handles, two owners (two machines in real life).
    let (first, second) = (client.lock("nightly-report"), client.lock("nightly-report"));
    let running = tokio::spawn({
        let first = first.clone();
        async move { cron_run(&first, "instance A").await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    cron_run(&second, "instance B").await?; // A holds the lock: B skips
    running.await??;
    cron_run(&second, "instance B, next night").await?; // free again: B runs
    client.close().await?;
    Ok(())
}
