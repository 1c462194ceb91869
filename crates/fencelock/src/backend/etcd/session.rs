//! The client's etcd lease: the session, and the lease of every lock the client holds.
//!
//! The leader expires a lease when it has received no keep-alive for its TTL. The client
//! cannot see that moment, so it bounds it from below, as for a ZooKeeper session: `heard` is
//! the *send* time of the last keep-alive the server answered with a TTL above zero (the
//! leader renewed the lease later, when it received it; a new leader only extends leases).
//! Every hold counts as lost at `heard + TTL - drift`. Keep-alives go every third of the TTL
//! on one stream, answered in order, so each answer is matched with the send time of the
//! oldest unanswered request. A broken stream is opened again at once. An answer with a TTL
//! of zero (the lease expired or was revoked) ends the session: every hold is lost at once.
//! Other requests do not renew a lease, so they do not count as "heard".

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client as etcd;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::session_holds::SessionHolds;
use crate::error::{Error, Warning};
use crate::options::ClientOptions;

use super::url::EtcdTarget;

/// Keep-alives per TTL.
const KEEPALIVES_PER_TTL: u32 = 3;

/// The pause before a request that could not be sent goes again.
const RESEND: Duration = Duration::from_millis(20);

/// Whether the request never left the client: no connection to the member it was given to.
fn unsent(e: &etcd::Error) -> bool {
    match e {
        etcd::Error::TransportError(_) => true,
        // gRPC's UNAVAILABLE with tonic's connection error.
        etcd::Error::GRpcStatus(s) => s.code() as i32 == 14 && s.message().contains("connect"),
        _ => false,
    }
}

/// Why a request to etcd failed.
#[derive(Debug)]
pub(crate) enum Fault {
    /// No reply within the response timeout.
    Timeout,
    /// The etcd client or the server reported an error.
    Etcd(etcd::Error),
    /// The server answered in a shape fencelock does not expect.
    Malformed(&'static str),
    /// The lease ended (expired or revoked) while the request waited.
    Ended,
}

impl Fault {
    /// Whether trying again later may work: no reply, no connection, no leader for now.
    pub(crate) fn transient(&self) -> bool {
        match self {
            Fault::Timeout => true,
            Fault::Etcd(etcd::Error::TransportError(_) | etcd::Error::IoError(_)) => true,
            // gRPC's CANCELLED, UNKNOWN, DEADLINE_EXCEEDED and UNAVAILABLE (etcd's "no
            // leader", "leader changed", a member shutting down, a broken connection), and
            // UNAUTHENTICATED (an auth token that expired: the client fetches a new one).
            Fault::Etcd(etcd::Error::GRpcStatus(s)) => {
                matches!(s.code() as i32, 1 | 2 | 4 | 14 | 16)
            }
            _ => false,
        }
    }
}

/// Whether etcd refused the credentials or their permissions: a wrong password or unknown
/// user (`authentication failed`), no user while authentication is on (`user name is empty`),
/// a token it no longer knows, or a role without access to the key.
pub(crate) fn denied(e: &etcd::Error) -> bool {
    let etcd::Error::GRpcStatus(s) = e else {
        return false;
    };
    match s.code() as i32 {
        // PERMISSION_DENIED. (UNAUTHENTICATED is a token that expired or that a restarted
        // member forgot: the client asks for a new one and tries again.)
        7 => true,
        // INVALID_ARGUMENT carries etcd's refusal of the credentials themselves.
        3 => ["authentication failed", "user name is empty"]
            .iter()
            .any(|m| s.message().contains(m)),
        _ => false,
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Timeout => write!(f, "no reply within the response timeout"),
            Fault::Etcd(e) => write!(f, "{e}"),
            Fault::Malformed(what) => write!(f, "malformed reply: {what}"),
            Fault::Ended => write!(f, "the client's lease expired or was revoked"),
        }
    }
}

/// One etcd lease and what the client knows of its liveness.
pub(crate) struct Session {
    pub(crate) client: etcd::Client,
    /// The lease id (the last segment of every key this client creates, in hex).
    pub(crate) lease: i64,
    /// The TTL the server granted.
    pub(crate) ttl: Duration,
    /// `host:port,...` for errors.
    pub(crate) server: String,
    pub(crate) response_timeout: Duration,
    /// When a keep-alive was last answered, the lease's holds, whether it ended.
    pub(crate) holds: SessionHolds,
    stop: CancellationToken,
}

