//! One conformance suite, run against every deployment: one Redis, Sentinel, Cluster, RedLock
//! over three servers, ZooKeeper standalone and a ZooKeeper ensemble (issue 10, section 3),
//! etcd with one member and with three (issue 11).
//!
//! The behaviours are written once, as async fns over a [`Deployment`]; what a deployment
//! cannot offer it declares in its [`Caps`], and the suite checks the declaration: the call
//! it does not support fails with the documented typed error, it never silently succeeds.
//! Each deployment is started once and runs every behaviour in turn, on fresh lock names
//! (servers are slow to start on small machines: a 6-node cluster, three JVMs).
//!
//! Sentinel, Cluster, the ZooKeeper ensemble and the etcd cluster run in the nextest
//! `topology` group (one at a time): `.config/nextest.toml`.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::within;
use fencelock::{Client, ClientOptions, Error, InputError, LockOptions, Released};
use tokio::time::Instant;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a deployment offers beyond the common core. Each `false` is checked: the call fails
/// with the typed error the docs name.
#[derive(Debug, Clone, Copy)]
struct Caps {
    /// `Guard::extend` works; otherwise `Error::Unsupported`.
    extend: bool,
    /// `LockOptions::lease` (a fixed lease, no watchdog) works; otherwise
    /// `InputError::InvalidOption { option: "lease" }`.
    fixed_lease: bool,
    /// `LockOptions::min_replica_acks` is understood (it may still fail at run time without
    /// replicas); otherwise `InputError::InvalidOption { option: "min_replica_acks" }`.
    replica_acks: bool,
    /// A name with `{` is refused with `InputError::NameHasBrace`; otherwise it works.
    brace_names_refused: bool,
    /// A name with `/` is refused with `InputError::InvalidName`; otherwise it works.
    slash_names_refused: bool,
    /// Another client re-enters with `Lock::with_owner`; otherwise `Error::Unsupported`
    /// for its acquire and its release.
    foreign_owner_reentry: bool,
    /// `LockStatus::waiters` lists the waiters in queue order; otherwise it stays empty.
    waiter_queue: bool,
    /// `LockStatus::owners` counts the holds of a re-entered lock; otherwise it says 1 (the
    /// count is kept in the holder's client).
    status_counts_holds: bool,
}

#[cfg(feature = "redis")]
const REDIS: Caps = Caps {
    extend: true,
    fixed_lease: true,
    replica_acks: true,
    brace_names_refused: true,
    slash_names_refused: false,
    foreign_owner_reentry: true,
    waiter_queue: true,
    status_counts_holds: true,
};

/// A started deployment: its servers stay up while this lives.
trait Deployment: Send + Sync {
    /// Server URLs: one, or RedLock's several.
    fn urls(&self) -> Vec<String>;
    fn caps(&self) -> Caps;
    /// Server URL sets of this kind that must be refused before any I/O.
    fn bad_urls(&self) -> Vec<Vec<String>>;
    /// Stops (SIGSTOP) the servers that hold lock data, so that any I/O would hang.
    fn pause(&self);
    fn resume(&self);
    /// Makes the holder of `name` lose it behind its back (the key deleted on the servers,
    /// or the node deleted by another client).
    fn lose<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()>;
}

async fn connect(d: &dyn Deployment, options: ClientOptions) -> Client {
    try_connect(&d.urls(), options).await.expect("connect")
}

async fn try_connect(urls: &[String], options: ClientOptions) -> Result<Client, Error> {
    if urls.len() == 1 {
        Client::connect_with(&urls[0], options).await
    } else {
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        Client::connect_all_with(&urls, options).await
    }
}

fn lease(ms: u64) -> ClientOptions {
    ClientOptions::default().default_lease(Duration::from_millis(ms))
}

// ---------------------------------------------------------------------------------------
// Deployments

#[cfg(feature = "redis")]
mod redis_family {
    //! The Redis deployments: one server, RedLock, Sentinel, Cluster.
    use super::*;
    use fencelock_testkit::{RedisCluster, RedisServer, SentinelSet};

    fn delete_key(server: &RedisServer, name: &str) {
        let key = format!("fencelock:{{{name}}}");
        server.command(&["DEL", &key]).expect("DEL the lock key");
    }

    pub struct Single(RedisServer);

