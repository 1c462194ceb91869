//! `fencelock verify`: K client processes contend for one lock and update a fenced register
//! while faults come on a seeded schedule; every event is recorded on the shared monotonic
//! clock, a checker reads the history, and a report shows it. A negative control (the same
//! schedule without fencing) runs after the run, so the report can show what fencing
//! prevented. `--primitive election` runs the same loop as a leader election (campaign,
//! write with the term, resign), and every client observes the election for the checker.
//! `--primitive rwlock|semaphore|multi` (issue 24) run it on the lock family: a seeded mix of
//! readers and writers, permit holders of `--permits N`, or two locks at once; what each
//! writes and what the checker looks for is in `check.rs`. A service that does not offer the
//! read-write lock or the semaphore is said before the run (69).
//!
//! - `args`: flags, backends, faults.
//! - `servers`: throwaway servers through the test kit (or the user's `--url`).
//! - `clients`: the hidden `verify-client` processes and the fleet that drives them.
//! - `faults`: which faults run or are skipped, their seeded schedule, and running them.
//! - `events`: the events and the shared clock; `check`: the checker (pure).
//! - `run`: one run; `report`: JSON and HTML; `progress`: the live line; `words`: each
//!   primitive's words for them.

mod args;
mod check;
mod clients;
mod events;
mod faults;
mod net;
mod progress;
mod report;
mod rng;
mod run;
mod servers;
mod words;

use std::io::IsTerminal;
use std::time::Duration;

pub use args::{check_permits, VerifyArgs};
pub use clients::{client, ClientArgs};

use crate::exit;
use crate::procs::Started;
use crate::ui::Ui;
use args::{Backend, Fault};
use progress::Progress;
use report::Report;
use run::{RunReport, RunSpec};

/// A safety check failed (or the run could not be carried out).
const VIOLATIONS: u8 = 1;
/// No safety check failed, but no fault happened: nothing was tested under faults.
const INCONCLUSIVE: u8 = 2;

/// Runs `fencelock verify`. Exit status 0 when every safety check of the run passed and a
/// fault happened, 1 on violations, 2 when no fault happened (inconclusive).
pub async fn verify(args: VerifyArgs) -> u8 {
    let faults =
        match args::validate(&args).and_then(|()| args::parse_faults(&args.faults, args.backend)) {
            Ok(faults) => faults,
            Err(e) => {
                eprintln!("fencelock verify: {e}");
                return exit::USAGE;
            }
        };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("fencelock verify: cannot find my own executable: {e}");
            return exit::CANNOT_EXECUTE;
        }
    };
    let (runnable, skipped) = faults::plan(&faults, args.backend, !args.url.is_empty());
    let started = Started::default();
    let outcome = tokio::select! {
        r = verify_with(&args, exe, runnable, skipped, &started) => r,
        _ = tokio::signal::ctrl_c() => Err((VIOLATIONS, "interrupted".to_owned())),
    };
    started.kill_all();
    match outcome {
        Ok(code) => code,
        Err((code, e)) => {
            eprintln!("fencelock verify: {e}");
            code
        }
    }
}

/// The stated liveness bound: three leases (the holder's lease running out after a fault,
/// and a waiter's wake-up), plus room for a ZooKeeper or etcd election and a busy machine.
fn liveness_bound(lease: Duration, backend: Backend) -> Duration {
    let room = match backend {
        Backend::Zookeeper | Backend::Etcd => Duration::from_secs(10),
        _ => Duration::from_secs(5),
    };
    lease * 3 + room
}

async fn verify_with(
    args: &VerifyArgs,
    exe: std::path::PathBuf,
    mut faults: Vec<Fault>,
    mut skipped: Vec<faults::Skipped>,
    started: &Started,
) -> Result<u8, (u8, String)> {
    let contended = words::Contended {
        primitive: args.primitive,
        permits: args.permits,
    };
    let tty = std::io::stdout().is_terminal();
    let mut progress = Progress::new(Ui { tty }, contended);
    let mut deployment = start_servers(args, &faults, &progress).await?;
    offered(args, &deployment.urls).await?;
    skip_unavailable(&mut deployment, &mut faults, &mut skipped, &progress);
    let lease = args.lease.unwrap_or(args.backend.default_lease());
    let bound = liveness_bound(lease, args.backend);
    let needed = faults::min_duration(&faults, lease);
    let duration = args.duration.max(needed);
    if duration > args.duration {
        progress.line(&format!(
            "fencelock verify: --duration raised to {} s to fit the faults and the recovery \
             after them",
            duration.as_secs()
        ));
    }
    let schedule = faults::schedule(&faults, duration, args.seed);
    std::fs::create_dir_all(&args.report).map_err(|e| {
        (
            exit::CANNOT_EXECUTE,
            format!("{}: {e}", args.report.display()),
        )
    })?;
    progress.line(&format!(
        "fencelock verify: {} · {} clients · lease {} ms · {} faults · seed {}",
        deployment.description,
        args.clients,
        lease.as_millis(),
        schedule.len(),
        args.seed
    ));
    let template = RunSpec {
        name: "run",
        fencing: !args.no_fencing,
        lease,
        duration,
        clients: args.clients.into(),
        seed: args.seed,
        dir: args.report.clone(),
        exe,
        schedule: &schedule,
        liveness_bound: bound,
        password: args.password.clone(),
        primitive: args.primitive,
        permits: args.permits,
    };
    let control = !args.no_control && !args.no_fencing;
    let runs = run_all(template, control, &mut deployment, started, &mut progress).await?;
    let report = Report {
        command: command_line(),
        backend: args.backend,
        primitive: args.primitive,
        permits: (args.primitive == args::Primitive::Semaphore).then_some(args.permits),
        deployment: deployment.description.clone(),
        seed: args.seed,
        clients: args.clients.into(),
        lease_ms: lease.as_millis() as u64,
        liveness_bound_ms: bound.as_millis() as u64,
        schedule,
        inconclusive: runs.first().is_some_and(report::inconclusive),
        skipped,
        runs,
    };
    report::write(&args.report, &report)
        .map_err(|e| (VIOLATIONS, format!("cannot write the report: {e}")))?;
    Ok(conclude(&report, &args.report, &progress))
}

