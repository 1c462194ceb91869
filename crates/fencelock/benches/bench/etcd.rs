//! The etcd rows: fencelock's `etcd://` service, plain `etcd-client` put+delete pairs and
//! etcd's own v3 lock service (the server-side `concurrency.Mutex` that `etcdctl lock` also
//! runs, client-side), against one throwaway member from the test kit, in the same run.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client as etcd;
use fencelock::Client;
use fencelock_testkit::etcd::metric_sum;
use fencelock_testkit::EtcdServer;
use serde_json::{json, Value};

/// Messages the server has received over gRPC: every unary request, and every message on a
/// stream (watch creations, keep-alives).
pub fn requests(server: &EtcdServer) -> u64 {
    let metrics = server.metrics().expect("etcd /metrics");
    metric_sum(&metrics, "grpc_server_msg_received_total", None) as u64
}

async fn raw_client(server: &EtcdServer) -> etcd::Client {
    let endpoint = format!("http://{}", server.endpoints());
    etcd::Client::connect([endpoint], None).await.unwrap()
}

/// Uncontended acquire+release through fencelock: pairs/s and server requests per pair.
async fn fencelock_pairs(server: &EtcdServer, secs: f64) -> (f64, f64) {
    let client = Client::connect(&server.url()).await.unwrap();
    let lock = client.lock("solo");
    lock.acquire().await.unwrap().release().await.unwrap();
    let before = requests(server);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (mut pairs, start) = (0u64, Instant::now());
    while Instant::now() < end {
        lock.acquire().await.unwrap().release().await.unwrap();
        pairs += 1;
    }
    let rate = pairs as f64 / start.elapsed().as_secs_f64();
    let sent = requests(server) - before;
    (rate, sent as f64 / pairs as f64)
}

/// A plain `put` + `delete` of one key with `etcd-client`: the least a lock can write.
async fn raw_pairs(server: &EtcdServer, secs: f64) -> (f64, f64) {
    let mut c = raw_client(server).await;
    let before = requests(server);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (mut pairs, start) = (0u64, Instant::now());
    while Instant::now() < end {
        c.put("/raw/key", "owner", None).await.unwrap();
        c.delete("/raw/key", None).await.unwrap();
        pairs += 1;
    }
    let rate = pairs as f64 / start.elapsed().as_secs_f64();
    let sent = requests(server) - before;
    (rate, sent as f64 / pairs as f64)
}

/// fencelock's two transactions sent with `etcd-client` alone (no library around them): the
/// key put under a lease if absent with reads of the key before it and the holder, then
/// deleted if it still has its create revision. The recipe's floor: fencelock's pair less this is the library's cost.
async fn recipe_pairs(server: &EtcdServer, secs: f64) -> (f64, f64) {
    use etcd::{Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp};
    let mut c = raw_client(server).await;
    let lease = c.lease_grant(60, None).await.unwrap().id();
    let (dir, key) = ("/recipe/solo/", format!("/recipe/solo/{lease:x}"));
    let end_of_queue = |order| {
        GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, order)
            .with_limit(1)
    };
    let (first, last) = (
        end_of_queue(SortOrder::Ascend),
        end_of_queue(SortOrder::Descend),
    );
    let before = requests(server);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (mut pairs, start) = (0u64, Instant::now());
    while Instant::now() < end {
        let put = TxnOp::put(
            key.as_str(),
            "owner",
            Some(PutOptions::new().with_lease(lease)),
        );
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::get(dir, Some(last.clone())),
                put,
                TxnOp::get(dir, Some(first.clone())),
            ])
            .or_else([TxnOp::get(key.as_str(), None)]);
        let reply = c.txn(txn).await.unwrap();
        let revision = reply.header().unwrap().revision();
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.as_str(),
                CompareOp::Equal,
                revision,
            )])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        assert!(c.txn(txn).await.unwrap().succeeded());
        pairs += 1;
    }
    let rate = pairs as f64 / start.elapsed().as_secs_f64();
    let sent = requests(server) - before;
    (rate, sent as f64 / pairs as f64)
}