    impl Deployment for Single {
        fn urls(&self) -> Vec<String> {
            vec![self.0.url()]
        }
        fn caps(&self) -> Caps {
            REDIS
        }
        fn bad_urls(&self) -> Vec<Vec<String>> {
            vec![
                vec!["redis://127.0.0.1:notaport".into()],
                vec!["redis://".into()],
                vec![format!("rediss+nonsense://127.0.0.1:{}", self.0.port())],
            ]
        }
        fn pause(&self) {
            self.0.pause();
        }
        fn resume(&self) {
            self.0.resume();
        }
        fn lose<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
            Box::pin(async move { delete_key(&self.0, name) })
        }
    }

    pub struct RedLock(Vec<RedisServer>);

    impl Deployment for RedLock {
        fn urls(&self) -> Vec<String> {
            self.0.iter().map(RedisServer::url).collect()
        }
        fn caps(&self) -> Caps {
            Caps {
                waiter_queue: false,
                ..REDIS
            }
        }
        fn bad_urls(&self) -> Vec<Vec<String>> {
            let urls = self.urls();
            vec![
                // One server twice is not a majority of independent servers.
                vec![urls[0].clone(), urls[1].clone(), urls[0].clone()],
                vec![
                    urls[0].clone(),
                    urls[1].clone(),
                    "redis://127.0.0.1:notaport".into(),
                ],
            ]
        }
        fn pause(&self) {
            self.0.iter().for_each(RedisServer::pause);
        }
        fn resume(&self) {
            self.0.iter().for_each(RedisServer::resume);
        }
        fn lose<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
            Box::pin(async move { self.0.iter().for_each(|s| delete_key(s, name)) })
        }
    }

    pub struct Sentinel(SentinelSet);

    impl Sentinel {
        fn master(&self) -> &RedisServer {
            let port = self.0.master_port().expect("the sentinels name a master");
            self.0
                .servers
                .iter()
                .find(|s| s.port() == port)
                .expect("the master is one of the set's servers")
        }
    }

    impl Deployment for Sentinel {
        fn urls(&self) -> Vec<String> {
            vec![self.0.url()]
        }
        fn caps(&self) -> Caps {
            REDIS
        }
        fn bad_urls(&self) -> Vec<Vec<String>> {
            let url = self.0.url();
            let (hosts, _master) = url.rsplit_once('/').unwrap();
            vec![
                vec![format!("{hosts}/")], // no master name
                vec![hosts.to_string()],   // no path at all
            ]
        }
        // The data servers only: the sentinels keep watching (a pause stays far below their
        // 1 s down-after), so no failover starts.
        fn pause(&self) {
            self.0.servers.iter().for_each(RedisServer::pause);
        }
        fn resume(&self) {
            self.0.servers.iter().for_each(RedisServer::resume);
        }
        fn lose<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
            Box::pin(async move { delete_key(self.master(), name) })
        }
    }

    pub struct Cluster(RedisCluster);

    impl Deployment for Cluster {
        fn urls(&self) -> Vec<String> {
            vec![self.0.url()]
        }
        fn caps(&self) -> Caps {
            REDIS
        }
        fn bad_urls(&self) -> Vec<Vec<String>> {
            vec![
                vec![format!("{}/0", self.0.url())], // a cluster has no database
                vec!["redis+cluster://".into()],
            ]
        }
        fn pause(&self) {
            self.0.nodes.iter().for_each(RedisServer::pause);
        }
        fn resume(&self) {
            self.0.nodes.iter().for_each(RedisServer::resume);
        }
        fn lose<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
            Box::pin(async move {
                let master = self.0.master_of(self.0.slot(name)).expect("slot master");
                delete_key(master, name)
            })
        }
    }

    /// Another client's forced unlock deletes the holder's node or key (the services whose locks
    /// belong to a session: ZooKeeper, etcd).
    pub async fn single() -> Single {
        Single(common::server())
    }

    pub async fn redlock() -> RedLock {
        RedLock(common::servers(3))
    }

    pub async fn sentinel() -> Sentinel {
        let set = tokio::task::spawn_blocking(SentinelSet::start)
            .await
            .unwrap()
            .expect("start a Sentinel set");
        Sentinel(set)
    }

    pub async fn cluster() -> Cluster {
        let cluster = tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap()
            .expect("start a Redis Cluster");
        Cluster(cluster)
    }
}

#[cfg(any(feature = "zookeeper", feature = "etcd"))]
async fn force_unlock(urls: Vec<String>, name: &str) {
    let other = try_connect(&urls, ClientOptions::default())
        .await
        .expect("connect");
    let removed = other.force_unlock(name).await.expect("force_unlock");
    assert_eq!(removed.len(), 1, "{removed:?}");
    other.close().await.expect("close");
}

/// The servers of a session-based deployment (one server, or every member of an ensemble
/// or cluster), as the suite drives them.
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
trait Members: Send + Sync {
    fn url(&self) -> String;
    fn pause(&self);
    fn resume(&self);
}

