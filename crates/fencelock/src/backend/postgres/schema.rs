//! fencelock's tables in the URL's schema, created on first use, and the SQL text helpers
//! every statement is written with.
//!
//! Every operation is one simple-protocol message of one or more statements: PostgreSQL
//! runs them as one implicit transaction (all or nothing, each statement with a fresh
//! snapshot under READ COMMITTED), and a transaction-pooling proxy keeps them on one server
//! connection. No statement is prepared, so none outlives its transaction (PgBouncer in
//! transaction pooling needs nothing else). Strings are sent as hexadecimal
//! (`convert_from(decode('…', 'hex'), 'UTF8')`), never quoted: no setting
//! (`standard_conforming_strings`) and no byte of a name or value can change how a
//! statement reads.
//!
//! The tables (the DDL is in README.md, for those who manage schemas themselves):
//! - `fencelock_leases`: one row per client, its lease. `expires` is the server's clock
//!   (`clock_timestamp()`) at the last renewal plus the lease; a lease past it is over, and
//!   no renewal brings it back.
//! - `fencelock_names`: one row per lock name ever used. Its row lock serialises the name's
//!   queue changes (sequence values alone do not follow commit order); `token` is the last
//!   fencing token handed out for the name, so tokens strictly increase per name and survive
//!   restarts (the row is never deleted). `kind` and `permits` say what the name is used as
//!   while it has entries.
//! - `fencelock_entries`: the name's queue, in arrival order (`token`): one row per
//!   participant, under its client's lease, gone with the lease. `attempt` is the random id
//!   of the attempt that made it: an entry whose reply was lost is found and undone by it.

use std::fmt::Write as _;

/// The tables and the index, in schema `schema` (a plain identifier, see `url`).
pub(crate) fn ddl(schema: &str) -> String {
    format!(
        r#"CREATE SCHEMA IF NOT EXISTS "{schema}";
CREATE TABLE IF NOT EXISTS "{schema}".fencelock_leases (
    id      bigserial PRIMARY KEY,
    client  text NOT NULL,
    expires timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS "{schema}".fencelock_names (
    name    text PRIMARY KEY,
    token   bigint NOT NULL DEFAULT 0,
    kind    text,
    permits bigint
);
CREATE TABLE IF NOT EXISTS "{schema}".fencelock_entries (
    name    text NOT NULL,
    token   bigint NOT NULL,
    lease   bigint NOT NULL REFERENCES "{schema}".fencelock_leases (id) ON DELETE CASCADE,
    attempt bigint NOT NULL,
    owner   text NOT NULL,
    side    text NOT NULL,
    value   text,
    created timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (name, token)
);
CREATE INDEX IF NOT EXISTS fencelock_entries_lease ON "{schema}".fencelock_entries (lease);
"#
    )
}

/// A statement that reads whether all three tables exist (one row, `t` or `f`): a user who
/// created them needs no privilege to create anything.
pub(crate) fn exists(schema: &str) -> String {
    let table = |t: &str| {
        format!(
            "to_regclass({}) IS NOT NULL",
            text(&format!("\"{schema}\".{t}"))
        )
    };
    format!(
        "SELECT {} AND {} AND {}",
        table("fencelock_leases"),
        table("fencelock_names"),
        table("fencelock_entries")
    )
}

/// The DDL as one transaction, under a transaction-scoped advisory lock: two clients that
/// create the tables at once would otherwise race in the catalog (`CREATE … IF NOT EXISTS`
/// is not atomic against itself). The lock ends with the transaction, so a pooling proxy
/// keeps no session state.
pub(crate) fn create(schema: &str) -> String {
    format!(
        "SELECT pg_advisory_xact_lock(hashtext({}));\n{}",
        text(&format!("fencelock schema {schema}")),
        ddl(schema)
    )
}

/// The notification channel of the schema's locks (its payload is a lock's name).
pub(crate) fn channel(schema: &str) -> String {
    format!("fencelock.{schema}")
}

/// A string as an SQL expression of type `text`, sent as hexadecimal digits only.
pub(crate) fn text(s: &str) -> String {
    let mut hex = String::with_capacity(2 * s.len() + 40);
    hex.push_str("convert_from(decode('");
    for b in s.bytes() {
        let _ = write!(hex, "{b:02x}");
    }
    hex.push_str("', 'hex'), 'UTF8')");
    hex
}

/// A duration as an SQL `interval` of whole milliseconds.
pub(crate) fn millis(d: std::time::Duration) -> String {
    format!("({} * interval '1 millisecond')", d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_shows_the_ddl() {
        let readme = include_str!("../../../../../README.md");
        assert!(
            readme.contains(&ddl("fencelock")),
            "README.md's DDL is not ddl()'s"
        );
    }

    #[test]
    fn strings_are_sent_as_hex_digits_only() {
        assert_eq!(text("a'"), "convert_from(decode('6127', 'hex'), 'UTF8')");
        assert_eq!(text(""), "convert_from(decode('', 'hex'), 'UTF8')");
        let inner = text("x'; DROP TABLE t; --\\");
        let digits =
            &inner["convert_from(decode('".len()..inner.len() - "', 'hex'), 'UTF8')".len()];
        assert!(digits.bytes().all(|b| b.is_ascii_hexdigit()), "{digits}");
    }
}
