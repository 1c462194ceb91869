//! `fencelock elect` (issue 25, point 4): one leader at a time among `fencelock elect`
//! processes, a takeover when the leader's PROGRAM exits, a takeover within the lease when the
//! leader is killed (`--again`), terms that strictly increase, a frozen leader deposed and its
//! PROGRAM stopped (79), `--observe` printing the sequence of leaders, and usage errors. Real
//! servers, real processes; every wait is for a line or an exit, bounded.

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// PROGRAM of a participant: says it leads (term, its pid and value), then waits for a line on
/// stdin (the test ends its term by writing one), and exits 0.
const LEADING: &str = "echo \"lead $FENCELOCK_TOKEN $FENCELOCK_TERM $$ $FENCELOCK_VALUE\"; read x";

/// What a started process's stdout sends when it closes (the process ended).
const CLOSED: &str = "(stdout closed)";

/// Lines from the started processes, each tagged with who printed it.
struct Lines {
    tx: UnboundedSender<(usize, String)>,
    rx: UnboundedReceiver<(usize, String)>,
    /// The processes the test ended on purpose: their stdout's end is no news.
    ended: Vec<usize>,
    /// The pid of the PROGRAM that last said it leads.
    program: i32,
}

/// A `fencelock elect` process: its stdin (PROGRAM reads it), the process, and its stderr so
/// far (also copied to the test's stderr).
struct Participant {
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: Arc<Mutex<String>>,
}

impl Lines {
    fn new() -> Self {
        let (tx, rx) = unbounded_channel();
        Self {
            tx,
            rx,
            ended: Vec::new(),
            program: 0,
        }
    }

    /// Starts `fencelock ARGS` on `server` as `who`; its stdout lines come to `self`.
    fn start(&self, server: &Server, who: usize, args: &[&str]) -> Participant {
        let mut child = server
            .cli(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send((who, line));
            }
            let _ = tx.send((who, CLOSED.to_string()));
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (pipe, copy) = (child.stderr.take().unwrap(), stderr.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("[{who}] {line}");
                copy.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let stdin = child.stdin.take();
        Participant {
            child,
            stdin,
            stderr,
        }
    }

    /// The next line anyone printed, within `secs`; fails if a process the test did not end
    /// ended first.
    async fn next(&mut self, secs: u64, what: &str) -> (usize, String) {
        loop {
            let (who, line) = within(secs, what, self.rx.recv()).await.unwrap();
            match line == CLOSED {
                true if self.ended.contains(&who) => continue,
                true => panic!("{what}: process {who} ended first"),
                false => return (who, line),
            }
        }
    }

    /// The test ends `who` (or lets it end) on purpose.
    fn ends(&mut self, who: usize) {
        self.ended.push(who);
    }

    /// The next `lead TERM TERM PID VALUE` line: who printed it, the term, the value.
    async fn lead(&mut self, secs: u64, what: &str) -> (usize, u64, String) {
        let (who, line) = self.next(secs, what).await;
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.first(), Some(&"lead"), "{what}: {line}");
        assert_eq!(
            words[1], words[2],
            "FENCELOCK_TOKEN is FENCELOCK_TERM: {line}"
        );
        self.program = words[3].parse().unwrap();
        (who, words[1].parse().unwrap(), words[4..].join(" "))
    }
}

impl Participant {
    /// Ends the current PROGRAM (it reads one line).
    async fn end_term(&mut self) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    fn pid(&self) -> i32 {
        self.child.id().unwrap() as i32
    }

    /// Waits (bounded) for the process to exit; its exit code and stderr.
    async fn exit(mut self, secs: u64) -> (Option<i32>, String) {
        let status = within(secs, "fencelock elect exits", self.child.wait())
            .await
            .unwrap();
        // The copy of stderr ends with the pipe, shortly after the exit.
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while Arc::strong_count(&self.stderr) > 1 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        let stderr = self.stderr.lock().unwrap().clone();
        (status.code(), stderr)
    }
}

