//! How a `RedisBackend` reaches its server: one server, the master a set of sentinels names,
//! or a Redis Cluster. Each has a command connection and a subscriber connection whose push
//! messages go straight to the client's `ReleaseSink`.
//!
//! A connection the server or the network closes (the server's `timeout` for idle clients,
//! `CLIENT KILL`, a reset) is replaced at once, not when the next request fails: both of a
//! node's connections speak RESP3, on which redis-rs's `ConnectionManager` hears of the
//! closed socket and connects again in the background. (On RESP2 it has no such signal: the
//! first request after the close fails with "broken pipe", and only that failure starts the
//! reconnection.) A request caught by a close in flight is sent once more by
//! `RedisBackend::on_master` if it may run twice.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{AsyncConnectionConfig, ConnectionInfo, PushInfo, PushKind, RedisError, Value};

use super::announce::Announcements;
use super::released::ReleasedHolds;
use super::setup::{manager_config, resp3};
use super::terms::ReleaseSink;
use super::url::server_name;
use crate::options::ClientOptions;

/// A node's subscriber connection as its push handler sees it (weakly: the node owns it).
type Watched = Weak<OnceLock<ConnectionManager>>;

/// Forwards release messages and disconnections from a subscriber connection.
///
/// After a disconnection, every waiter retries once (releases may have been missed). With
/// `resubscribed` (a node's subscriber connection, which redis-rs connects again and
/// resubscribes on its own), the waiters are woken only once that connection answers again,
/// i.e. after its channels were subscribed again: a waiter woken earlier could ask, find the
/// lock held, and then miss the release published before the resubscription, waiting for its
/// bound instead. `bound` limits that wait (the server may be down: then they retry at once).
pub(crate) fn push_handler(
    sink: Weak<dyn ReleaseSink>,
    resubscribed: Option<Watched>,
    bound: Duration,
) -> impl Fn(PushInfo) -> Result<(), ()> + Send + Sync + 'static {
    move |info: PushInfo| {
        if info.kind == PushKind::Disconnection {
            let sub = resubscribed
                .as_ref()
                .and_then(Weak::upgrade)
                .and_then(|s| s.get().cloned());
            if let (Some(mut sub), Ok(runtime)) = (sub, tokio::runtime::Handle::try_current()) {
                let sink = sink.clone();
                runtime.spawn(async move {
                    // Waits for the new connection, which subscribes the channels before it
                    // takes requests.
                    let ping = redis::cmd("PING");
                    let back = tokio::time::timeout(bound, ping.query_async::<Value>(&mut sub));
                    let back = match back.await {
                        Ok(Ok(_)) => true,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "the subscriber connection is not back");
                            false
                        }
                        Err(_) => false,
                    };
                    drop(sub);
                    if let Some(sink) = sink.upgrade() {
                        sink.disconnected();
                        if back {
                            sink.server_changed();
                        }
                    }
                });
                return Ok(());
            }
        }
        let Some(sink) = sink.upgrade() else {
            return Err(());
        };
        match info.kind {
            PushKind::Message | PushKind::SMessage => {
                if let [Value::BulkString(channel), Value::BulkString(message), ..] =
                    info.data.as_slice()
                {
                    if let Ok(channel) = std::str::from_utf8(channel) {
                        sink.released(channel, message);
                    }
                }
            }
            PushKind::Disconnection => sink.disconnected(),
            _ => {}
        }
        Ok(())
    }
}

/// The lock channels a Redis Cluster subscriber connection is subscribed to. When redis-rs
/// replaces a node's connection it subscribes that node's channels again in one `SSUBSCRIBE`,
/// which Redis refuses when they span slots (CROSSSLOT): waiters on two locks of one master
/// would then hear nothing until their bound. So after a disconnection they are subscribed
/// again here, one `SSUBSCRIBE` per slot, before the waiters are woken.
#[derive(Default)]
pub(crate) struct ShardChannels {
    sub: OnceLock<ClusterConnection>,
    channels: Mutex<HashSet<String>>,
}

