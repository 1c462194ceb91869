//! The ZooKeeper rows: fencelock's `zk://` service, plain `zookeeper-client` and Curator
//! against one throwaway server from the test kit, in the same run as the Redis rows.

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use fencelock::Client;
use fencelock_testkit::{curator_bench, ZooKeeperServer};
use serde_json::{json, Value};
use zookeeper_client as zk;

/// Requests the server has received (`mntr`'s `zk_packets_received`: every request packet,
/// the session's connect request and pings included, and each `mntr` reading itself: the
/// difference of two readings is one more than the requests between them).
pub fn packets_received(server: &ZooKeeperServer) -> u64 {
    let mntr = server.four_letter("mntr").expect("mntr");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_packets_received"))
        .and_then(|v| v.trim().parse().ok())
        .expect("zk_packets_received in mntr")
}

/// How many slices each uncontended contender runs, taking turns: the noise of a shared
/// machine (a build on the other core) then hits all three alike, and the median of the
/// per-slice ratios is read.
const SLICES: usize = 15;

/// One timed slice: pairs/s and server requests per pair.
struct Slice {
    rate: f64,
    requests: f64,
}

/// Runs `pair` for `secs`, counting pairs and the server's requests.
async fn slice<F: std::future::Future<Output = ()>>(
    server: &ZooKeeperServer,
    secs: f64,
    mut pair: impl FnMut() -> F,
) -> Slice {
    let before = packets_received(server);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (mut pairs, start) = (0u64, Instant::now());
    while Instant::now() < end {
        pair().await;
        pairs += 1;
    }
    let rate = pairs as f64 / start.elapsed().as_secs_f64();
    let requests = packets_received(server) - before - 1;
    Slice {
        rate,
        requests: requests as f64 / pairs as f64,
    }
}

/// An ephemeral sequential node created and deleted with `zookeeper-client` alone (`list`:
/// with a listing of the folder sent right behind the create, the least a queue recipe can
/// send and wait for).
async fn raw_pair(client: &zk::Client, dir: &str, list: bool) {
    let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let prefix = format!("{dir}/n-");
    let created = client.create(&prefix, b"owner", &mode);
    let seq = if list {
        let listed = client.list_children(dir);
        tokio::try_join!(created, listed).unwrap().0 .1
    } else {
        created.await.unwrap().1
    };
    client
        .delete(&format!("{prefix}{seq}"), None)
        .await
        .unwrap();
}

/// Uncontended acquire+release through fencelock, beside raw `create`+`delete` and raw
/// `create`+`list`+`delete` pairs, in [`SLICES`] turns each: one JSON row per turn.
async fn uncontended(server: &ZooKeeperServer, secs: f64) -> Vec<Value> {
    let client = Client::connect(&server.url()).await.unwrap();
    let lock = client.lock("solo");
    // The lock's folder is created by the first pair: not measured.
    lock.acquire().await.unwrap().release().await.unwrap();
    let raw = zk::Client::connect(&server.connect_string()).await.unwrap();
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    for dir in ["/raw/listed", "/raw/plain"] {
        raw.mkdir(dir, &persistent).await.unwrap();
    }
    let each = secs / SLICES as f64;
    let mut rounds = Vec::new();
    for _ in 0..SLICES {
        let plain = slice(server, each, || raw_pair(&raw, "/raw/plain", false)).await;
        let listed = slice(server, each, || raw_pair(&raw, "/raw/listed", true)).await;
        let solo = slice(server, each, || async {
            lock.acquire().await.unwrap().release().await.unwrap();
        })
        .await;
        rounds.push(json!({
            "pairs_per_sec": solo.rate,
            "requests_per_pair": solo.requests,
            "raw_create_delete_pairs_per_sec": plain.rate,
            "raw_create_delete_requests_per_pair": plain.requests,
            "raw_create_list_delete_pairs_per_sec": listed.rate,
            "raw_create_list_delete_requests_per_pair": listed.requests,
            "ratio_to_raw_create_delete": solo.rate / plain.rate,
            "ratio_to_raw_create_list_delete": solo.rate / listed.rate,
        }));
    }
    client.close().await.unwrap();
    rounds
}

