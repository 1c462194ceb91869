//! Local wait queues, fed by release notifications and handovers.
//!
//! All waiters of one client share its subscriber connection. Per lock, the waiters of this
//! client form a FIFO queue and only its head talks to the server. On one server (Sentinel,
//! Cluster) the head's attempt also takes a place in the server's wait queue, and the release
//! script hands the lock to the first place with a `=grant <attempt> <token>` message: only
//! the waiter that place belongs to is woken, and it holds the lock without another command.
//! The message goes to that waiter's client alone: each client also subscribes the lock's
//! channel followed by `:<client id>`, and the place records that id, so the other clients
//! waiting for the lock are not woken to read it.
//! So a contended lock costs about two commands per acquisition (the release, and the next
//! head's attempt that takes its place) and is handed over in arrival order, across clients
//! too. Any other message (a release with nobody queued, a forced unlock, a lost subscription)
//! wakes each client's head, which tries again. With RedLock there is no server queue (each
//! server would hand over on its own): heads of different clients race for the majority.
//!
//! An election's observers (`observe`) listen on the same subscription: every message on the
//! lock's channel wakes each of them (they read the leader again), and a lost subscription
//! tells them to stop. The `=leader` messages the scripts publish for them wake no waiter.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use super::engine::Engine;
use super::keys::{client_channel, LockKeys};
use super::terms::ReleaseSink;
use crate::background::Background;
use crate::error::Error;
use crate::lease::LostReason;
use crate::watchdog::Watchdog;

/// How long a release channel stays subscribed after its last local waiter left: a lock that
/// is contended now is likely contended again in a moment, and re-subscribing would cost two
/// commands per episode.
const SUBSCRIPTION_LINGER: Duration = Duration::from_secs(1);

/// One waiting `acquire` call.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    notify: Notify,
    /// Set when this slot became head because its predecessor acquired the lock: the lock is
    /// held for up to this long, so attempting before a release message would be wasted.
    handoff: Mutex<Option<Duration>>,
    /// The attempt id of this waiter's place in the server's wait queue, if it has one.
    place: Mutex<Option<u64>>,
    /// A handover to that place.
    grant: Mutex<Option<Grant>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Default)]
struct Queue {
    waiters: VecDeque<Arc<Slot>>,
    /// The election observers of this client that follow the lock.
    observers: Vec<Arc<Watch>>,
    subscribed: bool,
}

impl Queue {
    /// Nobody of this client listens on the channel any more.
    fn is_empty(&self) -> bool {
        self.waiters.is_empty() && self.observers.is_empty()
    }
}

/// One election observer's part of the subscription: woken by every message on the lock's
/// channel, and cut when the subscriber connection dropped (messages may have been missed).
#[derive(Debug, Default)]
pub(crate) struct Watch {
    notify: Notify,
    cut: std::sync::atomic::AtomicBool,
}

impl Watch {
    /// Resolves at the next message (or cut) since the last call.
    pub(crate) async fn woken(&self) {
        self.notify.notified().await
    }

    /// Whether the subscription dropped since the observer joined.
    pub(crate) fn is_cut(&self) -> bool {
        self.cut.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// An election observer's registration ([`WaitRegistry::watch`]): removed from its channel
/// when dropped, and the channel unsubscribed (in a task) once nobody listens.
pub(crate) struct Watching {
    registry: Arc<WaitRegistry>,
    engine: Weak<Engine>,
    channel: String,
    pub(crate) watch: Arc<Watch>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        let idle = {
            let mut channels = self.registry.channels();
            let Some(queue) = channels.get_mut(&self.channel) else {
                return;
            };
            queue.observers.retain(|w| !Arc::ptr_eq(w, &self.watch));
            queue.is_empty()
        };
        let runtime = tokio::runtime::Handle::try_current();
        if let (true, Some(engine), Ok(runtime)) = (idle, self.engine.upgrade(), runtime) {
            let (registry, channel) = (self.registry.clone(), std::mem::take(&mut self.channel));
            runtime.spawn(async move { registry.unsubscribe_if_idle(&engine, &channel).await });
        }
    }
}

/// A message for election observers only (see queue.lua's `LEADER`).
fn for_observers(message: &[u8]) -> bool {
    message == b"=leader"
}

/// The wait queues of one client, keyed by release channel.
#[derive(Debug)]
pub(crate) struct WaitRegistry {
    channels: Mutex<HashMap<String, Queue>>,
    /// Serialises SUBSCRIBE and UNSUBSCRIBE so that they reach the server in decision order.
    subscription: tokio::sync::Mutex<()>,
    /// The prefix of this client's owner ids: a lock's channel followed by `:<client id>` is
    /// this client's channel for the handovers to its places (which name the client id).
    client_id: Arc<str>,
    /// This client's own channel, where a forced unlock names the holds it deleted.
    own_channel: String,
    /// The client's watchdog, asked to renew every lease at once when a connection came back
    /// or the master changed (see `ReleaseSink::server_changed`), and whose leases a forced
    /// unlock ends.
    watchdog: Weak<Watchdog>,
}

impl WaitRegistry {
    pub(crate) fn new(watchdog: Weak<Watchdog>, client_id: &str) -> Self {
        Self {
            channels: Mutex::default(),
            subscription: tokio::sync::Mutex::default(),
            client_id: client_id.into(),
            own_channel: client_channel(client_id),
            watchdog,
        }
    }

