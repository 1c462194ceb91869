//! Options of a lock and of a client, as builders.

use std::time::Duration;

use crate::error::InputError;

/// The shortest lease accepted.
pub const MIN_LEASE: Duration = Duration::from_millis(10);
/// The longest lease accepted (7 days): longer is almost certainly a unit mistake.
pub const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);

/// The longest timeout accepted: [`ClientOptions::connect_timeout`],
/// [`ClientOptions::response_timeout`], [`crate::Lock::acquire_timeout`] (7 days, as
/// [`MAX_LEASE`]). Longer is almost certainly a unit mistake, and is rejected with
/// [`InputError::TimeoutTooLong`] rather than read as "no timeout".
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// The default [`ClientOptions::fence_horizon`]: one day.
pub const DEFAULT_FENCE_HORIZON: Duration = Duration::from_secs(24 * 3600);
/// The shortest [`ClientOptions::fence_horizon`]: one second. Tokens stay increasing across a
/// counter's expiry only while clocks agree within the horizon (docs/SAFETY.md), so it is
/// never shorter than the clock differences of NTP-synchronised hosts.
pub const MIN_FENCE_HORIZON: Duration = Duration::from_secs(1);
/// The longest [`ClientOptions::fence_horizon`]: ten years (of 365 days).
pub const MAX_FENCE_HORIZON: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Per-lock options.
///
/// ```
/// use std::time::Duration;
/// // A fixed 5 s lease, never renewed: the lock is gone 5 s after acquisition at the latest.
/// let opts = fencelock::LockOptions::default().lease(Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockOptions {
    pub(crate) lease: Option<Duration>,
    pub(crate) replica_acks: Option<(u32, Duration)>,
}

impl LockOptions {
    /// A fixed lease: the lock is held for at most this long unless [`crate::Guard::extend`] is
    /// called, and the watchdog does not renew it. Without this option the client's default
    /// lease applies and the watchdog renews it every lease/3 until release. Re-entering a
    /// lock never shortens the lease it already has. ZooKeeper and etcd have no per-lock lease
    /// (the client's session, or lease, is every lock's): there this option is an input error
    /// ([`crate::InputError::InvalidOption`]); set the session's length with
    /// [`ClientOptions::default_lease`] instead.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// After acquiring, wait (`WAIT`) until `replicas` replicas of the master have the lock,
    /// at most `timeout`; if they do not, release it and fail with `Error::ReplicaAcks`
    /// (Redis only, cargo feature `redis`; ZooKeeper and etcd refuse the option with
    /// [`crate::InputError::InvalidOption`] before any I/O). This narrows the window in which a failover loses a lock
    /// (the promoted replica has it), but does not close it: a replica that acknowledged may
    /// not be the one promoted, and `WAIT` does not make the write durable. Fencing tokens
    /// close it. With RedLock, each server counts as granting only once its replicas
    /// acknowledged.
    ///
    /// Such a lock waits in the server's queue like any other; when the lock is handed to it,
    /// it extends the lease on a connection of its own and runs `WAIT` there before its
    /// acquire returns.
    ///
    /// `timeout` must be shorter than the lease (the lease runs while the replicas are
    /// awaited). `WAIT` blocks the connection it is sent on, so such acquisitions use a
    /// connection of their own: renewals and other locks of the client never wait behind it.
    pub fn min_replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_acks = Some((replicas, timeout));
        self
    }

    /// The explicit lease, if one was set.
    pub fn explicit_lease(&self) -> Option<Duration> {
        self.lease
    }
}

/// A password that `Debug` never prints.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(pub(crate) String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Client-wide options.
///
/// ```
/// use std::time::Duration;
/// let opts = fencelock::ClientOptions::default()
///     .default_lease(Duration::from_secs(10))
///     .response_timeout(Duration::from_millis(500));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ClientOptions {
    pub(crate) default_lease: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) drift_min: Duration,
    pub(crate) password: Option<Secret>,
    pub(crate) fence_horizon: Option<Duration>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            default_lease: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            drift_factor: 0.01,
            drift_min: Duration::from_millis(2),
            password: None,
            fence_horizon: None,
        }
    }
}

