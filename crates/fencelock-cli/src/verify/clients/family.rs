//! The registers of the lock family's verify clients (see `check.rs` for what is checked):
//! a reader's checked read (`checked_read.lua`) and the semaphore's register of N fenced
//! slots (`permits.lua`, which explains the model): a permit holding enters when granted,
//! writes while it has its slot, and leaves before it gives its permit back. A multi-lock's
//! writes are the mutex's, one register per lock (`process.rs`).

use std::sync::LazyLock;

use redis::aio::MultiplexedConnection;

use crate::verify::events::{Kind, Recorder};

static CHECKED_READ: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("checked_read.lua")));

static PERMITS: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("permits.lua")));

/// Where a family write goes and how: the register's key, fenced or not (the control).
pub struct Target<'a> {
    /// The recorder of the holding's part.
    pub rec: Recorder,
    /// The register's Redis.
    pub conn: &'a mut MultiplexedConnection,
    /// The register's key.
    pub key: &'a str,
    /// Whether the register may refuse.
    pub fenced: bool,
}

/// A reader's end of hold (part 1): reads the register and whether a later writer wrote.
/// Recorded as a write of the value read: accepted when the reader's view stands (or,
/// unfenced, anyway, `stale` saying it did not), rejected (fenced) when it does not.
pub async fn checked_read(to: Target<'_>, attempt: u64, token: u64) {
    let rec = to.rec;
    rec.record(Kind::WriteCall {
        attempt,
        token,
        value: 0,
    });
    let reply: redis::RedisResult<(i64, String)> = CHECKED_READ
        .key(to.key)
        .arg(token.to_string())
        .invoke_async(to.conn)
        .await;
    let kind = match reply {
        Ok((stale, _)) if stale == 1 && to.fenced => Kind::WriteRejected {
            attempt,
            token,
            highest: None,
        },
        Ok((stale, value)) => Kind::WriteAccepted {
            attempt,
            token,
            value: value.parse().unwrap_or(0),
            stale: stale == 1,
        },
        Err(e) => Kind::WriteFailed {
            attempt,
            token,
            error: e.to_string(),
        },
    };
    rec.record(kind);
}

/// The key of the slots of the semaphore's register `key`.
fn slots(key: &str) -> String {
    format!("{key}:slots")
}

/// A permit holding takes a slot of the register of `permits` slots (see `permits.lua`).
/// Whether it got one shows in its write; an error here shows there too.
pub async fn enter(to: Target<'_>, permits: u32, token: u64) {
    let _: redis::RedisResult<i64> = PERMITS
        .key(to.key)
        .key(slots(to.key))
        .arg("enter")
        .arg(token.to_string())
        .arg(permits)
        .invoke_async(to.conn)
        .await;
}

/// A permit holding gives its slot back, before it gives back its permit. A failure leaves
/// the slot to be taken by a later holding (as a killed holder's is).
pub async fn leave(to: Target<'_>, token: u64) {
    let _: redis::RedisResult<i64> = PERMITS
        .key(to.key)
        .key(slots(to.key))
        .arg("leave")
        .arg(token.to_string())
        .invoke_async(to.conn)
        .await;
}

/// A permit holder's write of `value` with `token`: taken while its holding has its slot
/// (unfenced: written anyway, `stale` saying whether it would have been refused).
pub async fn permit_write(to: Target<'_>, attempt: u64, token: u64, value: u64) {
    to.rec.record(Kind::WriteCall {
        attempt,
        token,
        value,
    });
    let reply: redis::RedisResult<(i64, i64)> = PERMITS
        .key(to.key)
        .key(slots(to.key))
        .arg("write")
        .arg(token.to_string())
        .arg(value.to_string())
        .arg(if to.fenced { "1" } else { "0" })
        .invoke_async(to.conn)
        .await;
    let kind = match reply {
        Ok((1, stale)) => Kind::WriteAccepted {
            attempt,
            token,
            value,
            stale: stale == 1,
        },
        Ok(_) => Kind::WriteRejected {
            attempt,
            token,
            highest: None,
        },
        Err(e) => Kind::WriteFailed {
            attempt,
            token,
            error: e.to_string(),
        },
    };
    to.rec.record(kind);
}
