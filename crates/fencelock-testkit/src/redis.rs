//! `redis-server` processes.

use std::fs;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::netns::Namespace;
use crate::resp::{command, Reply, RespError};
use crate::{find_program, free_port, TestkitError};

/// How a server keeps its data across a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Persistence {
    /// Nothing: a restart comes back empty.
    #[default]
    None,
    /// Append-only file, fsync every second.
    AofEverySec,
    /// Append-only file, fsync on every write.
    AofAlways,
}

/// Options for [`RedisServer`].
#[derive(Debug, Clone, Default)]
pub struct RedisServerBuilder {
    persistence: Persistence,
    config: Vec<(String, String)>,
    /// Run as a sentinel with these config-file lines.
    sentinel: Option<Vec<String>>,
    /// Run inside this network namespace, bound to its address.
    namespace: Option<Namespace>,
}

impl RedisServerBuilder {
    /// How the server persists its data (default: not at all).
    pub fn persistence(mut self, p: Persistence) -> Self {
        self.persistence = p;
        self
    }

    /// Any other `redis-server` option, e.g. `("maxmemory-policy", "allkeys-lru")`; a value of
    /// several words (`"127.0.0.1 7000"`) is passed as several arguments, `""` as an empty one.
    pub fn config(mut self, key: &str, value: &str) -> Self {
        self.config.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Run as a Redis Sentinel (`redis-server sentinel.conf --sentinel`) with these lines in
    /// its config file (e.g. `sentinel monitor mymaster 127.0.0.1 7000 2`).
    pub fn sentinel(mut self, lines: &[String]) -> Self {
        self.sentinel = Some(lines.to_vec());
        self
    }

    /// Runs the server inside `ns` (see [`PrivateNet`](crate::PrivateNet)), bound to the
    /// namespace's address instead of 127.0.0.1, with protected mode off (its clients come
    /// from the host's bridge address) and `DEBUG` allowed from there.
    pub fn namespace(mut self, ns: &Namespace) -> Self {
        self.namespace = Some(ns.clone());
        self
    }

    /// Starts the server and waits until it answers PING.
    pub fn start(self) -> Result<RedisServer, TestkitError> {
        let program = find_program("redis-server", "FENCELOCK_REDIS_SERVER")
            .ok_or(TestkitError::Missing {
            program: "redis-server",
            hint: "install it (Debian: apt-get install redis-server) or set FENCELOCK_REDIS_SERVER",
        })?;
        let mut last = String::new();
        // A port found free can be taken before the server binds it: try a few.
        for _ in 0..5 {
            let mut server = RedisServer {
                program: program.clone(),
                options: self.clone(),
                port: free_port()?,
                child: None,
                dir: tempfile::Builder::new()
                    .prefix("fencelock-redis-")
                    .tempdir()?,
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last = e.to_string(),
            }
        }
        Err(TestkitError::Start { detail: last })
    }
}

/// A running `redis-server` owned by this handle.
#[derive(Debug)]
pub struct RedisServer {
    program: PathBuf,
    options: RedisServerBuilder,
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a server without persistence.
    pub fn start() -> Result<Self, TestkitError> {
        Self::builder().start()
    }