impl ClientOptions {
    /// The lease of locks acquired without an explicit lease; the watchdog renews it every
    /// lease/3. Default 30 s. Between [`MIN_LEASE`] and [`MAX_LEASE`], whole milliseconds, and
    /// longer than the clock-drift margin taken from it (see [`ClientOptions::clock_drift`]);
    /// checked when the client connects.
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.default_lease = lease;
        self
    }

    /// How long one connection attempt may take. Default 2 s. ZooKeeper: a server that
    /// closes new sessions (one still starting) is tried again until this has passed.
    ///
    /// Above zero and at most [`MAX_TIMEOUT`]: a longer one (`Duration::MAX` included) is not
    /// read as "no timeout" but rejected when the client connects, with
    /// [`InputError::TimeoutTooLong`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a request may wait for its reply before it fails with
    /// [`crate::Error::Unavailable`]. Default 2 s.
    ///
    /// Above zero and at most [`MAX_TIMEOUT`]: a longer one (`Duration::MAX` included) is not
    /// read as "no timeout" but rejected when the client connects, with
    /// [`InputError::TimeoutTooLong`].
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The clock-drift margin taken off every lease on the client side: `lease * factor + min`.
    /// Defaults: 0.01 and 2 ms (the RedLock paper's values).
    ///
    /// `factor` must be in `[0, 0.5)`. The margin must be shorter than every lease it is taken
    /// from, or a guard would count as lost the moment it is acquired: the client rejects it
    /// on connect for the default lease, and a lock with an explicit lease (or
    /// [`crate::Guard::extend`]) on its first use for that lease, with
    /// [`InputError::DriftTooLarge`] before any I/O. A `min` too large to add
    /// (`Duration::MAX`) is rejected the same way.
    pub fn clock_drift(mut self, factor: f64, min: Duration) -> Self {
        self.drift_factor = factor;
        self.drift_min = min;
        self
    }

    /// The server password, overriding one in the URL (e.g. from an environment variable, so
    /// that it does not appear in process listings). Never printed, not even by `Debug`.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(Secret(password.into()));
        self
    }

    /// Redis: how long a lock's fencing counter (`fencelock:{name}:fence`) lives after the last
    /// token it issued. Default [`DEFAULT_FENCE_HORIZON`] (one day). Once it has expired, the
    /// next token starts again from the server's clock in microseconds, which stays above every
    /// earlier token as long as the server's clock never steps back by more than the horizon
    /// (docs/SAFETY.md), so no key outlives its use by more than this. Whole milliseconds,
    /// from [`MIN_FENCE_HORIZON`] to [`MAX_FENCE_HORIZON`]; checked when the client connects
    /// ([`InputError::InvalidOption`]). ZooKeeper and etcd keep no counter (their tokens are
    /// zxids and revisions) and leave nothing behind a free lock: a client of theirs refuses
    /// this option ([`InputError::InvalidOption`]) rather than ignore it.
    pub fn fence_horizon(mut self, horizon: Duration) -> Self {
        self.fence_horizon = Some(horizon);
        self
    }

    /// The fencing counter's horizon: the one set, or [`DEFAULT_FENCE_HORIZON`].
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn fence_horizon_or_default(&self) -> Duration {
        self.fence_horizon.unwrap_or(DEFAULT_FENCE_HORIZON)
    }

    pub(crate) fn validate(&self) -> Result<(), InputError> {
        validate_lease(self.default_lease)?;
        if let Some(horizon) = self.fence_horizon {
            validate_fence_horizon(horizon)?;
        }
        for (option, timeout) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
        ] {
            if timeout.is_zero() {
                return Err(InputError::InvalidOption {
                    option,
                    reason: "must be longer than zero",
                });
            }
            validate_timeout(option, timeout)?;
        }
        self.validate_drift(self.default_lease)
    }

    /// Checks the drift factor, and that the margin leaves some of `lease` (a validated lease).
    pub(crate) fn validate_drift(&self, lease: Duration) -> Result<(), InputError> {
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(InputError::InvalidOption {
                option: "clock_drift",
                reason: "factor must be in [0, 0.5)",
            });
        }
        // `lease * factor` is at most half a lease: it cannot overflow; adding `min` can.
        let margin = lease
            .mul_f64(self.drift_factor)
            .checked_add(self.drift_min)
            .filter(|margin| *margin < lease);
        match margin {
            Some(_) => Ok(()),
            None => Err(InputError::DriftTooLarge {
                lease,
                margin: self.drift(lease),
            }),
        }
    }

    /// The part of a lease the client does not trust, because clocks drift. Saturates, but
    /// for any lease that passed [`ClientOptions::validate_drift`] it is exact and shorter
    /// than the lease.
    pub(crate) fn drift(&self, lease: Duration) -> Duration {
        lease
            .mul_f64(self.drift_factor)
            .saturating_add(self.drift_min)
    }

    /// The longest any single request may take end to end, reconnection included. Both
    /// timeouts are at most [`MAX_TIMEOUT`] once validated, so the sum cannot saturate.
    pub(crate) fn request_bound(&self) -> Duration {
        self.connect_timeout.saturating_add(self.response_timeout)
    }
}

/// Checks a fencing counter's horizon: whole milliseconds in
/// [[`MIN_FENCE_HORIZON`], [`MAX_FENCE_HORIZON`]].
fn validate_fence_horizon(horizon: Duration) -> Result<(), InputError> {
    let reason = if !horizon.subsec_nanos().is_multiple_of(1_000_000) {
        "must be a whole number of milliseconds"
    } else if horizon < MIN_FENCE_HORIZON {
        "must be at least one second"
    } else if horizon > MAX_FENCE_HORIZON {
        "must be at most 10 years"
    } else {
        return Ok(());
    };
    Err(InputError::InvalidOption {
        option: "fence_horizon",
        reason,
    })
}

