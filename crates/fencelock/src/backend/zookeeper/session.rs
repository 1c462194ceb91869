//! The client's ZooKeeper session: the lease of every lock the client holds.
//!
//! The server expires a session when it has heard nothing from the client for the negotiated
//! session timeout, counted from the last request it *received*. The client cannot see that
//! moment, so it bounds it from below: `heard` is the *send* time of the last request of ours
//! the server answered (the server received it later, and renewed the session then). Every
//! hold of the session counts as lost at `heard + timeout - drift`. While the client holds
//! nothing it still sends a probe (`exists /`) every quarter of the timeout, and one at once
//! after every reconnection, so that `heard` stays fresh while the connection is fine. A
//! session that expired or was closed fires every hold's lost-lock signal at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::backend::session_holds::SessionHolds;
use crate::error::{Error, Warning};
use crate::options::ClientOptions;

/// How many probes per session timeout.
const PROBES_PER_TIMEOUT: u32 = 4;

/// The pause before the second try to open a session that no host kept (see `open`); each
/// later pause doubles, up to `LAST_PAUSE`.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LAST_PAUSE: Duration = Duration::from_millis(200);

/// One ZooKeeper session and what the client knows of its liveness.
pub(crate) struct Session {
    pub(crate) zk: zk::Client,
    /// The negotiated session timeout.
    pub(crate) timeout: Duration,
    /// The session id (`ephemeralOwner` of the nodes it creates).
    pub(crate) id: i64,
    /// `host:port,...` for errors.
    pub(crate) server: String,
    response_timeout: Duration,
    /// When the server was last heard from, the session's holds, whether it ended.
    pub(crate) holds: SessionHolds,
    stop: CancellationToken,
}

impl Session {
    /// Opens a session asking for `options.default_lease` as its timeout, and starts its
    /// monitor. Returns the session and the warnings (a negotiated timeout other than asked).
    pub(crate) async fn connect(
        hosts: &str,
        options: &ClientOptions,
    ) -> Result<(Arc<Self>, Vec<Warning>), Error> {
        let asked = options.default_lease;
        let (zk, sent) = open(hosts, options).await?;
        let timeout = zk.session_timeout();
        let mut warnings = Vec::new();
        tracing::debug!(session = %zk.session_id(), ?asked, negotiated = ?timeout, "ZooKeeper session");
        if timeout != asked {
            let w = Warning::LeaseAdjusted {
                service: "ZooKeeper",
                asked,
                granted: timeout,
            };
            tracing::warn!("{w}");
            warnings.push(w);
        }
        let session = Arc::new(Self {
            id: zk.session_id().0,
            zk,
            timeout,
            server: hosts.to_owned(),
            response_timeout: options.response_timeout,
            holds: SessionHolds::new(sent, timeout, options.drift(timeout)),
            stop: CancellationToken::new(),
        });
        tokio::spawn(session.clone().monitor());
        Ok((session, warnings))
    }

    /// Stops the monitor; the session closes when the last clone of its client is dropped.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    /// Resolves once the session was stopped (its client closed or replaced it): tasks that
    /// hold it, such as an election's follower, end then and let it close.
    pub(crate) fn stopped(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.stop.cancelled()
    }

    /// Sends one request (built by `request`, which the client sends at once) bounded by the
    /// response timeout, and notes its send time when the server answered it.
    pub(crate) async fn call<'a, T, Fut>(
        &'a self,
        request: impl FnOnce(&'a zk::Client) -> Fut,
    ) -> Result<T, zk::Error>
    where
        Fut: Future<Output = Result<T, zk::Error>> + 'a,
    {
        let sent = Instant::now();
        self.answer(sent, request(&self.zk)).await
    }