/// A ZooKeeper or etcd deployment: its servers, what it offers, the URLs it refuses. A lock
/// is lost by another client's forced unlock.
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
struct Sessioned<M: Members> {
    members: M,
    caps: Caps,
    bad_urls: fn(&str) -> Vec<Vec<String>>,
}

#[cfg(any(feature = "zookeeper", feature = "etcd"))]
impl<M: Members> Deployment for Sessioned<M> {
    fn urls(&self) -> Vec<String> {
        vec![self.members.url()]
    }
    fn caps(&self) -> Caps {
        self.caps
    }
    fn bad_urls(&self) -> Vec<Vec<String>> {
        (self.bad_urls)(&self.members.url())
    }
    fn pause(&self) {
        self.members.pause();
    }
    fn resume(&self) {
        self.members.resume();
    }
    fn lose<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(force_unlock(self.urls(), name))
    }
}

/// Implements [`Members`] for a test-kit handle: one server, or a set of them.
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
macro_rules! members {
    ($server:ty) => {
        impl Members for $server {
            fn url(&self) -> String {
                <$server>::url(self)
            }
            fn pause(&self) {
                <$server>::pause(self);
            }
            fn resume(&self) {
                <$server>::resume(self);
            }
        }
    };
    ($set:ty, $server:ty) => {
        impl Members for $set {
            fn url(&self) -> String {
                <$set>::url(self)
            }
            fn pause(&self) {
                self.members().iter().for_each(<$server>::pause);
            }
            fn resume(&self) {
                self.members().iter().for_each(<$server>::resume);
            }
        }
    };
}

#[cfg(feature = "zookeeper")]
mod zk {
    use super::*;
    use fencelock_testkit::{ZooKeeperEnsemble, ZooKeeperServer};

    members!(ZooKeeperServer);
    members!(ZooKeeperEnsemble, ZooKeeperServer);

    const ZOOKEEPER: Caps = Caps {
        extend: false,
        fixed_lease: false,
        replica_acks: false,
        // Braces are a Redis rule (the keys' hash tag); ZooKeeper paths may hold them.
        brace_names_refused: false,
        slash_names_refused: true,
        foreign_owner_reentry: false,
        waiter_queue: true,
        status_counts_holds: false,
    };

    fn bad_urls(url: &str) -> Vec<Vec<String>> {
        vec![
            vec!["zk://127.0.0.1:notaport".into()],
            vec![format!("{url}/x/../y")],
            vec![format!("{url}/zookeeper/x")],
            // One session per client: several zk:// URLs are an input error.
            vec![url.to_string(), url.to_string()],
        ]
    }

    pub async fn standalone() -> Sessioned<ZooKeeperServer> {
        let members = tokio::task::spawn_blocking(ZooKeeperServer::start)
            .await
            .unwrap()
            .expect("start ZooKeeper");
        Sessioned {
            members,
            caps: ZOOKEEPER,
            bad_urls,
        }
    }

