//! The Redis family's keys and channel of a lock, derived from its name where a command names them.
//!
//! All share the hash tag `{name}`, so that one lock's keys live in one Cluster slot:
//! - `fencelock:{name}`: hash `owner id -> hold ids` (space-separated attempt ids, oldest first;
//!   the hold count is their number), `=token` (the holding's fencing token), `=q` while the
//!   wait queue may have places (a release looks at the queue only then), and `=v` when the
//!   holder is an election's leader: the value it advertises (set by the acquire or the
//!   handover, changed by `proclaim`). TTL: the lease.
//!   A read-write lock's or a semaphore's hash (`server/family.lua`) has `=k` (`rw` or
//!   `sem:N`) instead of `=token`: each owner's field lists its hold ids, and its
//!   `=h:<owner>` field is its holding (`token since_us term_ms [write hold ids]`: its own
//!   token and deadline). TTL: the latest holding's deadline.
//! - `fencelock:{name}:fence`: the last fencing token issued. TTL: the client's fence horizon,
//!   from that token on (a new counter starts from the server's clock).
//! - `fencelock:{name}:queue` (list of waiting owner ids, in arrival order) and
//!   `fencelock:{name}:waiting` (hash `owner id -> "attempt window_ms since_us client"`, followed
//!   by `" value"` for an election's participant, so that the handover sets the new leader's
//!   `=v` in the same script): the wait queue (not RedLock). Both expire with the newest place's
//!   window. A read-write lock's or semaphore's place ends with its kind after the client id
//!   (`client:r`, `:w`, `:p`), which the mutex's handover never accepts. `status.lua` reads them with the lock and the server's `TIME`; places past their
//!   window are listed as expired.
//! - `fencelock:{name}:released`: pub/sub channel (`SPUBLISH` on a Cluster), and
//!   `...:released:<client id>` for each waiting client. A release hands the lock to the first
//!   place with time left (one window; `=grant <attempt> <token> <elapsed_ms>` on its client's
//!   channel), or publishes the owner id when places were all past their windows; RedLock always
//!   publishes a unique release id. An election's change of leader (taken, handed over, given
//!   back, proclaimed) is published there as `=leader`, for observers (waiters ignore it).
//!   Force-unlock publishes `=forced` there, and
//!   `=forced <lock key> <hold ids>` on `fencelock:client:<client id>` of each holder's client
//!   (subscribed on connect; not on a Cluster).

use std::sync::Arc;

use crate::error::InputError;
use crate::name::LockName;

/// The Redis family's rule for lock names: no `{` or `}`, which would break the keys' hash
/// tag (other services accept them).
pub(crate) fn check_name(name: &str) -> Result<(), InputError> {
    if name.contains(['{', '}']) {
        return Err(InputError::NameHasBrace {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// A lock's name and the Redis keys and channel derived from it, each written straight into
/// the command that names it (no string is made per operation). Every key shares the hash
/// tag `{name}`, so that all of a lock's keys live in one Redis Cluster slot and a script may
/// touch them together; the Redis family refuses names with braces, which would break the
/// tag (other services accept them).
#[derive(Debug, Clone)]
pub(crate) struct LockKeys {
    name: Arc<LockName>,
}

/// One key (or channel) of a lock: `fencelock:{name}` followed by a suffix. An argument of a
/// command as it is (`ToRedisArgs`), text where one is needed (`Display`: a channel to
/// subscribe to, an error).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Key<'a> {
    name: &'a str,
    suffix: &'static str,
}

impl Key<'_> {
    const PREFIX: &'static str = "fencelock:{";

    /// Whether `text` is this key.
    pub(crate) fn is(&self, text: &str) -> bool {
        text.strip_prefix(Self::PREFIX)
            .and_then(|t| t.strip_prefix(self.name))
            .and_then(|t| t.strip_prefix('}'))
            == Some(self.suffix)
    }
}

impl std::fmt::Display for Key<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}}}{}", Self::PREFIX, self.name, self.suffix)
    }
}

