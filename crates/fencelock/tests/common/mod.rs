//! Shared helpers: a fresh real server per test, clients, raw connections.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use fencelock::{Client, ClientOptions};
use fencelock_testkit::{RedisServer, TcpProxy};

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

/// A release whose delete fails (its reply later than the response timeout; the server may
/// have deleted the node or key all the same) leaves the holding closed: the owner's next
/// acquire never re-enters it with the old token, and the lock is free again once the node
/// or key is gone, deleted late or again in the background. For the services whose holdings
/// the client counts (ZooKeeper, etcd): `proxied` reaches the server through `proxy`,
/// `direct` does not.
pub async fn failed_release_is_never_reentered(proxied: &str, direct: &str, proxy: &TcpProxy) {
    let options = ClientOptions::default()
        .default_lease(Duration::from_millis(10_000))
        .response_timeout(Duration::from_millis(300));
    let a = Client::connect_with(proxied, options.clone())
        .await
        .unwrap();
    let lock = a.lock("failed-release");
    let held = lock.acquire().await.unwrap();
    let first = held.fencing_token();
    proxy.set_latency(Duration::from_millis(1_000));
    let released = held.release().await;
    assert!(
        released.is_err(),
        "the delete's reply is late: {released:?}"
    );
    proxy.set_latency(Duration::ZERO);
    let b = Client::connect_with(direct, options).await.unwrap();
    let other = b
        .lock("failed-release")
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("the lock is free: deleted late, or again in the background");
    assert!(other.fencing_token() > first);
    let again = lock.try_acquire().await.unwrap();
    assert!(
        again.is_err(),
        "re-entered a released holding: {:?}",
        again.map(|g| g.fencing_token())
    );
    let second = other.fencing_token();
    other.release().await.unwrap();
    let mine = lock.acquire_timeout(Duration::from_secs(10)).await.unwrap();
    assert!(mine.fencing_token() > second);
    assert_eq!(mine.release().await.unwrap(), fencelock::Released::Released);
    let last = b.lock("failed-release").try_acquire().await.unwrap();
    assert!(last.is_ok(), "the lock is free after the owner's release");
}

/// A release whose future is dropped before the server answered (`tokio::time::timeout`
/// firing first) is finished in the background, as a dropped guard's: the lock is free again
/// for another client, and for another handle of the same client (its per-lock slot on etcd).
/// Here the delete never reaches the server: it is still on its way through `proxy` (a slow
/// link) when the connection is cut, so only a give-back that goes on after the drop, on the
/// client's next connection, frees the lock. For the services whose holdings the client
/// counts (ZooKeeper, etcd): `proxied` reaches the server through `proxy`, `direct` does not.
pub async fn a_dropped_release_is_finished(proxied: &str, direct: &str, proxy: &TcpProxy) {
    let options = ClientOptions::default().default_lease(Duration::from_millis(20_000));
    let a = Client::connect_with(proxied, options.clone())
        .await
        .unwrap();
    let b = Client::connect_with(direct, options).await.unwrap();
    let lock = a.lock("dropped-release");
    let held = lock.acquire().await.unwrap();
    let first = held.fencing_token();
    proxy.set_latency(Duration::from_millis(500));
    let given_up = tokio::time::timeout(Duration::from_millis(100), held.release()).await;
    assert!(given_up.is_err(), "the release was answered: {given_up:?}");
    assert!(proxy.cut() > 0, "the delete was on its way");
    proxy.set_latency(Duration::ZERO);
    let other = b
        .lock("dropped-release")
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("another client gets the lock: the given-up release was finished");
    let second = other.fencing_token();
    assert!(second > first);
    assert_eq!(
        other.release().await.unwrap(),
        fencelock::Released::Released
    );
    let mine = a
        .lock("dropped-release")
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("another handle of the client gets the lock: its slot was freed");
    assert!(mine.fencing_token() > second);
    assert_eq!(mine.release().await.unwrap(), fencelock::Released::Released);
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
