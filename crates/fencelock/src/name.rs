//! Lock names.

use crate::error::InputError;

/// The longest lock name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 512;

/// A lock's name as the API hands it to the lock service, checked by the rules every service
/// shares. What a service derives from it (the Redis family's keys) it derives itself.
pub(crate) struct LockName {
    /// The name as the user gave it.
    pub(crate) name: String,
}

impl std::fmt::Debug for LockName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LockName").field(&self.name).finish()
    }
}

impl LockName {
    /// A name checked by the rules every service shares.
    pub(crate) fn new(name: &str) -> Result<Self, InputError> {
        validate_name(name)?;
        Ok(Self {
            name: name.to_owned(),
        })
    }
}

/// Checks the rules every lock service shares: a lock name is non-empty UTF-8 of at most
/// [`MAX_NAME_LEN`] bytes. Each service adds its own rules, checked by the lock's first
/// operation before any I/O: on Redis no `{` or `}` ([`InputError::NameHasBrace`]); on
/// ZooKeeper one valid node name: no `/`, not `.` or `..`, none of the characters ZooKeeper
/// refuses ([`InputError::InvalidName`]); on etcd one key segment below the prefix: no `/`,
/// no control characters ([`InputError::InvalidName`]).
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
    fn names_are_checked() {
        assert_eq!(validate_name(""), Err(InputError::EmptyName));
        assert!(matches!(
            validate_name(&"x".repeat(513)),
            Err(InputError::NameTooLong { len: 513, .. })
        ));
        assert!(validate_name(&"é".repeat(256)).is_ok());
        assert!(validate_name("a{b}").is_ok());
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
