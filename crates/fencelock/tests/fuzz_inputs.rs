//! Property tests over the inputs fencelock does not control: server URLs (every scheme, with
//! passwords, ports, databases), lock names, owner ids, and option durations. They run in the
//! normal suite with a bounded number of cases; the libFuzzer targets in `fuzz/` drive the
//! same code for as long as one likes (see fuzz/README.md).
//!
//! The URL parser, the name checks and the Redis keys are private to the library, so their
//! source files are compiled into this test as modules of its own (`#[path]`): the code under
//! test is the library's, byte for byte, and `crate::error::InputError` resolves to the
//! library's type through the `error` module below. (Their own unit tests come along and run here too.)
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use fencelock::{Client, ClientOptions, Error, InputError, LockOptions, MAX_LEASE, MAX_TIMEOUT};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// What the included sources call `crate::error`.
mod error {
    pub use fencelock::InputError;
}

/// What the included sources call `crate::redact`.
mod redact {
    pub use fencelock::redact_url;
}

#[allow(dead_code)]
#[path = "../src/backend/redis/url.rs"]
mod url;

#[allow(dead_code)]
#[path = "../src/name.rs"]
mod name;

#[allow(dead_code)]
#[path = "../src/backend/redis/keys.rs"]
mod keys;

/// Cases per property: enough to cover every generator branch many times, few enough that the
/// whole file runs in seconds on a loaded two-core machine.
fn config(cases: u32) -> Config {
    Config {
        cases,
        // Shrinking is what takes long when something fails; the failure is shown either way.
        max_shrink_iters: 2_000,
        ..Config::default()
    }
}

/// A password that appears nowhere else in the generated URLs (no host, scheme or path has
/// `Zq`), with the characters that confuse URL splitting: `/`, `?`, `#`, `@`, `:`, `%`.
fn password() -> impl Strategy<Value = String> {
    "Zq[a-z0-9/?#@:%]{1,10}"
}

fn host() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just("localhost".to_owned()),
        Just("127.0.0.1".to_owned()),
        Just("[::1]".to_owned()),
        Just("[::1".to_owned()),
        Just("0.0.0.0".to_owned()),
        Just("LocalHost".to_owned()),
        Just(String::new()),
        "[a-y0-9.-]{1,12}",
        // No `@`: the password property needs the last `@` to end the userinfo.
        "[^Zq@]{0,6}",
    ];
    let port = prop_oneof![
        Just(String::new()),
        Just(":".to_owned()),
        Just(":0".to_owned()),
        Just(":6379".to_owned()),
        Just(":65535".to_owned()),
        Just(":65536".to_owned()),
        Just(":99999999999999999999".to_owned()),
        Just(":-1".to_owned()),
        Just(":x".to_owned()),
    ];
    (name, port).prop_map(|(n, p)| format!("{n}{p}"))
}

/// URLs of every form fencelock knows and some it does not, each part often valid and often
/// not, and the password (if any) returned beside the URL.
fn url_with_password() -> impl Strategy<Value = (String, Option<String>)> {
    let scheme = prop_oneof![
        Just("redis"),
        Just("redis+cluster"),
        Just("redis+sentinel"),
        Just("rediss"),
        Just("redis+unix"),
        Just("unix"),
        Just("valkey"),
        Just("http"),
        Just(""),
    ];
    let user = prop_oneof![Just(""), Just("user"), Just("default"), Just("u%20v")];
    let userinfo = prop_oneof![
        Just(None),
        (user, password()).prop_map(|(u, p)| Some((format!("{u}:{p}"), p))),
        // A lone userinfo is the password; with a `:` it would be `user:password`.
        password()
            .prop_filter("no ':'", |p| !p.contains(':'))
            .prop_map(|p| Some((p.clone(), p))),
    ];
    let path = prop_oneof![
        Just(String::new()),
        Just("/".to_owned()),
        Just("/0".to_owned()),
        Just("/15".to_owned()),
        Just("/16".to_owned()),
        Just("/-1".to_owned()),
        Just("/99999999999999999999".to_owned()),
        Just("/mymaster".to_owned()),
        Just("/mymaster/2".to_owned()),
        Just("/mymaster/x".to_owned()),
        Just("//".to_owned()),
        Just("?db=1".to_owned()),
        Just("#frag".to_owned()),
        "/[^Zq@]{0,8}",
    ];
    (scheme, userinfo, prop::collection::vec(host(), 1..4), path).prop_map(
        |(scheme, userinfo, hosts, path)| {
            let (auth, password) = match userinfo {
                Some((u, p)) => (format!("{u}@"), Some(p)),
                None => (String::new(), None),
            };
            (
                format!("{scheme}://{auth}{}{path}", hosts.join(",")),
                password,
            )
        },
    )
}