impl ShardChannels {
    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes channels being subscribed (before the command: a disconnection meanwhile
    /// subscribes them again).
    pub(crate) fn add(&self, channels: &[String]) {
        self.set().extend(channels.iter().cloned());
    }

    /// Forgets channels being unsubscribed.
    pub(crate) fn remove(&self, channels: &[String]) {
        let mut set = self.set();
        for channel in channels {
            set.remove(channel);
        }
    }

    /// The channels by slot.
    fn by_slot(&self) -> Vec<Vec<String>> {
        let mut groups: std::collections::HashMap<u16, Vec<String>> = Default::default();
        for channel in self.set().iter() {
            groups
                .entry(slot(channel))
                .or_default()
                .push(channel.clone());
        }
        groups.into_values().collect()
    }

    /// Subscribes every channel again, one command per slot, each bounded by `bound`.
    async fn resubscribe(&self, bound: Duration) {
        let Some(sub) = self.sub.get() else { return };
        for group in self.by_slot() {
            let again = tokio::time::timeout(bound, sub.clone().ssubscribe(&group)).await;
            if !matches!(again, Ok(Ok(()))) {
                tracing::debug!(channels = ?group, "subscribing again after a disconnection failed");
            }
        }
    }
}

/// [`push_handler`] for a Redis Cluster: after a disconnection, the channels are subscribed
/// again slot by slot ([`ShardChannels`]) before the waiters are woken.
fn cluster_push_handler(
    sink: Weak<dyn ReleaseSink>,
    channels: Weak<ShardChannels>,
    bound: Duration,
) -> impl Fn(PushInfo) -> Result<(), ()> + Send + Sync + 'static {
    let forward = push_handler(sink.clone(), None, bound);
    move |info: PushInfo| {
        if info.kind != PushKind::Disconnection {
            return forward(info);
        }
        let (Some(channels), Ok(runtime)) =
            (channels.upgrade(), tokio::runtime::Handle::try_current())
        else {
            return forward(info);
        };
        let sink = sink.clone();
        runtime.spawn(async move {
            channels.resubscribe(bound).await;
            if let Some(sink) = sink.upgrade() {
                sink.disconnected();
            }
        });
        Ok(())
    }
}

/// Connections lent to acquisitions that wait for replicas. `WAIT` holds up every later
/// request on its connection until the replicas answer or its timeout passes, so it never
/// goes on the shared command connection, where renewals and other locks would queue behind
/// it. Each such acquisition borrows a connection of its own and gives it back when it went
/// well (a connection that failed or timed out is dropped); a few idle ones are kept.
pub(crate) struct Spare<C> {
    idle: Mutex<Vec<C>>,
}

impl<C> Spare<C> {
    /// Idle connections kept for later acquisitions; more are opened when needed.
    const KEEP: usize = 4;

    fn new() -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
        }
    }

    fn take(&self) -> Option<C> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    /// Drops the idle connections: one connection of their server was lost, and a server's
    /// `timeout` closes idle connections alike. New ones are opened when needed.
    pub(crate) fn clear(&self) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    pub(crate) fn give_back(&self, conn: C) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < Self::KEEP {
            idle.push(conn);
        }
    }
}

/// One server's command and subscriber connections, and connections for `WAIT`.
pub(crate) struct Node {
    pub(crate) cmd: ConnectionManager,
    pub(crate) sub: ConnectionManager,
    /// `sub` again, for its push handler to see (see [`push_handler`]).
    _watched: Arc<OnceLock<ConnectionManager>>,
    pub(crate) server: String,
    client: redis::Client,
    lend_config: AsyncConnectionConfig,
    pub(crate) spare: Spare<MultiplexedConnection>,
}

impl Node {
    /// What the node's connections were made from (address, credentials, database).
    pub(crate) fn connection_info(&self) -> ConnectionInfo {
        self.client.get_connection_info().clone()
    }
}

/// What the connections of a `Node` are built from.
struct NodeSetup {
    cmd: (redis::Client, ConnectionManagerConfig),
    sub: (redis::Client, ConnectionManagerConfig),
    watched: Arc<OnceLock<ConnectionManager>>,
    server: String,
    lend_config: AsyncConnectionConfig,
}

impl NodeSetup {
    /// The node, with its command and subscriber connections made from this setup.
    fn into_node(self, cmd: ConnectionManager, sub: ConnectionManager) -> Node {
        let _ = self.watched.set(sub.clone());
        Node {
            cmd,
            sub,
            _watched: self.watched,
            server: self.server,
            client: self.cmd.0,
            lend_config: self.lend_config,
            spare: Spare::new(),
        }
    }

