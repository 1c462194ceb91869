//! The demo's processes and output: `fencelock run` holders and `fencelock elect --again`
//! participants started, awaited, frozen and killed by PID, and the lines the scenes print.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fencelock_testkit::RedisServer;
use redis::AsyncCommands;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use super::service::LockService;
pub(super) use crate::procs::Started;
pub(super) use crate::ui::Ui;

/// The lock every holder of the demo contends for.
const LOCK: &str = "demo:record";

/// The election of the active/standby pair.
pub(super) const ELECTION: &str = "demo:leader";

/// How long a worker may take to read the record and say it is ready (a `fencelock run`
/// waits for the lock first, and processes start slowly on a busy machine).
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// One `fencelock run -- fencelock demo-worker` to start: what the holder asks for and what
/// the worker does.
pub(super) struct Job<'a> {
    /// `--lease`: the lease, or the session timeout on a session-based service.
    pub(super) lease: Duration,
    /// `--kill-grace`, if not the default.
    pub(super) kill_grace: Option<Duration>,
    /// The worker's `--work`, if not the default.
    pub(super) work: Option<Duration>,
    /// The worker's `--ready` key.
    pub(super) ready: Option<&'a str>,
    /// The worker's `--check-overlap`.
    pub(super) check_overlap: bool,
    /// The worker's `--write-after-term`.
    pub(super) write_after_term: bool,
    /// The worker's `--serve` (under `fencelock elect`).
    pub(super) serve: bool,
}

impl Job<'_> {
    /// An ordinary worker holding a lock with this lease.
    pub(super) fn with_lease(lease: Duration) -> Self {
        Self {
            lease,
            kill_grace: None,
            work: None,
            ready: None,
            check_overlap: false,
            write_after_term: false,
            serve: false,
        }
    }
}

/// A duration as the CLI's duration flags take it.
fn flag(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// A `fencelock run` holder started by the demo.
pub(super) struct Holder {
    child: Child,
    /// The PID of `fencelock run` (its worker has its own, published when it is ready).
    pub(super) pid: u32,
}

/// The demo's servers and processes.
pub(super) struct Stage {
    pub(super) exe: PathBuf,
    pub(super) service: LockService,
    pub(super) record: RedisServer,
    pub(super) started: Started,
    pub(super) ui: Ui,
}

impl Stage {
    /// Starts `fencelock run ... LOCK -- fencelock demo-worker ...` for `job`.
    pub(super) fn start(&self, job: &Job<'_>) -> std::io::Result<Holder> {
        self.spawn(&["run"], LOCK, job)
    }

    /// Starts `fencelock elect --again ... ELECTION -- fencelock demo-worker ...` for `job`:
    /// one of an active/standby pair.
    pub(super) fn start_participant(&self, job: &Job<'_>) -> std::io::Result<Holder> {
        self.spawn(&["elect", "--again"], ELECTION, job)
    }

    /// Starts `fencelock COMMAND... NAME -- fencelock demo-worker ...` for `job`.
    fn spawn(&self, command_words: &[&str], name: &str, job: &Job<'_>) -> std::io::Result<Holder> {
        let mut command = Command::new(&self.exe);
        command
            .args(command_words)
            .args(["--url", &self.service.url])
            .args(["--lease", &flag(job.lease)]);
        if let Some(grace) = job.kill_grace {
            command.args(["--kill-grace", &flag(grace)]);
        }
        command.args([name, "--"]).arg(&self.exe).args([
            "demo-worker",
            "--record",
            &self.record.url(),
        ]);
        if let Some(work) = job.work {
            command.args(["--work", &flag(work)]);
        }
        if let Some(ready) = job.ready {
            command.args(["--ready", ready]);
        }
        if job.check_overlap {
            command.arg("--check-overlap");
        }
        if job.write_after_term {
            command.arg("--write-after-term");
        }
        if job.serve {
            command.arg("--serve");
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = command.spawn()?;
        let pid = child.id().unwrap_or(0);
        self.started.add(pid);
        Ok(Holder { child, pid })
    }

    /// Waits for a holder to exit; returns its exit status (128+N for signal N) and stderr.
    pub(super) async fn finish(&self, mut holder: Holder) -> std::io::Result<(i32, String)> {
        let mut stderr = String::new();
        if let Some(mut err) = holder.child.stderr.take() {
            let _ = err.read_to_string(&mut stderr).await;
        }
        let status = holder.child.wait().await?;
        self.started.remove(holder.pid);
        let code = status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        Ok((code, stderr))
    }

    /// Runs one ordinary worker to its end (it waits for the lock); says whether it succeeded.
    pub(super) async fn next_worker(&self, lease: Duration) -> Result<bool, String> {
        let next = self
            .start(&Job::with_lease(lease))
            .map_err(|e| e.to_string())?;
        let (code, stderr) = self.finish(next).await.map_err(|e| e.to_string())?;
        if code != 0 {
            self.ui.line(&format!(
                "   the next worker failed: exit {code}: {}",
                stderr.trim()
            ));
        }
        Ok(code == 0)
    }

    /// Waits until a worker has read the record and published its PID under `key`.
    pub(super) async fn ready(
        &self,
        con: &mut redis::aio::MultiplexedConnection,
        key: &str,
    ) -> Result<u32, String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let pid: Option<u32> = con.get(key).await.map_err(|e| e.to_string())?;
            if let Some(pid) = pid {
                self.started.add(pid);
                return Ok(pid);
            }
            if Instant::now() > deadline {
                return Err(format!("no worker became ready under {key}"));
            }
            // The worker writes the key from another process: nothing to await but the key.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
