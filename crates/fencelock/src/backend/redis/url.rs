//! Server URLs: parsing, checking, and never printing a password.

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::error::InputError;

/// Parses a `redis://` URL, with a clear error for anything else.
pub(crate) fn parse(url: &str) -> Result<ConnectionInfo, InputError> {
    let invalid = |reason: String| InputError::InvalidUrl {
        url: redact_url(url),
        reason,
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(invalid("expected redis://host:port".into()));
    };
    if scheme != "redis" {
        return Err(invalid(format!(
            "scheme {scheme:?} is not one fencelock knows; expected redis://"
        )));
    }
    if rest.is_empty() || rest.starts_with('/') || rest.starts_with(':') {
        return Err(invalid("the URL names no host".into()));
    }
    url.into_connection_info()
        .map_err(|e| invalid(e.to_string()))
}

/// `host:port` of a parsed URL.
pub(crate) fn server_name(info: &ConnectionInfo) -> String {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
        ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
        ConnectionAddr::Unix(path) => path.display().to_string(),
        other => format!("{other:?}"),
    }
}

/// The URL with any password replaced by `***`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                // `redis://secret@host`: redis-rs reads a lone userinfo as the password.
                "***".to_owned()
            };
            format!("{scheme}://{masked}@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact_url("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact_url("redis://u:pw@h:1"), "redis://u:***@h:1");
        assert_eq!(redact_url("redis://pw@h"), "redis://***@h");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn bad_urls_are_rejected() {
        for bad in [
            "",
            "localhost:6379",
            "http://h:1",
            "redis://",
            "redis://:1",
            "redis://h:notaport",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(matches!(err, InputError::InvalidUrl { .. }), "{bad}: {err}");
        }
        assert!(parse("redis://127.0.0.1:7000/2").is_ok());
    }

    #[test]
    fn errors_never_show_the_password() {
        let err = parse("http://user:hunter2@h:1").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}
