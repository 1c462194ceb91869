//! The client's lease: one row of `fencelock_leases`, the lease of every lock the client
//! holds (as an etcd client keeps one lease), renewed in the background.
//!
//! The row's `expires` is the server's clock (`clock_timestamp()`) when it executed the last
//! renewal, plus the lease; queue decisions compare it with the server's clock, so client
//! clocks never count. The client bounds that moment from below, as for an etcd lease:
//! `heard` is the *send* time of the last renewal that found the lease live, and every hold
//! counts as lost at `heard + lease - drift`. Renewals go every third of the lease; one
//! that finds the lease over (past `expires`, or deleted) ends the session: every hold is
//! lost at once, and no renewal brings an expired lease back (a silent reconnect that
//! revived it would let two clients hold one lock). A failed renewal is tried again at the
//! next tick; the holds' deadlines pass meanwhile if the server stays out of reach.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::conn::{self, Fault, Link};
use super::listen::{self, Wakes};
use super::schema::{self, millis, text};
use super::url::{Listen, PgTarget};
use crate::backend::session_holds::SessionHolds;
use crate::error::Error;
use crate::options::ClientOptions;

/// Renewals per lease.
const RENEWALS_PER_LEASE: u32 = 3;

/// One lease row and what the client knows of its liveness.
pub(crate) struct Session {
    pub(crate) link: Arc<Link>,
    /// The lease row's id.
    pub(crate) lease: i64,
    /// `host:port/database`, for errors.
    pub(crate) server: String,
    /// The schema of the tables, unquoted (a plain identifier).
    pub(crate) schema: String,
    /// When a renewal was last answered, the lease's holds, whether it ended.
    pub(crate) holds: SessionHolds,
    /// The waiters' wake-ups.
    pub(crate) wakes: Arc<Wakes>,
    stop: CancellationToken,
}

impl Session {
    /// Connects, creates the tables if they are missing, inserts the lease row (its lease:
    /// `options.default_lease`), starts renewing it and the listener (unless `listen=off`).
    pub(crate) async fn open(
        target: &PgTarget,
        options: &ClientOptions,
        client_id: &str,
    ) -> Result<Arc<Self>, Error> {
        let server = target.shown.clone();
        let failed = |fault: Fault| match fault.denied() {
            true => Error::Denied {
                lock: None,
                server: server.clone(),
                detail: format!("PostgreSQL: {fault}"),
            },
            false => Error::Unavailable {
                lock: None,
                server: server.clone(),
                detail: format!("PostgreSQL: {fault}"),
            },
        };
        let config = conn::config(target, options);
        let link = Arc::new(Link::open(config.clone(), options).await.map_err(failed)?);
        ensure_tables(&link, &target.schema).await.map_err(failed)?;
        let length = options.default_lease;
        let sent = Instant::now();
        let rows = link
            .run(&format!(
                "INSERT INTO \"{}\".fencelock_leases (client, expires) \
                 VALUES ({}, clock_timestamp() + {}) RETURNING id",
                target.schema,
                text(client_id),
                millis(length)
            ))
            .await
            .map_err(failed)?;
        let lease = match rows.first() {
            Some(row) => conn::int(row, 0).map_err(failed)?,
            None => return Err(failed(Fault::Malformed("no lease id returned"))),
        };
        let session = Arc::new(Self {
            link,
            lease,
            server,
            schema: target.schema.clone(),
            holds: SessionHolds::new(sent, length, options.drift(length)),
            wakes: Arc::default(),
            stop: CancellationToken::new(),
        });
        if target.listen == Listen::Auto {
            listen::start(
                config,
                options.connect_timeout,
                &target.schema,
                Arc::downgrade(&session.link),
                session.wakes.clone(),
                session.stop.clone(),
            );
        }
        tracing::debug!(lease, ?length, "PostgreSQL lease inserted");
        tokio::spawn(session.clone().renew());
        Ok(session)
    }

    /// The lease's length.
    pub(crate) fn length(&self) -> Duration {
        self.holds.length
    }

