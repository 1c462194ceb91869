//! The one error type of the library, and the input errors that are found before any I/O.

use std::time::Duration;

/// Input that fencelock rejects before it talks to any server.
///
/// Kept separate from [`Error`] (and `Clone`) so that a lock handle built from bad input can carry
/// the problem until its first operation reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// The lock name is the empty string.
    #[error("lock name is empty")]
    EmptyName,
    /// The lock name is longer than [`crate::MAX_NAME_LEN`] bytes.
    #[error("lock name is {len} bytes long; the limit is {max} bytes")]
    NameTooLong {
        /// Length of the rejected name in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The lock name contains `{` or `}`, which would change the Redis Cluster hash tag.
    #[error(
        "lock name {name:?} contains '{{' or '}}', which would break its Redis Cluster hash tag"
    )]
    NameHasBrace {
        /// The rejected name.
        name: String,
    },
    /// The lock name cannot be used by the lock service (ZooKeeper: it would not be one node
    /// of a path: `/`, `.` or `..`, or characters ZooKeeper refuses in paths).
    #[error("lock name {name:?} is invalid for {service}: {reason}")]
    InvalidName {
        /// The rejected name.
        name: String,
        /// The lock service that refuses it.
        service: &'static str,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A lease of zero.
    #[error("lease must be longer than zero")]
    ZeroLease,
    /// A lease below [`crate::MIN_LEASE`].
    #[error("lease of {lease:?} is shorter than the minimum of {min:?}")]
    LeaseTooShort {
        /// The rejected lease.
        lease: Duration,
        /// The minimum.
        min: Duration,
    },
    /// A lease above [`crate::MAX_LEASE`].
    #[error("lease of {lease:?} is longer than the maximum of {max:?}")]
    LeaseTooLong {
        /// The rejected lease.
        lease: Duration,
        /// The maximum.
        max: Duration,
    },
    /// A lease with a fraction of a millisecond: Redis keeps leases in whole milliseconds, and
    /// fencelock does not round silently.
    #[error("lease of {lease:?} is not a whole number of milliseconds")]
    LeaseNotWholeMillis {
        /// The rejected lease.
        lease: Duration,
    },
    /// An owner id that is empty, too long, or contains characters fencelock reserves.
    #[error("owner id {owner:?} is invalid: {reason}")]
    InvalidOwner {
        /// The rejected owner id.
        owner: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A server URL that cannot be used.
    #[error("server URL {url:?} is invalid: {reason}")]
    InvalidUrl {
        /// The URL with any password replaced by `***`.
        url: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A timeout longer than [`crate::MAX_TIMEOUT`]: almost certainly a unit mistake, and
    /// beyond what a deadline can be computed for on some platforms. There is no "no timeout"
    /// value: [`crate::Lock::acquire`] waits without a bound.
    #[error("{option} of {timeout:?} is longer than the maximum of {max:?}")]
    TimeoutTooLong {
        /// The option or method (`connect_timeout`, `response_timeout`, `acquire_timeout`).
        option: &'static str,
        /// The rejected timeout.
        timeout: Duration,
        /// The maximum.
        max: Duration,
    },
    /// The clock-drift margin ([`crate::ClientOptions::clock_drift`]: `lease * factor + min`)
    /// is not shorter than the lease it is taken from, so a guard would count as lost from
    /// the moment it was acquired.
    #[error(
        "the clock-drift margin of {margin:?} is not shorter than the lease of {lease:?}; \
         every guard would be lost at once (lower clock_drift or lengthen the lease)"
    )]
    DriftTooLarge {
        /// The lease.
        lease: Duration,
        /// The margin for that lease (`Duration::MAX` if it overflows).
        margin: Duration,
    },
    /// RedLock: two of the URLs reach the same server (same address after name resolution,
    /// whatever the database, password or spelling), so a "majority" could be one server.
    #[error(
        "RedLock servers {first:?} and {second:?} are the same server ({address}); \
         a majority needs independent servers"
    )]
    DuplicateServer {
        /// The first URL, with any password replaced by `***`.
        first: String,
        /// The URL that repeats it, with any password replaced by `***`.
        second: String,
        /// The address both reach.
        address: String,
    },
    /// A value an election participant advertises is longer than
    /// [`crate::MAX_VALUE_LEN`] bytes.
    #[error("an election value of {len} bytes is longer than the maximum of {max} bytes")]
    ValueTooLong {
        /// The value's length in bytes.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// A multi-lock names no lock, or more than [`crate::MAX_MULTI_LOCKS`].
    #[error("a multi-lock of {len} locks: it takes from 1 to {max}")]
    MultiLockSize {
        /// How many names were given.
        len: usize,
        /// The most a multi-lock takes.
        max: usize,
    },
    /// A multi-lock names one lock twice.
    #[error("a multi-lock names lock {name:?} twice")]
    DuplicateName {
        /// The name given twice.
        name: String,
    },
    /// A client option out of its range.
    #[error("option {option} is invalid: {reason}")]
    InvalidOption {
        /// The option's name.
        option: &'static str,
        /// Why it was rejected.
        reason: &'static str,
    },
}