    /// Awaits, bounded by the response timeout, the reply to a request that the client sent
    /// at `sent`. `zookeeper-client` sends a request when its method is called, not when the
    /// future is polled: so several requests can be sent back to back and their replies
    /// awaited together (one round trip for all), in the order the server runs them.
    pub(crate) async fn answer<T>(
        &self,
        sent: Instant,
        reply: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, zk::Error> {
        match tokio::time::timeout(self.response_timeout, reply).await {
            Err(_) => Err(zk::Error::Timeout),
            Ok(reply) => {
                if answered(&reply) {
                    self.holds.heard(sent);
                }
                if matches!(
                    reply,
                    Err(zk::Error::SessionExpired | zk::Error::ClientClosed)
                ) {
                    self.end("a request found the session gone");
                }
                reply
            }
        }
    }

    /// The session expired or was closed: every hold is lost, at once.
    fn end(&self, why: &str) {
        if self.holds.end() {
            tracing::warn!(session = %zk::SessionId(self.id), why, "ZooKeeper session ended");
        }
    }

    /// Probes the server every quarter of the timeout and at once after a reconnection; ends
    /// the session on a terminal state.
    async fn monitor(self: Arc<Self>) {
        let mut states = self.zk.state_watcher();
        let every = self.timeout / PROBES_PER_TIMEOUT;
        let mut next = Instant::now() + every;
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => break,
                state = states.changed() => {
                    tracing::debug!(session = %zk::SessionId(self.id), ?state, "ZooKeeper session state");
                    if state.is_terminated() {
                        self.end(&format!("the session is {state}"));
                        break;
                    }
                    if state == zk::SessionState::SyncConnected {
                        next = Instant::now();
                    }
                }
                _ = tokio::time::sleep_until(next) => {}
            }
            if Instant::now() >= next {
                let probe = self.call(|zk| zk.check_stat("/"));
                let ok = tokio::select! {
                    _ = self.stop.cancelled() => break,
                    reply = probe => reply.is_ok(),
                };
                if ok {
                    self.holds.refresh();
                    next = Instant::now() + every;
                } else {
                    next = Instant::now() + every / 4;
                }
            }
            if self.holds.ended.is_cancelled() {
                break;
            }
        }
    }
}

/// Opens a session on one of `hosts`. A server closes new sessions while it starts (it
/// answers `ruok` and accepts connections before it serves), and so does an ensemble member
/// while it joins a quorum: the client then finds no host that keeps a session (`NoHosts`),
/// and tries again, pausing a little longer each time, until `connect_timeout` has passed,
/// as Curator does within its connection timeout. Only then is no host an error. The whole
/// open, the last try included, is bounded by the request bound. Returns the client and when
/// the try that opened its session started (the session was heard from after it).
async fn open(hosts: &str, options: &ClientOptions) -> Result<(zk::Client, Instant), Error> {
    let connector = zk::Client::connector()
        .with_session_timeout(options.default_lease)
        .with_fail_eagerly();
    let unavailable = |detail: String| Error::Unavailable {
        lock: None,
        server: hosts.to_owned(),
        detail,
    };
    let started = Instant::now();
    let (deadline, bound) = (
        started + options.connect_timeout,
        started + options.request_bound(),
    );
    let mut pause = FIRST_PAUSE;
    loop {
        let sent = Instant::now();
        match tokio::time::timeout_at(bound, connector.clone().connect(hosts)).await {
            Ok(Ok(zk)) => return Ok((zk, sent)),
            Ok(Err(e)) if closed_or_refused(&e) && Instant::now() < deadline => {
                tracing::debug!(%e, ?pause, "no ZooKeeper host kept a new session; trying again");
                tokio::time::sleep_until(deadline.min(Instant::now() + pause)).await;
                pause = (pause * 2).min(LAST_PAUSE);
            }
            Ok(Err(e)) => return Err(unavailable(format!("cannot open a session: {e}"))),
            Err(_) => return Err(unavailable("no session within the request bound".into())),
        }
    }
}

/// Whether a session could not be opened because every host refused the connection or
/// closed it before the session was made: a server not (yet) serving, worth trying again.
fn closed_or_refused(e: &zk::Error) -> bool {
    matches!(e, zk::Error::NoHosts | zk::Error::ConnectionLoss)
}

/// Whether the server answered (a reply, or an error the server sent about the request).
fn answered<T>(reply: &Result<T, zk::Error>) -> bool {
    use zk::Error::*;
    match reply {
        Ok(_) => true,
        Err(e) => matches!(
            e,
            NoNode | NodeExists | NotEmpty | BadVersion | NoAuth | NoChildrenForEphemerals
        ),
    }
}