    /// This client's own channel (see `keys::CLIENT_CHANNELS`).
    pub(crate) fn own_channel(&self) -> &str {
        &self.own_channel
    }

    /// A forced unlock deleted these holds of the lock whose key is `key`: the leases of
    /// this client among them are lost.
    fn forced(&self, key: &str, holds: &[u64]) {
        let Some(watchdog) = self.watchdog.upgrade() else {
            return;
        };
        for lease in watchdog.leases() {
            let hold = &lease.hold;
            if holds.contains(&hold.id) && LockKeys::of(&hold.lock).lock().is(key) {
                lease.fire_lost(LostReason::Deleted);
            }
        }
    }

    /// The client id that the places of this client's attempts name.
    pub(crate) fn client_id(&self) -> &Arc<str> {
        &self.client_id
    }

    /// The channels a waiter for the lock whose channel is `channel` listens on: that one,
    /// and where the server keeps a queue, this client's channel for the handovers to its
    /// places (as queue.lua's end_holding names it from the place).
    fn channels_of(&self, engine: &Engine, channel: &str) -> Vec<String> {
        let mut channels = vec![channel.to_owned()];
        if engine.queues() {
            channels.push(format!("{channel}:{}", self.client_id));
        }
        channels
    }

    fn channels(&self) -> std::sync::MutexGuard<'_, HashMap<String, Queue>> {
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this client waits for no lock (and receives no lock's channel): then no
    /// caller needs to queue up at once, whatever its lock.
    pub(crate) fn is_idle(&self) -> bool {
        self.channels().is_empty()
    }

    /// Whether this client already has waiters for the channel (then a new caller queues up
    /// behind them instead of barging in with an attempt of its own).
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        self.channels()
            .get(channel)
            .is_some_and(|q| !q.waiters.is_empty())
    }

    /// Whether the subscriber connection receives `channel` already (a lock waited for a
    /// moment ago; the subscription lingers).
    pub(crate) fn is_subscribed(&self, channel: &str) -> bool {
        self.channels().get(channel).is_some_and(|q| q.subscribed)
    }

    /// Joins the queue of `channel`, and makes sure the subscriber connection receives its
    /// releases before returning, so that a release after this point cannot be missed.
    pub(crate) async fn join(
        self: &Arc<Self>,
        engine: &Arc<Engine>,
        background: &Background,
        channel: &str,
    ) -> Result<Ticket, Error> {
        let slot = Arc::new(Slot::default());
        let subscribed = {
            let mut channels = self.channels();
            let queue = channels.entry(channel.to_owned()).or_default();
            queue.waiters.push_back(slot.clone());
            queue.subscribed
        };
        let ticket = Ticket {
            registry: self.clone(),
            engine: engine.clone(),
            background: background.clone(),
            channel: channel.to_owned(),
            slot,
            acquired: Mutex::new(None),
        };
        if !subscribed {
            let _order = self.subscription.lock().await;
            if !self.channels().get(channel).is_some_and(|q| q.subscribed) {
                engine.subscribe(&self.channels_of(engine, channel)).await?;
                if let Some(queue) = self.channels().get_mut(channel) {
                    queue.subscribed = true;
                }
            }
        }
        Ok(ticket)
    }

    /// Adds an election observer of the lock whose channel is `channel`, and makes sure the
    /// subscriber connection receives that channel before returning (as [`Self::join`]), so
    /// that a change after this point cannot be missed. The observer is removed when the
    /// returned [`Watching`] drops, also when this future is dropped half-way.
    pub(crate) async fn watch(
        self: &Arc<Self>,
        engine: &Arc<Engine>,
        channel: &str,
    ) -> Result<Watching, Error> {
        let watching = Watching {
            registry: self.clone(),
            engine: Arc::downgrade(engine),
            channel: channel.to_owned(),
            watch: Arc::new(Watch::default()),
        };
        let subscribed = {
            let mut channels = self.channels();
            let queue = channels.entry(channel.to_owned()).or_default();
            queue.observers.push(watching.watch.clone());
            queue.subscribed
        };
        if !subscribed {
            let _order = self.subscription.lock().await;
            if !self.channels().get(channel).is_some_and(|q| q.subscribed) {
                engine.subscribe(&self.channels_of(engine, channel)).await?;
                if let Some(queue) = self.channels().get_mut(channel) {
                    queue.subscribed = true;
                }
            }
        }
        Ok(watching)
    }