    fn new(
        info: ConnectionInfo,
        options: &ClientOptions,
        sink: Weak<dyn ReleaseSink>,
    ) -> Result<Self, RedisError> {
        let server = server_name(&info);
        // Both on RESP3, so that closed connections are replaced at once (see `resp3`).
        let info = resp3(&info);
        let config = manager_config(options);
        let watched = Arc::new(OnceLock::new());
        let sub_config = config
            .clone()
            .set_push_sender(push_handler(
                sink,
                Some(Arc::downgrade(&watched)),
                options.request_bound(),
            ))
            .set_automatic_resubscription();
        Ok(Self {
            cmd: (redis::Client::open(info.clone())?, config),
            sub: (redis::Client::open(info)?, sub_config),
            watched,
            server,
            // The caller bounds each request (WAIT included) end to end.
            lend_config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(options.connect_timeout))
                .set_response_timeout(None),
        })
    }
}

impl Node {
    /// Connections that are made on first use (and again after failures): for a RedLock
    /// server that is down when the client starts.
    pub(crate) fn lazy(
        info: ConnectionInfo,
        options: &ClientOptions,
        sink: Weak<dyn ReleaseSink>,
    ) -> Result<Self, RedisError> {
        let setup = NodeSetup::new(info, options, sink)?;
        let cmd =
            ConnectionManager::new_lazy_with_config(setup.cmd.0.clone(), setup.cmd.1.clone())?;
        let sub =
            ConnectionManager::new_lazy_with_config(setup.sub.0.clone(), setup.sub.1.clone())?;
        Ok(setup.into_node(cmd, sub))
    }

    pub(crate) async fn connect(
        info: ConnectionInfo,
        options: &ClientOptions,
        sink: Weak<dyn ReleaseSink>,
    ) -> Result<Self, RedisError> {
        let setup = NodeSetup::new(info, options, sink)?;
        let (client, config) = &setup.cmd;
        let cmd = client
            .get_connection_manager_with_config(config.clone())
            .await?;
        let (client, config) = &setup.sub;
        let sub = client
            .get_connection_manager_with_config(config.clone())
            .await?;
        Ok(setup.into_node(cmd, sub))
    }

    /// A connection of its own for an acquisition that waits for replicas (see [`Spare`]).
    pub(crate) async fn lend(&self) -> Result<MultiplexedConnection, RedisError> {
        match self.spare.take() {
            Some(conn) => Ok(conn),
            None => {
                self.client
                    .get_multiplexed_async_connection_with_config(&self.lend_config)
                    .await
            }
        }
    }
}

/// The master named by a set of sentinels; replaced when it stops being the master.
pub(crate) struct SentinelConn {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    node: RwLock<Arc<Node>>,
    /// One switch at a time; a caller that lost the race finds the new node in place.
    switching: tokio::sync::Mutex<()>,
    /// Release channels subscribed on the current master, to subscribe again after a switch.
    channels: Mutex<HashSet<String>>,
    options: ClientOptions,
    sink: Weak<dyn ReleaseSink>,
    pub(crate) name: String,
    /// The sentinels' announcements of a new master, and how many of them the current node
    /// was resolved after: a manual failover leaves the old master writable for seconds.
    announced: Announcements,
    seen: AtomicU64,
    /// Releases a failover may have lost (see `released`), and the count of switches.
    pub(crate) released: ReleasedHolds,
}

