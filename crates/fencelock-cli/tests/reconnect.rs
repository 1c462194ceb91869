//! `fencelock run` against a server that closes idle clients (`timeout`, as production servers
//! often set): a closed connection is not a connection error (exit 69).

use std::time::Duration;

use fencelock::{Client, LockOptions, Released};
use fencelock_testkit::RedisServer;
use tokio::process::Command;

async fn within<T>(secs: u64, what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

fn queue_len(server: &RedisServer, name: &str) -> i64 {
    server
        .command(&["LLEN", &format!("fencelock:{{{name}}}:queue")])
        .ok()
        .and_then(|r| r.int())
        .unwrap_or(0)
}

/// `fencelock run` waits behind a holder on a server with `timeout 1`. Its place in the queue
/// is renewed every 2.5 s, on a command connection the server closed in between (before: exit
/// 69, "broken pipe"); it gets the lock when the holder, idle as long, releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_waits_on_a_server_that_closes_idle_clients() {
    let server = RedisServer::builder()
        .config("timeout", "1")
        .start()
        .unwrap();
    let holder = Client::connect(&server.url()).await.unwrap();
    let guard = holder
        .lock("nightly")
        .with_options(LockOptions::default().lease(Duration::from_secs(30)))
        .acquire()
        .await
        .unwrap();
    let mut run = Command::new(env!("CARGO_BIN_EXE_fencelock"));
    run.env_remove("FENCELOCK_PASSWORD")
        .env("FENCELOCK_URL", server.url())
        .args(["run", "--key", "nightly", "--", "true"])
        .kill_on_drop(true);
    let mut child = run.spawn().unwrap();
    within(10, "the CLI took its place", async {
        while queue_len(&server, "nightly") == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let renewals = server.command_calls("evalsha");
    // Past one renewal of the place (every 2.5 s), or the CLI's exit.
    let early = within(10, "the CLI renewed its place", async {
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if server.command_calls("evalsha") > renewals {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(early, None, "the CLI gave up while waiting");
    assert_eq!(guard.release().await.unwrap(), Released::Released);
    let status = within(10, "the CLI ran and exited", child.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
}
