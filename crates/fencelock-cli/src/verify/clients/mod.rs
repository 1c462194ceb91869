//! The client processes of a verify run: started, paused, killed and respawned by PID.
//!
//! - `process`: the hidden `fencelock verify-client`, one client's loop; `family`: the
//!   registers of the read-write lock's readers and of the semaphore's permits.
//! - [`Fleet`]: the K processes of one run, one lane each; a killed client is replaced by a
//!   new process in the same lane.

mod family;
mod process;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::{Child, Command};

use super::args::Primitive;
use super::events::{now, read_file, read_tail, Kind, Recorder};
use crate::procs::{signal, Started};
pub use process::{client, ClientArgs};

/// What every client of a run is started with.
#[derive(Debug, Clone)]
pub struct Spec {
    /// This executable.
    pub exe: PathBuf,
    /// The lock service.
    pub urls: Vec<String>,
    /// The register's Redis.
    pub register: String,
    /// The register's key.
    pub register_key: String,
    /// The lock's name.
    pub lock: String,
    /// The lease.
    pub lease: Duration,
    /// The longest hold between read and write.
    pub hold_max: Duration,
    /// The run's seed.
    pub seed: u64,
    /// The run's folder (one event file per lane).
    pub dir: PathBuf,
    /// When the clients stop (ns, monotonic).
    pub until: u64,
    /// Whether writes are fenced.
    pub fencing: bool,
    /// The lock service's password: given in the environment, never on a command line.
    pub password: Option<String>,
    /// What the clients contend for.
    pub primitive: Primitive,
    /// The semaphore's number of permits.
    pub permits: u32,
}

/// A client caught between its read and its write: holding the lock, about to write.
#[derive(Debug, Clone, Copy)]
pub struct Holder {
    /// The lane.
    pub lane: usize,
    /// The process.
    pub pid: u32,
    /// Its token.
    pub token: u64,
}

/// The client processes of one run.
pub struct Fleet {
    spec: Spec,
    children: Vec<Option<Child>>,
    pids: Vec<u32>,
    respawns: u64,
    started: Started,
    /// The fault driver's own event file: what it did to which client.
    pub driver: Recorder,
}

impl Fleet {
    /// Starts `clients` processes.
    pub fn start(spec: Spec, clients: usize, started: Started) -> std::io::Result<Self> {
        let driver = Recorder::open(&spec.dir.join("driver.jsonl"), 0)?;
        let mut fleet = Self {
            spec,
            children: (0..clients).map(|_| None).collect(),
            pids: vec![0; clients],
            respawns: 0,
            started,
            driver,
        };
        for lane in 0..clients {
            fleet.spawn(lane)?;
        }
        Ok(fleet)
    }

    /// The number of lanes.
    pub fn lanes(&self) -> usize {
        self.pids.len()
    }

    fn lane_file(&self, lane: usize) -> PathBuf {
        self.spec.dir.join(format!("client-{lane}.jsonl"))
    }

