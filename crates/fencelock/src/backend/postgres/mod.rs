//! PostgreSQL as a lock service (`postgres://user[:password]@host[:port]/database`, also
//! `postgresql://`), on a lease table rather than advisory locks: every operation is one
//! short transaction with no session state, so it works the same directly and through a
//! transaction-pooling proxy (PgBouncer), where a session's advisory locks are stranded.
//!
//! - `url`: the URL (percent-encoded parts, `schema`, libpq's `sslmode`, `listen=off`).
//! - `conn`: `tokio-postgres` connections, the link every transaction goes through, faults.
//! - `schema`: the tables, created on first use in the URL's schema, and how statements are
//!   written (one simple-protocol message per operation, strings as hexadecimal).
//! - `entries`: a name's queue: enter (the name's row locked, its kind and N checked, the
//!   token counted, the queue read, in one transaction), read, leave.
//! - `session`: the client's lease row, renewed in the background, the lease of every lock
//!   it holds; its end is every hold's loss.
//! - `listen`: the `LISTEN` connection that wakes waiters, trusted only once a probe came
//!   back through it, and the bounded re-check.

mod conn;
mod entries;
mod listen;
mod schema;
mod session;
mod url;

#[cfg(test)]
mod tests;