/// Checks one URL: parsing never panics, a parsed URL has the shape its scheme promises, and
/// neither the redacted URL nor an error message shows the password.
fn check_url(url: &str, password: Option<&str>) -> Result<(), TestCaseError> {
    let redacted = fencelock::redact_url(url);
    prop_assert_eq!(
        &fencelock::redact_url(&redacted),
        &redacted,
        "not idempotent"
    );
    let parsed = url::parse_target(url);
    if let Some(pw) = password {
        prop_assert!(
            !redacted.contains(pw),
            "redacted URL shows {pw:?}: {redacted}"
        );
        if let Err(e) = &parsed {
            let message = e.to_string();
            prop_assert!(!message.contains(pw), "error shows {pw:?}: {message}");
        }
    }
    match parsed {
        Ok(url::Target::Single(info)) => {
            prop_assert!(url.starts_with("redis://"));
            prop_assert!(!url::server_name(&info).is_empty());
        }
        Ok(url::Target::Cluster(nodes)) => {
            prop_assert!(url.starts_with("redis+cluster://"));
            prop_assert!(!nodes.is_empty());
        }
        Ok(url::Target::Sentinel {
            sentinels, master, ..
        }) => {
            prop_assert!(url.starts_with("redis+sentinel://"));
            prop_assert!(!sentinels.is_empty() && !master.is_empty());
        }
        Err(InputError::InvalidUrl { url: shown, reason }) => {
            prop_assert_eq!(shown, redacted);
            prop_assert!(!reason.is_empty());
        }
        Err(other) => prop_assert!(false, "not an InvalidUrl: {other:?}"),
    }
    Ok(())
}

#[test]
fn structured_urls_parse_or_fail_cleanly_and_never_show_the_password() {
    TestRunner::new(config(3_000))
        .run(&url_with_password(), |(url, password)| {
            check_url(&url, password.as_deref())
        })
        .unwrap();
}

#[test]
fn arbitrary_strings_as_urls_never_panic() {
    let any = prop_oneof![
        any::<String>(),
        "(redis|redis\\+cluster|redis\\+sentinel)://[ -~]{0,40}",
    ];
    TestRunner::new(config(3_000))
        .run(&any, |url| check_url(&url, None))
        .unwrap();
}

