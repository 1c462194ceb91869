//! A short tour on a throwaway redis-server: contending workers, a holder that stalls past its
//! lease, and the fencing token that rejects its late write.
//!
//! `cargo run --release -p fencelock --example demo`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock::{Client, LockOptions};
use fencelock_testkit::RedisServer;

/// The protected resource: it accepts a write only with a token at least as high as the
/// highest it has seen, which is all it takes to be safe from a stale holder.
#[derive(Default)]
struct Record {
    value: u64,
    highest_token: u64,
    rejected: u64,
}

impl Record {
    fn write(&mut self, token: u64, value: u64) -> bool {
        if token < self.highest_token {
            self.rejected += 1;
            return false;
        }
        self.highest_token = token;
        self.value = value;
        true
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = RedisServer::start()?;
    println!(
        "redis-server started on {} (pid {:?})",
        server.url(),
        server.pid()
    );
    let record = Arc::new(Mutex::new(Record::default()));

    // 1. Four workers, each with its own client, increment the record under the lock.
    let inside = Arc::new(AtomicU64::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for w in 0..4 {
        let client = Client::connect(&server.url()).await?;
        let (record, inside, violations, tokens) = (
            record.clone(),
            inside.clone(),
            violations.clone(),
            tokens.clone(),
        );
        workers.push(tokio::spawn(async move {
            for _ in 0..25 {
                let guard = client.lock("demo:record").acquire().await.unwrap();
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    violations.fetch_add(1, Ordering::SeqCst);
                }
                let token = guard.fencing_token();
                let value = record.lock().unwrap().value;
                tokio::time::sleep(Duration::from_millis(1)).await;
                record.lock().unwrap().write(token, value + 1);
                tokens.lock().unwrap().push(token);
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
            w
        }));
    }
    for w in workers {
        w.await?;
    }
    let tokens = tokens.lock().unwrap().clone();
    let increasing = tokens.windows(2).all(|p| p[0] < p[1]);
    println!(
        "1. 4 workers x 25 updates: record = {}, overlaps = {}, tokens strictly increasing: {increasing}",
        record.lock().unwrap().value,
        violations.load(Ordering::SeqCst)
    );

    // 2. A holder with a 300 ms lease stalls for 1 s; another takes over; the late write loses.
    let slow = Client::connect(&server.url()).await?;
    let fast = Client::connect(&server.url()).await?;
    let opts = LockOptions::default().lease(Duration::from_millis(300));
    let stale = slow
        .lock("demo:record")
        .with_options(opts)
        .acquire()
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await; // the "GC pause"
    println!(
        "2. the stalled holder's lost-lock signal fired: {} ({})",
        !stale.is_held(),
        stale.lost_reason().unwrap_or("-")
    );
    let fresh = fast.lock("demo:record").acquire().await?;
    record.lock().unwrap().write(fresh.fencing_token(), 1000);
    let accepted = record.lock().unwrap().write(stale.fencing_token(), 666);
    println!(
        "   new holder token {} > stale token {}; the stale write was {}",
        fresh.fencing_token(),
        stale.fencing_token(),
        if accepted {
            "ACCEPTED (bug!)"
        } else {
            "rejected"
        }
    );
    fresh.release().await?;
    println!(
        "   the stale holder's release reports: {:?}",
        stale.release().await?
    );

    let r = record.lock().unwrap();
    let violations =
        violations.load(Ordering::SeqCst) + u64::from(accepted) + u64::from(!increasing);
    println!(
        "summary: value {}, stale writes rejected {}, violations: {violations}",
        r.value, r.rejected
    );
    if violations > 0 {
        std::process::exit(1);
    }
    Ok(())
}
