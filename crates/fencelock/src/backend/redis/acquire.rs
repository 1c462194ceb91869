//! The acquire algorithm: one attempt, and waiting for a turn.
//!
//! An attempt is one round trip that either takes a hold (named by the attempt's id) or finds
//! the lock held. Waiting queues behind this client's other waiters for the lock; the head
//! takes a place in the server's queue and is handed the lock by the release script, or tries
//! again when a release is announced. Whatever an attempt may have left on the server when the
//! caller stops caring (a lost reply, a dropped future, a wait given up) is given back by id.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::keys::LockKeys;
use super::terms::{AcquireReply, Attempt, Queueing, ReplicaAcks, Shape};
use super::waiters::Ticket;
use super::RedisFamily;
use crate::backend::{Ctx, Held};
use crate::error::{Error, Result};
use crate::lease::{Hold, LeaseState};
use crate::name::LockName;

/// The longest a waiter's place in the server's queue lasts without being renewed (locks
/// renewed by the watchdog; a fixed lease is its own window).
const PLACE_WINDOW: Duration = Duration::from_secs(5);

/// What an acquire call asks for: the same for each of its attempts.
pub(crate) struct Ask<'a> {
    pub(crate) family: &'a RedisFamily,
    pub(crate) ctx: &'a Ctx,
    /// The lock's name, which its holds keep.
    pub(crate) lock: &'a Arc<LockName>,
    /// Its keys.
    pub(crate) keys: &'a LockKeys,
    pub(crate) owner: &'a Arc<str>,
    /// The owner id was given by the user (`Lock::with_owner`): another process may hold
    /// the lock under it, unknown to this client.
    pub(crate) explicit_owner: bool,
    pub(crate) lease: Duration,
    /// The watchdog renews the lease (no explicit lease was given).
    pub(crate) renew: bool,
    pub(crate) acks: Option<ReplicaAcks>,
    /// An election's participant: the value it advertises, which every attempt (and place in
    /// the server's queue) carries. `None`: a mutex.
    pub(crate) value: Option<Arc<str>>,
    /// A read-write lock's side or a semaphore's permit (`None`: a mutex or an election).
    pub(crate) shape: Option<Shape>,
}

/// What one attempt found.
pub(crate) enum Attempted {
    Acquired(Held),
    Held {
        remaining: Option<Duration>,
        /// The place the attempt took in the server's wait queue.
        queued: Option<Place>,
    },
}

/// A place in the server's wait queue: the attempt that took (or last renewed) it, and when
/// that request was sent, which is when a lease handed over to it counts from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    attempt: u64,
    sent: Instant,
}

/// An attempt whose effects on the server are given back if this is dropped while armed: a
/// hold the attempt may have taken (its reply was lost, or its future dropped), or the place
/// it took in the server's queue (a wait that ended without the lock; a handover that arrived
/// meanwhile goes too). The give-back names the attempt, so it never touches another hold.
struct Undo<'a> {
    ask: &'a Ask<'a>,
    armed: Option<Place>,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if let Some(place) = self.armed {
            let ask = self.ask;
            ask.family
                .give_back_later(ask.ctx, ask.keys, ask.owner, place.attempt, ask.lease);
        }
    }
}

