//! Bad input is rejected with a typed error, before any I/O.
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use common::*;
use fencelock::{Client, ClientOptions, Error, InputError, LockOptions, MAX_TIMEOUT};

fn input_error<T: std::fmt::Debug>(r: Result<T, Error>) -> InputError {
    match r {
        Err(Error::InvalidInput(e)) => e,
        other => panic!("expected an input error, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_names_leases_and_owners_are_rejected_before_any_io() {
    let server = server();
    let client = client(&server).await;
    let before = server.command_calls("evalsha") + server.command_calls("eval");

    let long = "n".repeat(513);
    type Expect = fn(&InputError) -> bool;
    let cases: Vec<(fencelock::Lock, Expect)> = vec![
        (client.lock(""), |e| matches!(e, InputError::EmptyName)),
        (client.lock(&long), |e| {
            matches!(e, InputError::NameTooLong { len: 513, max: 512 })
        }),
        (client.lock("a{b}"), |e| {
            matches!(e, InputError::NameHasBrace { .. })
        }),
        (
            client
                .lock("ok")
                .with_options(LockOptions::default().lease(Duration::ZERO)),
            |e| matches!(e, InputError::ZeroLease),
        ),
        (
            client
                .lock("ok")
                .with_options(LockOptions::default().lease(Duration::from_millis(5))),
            |e| matches!(e, InputError::LeaseTooShort { .. }),
        ),
        (
            client
                .lock("ok")
                .with_options(LockOptions::default().lease(Duration::from_secs(8 * 24 * 3600))),
            |e| matches!(e, InputError::LeaseTooLong { .. }),
        ),
        (
            client
                .lock("ok")
                .with_options(LockOptions::default().lease(Duration::from_micros(1_500_500))),
            |e| matches!(e, InputError::LeaseNotWholeMillis { .. }),
        ),
        (client.lock("ok").with_owner(""), |e| {
            matches!(e, InputError::InvalidOwner { .. })
        }),
        (client.lock("ok").with_owner("=token"), |e| {
            matches!(e, InputError::InvalidOwner { .. })
        }),
        (client.lock("ok").with_owner("two words"), |e| {
            matches!(e, InputError::InvalidOwner { .. })
        }),
    ];
    for (lock, expected) in cases {
        let e = input_error(lock.acquire().await);
        assert!(expected(&e), "{lock:?}: {e}");
        assert!(expected(&input_error(lock.try_acquire().await)));
        assert!(expected(&input_error(
            lock.acquire_timeout(Duration::from_secs(1)).await
        )));
        assert!(expected(&input_error(lock.release().await)));
        assert!(expected(&input_error(lock.status().await)));
        // The message says what is wrong.
        assert!(!e.to_string().is_empty());
    }
    assert!(matches!(
        input_error(client.status("").await),
        InputError::EmptyName
    ));
    assert!(matches!(
        input_error(client.force_unlock("x}").await),
        InputError::NameHasBrace { .. }
    ));

    // A bad extension is rejected too, without touching the lock.
    let guard = client.lock("ok").acquire().await.unwrap();
    let e = input_error(guard.extend(Duration::ZERO).await);
    assert!(matches!(e, InputError::ZeroLease));
    guard.release().await.unwrap();

    // Nothing above reached the server but the one acquire and release.
    let after = server.command_calls("evalsha") + server.command_calls("eval");
    assert!(after - before <= 4, "{} scripts ran", after - before);
    let long_name = format!("fencelock:{{{long}}}");
    assert_eq!(
        server.command(&["EXISTS", &long_name]).unwrap().int(),
        Some(0)
    );
}

#[tokio::test]
async fn bad_urls_and_options_are_rejected_before_connecting() {
    for url in [
        "",
        "127.0.0.1:6379",
        "http://127.0.0.1:1",
        "redis://",
        "redis://h:port",
    ] {
        let e = input_error(Client::connect(url).await);
        assert!(matches!(e, InputError::InvalidUrl { .. }), "{url}: {e}");
    }
    let e = input_error(Client::connect("postgres://user:hunter2@h:1").await);
    assert!(!e.to_string().contains("hunter2"), "password printed: {e}");

    let bad_options = [
        ClientOptions::default().default_lease(Duration::ZERO),
        ClientOptions::default().response_timeout(Duration::ZERO),
        ClientOptions::default().connect_timeout(Duration::ZERO),
        ClientOptions::default().clock_drift(0.7, Duration::ZERO),
    ];
    for options in bad_options {
        // Port 1 would refuse; the options are rejected first.
        let e = input_error(Client::connect_with("redis://127.0.0.1:1", options.clone()).await);
        assert!(
            matches!(e, InputError::ZeroLease | InputError::InvalidOption { .. }),
            "{options:?}: {e}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_server_fails_to_connect_within_the_bound() {
    let port = fencelock_testkit::free_port().unwrap();
    let options = ClientOptions::default().connect_timeout(Duration::from_millis(300));
    let started = std::time::Instant::now();
    let e = Client::connect_with(&format!("redis://127.0.0.1:{port}"), options)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// Connections the server has accepted so far (the one this question opens included).
fn connections(server: &fencelock_testkit::RedisServer) -> u64 {
    server
        .info_field("total_connections_received")
        .and_then(|n| n.parse().ok())
        .expect("INFO total_connections_received")
}

/// Runs `f` on its own task, so that a panic is reported as a failed case rather than
/// ending the test at the first one.
async fn outcome<T: Send + 'static>(
    f: impl std::future::Future<Output = Result<T, Error>> + Send + 'static,
) -> Result<Result<T, Error>, String> {
    tokio::spawn(f).await.map_err(|e| {
        let panic = e.into_panic();
        panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    })
}

#[tokio::test]
async fn huge_timeouts_and_drift_margins_are_input_errors_not_panics() {
    let server = server();
    let url = server.url();
    let ms = Duration::from_millis;
    type Expect = fn(&InputError) -> bool;
    let too_long: Expect = |e| matches!(e, InputError::TimeoutTooLong { .. });
    let drift: Expect = |e| matches!(e, InputError::DriftTooLarge { .. });
    let cases: Vec<(&str, ClientOptions, Expect)> = vec![
        (
            "response_timeout(MAX)",
            ClientOptions::default().response_timeout(Duration::MAX),
            too_long,
        ),
        (
            "connect_timeout(MAX)",
            ClientOptions::default().connect_timeout(Duration::MAX),
            too_long,
        ),
        (
            "response_timeout(MAX_TIMEOUT + 1 ms)",
            ClientOptions::default().response_timeout(MAX_TIMEOUT + ms(1)),
            too_long,
        ),
        (
            "clock_drift(0.1, MAX)",
            ClientOptions::default().clock_drift(0.1, Duration::MAX),
            drift,
        ),
        (
            "drift margin == default lease",
            ClientOptions::default()
                .default_lease(ms(100))
                .clock_drift(0.0, ms(100)),
            drift,
        ),
        (
            "drift margin > default lease",
            ClientOptions::default()
                .default_lease(ms(100))
                .clock_drift(0.2, ms(90)),
            drift,
        ),
    ];
    let before = connections(&server);
    let mut failures = Vec::new();
    for (what, options, expected) in cases {
        let url = url.clone();
        match outcome(async move { Client::connect_with(&url, options).await }).await {
            Ok(Err(Error::InvalidInput(e))) if expected(&e) => {
                assert!(!e.to_string().is_empty())
            }
            Ok(other) => failures.push(format!("{what}: {:?}", other.map(|_| "connected"))),
            Err(panic) => failures.push(format!("{what}: panicked: {panic}")),
        }
    }
    // Rejected before connecting: only the INFO above and the one below reached the server.
    let after = connections(&server);
    if after - before != 1 {
        failures.push(format!("{} connections were made", after - before - 1));
    }

    // The longest values accepted work.
    let c = Client::connect_with(
        &url,
        ClientOptions::default()
            .connect_timeout(MAX_TIMEOUT)
            .response_timeout(MAX_TIMEOUT)
            .default_lease(ms(100))
            .clock_drift(0.0, ms(99)),
    )
    .await
    .unwrap();
    c.lock("max")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // A lock's own lease is checked against the client's margin when the lock is used.
    let client = client_with(&server, ClientOptions::default().clock_drift(0.0, ms(100))).await;
    for lease in [ms(100), ms(50)] {
        let lock = client
            .lock("drift")
            .with_options(LockOptions::default().lease(lease));
        let l = lock.clone();
        match outcome(async move { l.try_acquire().await.map(|r| r.map(|g| g.is_held())) }).await {
            Ok(Err(Error::InvalidInput(InputError::DriftTooLarge { .. }))) => {}
            other => failures.push(format!("lease {lease:?}: try_acquire gave {other:?}")),
        }
        let l = lock.clone();
        match outcome(async move { l.acquire().await.map(|g| g.is_held()) }).await {
            Ok(Err(Error::InvalidInput(InputError::DriftTooLarge { .. }))) => {}
            other => failures.push(format!("lease {lease:?}: acquire gave {other:?}")),
        }
        let _ = lock.release().await;
    }
    let held = client
        .lock("drift")
        .with_options(LockOptions::default().lease(ms(101)))
        .acquire()
        .await
        .unwrap();
    // An extension to a lease the margin would eat whole is refused too (it would not extend).
    match held.extend(ms(100)).await {
        Err(Error::InvalidInput(InputError::DriftTooLarge { .. })) => {}
        other => failures.push(format!("extend(100 ms) gave {other:?}")),
    }
    held.release().await.unwrap();

    // acquire_timeout: a timeout too long to add to now is an input error, before any I/O.
    let scripts = server.command_calls("evalsha") + server.command_calls("eval");
    for timeout in [Duration::MAX, MAX_TIMEOUT + ms(1)] {
        let lock = client.lock("wait");
        match outcome(async move { lock.acquire_timeout(timeout).await.map(|_| ()) }).await {
            Ok(Err(Error::InvalidInput(InputError::TimeoutTooLong {
                option: "acquire_timeout",
                ..
            }))) => {}
            Ok(other) => failures.push(format!("acquire_timeout({timeout:?}) gave {other:?}")),
            Err(panic) => failures.push(format!("acquire_timeout({timeout:?}) panicked: {panic}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        server.command_calls("evalsha") + server.command_calls("eval"),
        scripts
    );
    // The longest timeout accepted waits as usual.
    let lock = client.lock("wait");
    lock.acquire_timeout(MAX_TIMEOUT)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_redlock_over_one_server_twice_is_rejected_before_connecting() {
    let servers = servers(3);
    let (a, b) = (&servers[0], &servers[1]);
    let port = a.port();
    let cases: Vec<[String; 3]> = vec![
        [a.url(), a.url(), a.url()],
        [a.url(), b.url(), a.url()],
        // Names that resolve to one address, whatever the database or password.
        [
            format!("redis://localhost:{port}"),
            b.url(),
            format!("redis://127.0.0.1:{port}"),
        ],
        [
            format!("redis://:hunter2@127.0.0.1:{port}/0"),
            b.url(),
            format!("redis://LOCALHOST:{port}/3"),
        ],
    ];
    let before = (connections(a), connections(b));
    let mut failures = Vec::new();
    for urls in cases {
        let list = urls.clone();
        let result = outcome(async move {
            let urls: Vec<&str> = list.iter().map(String::as_str).collect();
            Client::connect_all(&urls).await
        })
        .await;
        match result {
            Ok(Err(Error::InvalidInput(
                ref e @ InputError::DuplicateServer {
                    ref first,
                    ref second,
                    ..
                },
            ))) => {
                let message = e.to_string();
                assert!(!message.contains("hunter2"), "password printed: {message}");
                assert_eq!(first, &fencelock::redact_url(&urls[0]), "{message}");
                assert_eq!(second, &fencelock::redact_url(&urls[2]), "{message}");
            }
            other => failures.push(format!("{urls:?}: {other:?}")),
        }
    }
    let after = (connections(a), connections(b));
    if after.0 - before.0 != 1 || after.1 - before.1 != 1 {
        failures.push(format!("connections were made: {before:?} -> {after:?}"));
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );

    // Three distinct servers are fine.
    let c = redlock(&servers, ClientOptions::default()).await;
    c.lock("x")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