/// Everything that can go wrong in fencelock.
///
/// Each variant that involves a server names the lock (when there is one) and the server
/// (`host:port`, never a password).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bad input, rejected before any I/O.
    #[error(transparent)]
    InvalidInput(#[from] InputError),
    /// [`crate::Lock::acquire_timeout`] gave up.
    #[error("lock {lock:?} was not acquired within {waited:?} (still held by another owner)")]
    Timeout {
        /// The lock name.
        lock: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// The server could not be reached, or did not answer within the configured time.
    #[error("server {server} is unavailable{}: {detail}", for_lock(.lock))]
    Unavailable {
        /// The lock name, when the failure happened during a lock operation.
        lock: Option<String>,
        /// The server address.
        server: String,
        /// What happened.
        detail: String,
    },
    /// A lock key exists but holds a value of another type (the key is used by something else).
    #[error(
        "key {key:?} of lock {lock:?} on server {server} holds a value of the wrong type: {detail}"
    )]
    WrongType {
        /// The lock name.
        lock: String,
        /// The key that has the wrong type.
        key: String,
        /// The server address.
        server: String,
        /// The server's message.
        detail: String,
    },
    /// The service answered with an error of its own (the `source`, from the service's client
    /// library), not one fencelock maps to another variant.
    #[error("{service} server {server} returned an error{}: {source}", for_lock(.lock))]
    Server {
        /// The lock service (`"Redis"`, `"ZooKeeper"`, `"etcd"`).
        service: &'static str,
        /// The lock name, when the failure happened during a lock operation.
        lock: Option<String>,
        /// The server address.
        server: String,
        /// The service's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The service refused the client's credentials, or they give no access to the lock: a
    /// wrong password, an unknown user, a user whose permissions (Redis ACL, etcd role,
    /// ZooKeeper ACL) do not cover the lock's keys. Trying again does not help until the
    /// credentials or permissions change; the request changed nothing.
    #[error("server {server} refused access{}: {detail}", for_lock(.lock))]
    Denied {
        /// The lock name, when the refusal came during a lock operation.
        lock: Option<String>,
        /// The server address.
        server: String,
        /// The server's reason.
        detail: String,
    },
    /// The server answered, but not in the shape fencelock's scripts produce.
    #[error("unexpected reply from server {server}{}: {detail}", for_lock(.lock))]
    Protocol {
        /// The lock name, when there is one.
        lock: Option<String>,
        /// The server address.
        server: String,
        /// What was wrong with the reply.
        detail: String,
    },
    /// A service that needs a majority of independent servers (RedLock over Redis servers)
    /// did not get one. The `source` says what each server answered.
    #[error("{operation} of {} needs {needed} servers to agree: {source}", lock.as_deref().map_or("RedLock".to_owned(), |l| format!("lock {l:?}")))]
    Quorum {
        /// The lock name, when there is one.
        lock: Option<String>,
        /// What was attempted (`acquire`, `release`, ...).
        operation: &'static str,
        /// How many servers make a majority.
        needed: usize,
        /// Each server's answer (servers that answered as hoped may be left out), one per
        /// server in its `Display`, separated by `; `.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// `min_replica_acks`: not enough replicas confirmed the lock in time, so it was given
    /// back (a failover now could have lost it). Redis only: the other services refuse the
    /// option before any I/O.
    #[error("lock {lock:?} on {server}: {acked} of {needed} replicas acknowledged within {timeout:?}; the lock was released")]
    ReplicaAcks {
        /// The lock name.
        lock: String,
        /// The server (master) address.
        server: String,
        /// Replicas that acknowledged.
        acked: u32,
        /// Replicas asked for.
        needed: u32,
        /// How long the server waited.
        timeout: Duration,
    },
    /// The guard's lease is gone: the lost-lock signal has fired, so the guard can no longer be
    /// extended.
    #[error("lock {lock:?} is no longer held by this guard ({reason})")]
    LockLost {
        /// The lock name.
        lock: String,
        /// Why the lock counts as lost.
        reason: crate::LostReason,
    },
    /// The lock's fencing counter cannot issue another token: it does not hold a number, or
    /// it has issued the highest token (2^64 − 1). Tokens never repeat, so the acquire fails
    /// (changing nothing) until an operator resets the counter and every resource fenced with
    /// it. Redis only: ZooKeeper and etcd tokens are the service's own
    /// transaction ids.
    #[error("lock {lock:?} on server {server} cannot issue a fencing token: {detail}")]
    FencingExhausted {
        /// The lock name.
        lock: String,
        /// The server address.
        server: String,
        /// The server's message, naming the counter key.
        detail: String,
    },
    /// The lock service cannot do what was asked, by its nature (e.g. [`crate::Guard::extend`]
    /// on ZooKeeper, where a lock lasts as long as the client's session). Nothing was sent.
    #[error("{what} is not supported by {service}: {why}")]
    Unsupported {
        /// The lock service (`"ZooKeeper"`).
        service: &'static str,
        /// What was asked.
        what: &'static str,
        /// Why the service cannot do it.
        why: &'static str,
    },
    /// The name is used on the servers as another primitive (a mutex, an election, a
    /// read-write lock, a semaphore, or a semaphore of another number of permits is a
    /// [`Error::PermitsMismatch`]): one name, one kind, never two layouts that each side
    /// believes it holds.
    #[error("{lock:?} is used as {} on server {server}; it was asked for as {}", an(.found), an(.asked))]
    PrimitiveMismatch {
        /// The name.
        lock: String,
        /// What it was asked for as (`"mutex"`, `"election"`, `"read-write lock"`,
        /// `"semaphore"`).
        asked: &'static str,
        /// What the servers hold under it, in the same words.
        found: String,
        /// The server address.
        server: String,
    },
    /// An owner that holds a read-write lock's read side asked for its write side: the
    /// writer would wait for its own read hold (and two readers upgrading would wait for each
    /// other), so it is refused at once. Release the read side first. (The other way, write
    /// then read, is a downgrade and is granted at once.)
    #[error(
        "read-write lock {lock:?}: owner {owner} holds the read side and asked for the write \
         side; an upgrade would deadlock (release the read side first)"
    )]
    UpgradeRefused {
        /// The lock name.
        lock: String,
        /// The owner id.
        owner: String,
    },
    /// A semaphore was asked for with another number of permits than the one stored with it.
    /// [`crate::Semaphore::resize`] changes the stored number.
    #[error(
        "semaphore {lock:?} has {stored} permits, not {asked}; Semaphore::resize changes the \
         number"
    )]
    PermitsMismatch {
        /// The semaphore's name.
        lock: String,
        /// The number stored with it.
        stored: u32,
        /// The number asked for.
        asked: u32,
    },
    /// [`crate::Client::close`] found background work (releases, undos, RedLock requests
    /// still in flight) unfinished after its bound, or failed: a server that did not answer
    /// may keep a grant until its lease ends.
    #[error("at close, after waiting {:?}, {pending} background request(s) were still under way and {failed} had failed; a server may keep a lock until its lease ends", rounded(.waited))]
    Unfinished {
        /// Requests still under way.
        pending: usize,
        /// Give-backs (releases, undos) that failed.
        failed: usize,
        /// How long `close` waited: the time it took, measured (at most its bound; less
        /// when the work ended, or failed, sooner).
        waited: Duration,
    },
}

