//! Real etcd members from Debian's `etcd-server` package (`/usr/bin/etcd`, or
//! `$FENCELOCK_ETCD`), and `etcdctl` from `etcd-client` (`$FENCELOCK_ETCDCTL`).
//!
//! A member listens on free loopback ports (client and peer), keeps its data in a temporary
//! folder, and runs with a 50 ms heartbeat and a 500 ms election timeout, so that the
//! smallest lease TTL the server grants is 1 s and a leader election takes about a second.
//! Readiness and the leader are read over HTTP from the client port (`/health`, `/metrics`).

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::netns::Namespace;
use crate::{find_program, free_port, TestkitError};

/// How long a member may take to serve.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Heartbeat and election timeout of every member, in milliseconds.
pub const HEARTBEAT_MS: u64 = 50;
/// See [`HEARTBEAT_MS`].
pub const ELECTION_MS: u64 = 500;

fn etcd() -> Result<PathBuf, TestkitError> {
    find_program("etcd", "FENCELOCK_ETCD").ok_or(TestkitError::Missing {
        program: "etcd",
        hint: "install it (Debian: apt-get install etcd-server) or set FENCELOCK_ETCD",
    })
}

/// `etcdctl` (Debian: `etcd-client`).
pub fn etcdctl_program() -> Result<PathBuf, TestkitError> {
    find_program("etcdctl", "FENCELOCK_ETCDCTL").ok_or(TestkitError::Missing {
        program: "etcdctl",
        hint: "install it (Debian: apt-get install etcd-client) or set FENCELOCK_ETCDCTL",
    })
}

/// Runs `etcdctl` (API v3) against `endpoints` (`127.0.0.1:A,127.0.0.1:B`) and returns what
/// it printed, or its error output when it failed.
pub fn etcdctl(endpoints: &str, args: &[&str]) -> Result<String, TestkitError> {
    let out = Command::new(etcdctl_program()?)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .args(args)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(TestkitError::Process {
            detail: format!(
                "etcdctl {args:?} failed ({}): {text}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    Ok(text)
}

/// A plain HTTP/1.0 GET on a member's client port: the body, if it answered 200.
fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    match text.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.") && head.contains(" 200 ") => {
            Ok(body.to_owned())
        }
        _ => Err(std::io::Error::other(format!("GET {path}: {text}"))),
    }
}

