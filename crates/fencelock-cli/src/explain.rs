//! Library errors in the CLI's words: what happened, and what to do about it (issue 23,
//! point 10). The library's own text names its options and transports; a user of the
//! command knows flags, environment variables and URLs.

use fencelock::{Error, InputError, LostReason};

use crate::args::Connection;
use crate::exit;

/// "a Redis", "an etcd".
fn a(service: &str) -> String {
    match service.starts_with(['a', 'e', 'i', 'o', 'u']) {
        true => format!("an {service}"),
        false => format!("a {service}"),
    }
}

/// Prints `e` as the CLI explains it; returns the exit code.
pub fn report(e: &Error, conn: &Connection) -> u8 {
    eprintln!("fencelock: {}", explain(e, conn, false));
    code(e)
}

/// [`report`] for an error on connecting: a server that answers, but not as the URL's
/// service does, is another kind of server (the transport's own text, which names parsers,
/// HTTP/2 frames or gRPC, is shown with `-v`).
pub fn report_connect(e: &Error, conn: &Connection) -> u8 {
    tracing::debug!(error = %e, "connecting failed");
    eprintln!("fencelock: {}", explain(e, conn, true));
    code(e)
}

/// The exit code for `e`: [`exit::for_error`], except that every unusable set of URLs is a
/// configuration error, as a bad URL is.
pub fn code(e: &Error) -> u8 {
    match e {
        Error::InvalidInput(InputError::InvalidOption { option, .. }) if *option == "urls" => {
            exit::CONNECTION
        }
        e => exit::for_error(e),
    }
}

/// `e` in the CLI's words.
pub fn explain(e: &Error, conn: &Connection, connecting: bool) -> String {
    let urls = conn.urls();
    let service = crate::services::service(urls.first().map_or("", String::as_str));
    let text = e.to_string();
    let has = |words: &[&str]| words.iter().any(|w| text.contains(w));
    match e {
        Error::InvalidInput(InputError::InvalidOption { option, reason }) if *option == "urls" => {
            format!(
                "--url was given {} times, but {reason}: give one URL, or an odd number of \
                 independent redis:// servers for RedLock",
                urls.len()
            )
        }
        Error::Denied { server, .. } if has(&["NOAUTH", "HELLO must be called", "required"]) => {
            match conn.password() {
                None => format!(
                    "server {server} needs a password: give it with --password or \
                     FENCELOCK_PASSWORD"
                ),
                Some(_) => format!(
                    "server {server} refused the password: check --password or \
                     FENCELOCK_PASSWORD (and the user name in the URL)"
                ),
            }
        }
        Error::Denied { server, .. } if has(&["WRONGPASS", "invalid username-password"]) => {
            format!(
                "server {server} refused the password or user name: check --password or \
                 FENCELOCK_PASSWORD, and the user in the URL"
            )
        }
        Error::Denied { server, detail, .. } => format!(
            "server {server} refused access ({detail}): check the password (--password or \
             FENCELOCK_PASSWORD) and the user's permissions on the lock's keys"
        ),
        // Once connected, the server answered as the service does: a reset or a closed stream
        // means it went away, not that it is another kind of server.
        Error::Unavailable { server, .. }
        | Error::Protocol { server, .. }
        | Error::Server { server, .. }
            if !connecting && is_cut(&text) =>
        {
            tracing::debug!(error = %e, "the server went away");
            format!(
                "the connection to server {server} was cut: has the {service} server stopped, \
                 or is it unreachable? (-v shows the transport's own words)"
            )
        }
        Error::Unavailable { server, .. }
        | Error::Protocol { server, .. }
        | Error::Server { server, .. }
            if is_other_protocol(&text)
                || (connecting
                    && (is_cut(&text) || (!is_refused(&text) && !has(&["request bound"])))) =>
        {
            format!(
                "the server at {server} does not answer as {} server does: is it another \
                 kind of server? {}",
                a(service),
                crate::services::url_hint()
            )
        }
        Error::Unavailable { server, .. } if is_refused(&text) => format!(
            "nothing answers at {server}: is the {service} server running there? {}",
            crate::services::url_hint()
        ),
        Error::Unavailable { server, .. } if has(&["request bound"]) => format!(
            "the server at {server} did not answer in time: is it running, and is it {} \
             server? {}",
            a(service),
            crate::services::url_hint()
        ),
        _ => family(e, &text).unwrap_or_else(|| text.replace("request bound", "time limit")),
    }
}

