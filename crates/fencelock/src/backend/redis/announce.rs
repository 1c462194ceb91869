//! What the sentinels announce: `+switch-master`, heard on a subscription to each sentinel.
//!
//! A manual failover (`SENTINEL FAILOVER`) promotes the replica but leaves the old master a
//! writable master until a sentinel converts it, about ten seconds later (one replica `INFO`
//! period). Until then neither `READONLY` nor a closed connection tells a client: without
//! listening to the sentinels it would go on locking on the old master, where every grant
//! is lost at the conversion, while clients that did switch lock on the new one: two holders
//! for as long as ten seconds. Each announcement for the client's master counts here; the
//! client switches before its next request, and its waiters are woken to retry there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use redis::aio::ConnectionManager;
use redis::{ConnectionInfo, PushInfo, PushKind, RedisError, Value};

use super::setup::{manager_config, resp3};
use super::terms::ReleaseSink;
use crate::options::ClientOptions;

/// The `+switch-master` messages heard for one master name, and the last address announced.
pub(crate) struct Announcements {
    count: Arc<AtomicU64>,
    address: Arc<Mutex<Option<(String, u16)>>>,
    /// One subscriber connection per sentinel that answered (kept alive here; each is
    /// connected and subscribed again by redis-rs after a loss).
    _listeners: Vec<ConnectionManager>,
}

impl Announcements {
    /// Subscribes to `+switch-master` on every sentinel that answers within the connect
    /// timeout. Best effort: a sentinel that does not answer is not heard, and the client
    /// still switches on `READONLY` or a lost connection.
    pub(crate) async fn listen(
        sentinels: &[ConnectionInfo],
        master: &str,
        options: &ClientOptions,
        sink: Weak<dyn ReleaseSink>,
    ) -> Self {
        let count = Arc::new(AtomicU64::new(0));
        let address = Arc::new(Mutex::new(None));
        let mut listeners = Vec::new();
        for info in sentinels {
            let heard = Heard {
                master: master.to_owned(),
                count: count.clone(),
                address: address.clone(),
            };
            let handler = on_message(heard, sink.clone());
            let config = manager_config(options)
                .set_push_sender(handler)
                .set_automatic_resubscription();
            let listen = async {
                let client = redis::Client::open(resp3(info))?;
                let mut conn = ConnectionManager::new_with_config(client, config).await?;
                conn.subscribe("+switch-master").await?;
                Ok::<_, RedisError>(conn)
            };
            match tokio::time::timeout(options.connect_timeout, listen).await {
                Ok(Ok(conn)) => listeners.push(conn),
                Ok(Err(e)) => tracing::debug!(error = %e, "cannot listen to a sentinel"),
                Err(_) => tracing::debug!("cannot listen to a sentinel: no answer in time"),
            }
        }
        Self {
            count,
            address,
            _listeners: listeners,
        }
    }

    /// How many new masters the sentinels announced so far.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// The address of the master announced last, if any.
    pub(crate) fn address(&self) -> Option<(String, u16)> {
        self.address
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Where a listener records what it heard.
struct Heard {
    master: String,
    count: Arc<AtomicU64>,
    address: Arc<Mutex<Option<(String, u16)>>>,
}

/// Counts `+switch-master <name> <old ip> <old port> <new ip> <new port>` for `master`, and
/// wakes every waiter: a waiter subscribed on the old master would not hear releases on the
/// new one, so it retries, and its retry switches first.
fn on_message(
    heard: Heard,
    sink: Weak<dyn ReleaseSink>,
) -> impl Fn(PushInfo) -> Result<(), ()> + Send + Sync + 'static {
    move |push: PushInfo| {
        let [_, Value::BulkString(text), ..] = push.data.as_slice() else {
            return Ok(());
        };
        if push.kind != PushKind::Message {
            return Ok(());
        }
        let text = String::from_utf8_lossy(text);
        let words: Vec<&str> = text.split(' ').collect();
        let [name, _, _, host, port] = words[..] else {
            return Ok(());
        };
        if name != heard.master {
            return Ok(());
        }
        tracing::warn!(announced = %text, "the sentinels announced a new master");
        if let Ok(port) = port.parse::<u16>() {
            let mut address = heard.address.lock().unwrap_or_else(|e| e.into_inner());
            *address = Some((host.to_owned(), port));
        }
        heard.count.fetch_add(1, Ordering::SeqCst);
        if let Some(sink) = sink.upgrade() {
            sink.disconnected();
        }
        Ok(())
    }
}
