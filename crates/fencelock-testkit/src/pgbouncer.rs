//! PgBouncer from Debian's `pgbouncer` package in front of a [`PostgresServer`], in
//! transaction pooling and otherwise PgBouncer's default settings: what a user who cannot
//! change the proxy has. A client that needs `ignore_startup_parameters`, session state
//! (advisory locks, named prepared statements across transactions) or delivered `LISTEN`
//! notifications fails here as it would there.
//!
//! PgBouncer refuses to run as root, so when the kit runs as root (CI) it runs as the
//! `postgres` user through `setpriv`, as the kit's PostgreSQL does; the PID the kit holds is
//! PgBouncer's.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Stdio};

use nix::sys::signal::Signal;

use crate::postgres::{
    await_ready, bin_dir, hand_to_postgres, print_log_if_panicking, stop, user_command,
};
use crate::{find_program, free_port, PostgresServer, TestkitError};

const MISSING: TestkitError = TestkitError::Missing {
    program: "pgbouncer",
    hint: "apt-get install pgbouncer (or set FENCELOCK_PGBOUNCER to the program)",
};

/// A throwaway PgBouncer on a free loopback port, in transaction pooling, in front of a
/// [`PostgresServer`] (every database of it, as the user `postgres` without a password).
/// Stopped by PID when dropped; its log is printed if a test panicked.
///
/// ```no_run
/// use fencelock_testkit::{PgBouncer, PostgresServer};
///
/// let server = PostgresServer::start()?;
/// let bouncer = PgBouncer::start(&server)?;
/// assert_eq!(
///     bouncer.url(),
///     format!("postgres://postgres@127.0.0.1:{}/postgres", bouncer.port())
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PgBouncer {
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl PgBouncer {
    /// Starts PgBouncer in front of `server`; waits until it accepts connections, at most
    /// 30 s.
    pub fn start(server: &PostgresServer) -> Result<Self, TestkitError> {
        let program = find_program("pgbouncer", "FENCELOCK_PGBOUNCER")
            .or_else(|| Some(PathBuf::from("/usr/sbin/pgbouncer")).filter(|p| p.is_file()))
            .ok_or(MISSING)?;
        let dir = tempfile::Builder::new()
            .prefix("fencelock-pgbouncer")
            .tempdir()?;
        let as_postgres = nix::unistd::geteuid().is_root();
        let port = free_port()?;
        let ini = dir.path().join("pgbouncer.ini");
        fs::write(&ini, config(server.port(), port, dir.path()))?;
        // Trust auth still needs the user listed in the auth file.
        fs::write(dir.path().join("users.txt"), "\"postgres\" \"\"\n")?;
        if as_postgres {
            hand_to_postgres(dir.path())?;
        }
        let child = user_command(as_postgres, &program)
            .arg(&ini)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut bouncer = Self {
            port,
            child: Some(child),
            dir,
        };
        bouncer.await_ready()?;
        Ok(bouncer)
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`, through PgBouncer.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// PgBouncer's PID.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The last `lines` lines of PgBouncer's log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::tail(&self.dir.path().join("pgbouncer.log"), lines)
    }

    fn await_ready(&mut self) -> Result<(), TestkitError> {
        let (bin, log) = (bin_dir(), self.dir.path().join("pgbouncer.log"));
        await_ready(
            "pgbouncer",
            bin.as_deref(),
            self.port,
            &mut self.child,
            &log,
        )
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        // SIGTERM: PgBouncer's immediate shutdown (SIGINT would wait for its clients).
        stop(&mut self.child, Signal::SIGTERM);
        print_log_if_panicking("pgbouncer", self.port, &self.log_tail(100));
    }
}

/// The configuration: transaction pooling, trust auth, loopback only, no Unix socket; every
/// other setting is PgBouncer's default.
fn config(server: u16, port: u16, dir: &std::path::Path) -> String {
    let dir = dir.display();
    format!(
        "[databases]\n\
         * = host=127.0.0.1 port={server}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {dir}/users.txt\n\
         pool_mode = transaction\n\
         logfile = {dir}/pgbouncer.log\n"
    )
}
