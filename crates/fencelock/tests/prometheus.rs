//! `examples/prometheus.rs` scraped over HTTP against a real Redis (issue 33, point 4): the
//! hold, leader and term gauges appear with their labels and values.
#![cfg(all(feature = "metrics", feature = "redis"))]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The example's binary, built beside this test's (`target/<profile>/examples/`).
fn example() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    profile.join("examples").join("prometheus")
}

fn scrape(addr: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).unwrap();
    body
}

#[test]
fn the_prometheus_example_serves_holds_leader_and_term() {
    let redis = fencelock_testkit::RedisServer::start().expect("start redis");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(example())
        .args([redis.url(), addr.clone()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the example is built with the tests (cargo test --all-features)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let term = line
        .trim_end()
        .strip_suffix(')')
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("serving line: {line:?}"));
    let text = scrape(&addr);
    for expected in [
        "fencelock_holds{kind=\"mutex\"} 1".to_owned(),
        "fencelock_holds{kind=\"leader\"} 1".to_owned(),
        "fencelock_leader{election=\"prometheus-example\"} 1".to_owned(),
        format!("fencelock_leader_term{{election=\"prometheus-example\"}} {term}"),
        "fencelock_acquisitions_total{kind=\"first\"} 2".to_owned(),
    ] {
        assert!(text.lines().any(|l| l == expected), "{expected}\n{text}");
    }
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert!(status.success());
}
