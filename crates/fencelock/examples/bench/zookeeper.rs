//! The ZooKeeper rows: fencelock's `zk://` service, plain `zookeeper-client` and Curator
//! against one throwaway server from the test kit, in the same run as the Redis rows.

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use fencelock::Client;
use fencelock_testkit::{curator_bench, ZooKeeperServer};
use serde_json::{json, Value};
use zookeeper_client as zk;

/// Requests the server has received (`mntr`'s `zk_packets_received`: every request packet,
/// the session's connect request and pings included; four-letter words are not counted).
pub fn packets_received(server: &ZooKeeperServer) -> u64 {
    let mntr = server.four_letter("mntr").expect("mntr");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_packets_received"))
        .and_then(|v| v.trim().parse().ok())
        .expect("zk_packets_received in mntr")
}

/// Uncontended acquire+release through fencelock: pairs/s and server requests per pair.
async fn fencelock_pairs(server: &ZooKeeperServer, secs: f64) -> (f64, f64) {
    let client = Client::connect(&server.url()).await.unwrap();
    let lock = client.lock("solo");
    // The lock's folder is created by the first pair: not measured.
    lock.acquire().await.unwrap().release().await.unwrap();
    let before = packets_received(server);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (mut pairs, start) = (0u64, Instant::now());
    while Instant::now() < end {
        lock.acquire().await.unwrap().release().await.unwrap();
        pairs += 1;
    }
    let rate = pairs as f64 / start.elapsed().as_secs_f64();
    let requests = packets_received(server) - before;
    (rate, requests as f64 / pairs as f64)
}

/// The same with `zookeeper-client` alone: an ephemeral sequential node created and deleted
/// (`list`: with a listing of the folder between, the least a queue recipe can send).
async fn raw_pairs(server: &ZooKeeperServer, secs: f64, list: bool) -> (f64, f64) {
    let client = zk::Client::connect(&server.connect_string()).await.unwrap();
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let dir = if list { "/raw/listed" } else { "/raw/plain" };
    client.mkdir(dir, &persistent).await.unwrap();
    let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let prefix = format!("{dir}/n-");
    let before = packets_received(server);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (mut pairs, start) = (0u64, Instant::now());
    while Instant::now() < end {
        let (_, seq) = client.create(&prefix, b"owner", &mode).await.unwrap();
        if list {
            client.list_children(dir).await.unwrap();
        }
        client
            .delete(&format!("{prefix}{seq}"), None)
            .await
            .unwrap();
        pairs += 1;
    }
    let rate = pairs as f64 / start.elapsed().as_secs_f64();
    let requests = packets_received(server) - before;
    (rate, requests as f64 / pairs as f64)
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
    let requests = packets_received(server) - before;
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
    // Three rounds, the library and the raw client taking turns: the median ratio.
    let mut rounds = Vec::new();
    for _ in 0..3 {
        let (raw, raw_requests) = single.block_on(raw_pairs(&server, secs / 3.0, false));
        let (raw3, raw3_requests) = single.block_on(raw_pairs(&server, secs / 3.0, true));
        let (solo, solo_requests) = single.block_on(fencelock_pairs(&server, secs / 3.0));
        rounds.push(json!({
            "pairs_per_sec": solo,
            "requests_per_pair": solo_requests,
            "raw_create_delete_pairs_per_sec": raw,
            "raw_create_delete_requests_per_pair": raw_requests,
            "raw_create_list_delete_pairs_per_sec": raw3,
            "raw_create_list_delete_requests_per_pair": raw3_requests,
            "ratio_to_raw_create_delete": solo / raw,
            "ratio_to_raw_create_list_delete": solo / raw3,
        }));
    }
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
