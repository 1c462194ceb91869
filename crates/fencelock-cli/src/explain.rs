//! Library errors in the CLI's words: what happened, and what to do about it (issue 23,
//! point 10). The library's own text names its options and transports; a user of the
//! command knows flags, environment variables and URLs.

use fencelock::{Error, InputError};

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
        Error::Unavailable { server, .. }
        | Error::Protocol { server, .. }
        | Error::Server { server, .. }
            if is_not_this_service(&text)
                || (connecting && !is_refused(&text) && !has(&["request bound"])) =>
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
             awaited), or add --resize to store {asked}"
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
fn is_not_this_service(text: &str) -> bool {
    [
        "Parse error",
        "parse error",
        "Unexpected `",
        "h2 protocol error",
        "http2 error",
        "GoAway",
        "invalid HTTP",
        "protocol error",
        // Another kind of server that hangs up at the first request (etcd's HTTP/2 does).
        "Connection reset by peer",
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

/// Why a lock was lost, in the words of the service it was on (the library's text for a
/// passed deadline covers sessions too, which a Redis lock does not have).
pub fn lost_reason(reason: Option<&str>, conn: &Connection) -> String {
    let urls = conn.urls();
    let service = crate::services::service(urls.first().map_or("", String::as_str));
    match reason {
        Some(r) if r.starts_with("the deadline passed") && service == "Redis" => {
            "the lease ran out without a successful renewal: the server was not heard from"
                .to_string()
        }
        Some(r) => r.to_string(),
        None => "the lease ran out".to_string(),
    }
}