/// The lock family's errors in the CLI's words (`run -s`/`-x`, `--permits`), if `e` is one.
fn family(e: &Error, text: &str) -> Option<String> {
    Some(match e {
        Error::Unsupported { what, .. } if *what == "a read-write lock" => format!(
            "{text}; `run -s` and `run -x` need a service that offers read-write locks \
             (plain `run NAME` takes a mutex)"
        ),
        Error::Unsupported { what, .. } if *what == "a semaphore" => {
            format!("{text}; `run --permits` needs a service that offers semaphores")
        }
        Error::PermitsMismatch {
            lock,
            stored,
            asked,
        } => format!(
            "semaphore {lock:?} is in use with {stored} permits, but --permits {asked} was \
             asked: give --permits {stored} (the number is stored while a permit is held or \
             awaited)"
        ),
        Error::PrimitiveMismatch { .. } => format!(
            "{text}: one name is one primitive; use another name, or take it as it is used \
             (`run NAME`: mutex; `run -s`/`-x`: read-write lock; `run --permits N`: \
             semaphore; `elect`: election)"
        ),
        _ => return None,
    })
}

/// Whether a transport's message says the peer speaks another protocol.
fn is_other_protocol(text: &str) -> bool {
    [
        "Parse error",
        "parse error",
        "Unexpected `",
        "h2 protocol error",
        "http2 error",
        "invalid HTTP",
        "protocol error",
    ]
    .iter()
    .any(|w| text.contains(w))
}

/// Whether a transport's message says the peer hung up: at connect, another kind of server
/// that hangs up at the first request (etcd's HTTP/2 does); later, a server that went away.
fn is_cut(text: &str) -> bool {
    [
        "GoAway",
        "Connection reset by peer",
        "ConnectionReset",
        "os error 104",
        "broken pipe",
        "Broken pipe",
    ]
    .iter()
    .any(|w| text.contains(w))
}

/// Whether a transport's message says nothing listens there.
fn is_refused(text: &str) -> bool {
    [
        "Connection refused",
        "tcp connect error",
        "no available hosts",
        "os error 111",
    ]
    .iter()
    .any(|w| text.contains(w))
}

/// Why a holding was lost, in the words of the service it was on: Redis keeps a key with a
/// lease, ZooKeeper a node in a session, etcd a key under a lease. Without parentheses, since
/// the message around it has its own.
pub fn lost_reason(reason: Option<LostReason>, conn: &Connection) -> String {
    let urls = conn.urls();
    let service = crate::services::service(urls.first().map_or("", String::as_str));
    let (entry, session) = match service {
        "ZooKeeper" => ("node", "ZooKeeper session"),
        "etcd" => ("key", "etcd lease"),
        _ => ("key", "lease"),
    };
    match reason {
        Some(LostReason::Deadline) if session == "lease" => {
            "the lease ran out without a successful renewal: the server was not heard from"
                .to_string()
        }
        Some(LostReason::Deadline) => {
            format!("the client's {session} ran out: the server was not heard from in time")
        }
        Some(LostReason::Session) => {
            format!("the client's {session} expired, was closed or was revoked")
        }
        Some(LostReason::Deleted) => {
            format!("its {entry} was deleted by another client, a forced unlock")
        }
        Some(reason) => reason.to_string(),
        None => "the lease ran out".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        conn: Connection,
    }

    fn conn(url: &str) -> Connection {
        Args::parse_from(["test", "--url", url]).conn
    }

    /// Issue 33, found 5: an etcd observer whose server went away (a reset connection, once
    /// connected) is not asked whether it talks to another kind of server.
    #[test]
    fn a_server_that_went_away_is_not_another_kind_of_server() {
        let conn = conn("etcd://127.0.0.1:2379");
        for detail in [
            "etcd: grpc request error: transport error: Connection reset by peer (os error 104)",
            "etcd: h2 protocol error: stream closed because of a broken pipe",
        ] {
            let e = Error::Unavailable {
                lock: Some("e".into()),
                server: "127.0.0.1:2379".into(),
                detail: detail.into(),
            };
            let later = explain(&e, &conn, false);
            assert!(!later.contains("another kind of server"), "{later}");
            assert!(
                later.contains("connection to server 127.0.0.1:2379 was cut"),
                "{later}"
            );
            // At connect, the same words may well mean another kind of server.
            assert!(explain(&e, &conn, true).contains("another kind of server"));
        }
    }

    /// Issue 33, found 5: loss reasons in each service's words, without parentheses.
    #[test]
    fn loss_reasons_speak_of_each_services_own_entry() {
        let all = [
            LostReason::Deadline,
            LostReason::Renewal,
            LostReason::Session,
            LostReason::Deleted,
        ];
        for (url, entry) in [
            ("redis://127.0.0.1:6379", "key"),
            ("zk://127.0.0.1:2181", "node"),
            ("etcd://127.0.0.1:2379", "key"),
        ] {
            let conn = conn(url);
            for reason in all {
                let text = lost_reason(Some(reason), &conn);
                assert!(!text.contains(['(', ')']), "{url}: {text}");
                assert!(!text.contains("node or key"), "{url}: {text}");
            }
            let deleted = lost_reason(Some(LostReason::Deleted), &conn);
            assert!(
                deleted.contains(&format!("its {entry} was deleted")),
                "{deleted}"
            );
        }
    }
}
