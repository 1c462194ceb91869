//! Apache Curator's `InterProcessMutex` and `LeaderLatch` in Java processes of their own,
//! driven line by line, to check that fencelock's ZooKeeper locks and Curator's exclude each
//! other, and that their elections see one leader at a time.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::zookeeper::{classpath, java, JVM_OPTIONS};
use crate::TestkitError;

/// The programs' sources, compiled together on first use.
const SOURCE: &str = include_str!("../java/CuratorLock.java");
const BENCH_SOURCE: &str = include_str!("../java/CuratorBench.java");
const LATCH_SOURCE: &str = include_str!("../java/CuratorLatch.java");

/// Curator 5.4 from Debian (`libcurator-recipes-java`; its manifest names the framework, the
/// client, ZooKeeper, Guava and slf4j), and slf4j's simple binding (logs on stderr).
const CURATOR_CLASSPATH: &str =
    "/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-simple.jar";

const CURATOR_HINT: &str =
    "install it (Debian: apt-get install libcurator-recipes-java) or set FENCELOCK_CURATOR_CLASSPATH";

/// How long `release` waits for `RELEASED` and the exit.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(15);

/// Compiles `CuratorLock.java`, `CuratorBench.java` and `CuratorLatch.java` once per sources, Java and class path: into
/// `$TMPDIR/fencelock-curator-<hash>/`, shared by every test process (built in a folder of
/// its own, then renamed into place, so that processes compiling at once do not collide).
/// The compiler is the JDK's `jdk.compiler` module run by `java` itself, which Debian's
/// headless JRE has too: no `javac` is needed.
fn compiled(java: &PathBuf, cp: &str) -> Result<PathBuf, TestkitError> {
    static COMPILED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    COMPILED
        .get_or_init(|| compile(java, cp).map_err(|e| e.to_string()))
        .clone()
        .map_err(|detail| TestkitError::Start {
            detail: format!("compiling the Curator programs: {detail}"),
        })
}