    /// Unsubscribes from a channel whose queue is empty; runs in the background task.
    pub(crate) async fn unsubscribe_if_idle(&self, engine: &Engine, channel: &str) {
        let _order = self.subscription.lock().await;
        {
            let mut channels = self.channels();
            match channels.get(channel) {
                Some(q) if q.is_empty() => {
                    let was_subscribed = q.subscribed;
                    channels.remove(channel);
                    if !was_subscribed {
                        return;
                    }
                }
                _ => return,
            }
        }
        let channels = self.channels_of(engine, channel);
        if let Err(e) = engine.unsubscribe(&channels).await {
            // A stale subscription only costs an ignored message per release.
            tracing::debug!(channel, error = %e, "unsubscribe failed");
        }
    }

    fn leave(&self, channel: &str, slot: &Arc<Slot>, acquired: Option<Duration>) -> bool {
        let mut channels = self.channels();
        let Some(queue) = channels.get_mut(channel) else {
            return false;
        };
        let was_head = queue
            .waiters
            .front()
            .is_some_and(|head| Arc::ptr_eq(head, slot));
        queue.waiters.retain(|s| !Arc::ptr_eq(s, slot));
        if was_head {
            if let Some(next) = queue.waiters.front() {
                *next.handoff.lock().unwrap_or_else(|e| e.into_inner()) = acquired;
                next.notify.notify_one();
            }
        }
        queue.is_empty()
    }

    fn is_head(&self, channel: &str, slot: &Arc<Slot>) -> bool {
        self.channels()
            .get(channel)
            .and_then(|q| q.waiters.front())
            .is_some_and(|head| Arc::ptr_eq(head, slot))
    }
}

/// A handover to a place in the server's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The attempt that took the place; it names the hold.
    pub(crate) attempt: u64,
    /// The holding's fencing token.
    pub(crate) token: u64,
    /// How long after the place was taken the server handed it over, in whole ms (rounded
    /// down); it gave one window from then.
    pub(crate) elapsed_ms: u64,
}

/// `=grant <attempt> <token> <elapsed_ms>`: the release script handed the lock to the queue
/// place that `attempt` took.
fn parse_grant(message: &[u8]) -> Option<Grant> {
    // Decimal as the scripts write it: digits only, no leading zero.
    fn number(text: &str) -> Option<u64> {
        let canonical =
            text.bytes().all(|b| b.is_ascii_digit()) && !(text.len() > 1 && text.starts_with('0'));
        canonical.then(|| text.parse().ok()).flatten()
    }
    let text = std::str::from_utf8(message.strip_prefix(b"=grant ")?).ok()?;
    let mut parts = text.split(' ');
    let attempt = number(parts.next()?)?;
    let token = number(parts.next()?)?;
    let elapsed_ms = number(parts.next()?)?;
    if parts.next().is_some() {
        return None;
    }
    Some(Grant {
        attempt,
        token,
        elapsed_ms,
    })
}

/// `=forced <lock key> <hold id> ...`, as force_unlock.lua tells a holder's client: the key
/// (`fencelock:{name}`, whose name has no brace) and the holds it deleted.
fn parse_forced(message: &[u8]) -> Option<(&str, Vec<u64>)> {
    let text = std::str::from_utf8(message.strip_prefix(b"=forced ")?).ok()?;
    let end = text.find('}')? + 1;
    let (key, holds) = text.split_at(end);
    let holds = holds.strip_prefix(' ')?;
    let holds: Option<Vec<u64>> = holds.split(' ').map(|id| id.parse().ok()).collect();
    Some((key, holds?))
}

impl ReleaseSink for WaitRegistry {
    fn released(&self, channel: &str, message: &[u8]) {
        if channel == self.own_channel {
            if let Some((key, holds)) = parse_forced(message) {
                self.forced(key, &holds);
            }
            return;
        }
        // A handover on this client's channel for the lock: the lock's channel is its prefix.
        let own = channel
            .strip_suffix(&*self.client_id)
            .and_then(|c| c.strip_suffix(':'));
        let channel = own.unwrap_or(channel);
        let channels = self.channels();
        let Some(queue) = channels.get(channel) else {
            return;
        };
        if own.is_none() {
            // On the lock's channel: the leader may have changed.
            for watch in &queue.observers {
                watch.notify.notify_one();
            }
        }
        if for_observers(message) {
            return;
        }
        match parse_grant(message) {
            // A handover wakes only the waiter it was made to, if it is one of ours: the
            // other waiters keep their places, instead of all racing for the lock.
            Some(grant) => {
                if let Some(slot) = queue
                    .waiters
                    .iter()
                    .find(|s| *lock(&s.place) == Some(grant.attempt))
                {
                    *lock(&slot.grant) = Some(grant);
                    slot.notify.notify_one();
                }
            }
            None => {
                if let Some(head) = queue.waiters.front() {
                    head.notify.notify_one();
                }
            }
        }
    }

