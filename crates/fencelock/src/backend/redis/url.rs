//! Server URLs: parsing, checking, and never printing a password.

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::error::InputError;
use crate::redact::redact_url;

/// Where a URL points.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// `redis://host:port/db`: one server.
    Single(ConnectionInfo),
    /// `redis+cluster://host:port,host:port,...`: seed nodes of a Redis Cluster.
    Cluster(Vec<ConnectionInfo>),
    /// `redis+sentinel://host:port,host:port,.../master-name[/db]`: sentinels and the name
    /// of the master they watch.
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        master: String,
        /// Password and database for the master (from the URL's userinfo and db).
        node: redis::RedisConnectionInfo,
    },
}

/// Parses one of the URL forms of [`Target`], with a clear error for anything else.
pub(crate) fn parse_target(url: &str) -> Result<Target, InputError> {
    let invalid = |reason: String| InputError::InvalidUrl {
        url: redact_url(url),
        reason,
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(invalid("expected redis://host:port".into()));
    };
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((u, r)) if !r.contains('@') => (Some(u), r),
        _ => (None, rest),
    };
    let with_userinfo = |hostport: &str, path: &str| match userinfo {
        Some(u) => format!("redis://{u}@{hostport}{path}"),
        None => format!("redis://{hostport}{path}"),
    };
    let hosts = |list: &str| -> Result<Vec<ConnectionInfo>, InputError> {
        if list.is_empty() {
            return Err(invalid("the URL names no host".into()));
        }
        list.split(',')
            .map(|h| {
                parse(&with_userinfo(h, "")).map_err(|e| match e {
                    InputError::InvalidUrl { reason, .. } => invalid(reason),
                    other => other,
                })
            })
            .collect()
    };
    match scheme {
        "redis" => parse(url).map(Target::Single),
        "redis+cluster" => {
            let list = rest.trim_end_matches('/');
            if list.contains('/') {
                return Err(invalid("a cluster URL has no database or path".into()));
            }
            Ok(Target::Cluster(hosts(list)?))
        }
        "redis+sentinel" => {
            let (list, path) = rest.split_once('/').ok_or_else(|| {
                invalid("expected redis+sentinel://host:port,.../master-name".into())
            })?;
            let (master, db) = match path.split_once('/') {
                Some((m, db)) => (m, Some(db)),
                None => (path, None),
            };
            if master.is_empty() {
                return Err(invalid("the URL names no master (…/master-name)".into()));
            }
            // Errors about the parts below name the URL the caller gave, not the part.
            let whole = |e: InputError| match e {
                InputError::InvalidUrl { reason, .. } => invalid(reason),
                other => other,
            };
            // The master gets the URL's password and database; sentinels get neither.
            let node = parse(&with_userinfo("127.0.0.1", db.map(|d| format!("/{d}")).as_deref().unwrap_or("")))
                .map_err(whole)?
                .redis_settings()
                .clone();
            let sentinels = list
                .split(',')
                .map(|h| parse(&format!("redis://{h}")).map_err(whole))
                .collect::<Result<Vec<_>, _>>()?;
            if sentinels.is_empty() {
                return Err(invalid("the URL names no sentinel".into()));
            }
            Ok(Target::Sentinel {
                sentinels,
                master: master.to_owned(),
                node,
            })
        }
        other => Err(invalid(format!(
            "scheme {other:?} is not one fencelock knows; expected redis://, redis+cluster:// or redis+sentinel://"
        ))),
    }
}

/// Parses a `redis://` URL.
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
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    if host.is_empty() || host.starts_with('/') || host.starts_with(':') {
        return Err(invalid("the URL names no host".into()));
    }
    url.into_connection_info().map_err(|e| {
        let reason = e.to_string();
        // redis-rs repeats some parts of the URL in its detail (a `?protocol=` value), which
        // can hold what the caller meant as the password: leave the detail out then.
        match (e.detail(), password(url)) {
            (Some(detail), Some(pw)) if detail.contains(pw) => invalid(
                reason
                    .strip_suffix(detail)
                    .map_or(reason.as_str(), |r| r.trim_end_matches(": "))
                    .to_owned(),
            ),
            _ => invalid(reason),
        }
    })
}

/// The password as [`redact_url`](crate::redact_url) finds it (after the first `:` of everything before the last
/// `@`, or all of that without a `:`), if it is not empty.
fn password(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (userinfo, _) = rest.rsplit_once('@')?;
    let pw = userinfo.split_once(':').map_or(userinfo, |(_, pw)| pw);
    (!pw.is_empty()).then_some(pw)
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn cluster_and_sentinel_urls() {
        match parse_target("redis+cluster://:pw@a:7000,b:7001,c:7002").unwrap() {
            Target::Cluster(nodes) => {
                assert_eq!(nodes.len(), 3);
                assert_eq!(server_name(&nodes[1]), "b:7001");
                assert_eq!(nodes[2].redis_settings().password(), Some("pw"));
            }
            other => panic!("{other:?}"),
        }
        match parse_target("redis+sentinel://:pw@s1:26379,s2:26380/mymaster/2").unwrap() {
            Target::Sentinel {
                sentinels,
                master,
                node,
            } => {
                assert_eq!(sentinels.len(), 2);
                assert_eq!(master, "mymaster");
                assert_eq!(node.db(), 2);
                assert_eq!(node.password(), Some("pw"));
                assert_eq!(sentinels[0].redis_settings().password(), None);
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            "redis+sentinel://s1:26379",
            "redis+sentinel://s1:26379/",
            "redis+cluster://",
            "redis+cluster://a:1/0",
            "redis+nope://a:1",
        ] {
            assert!(
                matches!(parse_target(bad), Err(InputError::InvalidUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn errors_never_show_the_password() {
        let err = parse("http://user:hunter2@h:1").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        for url in [
            "redis://:hun/ter2@h:1",
            "redis+cluster://:hun#ter2@a:1,b:x",
            "redis+sentinel://:hunter2@s:x/m",
            "user:hunter2@h:1",
        ] {
            let err = parse_target(url).unwrap_err();
            assert!(!err.to_string().contains("hun"), "{err}");
        }
    }

    #[test]
    fn a_redis_rs_detail_holding_the_password_is_left_out() {
        // Found by the `url` fuzz target: redis-rs repeats a bad `protocol` value, which here
        // runs over what fencelock reads as the password.
        let url = "redis://17.1?protocol=s://17.resp30/0.:@379";
        let e = parse(url).unwrap_err();
        assert!(!e.to_string().contains("//17.resp30/0."), "{e}");
        assert!(e.to_string().contains("Invalid protocol version"), "{e}");
        // Other details stay.
        let e = parse("redis://:pw@h:1?protocol=9").unwrap_err();
        assert!(e.to_string().contains(": 9"), "{e}");
        assert_eq!(password("redis://u:p@w@h"), Some("p@w"));
        assert_eq!(password("redis://s@h"), Some("s"));
        assert_eq!(password("redis://u:@h"), None);
        assert_eq!(password("redis://h"), None);
    }

    #[test]
    fn sentinel_errors_name_the_whole_url() {
        let url = "redis+sentinel://s:1,s:x/m";
        match parse_target(url) {
            Err(InputError::InvalidUrl { url: shown, .. }) => assert_eq!(shown, url),
            other => panic!("{other:?}"),
        }
    }
}