impl Ask<'_> {
    /// One acquire round trip with attempt id `id`, and the hold when it succeeded.
    pub(crate) async fn once(&self, id: u64, queueing: Queueing) -> Result<Attempted> {
        let sent = Instant::now();
        let mut pending = Undo {
            ask: self,
            armed: Some(Place { attempt: id, sent }),
        };
        let attempt = self.attempt(id, sent, queueing);
        let reply = self.family.engine.acquire(&attempt).await;
        if reply.is_ok() {
            // The script ran to its end: the attempts given up that it carried are given
            // back. (An error may have stopped it before; they stay recorded.)
            let abandoned = &self.family.abandoned;
            abandoned.settle(self.keys.name(), self.owner, &attempt.abandoned);
        }
        match reply {
            Ok(AcquireReply::Acquired { token, count }) => {
                pending.armed = None;
                tracing::debug!(lock = %self.keys.name(), token, count, "acquired");
                Ok(Attempted::Acquired(self.held(
                    id,
                    (sent, self.lease),
                    token,
                    count,
                )))
            }
            Ok(AcquireReply::Held {
                remaining,
                undo,
                queued,
            }) => {
                if undo {
                    self.undo_minority(id).await;
                }
                // A place taken in the server's queue goes to the caller, whose `Undo` gives
                // it up if need be.
                let armed = pending.armed.take();
                Ok(Attempted::Held {
                    remaining,
                    queued: armed.filter(|_| queued),
                })
            }
            // A server error (e.g. WRONGTYPE) means the script stopped before it changed
            // anything; only a lost reply, or a RedLock majority that failed, may leave a hold
            // behind, which `pending` gives back.
            Err(e @ (Error::Unavailable { .. } | Error::Quorum { .. })) => Err(e),
            Err(e) => {
                pending.armed = None;
                Err(e)
            }
        }
    }

    /// The terms of attempt `id`, sent at `sent`: it carries the attempts of this owner given
    /// up before, for the script to give back first.
    fn attempt(&self, id: u64, sent: Instant, queueing: Queueing) -> Attempt {
        Attempt {
            keys: self.keys.clone(),
            owner: self.owner.clone(),
            lease_ms: self.lease.as_millis() as u64,
            id,
            valid_until: self.ctx.watchdog.deadline(sent, self.lease),
            acks: self.acks,
            queueing,
            listener: queueing
                .join
                .map(|_| self.family.waiters.client_id().clone()),
            abandoned: self.family.abandoned.pending(self.keys.name(), self.owner),
            value: self.value.clone(),
            shape: self.shape,
        }
    }

    /// RedLock servers that granted a minority: their holds go before the caller tries again,
    /// not in the background, so that no server holds a grant this owner does not keep. If
    /// this fails, the next attempt carries the id (see `abandoned`), and the lease ends it.
    async fn undo_minority(&self, id: u64) {
        let engine = &self.family.engine;
        if let Err(e) = engine.release(self.keys, self.owner, Some(id)).await {
            tracing::debug!(lock = %self.keys.name(), error = %e, "undoing a failed attempt");
            let abandoned = &self.family.abandoned;
            abandoned.add(self.keys.name(), self.owner, id, self.lease);
        }
    }

    /// The hold `id`, granted for `granted.1` by a request sent at `granted.0` (the lease,
    /// or a queue place's window): the deadline and the first renewal count from then;
    /// renewals ask for the whole lease.
    fn held(&self, id: u64, granted: (Instant, Duration), token: u64, count: u64) -> Held {
        let watchdog = &self.ctx.watchdog;
        let (sent, term) = granted;
        let times = (watchdog.deadline(sent, term), watchdog.renew_at(sent, term));
        self.held_until(id, times, token, count)
    }

    /// The hold `id` with its deadline and first renewal time (`times`).
    fn held_until(&self, id: u64, times: (Instant, Instant), token: u64, count: u64) -> Held {
        let hold = Hold {
            lock: self.lock.clone(),
            owner: self.owner.clone(),
            lease: self.lease,
            renew: self.renew,
            id,
            token,
        };
        let lease = self.ctx.grant(hold, times.0, times.1);
        self.family.granted.add(&lease);
        Held { lease, count }
    }

    /// Acquires, waiting until `deadline` (never, if `None`) for the lock.
    pub(crate) async fn until(&self, deadline: Option<(Instant, Duration)>) -> Result<Held> {
        let waiters = &self.family.waiters;
        let queues = self.family.engine.queues();
        // Queue behind this client's waiters instead of barging in. A caller that is not yet
        // subscribed to the lock's channel tries once first (an uncontended acquire costs one
        // round trip); one that is (a lock contended a moment ago) queues up at once, so that
        // its first attempt can take a place in the server's queue too. (The channel's name
        // is only made when this client waits for some lock.) But an owner that may hold the
        // lock tries at once: a re-entry (a downgrade, a refused upgrade) is decided by the
        // server at once, and behind this client's waiters it would wait for them while they
        // wait for its own holding.
        let queue_at_once = !waiters.is_idle() && !self.may_hold() && {
            let channel = &self.keys.channel().to_string();
            waiters.has_waiters(channel) || (queues && waiters.is_subscribed(channel))
        };
        if !queue_at_once {
            if let Attempted::Acquired(held) =
                self.once(rand::random(), Queueing::default()).await?
            {
                return Ok(held);
            }
        }
        // Boxed: only a contended acquire gets here, and joining may subscribe (a future of
        // kilobytes, which would otherwise be part of every acquire's).
        let channel = &self.keys.channel().to_string();
        let joined = Box::pin(waiters.join(&self.family.engine, &self.ctx.background, channel));
        let ticket = match deadline {
            Some((at, _)) => tokio::time::timeout_at(at, joined)
                .await
                .map_err(|_| self.timed_out(deadline))??,
            None => joined.await?,
        };
        let mut wait = Waiting {
            ask: self,
            ticket,
            deadline,
            queues,
            // How long a place in the server's queue stays valid without being renewed: a
            // waiter that dies is skipped (or, if handed the lock, loses it) after at most this
            // long. A fixed lease is never renewed, so there the place is as long as the lease.
            window: if self.renew {
                self.lease.min(PLACE_WINDOW)
            } else {
                self.lease
            },
            place: Undo {
                ask: self,
                armed: None,
            },
        };
        let waited = wait.run().await;
        if let Err(Error::Timeout { .. }) = &waited {
            wait.leave().await;
        }
        waited
    }

    /// Whether the owner may hold the lock already: a hold granted to this client holds, or
    /// the owner id is the user's, which another process may hold the lock under.
    fn may_hold(&self) -> bool {
        self.explicit_owner || self.family.granted.holds(self.keys.name(), self.owner)
    }

    /// Extends a handed-over hold to the whole lease and waits for `acks` (`WAIT`).
    async fn replicate(&self, lease: &Arc<LeaseState>, acks: ReplicaAcks) -> Result<()> {
        let sent = Instant::now();
        let lease_ms = self.lease.as_millis() as u64;
        let renewal = self
            .family
            .engine
            .extend_replicated(lease, lease_ms, acks)
            .await?;
        self.ctx.watchdog.extended(lease, renewal, sent, self.lease)
    }

    fn timed_out(&self, deadline: Option<(Instant, Duration)>) -> Error {
        Error::Timeout {
            lock: self.keys.name().to_owned(),
            waited: deadline.map_or(Duration::ZERO, |(_, d)| d),
        }
    }
}

