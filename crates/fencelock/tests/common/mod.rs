//! Shared helpers: a fresh real server per test, clients, raw connections.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use fencelock::{Client, ClientOptions};
use fencelock_testkit::RedisServer;

pub fn server() -> RedisServer {
    RedisServer::start().expect("start redis-server")
}

pub async fn client(server: &RedisServer) -> Client {
    Client::connect(&server.url()).await.expect("connect")
}

pub async fn client_with(server: &RedisServer, options: ClientOptions) -> Client {
    Client::connect_with(&server.url(), options)
        .await
        .expect("connect")
}

/// Options for tests that wait on leases: short, so that the tests stay short.
pub fn short_lease(ms: u64) -> ClientOptions {
    ClientOptions::default().default_lease(Duration::from_millis(ms))
}

pub async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Awaits `f` for at most `secs` seconds, failing the test with `what` otherwise.
pub async fn within<T>(secs: f64, what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs_f64(secs), f)
        .await
        .unwrap_or_else(|_| panic!("timed out after {secs} s: {what}"))
}

/// Polls `check` (a server-side condition) until it holds, for at most `secs` seconds.
pub async fn eventually(secs: f64, what: &str, mut check: impl FnMut() -> bool) {
    within(secs, what, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// `n` independent servers, for RedLock.
pub fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| server()).collect()
}

pub async fn redlock(servers: &[RedisServer], options: ClientOptions) -> Client {
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    Client::connect_all_with(&urls, options)
        .await
        .expect("connect RedLock")
}

/// Whether the lock key exists on this server.
pub fn has_key(server: &RedisServer, name: &str) -> bool {
    let key = format!("fencelock:{{{name}}}");
    server.command(&["EXISTS", &key]).ok().and_then(|r| r.int()) == Some(1)
}

/// A client's warnings after asking for lease `asked` and being granted `granted` (a
/// ZooKeeper session timeout, an etcd TTL): none when they match, else one naming both.
pub fn assert_lease_reported(warnings: &[fencelock::Warning], asked: Duration, granted: Duration) {
    if asked == granted {
        assert!(warnings.is_empty(), "{warnings:?}");
        return;
    }
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = &warnings[0].to_string();
    assert!(
        w.contains(&format!("{granted:?}")) && w.contains(&format!("{asked:?}")),
        "the warning names the lease granted and the one asked for: {w}"
    );
}

/// Whether `owner` has a field (holds) in lock `name`'s hash on `server`.
pub fn granted_to(server: &RedisServer, name: &str, owner: &str) -> bool {
    let key = format!("fencelock:{{{name}}}");
    server.command(&["HEXISTS", &key, owner]).unwrap().int() == Some(1)
}

/// The length of lock `name`'s wait queue on `server` (its list of waiting owners), -1 when it
/// cannot be read (the server is down).
pub fn queue_len(server: &RedisServer, name: &str) -> i64 {
    let key = format!("fencelock:{{{name}}}:queue");
    server
        .command(&["LLEN", &key])
        .ok()
        .and_then(|r| r.int())
        .unwrap_or(-1)
}

/// The server's clock in microseconds, as the scripts read it.
pub fn server_micros(server: &RedisServer) -> u64 {
    match server.command(&["TIME"]).unwrap() {
        fencelock_testkit::Reply::Array(Some(t)) => {
            let secs: u64 = t[0].text().unwrap().parse().unwrap();
            let micros: u64 = t[1].text().unwrap().parse().unwrap();
            secs * 1_000_000 + micros
        }
        other => panic!("TIME replied {other:?}"),
    }
}