    pub async fn ensemble() -> Sessioned<ZooKeeperEnsemble> {
        let members = tokio::task::spawn_blocking(ZooKeeperEnsemble::start)
            .await
            .unwrap()
            .expect("start a ZooKeeper ensemble");
        Sessioned {
            members,
            caps: ZOOKEEPER,
            bad_urls,
        }
    }
}

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use fencelock_testkit::{EtcdCluster, EtcdServer};

    members!(EtcdServer);
    members!(EtcdCluster, EtcdServer);

    const ETCD: Caps = Caps {
        extend: false,
        fixed_lease: false,
        replica_acks: false,
        brace_names_refused: false,
        slash_names_refused: true,
        foreign_owner_reentry: false,
        waiter_queue: true,
        status_counts_holds: false,
    };

    fn bad_urls(url: &str) -> Vec<Vec<String>> {
        vec![
            vec!["etcd://127.0.0.1:notaport".into()],
            vec![format!("{url}//x")],
            vec![url.replacen("etcd://", "etcd://:secret@", 1)],
            // One lease per client: several etcd:// URLs are an input error.
            vec![url.to_string(), url.to_string()],
        ]
    }

    pub async fn single() -> Sessioned<EtcdServer> {
        let members = tokio::task::spawn_blocking(EtcdServer::start)
            .await
            .unwrap()
            .expect("start etcd");
        Sessioned {
            members,
            caps: ETCD,
            bad_urls,
        }
    }

    pub async fn cluster() -> Sessioned<EtcdCluster> {
        let members = tokio::task::spawn_blocking(EtcdCluster::start)
            .await
            .unwrap()
            .expect("start an etcd cluster");
        Sessioned {
            members,
            caps: ETCD,
            bad_urls,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Helpers

fn is_input<T>(r: &Result<T, Error>, expected: fn(&InputError) -> bool) -> bool {
    matches!(r, Err(Error::InvalidInput(e)) if expected(e))
}

fn describe<T>(r: &Result<T, Error>) -> String {
    match r {
        Ok(_) => "Ok(..)".into(),
        Err(e) => format!("Err({e:?})"),
    }
}

/// Resumes paused servers when it goes, also when an assertion fails while they are paused.
struct Paused<'a>(&'a dyn Deployment);

impl<'a> Paused<'a> {
    fn new(d: &'a dyn Deployment) -> Self {
        d.pause();
        Self(d)
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.0.resume();
    }
}

async fn waiters(client: &Client, name: &str) -> usize {
    client.status(name).await.expect("status").waiters.len()
}

/// Polls the wait queue of `name` (through `client`) until it has at least `n` places, for
/// at most `secs` seconds.
async fn until_waiters(client: &Client, name: &str, n: usize, secs: f64) {
    within(secs, &format!("{n} waiters queued on {name}"), async {
        while waiters(client, name).await < n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

fn waiter_owners(status: &fencelock::LockStatus) -> Vec<&str> {
    status.waiters.iter().map(|w| w.owner.as_str()).collect()
}

// ---------------------------------------------------------------------------------------
// Behaviours

/// Three clients take a lock in turns; an in-process counter of holders inside the critical
/// section never exceeds one, and the tokens, read in holding order, strictly increase.
async fn mutual_exclusion_and_increasing_tokens(d: &dyn Deployment) {
    const CLIENTS: usize = 3;
    const HOLDINGS: usize = 4;
    let inside = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = connect(d, ClientOptions::default()).await;
        let (lock, inside, tokens) = (client.lock("excl"), inside.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..HOLDINGS {
                let guard = lock.acquire().await.expect("acquire");
                let before = inside.fetch_add(1, Ordering::SeqCst);
                assert_eq!(before, 0, "two holders at once");
                tokens.lock().unwrap().push(guard.fencing_token());
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(guard.release().await.expect("release"), Released::Released);
            }
        }));
        clients.push(client);
    }
    for t in tasks {
        t.await.expect("worker");
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), CLIENTS * HOLDINGS);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing: {tokens:?}"
    );
    // And once more by one client alone: release, acquire again, a larger token.
    let lock = clients[0].lock("excl");
    let again = lock.acquire().await.unwrap();
    assert!(again.fencing_token() > *tokens.last().unwrap());
    again.release().await.unwrap();
    assert!(!clients[1].status("excl").await.unwrap().held);
}

/// The same handle or a clone re-enters: hold count 2, one token; each guard gives back one
/// hold; another handle (another owner) of the same client does not get in.
async fn reentry_counts_holds(d: &dyn Deployment) {
    let caps = d.caps();
    let client = connect(d, ClientOptions::default()).await;
    let observer = connect(d, ClientOptions::default()).await;
    let lock = client.lock("re");
    let first = lock.acquire().await.unwrap();
    let second = lock.clone().acquire().await.unwrap();
    assert_eq!((first.hold_count(), second.hold_count()), (1, 2));
    assert_eq!(first.fencing_token(), second.fencing_token());
    assert!(client.lock("re").try_acquire().await.unwrap().is_err());

    let status = observer.status("re").await.unwrap();
    assert!(status.held);
    let count = if caps.status_counts_holds { 2 } else { 1 };
    assert_eq!(status.owners, vec![(lock.owner().to_owned(), count)]);
    assert_eq!(status.fencing_token, Some(first.fencing_token()));

    assert_eq!(
        second.release().await.unwrap(),
        Released::StillHeld { count: 1 }
    );
    assert!(first.is_held());
    assert!(observer.status("re").await.unwrap().held);
    assert_eq!(first.release().await.unwrap(), Released::Released);
    assert!(!observer.status("re").await.unwrap().held);
    assert_eq!(lock.release().await.unwrap(), Released::NotHeld);
}