/// One caller waiting for its turn.
struct Waiting<'a> {
    ask: &'a Ask<'a>,
    ticket: Ticket,
    deadline: Option<(Instant, Duration)>,
    /// The server keeps a wait queue and hands the lock over.
    queues: bool,
    window: Duration,
    /// Our place in the server's queue, given up (in the background) if we stop waiting.
    place: Undo<'a>,
}

impl Waiting<'_> {
    async fn run(&mut self) -> Result<Held> {
        loop {
            while !self.ticket.is_head() {
                self.wait(None).await?;
            }
            let handoff = self.ticket.take_handoff();
            if let (false, Some(held_for)) = (self.queues, handoff) {
                // The previous head just acquired: wait for its release, not more than its lease.
                self.wait(Some(held_for)).await?;
            }
            if let Some(held) = self.handed_over().await? {
                return Ok(held);
            }
            let queueing = Queueing {
                join: self.queues.then_some(self.window),
                claim: self.place.armed.map(|t| t.attempt),
            };
            // The handover to the place this attempt takes can arrive before its reply: the
            // ticket knows the attempt id before it is sent.
            let id = rand::random();
            if self.queues {
                self.ticket.queued(id);
            }
            match self.ask.once(id, queueing).await? {
                Attempted::Acquired(held) => {
                    self.place.armed = None;
                    self.ticket.acquired(self.ask.lease);
                    return Ok(held);
                }
                Attempted::Held { remaining, queued } => {
                    let mut bound = remaining.unwrap_or(self.ask.ctx.options.default_lease);
                    if let Some(taken) = queued {
                        self.place.armed = Some(taken);
                        // The handover comes as a message; this bound only renews the place
                        // before its window runs out (and covers a lost message, or a lock
                        // handed to a waiter that died).
                        bound = bound.min(self.window / 2);
                    }
                    tracing::trace!(lock = %self.ask.keys.name(), ?bound, "held; waiting for a release");
                    self.wait(Some(bound)).await?;
                }
            }
        }
    }

    /// Waits for a notification, for at most `bound`, and never past the deadline.
    async fn wait(&self, bound: Option<Duration>) -> Result<()> {
        let bound = async {
            match bound {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let deadline = async {
            match self.deadline {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.ticket.notified() => Ok(()),
            _ = bound => Ok(()),
            _ = deadline => Err(self.ask.timed_out(self.deadline)),
        }
    }

    /// The hold, if the release script handed the lock to our place: it is named by the
    /// place's attempt. The server gave it one window, `elapsed` after it took the place:
    /// the deadline counts the window from the request that took the place plus `elapsed`
    /// (with the drift margin over both), and the watchdog renews it to the whole lease a
    /// third into that window (a fixed lease is its own window: the whole lease at once).
    async fn handed_over(&mut self) -> Result<Option<Held>> {
        let Some(taken) = self.place.armed else {
            return Ok(None);
        };
        let Some(grant) = self.ticket.take_grant(taken.attempt) else {
            return Ok(None);
        };
        let (ask, token) = (self.ask, grant.token);
        tracing::debug!(lock = %ask.keys.name(), token, grant.elapsed_ms, "handed over");
        crate::telemetry::handover();
        let (watchdog, elapsed) = (&ask.ctx.watchdog, Duration::from_millis(grant.elapsed_ms));
        let times = (
            watchdog.deadline(taken.sent, elapsed + self.window),
            watchdog.renew_at(taken.sent + elapsed, self.window),
        );
        let held = ask.held_until(taken.attempt, times, token, 1);
        self.place.armed = None;
        self.ticket.acquired(ask.lease);
        if let Some(acks) = ask.acks {
            // The releasing holder wrote the handover, without waiting for replicas: wait
            // for them now, as an acquire of our own would have.
            if let Err(e) = ask.replicate(&held.lease, acks).await {
                held.lease.finish();
                ask.family
                    .give_back_later(ask.ctx, ask.keys, ask.owner, taken.attempt, ask.lease);
                return Err(e);
            }
        }
        Ok(Some(held))
    }

    /// A wait that timed out gives up its place before returning, not in the background: a
    /// process that exits on the timeout must not be handed the lock afterwards. If that
    /// fails, the place is given up in the background (and by the owner's next attempt).
    async fn leave(&mut self) {
        let Some(taken) = self.place.armed else {
            return;
        };
        let ask = self.ask;
        let left = ask
            .family
            .engine
            .release(ask.keys, ask.owner, Some(taken.attempt))
            .await;
        if left.is_ok() {
            self.place.armed = None;
        }
    }
}