/// Two `fencelock elect` on one name: one leads, the other waits (`-n` meanwhile finds a
/// leader: 75, naming it), and takes over when the first's PROGRAM exits; each exits with its
/// PROGRAM's status; the terms strictly increase.
async fn the_next_leads_when_the_leaders_program_exits(kind: Kind) {
    let server = Server::start(kind).await;
    let mut lines = Lines::new();
    let args = |value: &'static str| ["elect", "e", "--value", value, "--shell", LEADING];
    let mut a = lines.start(&server, 0, &args("alpha"));
    let (who, first, value) = lines.lead(60, "the first leads").await;
    assert_eq!((who, value.as_str()), (0, "alpha"));
    let mut b = lines.start(&server, 1, &args("beta"));
    let out = server.output(&["elect", "-n", "e", "true"]).await;
    assert_eq!(out.status.code(), Some(CONFLICT), "{:?}", text(&out));
    assert!(text(&out).1.contains("alpha"), "{:?}", text(&out));
    lines.ends(0);
    a.end_term().await;
    let (who, second, value) = lines.lead(60, "the second takes over").await;
    assert_eq!((who, value.as_str()), (1, "beta"));
    assert!(second > first, "terms {first} then {second}");
    assert_eq!(a.exit(20).await.0, Some(0));
    lines.ends(1);
    b.end_term().await;
    assert_eq!(b.exit(20).await.0, Some(0));
    // Nobody leads now: a third leads at once, with a later term still.
    let out = server
        .output(&[
            "elect",
            "-n",
            "e",
            "--shell",
            "echo $FENCELOCK_TERM; exit 7",
        ])
        .await;
    assert_eq!(out.status.code(), Some(7), "{:?}", text(&out));
    let third: u64 = text(&out).0.trim().parse().unwrap();
    assert!(third > second, "terms {second} then {third}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_leads_when_the_leaders_program_exits_redis() {
    the_next_leads_when_the_leaders_program_exits(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_leads_when_the_leaders_program_exits_zookeeper() {
    the_next_leads_when_the_leaders_program_exits(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_leads_when_the_leaders_program_exits_etcd() {
    the_next_leads_when_the_leaders_program_exits(Kind::Etcd).await;
}

/// `--again`: an active/standby pair. The leader's PROGRAM exits: the standby leads, and the
/// former leader campaigns again. The new leader is killed (SIGKILL): the former leader leads
/// again within the lease (plus a margin). SIGTERM ends it with its PROGRAM's status. Every
/// term is greater than the one before.
async fn again_is_an_active_standby_pair(kind: Kind, lease: &str, lease_ms: u64) {
    let server = Server::start(kind).await;
    let mut lines = Lines::new();
    let args = [
        "elect", "--again", "--lease", lease, "e", "--shell", LEADING,
    ];
    let mut pair = [
        Some(lines.start(&server, 0, &args)),
        Some(lines.start(&server, 1, &args)),
    ];
    let (first, term, _) = lines.lead(60, "one of the pair leads").await;
    pair[first].as_mut().unwrap().end_term().await;
    let (second, second_term, _) = lines.lead(60, "the standby takes over").await;
    let program = lines.program;
    assert_ne!(second, first, "the standby leads");
    assert!(second_term > term, "terms {term} then {second_term}");
    // SIGKILL of the leader's fencelock: the former leader, campaigning again, leads within
    // the lease.
    let killed = pair[second].take().unwrap();
    lines.ends(second);
    signal(killed.pid(), Signal::SIGKILL);
    let killed_at = Instant::now();
    let _ = killed.exit(10).await;
    // PROGRAM does not outlive its `fencelock elect`, as under `fencelock run`.
    all_gone(&[program], Duration::from_secs(1)).await;
    let (third, third_term, _) = lines
        .lead(60, "the standby takes over a killed leader")
        .await;
    let took = killed_at.elapsed();
    assert_eq!(third, first);
    assert!(
        third_term > second_term,
        "terms {second_term} then {third_term}"
    );
    assert!(
        took < Duration::from_millis(lease_ms + 3000),
        "took {took:?} with a lease of {lease}"
    );
    println!("{kind:?}: the standby led {took:?} after its leader was killed ({lease} lease)");
    let last = pair[first].take().unwrap();
    signal(last.pid(), Signal::SIGTERM);
    let (code, err) = last.exit(20).await;
    assert_eq!(code, Some(128 + 15), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn again_is_an_active_standby_pair_redis() {
    again_is_an_active_standby_pair(Kind::Redis, "2s", 2000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn again_is_an_active_standby_pair_zookeeper() {
    again_is_an_active_standby_pair(Kind::ZooKeeper, "2s", 2000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn again_is_an_active_standby_pair_etcd() {
    again_is_an_active_standby_pair(Kind::Etcd, "2s", 2000).await;
}

/// A leader frozen (SIGSTOP of its fencelock) past its lease is deposed: the waiting
/// participant leads; thawed, the former leader stops its PROGRAM and exits 79.
async fn a_frozen_leader_is_deposed(kind: Kind) {
    let server = Server::start(kind).await;
    let mut lines = Lines::new();
    let args = ["elect", "--lease", "1s", "e", "--shell", LEADING];
    let a = lines.start(&server, 0, &args);
    let (who, term, _) = lines.lead(60, "the first leads").await;
    assert_eq!(who, 0);
    let mut b = lines.start(&server, 1, &args);
    signal(a.pid(), Signal::SIGSTOP);
    let (who, next_term, _) = lines.lead(60, "the waiting one takes over").await;
    assert_eq!(who, 1);
    assert!(next_term > term, "terms {term} then {next_term}");
    lines.ends(0);
    signal(a.pid(), Signal::SIGCONT);
    let (code, err) = a.exit(20).await;
    assert_eq!(code, Some(LOCK_LOST), "{err}");
    assert!(err.contains("leadership of election \"e\""), "{err}");
    b.end_term().await;
    assert_eq!(b.exit(20).await.0, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_is_deposed_redis() {
    a_frozen_leader_is_deposed(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_is_deposed_zookeeper() {
    a_frozen_leader_is_deposed(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_is_deposed_etcd() {
    a_frozen_leader_is_deposed(Kind::Etcd).await;
}

/// A standby (`--again`, waiting for its turn) ends at once on SIGTERM (128+15) and leaves
/// the election then, not a lease later: the leader, campaigning again after its PROGRAM
/// exits, leads again at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_standby_ends_on_sigterm_and_leaves_the_election() {
    let server = Server::start(Kind::Redis).await;
    let mut lines = Lines::new();
    let args = [
        "elect", "--again", "--lease", "30s", "e", "--shell", LEADING,
    ];
    let mut a = lines.start(&server, 0, &args);
    let (_, term, _) = lines.lead(60, "the first leads").await;
    let b = lines.start(&server, 1, &args);
    // The standby's place in the queue, as the lock's status shows it.
    let client = fencelock::Client::connect(&server.url()).await.unwrap();
    within(30, "the standby waits", async {
        while client.lock("e").status().await.unwrap().waiters.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    lines.ends(1);
    signal(b.pid(), Signal::SIGTERM);
    let (code, err) = b.exit(10).await;
    assert_eq!(code, Some(128 + 15), "{err}");
    assert!(err.contains("while campaigning"), "{err}");
    a.end_term().await;
    let (who, next, _) = lines.lead(10, "the first leads again").await;
    assert_eq!(who, 0);
    assert!(next > term, "terms {term} then {next}");
    lines.ends(0);
    signal(a.pid(), Signal::SIGTERM);
    assert_eq!(a.exit(20).await.0, Some(128 + 15));
}

/// One `--observe --json` line: value and term (null when nobody leads); checks `since`.
fn observed(line: &str) -> (Option<String>, Option<u64>) {
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let since = v["since"].as_str().unwrap_or_else(|| panic!("{line}"));
    assert!(since.ends_with('Z'), "UTC: {line}");
    humantime::parse_rfc3339(since).unwrap_or_else(|e| panic!("{e}: {line}"));
    let value = v["value"].as_str().map(str::to_string);
    let term = v["term"].as_u64();
    assert_eq!(value.is_none(), term.is_none(), "{line}");
    (value, term)
}

/// `--observe --json` prints nobody, then each leader with its term, then nobody again, as the
/// participants come and go; terms increase; SIGTERM ends it (143).
async fn observe_prints_the_sequence(kind: Kind) {
    let server = Server::start(kind).await;
    let mut lines = Lines::new();
    let observer = lines.start(&server, 9, &["elect", "e", "--observe", "--json"]);
    let (_, line) = lines.next(60, "the observer's first line").await;
    assert_eq!(observed(&line), (None, None));
    let mut term = 0;
    for (who, value) in [(1, "alpha"), (2, "beta")] {
        let mut p = lines.start(
            &server,
            who,
            &["elect", "--value", value, "e", "--shell", LEADING],
        );
        // The participant's own line and the observer's, in either order.
        let mut seen = None;
        for _ in 0..2 {
            match lines.next(60, "a leader and its observation").await {
                (9, line) => seen = Some(observed(&line)),
                (_, line) => assert!(line.starts_with("lead "), "{line}"),
            }
        }
        let (v, t) = seen.unwrap();
        assert_eq!(v.as_deref(), Some(value));
        assert!(t.unwrap() > term, "terms {term} then {t:?}");
        term = t.unwrap();
        lines.ends(who);
        p.end_term().await;
        let (who, line) = lines.next(60, "nobody leads").await;
        assert_eq!((who, observed(&line)), (9, (None, None)));
        assert_eq!(p.exit(20).await.0, Some(0));
    }
    signal(observer.pid(), Signal::SIGTERM);
    assert_eq!(observer.exit(10).await.0, Some(128 + 15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_prints_the_sequence_redis() {
    observe_prints_the_sequence(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_prints_the_sequence_zookeeper() {
    observe_prints_the_sequence(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_prints_the_sequence_etcd() {
    observe_prints_the_sequence(Kind::Etcd).await;
}

/// Text lines: `leader: none, since …` first, then `leader: VALUE, term N, since …`. When the
/// server goes away, the observer says it can no longer follow and exits 74.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_in_text_and_its_end_when_the_server_goes() {
    let server = Server::start(Kind::Redis).await;
    let mut lines = Lines::new();
    let observer = lines.start(&server, 9, &["elect", "e", "--observe"]);
    let (_, line) = lines.next(60, "the observer's first line").await;
    assert!(line.starts_with("leader: none, since 20"), "{line}");
    let mut p = lines.start(
        &server,
        0,
        &["elect", "--value", "alpha", "e", "--shell", LEADING],
    );
    // The participant's own line and the observer's, in either order.
    for _ in 0..2 {
        match lines.next(60, "the leader observed").await {
            (9, line) => assert!(line.starts_with("leader: alpha, term "), "{line}"),
            (_, line) => assert!(line.starts_with("lead "), "{line}"),
        }
    }
    lines.ends(0);
    p.end_term().await;
    assert_eq!(p.exit(20).await.0, Some(0));
    let (_, line) = lines.next(60, "nobody leads").await;
    assert!(line.starts_with("leader: none, since "), "{line}");
    lines.ends(9);
    drop(server);
    let (code, err) = observer.exit(60).await;
    assert_eq!(code, Some(74), "{err}");
    assert!(err.contains("can no longer follow election \"e\""), "{err}");
}

/// The observer of a session service exits 74 when its server goes away (its session or
/// lease can no longer be kept).
async fn observe_ends_with_74_when_the_server_goes(kind: Kind) {
    let server = Server::start(kind).await;
    let mut lines = Lines::new();
    let observer = lines.start(&server, 9, &["elect", "e", "--observe", "--json"]);
    let (_, line) = lines.next(60, "the observer's first line").await;
    assert_eq!(observed(&line), (None, None));
    lines.ends(9);
    drop(server);
    let (code, err) = observer.exit(90).await;
    assert_eq!(code, Some(74), "{err}");
    assert!(err.contains("can no longer follow election \"e\""), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_ends_with_74_when_the_server_goes_zookeeper() {
    observe_ends_with_74_when_the_server_goes(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_ends_with_74_when_the_server_goes_etcd() {
    observe_ends_with_74_when_the_server_goes(Kind::Etcd).await;
}

/// RedLock holds no elections: campaigning or observing says so, with 69.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_elections_with_69() {
    let servers: Vec<Server> =
        futures_util::future::join_all((0..3).map(|_| Server::start(Kind::Redis))).await;
    let mut args = vec!["elect".to_string()];
    for s in &servers {
        args.extend(["--url".to_string(), s.url()]);
    }
    for tail in [&["e", "true"][..], &["e", "--observe"]] {
        let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
        argv.extend_from_slice(tail);
        let out = servers[0].output(&argv).await;
        assert_eq!(
            out.status.code(),
            Some(CONNECTION),
            "{tail:?}: {:?}",
            text(&out)
        );
        assert!(
            text(&out).1.contains("not supported"),
            "{tail:?}: {:?}",
            text(&out)
        );
    }
}

/// `-n` with a leader: 75 (or --conflict-exit-code); `--wait` times out likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_wait_and_wait_give_up_with_the_conflict_code() {
    let server = Server::start(Kind::Redis).await;
    let mut lines = Lines::new();
    let mut a = lines.start(
        &server,
        0,
        &["elect", "--value", "alpha", "e", "--shell", LEADING],
    );
    lines.lead(60, "the leader").await;
    let out = server
        .output(&["elect", "-n", "--conflict-exit-code", "9", "e", "true"])
        .await;
    assert_eq!(out.status.code(), Some(9), "{:?}", text(&out));
    let started = Instant::now();
    let out = server
        .output(&["elect", "--wait", "300ms", "e", "true"])
        .await;
    assert_eq!(out.status.code(), Some(CONFLICT), "{:?}", text(&out));
    assert!(started.elapsed() >= Duration::from_millis(300));
    lines.ends(0);
    a.end_term().await;
    assert_eq!(a.exit(20).await.0, Some(0));
}

/// Bad combinations and missing parts are usage errors (64) in the CLI's words, before any
/// server is contacted (the URL's listener sees no connection).
#[tokio::test]
async fn bad_combinations_are_usage_errors_before_any_contact() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("redis://{}", listener.local_addr().unwrap());
    let long = "v".repeat(fencelock::MAX_VALUE_LEN + 1);
    for (args, says) in [
        (&["elect", "e"][..], "missing PROGRAM"),
        (
            &["elect", "e", "--observe", "echo", "hi"],
            "runs no PROGRAM",
        ),
        (
            &["elect", "e", "--observe", "--again"],
            "--again is for a campaign",
        ),
        (
            &["elect", "e", "--observe", "--value", "v"],
            "--value is for a campaign",
        ),
        (
            &["elect", "e", "--observe", "--lease", "5s"],
            "--lease is for a campaign",
        ),
        (
            &["elect", "e", "--observe", "-n"],
            "-n/--no-wait is for a campaign",
        ),
        (
            &["elect", "e", "--json", "echo", "hi"],
            "--json goes with --observe",
        ),
        (&["elect", "--again", "-n", "e", "echo"], "gives up waiting"),
        (
            &["elect", "--again", "--wait", "5s", "e", "echo"],
            "gives up waiting",
        ),
        (&["elect", "e", "--wiat", "5m", "echo", "hi"], "--wiat"),
        (
            &["elect", "e", "--shell", "echo a", "echo b"],
            "one command line",
        ),
        (
            &["elect", "--value", &long, "e", "echo"],
            "at most 4096 bytes",
        ),
        (&["elect", "--observe"], "<NAME>"),
    ] {
        let out = within(10, "usage error", cli_at(&url, args).output())
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {:?}", text(&out));
        assert!(text(&out).1.contains(says), "{args:?}: {:?}", text(&out));
        assert!(!text(&out).0.contains("hi"), "{args:?}: {:?}", text(&out));
    }
    assert!(listener.accept().is_err(), "a server was contacted");
}

/// An interactive PROGRAM under a terminal reads it while leading (its group is the
/// terminal's foreground group), and `fencelock elect` exits with its status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_program_reads_the_terminal_while_leading() {
    let server = Server::start(Kind::Etcd).await;
    an_interactive_program_reads_the_terminal_under(&server, &["elect", "tty-election"]).await;
}

/// `elect --help` documents the environment PROGRAM gets and the exit codes.
#[tokio::test]
async fn help_names_the_environment_and_the_exit_codes() {
    let out = within(
        10,
        "help",
        cli_at("redis://127.0.0.1:1", &["elect", "--help"]).output(),
    )
    .await
    .unwrap();
    let help = text(&out).0;
    // What a SIGTERM'd standby exits with (a_waiting_standby_ends_on_sigterm_…: 143).
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("standby then exits at once with 128+N"),
        "{help}"
    );
    for word in [
        "FENCELOCK_TOKEN",
        "FENCELOCK_TERM",
        "EXIT STATUS",
        "74",
        "79",
        "--again",
    ] {
        assert!(help.contains(word), "{word}: {help}");
    }
}

/// Whether election `name` has no leader now (a participant that resigned is gone at once; one
/// that died without resigning leads until its lease ends, 30 s in these tests).
async fn nobody_leads(server: &Server, name: &str) -> bool {
    let client = fencelock::Client::connect(&server.url()).await.unwrap();
    let leader = client.election(name).leader().await.unwrap();
    client.close().await.unwrap();
    leader.is_none()
}

/// Issue 33, point 5: Ctrl-C on the terminal ends `elect --again`. PROGRAM's group is the
/// terminal's foreground group, so only PROGRAM gets the SIGINT; its supervisor reports it, and
/// the job ends (130) with the leadership resigned instead of campaigning again.
async fn ctrl_c_ends_elect_again_on_a_terminal(kind: Kind) {
    let server = Server::start(kind).await;
    let (seen, code) = on_a_terminal(
        &server,
        "ready",
        "\x03",
        "not campaigning again",
        &[
            "elect",
            "--again",
            "--lease",
            "30s",
            "tty-e",
            "--shell",
            "echo ready; exec sleep 100",
        ],
    )
    .await;
    assert_eq!(code, 130, "{seen}");
    assert_eq!(seen.matches("ready").count(), 1, "{seen}");
    assert!(nobody_leads(&server, "tty-e").await, "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_ends_elect_again_on_a_terminal_redis() {
    ctrl_c_ends_elect_again_on_a_terminal(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_ends_elect_again_on_a_terminal_zookeeper() {
    ctrl_c_ends_elect_again_on_a_terminal(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_ends_elect_again_on_a_terminal_etcd() {
    ctrl_c_ends_elect_again_on_a_terminal(Kind::Etcd).await;
}

/// A terminal session that ends under a shell, as script(1)'s does when its terminal closes:
/// the pty's child is `sh -c 'ARGS... 2>LOG; echo after'` (a shell that waits for fencelock,
/// in its own group, as a non-interactive shell runs commands; stderr to a file, so that
/// fencelock's messages reach the test, and no write to the closed terminal ends it). Once `ready` is seen, the driver
/// closes the terminal and exits: the shell gets SIGHUP and dies, and the kernel sends SIGHUP
/// to the terminal's foreground group, PROGRAM's, alone.
const HANGUP_DRIVER: &str = r#"
import os, pty, shlex, sys, time
pid, fd = pty.fork()
if pid == 0:
    line = " ".join(shlex.quote(a) for a in sys.argv[2:])
    line += " 2>" + shlex.quote(sys.argv[1]) + "; echo after"
    os.execv("/bin/sh", ["sh", "-c", line])
seen = b""
deadline = time.time() + 30
while b"ready" not in seen:
    if time.time() > deadline:
        sys.exit("timed out waiting for ready; saw %r" % seen)
    seen += os.read(fd, 1024)
os.close(fd)
print(seen.decode(errors="replace"), flush=True)
"#;

/// Kills a process by PID when dropped (a runner the test found still running).
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0), Signal::SIGKILL);
    }
}

/// Issue 33, point 5: when the terminal closes (script(1)'s session ends), `elect --again`
/// does not keep running and leading: the hangup that reaches PROGRAM's group ends the job,
/// and the leadership is resigned (free at once, not a 30 s lease later).
async fn a_hangup_ends_elect_again(kind: Kind) {
    let server = Server::start(kind).await;
    let dir = tempfile::tempdir().unwrap();
    let driver = dir.path().join("hangup.py");
    std::fs::write(&driver, HANGUP_DRIVER).unwrap();
    // PROGRAM's parent is its supervisor, whose parent is the runner.
    let file = dir.path().join("runner");
    let body = format!(
        "read -r _ _ _ runner _ < /proc/$PPID/stat; echo $runner > {}; echo ready; \
         exec sleep 100",
        file.display()
    );
    let log = dir.path().join("stderr");
    let out = Command::new("python3")
        .arg(&driver)
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_fencelock"))
        .args([
            "elect", "--again", "--lease", "30s", "hup-e", "--shell", &body,
        ])
        .env("FENCELOCK_URL", server.url())
        .kill_on_drop(true)
        .output();
    let out = within(40, "the terminal session", out).await.unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let runner: i32 = wait_for_file(&file).await.trim().parse().unwrap();
    let _cleanup = KillOnDrop(runner);
    let took = all_gone(&[runner], Duration::from_secs(10)).await;
    println!("{kind:?}: the runner ended {took:?} after the terminal closed");
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(err.contains("SIGHUP ended the term"), "{err}");
    assert!(nobody_leads(&server, "hup-e").await, "still led: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hangup_ends_elect_again_redis() {
    a_hangup_ends_elect_again(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hangup_ends_elect_again_zookeeper() {
    a_hangup_ends_elect_again(Kind::ZooKeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hangup_ends_elect_again_etcd() {
    a_hangup_ends_elect_again(Kind::Etcd).await;
}