/// Only the owner releases: another client's `release()` is `NotHeld` and changes nothing.
/// Re-entry under a foreign owner id works where declared, and is refused otherwise.
async fn release_only_by_the_owner(d: &dyn Deployment) {
    let a = connect(d, ClientOptions::default()).await;
    let b = connect(d, ClientOptions::default()).await;
    let guard = a.lock("owned").acquire().await.unwrap();
    assert_eq!(b.lock("owned").release().await.unwrap(), Released::NotHeld);
    let status = b.status("owned").await.unwrap();
    assert!(status.held);
    assert_eq!(status.owners[0].0, guard.owner());
    assert!(guard.is_held());
    assert!(b.lock("owned").try_acquire().await.unwrap().is_err());

    let foreign = b.lock("owned").with_owner(guard.owner());
    if d.caps().foreign_owner_reentry {
        let again = foreign.acquire().await.unwrap();
        assert_eq!(again.hold_count(), 2);
        assert_eq!(again.fencing_token(), guard.fencing_token());
        assert_eq!(
            again.release().await.unwrap(),
            Released::StillHeld { count: 1 }
        );
    } else {
        let r = foreign.acquire().await;
        assert!(
            matches!(r, Err(Error::Unsupported { .. })),
            "{}",
            describe(&r)
        );
        let r = foreign.release().await;
        assert!(
            matches!(r, Err(Error::Unsupported { .. })),
            "{}",
            describe(&r)
        );
        assert_eq!(waiters(&b, "owned").await, 0, "the refused attempt stayed");
    }
    assert!(b.status("owned").await.unwrap().held);
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    assert!(!b.status("owned").await.unwrap().held);
}

/// `try_acquire` on a held lock is `Contended`, `acquire_timeout` is `Error::Timeout`; neither
/// leaves anything behind: no waiter, and a third client gets the lock at once after the
/// holder lets go.
async fn contended_and_timeout_leave_nothing_behind(d: &dyn Deployment) {
    let a = connect(d, ClientOptions::default()).await;
    let b = connect(d, ClientOptions::default()).await;
    let c = connect(d, ClientOptions::default()).await;
    let held = a.lock("busy").acquire().await.unwrap();
    let tried = b.lock("busy").try_acquire().await.unwrap();
    assert!(tried.is_err(), "try_acquire got a held lock");
    assert_eq!(waiters(&c, "busy").await, 0, "try_acquire left a waiter");

    let started = Instant::now();
    let timed = b
        .lock("busy")
        .acquire_timeout(Duration::from_millis(300))
        .await;
    let took = started.elapsed();
    assert!(
        matches!(timed, Err(Error::Timeout { .. })),
        "{}",
        describe(&timed)
    );
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(3),
        "the timeout took {took:?}"
    );
    assert_eq!(waiters(&c, "busy").await, 0, "the timeout left a waiter");
    assert!(held.is_held());
    let held_token = held.fencing_token();

    assert_eq!(held.release().await.unwrap(), Released::Released);
    let next = c
        .lock("busy")
        .try_acquire()
        .await
        .unwrap()
        .expect("a third client gets the freed lock at once");
    assert!(next.fencing_token() > held_token);
    // The two who gave up hold nothing: the lock is the third client's alone.
    let status = a.status("busy").await.unwrap();
    assert_eq!(status.owners, vec![(next.owner().to_owned(), 1)]);
    assert!(b.lock("busy").try_acquire().await.unwrap().is_err());
    assert_eq!(next.release().await.unwrap(), Released::Released);
}

