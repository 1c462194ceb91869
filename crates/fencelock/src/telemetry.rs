//! Metrics through the `metrics` facade, behind the cargo feature `metrics`; without it the
//! macros below record nothing and compile away. Names and labels are listed in README.md.
//! Lock names are not labels: they are unbounded (`orders:42`), and a label per lock would
//! make every recorder grow without end.

use std::time::Duration;

#[cfg(feature = "metrics")]
use metrics::{counter, histogram};

#[cfg(not(feature = "metrics"))]
use self::off::{counter, histogram};

/// Stand-ins for the `metrics` macros that record nothing (their labels are still
/// evaluated, so every argument stays used).
#[cfg(not(feature = "metrics"))]
mod off {
    /// A counter or histogram that records nothing.
    pub(super) struct Nothing;

    impl Nothing {
        pub(super) fn increment(&self, _: u64) {}
        pub(super) fn record(&self, _: f64) {}
    }

    macro_rules! nothing {
        ($name:literal $(, $key:literal => $value:expr)*) => {{
            $(let _ = ($key, $value);)*
            $crate::telemetry::off::Nothing
        }};
    }
    pub(crate) use nothing as counter;
    pub(crate) use nothing as histogram;
}

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
    let kind = match how {
        Acquired::First => "first",
        Acquired::Reentry => "reentry",
    };
    counter!("fencelock_acquisitions_total", "kind" => kind).increment(1);
    histogram!("fencelock_acquire_wait_seconds").record(waited.as_secs_f64());
}

/// A service handed the lock to one of this client's waiters.
// Seam vocabulary: a build without the services that use it leaves it unused.
#[allow(dead_code)]
pub(crate) fn handover() {
    counter!("fencelock_handovers_total").increment(1);
}

/// A guard's lost-lock signal fired.
pub(crate) fn lost(reason: &'static str) {
    counter!("fencelock_holds_lost_total", "reason" => reason).increment(1);
}

/// What one renewal of one lease found: `renewed`, `not_held` or `failed`.
pub(crate) fn renewal(outcome: &'static str) {
    counter!("fencelock_renewals_total", "outcome" => outcome).increment(1);
}
