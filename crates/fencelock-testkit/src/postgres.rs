//! PostgreSQL servers from Debian's `postgresql` package, for the fenced-SQL example and
//! tests.
//!
//! `initdb` refuses to run as root, so when the kit runs as root (CI) the data folder is
//! handed to the `postgres` user the package creates, and the server runs as that user
//! through `setpriv`, which `exec`s: the PID the kit holds is the postmaster's.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::{free_port, TestkitError};

const MISSING: TestkitError = TestkitError::Missing {
    program: "postgres",
    hint:
        "apt-get install postgresql (or set FENCELOCK_PG_BIN to a folder with initdb and postgres)",
};

/// A throwaway PostgreSQL server on a free loopback port, stopped by PID when dropped (its
/// log printed if a test panicked). The database `postgres`, user `postgres`, trust auth.
pub struct PostgresServer {
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl PostgresServer {
    /// Creates a cluster in a temporary folder (`initdb`, no fsync) and starts it; waits until
    /// it accepts connections, at most 30 s.
    pub fn start() -> Result<Self, TestkitError> {
        let bin = bin_dir().ok_or(MISSING)?;
        let dir = tempfile::Builder::new().prefix("fencelock-pg").tempdir()?;
        let as_postgres = nix::unistd::geteuid().is_root();
        if as_postgres {
            hand_to_postgres(dir.path())?;
        }
        let data = dir.path().join("data");
        let init = user_command(as_postgres, &bin.join("initdb"))
            .args(["-D"])
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .output()?;
        if !init.status.success() {
            return Err(TestkitError::Start {
                detail: format!("initdb: {}", String::from_utf8_lossy(&init.stderr)),
            });
        }
        let mut server = Self {
            port: free_port()?,
            child: None,
            dir,
        };
        server.spawn(&bin)?;
        Ok(server)
    }

    /// Stops the server cleanly (fast shutdown: every commit it answered is kept) and starts
    /// it again on the same port with the same data; waits until it accepts connections.
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        let bin = bin_dir().ok_or(MISSING)?;
        stop(&mut self.child, Signal::SIGINT);
        self.spawn(&bin)
    }

    fn spawn(&mut self, bin: &Path) -> Result<(), TestkitError> {
        let as_postgres = nix::unistd::geteuid().is_root();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("postgres.log"))?;
        let child = user_command(as_postgres, &bin.join("postgres"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "full_page_writes=off", "-c", "synchronous_commit=off"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        self.await_ready(bin)
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The postmaster's PID.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::tail(&self.dir.path().join("postgres.log"), lines)
    }

    fn await_ready(&mut self, bin: &Path) -> Result<(), TestkitError> {
        let log = self.dir.path().join("postgres.log");
        await_ready("postgres", Some(bin), self.port, &mut self.child, &log)
    }

    fn stop(&mut self) {
        // Immediate shutdown (SIGQUIT): nothing here needs to survive.
        stop(&mut self.child, Signal::SIGQUIT);
    }
}

/// Waits until `pg_isready` (from `bin`, else a TCP connect) answers on `port`, at most 30 s,
/// while `child` runs; the error carries the tail of `log`.
pub(crate) fn await_ready(
    what: &str,
    bin: Option<&Path>,
    port: u16,
    child: &mut Option<Child>,
    log: &Path,
) -> Result<(), TestkitError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The startup packet goes through a proxy to the server behind it.
        let ready = match bin {
            Some(bin) => Command::new(bin.join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-q"])
                .args(["-U", "postgres", "-d", "postgres"])
                .status()
                .is_ok_and(|s| s.success()),
            None => std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        };
        if ready {
            return Ok(());
        }
        let exited = child.as_mut().and_then(|c| c.try_wait().ok().flatten());
        if exited.is_some() || Instant::now() > deadline {
            return Err(TestkitError::Start {
                detail: format!(
                    "{what} did not accept connections:\n{}",
                    crate::tail(log, 40)
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops `child` by its PID with `signal`, then kills it after 10 s.
pub(crate) fn stop(child: &mut Option<Child>, signal: Signal) {
    if let Some(mut child) = child.take() {
        crate::signal(Some(child.id()), signal);
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Prints `what`'s log when its handle drops during a panic (a failing test).
pub(crate) fn print_log_if_panicking(what: &str, port: u16, log: &str) {
    if std::thread::panicking() {
        eprintln!("---- {what} on port {port} log ----\n{log}\n---- end of log ----");
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
        print_log_if_panicking("postgres", self.port, &self.log_tail(100));
    }
}

/// `FENCELOCK_PG_BIN`, else the newest `/usr/lib/postgresql/<version>/bin` with `initdb`.
pub(crate) fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("FENCELOCK_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Gives the folder to the `postgres` user (root may not run `initdb`).
pub(crate) fn hand_to_postgres(dir: &Path) -> Result<(), TestkitError> {
    let user = nix::unistd::User::from_name("postgres")
        .ok()
        .flatten()
        .ok_or(MISSING)?;
    std::os::unix::fs::chown(dir, Some(user.uid.as_raw()), Some(user.gid.as_raw()))?;
    Ok(())
}

/// `program`, run as `postgres` through `setpriv` (which execs) when the kit is root.
pub(crate) fn user_command(as_postgres: bool, program: &Path) -> Command {
    if !as_postgres {
        return Command::new(program);
    }
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ])
        .arg(program);
    command
}