/// A waiter is woken by the release itself, not by a timer or its bound: the holder's lease
/// (or session) is 20 s, it lets go after 200 ms, and the waiter holds the lock within 2 s.
async fn a_waiter_is_woken_by_the_release(d: &dyn Deployment) {
    let caps = d.caps();
    let holder = connect(d, lease(20_000)).await;
    let waiter_client = connect(d, lease(20_000)).await;
    let guard = holder.lock("wake").acquire().await.unwrap();
    let token = guard.fencing_token();
    let waiting = waiter_client.lock("wake");
    let waiter_owner = waiting.owner().to_owned();
    let waiter = tokio::spawn({
        let lock = waiting;
        async move {
            let got = lock.acquire().await;
            (got, Instant::now())
        }
    });
    if caps.waiter_queue {
        until_waiters(&holder, "wake", 1, 5.0).await;
        let status = holder.status("wake").await.unwrap();
        assert_eq!(status.waiters.len(), 1, "{status:?}");
        assert_eq!(status.waiters[0].owner, waiter_owner);
    } else {
        assert_eq!(waiters(&holder, "wake").await, 0);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    let released = Instant::now();
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    let (got, at) = within(5.0, "the waiter is woken", waiter).await.unwrap();
    let next = got.expect("the waiter acquires");
    let after = at - released;
    assert!(
        after < Duration::from_secs(2),
        "woken {after:?} after the release"
    );
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
}

/// Hand-over is first come, first served, one waiter at a time: a holder holds the lock while
/// four waiters, each on a client of its own (its own session, lease and owner), queue one
/// after another, each only once the one before it is seen in the queue. After the holder's
/// release each waiter, once it holds the lock, notes its place and lets go. They are served
/// exactly in arrival order, never two at once, with increasing tokens, and while one holds
/// the others are still queued in order (the release woke only the next one).
async fn handover_is_fifo_one_waiter_at_a_time(d: &dyn Deployment) {
    const WAITERS: usize = 4;
    if !d.caps().waiter_queue {
        // RedLock keeps no queue on its servers: at each release its waiters race, and those
        // that split the servers retry after a random pause (SAFETY.md, RedLock, "Fairness";
        // README: "with RedLock, waiters of different clients race"). It promises no order,
        // so it is left out of this behaviour.
        return;
    }
    let holder = connect(d, ClientOptions::default()).await;
    let guard = holder.lock("fifo").acquire().await.unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    // (arrival index, token, the status read while holding), in the order they held.
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut owners = Vec::new();
    // Kept to the end, so that no waiter's session or lease ends with a dropped client.
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let client = connect(d, ClientOptions::default()).await;
        let lock = client.lock("fifo");
        owners.push(lock.owner().to_owned());
        let (inside, served) = (inside.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await.expect("acquire");
            let before = inside.fetch_add(1, Ordering::SeqCst);
            assert_eq!(before, 0, "waiter {i} holds beside another");
            // Read through the holder's own client: on a ZooKeeper ensemble another member
            // may still lag behind the deletion that made it the holder; its own session
            // reads at least what it saw.
            let status = lock.status().await.expect("status");
            served
                .lock()
                .unwrap()
                .push((i, guard.fencing_token(), status));
            inside.fetch_sub(1, Ordering::SeqCst);
            assert_eq!(guard.release().await.expect("release"), Released::Released);
        }));
        clients.push(client);
        // The next one starts only once this one has its place: arrival order is known.
        until_waiters(&holder, "fifo", i + 1, 10.0).await;
    }
    let queued = holder.status("fifo").await.unwrap();
    assert_eq!(waiter_owners(&queued), owners, "{queued:?}");
    assert!(
        tasks.iter().all(|t| !t.is_finished()),
        "a waiter got a held lock"
    );

    let first = guard.fencing_token();
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    within(30.0, "every waiter is served", async {
        for t in tasks {
            t.await.expect("waiter");
        }
    })
    .await;

    let served = std::mem::take(&mut *served.lock().unwrap());
    let order: Vec<usize> = served.iter().map(|(i, _, _)| *i).collect();
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "not arrival order");
    let mut last = first;
    for (i, token, status) in &served {
        assert!(*token > last, "waiter {i}: token {token} after {last}");
        last = *token;
        assert_eq!(status.owners, vec![(owners[*i].clone(), 1)], "{status:?}");
        // Woken alone: those behind it are all still in the queue, in arrival order.
        assert_eq!(
            waiter_owners(status),
            owners[i + 1..],
            "waiter {i}: {status:?}"
        );
    }
    assert!(!holder.status("fifo").await.unwrap().held);
}

/// `lost()` fires when the holding is gone behind the holder's back; the next holder gets a
/// larger token, and the stale guard's release does not touch the new holding. With a fixed
/// lease, also when the lease runs out.
async fn lost_fires_when_the_lock_is_gone(d: &dyn Deployment) {
    let holder = connect(d, lease(1_500)).await;
    let other = connect(d, lease(1_500)).await;
    let guard = holder.lock("lost").acquire().await.unwrap();
    let token = guard.lost_token();
    assert!(guard.is_held());
    d.lose("lost").await;
    within(3.0, "lost() after the lock was taken away", guard.lost()).await;
    assert!(token.is_cancelled());
    assert!(!guard.is_held());
    assert!(guard.lost_reason().is_some());
    let next = other
        .lock("lost")
        .acquire_timeout(Duration::from_secs(3))
        .await
        .expect("another client gets the lock");
    assert!(next.fencing_token() > guard.fencing_token());
    assert_eq!(guard.release().await.unwrap(), Released::NotHeld);
    let status = holder.status("lost").await.unwrap();
    assert_eq!(status.owners, vec![(next.owner().to_owned(), 1)]);
    assert!(next.is_held());
    assert_eq!(next.release().await.unwrap(), Released::Released);

    if d.caps().fixed_lease {
        let fixed = holder
            .lock("expired")
            .with_options(LockOptions::default().lease(Duration::from_millis(300)))
            .acquire()
            .await
            .unwrap();
        assert!(!fixed.is_renewed());
        within(2.0, "lost() after the fixed lease", fixed.lost()).await;
        assert!(!fixed.is_held());
        let next = other
            .lock("expired")
            .acquire_timeout(Duration::from_secs(2))
            .await
            .expect("the server let the expired lease go");
        assert!(next.fencing_token() > fixed.fencing_token());
        assert_eq!(fixed.release().await.unwrap(), Released::NotHeld);
        assert_eq!(next.release().await.unwrap(), Released::Released);
    }
}