fn compile(java: &PathBuf, cp: &str) -> Result<PathBuf, TestkitError> {
    let mut hasher = DefaultHasher::new();
    (SOURCE, BENCH_SOURCE, LATCH_SOURCE, java, cp).hash(&mut hasher);
    let tmp = std::env::temp_dir();
    let target = tmp.join(format!("fencelock-curator-{:016x}", hasher.finish()));
    let built = |dir: &std::path::Path| {
        ["CuratorLock", "CuratorBench", "CuratorLatch"]
            .iter()
            .all(|c| dir.join(format!("{c}.class")).is_file())
    };
    if built(&target) {
        return Ok(target);
    }
    let build = tempfile::Builder::new()
        .prefix("fencelock-curator-build-")
        .tempdir_in(&tmp)?;
    let source = build.path().join("CuratorLock.java");
    fs::write(&source, SOURCE)?;
    let bench = build.path().join("CuratorBench.java");
    fs::write(&bench, BENCH_SOURCE)?;
    let latch = build.path().join("CuratorLatch.java");
    fs::write(&latch, LATCH_SOURCE)?;
    let out = Command::new(java)
        .args([
            "-m",
            "jdk.compiler/com.sun.tools.javac.Main",
            "-nowarn",
            "-d",
        ])
        .arg(build.path())
        .arg("-cp")
        .arg(cp)
        .arg(&source)
        .arg(&bench)
        .arg(&latch)
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(TestkitError::Start {
            detail: format!(
                "javac exited with {}: {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    // Another process may have put its build there first: theirs is as good.
    if fs::rename(build.path(), &target).is_err() && !built(&target) {
        return Err(TestkitError::Start {
            detail: format!("could not move the classes to {}", target.display()),
        });
    }
    Ok(target)
}

/// Java, Curator's class path, and the folder of the compiled programs (compiled once per
/// process).
fn curator_program() -> Result<(PathBuf, String, PathBuf), TestkitError> {
    let java = java()?;
    let cp = classpath(
        "FENCELOCK_CURATOR_CLASSPATH",
        CURATOR_CLASSPATH,
        "curator-recipes.jar",
        CURATOR_HINT,
    )?;
    let classes = compiled(&java, &cp)?;
    Ok((java, cp, classes))
}

/// A command that runs `CuratorBench` (`java/CuratorBench.java` in this crate: Curator's
/// `InterProcessMutex`, `InterProcessReadWriteLock` and `InterProcessSemaphoreV2` measured as
/// fencelock's benchmarks measure their locks) with `args`
/// (see the program's header for them and for its stdin/stdout protocol), compiled on first
/// use with the Java and class path [`CuratorLock`] uses. Stdin and stdout are piped; stderr
/// (Curator's log) is discarded.
pub fn curator_bench(args: &[&str]) -> Result<Command, TestkitError> {
    let (java, cp, classes) = curator_program()?;
    let mut command = Command::new(&java);
    command
        .args(JVM_OPTIONS)
        // The benchmark wants the optimizing compiler, which the test options turn off.
        .arg("-XX:TieredStopAtLevel=4")
        .arg("-cp")
        .arg(format!("{}:{cp}", classes.display()))
        .arg("CuratorBench")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    Ok(command)
}

/// Lines the program printed, and whether its stdout has closed.
#[derive(Debug, Default)]
struct Output {
    lines: Vec<String>,
    closed: bool,
}

type Lines = Arc<(Mutex<Output>, Condvar)>;

/// Reads a program's stdout line by line in a thread of its own.
fn read_lines(stdout: Option<std::process::ChildStdout>) -> Lines {
    let output: Lines = Arc::new((Mutex::new(Output::default()), Condvar::new()));
    let shared = output.clone();
    std::thread::spawn(move || {
        let (lock, changed) = &*shared;
        if let Some(stdout) = stdout {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                lock.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .lines
                    .push(line);
                changed.notify_all();
            }
        }
        lock.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
        changed.notify_all();
    });
    output
}

/// Options for [`CuratorLock`].
#[derive(Debug, Clone)]
pub struct CuratorLockBuilder {
    connect: String,
    path: String,
    hold: Option<Duration>,
    session_timeout: Duration,
    kind: String,
}

impl CuratorLockBuilder {
    /// What the process takes on the path: `"mutex"` (`InterProcessMutex`, the default),
    /// `"read"` or `"write"` (a side of `InterProcessReadWriteLock`), `"semaphore:N"` (one
    /// lease of an `InterProcessSemaphoreV2` of N; its `ACQUIRED` line names the lease node).
    /// A side's `ACQUIRED` line lists its side's nodes (Curator 5.4 keeps its own protected).
    pub fn kind(mut self, kind: &str) -> Self {
        self.kind = kind.to_owned();
        self
    }

    /// Release by itself after holding the mutex this long (default: hold until
    /// [`CuratorLock::release`], or until the handle drops).
    pub fn hold(mut self, hold: Duration) -> Self {
        self.hold = Some(hold);
        self
    }

    /// The session timeout Curator asks of the server (default 2 s; the test kit's servers
    /// grant 400 ms to 60 s). A killed process's lock node stays until its session expires.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// Compiles the program if this process has not yet, and starts it. It connects and asks
    /// for the mutex at once; see [`CuratorLock::wait_acquired`].
    pub fn spawn(self) -> Result<CuratorLock, TestkitError> {
        let (java, cp, classes) = curator_program()?;
        let dir = tempfile::Builder::new()
            .prefix("fencelock-curator-")
            .tempdir()?;
        let log = fs::File::create(dir.path().join("curator.log"))?;
        let hold_ms = self.hold.map_or(0, |h| h.as_millis().max(1));
        let mut child = Command::new(&java)
            .args(JVM_OPTIONS)
            .arg("-Xmx64m")
            .arg("-cp")
            .arg(format!("{}:{cp}", classes.display()))
            .arg("CuratorLock")
            .arg(&self.connect)
            .arg(&self.path)
            .arg(hold_ms.to_string())
            .arg(self.session_timeout.as_millis().to_string())
            .arg(&self.kind)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()?;
        let stdin = child.stdin.take();
        let output = read_lines(child.stdout.take());
        Ok(CuratorLock {
            path: self.path,
            child: Some(child),
            stdin,
            output,
            dir,
        })
    }
}

/// A Java process holding (or waiting for) Curator's `InterProcessMutex` on one path.
///
/// The program (`java/CuratorLock.java` in this crate, compiled once per source into the
/// system's temporary folder) takes `<connect string> <lock path> <hold-ms> <session-ms>`,
/// connects, acquires the mutex and prints one line per event on stdout:
/// `CONNECTED <session id>`, `ACQUIRED <lock node>`, `RELEASED`,
/// `STATE <Curator connection state> <session id>`, `CANCELLED` (input closed before the
/// mutex was acquired) or `ERROR <text>`. It releases when its hold time is over, when the
/// line `release` arrives on its stdin or when its stdin closes, prints `RELEASED` and exits
/// 0. Curator's lock nodes are `<path>/_c_<uuid>-lock-<10-digit sequence>`, ephemeral and
/// sequential; the mutex is held by the lowest sequence.
///
/// Java is `$FENCELOCK_JAVA` or `java` on PATH; the class path (default: Debian's
/// `libcurator-recipes-java` and slf4j's simple binding) can be replaced with
/// `$FENCELOCK_CURATOR_CLASSPATH`. Curator's log (stderr) is printed when the handle drops
/// during a panic, with the lines read so far. The process is killed by its PID on drop.
#[derive(Debug)]
pub struct CuratorLock {
    path: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    output: Arc<(Mutex<Output>, Condvar)>,
    dir: tempfile::TempDir,
}

impl CuratorLock {
    /// Starts a process that takes the mutex on `path` (e.g. `/locks/job`) through the
    /// ZooKeeper servers in `connect` (`127.0.0.1:PORT[,…]`) and holds it until
    /// [`release`](Self::release); its session timeout is 2 s.
    pub fn spawn(connect: &str, path: &str) -> Result<Self, TestkitError> {
        Self::builder(connect, path).spawn()
    }

    /// Options for a process that takes the mutex on `path` through `connect`.
    pub fn builder(connect: &str, path: &str) -> CuratorLockBuilder {
        CuratorLockBuilder {
            connect: connect.to_owned(),
            path: path.to_owned(),
            hold: None,
            session_timeout: Duration::from_secs(2),
            kind: "mutex".to_owned(),
        }
    }

    /// The lock path it was given.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The process's PID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Every line the program printed so far.
    pub fn lines(&self) -> Vec<String> {
        all_lines(&self.output)
    }

    /// The rest of the first line printed that starts with `word` and a space (or is `word`),
    /// if there is one yet.
    pub fn line(&self, word: &str) -> Option<String> {
        find(&self.lines(), word)
    }

    /// Waits for the first line that starts with `word` (e.g. `CONNECTED`) and returns the
    /// rest of it. Fails if the program prints `ERROR`, closes its output first or takes
    /// longer than `timeout`.
    pub fn wait_line(&self, word: &str, timeout: Duration) -> Result<String, TestkitError> {
        let who = format!("CuratorLock on {}", self.path);
        wait_line(&self.output, &who, word, timeout)
    }

    /// Waits until the mutex is held (at most `timeout`) and returns its lock node's path,
    /// e.g. `/locks/job/_c_0f5e…-lock-0000000000`.
    pub fn wait_acquired(&self, timeout: Duration) -> Result<String, TestkitError> {
        self.wait_line("ACQUIRED", timeout)
    }

    /// The lock node, if the mutex has been acquired.
    pub fn acquired(&self) -> Option<String> {
        self.line("ACQUIRED")
    }

    /// The id of the program's first session (printed in hex, as ZooKeeper's logs show it),
    /// as a node's `ephemeralOwner` holds it.
    pub fn session_id(&self) -> Option<i64> {
        let hex = self.line("CONNECTED")?;
        // Printed unsigned; ZooKeeper's `ephemeralOwner` is the same 64 bits, signed.
        u64::from_str_radix(hex.trim_start_matches("0x"), 16)
            .ok()
            .map(|n| n as i64)
    }

    /// Tells the program to release (at once, or as soon as it holds the mutex), waits for
    /// `RELEASED` and for the process to exit (at most 15 s).
    pub fn release(&mut self) -> Result<(), TestkitError> {
        if let Some(stdin) = self.stdin.as_mut() {
            stdin.write_all(b"release\n")?;
            stdin.flush()?;
        }
        self.wait_line("RELEASED", RELEASE_TIMEOUT)?;
        let deadline = Instant::now() + RELEASE_TIMEOUT;
        while let Some(child) = self.child.as_mut() {
            match child.try_wait()? {
                Some(status) if status.success() => {
                    self.child = None;
                    return Ok(());
                }
                Some(status) => {
                    self.child = None;
                    return Err(TestkitError::Process {
                        detail: format!("CuratorLock on {} exited with {status}", self.path),
                    });
                }
                None if Instant::now() > deadline => {
                    return Err(TestkitError::Process {
                        detail: format!("CuratorLock on {} did not exit", self.path),
                    })
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        Ok(())
    }

    fn signal(&self, signal: Signal) {
        crate::signal(self.pid(), signal);
    }

    /// Freezes the process (SIGSTOP): it sends nothing, so its session expires after the
    /// session timeout while it still believes it holds the mutex until it runs again.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// Thaws a paused process (SIGCONT).
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// Kills the process (SIGKILL) and waits for it to exit. Its lock node stays until the
    /// server expires its session.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The last `lines` lines of Curator's log (the program's stderr).
    pub fn log_tail(&self, lines: usize) -> String {
        crate::tail(&self.dir.path().join("curator.log"), lines)
    }
}

/// Every line a program printed so far.
fn all_lines(output: &Lines) -> Vec<String> {
    output
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .lines
        .clone()
}

/// Waits for the first line of `output` that starts with `word` and returns the rest of it.
/// Fails if the program (`who`, for the error) prints `ERROR`, closes its output first or
/// takes longer than `timeout`.
fn wait_line(
    output: &Lines,
    who: &str,
    word: &str,
    timeout: Duration,
) -> Result<String, TestkitError> {
    let deadline = Instant::now() + timeout;
    let (lock, changed) = &**output;
    let mut out = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(rest) = find(&out.lines, word) {
            return Ok(rest);
        }
        let fail = |why: String| TestkitError::Process {
            detail: format!("{who}: no {word}: {why}"),
        };
        if let Some(error) = find(&out.lines, "ERROR") {
            return Err(fail(format!("ERROR {error}")));
        }
        if out.closed {
            return Err(fail(format!("output closed after {:?}", out.lines)));
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(fail(format!(
                "not within {timeout:?}; lines {:?}",
                out.lines
            )));
        }
        out = changed
            .wait_timeout(out, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

fn find(lines: &[String], word: &str) -> Option<String> {
    lines.iter().find_map(|l| {
        if l == word {
            Some(String::new())
        } else {
            l.strip_prefix(word)?.strip_prefix(' ').map(str::to_owned)
        }
    })
}

impl Drop for CuratorLock {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "---- CuratorLock on {} ----\nstdout: {:?}\n{}\n---- end of log ----",
                self.path,
                self.lines(),
                self.log_tail(100)
            );
        }
    }
}

/// A Java process running Curator's `LeaderLatch` on one election path.
///
/// The program (`java/CuratorLatch.java` in this crate, compiled with [`CuratorLock`]'s)
/// takes `<connect string> <latch path> <participant id> <session-ms>`, connects, starts the
/// latch (its node is `<path>/_c_<uuid>-latch-<10-digit sequence>`, the participant id as
/// data; the lowest sequence leads) and prints one line per event on stdout: `CONNECTED
/// <session id>`, `STARTED <latch node>`, `leading <latch node>` (Curator's `isLeader`
/// callback), `notleading`, `STATE <Curator connection state> <session id>`, `closed` (after
/// the line `close` on its stdin, or its end: the latch is closed, its node deleted, and the
/// program exits 0) or `ERROR <text>`. Killed by its PID on drop; Curator's log (stderr) is
/// printed when the handle drops during a panic.
#[derive(Debug)]
pub struct CuratorLatch {
    path: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    output: Lines,
    dir: tempfile::TempDir,
}

impl CuratorLatch {
    /// Starts a participant `id` of the election at `path` (e.g. `/fencelock/leader`) through
    /// the servers in `connect`, with a session timeout of `session`.
    pub fn spawn(
        connect: &str,
        path: &str,
        id: &str,
        session: Duration,
    ) -> Result<Self, TestkitError> {
        let (java, cp, classes) = curator_program()?;
        let dir = tempfile::Builder::new()
            .prefix("fencelock-latch-")
            .tempdir()?;
        let log = fs::File::create(dir.path().join("curator.log"))?;
        let mut child = Command::new(&java)
            .args(JVM_OPTIONS)
            .arg("-Xmx64m")
            .arg("-cp")
            .arg(format!("{}:{cp}", classes.display()))
            .arg("CuratorLatch")
            .args([connect, path, id])
            .arg(session.as_millis().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()?;
        let stdin = child.stdin.take();
        let output = read_lines(child.stdout.take());
        Ok(Self {
            path: path.to_owned(),
            child: Some(child),
            stdin,
            output,
            dir,
        })
    }

    /// Every line the program printed so far.
    pub fn lines(&self) -> Vec<String> {
        all_lines(&self.output)
    }

    /// The rest of the first line that starts with `word` and a space (or is `word`), if any.
    pub fn line(&self, word: &str) -> Option<String> {
        find(&self.lines(), word)
    }

    /// Waits for the first line that starts with `word` and returns the rest of it. Fails if
    /// the program prints `ERROR`, closes its output first or takes longer than `timeout`.
    pub fn wait_line(&self, word: &str, timeout: Duration) -> Result<String, TestkitError> {
        let who = format!("CuratorLatch on {}", self.path);
        wait_line(&self.output, &who, word, timeout)
    }

    /// Waits until the latch's node exists (at most `timeout`) and returns its path.
    pub fn wait_started(&self, timeout: Duration) -> Result<String, TestkitError> {
        self.wait_line("STARTED", timeout)
    }

    /// Waits until the latch leads (at most `timeout`) and returns its node's path.
    pub fn wait_leading(&self, timeout: Duration) -> Result<String, TestkitError> {
        self.wait_line("leading", timeout)
    }

    /// Whether the latch has reported leading.
    pub fn leading(&self) -> bool {
        self.line("leading").is_some()
    }

    /// Closes the latch (its node is deleted), waits for `closed` and the exit (at most 15 s).
    pub fn close(&mut self) -> Result<(), TestkitError> {
        if let Some(stdin) = self.stdin.as_mut() {
            stdin.write_all(b"close\n")?;
            stdin.flush()?;
        }
        self.wait_line("closed", RELEASE_TIMEOUT)?;
        if let Some(mut child) = self.child.take() {
            let status = child.wait()?;
            if !status.success() {
                return Err(TestkitError::Process {
                    detail: format!("CuratorLatch on {} exited with {status}", self.path),
                });
            }
        }
        Ok(())
    }

    /// Kills the process (SIGKILL) and waits for it to exit. Its node stays until the server
    /// expires its session.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The last `lines` lines of Curator's log (the program's stderr).
    pub fn log_tail(&self, lines: usize) -> String {
        crate::tail(&self.dir.path().join("curator.log"), lines)
    }
}

impl Drop for CuratorLatch {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "---- CuratorLatch on {} ----\nstdout: {:?}\n{}\n---- end of log ----",
                self.path,
                self.lines(),
                self.log_tail(100)
            );
        }
    }
}