    /// Options for a server.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn spawn(&mut self) -> Result<(), TestkitError> {
        if let Some(lines) = &self.options.sentinel {
            let conf = self.dir.path().join("sentinel.conf");
            if !conf.exists() {
                let mut text = format!(
                    "port {}\nbind 127.0.0.1\ndaemonize no\ndir {}\nlogfile {}\n",
                    self.port,
                    self.dir.path().display(),
                    self.log_path().display()
                );
                for line in lines {
                    text.push_str(line);
                    text.push('\n');
                }
                fs::write(&conf, text)?;
            }
            let child = Command::new(&self.program)
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            self.child = Some(child);
            return self.await_ready();
        }
        let port = self.port.to_string();
        let dir = self.dir.path().to_string_lossy().into_owned();
        let log = self.log_path().to_string_lossy().into_owned();
        let host = self.host().to_string();
        let mut args: Vec<String> = [
            "--port",
            &port,
            "--bind",
            &host,
            "--dir",
            &dir,
            "--logfile",
            &log,
            "--daemonize",
            "no",
            "--save",
            "",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (aof, fsync) = match self.options.persistence {
            Persistence::None => ("no", "everysec"),
            Persistence::AofEverySec => ("yes", "everysec"),
            Persistence::AofAlways => ("yes", "always"),
        };
        let netns = self.options.namespace.is_some();
        // In a namespace the host's address is not local: protected mode and the DEBUG
        // restriction would refuse the tests' own commands.
        let (protected, debug) = if netns {
            ("no", "yes")
        } else {
            ("yes", "local")
        };
        for (k, v) in [
            ("appendonly", aof),
            ("appendfsync", fsync),
            ("protected-mode", protected),
            ("enable-debug-command", debug),
        ] {
            args.push(format!("--{k}"));
            args.push(v.to_owned());
        }
        for (k, v) in &self.options.config {
            args.push(format!("--{k}"));
            // `replicaof 127.0.0.1 7000`, `rename-command CONFIG ""`: one argument per word.
            for word in v.split_whitespace() {
                args.push(if word == "\"\"" {
                    String::new()
                } else {
                    word.to_owned()
                });
            }
        }
        let mut command = match &self.options.namespace {
            Some(ns) => ns.command(&self.program),
            None => Command::new(&self.program),
        };
        let child = command
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        self.await_ready()
    }

    fn await_ready(&mut self) -> Result<(), TestkitError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.command(&["PING"]) {
                Ok(Reply::Status(s)) if s == "PONG" => return Ok(()),
                // A server with `requirepass` is up when it asks for the password.
                Err(RespError::Server(e)) if e.starts_with("NOAUTH") => return Ok(()),
                _ if Instant::now() > deadline => break,
                _ => {}
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(TestkitError::Start {
                        detail: format!("redis-server exited with {status}: {}", self.log_tail(20)),
                    });
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stop();
        Err(TestkitError::Start {
            detail: format!("no PONG within 10 s: {}", self.log_tail(20)),
        })
    }

    /// The port (on [`host`](Self::host)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The address the server listens on: 127.0.0.1, or its namespace's address.
    pub fn host(&self) -> IpAddr {
        self.options
            .namespace
            .as_ref()
            .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |ns| IpAddr::V4(ns.addr))
    }

    /// The address and port the server listens on.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host(), self.port)
    }

    /// `redis://HOST:PORT` (`redis://127.0.0.1:PORT` unless in a namespace).
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// The server's PID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's working folder (data, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn signal(&self, signal: Signal) {
        crate::signal(self.pid(), signal);
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        self.stop();
    }

    /// Starts the server again on the same port and folder (with whatever its persistence
    /// kept), after killing it if it still runs.
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        self.stop();
        self.spawn()
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGCONT first: a stopped process only dies of SIGKILL once continued on some
            // kernels' accounting, and waiting must not hang.
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends one command on a fresh connection (for inspection in tests).
    pub fn command(&self, args: &[&str]) -> Result<Reply, RespError> {
        command(self.addr(), args, Duration::from_secs(5))
    }

    /// Sends one command on a fresh connection to `addr` (the server, or a proxy in front
    /// of it), waiting at most `timeout` for the connection and for each of its reads and
    /// writes: a probe of whether, and how fast, the server answers.
    pub fn command_via(
        addr: SocketAddr,
        args: &[&str],
        timeout: Duration,
    ) -> Result<Reply, RespError> {
        command(addr, args, timeout)
    }

    /// One `field:value` line of `INFO` (e.g. `role`, `master_link_status`).
    pub fn info_field(&self, field: &str) -> Option<String> {
        let info = self.command(&["INFO"]).ok()?.text()?;
        let prefix = format!("{field}:");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(|v| v.trim().to_owned())
    }

    /// One field of `INFO commandstats`: how many times `cmd` (lower case) was called.
    pub fn command_calls(&self, cmd: &str) -> u64 {
        let info = self
            .command(&["INFO", "commandstats"])
            .ok()
            .and_then(|r| r.text())
            .unwrap_or_default();
        let prefix = format!("cmdstat_{cmd}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::tail(&self.log_path(), lines)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!(
                "---- redis-server on port {} log ----\n{}\n---- end of log ----",
                self.port,
                self.log_tail(200)
            );
        }
    }
}
