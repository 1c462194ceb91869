//! Waking waiters: one `LISTEN` connection per client, on the schema's channel, whose
//! notifications (the payload is a lock's name) wake that name's waiters; and a bounded
//! re-check, so that a waiter looks again even when no notification comes.
//!
//! A transaction-pooling proxy (PgBouncer 1.18 in Debian 12) accepts `LISTEN` and delivers
//! nothing: the `LISTEN` ran on a server connection that went back to the pool. So the
//! client does not trust `LISTEN` until it has seen it work: after `LISTEN` it sends a probe
//! (`NOTIFY` with an empty payload, which no lock name is) through its other connection,
//! and waiters re-check every [`RECHECK_POLLING`] until the probe comes back. Through such a
//! proxy it never does; `listen=off` in the URL skips the listener and the probe. While
//! notifications arrive, waiters still re-check every [`RECHECK_LISTENING`], so that a
//! notification lost with a broken connection costs at most that long. When the listening
//! connection breaks, every waiter looks again and the listener connects again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::future::poll_fn;
use tokio::sync::watch;
use tokio_postgres::{AsyncMessage, Config, NoTls};
use tokio_util::sync::CancellationToken;

use super::conn::Link;
use super::schema;

/// How often a waiter looks again while notifications are not known to arrive (no listener
/// yet, `listen=off`, or a proxy that does not deliver them): the bound of a hand-over's
/// delay through a transaction-pooling proxy.
pub(crate) const RECHECK_POLLING: Duration = Duration::from_millis(200);

/// How often a waiter looks again while notifications arrive.
pub(crate) const RECHECK_LISTENING: Duration = Duration::from_secs(5);

/// The pause before the listener connects again.
const RECONNECT: Duration = Duration::from_millis(200);

/// The waiters' wake-ups, by lock name, and whether notifications are known to arrive.
#[derive(Default)]
pub(crate) struct Wakes {
    names: Mutex<HashMap<String, watch::Sender<u64>>>,
    listening: AtomicBool,
}

impl Wakes {
    /// A wake-up for lock `name`'s waiter. Take it before reading the queue: a notification
    /// that comes after is not missed.
    pub(crate) fn subscribe(self: &Arc<Self>, name: &str) -> Wake {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        let sender = names
            .entry(name.to_owned())
            .or_insert_with(|| watch::channel(0).0);
        Wake {
            rx: sender.subscribe(),
            wakes: self.clone(),
            name: name.to_owned(),
        }
    }

    /// Wakes lock `name`'s waiters.
    pub(crate) fn wake(&self, name: &str) {
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = names.get(name) {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wakes every waiter (notifications may have been lost).
    fn wake_all(&self) {
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        for sender in names.values() {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Whether notifications are known to arrive.
    pub(crate) fn listening(&self) -> bool {
        self.listening.load(Ordering::Relaxed)
    }

    /// How long a waiter waits at most before it looks again.
    pub(crate) fn recheck(&self) -> Duration {
        match self.listening() {
            true => RECHECK_LISTENING,
            false => RECHECK_POLLING,
        }
    }

    fn set_listening(&self, on: bool) {
        self.listening.store(on, Ordering::Relaxed);
    }
}

/// One waiter's wake-up for one lock name.
pub(crate) struct Wake {
    rx: watch::Receiver<u64>,
    wakes: Arc<Wakes>,
    name: String,
}

impl Wake {
    /// Resolves once the name was notified since the last call (or since the subscription),
    /// or after the re-check interval.
    pub(crate) async fn next(&mut self) {
        let recheck = self.wakes.recheck();
        let _ = tokio::time::timeout(recheck, self.rx.changed()).await;
        self.rx.mark_unchanged();
    }
}

impl Drop for Wake {
    /// The name's entry goes with its last waiter.
    fn drop(&mut self) {
        let mut names = self.wakes.names.lock().unwrap_or_else(|e| e.into_inner());
        if names
            .get(&self.name)
            .is_some_and(|s| s.receiver_count() <= 1)
        {
            names.remove(&self.name);
        }
    }
}

/// Starts the listener of `schema`'s channel, which runs until `stop` is cancelled or the
/// link (held weakly: the session owns it) is gone. The probe goes through `link`.
pub(crate) fn start(
    config: Config,
    bound: Duration,
    schema: &str,
    link: Weak<Link>,
    wakes: Arc<Wakes>,
    stop: CancellationToken,
) {
    let channel = schema::channel(schema);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = listen(&config, bound, &channel, &link, &wakes) => {}
            }
            wakes.set_listening(false);
            wakes.wake_all();
            if link.strong_count() == 0 {
                return;
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(RECONNECT) => {}
            }
        }
    });
}

/// One listening connection, until it breaks: `LISTEN`, the probe, then every notification
/// to its name's waiters (the probe's empty payload: notifications arrive).
async fn listen(config: &Config, bound: Duration, channel: &str, link: &Weak<Link>, wakes: &Wakes) {
    let Ok(Ok((client, mut connection))) = tokio::time::timeout(bound, config.connect(NoTls)).await
    else {
        return;
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let driving = async move {
        while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(n.payload().to_owned()).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "PostgreSQL listening connection ended");
                    return;
                }
            }
        }
    };
    let subscribing = async {
        let listened = client.batch_execute(&format!("LISTEN \"{channel}\"")).await;
        let probe = format!("SELECT pg_notify({}, '')", schema::text(channel));
        match (listened, link.upgrade()) {
            (Ok(()), Some(link)) => link.run(&probe).await.is_ok(),
            _ => false,
        }
    };
    let forwarding = async {
        if !subscribing.await {
            return;
        }
        // Anything may have changed between the last look of a waiter and `LISTEN`.
        wakes.wake_all();
        while let Some(name) = rx.recv().await {
            match name.is_empty() {
                true => wakes.set_listening(true),
                false => wakes.wake(&name),
            }
        }
    };
    tokio::select! {
        () = driving => {}
        () = forwarding => {}
    }
}