/// etcd's v3 lock service (`Lock` / `Unlock` RPCs) with one lease: pairs/s.
async fn lock_service_pairs(server: &EtcdServer, secs: f64) -> (f64, f64) {
    let mut c = raw_client(server).await;
    let lease = c.lease_grant(60, None).await.unwrap().id();
    let options = etcd::LockOptions::new().with_lease(lease);
    let before = requests(server);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (mut pairs, start) = (0u64, Instant::now());
    while Instant::now() < end {
        let key = c.lock("/svc/solo", Some(options.clone())).await.unwrap();
        c.unlock(key.key()).await.unwrap();
        pairs += 1;
    }
    let rate = pairs as f64 / start.elapsed().as_secs_f64();
    let sent = requests(server) - before;
    (rate, sent as f64 / pairs as f64)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// 8 workers on one name through etcd's v3 lock service, each with a lease of its own (as
/// separate `etcdctl lock` processes would), holding ~1 ms: the figures of
/// `super::contended`.
async fn lock_service_contended(server: &EtcdServer, workers: usize, secs: f64) -> Value {
    let last_release: Arc<Mutex<Option<Instant>>> = Arc::default();
    let gaps = Arc::new(Mutex::new(Vec::new()));
    let waits = Arc::new(Mutex::new(Vec::new()));
    let before = requests(server);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut handles = Vec::new();
    for _ in 0..workers {
        let mut c = raw_client(server).await;
        let lease = c.lease_grant(60, None).await.unwrap().id();
        let (last_release, gaps, waits) = (last_release.clone(), gaps.clone(), waits.clone());
        handles.push(tokio::spawn(async move {
            let options = etcd::LockOptions::new().with_lease(lease);
            let mut mine = 0u64;
            while Instant::now() < end {
                let asked = Instant::now();
                let key = c.lock("/svc/one", Some(options.clone())).await.unwrap();
                let got = Instant::now();
                waits.lock().unwrap().push(got - asked);
                if let Some(r) = *last_release.lock().unwrap() {
                    gaps.lock().unwrap().push(got.saturating_duration_since(r));
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                *last_release.lock().unwrap() = Some(Instant::now());
                c.unlock(key.key()).await.unwrap();
                mine += 1;
            }
            mine
        }));
    }
    let mut per_worker = Vec::new();
    for h in handles {
        per_worker.push(h.await.unwrap());
    }
    let acquisitions: u64 = per_worker.iter().sum();
    let sent = requests(server) - before;
    let (mut gaps, mut waits) = (gaps.lock().unwrap().clone(), waits.lock().unwrap().clone());
    gaps.sort();
    waits.sort();
    json!({
        "workers": workers,
        "acquisitions_per_sec": acquisitions as f64 / secs,
        "per_worker_min": per_worker.iter().min(),
        "per_worker_max": per_worker.iter().max(),
        "handoff_gap_p50_us": percentile(&gaps, 0.5),
        "handoff_gap_p99_us": percentile(&gaps, 0.99),
        "wait_p99_us": percentile(&waits, 0.99),
        "requests_per_acquisition": sent as f64 / acquisitions as f64,
        "overlaps": "not checked",
    })
}

/// How many turns each uncontended contender takes.
const ROUNDS: usize = 7;

/// Every etcd figure on one member (etcd fsyncs its log on every write; 3.4 has no switch).
pub fn run(multi: &tokio::runtime::Runtime, single: &tokio::runtime::Runtime, secs: f64) -> Value {
    let server = EtcdServer::start().expect("etcd server");
    // Rounds of fencelock, the raw client, the recipe alone and the lock service taking
    // turns (the disk's noise hits them alike): medians of the per-round figures.
    let mut rounds = Vec::new();
    let each = secs / ROUNDS as f64;
    for _ in 0..ROUNDS {
        let (raw, raw_requests) = single.block_on(raw_pairs(&server, each));
        let (solo, solo_requests) = single.block_on(fencelock_pairs(&server, each));
        let (recipe, _) = single.block_on(recipe_pairs(&server, each));
        let (svc, svc_requests) = single.block_on(lock_service_pairs(&server, each));
        rounds.push(json!({
            "pairs_per_sec": solo,
            "requests_per_pair": solo_requests,
            "raw_put_delete_pairs_per_sec": raw,
            "raw_put_delete_requests_per_pair": raw_requests,
            "recipe_pairs_per_sec": recipe,
            "lock_service_pairs_per_sec": svc,
            "lock_service_requests_per_pair": svc_requests,
            "ratio_to_raw_put_delete": solo / raw,
            "ratio_to_recipe": solo / recipe,
            "ratio_to_lock_service": solo / svc,
        }));
    }
    let median = |key: &str| {
        let mut v: Vec<f64> = rounds.iter().map(|r| r[key].as_f64().unwrap()).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let url = server.url();
    let count = || requests(&server);
    let one_client = multi.block_on(super::contended(&url, &count, 8, 1, secs));
    let eight_clients = multi.block_on(super::contended(&url, &count, 8, 8, secs));
    let service = multi.block_on(lock_service_contended(&server, 8, secs));
    json!({
        "server": "etcd 3.4 (Debian etcd-server), one member, fsync on",
        "uncontended": {
            "pairs_per_sec": median("pairs_per_sec"),
            "requests_per_pair": median("requests_per_pair"),
            "raw_put_delete_pairs_per_sec": median("raw_put_delete_pairs_per_sec"),
            "raw_put_delete_requests_per_pair": median("raw_put_delete_requests_per_pair"),
            "ratio_to_raw_put_delete": median("ratio_to_raw_put_delete"),
            "lock_service_pairs_per_sec": median("lock_service_pairs_per_sec"),
            "lock_service_requests_per_pair": median("lock_service_requests_per_pair"),
            "recipe_pairs_per_sec": median("recipe_pairs_per_sec"),
            "ratio_to_recipe": median("ratio_to_recipe"),
            "ratio_to_lock_service": median("ratio_to_lock_service"),
        },
        "contended_8_workers_1_client": one_client,
        "contended_8_workers_8_clients": eight_clients,
        "lock_service_contended_8_workers": service,
        "rounds": rounds,
    })
}

/// The etcd section of docs/PERFORMANCE.md.
pub fn markdown(e: &Value) -> String {
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let u = &e["uncontended"];
    let rounds = |key: &str| -> String {
        let each: Vec<String> = e["rounds"]
            .as_array()
            .map(|a| a.iter().map(|r| format!("{:.2}", f(&r[key]))).collect())
            .unwrap_or_default();
        each.join(", ")
    };
    let row = |label: &str, c: &Value| {
        format!(
            "| {label} | {:.0} | {:.0} / {:.0} | {:.0} | {} – {} | {:.2} | {} |",
            f(&c["acquisitions_per_sec"]),
            f(&c["handoff_gap_p50_us"]),
            f(&c["handoff_gap_p99_us"]),
            f(&c["wait_p99_us"]),
            c["per_worker_min"],
            c["per_worker_max"],
            f(&c["requests_per_acquisition"]),
            c["overlaps"].as_u64().map_or("–".into(), |o| o.to_string()),
        )
    };
    format!(
        "## etcd (`etcd://`, one member from the test kit)\n\n\
Debian's etcd 3.4.23, one member on the same machine, started by the test kit (50 ms\n\
heartbeat); it fsyncs its write-ahead log on every write (3.4 has no switch to turn that\n\
off), so each write costs a disk flush. Requests are counted on the server: the sum of\n\
`grpc_server_msg_received_total` from `/metrics` before and after the measured loop (every\n\
unary request, and every message on a stream: a watch's creation, a keep-alive). Raw pairs\n\
use `etcd-client` directly: a `put` and a `delete` of one key. The lock service is etcd's\n\
v3 `Lock`/`Unlock` RPCs, which run etcd's `concurrency.Mutex` inside the server (the same\n\
recipe as `etcdctl lock`, watching the predecessor from a past revision).\n\n\
### Uncontended acquire + release (one task, one client, current-thread runtime)\n\n\
| measure | value |\n|---|---|\n\
| pairs/s | {p:.0} |\n\
| server requests per pair | {r:.2} |\n\
| raw `put` + `delete` pairs/s (requests per pair) | {raw:.0} ({rawr:.2}) |\n\
| **ratio to raw `put` + `delete`** (median of {n} rounds) | **{ratio:.2}** (rounds: {raw_rounds}) |\n\
| the recipe's two transactions sent with `etcd-client` alone, pairs/s | {recipe:.0} |\n\
| ratio to the recipe alone (the library's own cost) | {recipe_ratio:.2} (rounds: {recipe_rounds}) |\n\
| etcd lock service `Lock` + `Unlock` pairs/s (requests per pair) | {svc:.0} ({svcr:.2}) |\n\
| **ratio to the lock service** (median of {n} rounds) | **{svc_ratio:.2}** (rounds: {svc_rounds}) |\n\n\
### Contention: 8 workers on one lock, each holding it ~1 ms\n\n\
Measured as for Redis above (handoff gap from the release being sent to the next acquire\n\
returning). The lock service: 8 tasks, each with a client and a lease of its own.\n\n\
| setup | acquisitions/s | handoff gap p50 / p99 (µs) | wait p99 (µs) | acquisitions per worker (min – max) | requests / acquisition | overlaps |\n\
|---|---|---|---|---|---|---|\n{c1}\n{c8}\n{cs}\n\n\
Reading these rows:\n\
- **Uncontended**, fencelock sends what a raw `put` + `delete` sends (2 requests per pair:\n  \
one transaction that puts the key and reads the holder, one compare-and-delete), and etcd\n  \
fsyncs once per write either way: {ratio:.2} of the raw pair, {svc_ratio:.2} of etcd's lock service.\n  \
The lock service runs its recipe inside the server and deletes without a compare; the\n  \
recipe row sends fencelock's transactions from a bare client, so the rest is the library's.\n\
- **Contention, one client**: the client's other owners wait in the client for its key (one\n  \
key per lease and lock), so a handoff is a local wake-up, a delete and a put.\n\
- **Contention, 8 clients**: a waiter sends its put (which also reads its predecessor), a\n  \
watch, the predecessor's re-read once the watch is confirmed, one placement read after the\n  \
predecessor's deletion, and its release (5 requests); the gap is the release's fsync, the\n  \
watch event and one read. etcd's lock service (like `etcdctl lock`) watches the predecessor\n  \
from a past revision, which the server serves from its 100 ms catch-up loop.\n\
- Overlaps are counted by the workers in-process; the lock-service row does not count them.\n\n",
        p = f(&u["pairs_per_sec"]),
        r = f(&u["requests_per_pair"]),
        raw = f(&u["raw_put_delete_pairs_per_sec"]),
        rawr = f(&u["raw_put_delete_requests_per_pair"]),
        ratio = f(&u["ratio_to_raw_put_delete"]),
        n = e["rounds"].as_array().map_or(0, Vec::len),
        raw_rounds = rounds("ratio_to_raw_put_delete"),
        recipe = f(&u["recipe_pairs_per_sec"]),
        recipe_ratio = f(&u["ratio_to_recipe"]),
        recipe_rounds = rounds("ratio_to_recipe"),
        svc_rounds = rounds("ratio_to_lock_service"),
        svc = f(&u["lock_service_pairs_per_sec"]),
        svcr = f(&u["lock_service_requests_per_pair"]),
        svc_ratio = f(&u["ratio_to_lock_service"]),
        c1 = row("fencelock: 8 workers / 1 client", &e["contended_8_workers_1_client"]),
        c8 = row("fencelock: 8 workers / 8 clients", &e["contended_8_workers_8_clients"]),
        cs = row("etcd lock service: 8 workers / 8 leases", &e["lock_service_contended_8_workers"]),
    )
}
