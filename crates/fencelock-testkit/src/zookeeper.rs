//! ZooKeeper servers (Debian's `zookeeper` package) run by `java` directly: one standalone
//! server, or an ensemble of three.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::netns::Namespace;
use crate::{find_program, free_port, TestkitError};

/// How long a server may take to serve after its JVM is started (a JVM starts in about a
/// second on an idle machine, but several at once on two busy cores take much longer).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The server's tick: the unit of its timeouts. Short, so that sessions can be short.
pub const TICK_MS: u64 = 200;
/// The shortest session timeout the servers grant (a client asking less gets this).
pub const MIN_SESSION_TIMEOUT_MS: u64 = 400;
/// The longest session timeout the servers grant (a client asking more gets this).
pub const MAX_SESSION_TIMEOUT_MS: u64 = 60_000;

/// The jars of Debian's `zookeeper` package (with their manifests' class paths), and the
/// slf4j binding and log4j 1.2 that let the server write its log.
const ZOOKEEPER_CLASSPATH: &str =
    "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar";

/// Options that make a JVM start fast and stay small: a test server holds a few nodes.
pub(crate) const JVM_OPTIONS: &[&str] = &[
    "-Xms16m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
];

/// `java`: `$FENCELOCK_JAVA`, else `java` on PATH.
pub(crate) fn java() -> Result<PathBuf, TestkitError> {
    find_program("java", "FENCELOCK_JAVA").ok_or(TestkitError::Missing {
        program: "java",
        hint: "install it (Debian: apt-get install default-jre-headless) or set FENCELOCK_JAVA",
    })
}

/// A class path from `$env` if set, else `default`; its first entry must exist.
pub(crate) fn classpath(
    env: &str,
    default: &str,
    program: &'static str,
    hint: &'static str,
) -> Result<String, TestkitError> {
    let cp = std::env::var(env).unwrap_or_else(|_| default.to_owned());
    let first = cp.split(':').next().unwrap_or_default();
    if Path::new(first).exists() {
        Ok(cp)
    } else {
        Err(TestkitError::Missing { program, hint })
    }
}

/// Sends a four-letter word (`ruok`, `srvr`, `stat`, `mntr`, `cons`, …) to the server on
/// 127.0.0.1:`port` and returns its whole answer. Fails if nothing listens, or if the server
/// does not answer within 2 s (a paused server).
pub fn four_letter(port: u16, word: &str) -> std::io::Result<String> {
    four_letter_within(port, word, Duration::from_secs(2))
}

fn four_letter_within(port: u16, word: &str, timeout: Duration) -> std::io::Result<String> {
    four_letter_at(SocketAddr::from(([127, 0, 0, 1], port)), word, timeout)
}

fn four_letter_at(addr: SocketAddr, word: &str, timeout: Duration) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(word.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// The `Mode:` line of a `srvr` answer: `standalone`, `leader`, `follower` or `observer`.
fn mode_of(srvr: &str) -> Option<String> {
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_owned())
}

/// What makes a server an ensemble member.
#[derive(Debug, Clone)]
struct Membership {
    /// `myid`, from 1.
    id: u32,
    /// `server.N=127.0.0.1:QUORUM:ELECTION` for every member.
    servers: Vec<String>,
}

/// Options for [`ZooKeeperServer`].
#[derive(Debug, Clone, Default)]
pub struct ZooKeeperServerBuilder {
    config: Vec<(String, String)>,
    namespace: Option<Namespace>,
}

