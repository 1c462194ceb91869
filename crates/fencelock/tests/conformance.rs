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
//! What the servers hold is read with clients of their own, not the library under test
//! ([`Deployment::entries`]: Redis hash fields and queue, ZooKeeper children, etcd keys), so
//! that "nothing is left behind" is asserted on every service. A behaviour that needs more
//! than the common core (a proxy in front of the one server, a session to end, a pause longer
//! than a lease) runs where the deployment offers it, and says so in its doc. The services'
//! own tests (`redis`-family files, `zookeeper.rs`, `etcd.rs`) keep only what is theirs:
//! interop with Curator and `etcdctl`, the wire layout, lost replies, leader kills, the lease
//! audit, credentials.
//!
//! Sentinel, Cluster, the ZooKeeper ensemble and the etcd cluster run in the nextest
//! `topology` group (one at a time): `.config/nextest.toml`.

mod common;
#[path = "conformance/election.rs"]
mod election;
#[path = "conformance/family.rs"]
mod family;
#[path = "conformance/family_queue.rs"]
mod family_queue;
#[path = "conformance/multi.rs"]
mod multi;
#[path = "conformance/recipes.rs"]
mod recipes;
#[path = "conformance/reentry.rs"]
mod reentry;
#[path = "conformance/values.rs"]
mod values;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{short_lease as lease, within};
use election::{
    a_cut_off_leader_is_told_before_the_next_leads, a_forced_unlock_deposes_the_leader,
    elections_are_offered_or_refused, observers_see_each_leader_in_order,
    one_leader_at_a_time_in_arrival_order, participants_of_two_clients_lead_one_at_a_time,
};
use family::{
    a_semaphore_never_has_more_than_n_holders, one_name_is_one_kind,
    readers_share_and_a_writer_waits_its_turn, rw_reentry_downgrade_and_refused_upgrade,
    semaphore_order_release_and_resize,
};
use family_queue::{
    a_dead_clients_reader_and_permit_end_alone, a_downgrade_keeps_later_writers_out,
    a_paused_server_loses_readers_and_permits, a_raised_n_wakes_a_waiter,
    another_n_is_refused_unless_resized, permits_go_in_arrival_order_on_any_release,
    readers_behind_a_writer_hold_together, the_family_refuses_other_kinds_by_name,
};
use fencelock::{Client, ClientOptions, Error, InputError, LockOptions, LostReason, Released};
use fencelock_testkit::TcpProxy;
use multi::{
    a_multi_lock_gives_back_and_tells_of_any_loss, a_multi_lock_is_all_or_nothing,
    a_multi_lock_returns_only_with_every_lock_held, bad_multi_locks_are_refused_before_any_io,
    multi_locks_in_opposite_orders_never_deadlock,
};
use recipes::{
    a_semaphore_holds_at_most_the_current_n_through_resizes,
    a_semaphores_n_lives_as_long_as_its_entries,
    first_acquires_of_one_owner_together_keep_each_hold,
    tokens_increase_in_holding_order_through_a_downgrade,
    two_kinds_started_together_give_one_refusal,
};
use reentry::{
    a_foreign_owners_reentry_never_waits_behind_the_clients_waiters,
    a_reentry_never_waits_behind_the_clients_waiters,
};
use tokio::time::Instant;
use values::{
    a_standby_takes_over_whatever_its_value, every_value_is_kept_and_handed_over_exactly,
};

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
    /// Keeps a fencing counter per lock (Redis), whose horizon `ClientOptions::fence_horizon`
    /// sets; the others refuse that option at connect.
    fence_counter: bool,
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
    /// `LockStatus::remaining_lease` gives the holder's lease left; otherwise `None` (a
    /// ZooKeeper session's time left is the server's alone).
    status_lease: bool,
    /// Names refused with `InputError::InvalidName`, beyond `a/b` (`slash_names_refused`).
    invalid_names: &'static [&'static str],
    /// A waiter is woken within this many milliseconds of the release.
    wake_within_ms: u64,
    /// A holder is told of another client's `force_unlock` at once (a message or a watch);
    /// otherwise at its next renewal (a Redis Cluster: the holder's client channel would live
    /// in another slot).
    told_of_force_unlock: bool,
    /// Every data server can be stopped for longer than a lease and resumed, with no failover
    /// (not Sentinel, whose sentinels would elect another master, nor a Cluster, an ensemble
    /// or a cluster of members, which elect again; those are the leader-kill tests' matter).
    long_pause: bool,
    /// A waiting acquire waits through such a stop; otherwise it fails with
    /// `Error::Unavailable` (`Error::Quorum` on RedLock) once a request goes unanswered for
    /// the response timeout (Redis), and the waiter tries again.
    waits_through_a_pause: bool,
    /// A client's locks live in one session (ZooKeeper) or lease (etcd), which
    /// `Deployment::end_session` ends on demand: its end tells every guard of the client.
    sessions: bool,
    /// Read-write locks (`Client::rw_lock`) are offered; otherwise `Error::Unsupported`.
    rw_lock: bool,
    /// Semaphores (`Client::semaphore`) are offered; otherwise `Error::Unsupported`.
    semaphore: bool,
    /// Once a writer downgrades (takes the read side, then gives back the write side), other
    /// readers share the lock at once; otherwise they wait until the downgraded reader lets
    /// go (etcd: its read side keeps the write key, since no key can be put at an earlier
    /// revision, so writers that queued meanwhile stay behind it).
    downgrade_shares: bool,
    /// Leader elections (`Client::election`) are offered; otherwise every election call fails
    /// with `Error::Unsupported` (RedLock: no server queue to agree on the next leader).
    election: bool,
    /// A client has one entry per name: its other owners wait in the client for it, and
    /// leave nothing on the servers while they wait (etcd: the key is named by the lease).
    client_slot: bool,
}

#[cfg(feature = "redis")]
const REDIS: Caps = Caps {
    extend: true,
    fixed_lease: true,
    fence_counter: true,
    replica_acks: true,
    brace_names_refused: true,
    slash_names_refused: false,
    foreign_owner_reentry: true,
    waiter_queue: true,
    status_counts_holds: true,
    status_lease: true,
    invalid_names: &[],
    wake_within_ms: 2_000,
    told_of_force_unlock: true,
    long_pause: true,
    waits_through_a_pause: false,
    sessions: false,
    election: true,
    rw_lock: true,
    semaphore: true,
    downgrade_shares: true,
    client_slot: false,
};

