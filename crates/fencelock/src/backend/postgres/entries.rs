//! A name's queue in SQL: entering it, reading it, leaving it. Each is one message (one
//! implicit transaction); the ones that change the queue first take the name's row lock in
//! `fencelock_names`, so that a name's changes commit in the order they were made and the
//! token each entry gets from the row's counter follows that order.
//!
//! An entry of a lease the server counts as over (past `expires`) is dead: no read lists
//! it, and the next change of its name deletes it and wakes the name's waiters. A name's
//! `kind` (and a semaphore's N in `permits`) is set by its first entry, checked by every
//! other in the same transaction (an entry of another kind, or another N without a resize,
//! is refused and stores nothing), and cleared with its last entry.

use std::time::Duration;

use tokio_postgres::SimpleQueryRow;

use super::conn::{int, opt_text, Fault};
use super::schema::{self, text};
use super::session::Session;

/// A live entry of a name's queue, in token order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its place in the queue, and the fencing token of the holding it becomes.
    pub(crate) token: i64,
    /// The lease row it lives under.
    pub(crate) lease: i64,
    pub(crate) owner: String,
    /// What the entry is, as the service's layout names it.
    pub(crate) side: String,
    /// An election participant's value.
    pub(crate) value: Option<String>,
    /// How long its lease lasts without a renewal, on the server's clock.
    pub(crate) left: Duration,
}

/// What an entry asks for: its name and kind, and what it stores.
pub(crate) struct Entering<'a> {
    pub(crate) name: &'a str,
    /// The attempt's random id: its undo finds the entry by it, even when the reply that
    /// carried the entry's token was lost.
    pub(crate) attempt: i64,
    /// The kind the name is used as (one per name while it has entries).
    pub(crate) kind: &'a str,
    pub(crate) side: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) value: Option<&'a str>,
    /// A semaphore's N, and whether this entry sets it whatever it was (a resize).
    pub(crate) permits: Option<(u32, bool)>,
}

/// What an attempt to enter came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Entered {
    /// The entry is in, with this token; the name's live queue as it was then, the new
    /// entry included.
    In { token: i64, queue: Vec<Entry> },
    /// The name is used as another kind, or has another N: nothing was stored.
    Refused {
        kind: Option<String>,
        permits: Option<i64>,
    },
}

impl Session {
    fn table(&self, table: &str) -> String {
        format!("\"{}\".fencelock_{table}", self.schema)
    }

    /// The statements that lock name `n` (an SQL expression), delete its dead entries
    /// (waking its waiters if there were any) and free it of its kind once it has no entry.
    fn lock_and_sweep(&self, n: &str) -> String {
        let (names, entries, leases) = (
            self.table("names"),
            self.table("entries"),
            self.table("leases"),
        );
        let channel = text(&schema::channel(&self.schema));
        format!(
            "SELECT 1 FROM {names} WHERE name = {n} FOR UPDATE;\n\
             WITH dead AS (DELETE FROM {entries} e USING {leases} l WHERE e.name = {n} \
               AND l.id = e.lease AND l.expires <= clock_timestamp() RETURNING 1) \
             SELECT pg_notify({channel}, {n}) WHERE EXISTS (SELECT 1 FROM dead);\n\
             UPDATE {names} SET kind = NULL, permits = NULL WHERE name = {n} \
               AND kind IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {entries} WHERE name = {n});\n"
        )
    }

    /// The statement that reads name `n`'s live queue in token order.
    fn queue_sql(&self, n: &str) -> String {
        format!(
            "SELECT e.token, e.lease, e.owner, e.side, e.value, \
               (extract(epoch FROM l.expires - clock_timestamp()) * 1000)::bigint \
             FROM {} e JOIN {} l ON l.id = e.lease \
             WHERE e.name = {n} AND l.expires > clock_timestamp() ORDER BY e.token",
            self.table("entries"),
            self.table("leases")
        )
    }