/// Checks `min_replica_acks`: at least one replica, a timeout of whole milliseconds.
pub(crate) fn validate_acks(replicas: u32, timeout: Duration) -> Result<(), InputError> {
    if replicas == 0 {
        return Err(InputError::InvalidOption {
            option: "min_replica_acks",
            reason: "at least one replica must acknowledge",
        });
    }
    if timeout.is_zero() || !timeout.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(InputError::InvalidOption {
            option: "min_replica_acks",
            reason: "the timeout must be a whole number of milliseconds above zero (WAIT 0 would wait forever)",
        });
    }
    Ok(())
}

/// Checks a timeout against [`MAX_TIMEOUT`] (`option` names it in the error).
pub(crate) fn validate_timeout(option: &'static str, timeout: Duration) -> Result<(), InputError> {
    if timeout > MAX_TIMEOUT {
        return Err(InputError::TimeoutTooLong {
            option,
            timeout,
            max: MAX_TIMEOUT,
        });
    }
    Ok(())
}

/// Checks a lease: whole milliseconds in [`MIN_LEASE`, `MAX_LEASE`].
pub(crate) fn validate_lease(lease: Duration) -> Result<(), InputError> {
    if lease.is_zero() {
        return Err(InputError::ZeroLease);
    }
    if lease < MIN_LEASE {
        return Err(InputError::LeaseTooShort {
            lease,
            min: MIN_LEASE,
        });
    }
    if lease > MAX_LEASE {
        return Err(InputError::LeaseTooLong {
            lease,
            max: MAX_LEASE,
        });
    }
    if !lease.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(InputError::LeaseNotWholeMillis { lease });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_checked() {
        assert_eq!(validate_lease(Duration::ZERO), Err(InputError::ZeroLease));
        assert!(matches!(
            validate_lease(Duration::from_millis(9)),
            Err(InputError::LeaseTooShort { .. })
        ));
        assert!(matches!(
            validate_lease(MAX_LEASE + Duration::from_millis(1)),
            Err(InputError::LeaseTooLong { .. })
        ));
        assert!(matches!(
            validate_lease(Duration::from_micros(10_500)),
            Err(InputError::LeaseNotWholeMillis { .. })
        ));
        assert!(validate_lease(Duration::from_millis(10)).is_ok());
        assert!(validate_lease(MAX_LEASE).is_ok());
    }

    #[test]
    fn passwords_are_not_printed() {
        let o = ClientOptions::default().password("hunter2");
        assert!(!format!("{o:?}").contains("hunter2"));
    }

    #[test]
    fn drift_is_a_fraction_plus_a_floor() {
        let o = ClientOptions::default();
        assert_eq!(o.drift(Duration::from_secs(30)), Duration::from_millis(302));
    }

    #[test]
    fn the_drift_margin_must_leave_some_of_the_lease() {
        let ms = Duration::from_millis;
        let o = ClientOptions::default().clock_drift(0.0, ms(100));
        assert!(o.validate_drift(ms(101)).is_ok());
        for lease in [ms(100), ms(10)] {
            assert!(
                matches!(
                    o.validate_drift(lease),
                    Err(InputError::DriftTooLarge { margin, .. }) if margin == ms(100)
                ),
                "{lease:?}"
            );
        }
        let o = ClientOptions::default().clock_drift(0.49, Duration::MAX);
        assert!(matches!(
            o.validate_drift(MAX_LEASE),
            Err(InputError::DriftTooLarge {
                margin: Duration::MAX,
                ..
            })
        ));
        assert!(ClientOptions::default().validate_drift(MIN_LEASE).is_ok());
        for factor in [f64::NAN, -0.1, 0.5, f64::INFINITY] {
            let o = ClientOptions::default().clock_drift(factor, ms(1));
            assert!(
                matches!(
                    o.validate_drift(MAX_LEASE),
                    Err(InputError::InvalidOption { .. })
                ),
                "{factor}"
            );
        }
    }

    #[test]
    fn timeouts_have_a_maximum() {
        assert!(validate_timeout("t", MAX_TIMEOUT).is_ok());
        for too_long in [MAX_TIMEOUT + Duration::from_nanos(1), Duration::MAX] {
            assert!(matches!(
                validate_timeout("t", too_long),
                Err(InputError::TimeoutTooLong { option: "t", .. })
            ));
        }
        let longest = ClientOptions::default()
            .connect_timeout(MAX_TIMEOUT)
            .response_timeout(MAX_TIMEOUT);
        assert!(longest.validate().is_ok());
        assert_eq!(longest.request_bound(), MAX_TIMEOUT * 2);
    }
}