/// An entry of a lock on the servers: a holder or a waiter's place (Redis: an owner in the
/// lock's hash, or in its queue; ZooKeeper: a child node; etcd: a key), with the session or
/// lease it lives in (0 on Redis).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    id: String,
    session: i64,
}

/// A proxy in front of a deployment's one data server, and a URL through it.
struct Proxied {
    proxy: TcpProxy,
    url: String,
}

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
    /// Lock `name`'s entries on the servers (see [`Entry`]), read with a client of its own,
    /// not the library under test; RedLock: their union over its servers.
    fn entries<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Vec<Entry>>;
    /// A new proxy in front of the one data server, where a client reaches one server only
    /// (not RedLock, Sentinel, a Cluster, an ensemble or a cluster of members).
    fn proxied(&self) -> Option<Proxied> {
        None
    }
    /// Ends `session` (see [`Caps::sessions`]) as an operator would, for a client that
    /// reaches the server through `proxy`.
    fn end_session<'a>(&'a self, _session: i64, _proxy: &'a TcpProxy) -> BoxFuture<'a, ()> {
        panic!("this deployment declares no sessions")
    }
    /// (`default_lease` asked, lease granted) in milliseconds: what the servers grant.
    fn lease_cases(&self) -> Vec<(u64, u64)> {
        vec![(2_200, 2_200), (3_000, 3_000)]
    }
    /// The lease of `session` as the server has it, where it can be read.
    fn lease_on_server(&self, _session: i64) -> BoxFuture<'_, Option<Duration>> {
        Box::pin(async { None })
    }
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

// ---------------------------------------------------------------------------------------
// Deployments

#[cfg(feature = "redis")]
mod redis_family {
    //! The Redis deployments: one server, RedLock, Sentinel, Cluster.
    use super::*;
    use fencelock_testkit::{RedisCluster, RedisServer, Reply, SentinelSet};

    fn delete_key(server: &RedisServer, name: &str) {
        let key = format!("fencelock:{{{name}}}");
        server.command(&["DEL", &key]).expect("DEL the lock key");
    }

    /// The owners in lock `name`'s hash (not its `=` fields) and in its wait queue.
    fn entries_on(server: &RedisServer, name: &str) -> Vec<Entry> {
        let list = |args: &[&str]| match server.command(args) {
            Ok(Reply::Array(Some(items))) => {
                items.iter().filter_map(Reply::text).collect::<Vec<_>>()
            }
            other => panic!("{args:?}: {other:?}"),
        };
        let (lock, queue) = (
            format!("fencelock:{{{name}}}"),
            format!("fencelock:{{{name}}}:queue"),
        );
        let holders = list(&["HKEYS", &lock]).into_iter();
        let holders = holders.filter(|f| !f.starts_with('='));
        let queued = list(&["LRANGE", &queue, "0", "-1"]).into_iter();
        let queued = queued.map(|owner| format!("queued {owner}"));
        holders
            .chain(queued)
            .map(|id| Entry { id, session: 0 })
            .collect()
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
        fn entries<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Vec<Entry>> {
            Box::pin(async move { entries_on(&self.0, name) })
        }
        fn proxied(&self) -> Option<Proxied> {
            let proxy = TcpProxy::start(self.0.port()).expect("proxy");
            let url = format!("redis://{}", proxy.connect_string());
            Some(Proxied { proxy, url })
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
                election: false,
                rw_lock: false,
                semaphore: false,
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
        fn entries<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Vec<Entry>> {
            Box::pin(async move {
                let mut all: Vec<Entry> = Vec::new();
                for entry in self.0.iter().flat_map(|s| entries_on(s, name)) {
                    if !all.contains(&entry) {
                        all.push(entry);
                    }
                }
                all
            })
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
            Caps {
                long_pause: false,
                ..REDIS
            }
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
        fn entries<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Vec<Entry>> {
            Box::pin(async move { entries_on(self.master(), name) })
        }
    }

    pub struct Cluster(RedisCluster);

    impl Deployment for Cluster {
        fn urls(&self) -> Vec<String> {
            vec![self.0.url()]
        }
        fn caps(&self) -> Caps {
            Caps {
                long_pause: false,
                told_of_force_unlock: false,
                ..REDIS
            }
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
        fn entries<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Vec<Entry>> {
            Box::pin(async move {
                let master = self.0.master_of(self.0.slot(name)).expect("slot master");
                entries_on(master, name)
            })
        }
    }

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

/// Another client's forced unlock deletes the holder's node or key (the services whose locks
/// belong to a session: ZooKeeper, etcd).
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
    /// The members as a raw client reaches them: a connect string, or etcd endpoints.
    fn address(&self) -> String;
    fn ports(&self) -> Vec<u16>;
    fn pause(&self);
    fn resume(&self);
}

/// What the suite asks of a session service, over its members' address (see
/// [`Members::address`]).
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
#[derive(Clone, Copy)]
struct Service {
    scheme: &'static str,
    bad_urls: fn(&str) -> Vec<Vec<String>>,
    entries: fn(String, String) -> BoxFuture<'static, Vec<Entry>>,
    /// Ends a session (ZooKeeper) or lease (etcd) on the servers.
    end_session: fn(String, i64) -> BoxFuture<'static, ()>,
    lease_on_server: fn(String, i64) -> BoxFuture<'static, Option<Duration>>,
}

/// A ZooKeeper or etcd deployment: its servers, what it offers, the URLs it refuses. A lock
/// is lost by another client's forced unlock.
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
struct Sessioned<M: Members> {
    members: M,
    caps: Caps,
    service: Service,
    lease_cases: &'static [(u64, u64)],
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
        (self.service.bad_urls)(&self.members.url())
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
    fn entries<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Vec<Entry>> {
        (self.service.entries)(self.members.address(), name.to_owned())
    }
    fn proxied(&self) -> Option<Proxied> {
        let [port] = self.members.ports()[..] else {
            return None;
        };
        let proxy = TcpProxy::start(port).expect("proxy");
        let url = format!("{}://{}", self.service.scheme, proxy.connect_string());
        Some(Proxied { proxy, url })
    }
    /// The client is kept from reconnecting meanwhile (ZooKeeper: from taking its session
    /// back before the server closed it).
    fn end_session<'a>(&'a self, session: i64, proxy: &'a TcpProxy) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            proxy.refuse_new(true);
            (self.service.end_session)(self.members.address(), session).await;
            proxy.refuse_new(false);
        })
    }
    fn lease_cases(&self) -> Vec<(u64, u64)> {
        self.lease_cases.to_vec()
    }
    fn lease_on_server(&self, session: i64) -> BoxFuture<'_, Option<Duration>> {
        (self.service.lease_on_server)(self.members.address(), session)
    }
}