    /// The lease ended: every hold is lost, at once.
    pub(crate) fn end(&self, why: &str) {
        if self.holds.end() {
            tracing::warn!(lease = self.lease, why, "PostgreSQL lease ended");
        }
    }

    /// Whether the lease was stopped (closed or replaced by its client).
    pub(crate) fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Stops the renewals and the listener, and returns the lease row's delete (its entries
    /// go with it, each name's waiters notified), so that a give-back that failed leaves
    /// nothing behind for the lease's length; `None` when it was stopped already.
    pub(crate) fn stop(&self) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        if self.stop.is_cancelled() {
            return None;
        }
        self.stop.cancel();
        let (link, sql) = (self.link.clone(), self.delete_sql());
        Some(async move {
            if let Err(e) = link.run(&sql).await {
                tracing::debug!(error = %e, "PostgreSQL lease not deleted; it expires");
            }
        })
    }

    /// Deletes the lease row and its entries: the names' rows locked first (in name order,
    /// so that two such deletes never deadlock), each of those names left without another
    /// lease's entry freed of its kind, their waiters notified. Only the locked names are
    /// touched: a name another client is entering meanwhile keeps its kind.
    fn delete_sql(&self) -> String {
        let (s, lease) = (&self.schema, self.lease);
        let channel = text(&schema::channel(s));
        format!(
            "SELECT name FROM \"{s}\".fencelock_names WHERE name IN \
               (SELECT name FROM \"{s}\".fencelock_entries WHERE lease = {lease}) \
               ORDER BY name FOR UPDATE;\n\
             WITH gone AS (DELETE FROM \"{s}\".fencelock_entries WHERE lease = {lease} \
               RETURNING name), \
             names AS (SELECT DISTINCT name FROM gone), \
             freed AS (UPDATE \"{s}\".fencelock_names n SET kind = NULL, permits = NULL \
               FROM names g WHERE n.name = g.name AND NOT EXISTS \
               (SELECT 1 FROM \"{s}\".fencelock_entries e \
                 WHERE e.name = n.name AND e.lease <> {lease}) RETURNING 1) \
             SELECT pg_notify({channel}, name) FROM names;\n\
             DELETE FROM \"{s}\".fencelock_leases WHERE id = {lease}"
        )
    }

    /// One renewal: `Ok(true)` when the lease was live and now lasts a lease from the
    /// server's clock, `Ok(false)` when it was over.
    async fn renew_once(&self) -> Result<bool, Fault> {
        let sql = format!(
            "UPDATE \"{}\".fencelock_leases SET expires = clock_timestamp() + {} \
             WHERE id = {} AND expires > clock_timestamp() RETURNING id",
            self.schema,
            millis(self.length()),
            self.lease
        );
        Ok(!self.link.run(&sql).await?.is_empty())
    }

    /// Renews the lease every third of its length until stopped or ended.
    async fn renew(self: Arc<Self>) {
        let every = self.length() / RENEWALS_PER_LEASE;
        let mut next = Instant::now() + every;
        loop {
            tokio::select! {
                () = self.stop.cancelled() => return,
                () = tokio::time::sleep_until(next) => {}
            }
            let sent = Instant::now();
            next = sent + every;
            let renewed = tokio::select! {
                () = self.stop.cancelled() => return,
                renewed = self.renew_once() => renewed,
            };
            match renewed {
                Ok(true) => {
                    self.holds.heard(sent);
                    self.holds.refresh();
                }
                Ok(false) => return self.end("a renewal found the lease expired or deleted"),
                Err(e) => {
                    tracing::debug!(lease = self.lease, error = %e, "PostgreSQL lease not renewed")
                }
            }
        }
    }
}

/// Creates the tables unless all three exist (then no privilege to create is needed).
async fn ensure_tables(link: &Link, schema: &str) -> Result<(), Fault> {
    let rows = link.run(&schema::exists(schema)).await?;
    if rows.first().and_then(|r| r.get(0)) == Some("t") {
        return Ok(());
    }
    link.run(&schema::create(schema)).await.map(drop)
}
