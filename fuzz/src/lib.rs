//! The library's private input code, compiled here as is (`#[path]`) so that the fuzz targets
//! drive the very source the library runs: the URL parser, the name and owner checks, the Redis
//! keys, and the CLI's duration parser. `crate::error::InputError` in those files resolves to the library's
//! type through the `error` module below.
#![allow(dead_code)]

use fencelock::InputError;

/// What the included sources call `crate::error`.
mod error {
    pub use fencelock::InputError;
}

/// What the included sources call `crate::redact`.
mod redact {
    pub use fencelock::redact_url;
}

/// `crates/fencelock/src/backend/redis/url.rs`.
#[path = "../../crates/fencelock/src/backend/redis/url.rs"]
mod url;

/// `crates/fencelock/src/name.rs`.
#[path = "../../crates/fencelock/src/name.rs"]
mod name;

/// `crates/fencelock/src/backend/redis/keys.rs`.
#[path = "../../crates/fencelock/src/backend/redis/keys.rs"]
mod keys;

/// `crates/fencelock-cli/src/duration.rs`.
#[path = "../../crates/fencelock-cli/src/duration.rs"]
mod duration;

pub use duration::{parse_duration, MAX_DURATION};

/// What `parse_target` made of a URL (its types are private to this crate).
#[derive(Debug)]
pub enum Parsed {
    /// `redis://`: the server's `host:port`.
    Single(String),
    /// `redis+cluster://`: how many seed nodes.
    Cluster(usize),
    /// `redis+sentinel://`: how many sentinels, and the master name.
    Sentinel(usize, String),
}

/// The library's URL parser.
pub fn parse_url(input: &str) -> Result<Parsed, InputError> {
    Ok(match url::parse_target(input)? {
        url::Target::Single(info) => Parsed::Single(url::server_name(&info)),
        url::Target::Cluster(nodes) => Parsed::Cluster(nodes.len()),
        url::Target::Sentinel {
            sentinels, master, ..
        } => Parsed::Sentinel(sentinels.len(), master),
    })
}

/// The library's owner id check.
pub fn validate_owner(owner: &str) -> Result<(), InputError> {
    name::validate_owner(owner)
}

/// The keys and channel of the lock `name`, if the name is accepted.
pub fn lock_keys(name: &str) -> Result<[String; 5], InputError> {
    let lock = name::LockName::new(name)?;
    keys::check_name(name)?;
    let k = keys::LockKeys::of(&lock);
    Ok([
        k.lock.clone(),
        k.fence.clone(),
        k.channel.clone(),
        k.queue.clone(),
        k.waiting.clone(),
    ])
}

/// The same URL with its password (as the URL parser reads it: after the first `:` of
/// everything before the last `@`, or all of that without a `:`) replaced by `pw`, and the
/// password; `None` without a password.
pub fn with_other_password(url: &str) -> Option<(String, &str)> {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (&url[..scheme.len() + 3], rest),
        None => ("", url),
    };
    let (userinfo, hosts) = rest.rsplit_once('@')?;
    let (user, password) = match userinfo.split_once(':') {
        Some((user, password)) => (format!("{user}:"), password),
        None => (String::new(), userinfo),
    };
    Some((format!("{scheme}{user}pw@{hosts}"), password))
}
