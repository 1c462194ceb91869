use std::time::{Duration, Instant};
use fencelock::Client;
use fencelock_testkit::ZooKeeperServer;
use zookeeper_client as zk;

async fn slice<F: std::future::Future<Output = ()>>(secs: f64, mut f: impl FnMut() -> F) -> f64 {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (mut n, start) = (0u64, Instant::now());
    while Instant::now() < end { f().await; n += 1; }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let fsync = std::env::args().nth(1).is_some();
    let mut b = ZooKeeperServer::builder();
    if fsync { b = b.config("forceSync", "yes"); }
    let server = b.start().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = Client::connect(&server.url()).await.unwrap();
        let lock = client.lock("solo");
        lock.acquire().await.unwrap().release().await.unwrap();
        let raw = zk::Client::connect(&server.connect_string()).await.unwrap();
        let p = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        raw.mkdir("/raw/a", &p).await.unwrap();
        let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let mut r = vec![vec![]; 4];
        for _ in 0..20 {
            let a = slice(0.3, || async {
                let (_, s) = raw.create("/raw/a/n-", b"o", &mode).await.unwrap();
                raw.delete(&format!("/raw/a/n-{s}"), None).await.unwrap();
            }).await;
            let b = slice(0.3, || async {
                let c = raw.create("/raw/a/n-", b"o", &mode);
                let l = raw.list_and_watch_children("/raw/a");
                let ((_, s), (_, w)) = tokio::try_join!(c, l).unwrap();
                raw.delete(&format!("/raw/a/n-{s}"), None).await.unwrap();
                w.changed().await;
            }).await;
            let c = slice(0.3, || async {
                let c = raw.create("/raw/a/n-", b"o", &mode);
                let l = raw.list_children("/raw/a");
                let ((_, s), _) = tokio::try_join!(c, l).unwrap();
                raw.delete(&format!("/raw/a/n-{s}"), None).await.unwrap();
            }).await;
            let d = slice(0.3, || async { lock.acquire().await.unwrap().release().await.unwrap(); }).await;
            r[0].push(a); r[1].push(b/a); r[2].push(c/a); r[3].push(d/a);
        }
        for (name, v) in ["raw c+d", "pipelined c+lw+d (ratio)", "pipelined c+l+d (ratio)", "fencelock (ratio)"].iter().zip(r.iter_mut()) {
            v.sort_by(f64::total_cmp);
            println!("{name}: median {:.2} [{:.2} .. {:.2}]", v[v.len()/2], v[v.len()/4], v[3*v.len()/4]);
        }
    });
}
