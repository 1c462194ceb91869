//! The Redis family's keys and channel of a lock, derived from its name once per lock handle.
//!
//! All share the hash tag `{name}`, so that one lock's keys live in one Cluster slot:
//! - `fencelock:{name}`: hash `owner id -> hold ids` (space-separated attempt ids, oldest first;
//!   the hold count is their number), `=token` (the holding's fencing token), and `=q` while the
//!   wait queue may have places (a release looks at the queue only then). TTL: the lease.
//! - `fencelock:{name}:fence`: the last fencing token issued; no TTL.
//! - `fencelock:{name}:queue` (list of waiting owner ids, in arrival order) and
//!   `fencelock:{name}:waiting` (hash `owner id -> "attempt window_ms since_us client"`): the wait
//!   queue (not RedLock). Both expire with the newest place's window. `status.lua` reads them with
//!   the lock and the server's `TIME`; places past their window are listed as expired.
//! - `fencelock:{name}:released`: pub/sub channel (`SPUBLISH` on a Cluster), and
//!   `...:released:<client id>` for each waiting client. A release hands the lock to the first
//!   place with time left (one window; `=grant <attempt> <token> <elapsed_ms>` on its client's
//!   channel), or publishes the owner id when places were all past their windows; RedLock always
//!   publishes a unique release id. Force-unlock publishes `=forced` there, and
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

/// A lock's name and the Redis keys and channel derived from it. Every key shares the hash
/// tag `{name}`, so that all of a lock's keys live in one Redis Cluster slot and a script may
/// touch them together; the Redis family refuses names with braces, which would break the
/// tag (other services accept them).
#[derive(Debug)]
pub(crate) struct LockKeys {
    /// The name as the user gave it.
    pub(crate) name: String,
    /// The hash: owner id -> hold ids, plus the reserved fields `=token` and `=q`.
    pub(crate) lock: String,
    /// The fencing counter. It has no TTL so that tokens keep increasing across holders.
    pub(crate) fence: String,
    /// The channel that carries release notifications and handovers (`=grant ...`).
    pub(crate) channel: String,
    /// The wait queue: owners in arrival order, handed the lock by the release script.
    pub(crate) queue: String,
    /// Each queued owner's place: `attempt window_ms since_us client`.
    pub(crate) waiting: String,
}

/// The prefix of each client's own channel, followed by its client id: a forced unlock tells
/// the holders' clients there (`=forced <lock key> <hold id> ...`). Not on a Redis Cluster,
/// where that channel would live in another slot than the lock.
pub(crate) const CLIENT_CHANNELS: &str = "fencelock:client:";

/// The own channel of the client `client_id`.
pub(crate) fn client_channel(client_id: &str) -> String {
    format!("{CLIENT_CHANNELS}{client_id}")
}

impl LockKeys {
    fn new(name: &str) -> Self {
        let lock = format!("fencelock:{{{name}}}");
        Self {
            name: name.to_owned(),
            fence: format!("{lock}:fence"),
            channel: format!("{lock}:released"),
            queue: format!("{lock}:queue"),
            waiting: format!("{lock}:waiting"),
            lock,
        }
    }

    /// The keys of lock `name`, made at the handle's first use and kept with it.
    pub(crate) fn of(name: &LockName) -> Arc<Self> {
        name.derived(Self::new)
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
        let keys = LockKeys::of(&LockName::new("orders:42").unwrap());
        assert_eq!(keys.lock, "fencelock:{orders:42}");
        assert_eq!(keys.fence, "fencelock:{orders:42}:fence");
        assert_eq!(keys.channel, "fencelock:{orders:42}:released");
        assert_eq!(keys.queue, "fencelock:{orders:42}:queue");
        assert_eq!(keys.waiting, "fencelock:{orders:42}:waiting");
    }
}