/// Runs `CuratorBench` on `server`: its `RESULT` fields, and the server requests counted
/// between its `READY` and its `RESULT`.
fn curator(server: &ZooKeeperServer, args: &[&str]) -> Result<(Value, u64), String> {
    let connect = server.connect_string();
    let mut all = vec![connect.as_str()];
    all.extend_from_slice(args);
    let mut child = curator_bench(&all)
        .map_err(|e| e.to_string())?
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = || -> Result<String, String> {
        match lines.next() {
            Some(Ok(l)) if l.starts_with("ERROR") => Err(l),
            Some(Ok(l)) => Ok(l),
            _ => Err("CuratorBench closed its output".into()),
        }
    };
    let ready = next()?;
    if ready != "READY" {
        return Err(format!("CuratorBench said {ready}"));
    }
    let before = packets_received(server);
    writeln!(stdin, "go").map_err(|e| e.to_string())?;
    let result = next()?;
    let requests = packets_received(server) - before - 1;
    let _ = writeln!(stdin, "exit");
    let _ = child.wait();
    let fields = result
        .strip_prefix("RESULT ")
        .ok_or(format!("CuratorBench said {result}"))?;
    let mut out = serde_json::Map::new();
    for kv in fields.split(' ') {
        if let Some((k, v)) = kv.split_once('=') {
            out.insert(k.into(), json!(v.parse::<f64>().unwrap_or(0.0)));
        }
    }
    Ok((Value::Object(out), requests))
}

/// Curator's uncontended pairs/s and requests per pair, or why not measured.
fn curator_pairs(server: &ZooKeeperServer, secs: f64) -> Value {
    match curator(server, &["solo", &secs.to_string()]) {
        Ok((r, requests)) => {
            let pairs = r["pairs"].as_f64().unwrap_or(0.0);
            json!({
                "pairs_per_sec": pairs / r["secs"].as_f64().unwrap_or(secs),
                "requests_per_pair": requests as f64 / pairs,
            })
        }
        Err(e) => json!({ "not_measured": e }),
    }
}

/// Curator's contention scenario (one client, `workers` threads, ~1 ms holds).
fn curator_contended(server: &ZooKeeperServer, workers: usize, secs: f64) -> Value {
    let workers = workers.to_string();
    match curator(server, &["contend", &secs.to_string(), &workers, "1000"]) {
        Ok((mut r, requests)) => {
            let acquisitions = r["acquisitions"].as_f64().unwrap_or(0.0);
            r["acquisitions_per_sec"] = json!(acquisitions / secs);
            r["requests_per_acquisition"] = json!(requests as f64 / acquisitions);
            r
        }
        Err(e) => json!({ "not_measured": e }),
    }
}

/// Every ZooKeeper figure on one server (`force_sync`: `forceSync=yes`, the durable default of
/// ZooKeeper, instead of the test kit's `forceSync=no`).
pub fn run(
    multi: &tokio::runtime::Runtime,
    single: &tokio::runtime::Runtime,
    secs: f64,
    force_sync: bool,
    curator_too: bool,
) -> Value {
    let mut builder = ZooKeeperServer::builder();
    if force_sync {
        builder = builder.config("forceSync", "yes");
    }
    let server = builder.start().expect("zookeeper server");
    // The library and the raw client taking turns, slice by slice: the median ratio.
    let rounds = single.block_on(uncontended(&server, secs));
    let median = |key: &str| {
        let mut v: Vec<f64> = rounds.iter().map(|r| r[key].as_f64().unwrap()).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let url = server.url();
    let count = || packets_received(&server);
    let one_client = multi.block_on(super::contended(&url, &count, 8, 1, secs));
    let eight_clients = multi.block_on(super::contended(&url, &count, 8, 8, secs));
    let (curator_solo, curator_contended) = if curator_too {
        (
            curator_pairs(&server, secs),
            curator_contended(&server, 8, secs),
        )
    } else {
        (json!(null), json!(null))
    };
    json!({
        "force_sync": force_sync,
        "uncontended": {
            "pairs_per_sec": median("pairs_per_sec"),
            "requests_per_pair": median("requests_per_pair"),
            "raw_create_delete_pairs_per_sec": median("raw_create_delete_pairs_per_sec"),
            "raw_create_delete_requests_per_pair": median("raw_create_delete_requests_per_pair"),
            "raw_create_list_delete_pairs_per_sec": median("raw_create_list_delete_pairs_per_sec"),
            "ratio_to_raw_create_delete": median("ratio_to_raw_create_delete"),
            "ratio_to_raw_create_list_delete": median("ratio_to_raw_create_list_delete"),
            "target_ratio": 0.9,
            "target_requests_per_pair": 3,
        },
        "contended_8_workers_1_client": one_client,
        "contended_8_workers_8_clients": eight_clients,
        "curator_uncontended": curator_solo,
        "curator_contended_8_workers": curator_contended,
        "rounds": rounds,
    })
}
