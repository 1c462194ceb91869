//! `fencelock verify` end to end: short seeded runs on throwaway servers, their verdicts, the
//! negative control, and the HTML report. (nextest's `topology` group runs them one at a
//! time: each starts several client processes.)

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

const USAGE: i32 = 64;

async fn verify(args: &[&str], report: &Path) -> Output {
    let run = Command::new(env!("CARGO_BIN_EXE_fencelock"))
        .arg("verify")
        .args(args)
        .arg("--report")
        .arg(report)
        .env_remove("FENCELOCK_PASSWORD")
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("verify finished within 90 s")
        .expect("verify ran")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn report(dir: &Path) -> Value {
    let json = std::fs::read_to_string(dir.join("report.json")).expect("report.json");
    serde_json::from_str(&json).expect("report.json parses")
}

fn count(run: &Value, field: &str) -> usize {
    run["verdict"][field].as_array().map_or(0, Vec::len)
}

/// Every fault of the run happened, and every safety check passed.
fn assert_clean(out: &Output, dir: &Path) {
    assert_eq!(out.status.code(), Some(0), "{}", text(out));
    let report = report(dir);
    let run = &report["runs"][0];
    for fault in run["injected"].as_array().unwrap() {
        assert_eq!(fault["happened"], true, "{fault}");
    }
    assert_eq!(run["injected"].as_array().unwrap().len(), 2);
    for check in ["stale_writes", "token_breaks", "lost_updates"] {
        assert_eq!(count(run, check), 0, "{check}: {}", text(out));
    }
    let unfenced = run["verdict"]["overlaps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["fenced"] == false)
        .count();
    assert_eq!(unfenced, 0);
    assert!(count(run, "holds") >= 10, "{}", text(out));
    assert!(text(out).contains("every safety check passed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_one_redis_with_pause_and_kill_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--backend", "redis", "--faults", "pause,kill"];
    let out = verify(
        &[
            &args[..],
            &["--seed", "7", "--duration", "12s", "--no-control"],
        ]
        .concat(),
        dir.path(),
    )
    .await;
    assert_clean(&out, dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_redlock_over_three_servers_with_pause_and_kill_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--backend", "redlock", "--faults", "pause,kill"];
    let out = verify(
        &[
            &args[..],
            &["--seed", "11", "--duration", "12s", "--no-control"],
        ]
        .concat(),
        dir.path(),
    )
    .await;
    assert_clean(&out, dir.path());
    let report = report(dir.path());
    assert!(report["deployment"].as_str().unwrap().contains("RedLock"));
}

/// ZooKeeper session expiry and etcd lease expiry, beside a kill: a holder stopped until the
/// server ended its session or lease, which only counts when another client took the lock
/// meanwhile.
async fn verify_expiry(backend: &str, fault: &str, service: &str) {
    let dir = tempfile::tempdir().unwrap();
    let faults = format!("kill,{fault}");
    let args = ["--backend", backend, "--faults", &faults];
    let run = ["--seed", "5", "--duration", "12s", "--no-control"];
    let out = verify(&[&args[..], &run[..]].concat(), dir.path()).await;
    assert_clean(&out, dir.path());
    let report = report(dir.path());
    assert!(report["deployment"].as_str().unwrap().contains(service));
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    explains_itself(&html);
    assert!(
        html.contains(service) && !html.contains("Zookeeper"),
        "spelling"
    );
    let injected = report["runs"][0]["injected"].as_array().unwrap();
    let expiry = injected.iter().find(|f| f["fault"] == fault).unwrap();
    let evidence = expiry["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("meanwhile another client acquired"),
        "{evidence}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_etcd_with_kill_and_lease_expiry_is_clean() {
    verify_expiry("etcd", "lease-expiry", "etcd").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_zookeeper_with_kill_and_session_expiry_is_clean() {
    verify_expiry("zookeeper", "session-expiry", "ZooKeeper").await;
}

/// `--primitive election` (issue 25, point 6) on one Redis, ZooKeeper and etcd: leaders
/// write with their term under client pauses and kills; the run is clean (no unfenced
/// overlap, no stale write, terms in order, no lost update), every client observed the
/// election and no observer reported an older leader or another leader for a term.
async fn verify_election(backend: &str, seed: &str) {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--backend", backend, "--primitive", "election"];
    let run = [
        "--faults",
        "pause,kill",
        "--seed",
        seed,
        "--duration",
        "12s",
    ];
    let out = verify(
        &[&args[..], &run[..], &["--no-control"]].concat(),
        dir.path(),
    )
    .await;
    assert_clean(&out, dir.path());
    let report = report(dir.path());
    assert_eq!(report["primitive"], "election");
    let run = &report["runs"][0];
    assert_eq!(count(run, "observer_breaks"), 0, "{}", text(&out));
    let observed = run["verdict"]["observed"].as_u64().unwrap();
    assert!(
        observed >= 10,
        "{observed} observer reports: {}",
        text(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_election_on_one_redis_is_clean() {
    verify_election("redis", "21").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_election_on_zookeeper_is_clean() {
    verify_election("zookeeper", "22").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_election_on_etcd_is_clean() {
    verify_election("etcd", "23").await;
}

/// `--primitive multi` (issue 24, point 6): each client takes two locks at once and writes
/// each lock's register with that lock's token, under client pauses and kills; the run is
/// clean lock by lock, and both locks' holds are in it.
async fn verify_multi(backend: &str, seed: &str) {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--backend", backend, "--primitive", "multi"];
    let run = [
        "--faults",
        "pause,kill",
        "--seed",
        seed,
        "--duration",
        "12s",
    ];
    let out = verify(
        &[&args[..], &run[..], &["--no-control"]].concat(),
        dir.path(),
    )
    .await;
    assert_clean(&out, dir.path());
    let report = report(dir.path());
    assert_eq!(report["primitive"], "multi");
    let holds = report["runs"][0]["verdict"]["holds"].as_array().unwrap();
    for part in [0, 1] {
        let n = holds.iter().filter(|h| h["part"] == part).count();
        assert!(n >= 5, "{n} holds of lock {part}: {}", text(&out));
    }
    // Issue 33: the report gives each token with its lock's name.
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("verify: a multi-lock on "), "title");
    let second = format!("lock verify-run-{seed}-1, token ");
    assert!(html.contains(&second), "no token named by its lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_multi_on_one_redis_is_clean() {
    verify_multi("redis", "31").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_multi_on_zookeeper_is_clean() {
    verify_multi("zookeeper", "32").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_multi_on_etcd_is_clean() {
    verify_multi("etcd", "33").await;
}

/// A run of `primitive` under client pauses without fencing (its own negative control): the
/// exit status says violations; the run's report.
async fn unfenced_pauses(primitive: &str) -> (Output, Value) {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--primitive",
        primitive,
        "--faults",
        "pause",
        "--no-fencing",
    ];
    let out = verify(
        &[&args[..], &["--seed", "5", "--duration", "12s"]].concat(),
        dir.path(),
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let run = report(dir.path())["runs"][0].clone();
    (out, run)
}

/// `--primitive multi`'s negative control: without fencing, the paused client's late writes
/// are taken on both locks' registers, and the checker finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_multi_without_fencing_shows_violations() {
    let (out, run) = unfenced_pauses("multi").await;
    assert!(count(&run, "lost_updates") >= 1, "{}", text(&out));
}

/// `--primitive rwlock|semaphore` on a service: clean under client pauses and kills, with
/// readers and writers (or permit holders) in the run.
async fn verify_family(backend: &str, primitive: &str, seed: &str) {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--backend", backend, "--primitive", primitive];
    let run = [
        "--faults",
        "pause,kill",
        "--seed",
        seed,
        "--duration",
        "12s",
    ];
    let out = verify(
        &[&args[..], &run[..], &["--no-control"]].concat(),
        dir.path(),
    )
    .await;
    assert_clean(&out, dir.path());
    let run = &report(dir.path())["runs"][0];
    let crowds = run["verdict"]["crowds"].as_array().unwrap();
    assert!(crowds.iter().all(|c| c["fenced"] == true), "{}", text(&out));
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    if primitive == "rwlock" {
        let holds = run["verdict"]["holds"].as_array().unwrap();
        let readers = holds.iter().filter(|h| h["part"] == 1).count();
        assert!(readers >= 3 && holds.len() - readers >= 3, "{}", text(&out));
        // Issue 33: readers' holds are checked reads, not writes.
        assert!(html.contains("verify: a read-write lock on "), "title");
        assert!(html.contains("reader, token ") && html.contains("checked read: its view stood"));
        assert_counts_agree(&out, run);
    } else {
        assert!(
            html.contains("verify: a semaphore of 2 permits on "),
            "title"
        );
        assert_refused_only_when_deposed(&out, run);
    }
}

/// Issue 33 (what was found 4): the run's last progress line gives the verdict's counts
/// (with a read-write lock it counted the readers' checked reads as writes: 49 against 42).
fn assert_counts_agree(out: &Output, run: &Value) {
    let v = &run["verdict"];
    let n = |field: &str, i: usize| v[field][i].as_u64().unwrap();
    let expected = format!(
        "run: ended  {} holds (readers and writers), writers' writes {} taken, {} refused, \
         checked reads {} standing, {} refused",
        v["holds"].as_array().unwrap().len(),
        n("writes", 0),
        n("writes", 1),
        n("reads", 0),
        n("reads", 1)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l == expected),
        "{expected}\n{stdout}"
    );
    assert!(n("reads", 0) >= 3, "{stdout}");
}

/// Issue 33, point 6: a permit holder's write is refused only when its holding was no longer
/// valid: its client was paused (past its lease) or killed during the hold, or its lost
/// signal fired. The register that kept the N highest tokens refused valid holders' writes
/// once two later holders had written, faults or not.
fn assert_refused_only_when_deposed(out: &Output, run: &Value) {
    let events = run["events"].as_array().unwrap();
    let holds = run["verdict"]["holds"].as_array().unwrap();
    let refused: Vec<&Value> = holds.iter().filter(|h| h["write"] == "rejected").collect();
    for h in refused {
        let (client, from, to) = (&h["client"], h["acquired"].as_u64(), h["end"].as_u64());
        let deposed = events.iter().any(|e| {
            let during = e["t"].as_u64() >= from && e["t"].as_u64() <= to;
            let fault = e["event"] == "paused" || e["event"] == "killed";
            let lost = e["event"] == "lost" && e["token"] == h["token"];
            (e["client"] == *client && during && fault) || lost
        });
        assert!(
            deposed,
            "a valid holding's write was refused: {h}\n{}",
            text(out)
        );
    }
}

/// Issue 33, point 6: without faults, no permit holder's write is refused (the register
/// that kept the N highest tokens refused 4 before any fault); every count of the last
/// progress line is the verdict's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_semaphore_without_faults_refuses_no_write() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--primitive",
        "semaphore",
        "--permits",
        "2",
        "--faults",
        "none",
    ];
    let run = ["--seed", "55", "--duration", "8s", "--no-control"];
    let out = verify(&[&args[..], &run[..]].concat(), dir.path()).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let v = &report(dir.path())["runs"][0]["verdict"];
    let (taken, refused) = (v["writes"][0].as_u64().unwrap(), v["writes"][1].as_u64());
    assert!(taken >= 10, "{}", text(&out));
    assert_eq!(refused, Some(0), "{}", text(&out));
    let expected = format!(
        "run: ended  {} permits held, permit holders' writes {taken} taken, 0 refused",
        v["holds"].as_array().unwrap().len()
    );
    assert!(
        text(&out).lines().any(|l| l == expected),
        "{expected}\n{}",
        text(&out)
    );
}

/// The semaphore's negative control: without fencing, paused permit holders' late writes
/// are taken although their slots went to later holders, and the checker finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_semaphore_without_fencing_shows_violations() {
    let (out, run) = unfenced_pauses("semaphore").await;
    assert!(count(&run, "stale_writes") >= 1, "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_rwlock_on_one_redis_is_clean() {
    verify_family("redis", "rwlock", "41").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_rwlock_on_zookeeper_is_clean() {
    verify_family("zookeeper", "rwlock", "42").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_rwlock_on_etcd_is_clean() {
    verify_family("etcd", "rwlock", "43").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_semaphore_on_one_redis_is_clean() {
    verify_family("redis", "semaphore", "51").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_semaphore_on_zookeeper_is_clean() {
    verify_family("zookeeper", "semaphore", "52").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_semaphore_on_etcd_is_clean() {
    verify_family("etcd", "semaphore", "53").await;
}

/// The network faults of a run: with CAP_NET_ADMIN each ran, happened (with the evidence
/// of its mechanism) and the run is clean; without it, each is listed as skipped with that
/// reason, and the run of the other faults still passes.
fn assert_network_faults(out: &Output, dir: &Path, faults: &[&str]) {
    assert_eq!(out.status.code(), Some(0), "{}", text(out));
    let report = report(dir);
    let run = &report["runs"][0];
    let injected = run["injected"].as_array().unwrap();
    if !fencelock_testkit::cap_net_admin() {
        let skipped = report["skipped"].as_array().unwrap();
        for fault in faults {
            let s = skipped.iter().find(|s| s["fault"] == *fault).expect(fault);
            assert!(
                s["reason"].as_str().unwrap().contains("CAP_NET_ADMIN"),
                "{s}"
            );
        }
        assert!(injected.is_empty(), "{}", text(out));
        return;
    }
    assert_eq!(
        report["skipped"].as_array().unwrap().len(),
        0,
        "{}",
        text(out)
    );
    assert_eq!(injected.len(), faults.len(), "{}", text(out));
    for fault in injected {
        assert_eq!(fault["happened"], true, "{fault}");
        let evidence = fault["evidence"].as_str().unwrap();
        match fault["fault"].as_str().unwrap() {
            "partition" => {
                assert!(evidence.contains("blackhole routes"), "{evidence}");
                assert!(evidence.contains("answered"), "{evidence}");
            }
            "netem" => {
                assert!(
                    evidence.contains("tc netem") || evidence.contains("proxy"),
                    "{evidence}"
                );
                assert!(evidence.contains("round trip"), "{evidence}");
            }
            other => panic!("unexpected fault {other}"),
        }
    }
    for check in ["stale_writes", "token_breaks", "lost_updates"] {
        assert_eq!(count(run, check), 0, "{check}: {}", text(out));
    }
    assert!(count(run, "holds") >= 10, "{}", text(out));
    assert!(text(out).contains("every safety check passed"));
    // The namespace named in the deployment is gone with the run.
    let deployment = report["deployment"].as_str().unwrap();
    let ns = deployment
        .split_whitespace()
        .find(|w| w.starts_with("fencelock-"))
        .expect("the namespace is named");
    let netns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&netns.stdout).contains(ns), "{ns}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_one_redis_with_partition_and_netem_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--backend", "redis", "--faults", "partition,netem"];
    let out = verify(
        &[
            &args[..],
            &["--seed", "3", "--duration", "12s", "--no-control"],
        ]
        .concat(),
        dir.path(),
    )
    .await;
    assert_network_faults(&out, dir.path(), &["partition", "netem"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_redlock_with_a_partitioned_minority_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--backend", "redlock", "--faults", "partition"];
    let out = verify(
        &[
            &args[..],
            &["--seed", "5", "--duration", "10s", "--no-control"],
        ]
        .concat(),
        dir.path(),
    )
    .await;
    assert_network_faults(&out, dir.path(), &["partition"]);
    let report = report(dir.path());
    let evidence = report["runs"][0]["injected"][0]["evidence"].as_str();
    assert!(
        evidence.is_none_or(|e| e.contains("1 of 3")),
        "{evidence:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_etcd_with_its_member_partitioned_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--backend", "etcd", "--faults", "partition"];
    let out = verify(
        &[
            &args[..],
            &["--seed", "3", "--duration", "10s", "--no-control"],
        ]
        .concat(),
        dir.path(),
    )
    .await;
    assert_network_faults(&out, dir.path(), &["partition"]);
}

/// Without fencing, the client paused past its lease writes over the later holders' writes:
/// the checker must see it, and the exit status must say so. The HTML report of that run
/// is parsed: well-formed, self-contained, one lane per client, the violations marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_negative_control_shows_violations_and_the_report_shows_them() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--faults",
        "pause,leader-kill",
        "--no-fencing",
        "--clients",
        "4",
    ];
    let out = verify(
        &[&args[..], &["--seed", "3", "--duration", "12s"]].concat(),
        dir.path(),
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = report(dir.path());
    let run = &report["runs"][0];
    assert_eq!(run["fencing"], false);
    assert!(count(run, "stale_writes") >= 1, "{}", text(&out));
    assert!(count(run, "lost_updates") >= 1, "{}", text(&out));
    // A fault that cannot run is listed with its reason, not dropped.
    assert_eq!(report["skipped"][0]["fault"], "leader-kill");
    assert!(report["skipped"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("does not apply"));
    assert!(text(&out).contains("SAFETY VIOLATIONS"));
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    check_html(&html, 4, 1);
    assert!(html.contains("class=\"violation\""));
    assert!(html.contains("class=\"paused\""));
    explains_itself(&html);
    // Issue 23 point 12: every violation in a visible table, not only in SVG tooltips.
    let violations = &html[html.find("<h3>Violations: run</h3>").expect("violations")..];
    assert!(
        violations.contains("<td>stale write accepted</td>")
            || violations.contains("<td>overlap, both writes accepted</td>"),
        "{violations}"
    );
    assert!(violations.contains("token "), "{violations}");
}

/// Issue 23 point 12: the report explains itself: a plain-language summary first, what each
/// figure means, the recovery after each fault in ms, a legend for every mark drawn.
fn explains_itself(html: &str) {
    let body = html.find("<body>").unwrap();
    let summary = html.find("What this report says").expect("summary");
    let checks = html.find("<h2>Checks</h2>").unwrap();
    assert!(
        body < summary && summary < checks,
        "the summary comes first"
    );
    for words in [
        "fencing token",
        "fenced",
        "acquires of unknown outcome</dt>",
        "liveness bound",
        "Recovery after each fault",
        "holding, write failed",
        "holding, no write",
        "paused (SIGSTOP)",
        "lost() fired",
        "fault that did not take effect",
        "@media print",
    ] {
        assert!(html.contains(words), "no {words:?}");
    }
    let recovery = &html[html.find("Recovery after each fault").unwrap()..];
    assert!(recovery.contains(" ms</td>"), "recovery times in ms");
}

/// Against a server given with --url (here one the test started): only the client faults
/// run, the server fault is listed as skipped, and the built-in negative control runs after
/// the run, side by side with it in the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_against_a_url_runs_client_faults_and_the_control() {
    let server = fencelock_testkit::RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = server.url();
    let args = [
        "--url",
        &url,
        "--faults",
        "pause,server-pause",
        "--clients",
        "3",
    ];
    let run = ["--seed", "2", "--duration", "8s"];
    let out = verify(&[&args[..], &run[..]].concat(), dir.path()).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report = report(dir.path());
    assert_eq!(report["skipped"][0]["fault"], "server-pause");
    assert!(report["skipped"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("--url"));
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "the run and its control");
    assert_eq!(
        (&runs[0]["fencing"], &runs[1]["fencing"]),
        (&true.into(), &false.into())
    );
    for run in runs {
        let injected = run["injected"].as_array().unwrap();
        assert_eq!(injected.len(), 1);
        assert_eq!(injected[0]["fault"], "pause");
        assert_eq!(injected[0]["happened"], true, "{}", injected[0]);
        assert!(count(run, "holds") >= 5, "{}", text(&out));
    }
    for check in ["stale_writes", "token_breaks", "lost_updates"] {
        assert_eq!(count(&runs[0], check), 0, "{check}: {}", text(&out));
    }
    for name in ["run", "control"] {
        assert!(dir.path().join(name).is_dir(), "no {name}/ events folder");
    }
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    check_html(&html, 3, 2);
    explains_itself(&html);
    assert!(html.contains("negative control"), "the control explained");
    assert!(
        html.contains("red is expected"),
        "the control's banner explained"
    );
}

/// A small well-formedness check: every tag closed in order, attributes quoted, nothing
/// loaded from elsewhere.
fn check_html(html: &str, clients: usize, runs: usize) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        let close = rest[open..].find('>').expect("tag closed") + open;
        let tag = &rest[open + 1..close];
        rest = &rest[close + 1..];
        if tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                stack.pop().as_deref(),
                Some(name.trim()),
                "closing </{name}>"
            );
            continue;
        }
        let name: String = tag
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        assert!(!name.is_empty(), "tag <{tag}>");
        assert_eq!(tag.matches('"').count() % 2, 0, "quotes in <{tag}>");
        if !tag.ends_with('/') {
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    assert!(!html.contains(" src=") && !html.contains("href=") && !html.contains("@import"));
    let svgs = html.matches("<svg ").count();
    assert_eq!(svgs, runs, "one timeline per run");
    assert_eq!(html.matches("class=\"lane\"").count(), clients * runs);
}

#[tokio::test]
async fn bad_flags_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = verify(&["--faults", "pause,fire"], dir.path()).await;
    assert_eq!(out.status.code(), Some(USAGE), "{}", text(&out));
    assert!(
        text(&out).contains("unknown fault \"fire\""),
        "{}",
        text(&out)
    );
    let out = verify(&["--duration", "1s"], dir.path()).await;
    assert_eq!(out.status.code(), Some(USAGE));
    let out = verify(&["--clients", "0"], dir.path()).await;
    assert_eq!(out.status.code(), Some(USAGE));
    for primitive in ["election", "rwlock", "semaphore"] {
        let redlock = ["--backend", "redlock", "--primitive", primitive];
        let out = verify(&redlock, dir.path()).await;
        assert_eq!(out.status.code(), Some(USAGE), "{}", text(&out));
        assert!(
            text(&out).contains("not offered by RedLock"),
            "{}",
            text(&out)
        );
    }
    let all_in = [
        "--primitive",
        "semaphore",
        "--permits",
        "5",
        "--clients",
        "5",
    ];
    let out = verify(&all_in, dir.path()).await;
    assert_eq!(out.status.code(), Some(USAGE), "{}", text(&out));
}

/// Issue 23 point 11: a run in which no fault happened (etcd has no session-expiry fault:
/// skipped) is inconclusive, exit 2, and says so; it never says "passed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_without_a_fault_is_inconclusive() {
    let dir = tempfile::tempdir().unwrap();
    let out = verify(
        &[
            "--backend",
            "etcd",
            "--faults",
            "session-expiry",
            "--duration",
            "5s",
            "--no-control",
        ],
        dir.path(),
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("INCONCLUSIVE"), "{}", text(&out));
    assert!(!text(&out).contains("passed"), "{}", text(&out));
    assert_eq!(report(dir.path())["inconclusive"], true);
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("Inconclusive"), "the report says so");
}
