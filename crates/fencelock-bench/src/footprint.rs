//! What a run leaves on the server (issue 27): `names` lock names, each taken and released once
//! by fencelock with a short fence horizon. The server's key count and `used_memory` on the
//! empty server, right after the run, and once the horizon has passed: no key lives forever,
//! so the server is back to the empty server's (within 1 %).

use std::time::{Duration, Instant};

use fencelock::{Client, ClientOptions, LockOptions};
use fencelock_testkit::RedisServer;
use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::libs::LEASE;

/// The fence horizon of the run: short, so that the row does not wait a day.
pub const HORIZON: Duration = Duration::from_secs(3);

/// Lock names taken at once.
const CONCURRENCY: usize = 64;

/// The server's key count and `used_memory` (bytes).
fn footprint(server: &RedisServer) -> (i64, i64) {
    let keys = server
        .command(&["DBSIZE"])
        .ok()
        .and_then(|r| r.int())
        .unwrap_or(-1);
    let info = server
        .command(&["INFO", "memory"])
        .ok()
        .and_then(|r| r.text())
        .unwrap_or_default();
    let memory = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(-1);
    (keys, memory)
}

/// Takes and releases `names` lock names once each; returns the footprints.
pub async fn measure(server: &RedisServer, names: usize) -> Value {
    let options = ClientOptions::default().fence_horizon(HORIZON);
    let client = Client::connect_with(&server.url(), options)
        .await
        .expect("connect");
    // The empty server as the run finds it: this client connected, its scripts loaded.
    let warm = client
        .lock("footprint:warm-up")
        .acquire()
        .await
        .expect("acquire");
    warm.release().await.expect("release");
    server.command(&["FLUSHALL"]).expect("FLUSHALL");
    // Idle as long as the server will be before the last measure (its cron shrinks idle
    // clients' buffers after 2 s).
    tokio::time::sleep(HORIZON).await;
    let empty = footprint(server);
    let started = Instant::now();
    futures_util::stream::iter(0..names)
        .for_each_concurrent(CONCURRENCY, |i| {
            let lock = client
                .lock(&format!("footprint:{i}"))
                .with_options(LockOptions::default().lease(LEASE));
            async move {
                let guard = lock.acquire().await.expect("acquire");
                guard.release().await.expect("release");
            }
        })
        .await;
    let took = started.elapsed();
    let during = footprint(server);
    // Expired keys go in the server's active expiry cycles: wait for the horizon, then (bounded)
    // for the last of them.
    tokio::time::sleep(HORIZON).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut after = footprint(server);
    while after.0 != 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        after = footprint(server);
    }
    let _ = client.close().await;
    json!({
        "names": names,
        "horizon_secs": HORIZON.as_secs_f64(),
        "pairs_per_sec": names as f64 / took.as_secs_f64(),
        "empty": {"keys": empty.0, "used_memory": empty.1},
        "during": {"keys": during.0, "used_memory": during.1},
        "after_horizon": {"keys": after.0, "used_memory": after.1},
        "after_over_empty": after.1 as f64 / empty.1 as f64,
    })
}