/// A client of `url` whose lease (`default_lease`: a ZooKeeper session timeout, an etcd TTL) is
/// `ms`.
pub async fn client_at(url: &str, ms: u64) -> Client {
    Client::connect_with(url, short_lease(ms))
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// Lock `name`'s children on ZooKeeper (`connect_string`), in sequence order, each with the
/// session that owns it (`ephemeralOwner`), read with a raw client (not the library under
/// test).
pub async fn zk_children(connect_string: &str, name: &str) -> Vec<(String, i64)> {
    zk_children_of(&zk_raw(connect_string).await, name).await
}

/// A raw ZooKeeper client (not the library under test), with a 20 s session.
pub async fn zk_raw(connect_string: &str) -> zookeeper_client::Client {
    zookeeper_client::Client::connector()
        .with_session_timeout(Duration::from_secs(20))
        .connect(connect_string)
        .await
        .expect("raw ZooKeeper client")
}

/// [`zk_children`] through a raw client already connected.
pub async fn zk_children_of(zk: &zookeeper_client::Client, name: &str) -> Vec<(String, i64)> {
    let dir = format!("/fencelock/{name}");
    let mut names = match zk.list_children(&dir).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list children of {dir}: {e}"),
    };
    names.sort_by_key(|n| n.rsplit('-').next().map(str::to_owned));
    let mut children = Vec::new();
    for name in names {
        match zk.check_stat(&format!("{dir}/{name}")).await {
            // A semaphore's folders (Curator's `InterProcessSemaphoreV2`): their children are
            // its entries; the empty containers themselves go with the server's reaper.
            Ok(Some(stat))
                if stat.ephemeral_owner == 0 && ["leases", "locks"].contains(&&*name) =>
            {
                children.extend(sub_children(zk, &format!("{dir}/{name}"), &name).await);
            }
            Ok(Some(stat)) => children.push((name, stat.ephemeral_owner)),
            Ok(None) => {}
            Err(e) => panic!("stat of {dir}/{name}: {e}"),
        }
    }
    children
}

/// The nodes in folder `dir` (named `<folder>/<node>`) with their sessions.
async fn sub_children(
    zk: &zookeeper_client::Client,
    dir: &str,
    folder: &str,
) -> Vec<(String, i64)> {
    let names = match zk.list_children(dir).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list children of {dir}: {e}"),
    };
    let mut children = Vec::new();
    for name in names {
        if let Ok(Some(stat)) = zk.check_stat(&format!("{dir}/{name}")).await {
            children.push((format!("{folder}/{name}"), stat.ephemeral_owner));
        }
    }
    children
}

/// Lock `name`'s keys on etcd (`endpoints`, comma-separated): (key, create revision, lease),
/// read with a raw client (not the library under test).
pub async fn etcd_keys(endpoints: &str, name: &str) -> Vec<(String, i64, i64)> {
    let mut c = etcd_raw(endpoints).await;
    let prefix = format!("/fencelock/{name}/");
    let got = c
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .expect("get the lock's keys");
    got.kvs()
        .iter()
        .map(|kv| {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            (key, kv.create_revision(), kv.lease())
        })
        .collect()
}

/// The etcd lease `lease` as the server has it: (remaining TTL, granted TTL) in seconds, a
/// remaining TTL of -1 when there is no such lease (revoked or expired); read with a raw
/// client (not the library under test).
pub async fn etcd_lease_ttl(endpoints: &str, lease: i64) -> (i64, i64) {
    let got = etcd_raw(endpoints)
        .await
        .lease_time_to_live(lease, None)
        .await
        .expect("the lease's TTL");
    (got.ttl(), got.granted_ttl())
}

/// A raw etcd client (not the library under test) of `endpoints`, comma-separated.
pub async fn etcd_raw(endpoints: &str) -> etcd_client::Client {
    let eps: Vec<String> = endpoints
        .split(',')
        .map(|e| format!("http://{e}"))
        .collect();
    etcd_client::Client::connect(eps, None)
        .await
        .expect("raw etcd client")
}

/// Waits until lock `name` shows `holders` holders and `waiters` waiters (bounded).
pub async fn until_queue(client: &Client, name: &str, holders: usize, waiters: usize) {
    let what = format!("{name}: {holders} holders and {waiters} waiters");
    within(10.0, &what, async {
        loop {
            let status = client.status(name).await.unwrap();
            if status.owners.len() == holders && status.waiters.len() == waiters {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// Waits until lock `name` shows `n` holders and waiters together (bounded).
pub async fn until_listed(client: &Client, name: &str, n: usize) {
    within(10.0, &format!("{name}: {n} holders and waiters"), async {
        loop {
            let status = client.status(name).await.unwrap();
            if status.owners.len() + status.waiters.len() == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// Whether a side of read-write lock `name` is busy for a new owner of `client` right now.
pub async fn busy(client: &Client, name: &str, write: bool) -> bool {
    let rw = client.rw_lock(name);
    let side = if write { rw.write() } else { rw.read() };
    match side.try_acquire().await.unwrap() {
        Ok(guard) => {
            guard.release().await.unwrap();
            false
        }
        Err(_) => true,
    }
}

/// Whether semaphore `name` of `n` has no permit free for `client` right now.
pub async fn no_permit(client: &Client, name: &str, n: u32) -> bool {
    match client.semaphore(name, n).try_acquire().await.unwrap() {
        Ok(guard) => {
            guard.release().await.unwrap();
            false
        }
        Err(_) => true,
    }
}
