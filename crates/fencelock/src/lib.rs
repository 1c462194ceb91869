#![doc = include_str!("../README.md")]
//!
//! # Pieces
//!
//! - [`Client`]: one connection to the lock service (plus one subscriber connection for release
//!   notifications) and one background task that renews every lease the client holds.
//! - [`Lock`]: a cheap handle on one lock name with an owner identity; [`Lock::acquire`],
//!   [`Lock::acquire_timeout`], [`Lock::try_acquire`].
//! - [`Guard`]: proof of holding, with [`Guard::fencing_token`], [`Guard::lost`],
//!   [`Guard::is_held`], [`Guard::extend`] and [`Guard::release`].
//! - [`fenced`]: where the token is checked: `fenced::FencedRegister` on Redis and
//!   [`fenced::FencedUpdate`] for SQL stores.
//! - [`Error`]: one `#[non_exhaustive]` error type; bad input is an [`InputError`], found
//!   before any I/O.

#[cfg(not(any(feature = "redis", feature = "zookeeper", feature = "etcd")))]
compile_error!(
    "fencelock needs at least one lock service: enable the cargo feature `redis` (a default), \
     `zookeeper` or `etcd`"
);

// Given-up attempts are the Redis family's (other services undo by their session).
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
mod backend;
mod background;
mod client;
mod election;
mod error;
pub mod fenced;
mod guard;
mod lease;
mod listing;
mod lock;
mod multi;
mod name;
mod options;
mod redact;
mod rwlock;
mod semaphore;
mod shared;
mod status;
mod telemetry;
mod watchdog;

/// The `redis` crate that [`fenced::FencedRegister`] takes connections of (the same version).
#[cfg(feature = "redis")]
pub use redis;

pub use backend::registry::{services, ServiceInfo};
pub use backend::{Leader, Released};
pub use client::Client;
pub use election::{Election, Leadership, Observer, MAX_VALUE_LEN};
pub use error::{Error, InputError, Result, Warning};
pub use guard::Guard;
pub use lease::LostReason;
pub use listing::Listing;
pub use lock::{Contended, Lock};
pub use multi::{MultiContended, MultiGuard, MultiLock, MAX_MULTI_LOCKS};
pub use name::{validate_name, MAX_NAME_LEN, MAX_OWNER_LEN};
pub use options::{
    ClientOptions, LockOptions, DEFAULT_FENCE_HORIZON, MAX_FENCE_HORIZON, MAX_LEASE, MAX_TIMEOUT,
    MIN_FENCE_HORIZON, MIN_LEASE,
};
pub use redact::redact_url;
pub use rwlock::RwLock;
pub use semaphore::{Semaphore, MAX_PERMITS};
pub use status::{Holder, HolderRole, LockKind, LockStatus, Since, Waiter};

/// The repository README's Rust examples compile.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
mod readme {}
