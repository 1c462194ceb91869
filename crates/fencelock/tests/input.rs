//! Bad input is rejected with a typed error, before any I/O.

mod common;

use std::time::Duration;

use common::*;
use fencelock::{Client, ClientOptions, Error, InputError, LockOptions};

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
