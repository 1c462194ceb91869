//! Fenced resources: the places where a fencing token is checked.
//!
//! A lock alone cannot stop a holder that paused past its lease (a GC pause, a frozen VM, a
//! slow disk) from writing after another client took the lock: it does not know it lost the
//! lock. The resource it writes to can stop it, if every write carries the writer's
//! [`Guard::fencing_token`](crate::Guard::fencing_token) and the resource refuses a token
//! lower than the highest it has accepted. This module gives that check for two kinds of
//! store:
//!
//! - `FencedRegister` (cargo feature `redis`, a default): a value in Redis, written by one
//!   Lua script that compares and records the token atomically. Use it in front of your own
//!   keys.
//! - [`FencedUpdate`]: the same check for SQL stores, as one `UPDATE … WHERE fence <= token`
//!   statement, built for you, with its outcome mapped from the number of rows it changed.
//!
//! Tokens are comparable only within one lock deployment: when a resource moves from one lock
//! service to another (Redis to ZooKeeper, say), reset its recorded token, since the numbers
//! are unrelated.

#[cfg(feature = "redis")]
mod register;
mod sql;

#[cfg(feature = "redis")]
pub use register::{Fenced, FencedRegister};
pub use sql::{FencedUpdate, NotUnique, Param, Placeholders};

/// What a fenced write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencedWrite {
    /// The token was at least the highest the resource had accepted: the write is done and
    /// the token recorded.
    Accepted,
    /// The token was lower than one the resource already accepted (the writer lost the lock
    /// to a later holder), or (SQL) no row matched: nothing was written.
    Rejected {
        /// The highest token the resource had accepted, when the store says (Redis).
        highest: Option<u64>,
    },
}

impl FencedWrite {
    /// Whether the write was done.
    pub fn is_accepted(&self) -> bool {
        matches!(self, FencedWrite::Accepted)
    }
}