impl SentinelConn {
    // `SentinelClient::build` takes a `String`, or an `impl AsRef<str>` when redis-rs is built
    // with rustls (as in a workspace build, where the benchmark's rslock turns it on): the
    // owned name serves both.
    #[allow(clippy::unnecessary_to_owned)]
    pub(crate) async fn connect(
        sentinels: Vec<ConnectionInfo>,
        master: &str,
        node_info: redis::RedisConnectionInfo,
        options: &ClientOptions,
        sink: Weak<dyn ReleaseSink>,
    ) -> Result<Self, RedisError> {
        let names: Vec<String> = sentinels.iter().map(server_name).collect();
        // Listening first: an announcement made while the master is resolved is not missed.
        let announced = Announcements::listen(&sentinels, master, options, sink.clone()).await;
        let seen = AtomicU64::new(announced.count());
        let mut client = SentinelClient::build(
            sentinels,
            master.to_owned(),
            Some(SentinelNodeConnectionInfo::default().set_redis_connection_info(node_info)),
            SentinelServerType::Master,
        )?;
        let node = Node::connect(Self::named(&mut client).await?, options, sink.clone()).await?;
        Ok(Self {
            sentinels: tokio::sync::Mutex::new(client),
            node: RwLock::new(Arc::new(node)),
            switching: tokio::sync::Mutex::new(()),
            channels: Mutex::new(HashSet::new()),
            options: options.clone(),
            sink,
            name: format!("{master} via sentinels {}", names.join(",")),
            announced,
            seen,
            released: ReleasedHolds::default(),
        })
    }

    /// Whether the sentinels announced a new master since the current one was resolved.
    pub(crate) fn announced_new(&self) -> bool {
        self.announced.count() > self.seen.load(Ordering::SeqCst)
    }

    /// The master the sentinels name when asked (the first that answers).
    async fn named(client: &mut SentinelClient) -> Result<ConnectionInfo, RedisError> {
        let master = client.async_get_client().await?;
        Ok(master.get_connection_info().clone())
    }

    /// `info` moved to the address announced last, if any.
    fn at_announced(&self, info: ConnectionInfo) -> Option<ConnectionInfo> {
        let (host, port) = self.announced.address()?;
        Some(info.set_addr(redis::ConnectionAddr::Tcp(host, port)))
    }

    /// The master to switch to from `failed`: the one the sentinels name, or, when the first
    /// sentinel that answers still names `failed` (one that did not lead the failover learns
    /// of it from the others within seconds) while a new master was announced, that one.
    async fn successor(&self, failed: &Node) -> Result<Node, RedisError> {
        let mut info = Self::named(&mut *self.sentinels.lock().await).await?;
        if server_name(&info) == failed.server && self.announced_new() {
            tracing::debug!("the sentinel asked still names the old master");
            info = self.at_announced(info.clone()).unwrap_or(info);
        }
        Node::connect(info, &self.options, self.sink.clone()).await
    }

