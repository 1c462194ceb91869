//! Metrics through the `metrics` facade, behind the cargo feature `metrics`; without it every
//! function here is empty and compiles away. Names and labels are listed in README.md. Lock
//! names are not labels: they are unbounded (`orders:42`), and a label per lock would make
//! every recorder grow without end.

use std::time::Duration;

/// How a guard came to hold its lock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Acquired {
    /// A first entry (the lock was free, or handed over).
    First,
    /// A re-entry of a holding this owner had.
    Reentry,
}

/// An acquire call returned a guard after `waited`.
pub(crate) fn acquired(how: Acquired, waited: Duration) {
    #[cfg(feature = "metrics")]
    {
        let kind = match how {
            Acquired::First => "first",
            Acquired::Reentry => "reentry",
        };
        metrics::counter!("fencelock_acquisitions_total", "kind" => kind).increment(1);
        metrics::histogram!("fencelock_acquire_wait_seconds").record(waited.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (how, waited);
}

/// The release script handed the lock to one of this client's waiters.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn handover() {
    #[cfg(feature = "metrics")]
    metrics::counter!("fencelock_handovers_total").increment(1);
}

/// A guard's lost-lock signal fired.
pub(crate) fn lost(reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("fencelock_holds_lost_total", "reason" => reason).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// What one renewal of one lease found: `renewed`, `not_held` or `failed`.
pub(crate) fn renewal(outcome: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("fencelock_renewals_total", "outcome" => outcome).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = outcome;
}
