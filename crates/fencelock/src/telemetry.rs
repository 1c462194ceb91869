//! Metrics through the `metrics` facade, behind the cargo feature `metrics`; without it the
//! macros below record nothing and compile away. Names and labels are listed in README.md.
//! Lock names are not labels: they are unbounded (`orders:42`), and a label per lock would
//! make every recorder grow without end. The one exception is an election's name on the
//! leader gauges (as Kubernetes' `leader_election_master_status`): a process takes part in
//! few elections, and "which one do I lead" is the question those gauges answer.
//!
//! On the hot path (every acquire, release, renewal) labels are literals, so each call site's
//! key is a `static` of the macro (no allocation); only the election gauges build their
//! label from the name, once per leadership.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

#[cfg(feature = "metrics")]
use metrics::{counter, gauge, histogram};

#[cfg(not(feature = "metrics"))]
use self::off::{counter, gauge, histogram};

/// Stand-ins for the `metrics` macros that record nothing (their labels are still
/// evaluated, so every argument stays used).
#[cfg(not(feature = "metrics"))]
mod off {
    /// A counter, gauge or histogram that records nothing.
    pub(super) struct Nothing;

    impl Nothing {
        pub(super) fn increment<T>(&self, _: T) {}
        pub(super) fn decrement<T>(&self, _: T) {}
        pub(super) fn set<T>(&self, _: T) {}
        pub(super) fn record<T>(&self, _: T) {}
    }

    macro_rules! nothing {
        ($name:literal $(, $key:literal => $value:expr)*) => {{
            $(let _ = ($key, $value);)*
            $crate::telemetry::off::Nothing
        }};
    }
    pub(crate) use nothing as counter;
    pub(crate) use nothing as gauge;
    pub(crate) use nothing as histogram;
}

/// What a hold is of: the `kind` label of the hold and waiter metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldKind {
    /// A mutex's holding (a multi-lock's locks too).
    Mutex,
    /// An election's leadership.
    Leader,
    /// A read-write lock's read side.
    Read,
    /// A read-write lock's write side.
    Write,
    /// A semaphore's permit.
    Permit,
}

/// The metric `$name` (a literal) of `$macro` labelled by `$kind`, each label a literal, so
/// that the key is static.
macro_rules! by_kind {
    ($macro:ident, $name:literal, $kind:expr) => {
        match $kind {
            HoldKind::Mutex => $macro!($name, "kind" => "mutex"),
            HoldKind::Leader => $macro!($name, "kind" => "leader"),
            HoldKind::Read => $macro!($name, "kind" => "read"),
            HoldKind::Write => $macro!($name, "kind" => "write"),
            HoldKind::Permit => $macro!($name, "kind" => "permit"),
        }
    };
}

/// One hold as the metrics see it, from its guard's making to its end (released, lost, or
/// dropped), which comes once: `fencelock_holds` counts it meanwhile, and its length goes to
/// `fencelock_hold_seconds`. A leadership also counts in its election's leader gauge.
#[derive(Debug)]
pub(crate) struct Held {
    kind: HoldKind,
    since: Instant,
    /// The election's name, for a leadership.
    election: Option<Arc<str>>,
    ended: AtomicBool,
}

impl Held {
    /// A hold of `kind` begins (`election`: the election a leadership is of, and its term).
    pub(crate) fn begin(kind: HoldKind, election: Option<(Arc<str>, u64)>) -> Self {
        by_kind!(gauge, "fencelock_holds", kind).increment(1.0);
        let election = election.map(|(name, term)| {
            gauge!("fencelock_leader", "election" => name.to_string()).increment(1.0);
            gauge!("fencelock_leader_term", "election" => name.to_string()).set(term as f64);
            name
        });
        Self {
            kind,
            since: Instant::now(),
            election,
            ended: AtomicBool::new(false),
        }
    }

    /// The hold ended (the first call counts; later ones do nothing).
    pub(crate) fn end(&self) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        by_kind!(gauge, "fencelock_holds", self.kind).decrement(1.0);
        let held = self.since.elapsed().as_secs_f64();
        by_kind!(histogram, "fencelock_hold_seconds", self.kind).record(held);
        if let Some(name) = &self.election {
            gauge!("fencelock_leader", "election" => name.to_string()).decrement(1.0);
        }
    }
}

/// An acquire that may wait, counted in `fencelock_waiters` until it returns or is dropped.
#[derive(Debug)]
pub(crate) struct Waiting(HoldKind);

impl Waiting {
    /// An acquire of `kind` starts waiting.
    pub(crate) fn begin(kind: HoldKind) -> Self {
        by_kind!(gauge, "fencelock_waiters", kind).increment(1.0);
        Self(kind)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        by_kind!(gauge, "fencelock_waiters", self.0).decrement(1.0);
    }
}

/// A renewal request (one round: the leases due together on one server) was answered, or
/// failed, `took` after it was sent.
pub(crate) fn renewed_in(took: Duration) {
    histogram!("fencelock_renew_seconds").record(took.as_secs_f64());
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
