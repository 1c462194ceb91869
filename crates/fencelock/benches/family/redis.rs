//! The Redis rows: the server time of an uncontended read pair and permit pair against the
//! mutex pair's (`INFO commandstats`, reset before each slice, the three taking turns), and 8
//! workers (8 clients) on a semaphore of 3: utilisation and spread.

use std::time::{Duration, Instant};

use fencelock::Client;
use fencelock_testkit::RedisServer;
use redis::aio::MultiplexedConnection;
use serde_json::{json, Value};

use super::{contend, median, Hold, Plan, Primitive};

/// The semaphore's N in every Redis row.
const PERMITS: u32 = 3;
/// Contending workers (one client each).
const WORKERS: usize = 8;

/// The server's time (µs) spent in commands since the last `CONFIG RESETSTAT`, less the
/// bench's own `INFO` and `CONFIG`.
async fn server_usec(c: &mut MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await
        .unwrap();
    let mut usec = 0.0;
    for line in info.lines() {
        let Some((name, fields)) = line.split_once(':') else {
            continue;
        };
        if !name.starts_with("cmdstat_")
            || name == "cmdstat_info"
            || name.starts_with("cmdstat_config")
        {
            continue;
        }
        let value = fields.split(',').find_map(|f| f.strip_prefix("usec="));
        usec += value.and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    }
    usec
}

async fn reset(c: &mut MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(c)
        .await
        .unwrap();
}

/// Server µs per uncontended pair of `p`, over one slice of `secs`.
async fn slice(c: &mut MultiplexedConnection, taker: &super::Taker, secs: f64) -> f64 {
    reset(c).await;
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut pairs = 0u64;
    while Instant::now() < end {
        taker.pair().await;
        pairs += 1;
    }
    server_usec(c).await / pairs as f64
}

/// The mutex, read and permit pairs' server time, taking turns slice by slice.
async fn server_time(server: &RedisServer, client: &Client, plan: Plan) -> Value {
    let raw = redis::Client::open(server.url()).unwrap();
    let mut c = raw.get_multiplexed_async_connection().await.unwrap();
    let kinds = [
        Primitive::Mutex,
        Primitive::Read,
        Primitive::Permit(PERMITS),
    ];
    let takers: Vec<_> = kinds
        .iter()
        .map(|p| p.taker(client, &format!("solo-{}", p.label()), None))
        .collect();
    for t in &takers {
        super::rate(0.3, || t.pair()).await;
    }
    let mut per_pair: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
    let (mut read_ratio, mut permit_ratio) = (Vec::new(), Vec::new());
    for _ in 0..plan.slices {
        let mut this = Vec::new();
        for (i, t) in takers.iter().enumerate() {
            let us = slice(&mut c, t, plan.slice_secs).await;
            per_pair[i].push(us);
            this.push(us);
        }
        read_ratio.push(this[1] / this[0]);
        permit_ratio.push(this[2] / this[0]);
    }
    let (read, permit) = (median(read_ratio.clone()), median(permit_ratio.clone()));
    json!({
        "mutex_pair_server_us": median(per_pair[0].clone()),
        "read_pair_server_us": median(per_pair[1].clone()),
        "permit_pair_server_us": median(per_pair[2].clone()),
        "read_ratio": read,
        "permit_ratio": permit,
        "target_ratio": 1.2,
        "read_met": read <= 1.2,
        "permit_met": permit <= 1.2,
        "slices": { "read_ratio": read_ratio, "permit_ratio": permit_ratio },
    })
}

/// [`WORKERS`] workers, one client each, on `p` (a semaphore of [`PERMITS`], or the mutex
/// for comparison), holding `hold` asleep (spinning would take the machine's 2 cores from the
/// server and the clients).
async fn utilisation(server: &RedisServer, p: Primitive, hold: Duration, secs: f64) -> Value {
    let mut clients = Vec::new();
    for _ in 0..WORKERS {
        clients.push(Client::connect(&server.url()).await.unwrap());
    }
    let name = format!("busy-{}-{}", p.label(), hold.as_micros());
    let capacity = match p {
        Primitive::Permit(n) => n,
        _ => 1,
    };
    let takers: Vec<_> = clients.iter().map(|c| p.taker(c, &name, Some(1))).collect();
    let (limit, hold_as) = (u64::from(capacity), Hold::Sleep(hold));
    contend(takers.clone(), limit, false, hold_as, 0.5).await;
    let run = contend(takers, limit, false, hold_as, secs).await;
    for c in clients {
        c.close().await.unwrap();
    }
    let utilisation = run.busy_holders / f64::from(capacity);
    let (min, max) = (
        *run.per_worker.iter().min().unwrap_or(&0),
        *run.per_worker.iter().max().unwrap_or(&0),
    );
    let spread = max as f64 / min.max(1) as f64;
    json!({
        "primitive": p.label(),
        "holders": capacity,
        "hold_ms": hold.as_secs_f64() * 1e3,
        "secs": secs,
        "utilisation": utilisation,
        "per_worker": run.per_worker,
        "fifo_max_over_min": spread,
        "gap_p50_us": run.gap_p50_us,
        "gap_p99_us": run.gap_p99_us,
        "overlaps": run.overlaps,
        "utilisation_met": utilisation >= 0.95,
        "fifo_met": spread <= 1.05,
    })
}

/// The probe (does the service offer the family?) and the server time, on `client`.
async fn uncontended(server: &RedisServer, plan: Plan) -> Result<Value, Value> {
    let client = Client::connect(&server.url()).await.unwrap();
    for probe in [Primitive::Read, Primitive::Permit(PERMITS)] {
        let taker = probe.taker(&client, &format!("probe-{}", probe.label()), None);
        if let Err(e) = taker.take().await {
            client.close().await.unwrap();
            return Err(json!({ "not_measured": format!("{}: {e}", probe.label()) }));
        }
        // The probe's guard was dropped: its release runs in the background.
    }
    let time = server_time(server, &client, plan).await;
    client.close().await.unwrap();
    Ok(time)
}

/// Every Redis row on one server of the test kit (uncontended on the current-thread runtime
/// `single`, as `bench.rs` measures the mutex), or why not measured (a service that refuses
/// read-write locks or semaphores).
pub fn run(multi: &tokio::runtime::Runtime, single: &tokio::runtime::Runtime, plan: Plan) -> Value {
    let server = RedisServer::start().expect("redis-server");
    let time = match single.block_on(uncontended(&server, plan)) {
        Ok(time) => time,
        Err(why) => return why,
    };
    let secs = plan.contend_secs * plan.contend_slices as f64;
    let mut busy = Vec::new();
    let semaphore = Primitive::Permit(PERMITS);
    for hold in [Duration::from_millis(10), Duration::from_millis(1)] {
        busy.push(multi.block_on(utilisation(&server, semaphore, hold, secs)));
    }
    // The mutex under the same load, for comparison (no target).
    let hold = Duration::from_millis(10);
    busy.push(multi.block_on(utilisation(&server, Primitive::Mutex, hold, secs)));
    json!({
        "permits": PERMITS,
        "workers": WORKERS,
        "server_time": time,
        "semaphore_of_3": busy,
    })
}