/// Passwords that earlier versions printed: `/`, `?` or `#` in a password ended the authority
/// part for `redact_url`, which then showed the URL unchanged.
#[test]
fn passwords_with_url_delimiters_are_redacted() {
    for (url, pw) in [
        ("redis://:pa/ss@h:1", "pa/ss"),
        ("redis://u:p?w@h:1/0", "p?w"),
        ("redis://:p#w@h:1", "p#w"),
        ("redis://:p@w@h:1", "p@w"),
        ("redis+cluster://:se/cret@a:1,b:2", "se/cret"),
        ("redis+sentinel://:se#cret@s:1/m", "se#cret"),
    ] {
        check_url(url, Some(pw)).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

#[test]
fn names_are_accepted_exactly_as_documented_and_keep_their_hash_tag() {
    let names = prop_oneof![
        any::<String>(),
        "[a-z{}:]{0,8}",
        Just("x".repeat(fencelock::MAX_NAME_LEN)),
        Just("é".repeat(fencelock::MAX_NAME_LEN / 2 + 1)),
    ];
    TestRunner::new(config(4_000))
        .run(&names, |name| {
            // The rules every service shares, then the Redis family's own (no braces).
            let expected = !name.is_empty() && name.len() <= fencelock::MAX_NAME_LEN;
            let checked = fencelock::validate_name(&name);
            prop_assert_eq!(checked.is_ok(), expected, "{:?}: {:?}", name, checked);
            let redis = keys::check_name(&name);
            prop_assert_eq!(redis.is_ok(), !name.contains(['{', '}']), "{:?}", name);
            let (Ok(lock), Ok(())) = (name::LockName::new(&name), redis) else {
                return Ok(());
            };
            let keys = keys::LockKeys::of(&std::sync::Arc::new(lock));
            // Redis Cluster hashes the part between the first `{` and the next `}`: for every
            // key of the lock that must be the name, so that all share one slot. A command
            // gets the key's text as one argument.
            for key in [
                keys.lock(),
                keys.fence(),
                keys.channel(),
                keys.queue(),
                keys.waiting(),
            ] {
                let mut cmd = redis::cmd("GET");
                cmd.arg(key);
                let text = key.to_string();
                let written = cmd.args_iter().nth(1);
                prop_assert!(
                    matches!(written, Some(redis::Arg::Simple(b)) if b == text.as_bytes())
                );
                prop_assert!(key.is(&text));
                let key = text;
                let open = key.find('{').expect("hash tag");
                let close = open + 1 + key[open + 1..].find('}').expect("hash tag end");
                prop_assert_eq!(&key[open + 1..close], name.as_str());
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn owner_ids_are_accepted_exactly_as_documented() {
    let owners = prop_oneof![
        any::<String>(),
        "[=a-z \\t:-]{0,10}",
        Just("o".repeat(fencelock::MAX_OWNER_LEN)),
        Just("o".repeat(fencelock::MAX_OWNER_LEN + 1)),
    ];
    TestRunner::new(config(4_000))
        .run(&owners, |owner| {
            let expected = !owner.is_empty()
                && owner.len() <= fencelock::MAX_OWNER_LEN
                && !owner.starts_with('=')
                && !owner.chars().any(|c| c.is_whitespace() || c.is_control());
            let checked = name::validate_owner(&owner);
            prop_assert_eq!(checked.is_ok(), expected, "{:?}: {:?}", owner, checked);
            Ok(())
        })
        .unwrap();
}

/// Durations biased towards the edges: zero, whole and fractional milliseconds, the maxima
/// and one nanosecond past them, and the far end of `Duration`.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(MAX_TIMEOUT),
        Just(MAX_TIMEOUT + Duration::from_nanos(1)),
        (0u64..100_000).prop_map(Duration::from_millis),
        (0u64..10_000_000_000).prop_map(Duration::from_nanos),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        (0u64..=MAX_LEASE.as_millis() as u64).prop_map(Duration::from_millis),
    ]
}

fn factor() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(0.01),
        Just(0.4999999),
        Just(0.5),
        Just(-0.0),
        Just(f64::NAN),
        Just(f64::INFINITY),
        any::<f64>(),
        0.0..0.5,
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A margin-and-lease pair is fine exactly when `lease * factor + min < lease`.
fn drift_leaves_some(lease: Duration, factor: f64, min: Duration) -> bool {
    lease
        .mul_f64(factor)
        .checked_add(min)
        .is_some_and(|m| m < lease)
}

/// Any combination of client options is accepted or rejected with an input error, without a
/// panic and without I/O (the empty URL is rejected only after the options were checked).
#[test]
fn client_options_are_checked_without_panicking() {
    let rt = runtime();
    let options = (duration(), duration(), duration(), factor(), duration());
    TestRunner::new(config(2_000))
        .run(&options, |(lease, connect, response, f, min)| {
            let opts = ClientOptions::default()
                .default_lease(lease)
                .connect_timeout(connect)
                .response_timeout(response)
                .clock_drift(f, min);
            let result = rt.block_on(Client::connect_with("", opts));
            let valid = (fencelock::MIN_LEASE..=MAX_LEASE).contains(&lease)
                && lease.subsec_nanos() % 1_000_000 == 0
                && [connect, response]
                    .iter()
                    .all(|t| !t.is_zero() && *t <= MAX_TIMEOUT)
                && (0.0..0.5).contains(&f)
                && drift_leaves_some(lease, f, min);
            match result {
                Err(Error::InvalidInput(InputError::InvalidUrl { .. })) => {
                    prop_assert!(
                        valid,
                        "accepted: {lease:?} {connect:?} {response:?} {f} {min:?}"
                    )
                }
                Err(Error::InvalidInput(e)) => prop_assert!(!valid, "rejected valid options: {e}"),
                other => prop_assert!(false, "{other:?}"),
            }
            Ok(())
        })
        .unwrap();
}

/// Against a real server: a lock's lease, an extension and an acquire timeout, each any
/// duration, under any accepted drift setting. No panic, and input errors exactly where the
/// documentation puts them.
#[test]
fn lock_durations_are_checked_without_panicking() {
    let server = common::server();
    let rt = runtime();
    let cases = (
        prop_oneof![
            Just(Duration::ZERO),
            (0u64..500).prop_map(Duration::from_millis)
        ],
        duration(),
        duration(),
        duration(),
    );
    TestRunner::new(config(96))
        .run(&cases, |(min, lease, extension, timeout)| {
            rt.block_on(async {
                // The default lease stays valid whatever `min` is (at most 500 ms).
                let options = ClientOptions::default().clock_drift(0.01, min);
                let client = common::client_with(&server, options).await;
                let lock = client
                    .lock("fuzz")
                    .with_options(LockOptions::default().lease(lease));
                let lease_ok = (fencelock::MIN_LEASE..=MAX_LEASE).contains(&lease)
                    && lease.subsec_nanos() % 1_000_000 == 0;
                let usable = lease_ok && drift_leaves_some(lease, 0.01, min);
                match lock.try_acquire().await {
                    Ok(Ok(guard)) => {
                        prop_assert!(usable, "acquired with lease {lease:?}, min {min:?}");
                        let ext_ok = (fencelock::MIN_LEASE..=MAX_LEASE).contains(&extension)
                            && extension.subsec_nanos() % 1_000_000 == 0
                            && drift_leaves_some(extension, 0.01, min);
                        match guard.extend(extension).await {
                            Err(Error::InvalidInput(e)) => {
                                prop_assert!(!ext_ok, "extend({extension:?}): {e}")
                            }
                            // Lost meanwhile (a lease of milliseconds): fine, not a panic.
                            Ok(()) | Err(Error::LockLost { .. }) => prop_assert!(ext_ok),
                            Err(e) => prop_assert!(false, "extend: {e}"),
                        }
                        guard.release().await.unwrap();
                    }
                    Ok(Err(busy)) => prop_assert!(false, "held by someone: {busy:?}"),
                    Err(Error::InvalidInput(e)) => {
                        prop_assert!(!usable, "rejected lease {lease:?}: {e}")
                    }
                    Err(e) => prop_assert!(false, "{e}"),
                }
                // The default lease, any timeout: only the maximum matters.
                match client.lock("fuzz-wait").acquire_timeout(timeout).await {
                    Ok(guard) => {
                        prop_assert!(timeout <= MAX_TIMEOUT);
                        guard.release().await.unwrap();
                    }
                    Err(Error::InvalidInput(InputError::TimeoutTooLong { .. })) => {
                        prop_assert!(timeout > MAX_TIMEOUT)
                    }
                    Err(e) => prop_assert!(false, "acquire_timeout({timeout:?}): {e}"),
                }
                Ok(())
            })
        })
        .unwrap();
}

/// An election value: anything the API accepts, biased towards what the Redis scripts keep
/// beside it (a kind marker at its end, `=` field names, spaces, newlines, hex), and long ones.
fn election_value() -> impl Strategy<Value = String> {
    let marker = prop_oneof![Just(":r"), Just(":w"), Just(":p")];
    let long = (0..=fencelock::MAX_VALUE_LEN - 2, marker.clone())
        .prop_map(|(n, m)| format!("{}{m}", "v".repeat(n)));
    prop_oneof![
        ("(?s).{0,40}", marker).prop_map(|(v, m)| format!("{v}{m}")),
        "=(?s).{0,40}",
        "[0-9a-f :=\n\r\t]{0,40}",
        prop::collection::vec(any::<char>(), 0..80).prop_map(String::from_iter),
        long,
    ]
    .prop_filter("at most MAX_VALUE_LEN bytes", |v| {
        v.len() <= fencelock::MAX_VALUE_LEN
    })
}

/// The leader's value as `client` reads it.
async fn leader_value(client: &Client, name: &str) -> Option<String> {
    let leader = client.election(name).leader().await.unwrap();
    leader.map(|l| l.value)
}

/// Campaigns for `value` on a task; returns once its place is in the server's queue.
async fn standing_by(
    server: &fencelock_testkit::RedisServer,
    client: &Client,
    name: &str,
    value: &str,
) -> tokio::task::JoinHandle<fencelock::Leadership> {
    let (election, value) = (client.election(name), value.to_owned());
    let standby = tokio::spawn(async move { election.campaign(&value).await.unwrap() });
    common::eventually(10.0, "the standby queued", || {
        common::queue_len(server, name) == 1
    })
    .await;
    standby
}

/// Election values through the Redis scripts (issue 31, defect 5): whatever value a
/// participant advertises, it is stored and reported exactly; a standby queued with it is
/// listed readably by `status`, takes over a lock whose holding vanished (its place read by
/// the acquire script), and is handed over to (its place read by the release script).
/// Failed before the fix for values ending in `:r`, `:w` or `:p`.
#[test]
fn election_values_are_data_in_the_redis_scripts() {
    let server = common::server();
    let rt = runtime();
    let name = "fuzz-values";
    let (lock_key, channel) = (
        format!("fencelock:{{{name}}}"),
        format!("fencelock:{{{name}}}:released"),
    );
    let clients: Vec<Client> = rt.block_on(async {
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(common::client_with(&server, common::short_lease(20_000)).await);
        }
        clients
    });
    // Few shrinking steps: each runs against the server, whose state a failure leaves
    // behind (so each case starts from a clean name).
    let config = Config {
        max_shrink_iters: 16,
        ..config(24)
    };
    TestRunner::new(config)
        .run(&(election_value(), election_value()), |(first, second)| {
            rt.block_on(async {
                let queue = (format!("{lock_key}:queue"), format!("{lock_key}:waiting"));
                server
                    .command(&["DEL", &lock_key, &queue.0, &queue.1])
                    .unwrap();
                let leading = clients[0].election(name).campaign(&first).await.unwrap();
                prop_assert_eq!(leader_value(&clients[2], name).await, Some(first.clone()));
                let standby = standing_by(&server, &clients[1], name, &second).await;
                let status = clients[2].status(name).await.unwrap();
                prop_assert!(status.waiters.iter().all(|w| w.unreadable.is_none()));
                // The holding vanishes (as at its lease's end); a message wakes the standby.
                server.command(&["DEL", &lock_key]).unwrap();
                server.command(&["PUBLISH", &channel, "fuzz"]).unwrap();
                let standby = common::within(10.0, "the standby takes over", standby)
                    .await
                    .unwrap();
                prop_assert_eq!(standby.value(), second.as_str());
                prop_assert_eq!(leader_value(&clients[2], name).await, Some(second.clone()));
                drop(leading);
                let next = standing_by(&server, &clients[0], name, &first).await;
                standby.resign().await.unwrap();
                let next = common::within(10.0, "handed over", next).await.unwrap();
                prop_assert_eq!(leader_value(&clients[2], name).await, Some(first.clone()));
                next.resign().await.unwrap();
                prop_assert!(!common::has_key(&server, name));
                Ok(())
            })
        })
        .unwrap();
}
