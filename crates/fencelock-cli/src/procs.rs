//! Processes a command started (`demo` workers, `verify` clients), tracked by PID so that
//! they are stopped on the way out, and only they.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Processes this command started that may still run; killed on the way out.
#[derive(Default, Clone)]
pub struct Started(Arc<Mutex<HashSet<u32>>>);

impl Started {
    /// Tracks a process this command started.
    pub fn add(&self, pid: u32) {
        self.0.lock().unwrap().insert(pid);
    }
    /// Stops tracking a process that exited.
    pub fn remove(&self, pid: u32) {
        self.0.lock().unwrap().remove(&pid);
    }
    /// Kills every tracked process.
    pub fn kill_all(&self) {
        for pid in self.0.lock().unwrap().drain() {
            // A frozen process must be continued to act on the kill at once.
            signal(&[pid], Signal::SIGCONT);
            signal(&[pid], Signal::SIGKILL);
        }
    }
}

/// Sends `signal` to processes this command started, by PID.
pub fn signal(pids: &[u32], signal: Signal) {
    for &pid in pids {
        let _ = kill(Pid::from_raw(pid as i32), signal);
    }
}