/// Bad input is refused with a typed error before any I/O: with every data server stopped
/// (SIGSTOP), each refusal still comes back at once. What a deployment declared unsupported
/// is refused the same way.
async fn bad_input_is_refused_before_any_io(d: &dyn Deployment) {
    let caps = d.caps();
    let client = connect(d, ClientOptions::default()).await;
    let long = "n".repeat(fencelock::MAX_NAME_LEN + 1);
    let fixed = |ms: u64| LockOptions::default().lease(Duration::from_millis(ms));
    type Expect = fn(&InputError) -> bool;
    let mut cases: Vec<(fencelock::Lock, Expect)> = vec![
        (client.lock(""), |e| matches!(e, InputError::EmptyName)),
        (client.lock(&long), |e| {
            matches!(e, InputError::NameTooLong { .. })
        }),
        (
            client
                .lock("ok")
                .with_options(LockOptions::default().lease(Duration::ZERO)),
            |e| matches!(e, InputError::ZeroLease),
        ),
        (
            client
                .lock("ok")
                .with_options(LockOptions::default().lease(Duration::from_micros(500))),
            |e| matches!(e, InputError::LeaseTooShort { .. }),
        ),
        (
            client
                .lock("ok")
                .with_options(LockOptions::default().lease(Duration::from_micros(1_500_500))),
            |e| matches!(e, InputError::LeaseNotWholeMillis { .. }),
        ),
        (client.lock("ok").with_owner("two words"), |e| {
            matches!(e, InputError::InvalidOwner { .. })
        }),
    ];
    if caps.brace_names_refused {
        cases.push((client.lock("a{b}"), |e| {
            matches!(e, InputError::NameHasBrace { .. })
        }));
    }
    if caps.slash_names_refused {
        cases.push((client.lock("a/b"), |e| {
            matches!(e, InputError::InvalidName { .. })
        }));
    }
    if !caps.fixed_lease {
        cases.push((client.lock("ok").with_options(fixed(2_000)), |e| {
            matches!(
                e,
                InputError::InvalidOption {
                    option: "lease",
                    ..
                }
            )
        }));
    }
    if !caps.replica_acks {
        let acks = LockOptions::default().min_replica_acks(1, Duration::from_millis(10));
        cases.push((client.lock("ok").with_options(acks), |e| {
            matches!(
                e,
                InputError::InvalidOption {
                    option: "min_replica_acks",
                    ..
                }
            )
        }));
    }
    let bad_options = [
        lease(0),
        ClientOptions::default().default_lease(Duration::from_micros(500)),
        ClientOptions::default().default_lease(Duration::from_micros(1_500_500)),
    ];

    let paused = Paused::new(d);
    within(5.0, "refusals while the servers are stopped", async {
        for (lock, expected) in &cases {
            let quick = Duration::from_millis(500);
            let r = tokio::time::timeout(quick, lock.acquire()).await;
            let r = r.unwrap_or_else(|_| panic!("{lock:?}: acquire did I/O"));
            assert!(is_input(&r, *expected), "{lock:?}: {}", describe(&r));
            let r = tokio::time::timeout(quick, lock.try_acquire()).await;
            let r = r.unwrap_or_else(|_| panic!("{lock:?}: try_acquire did I/O"));
            assert!(is_input(&r, *expected), "{lock:?}: {}", describe(&r));
            let r = tokio::time::timeout(quick, lock.acquire_timeout(Duration::from_secs(1))).await;
            let r = r.unwrap_or_else(|_| panic!("{lock:?}: acquire_timeout did I/O"));
            assert!(is_input(&r, *expected), "{lock:?}: {}", describe(&r));
            let r = tokio::time::timeout(quick, lock.release()).await;
            let r = r.unwrap_or_else(|_| panic!("{lock:?}: release did I/O"));
            assert!(is_input(&r, *expected), "{lock:?}: {}", describe(&r));
        }
        for name in ["", long.as_str()] {
            let quick = Duration::from_millis(500);
            let r = tokio::time::timeout(quick, client.status(name))
                .await
                .unwrap();
            assert!(matches!(r, Err(Error::InvalidInput(_))), "{}", describe(&r));
            let r = tokio::time::timeout(quick, client.force_unlock(name))
                .await
                .unwrap();
            assert!(matches!(r, Err(Error::InvalidInput(_))), "{}", describe(&r));
        }
        let urls = d.urls();
        for options in bad_options {
            let connecting = try_connect(&urls, options.clone());
            let r = tokio::time::timeout(Duration::from_millis(500), connecting)
                .await
                .unwrap_or_else(|_| panic!("{options:?}: connect did I/O before refusing"));
            assert!(
                matches!(r, Err(Error::InvalidInput(_))),
                "{options:?}: {}",
                describe(&r)
            );
        }
        for urls in d.bad_urls() {
            let connecting = try_connect(&urls, ClientOptions::default());
            let r = tokio::time::timeout(Duration::from_millis(500), connecting)
                .await
                .unwrap_or_else(|_| panic!("{urls:?}: connect did I/O before refusing"));
            assert!(
                matches!(
                    r,
                    Err(Error::InvalidInput(
                        InputError::InvalidUrl { .. } | InputError::DuplicateServer { .. }
                    ))
                ),
                "{urls:?}: {}",
                describe(&r)
            );
        }
    })
    .await;
    drop(paused);

    // Nothing reached the servers: no lock was made under the valid name used above.
    let status = client.status("ok").await.unwrap();
    assert!(!status.held && status.waiters.is_empty(), "{status:?}");
}

