//! The registers of the lock family's verify clients (see `check.rs` for what is checked):
//! a reader's checked read (`checked_read.lua`) and a permit holder's write to a register
//! that keeps the N highest tokens (`permits.lua`). A multi-lock's writes are the mutex's,
//! one register per lock (`process.rs`).

use std::sync::LazyLock;

use super::process::Ctx;
use crate::verify::events::Kind;

static CHECKED_READ: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("checked_read.lua")));

static PERMITS: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("permits.lua")));

/// A reader's end of hold (part 1): reads the register and whether a later writer wrote.
/// Recorded as a write of the value read: accepted when the reader's view stands (or,
/// unfenced, anyway, `stale` saying it did not), rejected (fenced) when it does not.
pub async fn checked_read(ctx: &mut Ctx, attempt: u64, token: u64) {
    let rec = ctx.rec.part(1);
    rec.record(Kind::WriteCall {
        attempt,
        token,
        value: 0,
    });
    let reply: redis::RedisResult<(i64, String)> = CHECKED_READ
        .key(ctx.registers[0].key())
        .arg(token.to_string())
        .invoke_async(&mut ctx.conn)
        .await;
    let kind = match reply {
        Ok((stale, _)) if stale == 1 && !ctx.args.no_fencing => Kind::WriteRejected {
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

/// A permit holder's write of `value` with `token` to the register that keeps the N highest
/// tokens (unfenced: written anyway, `stale` saying whether it would have been refused).
pub async fn permit_write(ctx: &mut Ctx, attempt: u64, token: u64, value: u64) {
    ctx.rec.record(Kind::WriteCall {
        attempt,
        token,
        value,
    });
    let key = ctx.registers[0].key().to_owned();
    let reply: redis::RedisResult<(i64, i64)> = PERMITS
        .key(&key)
        .key(format!("{key}:tokens"))
        .arg(token.to_string())
        .arg(value.to_string())
        .arg(ctx.args.permits)
        .arg(if ctx.args.no_fencing { "0" } else { "1" })
        .invoke_async(&mut ctx.conn)
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
    ctx.rec.record(kind);
}