impl redis::ToRedisArgs for Key<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        // Put together on the stack and written as one argument (a lock name has at most
        // `MAX_NAME_LEN` bytes); a longer one, which no check let through, is made as text.
        let mut buffer = [0u8; KEY_BUFFER];
        let parts = [
            Self::PREFIX.as_bytes(),
            self.name.as_bytes(),
            b"}",
            self.suffix.as_bytes(),
        ];
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > KEY_BUFFER {
            return out.write_arg(self.to_string().as_bytes());
        }
        let mut at = 0;
        for part in parts {
            buffer[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        out.write_arg(&buffer[..len]);
    }
}

/// Room for any key of a lock: the prefix, a name of `MAX_NAME_LEN` bytes, `}` and a suffix.
const KEY_BUFFER: usize = crate::name::MAX_NAME_LEN + 32;

/// The prefix of each client's own channel, followed by its client id: a forced unlock tells
/// the holders' clients there (`=forced <lock key> <hold id> ...`). Not on a Redis Cluster,
/// where that channel would live in another slot than the lock.
pub(crate) const CLIENT_CHANNELS: &str = "fencelock:client:";

/// The own channel of the client `client_id`.
pub(crate) fn client_channel(client_id: &str) -> String {
    format!("{CLIENT_CHANNELS}{client_id}")
}

impl LockKeys {
    /// The keys of lock `name` (they are derived where a command names them).
    pub(crate) fn of(name: &Arc<LockName>) -> Self {
        Self { name: name.clone() }
    }

    /// The name as the user gave it.
    pub(crate) fn name(&self) -> &str {
        &self.name.name
    }

    fn key(&self, suffix: &'static str) -> Key<'_> {
        Key {
            name: self.name(),
            suffix,
        }
    }

    /// The hash: owner id -> hold ids, plus the reserved fields `=token` and `=q`.
    pub(crate) fn lock(&self) -> Key<'_> {
        self.key("")
    }

    /// The fencing counter. It outlives the lock by a horizon, so that tokens keep increasing
    /// across holders.
    pub(crate) fn fence(&self) -> Key<'_> {
        self.key(":fence")
    }

    /// The channel that carries release notifications and handovers (`=grant ...`).
    pub(crate) fn channel(&self) -> Key<'_> {
        self.key(":released")
    }

    /// The wait queue: owners in arrival order, handed the lock by the release script.
    pub(crate) fn queue(&self) -> Key<'_> {
        self.key(":queue")
    }

    /// Each queued owner's place: `attempt window_ms since_us client`.
    pub(crate) fn waiting(&self) -> Key<'_> {
        self.key(":waiting")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_have_no_braces() {
        for bad in ["a{b", "a}b"] {
            assert!(matches!(
                check_name(bad),
                Err(InputError::NameHasBrace { .. })
            ));
        }
        assert!(check_name("orders:42").is_ok());
    }

    #[test]
    fn keys_share_the_hash_tag() {
        let keys = LockKeys::of(&Arc::new(LockName::new("orders:42").unwrap()));
        assert_eq!(keys.lock().to_string(), "fencelock:{orders:42}");
        assert_eq!(keys.fence().to_string(), "fencelock:{orders:42}:fence");
        assert_eq!(keys.channel().to_string(), "fencelock:{orders:42}:released");
        assert_eq!(keys.queue().to_string(), "fencelock:{orders:42}:queue");
        assert_eq!(keys.waiting().to_string(), "fencelock:{orders:42}:waiting");
        assert!(keys.lock().is("fencelock:{orders:42}"));
        assert!(!keys.lock().is("fencelock:{orders:42}:fence"));
        assert!(!keys.fence().is("fencelock:{orders:4}:fence"));
        let mut cmd = redis::cmd("GET");
        cmd.arg(keys.fence());
        let args: Vec<_> = cmd.args_iter().collect();
        assert!(matches!(
            args[1],
            redis::Arg::Simple(b"fencelock:{orders:42}:fence")
        ));
    }
}
