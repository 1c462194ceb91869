//! Lock names and the server keys derived from them.

use crate::error::InputError;

/// The longest lock name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 512;

/// A lock's name and the Redis keys and channel derived from it (used by the Redis family
/// only; other services use `name`). Every key shares the hash tag `{name}`, so that all of a
/// lock's keys live in one Redis Cluster slot and a script may touch them together; the
/// Redis family refuses names with braces, which would break the tag (other services accept
/// them).
#[derive(Debug)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct LockKeys {
    /// The name as the user gave it.
    pub(crate) name: String,
    /// The hash: owner id -> hold count, plus the reserved fields `=token` and `=attempt`.
    pub(crate) lock: String,
    /// The fencing counter. It has no TTL so that tokens keep increasing across holders.
    pub(crate) fence: String,
    /// The channel that carries release notifications and handovers (`=grant ...`).
    pub(crate) channel: String,
    /// The wait queue: owners in arrival order, handed the lock by the release script.
    pub(crate) queue: String,
    /// Each queued owner's place: `attempt window_ms since_us lease_ms`.
    pub(crate) waiting: String,
}

impl LockKeys {
    pub(crate) fn new(name: &str) -> Result<Self, InputError> {
        validate_name(name)?;
        let lock = format!("fencelock:{{{name}}}");
        Ok(Self {
            name: name.to_owned(),
            fence: format!("{lock}:fence"),
            channel: format!("{lock}:released"),
            queue: format!("{lock}:queue"),
            waiting: format!("{lock}:waiting"),
            lock,
        })
    }
}

/// Checks the rules every lock service shares: a lock name is non-empty UTF-8 of at most
/// [`MAX_NAME_LEN`] bytes. Each service adds its own rules, checked by the lock's first
/// operation before any I/O: on Redis no `{` or `}` ([`InputError::NameHasBrace`]); on
/// ZooKeeper one valid node name ([`InputError::InvalidName`]).
pub fn validate_name(name: &str) -> Result<(), InputError> {
    if name.is_empty() {
        return Err(InputError::EmptyName);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(InputError::NameTooLong {
            len: name.len(),
            max: MAX_NAME_LEN,
        });
    }
    Ok(())
}

/// The Redis family's rule: no `{` or `}`, which would break the keys' hash tag.
#[cfg(feature = "redis")]
pub(crate) fn check_redis_name(name: &str) -> Result<(), InputError> {
    if name.contains(['{', '}']) {
        return Err(InputError::NameHasBrace {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// The longest owner id accepted, in bytes.
pub const MAX_OWNER_LEN: usize = 128;

/// Checks an explicit owner id. Ids starting with `=` are reserved for fencelock's own hash
/// fields, and whitespace or control characters would make `status` output ambiguous.
pub(crate) fn validate_owner(owner: &str) -> Result<(), InputError> {
    let reason = if owner.is_empty() {
        "it is empty"
    } else if owner.len() > MAX_OWNER_LEN {
        "it is longer than 128 bytes"
    } else if owner.starts_with('=') {
        "ids starting with '=' are reserved"
    } else if owner.chars().any(|c| c.is_whitespace() || c.is_control()) {
        "it contains whitespace or control characters"
    } else {
        return Ok(());
    };
    Err(InputError::InvalidOwner {
        owner: owner.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_the_hash_tag() {
        let keys = LockKeys::new("orders:42").unwrap();
        assert_eq!(keys.lock, "fencelock:{orders:42}");
        assert_eq!(keys.fence, "fencelock:{orders:42}:fence");
        assert_eq!(keys.channel, "fencelock:{orders:42}:released");
    }

    #[test]
    fn names_are_checked() {
        assert_eq!(validate_name(""), Err(InputError::EmptyName));
        assert!(matches!(
            validate_name(&"x".repeat(513)),
            Err(InputError::NameTooLong { len: 513, .. })
        ));
        assert!(validate_name(&"é".repeat(256)).is_ok());
        assert!(validate_name("a{b}").is_ok());
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_names_have_no_braces() {
        assert!(matches!(
            check_redis_name("a{b"),
            Err(InputError::NameHasBrace { .. })
        ));
        assert!(matches!(
            check_redis_name("a}b"),
            Err(InputError::NameHasBrace { .. })
        ));
    }

    #[test]
    fn owners_are_checked() {
        assert!(validate_owner("deploy-bot:1").is_ok());
        for bad in ["", "=token", "a b", "a\nb"] {
            assert!(validate_owner(bad).is_err(), "{bad:?}");
        }
        assert!(validate_owner(&"o".repeat(129)).is_err());
    }
}