/// `word` with its article: "a mutex", "an election".
fn an(word: &str) -> String {
    match word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        true => format!("an {word}"),
        false => format!("a {word}"),
    }
}

/// `d` to the millisecond, as `Debug` then prints it (`312ms`, `4s`).
fn rounded(d: &Duration) -> Duration {
    Duration::from_millis(d.as_millis().try_into().unwrap_or(u64::MAX))
}

fn for_lock(lock: &Option<String>) -> String {
    match lock {
        Some(name) => format!(" (lock {name:?})"),
        None => String::new(),
    }
}

/// `Result` with fencelock's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A problem found on connect that does not stop the client from working
/// ([`crate::Client::warnings`]); each is also logged with `tracing::warn!`. `Display` says
/// it in a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Warning {
    /// A server's eviction policy can evict lock keys and hand a lock to two owners.
    EvictionPolicy {
        /// The server address.
        server: String,
        /// Its `maxmemory-policy`.
        policy: String,
    },
    /// One server of a set that needs a majority (RedLock) was unavailable at connect; it is
    /// retried on every request.
    ServerUnavailable {
        /// The server address.
        server: String,
        /// What connecting to it found.
        error: String,
    },
    /// The service granted a lease (session timeout, lease TTL) other than the one
    /// [`crate::ClientOptions::default_lease`] asked for: locks count as lost that long after
    /// the server was last heard from.
    LeaseAdjusted {
        /// The lock service (`"ZooKeeper"`, `"etcd"`).
        service: &'static str,
        /// The lease asked for.
        asked: Duration,
        /// The lease granted, which every guard's `lease()` reports.
        granted: Duration,
    },
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::EvictionPolicy { server, policy } => write!(
                f,
                "server {server} has maxmemory-policy {policy}, which can evict lock keys and \
                 hand a lock to two owners; use noeviction"
            ),
            Self::ServerUnavailable { server, error } => write!(
                f,
                "RedLock server {server} is unavailable ({error}); it will be retried on every \
                 request"
            ),
            Self::LeaseAdjusted {
                service,
                asked,
                granted,
            } => write!(
                f,
                "{service} granted a lease of {granted:?} (asked for {asked:?}, \
                 ClientOptions::default_lease); locks count as lost that long after the server \
                 was last heard from"
            ),
        }
    }
}