    fn spawn(&mut self, lane: usize) -> std::io::Result<u32> {
        let s = &self.spec;
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        // Each lane, and each respawn in it, has its own seed derived from the run's.
        let seed = s.seed.wrapping_mul(1_000_003) + self.respawns * 1_000 + lane as u64;
        let mut command = Command::new(&s.exe);
        command.arg("verify-client");
        for url in &s.urls {
            command.args(["--url", url]);
        }
        command
            .args(["--register", &s.register, "--register-key", &s.register_key])
            .args(["--lock", &s.lock, "--lease", &ms(s.lease)])
            .args(["--hold-max", &ms(s.hold_max), "--client", &lane.to_string()])
            .args(["--seed", &seed.to_string(), "--until", &s.until.to_string()])
            .args(["--primitive", s.primitive.as_arg()])
            .args(["--permits", &s.permits.to_string()])
            .arg("--events")
            .arg(self.lane_file(lane));
        if !s.fencing {
            command.arg("--no-fencing");
        }
        if let Some(p) = &s.password {
            command.env("FENCELOCK_PASSWORD", p);
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let child = command.spawn()?;
        let pid = child.id().unwrap_or(0);
        self.started.add(pid);
        self.children[lane] = Some(child);
        self.pids[lane] = pid;
        Ok(pid)
    }

    /// The lane's client now between its read and its write, if any: the last event of its
    /// current process is the read.
    pub fn between_read_and_write(&self) -> Option<Holder> {
        (0..self.lanes()).find_map(|lane| {
            let pid = self.pids[lane];
            // The latest events are enough, and a long run's file is long.
            let events = read_tail(&self.lane_file(lane), 8 * 1024);
            let last = events.iter().rev().find(|e| e.pid == pid)?;
            if !matches!(last.kind, Kind::Read { .. }) {
                return None;
            }
            let token = events.iter().rev().find_map(|e| match e.kind {
                Kind::Acquired { token, .. } if e.pid == pid => Some(token),
                _ => None,
            })?;
            Some(Holder { lane, pid, token })
        })
    }

    /// Waits up to `limit` for a client between its read and its write.
    pub async fn await_holder(&self, limit: Duration) -> Option<Holder> {
        let deadline = now() + limit.as_nanos() as u64;
        while now() < deadline {
            if let Some(h) = self.between_read_and_write() {
                return Some(h);
            }
            // The clients are other processes writing files: poll them.
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        None
    }

    /// The token of the first acquisition after `from` by a process other than `pid`.
    pub fn acquired_since(&self, from: u64, pid: u32) -> Option<u64> {
        (0..self.lanes())
            .flat_map(|lane| read_file(&self.lane_file(lane)))
            .filter(|e| e.t > from && e.pid != pid)
            .filter_map(|e| match e.kind {
                Kind::Acquired { token, .. } => Some((e.t, token)),
                _ => None,
            })
            .min()
            .map(|(_, token)| token)
    }

    /// Stops a client (SIGSTOP) and records it; says whether the kernel shows it stopped.
    pub fn pause(&self, h: Holder) -> bool {
        signal(&[h.pid], Signal::SIGSTOP);
        self.driver.record_as(h.lane, h.pid, Kind::Paused);
        stopped(h.pid)
    }

    /// Continues a stopped client (SIGCONT) and records it.
    pub fn resume(&self, h: Holder) {
        signal(&[h.pid], Signal::SIGCONT);
        self.driver.record_as(h.lane, h.pid, Kind::Resumed);
    }

    /// Kills a client (SIGKILL), waits for it, records it and starts a new process in its
    /// lane. Returns the evidence that the kill happened.
    pub async fn kill(&mut self, h: Holder) -> Result<String, String> {
        let Some(mut child) = self.children[h.lane].take() else {
            return Err(format!("client {} has no process", h.lane));
        };
        signal(&[h.pid], Signal::SIGKILL);
        self.driver.record_as(h.lane, h.pid, Kind::Killed);
        let status = child.wait().await.map_err(|e| e.to_string())?;
        self.started.remove(h.pid);
        self.respawns += 1;
        let new = self.spawn(h.lane).map_err(|e| e.to_string())?;
        match status.signal() {
            Some(9) => Ok(format!(
                "client {} (pid {}) died of SIGKILL holding token {}; pid {new} replaced it",
                h.lane, h.pid, h.token
            )),
            other => Err(format!(
                "client {} (pid {}) ended with {status} (signal {other:?}), not SIGKILL",
                h.lane, h.pid
            )),
        }
    }

    /// Waits for the clients to stop at the end of the run, at most `grace` past it; kills
    /// the ones still running then (recorded as killed).
    pub async fn finish(&mut self, grace: Duration) {
        let deadline = self.spec.until + grace.as_nanos() as u64;
        for lane in 0..self.lanes() {
            let Some(mut child) = self.children[lane].take() else {
                continue;
            };
            let left = Duration::from_nanos(deadline.saturating_sub(now()));
            let pid = self.pids[lane];
            if tokio::time::timeout(left, child.wait()).await.is_err() {
                signal(&[pid], Signal::SIGCONT);
                signal(&[pid], Signal::SIGKILL);
                self.driver.record_as(lane, pid, Kind::Killed);
                let _ = child.wait().await;
            }
            self.started.remove(pid);
        }
    }
}

/// Whether the kernel shows `pid` stopped (state `T` in /proc/PID/stat).
pub fn stopped(pid: u32) -> bool {
    // The signal is delivered asynchronously: give the kernel a moment.
    for _ in 0..100 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses and may hold spaces.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if matches!(state, Some("T") | Some("t")) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}
