//! Server-side cost per uncontended pair, free of timing noise: `redis-server` runs under
//! `valgrind --tool=callgrind` (started here, stopped by its PID), the library makes a few
//! and then many pairs against it, each count on a fresh server, and the difference in the
//! server's instructions is divided by the difference in pairs: start-up, connecting and
//! loading scripts cancel out.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::libs::{Locker, Variant};
use crate::scenarios::RSLOCK_RETRY;

/// Pair counts of the two runs whose difference is measured.
const FEW: u64 = 200;
const MANY: u64 = 1200;

/// A `redis-server` under callgrind, on a free loopback port.
struct Profiled {
    child: Child,
    port: u16,
    out: std::path::PathBuf,
}

impl Profiled {
    fn start() -> Self {
        let port = fencelock_testkit::free_port().expect("a free port");
        let out = std::env::temp_dir().join(format!("fencelock-bench.server.{port}.callgrind"));
        let child = Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .args([
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                &port.to_string(),
            ])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("valgrind (apt-get install valgrind)");
        let server = Self { child, port, out };
        let deadline = Instant::now() + Duration::from_secs(60);
        while server.send("PING").as_deref() != Some("+PONG") {
            assert!(
                Instant::now() < deadline,
                "redis-server under valgrind did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// Sends one inline command; returns the first line of the reply.
    fn send(&self, command: &str) -> Option<String> {
        let mut conn = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        conn.write_all(format!("{command}\r\n").as_bytes()).ok()?;
        let mut reply = [0u8; 64];
        let n = conn.read(&mut reply).ok()?;
        Some(String::from_utf8_lossy(&reply[..n]).trim_end().to_owned())
    }

    /// Stops the server (SHUTDOWN, then its PID if it lingers) and returns its instructions.
    fn stop(mut self) -> f64 {
        let _ = self.send("SHUTDOWN NOSAVE");
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let file = std::fs::read_to_string(&self.out).unwrap_or_default();
        let _ = std::fs::remove_file(&self.out);
        file.lines()
            .find_map(|l| l.strip_prefix("summary:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("callgrind summary")
    }
}

/// The server's instructions for `pairs` pairs of `variant`, on a fresh server.
fn instructions(runtime: &tokio::runtime::Runtime, variant: Variant, pairs: u64) -> f64 {
    let server = Profiled::start();
    let url = format!("redis://127.0.0.1:{}", server.port);
    runtime.block_on(async {
        let locker = Locker::connect(variant, &[url], RSLOCK_RETRY).await;
        let lock = locker.handle("bench:server-profile");
        for _ in 0..pairs {
            lock.pair().await;
        }
    });
    server.stop()
}

/// The server's instructions per uncontended pair, for every variant.
pub fn measure(runtime: &tokio::runtime::Runtime) -> Value {
    let mut out = Map::new();
    for variant in Variant::ALL {
        eprintln!("redis-server under valgrind: {}…", variant.name());
        let many = instructions(runtime, variant, MANY);
        let few = instructions(runtime, variant, FEW);
        let per_pair = (many - few) / (MANY - FEW) as f64;
        out.insert(
            variant.name().into(),
            json!({"server_instructions_per_pair": per_pair}),
        );
    }
    Value::Object(out)
}
