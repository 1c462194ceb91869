//! The etcd rows: fencelock's read, write and permit pairs/s against a raw `put` + `delete`
//! pair of `etcd-client` (the least a lock can write: as `bench/etcd.rs`), taking turns slice
//! by slice on one member of the test kit.

use fencelock::Client;
use fencelock_testkit::etcd::metric_sum;
use fencelock_testkit::EtcdServer;
use serde_json::{json, Value};

use super::{median, rate, Plan, Primitive};

/// The semaphore's N in the permit row.
const PERMITS: u32 = 3;
/// The least ratio to the raw pair the issue asks for.
const TARGET: f64 = 0.9;

/// Messages the server has received over gRPC (as `bench/etcd.rs` counts them).
fn requests(server: &EtcdServer) -> f64 {
    let metrics = server.metrics().expect("etcd /metrics");
    metric_sum(&metrics, "grpc_server_msg_received_total", None)
}

/// Pairs/s of `pair` over `secs`, and the server's requests per pair.
async fn counted<F: std::future::Future<Output = ()>>(
    server: &EtcdServer,
    secs: f64,
    pair: impl FnMut() -> F,
) -> (f64, f64) {
    let before = requests(server);
    let rate = rate(secs, pair).await;
    let sent = requests(server) - before;
    (rate, sent / (rate * secs))
}

/// Every etcd row on one member of the test kit.
pub async fn run(plan: Plan) -> Value {
    let server = EtcdServer::start().expect("etcd");
    let client = Client::connect(&server.url()).await.unwrap();
    let endpoint = format!("http://{}", server.endpoints());
    let raw = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    // The mutex pair is measured too, for comparison (it has no target here).
    let kinds = [
        Primitive::Mutex,
        Primitive::Read,
        Primitive::Write,
        Primitive::Permit(PERMITS),
    ];
    let takers: Vec<_> = kinds
        .iter()
        .map(|p| p.taker(&client, &format!("solo-{}", p.label()), None))
        .collect();
    for t in &takers {
        rate(0.3, || t.pair()).await;
    }
    let raw_pair = || {
        let mut c = raw.clone();
        async move {
            c.put("/raw/key", "owner", None).await.unwrap();
            c.delete("/raw/key", None).await.unwrap();
        }
    };
    rate(0.3, raw_pair).await;
    let (mut raws, mut raw_requests) = (Vec::new(), Vec::new());
    let mut ours: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
    let mut sent: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
    for slice in 0..plan.slices {
        // The reference's place in the round moves each slice, so that no row always
        // follows it.
        let at = slice % (kinds.len() + 1);
        let mut round = Vec::new();
        for turn in 0..=kinds.len() {
            if turn == at {
                let (reference, requests) = counted(&server, plan.slice_secs, raw_pair).await;
                raws.push(reference);
                raw_requests.push(requests);
            } else {
                let t = &takers[if turn < at { turn } else { turn - 1 }];
                round.push(counted(&server, plan.slice_secs, || t.pair()).await);
            }
        }
        let reference = raws[raws.len() - 1];
        for (i, (r, requests)) in round.into_iter().enumerate() {
            ours[i].push(r);
            sent[i].push(requests);
            ratios[i].push(r / reference);
        }
    }
    client.close().await.unwrap();
    let mut rows = serde_json::Map::new();
    for (i, p) in kinds.iter().enumerate() {
        let ratio = median(ratios[i].clone());
        rows.insert(
            p.label().into(),
            json!({
                "pairs_per_sec": median(ours[i].clone()),
                "requests_per_pair": median(sent[i].clone()),
                "ratio": ratio,
                "met": ratio >= TARGET,
                "slices": ratios[i],
            }),
        );
    }
    json!({
        "raw_put_delete_pairs_per_sec": median(raws),
        "raw_put_delete_requests_per_pair": median(raw_requests),
        "target_ratio": TARGET,
        "permits": PERMITS,
        "rows": rows,
    })
}