/// A read-write lock or a semaphore is tried once on the deployment before the run: a service
/// that does not offer it is a configuration error (69), said at once, rather than a run of
/// clients whose every acquire fails.
async fn offered(args: &VerifyArgs, urls: &[String]) -> Result<(), (u8, String)> {
    let probe = "verify-offered-probe";
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let mut options = fencelock::ClientOptions::default();
    if let Some(password) = &args.password {
        options = options.password(password.clone());
    }
    let taken = match args.primitive {
        args::Primitive::Rwlock => {
            let client = fencelock::Client::connect_all_with(&urls, options).await;
            let client = client.map_err(|e| (exit::CONNECTION, e.to_string()))?;
            client.rw_lock(probe).read().try_acquire().await
        }
        args::Primitive::Semaphore => {
            let client = fencelock::Client::connect_all_with(&urls, options).await;
            let client = client.map_err(|e| (exit::CONNECTION, e.to_string()))?;
            client.semaphore(probe, 1).try_acquire().await
        }
        _ => return Ok(()),
    };
    match taken {
        Ok(Ok(guard)) => {
            let _ = guard.release().await;
            Ok(())
        }
        Ok(Err(_)) => Ok(()),
        Err(e) => Err((
            exit::CONNECTION,
            format!("--primitive {}: {e}", args.primitive.as_arg()),
        )),
    }
}

/// Network faults find out only once the servers started whether this process may create
/// namespaces: those that cannot run join the skipped ones; every skipped one is said.
fn skip_unavailable(
    deployment: &mut servers::Deployment,
    faults: &mut Vec<Fault>,
    skipped: &mut Vec<faults::Skipped>,
    progress: &Progress,
) {
    for (fault, reason) in std::mem::take(&mut deployment.unavailable) {
        faults.retain(|&f| f != fault);
        skipped.push(faults::Skipped {
            fault: fault.name(),
            reason,
        });
    }
    for s in skipped.iter() {
        progress.line(&format!(
            "fencelock verify: skipped {}: {}",
            s.fault, s.reason
        ));
    }
}

/// The run, then its negative control (the same schedule without fencing) if asked.
async fn run_all(
    template: RunSpec<'_>,
    control: bool,
    deployment: &mut servers::Deployment,
    started: &Started,
    progress: &mut Progress,
) -> Result<Vec<RunReport>, (u8, String)> {
    let mut kinds = vec![("run", template.fencing)];
    if control {
        kinds.push(("control", false));
    }
    let mut runs = Vec::new();
    for (name, fencing) in kinds {
        let spec = RunSpec {
            name,
            fencing,
            dir: template.dir.join(name),
            ..template.clone()
        };
        let done = run::run(spec, deployment, started, progress)
            .await
            .map_err(|e| (VIOLATIONS, e))?;
        progress.line(&format!(
            "fencelock verify: {}",
            report::verdict_line(&done, template.contended())
        ));
        runs.push(done);
    }
    Ok(runs)
}

/// Starts the deployment (or only the register's Redis, with --url).
async fn start_servers(
    args: &VerifyArgs,
    faults: &[Fault],
    progress: &Progress,
) -> Result<servers::Deployment, (u8, String)> {
    progress.line(if args.url.is_empty() {
        "fencelock verify: starting the servers"
    } else {
        "fencelock verify: starting the register's Redis (the lock is on --url)"
    });
    let (backend, urls, asked) = (args.backend, args.url.clone(), faults.to_vec());
    let deployment = tokio::task::spawn_blocking(move || servers::start(backend, &asked, &urls))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r)
        .map_err(|e| (exit::CONNECTION, e))?;
    Ok(deployment)
}

/// Prints the verdict and the report's place; the exit status.
fn conclude(report: &Report, dir: &std::path::Path, progress: &Progress) -> u8 {
    let run = &report.runs[0];
    if let Some(control) = report.runs.get(1) {
        if control.verdict.safe() {
            progress.line(
                "fencelock verify: note: the negative control showed no violation: the faults \
                 did not put a stale writer in front of the register this time",
            );
        }
    }
    let (verdict, code) = if !run.verdict.safe() {
        ("SAFETY VIOLATIONS found".to_string(), VIOLATIONS)
    } else if report.inconclusive {
        (
            format!(
                "INCONCLUSIVE: no fault happened ({} skipped, {} did not take effect), so \
                 nothing was tested under faults; no violation was seen",
                report.skipped.len(),
                run.injected.len()
            ),
            INCONCLUSIVE,
        )
    } else {
        ("every safety check passed".to_string(), 0)
    };
    progress.line(&format!(
        "fencelock verify: {verdict}; report: {}",
        dir.join("report.html").display()
    ));
    code
}

/// The command line, for the report (the password is never on it).
fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("fencelock {}", args.join(" "))
}