    fn disconnected(&self) {
        // Releases may have been missed while the subscriber was away: every head retries,
        // and every observer stops (its caller follows anew). Every channel counts as not
        // subscribed: the next waiter or observer subscribes again and awaits the server's
        // confirmation, so that nothing published after it reads can be missed.
        for queue in self.channels().values_mut() {
            queue.subscribed = false;
            if let Some(head) = queue.waiters.front() {
                head.notify.notify_one();
            }
            for watch in &queue.observers {
                watch.cut.store(true, std::sync::atomic::Ordering::SeqCst);
                watch.notify.notify_one();
            }
        }
    }

    fn server_changed(&self) {
        // The server may have restarted empty, or another master taken over without the
        // latest grants: a holder whose lock is gone hears it now, from a renewal, rather
        // than a third of a lease later.
        if let Some(watchdog) = self.watchdog.upgrade() {
            watchdog.renew_all_now();
        }
    }
}

/// A place in a wait queue; leaving it (also by being dropped) passes the turn on.
pub(crate) struct Ticket {
    registry: Arc<WaitRegistry>,
    engine: Arc<Engine>,
    background: Background,
    channel: String,
    slot: Arc<Slot>,
    /// Set when this waiter got the lock, with its lease: passed on to the next in the queue.
    acquired: Mutex<Option<Duration>>,
}

impl Ticket {
    pub(crate) fn is_head(&self) -> bool {
        self.registry.is_head(&self.channel, &self.slot)
    }

    /// Resolves when a release message arrived or the turn passed to this ticket.
    pub(crate) async fn notified(&self) {
        self.slot.notify.notified().await
    }

    /// If the predecessor acquired the lock, how long it may hold it.
    pub(crate) fn take_handoff(&self) -> Option<Duration> {
        self.slot
            .handoff
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Records the place this waiter took in the server's queue (by the attempt `attempt`).
    pub(crate) fn queued(&self, attempt: u64) {
        *lock(&self.slot.place) = Some(attempt);
    }

    /// The handover to the place `attempt` took, if one arrived.
    pub(crate) fn take_grant(&self, attempt: u64) -> Option<Grant> {
        let mut grant = lock(&self.slot.grant);
        match *grant {
            Some(g) if g.attempt == attempt => grant.take(),
            _ => None,
        }
    }

    /// Leaves the queue after acquiring with this lease.
    pub(crate) fn acquired(&self, lease: Duration) {
        *lock(&self.acquired) = Some(lease);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self
            .registry
            .leave(&self.channel, &self.slot, *lock(&self.acquired))
        {
            let (registry, engine) = (self.registry.clone(), self.engine.clone());
            let channel = std::mem::take(&mut self.channel);
            self.background.linger(async move {
                tokio::time::sleep(SUBSCRIPTION_LINGER).await;
                registry.unsubscribe_if_idle(&engine, &channel).await;
            });
        }
    }
}

#[cfg(test)]
mod fuzz {
    //! Release messages come from the server: any bytes parse without a panic, and only
    //! `=grant <attempt> <token> <elapsed_ms>` with decimal `u64`s is a handover.

    use proptest::prelude::*;

    use super::{parse_forced, parse_grant, Grant};

    fn text(g: Grant) -> String {
        format!("=grant {} {} {}", g.attempt, g.token, g.elapsed_ms)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5000))]

        #[test]
        fn any_message(message in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_grant(&message);
            let _ = parse_forced(&message);
        }

        #[test]
        fn forced(name in "[^{}]{1,20}", holds in prop::collection::vec(any::<u64>(), 1..4)) {
            let ids: Vec<String> = holds.iter().map(u64::to_string).collect();
            let key = format!("fencelock:{{{name}}}");
            let message = format!("=forced {key} {}", ids.join(" "));
            prop_assert_eq!(parse_forced(message.as_bytes()), Some((key.as_str(), holds)));
        }

        #[test]
        fn grants(attempt: u64, token: u64, elapsed_ms: u64, noise in "[ 0-9a-z=]{0,12}") {
            let grant = Grant { attempt, token, elapsed_ms };
            let message = text(grant);
            prop_assert_eq!(parse_grant(message.as_bytes()), Some(grant));
            let noisy = format!("{message}{noise}");
            if let Some(g) = parse_grant(noisy.as_bytes()) {
                prop_assert_eq!(text(g), noisy);
            }
        }
    }
}