    pub(crate) fn current(&self) -> Arc<Node> {
        self.node.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn track(&self, channel: &str, subscribed: bool) {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if subscribed {
            channels.insert(channel.to_owned());
        } else {
            channels.remove(channel);
        }
    }

    /// `failed` stopped acting as the master: ask the sentinels for the current one, connect,
    /// subscribe its release channels, and wake every waiter (releases may have been missed).
    pub(crate) async fn switch(&self, failed: &Arc<Node>) -> Result<(), RedisError> {
        let _one = self.switching.lock().await;
        if !Arc::ptr_eq(&self.current(), failed) {
            return Ok(()); // another caller switched already
        }
        let heard = self.announced.count();
        let node = self.successor(failed).await?;
        self.install(node, heard).await
    }

    /// The sentinels announced a new master: move to the address announced last. (Not to the
    /// one a sentinel names when asked: one that did not lead the failover may name the old
    /// master for seconds, and the old master still answers as one.) Each sentinel announces
    /// it: the first announcement moves the client, the others find it there.
    pub(crate) async fn follow_announcement(&self) -> Result<(), RedisError> {
        let _one = self.switching.lock().await;
        let heard = self.announced.count();
        if !self.announced_new() {
            return Ok(()); // another caller followed it already
        }
        let current = self.current();
        let info = self.at_announced(current.connection_info());
        let Some(info) = info.filter(|info| server_name(info) != current.server) else {
            // Nothing to follow, or already there.
            self.seen.store(heard, Ordering::SeqCst);
            return Ok(());
        };
        match Node::connect(info, &self.options, self.sink.clone()).await {
            Ok(node) => self.install(node, heard).await,
            Err(e) => {
                // Gone again, or an announcement out of order: not followed. The request goes
                // to the current master, and READONLY or a lost connection there asks the
                // sentinels.
                tracing::warn!(error = %e, "cannot reach the master the sentinels announced");
                self.seen.store(heard, Ordering::SeqCst);
                Ok(())
            }
        }
    }

    /// Makes `node` the master: its release channels subscribed, the releases kept turned
    /// stale, every waiter woken (releases may have been missed). `heard`: the announcements
    /// counted before it was chosen.
    async fn install(&self, node: Node, heard: u64) -> Result<(), RedisError> {
        let channels: Vec<String> = self
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect();
        if !channels.is_empty() {
            // One command for all (SUBSCRIBE takes any channels; this is not a Cluster).
            node.sub.clone().subscribe(&channels).await?;
        }
        let from = self.current().server.clone();
        let node_server = node.server.clone();
        tracing::warn!(%from, to = %node.server, "the sentinels named a new master");
        *self.node.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(node);
        self.seen.store(heard, Ordering::SeqCst);
        if node_server != from {
            self.released.switched();
        }
        if let Some(sink) = self.sink.upgrade() {
            sink.disconnected();
            sink.server_changed();
        }
        Ok(())
    }
}

/// A Redis Cluster: commands follow MOVED/ASK; release messages use sharded pub/sub.
pub(crate) struct ClusterConn {
    pub(crate) cmd: ClusterConnection,
    pub(crate) sub: ClusterConnection,
    /// The subscriber connection's channels, subscribed again slot by slot after a
    /// disconnection.
    pub(crate) channels: Arc<ShardChannels>,
    pub(crate) name: String,
    /// Builds the cluster connections lent to acquisitions that wait for replicas.
    lender: ClusterClient,
    pub(crate) spare: Spare<ClusterConnection>,
}

impl ClusterConn {
    pub(crate) async fn connect(
        nodes: Vec<ConnectionInfo>,
        options: &ClientOptions,
        sink: Weak<dyn ReleaseSink>,
    ) -> Result<Self, RedisError> {
        let names: Vec<String> = nodes.iter().map(server_name).collect();
        let settings = nodes[0].redis_settings().clone();
        let builder = |protocol| {
            let mut b = ClusterClientBuilder::new(nodes.clone())
                .connection_timeout(options.connect_timeout)
                .response_timeout(options.response_timeout)
                .use_protocol(protocol);
            if let Some(user) = settings.username() {
                b = b.username(user);
            }
            if let Some(password) = settings.password() {
                b = b.password(password);
            }
            b
        };
        let cmd = builder(redis::ProtocolVersion::RESP2)
            .build()?
            .get_async_connection()
            .await?;
        // The caller bounds each request end to end, WAIT included; a WAIT timeout is shorter
        // than the lease, which is at most MAX_LEASE.
        let lender = builder(redis::ProtocolVersion::RESP2)
            .response_timeout(crate::options::MAX_LEASE)
            .build()?;
        let channels = Arc::new(ShardChannels::default());
        let bound = options.request_bound();
        let sub = builder(redis::ProtocolVersion::RESP3)
            // The cluster connection reconnects a node's connection on its own.
            .push_sender(cluster_push_handler(sink, Arc::downgrade(&channels), bound))
            .build()?
            .get_async_connection()
            .await?;
        let _ = channels.sub.set(sub.clone());
        Ok(Self {
            cmd,
            sub,
            channels,
            name: format!("cluster {}", names.join(",")),
            lender,
            spare: Spare::new(),
        })
    }

    /// A cluster connection of its own for an acquisition that waits for replicas.
    pub(crate) async fn lend(&self) -> Result<ClusterConnection, RedisError> {
        match self.spare.take() {
            Some(conn) => Ok(conn),
            None => self.lender.get_async_connection().await,
        }
    }
}

/// The Redis Cluster hash slot of a key (CRC16/XMODEM of its hash tag, mod 16384).
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = key
        .find('{')
        .and_then(|open| {
            let close = key[open + 1..].find('}')? + open + 1;
            (close > open + 1).then(|| &bytes[open + 1..close])
        })
        .unwrap_or(bytes);
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT.
        assert_eq!(super::slot("foo"), 12182);
        assert_eq!(super::slot("{user1000}.following"), super::slot("user1000"));
        assert_eq!(
            super::slot("fencelock:{orders:42}"),
            super::slot("orders:42")
        );
        assert_eq!(super::slot("{}x"), super::slot("{}x"));
    }
}