/// Implements [`Members`] for a test-kit handle: one server, or a set of them.
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
macro_rules! members {
    ($server:ty, $address:ident) => {
        impl Members for $server {
            fn url(&self) -> String {
                <$server>::url(self)
            }
            fn address(&self) -> String {
                <$server>::$address(self)
            }
            fn ports(&self) -> Vec<u16> {
                vec![<$server>::port(self)]
            }
            fn pause(&self) {
                <$server>::pause(self);
            }
            fn resume(&self) {
                <$server>::resume(self);
            }
        }
    };
    ($set:ty, $server:ty, $address:ident) => {
        impl Members for $set {
            fn url(&self) -> String {
                <$set>::url(self)
            }
            fn address(&self) -> String {
                <$set>::$address(self)
            }
            fn ports(&self) -> Vec<u16> {
                self.members().iter().map(<$server>::port).collect()
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

    members!(ZooKeeperServer, connect_string);
    members!(ZooKeeperEnsemble, ZooKeeperServer, connect_string);

    const ZOOKEEPER: Caps = Caps {
        extend: false,
        fixed_lease: false,
        fence_counter: false,
        replica_acks: false,
        // Braces are a Redis rule (the keys' hash tag); ZooKeeper paths may hold them.
        brace_names_refused: false,
        slash_names_refused: true,
        foreign_owner_reentry: false,
        waiter_queue: true,
        status_counts_holds: false,
        status_lease: false,
        invalid_names: &["..", "a\u{1}"],
        wake_within_ms: 2_000,
        told_of_force_unlock: true,
        long_pause: true,
        waits_through_a_pause: true,
        sessions: true,
        election: true,
        rw_lock: true,
        semaphore: true,
        downgrade_shares: true,
        client_slot: false,
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

    fn entries(address: String, name: String) -> BoxFuture<'static, Vec<Entry>> {
        Box::pin(async move {
            let children = common::zk_children(&address, &name).await;
            children
                .into_iter()
                .map(|(id, session)| Entry { id, session })
                .collect()
        })
    }

    /// The session timeout the server negotiated for `session` (`cons`: `to=`).
    fn timeout_on_server(address: String, session: i64) -> BoxFuture<'static, Option<Duration>> {
        Box::pin(async move {
            let sid = format!("sid=0x{:x},", session as u64);
            let ports = address.split(',').filter_map(|a| a.rsplit_once(':'));
            for port in ports.filter_map(|(_, p)| p.parse().ok()) {
                let cons = fencelock_testkit::four_letter(port, "cons").unwrap_or_default();
                if let Some(line) = cons.lines().find(|l| l.contains(&sid)) {
                    let to = line.split([',', ')']).find_map(|f| f.strip_prefix("to="));
                    let ms = to.and_then(|t| t.parse().ok()).expect("cons: to=");
                    return Some(Duration::from_millis(ms));
                }
            }
            panic!("no connection of session {sid} on {address}")
        })
    }

    fn end_session(address: String, session: i64) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let server = address.split(',').next().unwrap().to_owned();
            assert!(
                close_session(&server, session).await,
                "the session was not closed"
            );
        })
    }

    const SERVICE: Service = Service {
        scheme: "zk",
        bad_urls,
        entries,
        end_session,
        lease_on_server: timeout_on_server,
    };

    /// The password of session `id`, as the server derives it
    /// (`ZooKeeperServer.generatePasswd`: 16 bytes from `java.util.Random` seeded with
    /// `id ^ 0xB3415C00`).
    fn session_password(id: i64) -> [u8; 16] {
        const MULTIPLIER: i64 = 0x5_DEEC_E66D;
        const MASK: i64 = (1 << 48) - 1;
        let mut seed = (id ^ 0xB341_5C00 ^ MULTIPLIER) & MASK;
        let mut password = [0u8; 16];
        for chunk in password.chunks_mut(4) {
            // `Random.nextInt()`, its bytes lowest first, as `Random.nextBytes` takes them.
            seed = seed.wrapping_mul(MULTIPLIER).wrapping_add(0xB) & MASK;
            let mut int = (seed >> 16) as i32;
            for byte in chunk {
                *byte = int as u8;
                int >>= 8;
            }
        }
        password
    }

    /// Ends session `id` on the server (`host:port`) as Curator's `KillSession` did: a
    /// connection of its own takes the session over (its id and password; the server closes
    /// the client's connection) and closes it, in the ZooKeeper protocol. The server deletes
    /// the session's ephemeral nodes and tells the client, when it reconnects, that its
    /// session expired. False when the close was not answered: the client took its session
    /// back first.
    async fn close_session(server: &str, id: i64) -> bool {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        async fn send(s: &mut tokio::net::TcpStream, body: &[u8]) -> std::io::Result<()> {
            s.write_all(&(body.len() as i32).to_be_bytes()).await?;
            s.write_all(body).await
        }
        async fn receive(s: &mut tokio::net::TcpStream) -> std::io::Result<Vec<u8>> {
            let len = s.read_i32().await?;
            let mut body = vec![0; len.max(0) as usize];
            s.read_exact(&mut body).await?;
            Ok(body)
        }
        let exchange = async {
            let mut s = tokio::net::TcpStream::connect(server).await?;
            // ConnectRequest: protocol version, last zxid seen, timeout, session, password,
            // read-only.
            let mut connect = Vec::new();
            connect.extend_from_slice(&0i32.to_be_bytes());
            connect.extend_from_slice(&0i64.to_be_bytes());
            connect.extend_from_slice(&30_000i32.to_be_bytes());
            connect.extend_from_slice(&id.to_be_bytes());
            connect.extend_from_slice(&16i32.to_be_bytes());
            connect.extend_from_slice(&session_password(id));
            connect.push(0);
            send(&mut s, &connect).await?;
            // ConnectResponse: protocol version, then the timeout, zero if the session was
            // refused.
            let reply = receive(&mut s).await?;
            if reply.get(4..8) == Some(&[0; 4]) || reply.len() < 8 {
                return Ok(false);
            }
            // RequestHeader: xid, type (closeSession is -11); ReplyHeader: xid, zxid, error.
            send(
                &mut s,
                &[1i32.to_be_bytes(), (-11i32).to_be_bytes()].concat(),
            )
            .await?;
            let reply = receive(&mut s).await?;
            Ok::<_, std::io::Error>(reply.get(12..16) == Some(&[0; 4]))
        };
        matches!(
            tokio::time::timeout(Duration::from_secs(5), exchange).await,
            Ok(Ok(true))
        )
    }

    /// Session timeouts from 2 to 20 s (ZooKeeper's own bounds with a 1 s tick: 2 and 20
    /// ticks), so that the server's choice shows: `the_granted_lease_is_every_guards_lease`.
    pub async fn standalone() -> Sessioned<ZooKeeperServer> {
        let start = || {
            ZooKeeperServer::builder()
                .config("minSessionTimeout", "2000")
                .config("maxSessionTimeout", "20000")
                .start()
        };
        let members = tokio::task::spawn_blocking(start)
            .await
            .unwrap()
            .expect("start ZooKeeper");
        Sessioned {
            members,
            caps: ZOOKEEPER,
            service: SERVICE,
            lease_cases: &[(500, 2_000), (60_000, 20_000), (5_000, 5_000)],
        }
    }

    /// The test kit's session bounds: 400 ms to 60 s.
    pub async fn ensemble() -> Sessioned<ZooKeeperEnsemble> {
        let members = tokio::task::spawn_blocking(ZooKeeperEnsemble::start)
            .await
            .unwrap()
            .expect("start a ZooKeeper ensemble");
        Sessioned {
            members,
            caps: Caps {
                long_pause: false,
                ..ZOOKEEPER
            },
            service: SERVICE,
            lease_cases: &[(90_000, 60_000), (5_000, 5_000)],
        }
    }
}

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use fencelock_testkit::{etcdctl, EtcdCluster, EtcdServer};

    members!(EtcdServer, endpoints);
    members!(EtcdCluster, EtcdServer, endpoints);

    const ETCD: Caps = Caps {
        extend: false,
        fixed_lease: false,
        fence_counter: false,
        replica_acks: false,
        brace_names_refused: false,
        slash_names_refused: true,
        foreign_owner_reentry: false,
        waiter_queue: true,
        status_counts_holds: false,
        status_lease: true,
        invalid_names: &["a\u{1}"],
        // A watch event from the server, not a poll.
        wake_within_ms: 500,
        told_of_force_unlock: true,
        long_pause: true,
        waits_through_a_pause: true,
        sessions: true,
        election: true,
        rw_lock: true,
        semaphore: true,
        downgrade_shares: false,
        client_slot: true,
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

    fn entries(endpoints: String, name: String) -> BoxFuture<'static, Vec<Entry>> {
        Box::pin(async move {
            let keys = common::etcd_keys(&endpoints, &name).await;
            keys.into_iter()
                .map(|(id, _, lease)| Entry { id, session: lease })
                .collect()
        })
    }

    /// Revokes the lease as an operator would (`etcdctl lease revoke`).
    fn revoke(endpoints: String, lease: i64) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let lease = format!("{lease:x}");
            let revoke = move || etcdctl(&endpoints, &["lease", "revoke", &lease]);
            tokio::task::spawn_blocking(revoke)
                .await
                .unwrap()
                .expect("etcdctl lease revoke");
        })
    }

    /// The TTL the server granted the lease.
    fn granted_ttl(endpoints: String, lease: i64) -> BoxFuture<'static, Option<Duration>> {
        Box::pin(async move {
            let (_, granted) = common::etcd_lease_ttl(&endpoints, lease).await;
            Some(Duration::from_secs(granted as u64))
        })
    }

    const SERVICE: Service = Service {
        scheme: "etcd",
        bad_urls,
        entries,
        end_session: revoke,
        lease_on_server: granted_ttl,
    };

    /// etcd counts lease TTLs in whole seconds: a lease that is not a whole number of seconds
    /// is rounded up (2.2 s asks for 3 s, not the nearest 2 s).
    const LEASES: &[(u64, u64)] = &[(2_200, 3_000), (2_500, 3_000), (3_000, 3_000)];

    pub async fn single() -> Sessioned<EtcdServer> {
        let members = tokio::task::spawn_blocking(EtcdServer::start)
            .await
            .unwrap()
            .expect("start etcd");
        Sessioned {
            members,
            caps: ETCD,
            service: SERVICE,
            lease_cases: LEASES,
        }
    }

    pub async fn cluster() -> Sessioned<EtcdCluster> {
        let members = tokio::task::spawn_blocking(EtcdCluster::start)
            .await
            .unwrap()
            .expect("start an etcd cluster");
        Sessioned {
            members,
            caps: Caps {
                long_pause: false,
                wake_within_ms: 2_000,
                ..ETCD
            },
            service: SERVICE,
            lease_cases: LEASES,
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

/// One call made while the servers are stopped (SIGSTOP), to show that it does no I/O: it
/// must come back within 500 ms. Each stop lasts one call, never a list of them: a whole
/// ZooKeeper ensemble stopped for its sync limit (10 ticks of 200 ms) loses its quorum when
/// it runs again (each follower's read of the leader has timed out), and its members elect
/// and sync again while the next behaviours run, closing their sessions' connections or
/// holding their requests past the response timeout.
struct Stopped<'a> {
    d: &'a dyn Deployment,
    what: String,
}

impl Stopped<'_> {
    async fn run<T>(self, call: impl Future<Output = T>) -> T {
        let _paused = Paused::new(self.d);
        let quick = Duration::from_millis(500);
        let done = tokio::time::timeout(quick, call).await;
        done.unwrap_or_else(|_| panic!("{}: did I/O before refusing", self.what))
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

/// Runs `f` again while it fails with `Error::Unavailable` (a request unanswered within the
/// response timeout), for at most 20 s.
async fn unless_unavailable<T, F: Future<Output = Result<T, Error>>>(f: impl Fn() -> F) -> T {
    within(20.0, "an answer within the response timeout", async {
        loop {
            match f().await {
                Err(Error::Unavailable { detail, .. }) => eprintln!("unanswered: {detail}"),
                other => return other.unwrap(),
            }
        }
    })
    .await
}

/// Polls lock `name`'s entries on the servers until there are `n`, for at most 10 s.
async fn until_entries(d: &dyn Deployment, name: &str, n: usize) {
    within(
        10.0,
        &format!("{n} entries of {name} on the servers"),
        async {
            while d.entries(name).await.len() != n {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await
}

/// Waits until lock `name` has more entries on the servers than `before` (a new participant
/// queued, whatever the layout makes of it: a ZooKeeper semaphore's waiter adds a lease node
/// and a node in its `locks` folder); returns how many it has then.
async fn until_more_entries(d: &dyn Deployment, name: &str, before: usize) -> usize {
    within(
        10.0,
        &format!("more than {before} entries of {name} on the servers"),
        async {
            loop {
                let now = d.entries(name).await.len();
                if now > before {
                    return now;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await
}

fn waiter_owners(status: &fencelock::LockStatus) -> Vec<&str> {
    status.waiters.iter().map(|w| w.owner.as_str()).collect()
}

// ---------------------------------------------------------------------------------------
// Behaviours

/// Three clients, two owners (lock handles) in each, take a lock in turns; an in-process
/// counter of holders inside the critical section never exceeds one, the tokens, read in
/// holding order, strictly increase, and no entry is left on the servers.
async fn mutual_exclusion_and_increasing_tokens(d: &dyn Deployment) {
    const CLIENTS: usize = 3;
    const OWNERS: usize = 2;
    const HOLDINGS: usize = 5;
    let inside = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = connect(d, ClientOptions::default()).await;
        for _ in 0..OWNERS {
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
        }
        clients.push(client);
    }
    for t in tasks {
        t.await.expect("worker");
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), CLIENTS * OWNERS * HOLDINGS);
    assert_eq!(d.entries("excl").await, [], "an entry left behind");
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

/// The same handle or a clone re-enters: hold count 2, one token, one entry on the servers;
/// each guard gives back one hold, in either order; another handle (another owner) of the
/// same client does not get in.
async fn reentry_counts_holds(d: &dyn Deployment) {
    let caps = d.caps();
    let client = connect(d, lease(10_000)).await;
    let observer = connect(d, ClientOptions::default()).await;
    let lock = client.lock("re");
    let first = lock.acquire().await.unwrap();
    let second = lock.clone().acquire().await.unwrap();
    assert_eq!((first.hold_count(), second.hold_count()), (1, 2));
    assert_eq!(first.fencing_token(), second.fencing_token());
    assert!(client.lock("re").try_acquire().await.unwrap().is_err());
    assert_eq!(d.entries("re").await.len(), 1, "one entry for both holds");

    let status = observer.status("re").await.unwrap();
    assert!(status.held);
    let count = if caps.status_counts_holds { 2 } else { 1 };
    assert_eq!(status.owners, vec![(lock.owner().to_owned(), count)]);
    assert_eq!(status.fencing_token, Some(first.fencing_token()));
    if caps.status_lease {
        let left = status.remaining_lease;
        assert!(
            left.is_some_and(|r| r <= Duration::from_secs(10)),
            "{left:?}"
        );
    } else {
        assert_eq!(status.remaining_lease, None);
    }

    // The oldest guard first: the newer ones still hold.
    let third = lock.acquire().await.unwrap();
    assert_eq!(third.hold_count(), 3);
    assert_eq!(
        first.release().await.unwrap(),
        Released::StillHeld { count: 2 }
    );
    assert!(second.is_held() && third.is_held());
    // Then the newest.
    assert_eq!(
        third.release().await.unwrap(),
        Released::StillHeld { count: 1 }
    );
    assert!(second.is_held());
    assert!(observer.status("re").await.unwrap().held);
    assert_eq!(second.release().await.unwrap(), Released::Released);
    assert!(!observer.status("re").await.unwrap().held);
    assert_eq!(lock.release().await.unwrap(), Released::NotHeld);
    assert_eq!(d.entries("re").await, []);
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
    let entries = d.entries("owned").await;
    assert_eq!(
        entries.len(),
        1,
        "the foreign attempt left an entry: {entries:?}"
    );
    assert!(b.status("owned").await.unwrap().held);
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    assert!(!b.status("owned").await.unwrap().held);
}

/// `try_acquire` on a held lock is `Contended`, `acquire_timeout` is `Error::Timeout`, an
/// acquire dropped while it waits gives its place up; none leaves anything behind: no waiter,
/// no entry on the servers but the holder's, and a third client gets the lock at once after
/// the holder lets go.
async fn contended_and_timeout_leave_nothing_behind(d: &dyn Deployment) {
    let a = connect(d, lease(20_000)).await;
    let b = connect(d, lease(20_000)).await;
    let c = connect(d, lease(20_000)).await;
    let held = a.lock("busy").acquire().await.unwrap();
    let tried = b.lock("busy").try_acquire().await.unwrap();
    assert!(tried.is_err(), "try_acquire got a held lock");
    assert_eq!(waiters(&c, "busy").await, 0, "try_acquire left a waiter");
    assert_eq!(
        d.entries("busy").await.len(),
        1,
        "try_acquire left an entry"
    );

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
    assert_eq!(
        d.entries("busy").await.len(),
        1,
        "the timeout left an entry"
    );
    if d.caps().waiter_queue {
        let dropped = tokio::spawn({
            let lock = b.lock("busy");
            async move { lock.acquire().await }
        });
        until_entries(d, "busy", 2).await;
        dropped.abort();
        until_entries(d, "busy", 1).await;
        assert_eq!(
            waiters(&c, "busy").await,
            0,
            "the dropped acquire left a waiter"
        );
    }
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
    assert_eq!(d.entries("busy").await, []);
}

/// A waiter is woken by the release itself, not by a timer or its bound: the holder's lease
/// (or session) is 20 s, it lets go after 200 ms, and the waiter holds the lock within 2 s
/// (`Caps::wake_within_ms`).
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
        after < Duration::from_millis(caps.wake_within_ms),
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
/// (SIGSTOP) for the call alone (see [`Stopped`]), each refusal still comes back at once.
/// What a deployment declared unsupported is refused the same way.
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
    for name in caps.invalid_names {
        cases.push((client.lock(name), |e| {
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
    let mut bad_options = vec![
        lease(0),
        ClientOptions::default().default_lease(Duration::from_micros(500)),
        ClientOptions::default().default_lease(Duration::from_micros(1_500_500)),
    ];
    if !caps.fence_counter {
        bad_options.push(ClientOptions::default().fence_horizon(Duration::from_secs(3600)));
    }

    let stopped = |what: String| Stopped { d, what };
    within(30.0, "refusals while the servers are stopped", async {
        for (lock, expected) in &cases {
            let r = stopped(format!("{lock:?}: acquire"))
                .run(lock.acquire())
                .await;
            assert!(is_input(&r, *expected), "{lock:?}: {}", describe(&r));
            let r = stopped(format!("{lock:?}: try_acquire"))
                .run(lock.try_acquire())
                .await;
            assert!(is_input(&r, *expected), "{lock:?}: {}", describe(&r));
            let waiting = lock.acquire_timeout(Duration::from_secs(1));
            let r = stopped(format!("{lock:?}: acquire_timeout"))
                .run(waiting)
                .await;
            assert!(is_input(&r, *expected), "{lock:?}: {}", describe(&r));
            let r = stopped(format!("{lock:?}: release"))
                .run(lock.release())
                .await;
            assert!(is_input(&r, *expected), "{lock:?}: {}", describe(&r));
        }
        for name in ["", long.as_str()] {
            let r = stopped(format!("status {name:?}"))
                .run(client.status(name))
                .await;
            assert!(matches!(r, Err(Error::InvalidInput(_))), "{}", describe(&r));
            let forced = client.force_unlock(name);
            let r = stopped(format!("force_unlock {name:?}")).run(forced).await;
            assert!(matches!(r, Err(Error::InvalidInput(_))), "{}", describe(&r));
        }
        let urls = d.urls();
        for options in bad_options {
            let connecting = try_connect(&urls, options.clone());
            let r = stopped(format!("{options:?}: connect"))
                .run(connecting)
                .await;
            assert!(
                matches!(r, Err(Error::InvalidInput(_))),
                "{options:?}: {}",
                describe(&r)
            );
        }
        for urls in d.bad_urls() {
            let connecting = try_connect(&urls, ClientOptions::default());
            let r = stopped(format!("{urls:?}: connect")).run(connecting).await;
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

/// Another client's `force_unlock` while a waiter waits: the holder is told (`lost()`), the
/// waiter takes over with a larger token, the stale guard's release finds nothing, and no
/// entry is left. The holder's lease is 20 s, so it is told by the unlock, not its deadline
/// (on a Cluster, told at its next renewal: a 3 s lease).
async fn force_unlock_tells_the_holder_and_hands_over(d: &dyn Deployment) {
    let caps = d.caps();
    let holder_lease = if caps.told_of_force_unlock {
        20_000
    } else {
        3_000
    };
    let a = connect(d, lease(holder_lease)).await;
    let (b, c) = (
        connect(d, lease(20_000)).await,
        connect(d, lease(20_000)).await,
    );
    let got = a.lock("forced").acquire().await.unwrap();
    let next = tokio::spawn({
        let lock = c.lock("forced");
        async move { lock.acquire().await }
    });
    if caps.waiter_queue {
        until_waiters(&b, "forced", 1, 5.0).await;
        assert_eq!(d.entries("forced").await.len(), 2);
    }
    let removed = b.force_unlock("forced").await.unwrap();
    assert_eq!(removed.len(), 1, "{removed:?}");
    within(5.0, "the holder is told", got.lost()).await;
    assert!(!got.is_held());
    let taken = within(5.0, "hand-over", next).await.unwrap().unwrap();
    assert!(taken.fencing_token() > got.fencing_token());
    assert_eq!(got.release().await.unwrap(), Released::NotHeld);
    assert!(taken.is_held());
    assert_eq!(taken.release().await.unwrap(), Released::Released);
    assert_eq!(d.entries("forced").await, []);
}

/// A holder whose servers stop answering (SIGSTOP) is told (`lost()`) by its deadline, before
/// the servers can let its lease go and hand the lock to a waiting client: its lease is 2 s,
/// its deadline is at most 2 s after the stop, the servers stay stopped 3 s more after it was
/// told, and the waiter gets the lock only after the holder was told, with a larger token.
async fn a_paused_server_tells_the_holder_before_another_acquires(d: &dyn Deployment) {
    if !d.caps().long_pause {
        return;
    }
    let (a, b) = (
        connect(d, lease(2_000)).await,
        connect(d, lease(20_000)).await,
    );
    let held = a.lock("paused").acquire().await.unwrap();
    let retries = !d.caps().waits_through_a_pause;
    let waiter = tokio::spawn({
        let lock = b.lock("paused");
        async move {
            loop {
                let g = lock.acquire_timeout(Duration::from_secs(40)).await;
                let unanswered = matches!(g, Err(Error::Unavailable { .. } | Error::Quorum { .. }));
                if !(retries && unanswered) {
                    return (g, Instant::now());
                }
            }
        }
    });
    if d.caps().waiter_queue {
        until_entries(d, "paused", 2).await;
    }
    let lost_at = {
        let _paused = Paused::new(d);
        let paused = Instant::now();
        // The deadline the client counts (from its last renewal sent, before the stop) is
        // within a lease of the stop: read at once, not measured by when the woken test
        // task runs on a busy machine.
        let left = held.remaining_validity().unwrap_or_default();
        let told_by = Instant::now() + left;
        assert!(
            told_by - paused <= Duration::from_millis(2_000),
            "told {:?} after the stop",
            told_by - paused
        );
        within(5.0, "lost while the servers are stopped", held.lost()).await;
        let lost_at = Instant::now();
        // Fired by then, with room for a busy scheduler.
        assert!(lost_at - paused <= Duration::from_millis(2_500));
        // Past the servers' own count of the lease (the session's timeout, the TTL).
        tokio::time::sleep(Duration::from_millis(3_000)).await;
        lost_at
    };
    let (got, acquired_at) = within(30.0, "the waiter", waiter).await.unwrap();
    let got = got.expect("the waiter gets the lock once the lease expired");
    assert!(lost_at < acquired_at);
    assert!(got.fencing_token() > held.fencing_token());
    assert!(!held.is_held());
    assert_eq!(got.release().await.unwrap(), Released::Released);
    drop(held);
}

/// A release whose delete fails (its reply later than the response timeout; the server may
/// have deleted the node or key all the same) leaves the holding closed: the owner's next
/// acquire never re-enters it with the old token, and the lock is free again once the entry
/// is gone, deleted late or again in the background. The holder reaches the server through
/// a proxy. Failed before the fix (ZooKeeper, etcd): the failed delete made the holding
/// re-enterable, and the owner's next `try_acquire` returned the old token at once, with no
/// request, while another client held the lock (found by `fencelock verify --faults netem`).
async fn a_failed_release_is_never_reentered(d: &dyn Deployment) {
    let Some(Proxied { proxy, url }) = d.proxied() else {
        return;
    };
    let options = ClientOptions::default()
        .default_lease(Duration::from_millis(10_000))
        .response_timeout(Duration::from_millis(300));
    let a = Client::connect_with(&url, options.clone()).await.unwrap();
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
    // Another client, with the default response timeout: only A's replies are late.
    let b = connect(d, lease(10_000)).await;
    let other = b
        .lock("failed-release")
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("the lock is free: deleted late, or again in the background");
    assert!(other.fencing_token() > first);
    // A's requests have 300 ms to be answered: on a busy machine one may go unanswered
    // (`Unavailable`), and is tried again; what counts is that none re-enters.
    let again = unless_unavailable(|| lock.try_acquire()).await;
    assert!(
        again.is_err(),
        "re-entered a released holding: {:?}",
        again.map(|g| g.fencing_token())
    );
    let second = other.fencing_token();
    other.release().await.unwrap();
    let mine = unless_unavailable(|| lock.acquire_timeout(Duration::from_secs(10))).await;
    assert!(mine.fencing_token() > second);
    assert_eq!(mine.release().await.unwrap(), Released::Released);
    let last = b.lock("failed-release").try_acquire().await.unwrap();
    assert!(last.is_ok(), "the lock is free after the owner's release");
}

/// A release whose future is dropped before the server answered (`tokio::time::timeout`
/// firing first) is finished in the background, as a dropped guard's: the lock is free again
/// for another client, and for another handle of the same client (its per-lock slot on etcd).
/// Here the delete never reaches the server: it is still on its way through a proxy (a slow
/// link) when the connection is cut, so only a give-back that goes on after the drop, on the
/// client's next connection, frees the lock. Failed before the fix: on etcd the release
/// marked the holding closed and the delete was never sent again, so the key stayed under the
/// live lease, or the client's slot for the lock stayed taken; on ZooKeeper the node stayed
/// while the session lived.
async fn a_dropped_release_is_finished(d: &dyn Deployment) {
    let Some(Proxied { proxy, url }) = d.proxied() else {
        return;
    };
    let options = ClientOptions::default().default_lease(Duration::from_millis(20_000));
    let a = Client::connect_with(&url, options.clone()).await.unwrap();
    let b = connect(d, options).await;
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
    assert_eq!(other.release().await.unwrap(), Released::Released);
    let mine = a
        .lock("dropped-release")
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("another handle of the client gets the lock: its slot was freed");
    assert!(mine.fencing_token() > second);
    assert_eq!(mine.release().await.unwrap(), Released::Released);
    assert_eq!(d.entries("dropped-release").await, []);
}

/// Guards of two handles on two names, and both holds of a re-entered third lock.
async fn four_guards(client: &Client, prefix: &str) -> [fencelock::Guard; 4] {
    let first = client.lock(&format!("{prefix}-1")).acquire().await.unwrap();
    let second = client.lock(&format!("{prefix}-2")).acquire().await.unwrap();
    let lock = client.lock(&format!("{prefix}-3"));
    let outer = lock.acquire().await.unwrap();
    let inner = lock.acquire().await.unwrap();
    assert_eq!((outer.hold_count(), inner.hold_count()), (1, 2));
    [first, second, outer, inner]
}

/// The end of a client's session (ZooKeeper: closed by the server; etcd: its lease revoked,
/// see `Deployment::end_session`) fires `lost()` on every guard of the client at once, not on
/// one: guards of two handles on two names, and both holds of a re-entered lock (counted in
/// the client). The session is 30 s, so the guards are told by its end, not by their
/// deadlines. Their entries are gone, and the client goes on in a new session (as after an
/// expiry): it locks again with a larger token. The old guards' releases find nothing
/// (`NotHeld`), the re-entered lock's two guards included: neither says the lock is still
/// held (`StillHeld`) when the client has no session that could hold it; the new holding is
/// left alone.
async fn an_ended_session_tells_every_guard(d: &dyn Deployment) {
    let (true, Some(Proxied { proxy, url })) = (d.caps().sessions, d.proxied()) else {
        return;
    };
    let a = Client::connect_with(&url, lease(30_000)).await.unwrap();
    let guards = four_guards(&a, "every").await;
    let session = d.entries("every-1").await[0].session;
    for name in ["every-2", "every-3"] {
        let entries = d.entries(name).await;
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0].session, session, "one session for every lock");
    }
    d.end_session(session, &proxy).await;
    let ended = Instant::now();
    for name in ["every-1", "every-2", "every-3"] {
        assert_eq!(d.entries(name).await, [], "{name}");
    }
    for (i, g) in guards.iter().enumerate() {
        within(10.0, &format!("lost() of guard {i}"), g.lost()).await;
        assert!(!g.is_held(), "guard {i}");
        assert_eq!(
            g.lost_reason(),
            Some(LostReason::Session),
            "guard {i} was told by something else than the session's end"
        );
    }
    assert!(
        ended.elapsed() < Duration::from_secs(10),
        "told after {:?}: by the deadline, not the session's end",
        ended.elapsed()
    );
    // The client goes on in a new session, opened at its next operation: it locks again,
    // with a larger token and an entry of the new session, which excludes others.
    let again = within(10.0, "the client locks again, in a new session", async {
        loop {
            match a.lock("every-1").try_acquire().await {
                Ok(free) => return free.expect("the lock is free"),
                Err(Error::Unavailable { .. }) => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) => panic!("an acquire after the session's end: {e:?}"),
            }
        }
    })
    .await;
    assert!(again.fencing_token() > guards[0].fencing_token());
    let entries = d.entries("every-1").await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_ne!(entries[0].session, session, "an entry of the ended session");
    let other = connect(d, ClientOptions::default()).await;
    let busy = other.lock("every-1").try_acquire().await.unwrap();
    assert!(busy.is_err(), "the new holding excludes others");
    // The old guards' releases find nothing, and leave the new holding alone.
    let mut released = Vec::new();
    for g in guards {
        released.push(g.release().await.unwrap());
    }
    assert_eq!(
        released,
        [Released::NotHeld; 4],
        "first, second, outer, inner"
    );
    assert!(again.is_held());
    assert_eq!(again.release().await.unwrap(), Released::Released);
    assert_eq!(d.entries("every-1").await, []);
}

/// A client cut off from a running server (its connections closed, new ones refused) tells
/// every guard by its deadline: a 2 s lease, guards of two names and both holds of a
/// re-entered lock, each with its deadline within 2 s of the cut, and told within 2.5 s (room
/// for a busy scheduler).
async fn a_client_cut_off_tells_every_guard_by_the_deadline(d: &dyn Deployment) {
    let Some(Proxied { proxy, url }) = d.proxied() else {
        return;
    };
    let p = Client::connect_with(&url, lease(2_000)).await.unwrap();
    let guards = four_guards(&p, "cut").await;
    proxy.refuse_new(true);
    let cut = Instant::now();
    assert!(proxy.cut() >= 1);
    for (i, g) in guards.iter().enumerate() {
        // Each deadline the client counts is within the lease of the cut.
        let told_by = Instant::now() + g.remaining_validity().unwrap_or_default();
        assert!(told_by - cut <= Duration::from_millis(2_000), "guard {i}");
    }
    for (i, g) in guards.iter().enumerate() {
        within(5.0, &format!("lost() of cut-off guard {i}"), g.lost()).await;
        assert!(!g.is_held(), "cut-off guard {i}");
    }
    assert!(
        cut.elapsed() <= Duration::from_millis(2_500),
        "{:?}",
        cut.elapsed()
    );
    proxy.refuse_new(false);
}

/// The lease is the servers' to grant (ZooKeeper negotiates the session timeout within its
/// bounds; etcd counts TTLs in whole seconds and rounds up; Redis grants what is asked): the
/// lease granted is every guard's `lease()` and the servers' own, the guards' deadlines count
/// with it (never beyond it, and beyond what was asked when the servers granted more), and
/// `Client::warnings()` names both when it differs from `default_lease`; a lease granted as
/// asked comes without a warning.
async fn the_granted_lease_is_every_guards_lease(d: &dyn Deployment) {
    for (asked_ms, granted_ms) in d.lease_cases() {
        let asked = Duration::from_millis(asked_ms);
        let granted = Duration::from_millis(granted_ms);
        let c = connect(d, lease(asked_ms)).await;
        let g = c.lock("granted").acquire().await.unwrap();
        let again = c.lock("granted-2").acquire().await.unwrap();
        assert_eq!(g.lease(), granted, "asked for {asked:?}");
        assert_eq!(again.lease(), granted, "asked for {asked:?}");
        let left = g.remaining_validity().expect("held");
        assert!(left <= granted, "{left:?} left, asked {asked:?}");
        if granted > asked {
            assert!(left > asked, "{left:?} left, asked {asked:?}");
        }
        let session = d.entries("granted").await[0].session;
        if let Some(on_server) = d.lease_on_server(session).await {
            assert_eq!(on_server, granted, "the server's lease, asked {asked:?}");
        }
        common::assert_lease_reported(c.warnings(), asked, granted);
        assert_eq!(g.release().await.unwrap(), Released::Released);
        assert_eq!(again.release().await.unwrap(), Released::Released);
        c.close().await.unwrap();
    }
}

/// Whether behaviour `name` runs: all of them, unless `FENCELOCK_CONFORMANCE_ONLY` names
/// some (comma-separated parts of their names), to run a few while working on them.
fn selected(name: &str) -> bool {
    match std::env::var("FENCELOCK_CONFORMANCE_ONLY") {
        Ok(only) if !only.is_empty() => only.split(',').any(|part| name.contains(part)),
        _ => true,
    }
}

async fn run_all(d: &dyn Deployment, deployment: &str) {
    macro_rules! step {
        ($f:ident) => {{
            if !selected(stringify!($f)) {
                eprintln!("conformance {deployment}: {} skipped", stringify!($f));
            } else {
                let started = Instant::now();
                within(60.0, stringify!($f), $f(d)).await;
                eprintln!(
                    "conformance {deployment}: {} in {:?}",
                    stringify!($f),
                    started.elapsed()
                );
            }
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
    step!(force_unlock_tells_the_holder_and_hands_over);
    step!(a_paused_server_tells_the_holder_before_another_acquires);
    step!(a_failed_release_is_never_reentered);
    step!(a_dropped_release_is_finished);
    step!(an_ended_session_tells_every_guard);
    step!(a_client_cut_off_tells_every_guard_by_the_deadline);
    step!(the_granted_lease_is_every_guards_lease);
    step!(declared_capabilities_hold);
    step!(readers_share_and_a_writer_waits_its_turn);
    step!(rw_reentry_downgrade_and_refused_upgrade);
    step!(a_semaphore_never_has_more_than_n_holders);
    step!(semaphore_order_release_and_resize);
    step!(one_name_is_one_kind);
    step!(two_kinds_started_together_give_one_refusal);
    step!(first_acquires_of_one_owner_together_keep_each_hold);
    step!(a_semaphore_holds_at_most_the_current_n_through_resizes);
    step!(tokens_increase_in_holding_order_through_a_downgrade);
    step!(a_semaphores_n_lives_as_long_as_its_entries);
    step!(readers_behind_a_writer_hold_together);
    step!(a_downgrade_keeps_later_writers_out);
    step!(a_dead_clients_reader_and_permit_end_alone);
    step!(the_family_refuses_other_kinds_by_name);
    step!(permits_go_in_arrival_order_on_any_release);
    step!(another_n_is_refused_unless_resized);
    step!(a_raised_n_wakes_a_waiter);
    step!(a_paused_server_loses_readers_and_permits);
    step!(bad_multi_locks_are_refused_before_any_io);
    step!(a_multi_lock_is_all_or_nothing);
    step!(multi_locks_in_opposite_orders_never_deadlock);
    step!(a_multi_lock_gives_back_and_tells_of_any_loss);
    step!(a_multi_lock_returns_only_with_every_lock_held);
    step!(elections_are_offered_or_refused);
    step!(one_leader_at_a_time_in_arrival_order);
    step!(observers_see_each_leader_in_order);
    step!(a_cut_off_leader_is_told_before_the_next_leads);
    step!(a_reentry_never_waits_behind_the_clients_waiters);
    step!(a_foreign_owners_reentry_never_waits_behind_the_clients_waiters);
    step!(every_value_is_kept_and_handed_over_exactly);
    step!(a_standby_takes_over_whatever_its_value);
    step!(participants_of_two_clients_lead_one_at_a_time);
    step!(a_forced_unlock_deposes_the_leader);
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