impl ZooKeeperServerBuilder {
    /// Any other `zoo.cfg` line, e.g. `("forceSync", "yes")`; it comes after the test kit's
    /// own lines, so it overrides them.
    pub fn config(mut self, key: &str, value: &str) -> Self {
        self.config.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Runs the server inside `ns` (see [`PrivateNet`](crate::PrivateNet)), its client port
    /// bound to the namespace's address instead of 127.0.0.1 (standalone servers only).
    pub fn namespace(mut self, ns: &Namespace) -> Self {
        self.namespace = Some(ns.clone());
        self
    }

    /// Starts a standalone server and waits until it serves (`srvr` answers `Mode:
    /// standalone`), at most 30 s.
    pub fn start(self) -> Result<ZooKeeperServer, TestkitError> {
        let mut last = String::new();
        // A port found free can be taken before the server binds it: try a few.
        for _ in 0..3 {
            let mut server = ZooKeeperServer::new(self.clone(), free_port()?, None)?;
            match server.launch().and_then(|()| server.await_serving()) {
                Ok(()) => return Ok(server),
                Err(e) => last = e.to_string(),
            }
        }
        Err(TestkitError::Start { detail: last })
    }

    /// Starts a standalone server and returns as soon as it answers `ruok` (at most 30 s),
    /// not waiting until it serves: what a script that waits for `imok` gets. The server
    /// accepts connections then, but may still close new sessions for a moment while it
    /// loads its data and starts.
    pub fn start_accepting(self) -> Result<ZooKeeperServer, TestkitError> {
        let mut last = String::new();
        for _ in 0..3 {
            let mut server = ZooKeeperServer::new(self.clone(), free_port()?, None)?;
            match server
                .launch()
                .and_then(|()| server.await_answer("ruok", |a| a == "imok"))
            {
                Ok(()) => return Ok(server),
                Err(e) => last = e.to_string(),
            }
        }
        Err(TestkitError::Start { detail: last })
    }
}

/// A running ZooKeeper server owned by this handle: standalone, or a member of a
/// [`ZooKeeperEnsemble`].
///
/// The server runs Debian's ZooKeeper jars under `java` (`$FENCELOCK_JAVA`, else `java` on
/// PATH; the class path can be replaced with `$FENCELOCK_ZOOKEEPER_CLASSPATH`) with a
/// `zoo.cfg` in its own temporary folder: data there, client port on 127.0.0.1 only, no admin
/// server, every four-letter word allowed, a tick of [`TICK_MS`] and session timeouts from
/// [`MIN_SESSION_TIMEOUT_MS`] to [`MAX_SESSION_TIMEOUT_MS`], and `forceSync=no` (a killed
/// server keeps what it wrote, as the kernel still has it; a machine crash is not simulated).
/// Its log (and anything the JVM prints) goes to `zookeeper.log` in that folder, printed to
/// stderr when the handle drops during a panic. The process is stopped by its PID on drop.
#[derive(Debug)]
pub struct ZooKeeperServer {
    java: PathBuf,
    classpath: String,
    options: ZooKeeperServerBuilder,
    port: u16,
    member: Option<Membership>,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl ZooKeeperServer {
    /// Starts a standalone server on a free port.
    pub fn start() -> Result<Self, TestkitError> {
        Self::builder().start()
    }

    /// Options for a standalone server.
    pub fn builder() -> ZooKeeperServerBuilder {
        ZooKeeperServerBuilder::default()
    }

    fn new(
        options: ZooKeeperServerBuilder,
        port: u16,
        member: Option<Membership>,
    ) -> Result<Self, TestkitError> {
        let java = java()?;
        let classpath = classpath(
            "FENCELOCK_ZOOKEEPER_CLASSPATH",
            ZOOKEEPER_CLASSPATH,
            "zookeeper.jar",
            "install it (Debian: apt-get install zookeeper) or set FENCELOCK_ZOOKEEPER_CLASSPATH",
        )?;
        let dir = tempfile::Builder::new()
            .prefix("fencelock-zookeeper-")
            .tempdir()?;
        let server = Self {
            java,
            classpath,
            options,
            port,
            member,
            child: None,
            dir,
        };
        server.write_config()?;
        Ok(server)
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("zoo.cfg")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("zookeeper.log")
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn write_config(&self) -> Result<(), TestkitError> {
        let data = self.data_dir();
        fs::create_dir_all(&data)?;
        let mut cfg = format!(
            "tickTime={TICK_MS}\n\
             initLimit=25\n\
             syncLimit=10\n\
             dataDir={data}\n\
             clientPort={port}\n\
             clientPortAddress={host}\n\
             minSessionTimeout={MIN_SESSION_TIMEOUT_MS}\n\
             maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             forceSync=no\n\
             preAllocSize=1024\n\
             autopurge.purgeInterval=0\n",
            data = data.display(),
            port = self.port,
            host = self.host(),
        );
        if let Some(member) = &self.member {
            fs::write(data.join("myid"), format!("{}\n", member.id))?;
            for line in &member.servers {
                cfg.push_str(line);
                cfg.push('\n');
            }
        }
        for (k, v) in &self.options.config {
            cfg.push_str(&format!("{k}={v}\n"));
        }
        fs::write(self.config_path(), cfg)?;
        fs::write(
            self.dir.path().join("log4j.properties"),
            "log4j.rootLogger=INFO, OUT\n\
             log4j.appender.OUT=org.apache.log4j.ConsoleAppender\n\
             log4j.appender.OUT.Target=System.out\n\
             log4j.appender.OUT.layout=org.apache.log4j.PatternLayout\n\
             log4j.appender.OUT.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n",
        )?;
        Ok(())
    }

    /// Starts the JVM without waiting for it to serve.
    fn launch(&mut self) -> Result<(), TestkitError> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let main = if self.member.is_some() {
            "org.apache.zookeeper.server.quorum.QuorumPeerMain"
        } else {
            "org.apache.zookeeper.server.ZooKeeperServerMain"
        };
        let mut command = match &self.options.namespace {
            Some(ns) => ns.command(&self.java),
            None => Command::new(&self.java),
        };
        let child = command
            .args(JVM_OPTIONS)
            .arg(format!(
                "-Dlog4j.configuration=file:{}",
                self.dir.path().join("log4j.properties").display()
            ))
            .arg("-Dzookeeper.jmx.log4j.disable=true")
            .arg("-cp")
            .arg(&self.classpath)
            .arg(main)
            .arg(self.config_path())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until the server answers `srvr` with a mode (a member does so only once it is
    /// in a quorum), at most [`START_TIMEOUT`]; kills it on failure.
    fn await_serving(&mut self) -> Result<(), TestkitError> {
        self.await_answer("srvr", |a| mode_of(a).is_some())
    }

    /// Waits until the server's answer to `word` passes `good`, at most [`START_TIMEOUT`];
    /// kills it on failure.
    fn await_answer(&mut self, word: &str, good: fn(&str) -> bool) -> Result<(), TestkitError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            // A word that arrives while the server loads its data is answered "not serving",
            // but the server fails to close that connection (a NullPointerException in 3.8.0):
            // give up on it soon and ask again.
            let answer = four_letter_at(self.addr(), word, Duration::from_millis(500));
            if answer.is_ok_and(|a| good(&a)) {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(TestkitError::Start {
                        detail: format!(
                            "zookeeper on port {} exited with {status}: {}",
                            self.port,
                            self.log_tail(20)
                        ),
                    });
                }
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(TestkitError::Start {
                    detail: format!(
                        "zookeeper on port {} not serving within {} s: {}",
                        self.port,
                        START_TIMEOUT.as_secs(),
                        self.log_tail(20)
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The client port (on [`host`](Self::host)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The client address: 127.0.0.1, or its namespace's address.
    pub fn host(&self) -> IpAddr {
        self.options
            .namespace
            .as_ref()
            .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |ns| IpAddr::V4(ns.addr))
    }

    /// The client address and port.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host(), self.port)
    }

    /// `zk://HOST:PORT` (`zk://127.0.0.1:PORT` unless in a namespace).
    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// `HOST:PORT`, as ZooKeeper clients (Curator, `zookeeper-client`) take it.
    pub fn connect_string(&self) -> String {
        self.addr().to_string()
    }

    /// The server's PID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's `myid` if it is an ensemble member.
    pub fn id(&self) -> Option<u32> {
        self.member.as_ref().map(|m| m.id)
    }

    /// The server's working folder (`zoo.cfg`, `data/`, `zookeeper.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sends a four-letter word to this server (see [`four_letter`]).
    pub fn four_letter(&self, word: &str) -> std::io::Result<String> {
        four_letter_at(self.addr(), word, Duration::from_secs(2))
    }

    /// The server's mode as `srvr` tells it (`standalone`, `leader`, `follower`), or `None`
    /// if it does not serve (down, paused, not in a quorum).
    pub fn mode(&self) -> Option<String> {
        self.four_letter("srvr").ok().as_deref().and_then(mode_of)
    }

    fn signal(&self, signal: Signal) {
        crate::signal(self.pid(), signal);
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered, no session
    /// expires on it (its clock for sessions stops too), and an ensemble's other members see
    /// it as gone after the sync limit (2 s).
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

    /// Starts the server again on the same ports with the same data folder (what it had
    /// written survives), after killing it if it still runs, and waits until it serves, at
    /// most 30 s. An ensemble member serves only once it is back in a quorum, so the
    /// restart of a member fails while a majority of the ensemble is down.
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        self.stop();
        self.launch()?;
        self.await_serving()
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A stopped process must be continued for the wait below not to hang.
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::tail(&self.log_path(), lines)
    }
}

impl Drop for ZooKeeperServer {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            let who = match self.id() {
                Some(id) => format!("zookeeper member {id}"),
                None => "zookeeper".to_owned(),
            };
            eprintln!(
                "---- {who} on port {} log ----\n{}\n---- end of log ----",
                self.port,
                self.log_tail(200)
            );
        }
    }
}

/// Three ZooKeeper servers on 127.0.0.1 forming one ensemble (each with its own client,
/// quorum and election port, all free ports).
///
/// A member is a [`ZooKeeperServer`]: kill, pause and restart one through
/// [`member`](Self::member) and [`member_mut`](Self::member_mut). The logs of all members are
/// printed when the ensemble drops during a panic.
#[derive(Debug)]
pub struct ZooKeeperEnsemble {
    members: Vec<ZooKeeperServer>,
}

impl ZooKeeperEnsemble {
    /// How many servers an ensemble has.
    pub const SIZE: usize = 3;

    /// Starts three servers and waits until one is the leader and the two others follow it
    /// (at most 30 s for each step).
    pub fn start() -> Result<Self, TestkitError> {
        let mut last = String::new();
        for _ in 0..2 {
            match Self::try_start() {
                Ok(ensemble) => return Ok(ensemble),
                Err(e) => last = e.to_string(),
            }
        }
        Err(TestkitError::Start { detail: last })
    }

    fn try_start() -> Result<Self, TestkitError> {
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < 3 * Self::SIZE {
            let port = free_port()?;
            if !ports.contains(&port) {
                ports.push(port);
            }
        }
        let servers: Vec<String> = (0..Self::SIZE)
            .map(|i| {
                format!(
                    "server.{}=127.0.0.1:{}:{}",
                    i + 1,
                    ports[3 * i + 1],
                    ports[3 * i + 2]
                )
            })
            .collect();
        let mut members = (0..Self::SIZE)
            .map(|i| {
                let member = Membership {
                    id: i as u32 + 1,
                    servers: servers.clone(),
                };
                ZooKeeperServer::new(
                    ZooKeeperServerBuilder::default(),
                    ports[3 * i],
                    Some(member),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        for member in &mut members {
            member.launch()?;
        }
        for member in &mut members {
            member.await_serving()?;
        }
        let ensemble = Self { members };
        ensemble.wait_for_leader(START_TIMEOUT)?;
        Ok(ensemble)
    }

    /// `zk://127.0.0.1:A,127.0.0.1:B,127.0.0.1:C` (client ports).
    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// `127.0.0.1:A,127.0.0.1:B,127.0.0.1:C`, as ZooKeeper clients take it.
    pub fn connect_string(&self) -> String {
        let hosts: Vec<String> = self.members.iter().map(|m| m.connect_string()).collect();
        hosts.join(",")
    }

    /// All members; `members()[i]` has `myid` i + 1.
    pub fn members(&self) -> &[ZooKeeperServer] {
        &self.members
    }

    /// Member `i` (from 0).
    pub fn member(&self, i: usize) -> &ZooKeeperServer {
        &self.members[i]
    }

    /// Member `i` (from 0), to kill or restart it.
    pub fn member_mut(&mut self, i: usize) -> &mut ZooKeeperServer {
        &mut self.members[i]
    }

    /// The members' modes as `srvr` tells them now (`None`: down, paused or not serving).
    pub fn modes(&self) -> Vec<Option<String>> {
        self.members.iter().map(ZooKeeperServer::mode).collect()
    }

    /// The index of the member that leads a quorum now: it reports `Mode: leader` and at least
    /// one other member reports `Mode: follower`.
    pub fn leader(&self) -> Option<usize> {
        let modes = self.modes();
        let leaders: Vec<usize> = (0..modes.len())
            .filter(|&i| modes[i].as_deref() == Some("leader"))
            .collect();
        let followers = modes
            .iter()
            .filter(|m| m.as_deref() == Some("follower"))
            .count();
        match leaders[..] {
            [one] if followers >= 1 => Some(one),
            _ => None,
        }
    }

    /// Waits until [`leader`](Self::leader) names a member (a leader with at least one
    /// follower: a quorum that serves), at most `timeout`, and returns its index.
    pub fn wait_for_leader(&self, timeout: Duration) -> Result<usize, TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(leader) = self.leader() {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                return Err(TestkitError::Start {
                    detail: format!(
                        "no leader with followers within {} s; modes {:?}",
                        timeout.as_secs(),
                        self.modes()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