impl Session {
    /// Connects, grants the lease (TTL: `options.default_lease` in whole seconds, rounded up)
    /// and starts keeping it alive. Returns the session and the warnings (a granted TTL other
    /// than the lease asked for).
    pub(crate) async fn connect(
        target: &EtcdTarget,
        options: &ClientOptions,
    ) -> Result<(Arc<Self>, Vec<Warning>), Error> {
        let server = target.hosts.clone();
        let unavailable = |detail: String| Error::Unavailable {
            lock: None,
            server: server.clone(),
            detail,
        };
        let connecting = async {
            let client =
                etcd::Client::connect(&target.endpoints, Some(connect_options(target, options)))
                    .await?;
            let asked = options.default_lease.as_millis().div_ceil(1000).max(1) as i64;
            let sent = Instant::now();
            let granted = client.lease_client().grant(asked, None).await?;
            Ok::<_, etcd::Error>((client, asked, sent, granted))
        };
        let (client, asked, sent, granted) =
            match tokio::time::timeout(options.request_bound(), connecting).await {
                Ok(Ok(done)) => done,
                Ok(Err(e)) if denied(&e) => {
                    return Err(Error::Denied {
                        lock: None,
                        server: server.clone(),
                        detail: format!("etcd: {e}"),
                    })
                }
                Ok(Err(e)) => return Err(unavailable(format!("cannot grant a lease: {e}"))),
                Err(_) => return Err(unavailable("no lease within the request bound".into())),
            };
        if granted.ttl() <= 0 {
            return Err(unavailable(format!(
                "etcd granted a TTL of {}",
                granted.ttl()
            )));
        }
        let ttl = Duration::from_secs(granted.ttl() as u64);
        let mut warnings = Vec::new();
        if ttl != options.default_lease {
            // etcd counts TTLs in whole seconds (asked: `asked` s) and has a minimum.
            let w = Warning::LeaseAdjusted {
                service: "etcd",
                asked: options.default_lease,
                granted: ttl,
            };
            tracing::warn!(asked_s = asked, "{w}");
            warnings.push(w);
        }
        tracing::debug!(lease = %format!("{:x}", granted.id()), ?ttl, "etcd lease granted");
        let session = Arc::new(Self {
            client,
            lease: granted.id(),
            ttl,
            server,
            response_timeout: options.response_timeout,
            holds: SessionHolds::new(sent, ttl, options.drift(ttl)),
            stop: CancellationToken::new(),
        });
        tokio::spawn(session.clone().keep_alive());
        Ok((session, warnings))
    }