/// Adds up the values of every Prometheus sample named `metric` (all labels) in `text`.
pub fn metric_sum(text: &str, metric: &str, label: Option<&str>) -> f64 {
    text.lines()
        .filter(|l| {
            let name = l.split(['{', ' ']).next().unwrap_or("");
            name == metric && label.is_none_or(|want| l.contains(want))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One member's place in a cluster.
#[derive(Debug, Clone)]
struct Membership {
    name: String,
    /// `m1=http://127.0.0.1:P1,...` for every member.
    initial_cluster: String,
}

/// A running etcd member owned by this handle: a one-member cluster, or a member of an
/// [`EtcdCluster`]. Its log goes to `etcd.log` in its folder, printed to stderr when the
/// handle drops during a panic; the process is stopped by its PID on drop.
#[derive(Debug)]
pub struct EtcdServer {
    program: PathBuf,
    port: u16,
    peer_port: u16,
    member: Membership,
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// The namespace it runs in (see [`PrivateNet`](crate::PrivateNet)), if any.
    namespace: Option<Namespace>,
}

impl EtcdServer {
    /// Starts a one-member cluster on free ports and waits until it serves, at most 30 s.
    pub fn start() -> Result<Self, TestkitError> {
        Self::start_one(None)
    }

    /// Starts a one-member cluster inside `ns`, its client and peer ports bound to the
    /// namespace's address, and waits until it serves, at most 30 s.
    pub fn start_in(ns: &Namespace) -> Result<Self, TestkitError> {
        Self::start_one(Some(ns.clone()))
    }

    fn start_one(namespace: Option<Namespace>) -> Result<Self, TestkitError> {
        let mut last = String::new();
        let host = namespace.as_ref().map_or(Ipv4Addr::LOCALHOST, |ns| ns.addr);
        // A port found free can be taken before the server binds it: try a few.
        for _ in 0..3 {
            let (port, peer_port) = (free_port()?, free_port()?);
            let member = Membership {
                name: "m1".into(),
                initial_cluster: format!("m1=http://{host}:{peer_port}"),
            };
            let mut server = Self::new(port, peer_port, member)?;
            server.namespace = namespace.clone();
            match server.launch().and_then(|()| server.await_serving()) {
                Ok(()) => return Ok(server),
                Err(e) => last = e.to_string(),
            }
        }
        Err(TestkitError::Start { detail: last })
    }

    fn new(port: u16, peer_port: u16, member: Membership) -> Result<Self, TestkitError> {
        let dir = tempfile::Builder::new()
            .prefix("fencelock-etcd-")
            .tempdir()?;
        Ok(Self {
            program: etcd()?,
            port,
            peer_port,
            member,
            child: None,
            dir,
            namespace: None,
        })
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    /// Starts the member without waiting for it to serve.
    fn launch(&mut self) -> Result<(), TestkitError> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let client = format!("http://{}:{}", self.host(), self.port);
        let peer = format!("http://{}:{}", self.host(), self.peer_port);
        let mut command = match &self.namespace {
            Some(ns) => ns.command(&self.program),
            None => Command::new(&self.program),
        };
        let child = command
            .arg(format!("--name={}", self.member.name))
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={}", self.member.initial_cluster))
            .arg("--initial-cluster-state=new")
            .arg("--initial-cluster-token=fencelock-test")
            .arg(format!("--heartbeat-interval={HEARTBEAT_MS}"))
            .arg(format!("--election-timeout={ELECTION_MS}"))
            .arg("--logger=zap")
            .arg("--log-outputs=stderr")
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until `/health` says true (the member has a leader), at most [`START_TIMEOUT`];
    /// kills the member on failure.
    fn await_serving(&mut self) -> Result<(), TestkitError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if self.healthy() {
                return Ok(());
            }
            let exited = self.child.as_mut().map(|c| c.try_wait());
            if let Some(Ok(Some(status))) = exited {
                self.child = None;
                return Err(self.start_error(&format!("exited with {status}")));
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(self.start_error("not healthy within 30 s"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn start_error(&self, what: &str) -> TestkitError {
        TestkitError::Start {
            detail: format!(
                "etcd {} on port {} {what}: {}",
                self.member.name,
                self.port,
                self.log_tail(20)
            ),
        }
    }

    /// Whether the member answers `/health` with true.
    pub fn healthy(&self) -> bool {
        http_get(self.addr(), "/health", Duration::from_millis(500))
            .is_ok_and(|body| body.contains("\"health\":\"true\""))
    }

    /// The member's Prometheus metrics (`/metrics` on the client port).
    pub fn metrics(&self) -> std::io::Result<String> {
        http_get(self.addr(), "/metrics", Duration::from_secs(2))
    }

    /// Whether the member leads its cluster now (`etcd_server_is_leader 1`).
    pub fn is_leader(&self) -> bool {
        self.metrics()
            .is_ok_and(|m| metric_sum(&m, "etcd_server_is_leader", None) == 1.0)
    }

    /// The client port (on [`host`](Self::host)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The client address: 127.0.0.1, or its namespace's address.
    pub fn host(&self) -> IpAddr {
        IpAddr::V4(
            self.namespace
                .as_ref()
                .map_or(Ipv4Addr::LOCALHOST, |ns| ns.addr),
        )
    }

    /// The client address and port.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host(), self.port)
    }

    /// `etcd://HOST:PORT` (`etcd://127.0.0.1:PORT` unless in a namespace).
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints())
    }

    /// `HOST:PORT`, as `etcdctl --endpoints` takes it.
    pub fn endpoints(&self) -> String {
        self.addr().to_string()
    }

    /// The member's PID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The member's working folder (`data/`, `etcd.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Freezes the member (SIGSTOP): connections stay open, nothing is answered. Its clock
    /// goes on, so a leader that is thawed after a lease's TTL expires the lease at once.
    pub fn pause(&self) {
        crate::signal(self.pid(), Signal::SIGSTOP);
    }

    /// Thaws a paused member (SIGCONT).
    pub fn resume(&self) {
        crate::signal(self.pid(), Signal::SIGCONT);
    }

    /// Kills the member (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        self.stop();
    }

    /// Starts the member again on the same ports with the same data, after killing it if it
    /// still runs, and waits until it serves (it needs a quorum for that), at most 30 s.
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        self.stop();
        self.launch()?;
        self.await_serving()
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A stopped process must be continued for the wait below not to hang.
            crate::signal(Some(child.id()), Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The last `lines` lines of the member's log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::tail(&self.log_path(), lines)
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!(
                "---- etcd {} on port {} log ----\n{}\n---- end of log ----",
                self.member.name,
                self.port,
                self.log_tail(200)
            );
        }
    }
}

/// Three etcd members on 127.0.0.1 forming one cluster. A member is an [`EtcdServer`]: kill,
/// pause and restart one through [`member_mut`](Self::member_mut).
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
}

impl EtcdCluster {
    /// How many members a cluster has.
    pub const SIZE: usize = 3;

    /// Starts three members and waits until each serves and one leads (at most 30 s).
    pub fn start() -> Result<Self, TestkitError> {
        let mut last = String::new();
        for _ in 0..2 {
            match Self::try_start() {
                Ok(cluster) => return Ok(cluster),
                Err(e) => last = e.to_string(),
            }
        }
        Err(TestkitError::Start { detail: last })
    }

    fn try_start() -> Result<Self, TestkitError> {
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < 2 * Self::SIZE {
            let port = free_port()?;
            if !ports.contains(&port) {
                ports.push(port);
            }
        }
        let initial: Vec<String> = (0..Self::SIZE)
            .map(|i| format!("m{}=http://127.0.0.1:{}", i + 1, ports[2 * i + 1]))
            .collect();
        let mut members = (0..Self::SIZE)
            .map(|i| {
                let member = Membership {
                    name: format!("m{}", i + 1),
                    initial_cluster: initial.join(","),
                };
                EtcdServer::new(ports[2 * i], ports[2 * i + 1], member)
            })
            .collect::<Result<Vec<_>, _>>()?;
        for member in &mut members {
            member.launch()?;
        }
        for member in &mut members {
            member.await_serving()?;
        }
        let cluster = Self { members };
        cluster.wait_for_leader(START_TIMEOUT)?;
        Ok(cluster)
    }

    /// `etcd://127.0.0.1:A,127.0.0.1:B,127.0.0.1:C` (client ports).
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints())
    }

    /// `127.0.0.1:A,127.0.0.1:B,127.0.0.1:C`, as `etcdctl --endpoints` takes it.
    pub fn endpoints(&self) -> String {
        let all: Vec<String> = self.members.iter().map(EtcdServer::endpoints).collect();
        all.join(",")
    }

    /// All members.
    pub fn members(&self) -> &[EtcdServer] {
        &self.members
    }

    /// Member `i` (from 0), to kill, pause or restart it.
    pub fn member_mut(&mut self, i: usize) -> &mut EtcdServer {
        &mut self.members[i]
    }

    /// The index of the member that leads now, if exactly one says so.
    pub fn leader(&self) -> Option<usize> {
        let leaders: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].pid().is_some() && self.members[i].is_leader())
            .collect();
        match leaders[..] {
            [one] => Some(one),
            _ => None,
        }
    }

    /// Waits until [`leader`](Self::leader) names a member, at most `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> Result<usize, TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(leader) = self.leader() {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                return Err(TestkitError::Start {
                    detail: format!("no etcd leader within {} s", timeout.as_secs()),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `etcdctl lock NAME -- sh -c '...'` in a process of its own: it holds the lock (etcd's
/// `concurrency.Mutex`) from the moment it prints `held <key> <revision>` until
/// [`release`](Self::release) ends the command. (etcdctl 3.4 does not hand its standard
/// input to the command, so the command waits for a file to appear.) Killed by its PID on
/// drop.
#[derive(Debug)]
pub struct EtcdctlLock {
    child: Child,
    done: PathBuf,
    lines: mpsc::Receiver<String>,
    _dir: tempfile::TempDir,
}

impl EtcdctlLock {
    /// Starts `etcdctl lock NAME` (NAME is the whole key prefix, e.g. `/fencelock/job`) with
    /// a session TTL of `ttl` seconds.
    pub fn spawn(endpoints: &str, name: &str, ttl: u32) -> Result<Self, TestkitError> {
        let dir = tempfile::Builder::new()
            .prefix("fencelock-etcdctl-")
            .tempdir()?;
        let done = dir.path().join("done");
        let mut child = Command::new(etcdctl_program()?)
            .env("ETCDCTL_API", "3")
            .env("FENCELOCK_DONE", &done)
            .arg(format!("--endpoints={endpoints}"))
            .args(["lock", name, &format!("--ttl={ttl}"), "--", "sh", "-c"])
            .arg(
                "echo held $ETCD_LOCK_KEY $ETCD_LOCK_REV; \
                 while [ ! -e \"$FENCELOCK_DONE\" ]; do sleep 0.02; done",
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout: Option<ChildStdout> = child.stdout.take();
        let (tx, lines) = mpsc::channel();
        if let Some(stdout) = stdout {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        Ok(Self {
            child,
            done,
            lines,
            _dir: dir,
        })
    }

    /// Waits until `etcdctl` holds the lock: its key and create revision.
    pub fn wait_held(&mut self, timeout: Duration) -> Result<(String, u64), TestkitError> {
        let line = self
            .lines
            .recv_timeout(timeout)
            .map_err(|e| TestkitError::Process {
                detail: format!("etcdctl lock did not report the lock within {timeout:?}: {e}"),
            })?;
        let mut words = line.split_whitespace().skip(1);
        match (words.next(), words.next().and_then(|r| r.parse().ok())) {
            (Some(key), Some(rev)) => Ok((key.to_owned(), rev)),
            _ => Err(TestkitError::Process {
                detail: format!("etcdctl lock printed {line:?}"),
            }),
        }
    }

    /// Whether `etcdctl` reported holding the lock within `timeout`.
    pub fn held_within(&mut self, timeout: Duration) -> bool {
        self.wait_held(timeout).is_ok()
    }

    /// Ends the command: `etcdctl` releases the lock and exits; waits for that.
    pub fn release(mut self) -> Result<(), TestkitError> {
        File::create(&self.done)?;
        let status = self.child.wait()?;
        match status.success() {
            true => Ok(()),
            false => Err(TestkitError::Process {
                detail: format!("etcdctl lock exited with {status}"),
            }),
        }
    }
}

impl Drop for EtcdctlLock {
    fn drop(&mut self) {
        // The command ends on the file; etcdctl is killed if it still runs after that.
        let _ = File::create(&self.done);
        if let Ok(None) = self.child.try_wait() {
            std::thread::sleep(Duration::from_millis(100));
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `etcdctl elect` in a process of its own: a participant (`etcdctl elect NAME VALUE`, etcd's
/// `concurrency.Election.Campaign`), which prints the leader's key and value on two lines
/// once it leads and resigns on SIGTERM; or an observer (`etcdctl elect -l NAME`,
/// `Election.Observe`), which prints the key and value of each leader it sees. NAME is the
/// whole key prefix (e.g. `/fencelock/leader`). etcdctl 3.4's session has a 60 s TTL: a
/// participant is ended with SIGTERM ([`resign`](Self::resign)), never killed, so that its key
/// goes at once. Stopped (SIGTERM, then SIGKILL) by its PID on drop.
#[derive(Debug)]
pub struct EtcdctlElect {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
}

impl EtcdctlElect {
    /// Starts a participant of election `name` that advertises `value`.
    pub fn campaign(endpoints: &str, name: &str, value: &str) -> Result<Self, TestkitError> {
        Self::spawn(endpoints, &[name, value])
    }

    /// Starts an observer of election `name`.
    pub fn observe(endpoints: &str, name: &str) -> Result<Self, TestkitError> {
        Self::spawn(endpoints, &["-l", name])
    }

    fn spawn(endpoints: &str, args: &[&str]) -> Result<Self, TestkitError> {
        let mut child = Command::new(etcdctl_program()?)
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoints}"))
            .arg("elect")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout: Option<ChildStdout> = child.stdout.take();
        let (tx, lines) = mpsc::channel();
        if let Some(stdout) = stdout {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        Ok(Self {
            child: Some(child),
            lines,
        })
    }

    /// The next (key, value) pair it printed, waiting at most `timeout`: for a participant,
    /// its own key and value once it leads; for an observer, the next leader.
    pub fn next_leader(&mut self, timeout: Duration) -> Result<(String, String), TestkitError> {
        let deadline = Instant::now() + timeout;
        let next = || {
            let left = deadline.saturating_duration_since(Instant::now());
            self.lines
                .recv_timeout(left)
                .map_err(|e| TestkitError::Process {
                    detail: format!("etcdctl elect printed no leader within {timeout:?}: {e}"),
                })
        };
        let key = next()?;
        let value = next()?;
        Ok((key, value))
    }

    /// Whether it printed a leader within `timeout` (a participant: whether it leads).
    pub fn leads_within(&mut self, timeout: Duration) -> bool {
        self.next_leader(timeout).is_ok()
    }

    /// Ends it with SIGTERM (a participant resigns: its key is deleted) and waits for the
    /// exit.
    pub fn resign(mut self) -> Result<(), TestkitError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        crate::signal(Some(child.id()), Signal::SIGTERM);
        let status = child.wait()?;
        // etcdctl exits 0 after a resign, or with an error when signalled while campaigning.
        match status.code() {
            Some(_) => Ok(()),
            None => Err(TestkitError::Process {
                detail: format!("etcdctl elect ended with {status}"),
            }),
        }
    }
}

impl Drop for EtcdctlElect {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            crate::signal(Some(child.id()), Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
