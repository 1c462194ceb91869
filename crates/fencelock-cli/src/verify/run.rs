//! One run of `fencelock verify`: the clients start, the faults come on schedule, the
//! clients stop, and the checker reads their events.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::args::{multi_name, Primitive, MULTI_LOCKS};
use super::check::{check_by, Bounds, Verdict};
use super::clients::{Fleet, Spec};
use super::events::{fresh_dir, now, read_dir, Event};
use super::faults::{inject, Injected, Planned, Target};
use super::progress::Progress;
use super::servers::Deployment;
use super::words::Contended;
use crate::procs::Started;

/// What one run is.
#[derive(Clone)]
pub struct RunSpec<'a> {
    /// `run` or `control`.
    pub name: &'static str,
    /// Whether writes are fenced.
    pub fencing: bool,
    /// The lease.
    pub lease: Duration,
    /// How long the clients run.
    pub duration: Duration,
    /// How many clients.
    pub clients: usize,
    /// The seed.
    pub seed: u64,
    /// The run's folder.
    pub dir: PathBuf,
    /// This executable (the clients are `verify-client` processes of it).
    pub exe: PathBuf,
    /// The faults and their times.
    pub schedule: &'a [Planned],
    /// How soon the lock must be acquired again after a fault heals.
    pub liveness_bound: Duration,
    /// The lock service's password.
    pub password: Option<String>,
    /// What the clients contend for.
    pub primitive: Primitive,
    /// The semaphore's number of permits.
    pub permits: u32,
}

impl RunSpec<'_> {
    /// What its clients contend for.
    pub fn contended(&self) -> Contended {
        Contended {
            primitive: self.primitive,
            permits: self.permits,
        }
    }
}

/// What one run saw.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// `run` or `control`.
    pub name: String,
    /// Whether writes were fenced.
    pub fencing: bool,
    /// When it started and ended (ns, monotonic).
    pub span: (u64, u64),
    /// The faults as they happened.
    pub injected: Vec<Injected>,
    /// The deployment's state at the end, where it can change by itself (Sentinel).
    pub servers_after: Option<String>,
    /// The lock's names, by part (one but with a multi-lock).
    pub locks: Vec<String>,
    /// The checker's verdict.
    pub verdict: Verdict,
    /// Every event, in time order.
    pub events: Vec<Event>,
}

/// Injects the scheduled faults, each at its time (or as soon as the one before is over).
async fn drive(
    spec: &RunSpec<'_>,
    start: u64,
    target: &mut Target<'_>,
    progress: &mut Progress,
) -> Vec<Injected> {
    let mut injected = Vec::new();
    for planned in spec.schedule {
        progress.doing.clear();
        progress.wait_until(start + planned.at_ms * 1_000_000).await;
        progress.doing = planned.fault.name();
        progress.tick();
        let done = inject(planned.fault, target).await;
        let mark = if done.happened {
            "ok"
        } else {
            "did not happen"
        };
        progress.line(&format!(
            "  {} {}: {mark}: {}",
            spec.name,
            planned.fault.name(),
            done.evidence
        ));
        injected.push(done);
    }
    injected
}

/// Runs one run on `deployment`.
pub async fn run(
    spec: RunSpec<'_>,
    deployment: &mut Deployment,
    started: &Started,
    progress: &mut Progress,
) -> Result<RunReport, String> {
    fresh_dir(&spec.dir).map_err(|e| format!("cannot prepare {}: {e}", spec.dir.display()))?;
    let lock = format!("verify-{}-{}", spec.name, spec.seed);
    let start = now();
    let until = start + spec.duration.as_nanos() as u64;
    let client_spec = Spec {
        exe: spec.exe.clone(),
        urls: deployment.urls.clone(),
        register: deployment.register.url(),
        register_key: format!("verify:{}:{}:register", spec.name, spec.seed),
        lock: lock.clone(),
        lease: spec.lease,
        // Holds up to a quarter of the lease: long enough for a pause to catch a client
        // between its read and its write, short enough that a live holder renews in time.
        hold_max: spec.lease / 4,
        seed: spec.seed,
        dir: spec.dir.clone(),
        until,
        fencing: spec.fencing,
        password: spec.password.clone(),
        primitive: spec.primitive,
        permits: spec.permits,
    };
    let mut fleet = Fleet::start(client_spec, spec.clients, started.clone())
        .map_err(|e| format!("cannot start the clients: {e}"))?;
    progress.follow_run(spec.name, &spec.dir, (start, until));
    let mut target = Target {
        fleet: &mut fleet,
        servers: &mut deployment.servers,
        lease: spec.lease,
        lock: &lock,
        net: deployment.net.as_mut(),
    };
    let injected = drive(&spec, start, &mut target, progress).await;
    progress.doing.clear();
    progress.wait_until(until).await;
    fleet.finish(spec.lease * 3 + Duration::from_secs(5)).await;
    progress.finish();
    let end = now();
    let servers_after = tokio::task::block_in_place(|| deployment.servers.state());
    let events = read_dir(&spec.dir).map_err(|e| format!("cannot read the events: {e}"))?;
    let heals: Vec<u64> = injected
        .iter()
        .filter(|i| i.happened)
        .map(|i| i.end)
        .collect();
    let verdict = check_by(
        &events,
        Bounds {
            heals: &heals,
            // Liveness is measured while the clients run; every hold still open at the end
            // was closed by its client's exit or kill event.
            end: until,
            liveness_bound: spec.liveness_bound.as_nanos() as u64,
        },
        spec.primitive.rule(spec.permits),
    );
    Ok(RunReport {
        name: spec.name.to_owned(),
        fencing: spec.fencing,
        span: (start, end),
        injected,
        servers_after,
        locks: match spec.primitive {
            Primitive::Multi => (0..MULTI_LOCKS).map(|p| multi_name(&lock, p)).collect(),
            _ => vec![lock.clone()],
        },
        verdict,
        events,
    })
}