    /// Enters the name's queue under this client's lease, in one transaction: the name's
    /// row locked, its dead entries swept, its kind and N checked and set, the token
    /// counted, the entry inserted and the queue read. `Err(Fault::Ended)` when the lease
    /// is over (nothing is stored then either).
    pub(crate) async fn enter(&self, e: &Entering<'_>) -> Result<Entered, Fault> {
        let n = text(e.name);
        let (names, entries, leases) = (
            self.table("names"),
            self.table("entries"),
            self.table("leases"),
        );
        let kind = text(e.kind);
        let (permits, resize) = match e.permits {
            Some((n, resize)) => (n.to_string(), resize),
            None => ("NULL::bigint".to_owned(), false),
        };
        let value = e.value.map_or_else(|| "NULL".to_owned(), text);
        let lease = self.lease;
        let live = format!(
            "EXISTS (SELECT 1 FROM {leases} WHERE id = {lease} AND expires > clock_timestamp())"
        );
        let sql = format!(
            "INSERT INTO {names} (name) VALUES ({n}) ON CONFLICT (name) DO NOTHING;\n\
             {sweep}\
             WITH t AS (UPDATE {names} SET token = token + 1, kind = {kind}, \
                 permits = CASE WHEN {permits} IS NULL THEN permits \
                   WHEN {resize} OR permits IS NULL THEN {permits} ELSE permits END \
               WHERE name = {n} AND (kind IS NULL OR kind = {kind}) \
                 AND ({permits} IS NULL OR permits IS NULL OR permits = {permits} OR {resize}) \
                 AND {live} RETURNING token) \
             INSERT INTO {entries} (name, token, lease, attempt, owner, side, value) \
               SELECT {n}, token, {lease}, {attempt}, {owner}, {side}, {value} FROM t \
               RETURNING token;\n\
             SELECT kind, permits, {live} FROM {names} WHERE name = {n};\n\
             {queue}",
            sweep = self.lock_and_sweep(&n),
            attempt = e.attempt,
            owner = text(e.owner),
            side = text(e.side),
            queue = self.queue_sql(&n),
        );
        let each = self.link.run_each(&sql).await?;
        let [.., inserted, name, queue] = each.as_slice() else {
            return Err(Fault::Malformed("enter: fewer results than statements"));
        };
        if let Some(row) = inserted.first() {
            return Ok(Entered::In {
                token: int(row, 0)?,
                queue: queue.iter().map(entry).collect::<Result<_, _>>()?,
            });
        }
        let row = name
            .first()
            .ok_or(Fault::Malformed("enter: the name's row is missing"))?;
        if row.get(2) != Some("t") {
            self.end("an entry found the lease expired or deleted");
            return Err(Fault::Ended);
        }
        Ok(Entered::Refused {
            kind: opt_text(row, 0),
            permits: opt_text(row, 1).and_then(|p| p.parse().ok()),
        })
    }

    /// The name's live queue, in token order.
    pub(crate) async fn queue(&self, name: &str) -> Result<Vec<Entry>, Fault> {
        let rows = self.link.run(&self.queue_sql(&text(name))).await?;
        rows.iter().map(entry).collect()
    }

    /// Deletes the name's entry `which`, and wakes the name's waiters: `Ok(false)` when it
    /// was gone already.
    pub(crate) async fn remove(&self, name: &str, which: Which) -> Result<bool, Fault> {
        let n = text(name);
        let channel = text(&schema::channel(&self.schema));
        let entry = match which {
            Which::Token(token) => format!("token = {token}"),
            Which::Held(token) => format!("token = {token} AND lease = {}", self.lease),
            Which::Attempt(attempt) => format!("attempt = {attempt} AND lease = {}", self.lease),
        };
        let sql = format!(
            "{sweep}\
             WITH gone AS (DELETE FROM {entries} WHERE name = {n} AND {entry} RETURNING 1) \
               SELECT pg_notify({channel}, {n}) FROM gone LIMIT 1;\n\
             UPDATE {names} SET kind = NULL, permits = NULL WHERE name = {n} \
               AND kind IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {entries} WHERE name = {n})",
            sweep = self.lock_and_sweep(&n),
            entries = self.table("entries"),
            names = self.table("names"),
        );
        let each = self.link.run_each(&sql).await?;
        let [.., gone, _] = each.as_slice() else {
            return Err(Fault::Malformed("remove: fewer results than statements"));
        };
        Ok(!gone.is_empty())
    }
}

/// Which entry of a name [`Session::remove`] deletes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Which {
    /// The entry of this token, whoever's (a forced unlock).
    Token(i64),
    /// This client's entry of this token (a release).
    Held(i64),
    /// This client's entry made by this attempt (an undo, the token unknown).
    Attempt(i64),
}

/// A row of the queue's read.
fn entry(row: &SimpleQueryRow) -> Result<Entry, Fault> {
    let missing = Fault::Malformed("an entry's column is missing");
    Ok(Entry {
        token: int(row, 0)?,
        lease: int(row, 1)?,
        owner: opt_text(row, 2).ok_or(missing)?,
        side: opt_text(row, 3).ok_or(Fault::Malformed("an entry's side is missing"))?,
        value: opt_text(row, 4),
        left: Duration::from_millis(u64::try_from(int(row, 5)?).unwrap_or(0)),
    })
}