/// What a deployment declares it supports works; what it declares unsupported fails with the
/// documented typed error and changes nothing.
async fn declared_capabilities_hold(d: &dyn Deployment) {
    let caps = d.caps();
    let client = connect(d, ClientOptions::default()).await;
    let guard = client.lock("caps").acquire().await.unwrap();
    let r = guard.extend(Duration::from_secs(5)).await;
    if caps.extend {
        assert!(r.is_ok(), "{}", describe(&r));
        assert!(guard.remaining_validity().unwrap() > Duration::from_secs(4));
    } else {
        assert!(
            matches!(r, Err(Error::Unsupported { .. })),
            "{}",
            describe(&r)
        );
    }
    assert!(guard.is_held());
    assert_eq!(guard.release().await.unwrap(), Released::Released);

    if caps.fixed_lease {
        let lock = client
            .lock("caps-fixed")
            .with_options(LockOptions::default().lease(Duration::from_secs(2)));
        let g = lock.try_acquire().await.unwrap().expect("a free lock");
        assert!(!g.is_renewed());
        assert_eq!(g.lease(), Duration::from_secs(2));
        assert_eq!(g.release().await.unwrap(), Released::Released);
    }
    // Names a service does not refuse are ordinary names.
    let mut accepted = Vec::new();
    if !caps.brace_names_refused {
        accepted.push("caps{brace}");
    }
    if !caps.slash_names_refused {
        accepted.push("caps/slash");
    }
    for name in accepted {
        let g = client
            .lock(name)
            .try_acquire()
            .await
            .unwrap()
            .unwrap_or_else(|_| panic!("{name:?} is free"));
        assert!(client.status(name).await.unwrap().held);
        assert_eq!(g.release().await.unwrap(), Released::Released);
    }
}

async fn run_all(d: &dyn Deployment, deployment: &str) {
    macro_rules! step {
        ($f:ident) => {{
            let started = Instant::now();
            within(60.0, stringify!($f), $f(d)).await;
            eprintln!(
                "conformance {deployment}: {} in {:?}",
                stringify!($f),
                started.elapsed()
            );
        }};
    }
    step!(bad_input_is_refused_before_any_io);
    step!(mutual_exclusion_and_increasing_tokens);
    step!(reentry_counts_holds);
    step!(release_only_by_the_owner);
    step!(contended_and_timeout_leave_nothing_behind);
    step!(a_waiter_is_woken_by_the_release);
    step!(handover_is_fifo_one_waiter_at_a_time);
    step!(lost_fires_when_the_lock_is_gone);
    step!(declared_capabilities_hold);
}

/// One test per deployment: it starts the deployment once and runs every behaviour on it.
macro_rules! conformance {
    ($($(#[$attr:meta])* $test:ident => $start:expr;)*) => {$(
        $(#[$attr])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let started = Instant::now();
            let deployment = $start.await;
            eprintln!("{}: started in {:?}", stringify!($test), started.elapsed());
            run_all(&deployment, stringify!($test)).await;
        }
    )*};
}

conformance! {
    #[cfg(feature = "redis")]
    conformance_redis_single => redis_family::single();
    #[cfg(feature = "redis")]
    conformance_redlock_three_servers => redis_family::redlock();
    #[cfg(feature = "redis")]
    conformance_redis_sentinel => redis_family::sentinel();
    #[cfg(feature = "redis")]
    conformance_redis_cluster => redis_family::cluster();
    #[cfg(feature = "zookeeper")]
    conformance_zookeeper_standalone => zk::standalone();
    #[cfg(feature = "zookeeper")]
    conformance_zookeeper_ensemble => zk::ensemble();
    #[cfg(feature = "etcd")]
    conformance_etcd_single => etcd::single();
    #[cfg(feature = "etcd")]
    conformance_etcd_cluster => etcd::cluster();
}