    /// Stops the keep-alives and returns the lease's revoke (bounded by the response timeout),
    /// so that keys left behind (a give-back that failed) go at once rather than after the
    /// TTL; `None` when it was stopped already (the revoke was made then).
    pub(crate) fn stop(&self) -> Option<impl Future<Output = ()> + Send + 'static> {
        if self.stop.is_cancelled() {
            return None;
        }
        self.stop.cancel();
        let (mut lease, id, bound) = (
            self.client.lease_client(),
            self.lease,
            self.response_timeout,
        );
        Some(async move {
            let _ = tokio::time::timeout(bound, lease.revoke(id)).await;
        })
    }

    /// Sends one request (built by `request` from a clone of the client), bounded by the
    /// response timeout. A request that could not be sent (a member that is down: the client
    /// spreads requests over every endpoint of the URL) is sent again, to whichever member
    /// takes it, until the timeout.
    pub(crate) async fn call<T, Fut>(
        &self,
        request: impl Fn(etcd::Client) -> Fut,
    ) -> Result<T, Fault>
    where
        Fut: Future<Output = Result<T, etcd::Error>>,
    {
        let deadline = Instant::now() + self.response_timeout;
        loop {
            let reply = tokio::time::timeout_at(deadline, request(self.client.clone())).await;
            match reply {
                Err(_) => return Err(Fault::Timeout),
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(e)) if unsent(&e) && Instant::now() + RESEND < deadline => {
                    tokio::time::sleep(RESEND).await;
                }
                // A put under the lease found it gone (revoked, or expired before a keep-alive
                // could say so): the session is over.
                Ok(Err(etcd::Error::GRpcStatus(s)))
                    if s.code() as i32 == 5 && s.message().contains("lease not found") =>
                {
                    self.end("a request found the lease gone");
                    return Err(Fault::Ended);
                }
                Ok(Err(e)) => return Err(Fault::Etcd(e)),
            }
        }
    }

    /// Resolves once the lease was stopped (its client closed or replaced it): tasks that
    /// hold the session, such as an election's follower, end then.
    pub(crate) fn stopped(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.stop.cancelled()
    }

    /// One transaction, through [`Session::call`].
    pub(crate) async fn txn(&self, txn: etcd::Txn) -> Result<etcd::TxnResponse, Fault> {
        self.call(|mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
    }

    /// A keep-alive sent at `sent` was answered: every live hold lasts until the new deadline.
    fn heard(&self, sent: Instant) {
        self.holds.heard(sent);
        self.holds.refresh();
    }

    /// The lease expired or was revoked: every hold is lost, at once.
    pub(crate) fn end(&self, why: &str) {
        if self.holds.end() {
            tracing::warn!(lease = %format!("{:x}", self.lease), why, "etcd lease ended");
        }
    }

    /// Keeps the lease alive until stopped or ended, opening the stream again whenever it
    /// breaks.
    async fn keep_alive(self: Arc<Self>) {
        let every = self.ttl / KEEPALIVES_PER_TTL;
        loop {
            let sent = Instant::now();
            let mut lease = self.client.lease_client();
            let opened = tokio::select! {
                _ = self.stop.cancelled() => return,
                opened = tokio::time::timeout(self.response_timeout, lease.keep_alive(self.lease)) => opened,
            };
            match opened {
                Ok(Ok((keeper, stream))) => {
                    self.heard(sent);
                    if self.stream(keeper, stream, every).await {
                        return;
                    }
                }
                Ok(Err(etcd::Error::LeaseKeepAliveError(e))) if e.contains("not found") => {
                    return self.end("the lease expired or was revoked");
                }
                Ok(Err(e)) => tracing::debug!(error = %e, "etcd keep-alive stream not opened"),
                Err(_) => tracing::debug!("etcd keep-alive stream not opened in time"),
            }
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(every / 4) => {}
            }
        }
    }

    /// Runs one keep-alive stream: `true` when done for good (stopped, lease ended), `false`
    /// when the stream broke or an answer is overdue.
    async fn stream(
        &self,
        mut keeper: etcd::LeaseKeeper,
        mut stream: etcd::LeaseKeepAliveStream,
        every: Duration,
    ) -> bool {
        let mut pending: VecDeque<Instant> = VecDeque::new();
        let mut next = Instant::now() + every;
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => return true,
                _ = tokio::time::sleep_until(next) => {
                    let overdue = pending.front().is_some_and(|s| s.elapsed() > self.response_timeout);
                    if overdue {
                        return false;
                    }
                    let sent = Instant::now();
                    if keeper.keep_alive().await.is_err() {
                        return false;
                    }
                    pending.push_back(sent);
                    next = sent + every;
                }
                answer = stream.message() => {
                    let Ok(Some(answer)) = answer else { return false };
                    let Some(sent) = pending.pop_front() else { return false };
                    if answer.ttl() <= 0 {
                        self.end("a keep-alive found the lease expired or revoked");
                        return true;
                    }
                    self.heard(sent);
                }
            }
        }
    }
}

/// The etcd client's options: connect timeout, a leader required (a member cut off from
/// the quorum refuses requests rather than serving watches that never fire), and the user.
fn connect_options(target: &EtcdTarget, options: &ClientOptions) -> etcd::ConnectOptions {
    let connect = etcd::ConnectOptions::new()
        .with_connect_timeout(options.connect_timeout)
        .with_require_leader(true);
    let password = options.password.as_ref().map(|p| p.0.clone());
    match &target.user {
        // Auth tokens expire (simple tokens when idle, JWTs after their TTL) and a restarted
        // member forgets them: the client fetches a new one when a request is refused with
        // UNAUTHENTICATED, and sends the request again.
        Some((user, from_url)) => connect
            .with_user(
                user.clone(),
                password.or_else(|| from_url.clone()).unwrap_or_default(),
            )
            .with_auto_token_refresh(true),
        None => connect,
    }
}
