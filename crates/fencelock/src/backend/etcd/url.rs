//! `etcd://[user[:password]@]host:port[,host:port...][/prefix]`, and lock names as one key
//! segment below the prefix.

use crate::error::InputError;

/// The key prefix when the URL names none.
pub(crate) const DEFAULT_PREFIX: &str = "/fencelock";

/// Where an `etcd://` URL points. `Debug` leaves the password out.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct EtcdTarget {
    /// `http://host:port` for each member, as the etcd client takes them.
    pub(crate) endpoints: Vec<String>,
    /// `host:port,host:port` for errors and logs.
    pub(crate) hosts: String,
    /// Every lock named N is the key range `<prefix>/N/`.
    pub(crate) prefix: String,
    /// The etcd user and password, when the URL names a user.
    pub(crate) user: Option<(String, Option<String>)>,
}

impl std::fmt::Debug for EtcdTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdTarget")
            .field("hosts", &self.hosts)
            .field("prefix", &self.prefix)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

/// Parses an `etcd://` URL. Everything before the last `@` is user and password, as
/// [`crate::redact_url`] reads it, so that no error can show a password.
pub(crate) fn parse_target(url: &str) -> Result<EtcdTarget, InputError> {
    let invalid = |reason: &str| InputError::InvalidUrl {
        url: crate::redact_url(url),
        reason: reason.to_owned(),
    };
    let rest = url.strip_prefix("etcd://").ok_or_else(|| {
        invalid("expected etcd://[user[:password]@]host:port[,host:port...][/prefix]")
    })?;
    let (user, rest) = match rest.rsplit_once('@') {
        Some((userinfo, rest)) => (Some(user(userinfo).map_err(invalid)?), rest),
        None => (None, rest),
    };
    let (list, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if list.is_empty() {
        return Err(invalid("the URL names no host"));
    }
    let mut endpoints = Vec::new();
    for host in list.split(',') {
        match host.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>())) {
            Some((h, Ok(p))) if !h.is_empty() && p != 0 => {
                endpoints.push(format!("http://{host}"));
            }
            _ => {
                return Err(invalid(
                    "each host must be host:port with a port in 1..=65535",
                ))
            }
        }
    }
    Ok(EtcdTarget {
        endpoints,
        hosts: list.to_owned(),
        prefix: prefix(path).map_err(invalid)?,
        user,
    })
}

/// `user[:password]`: a user name is needed for a password to mean anything to etcd.
fn user(userinfo: &str) -> Result<(String, Option<String>), &'static str> {
    let (name, password) = match userinfo.split_once(':') {
        Some((name, password)) => (name, Some(password.to_owned())),
        None => (userinfo, None),
    };
    if name.is_empty() {
        return Err("etcd needs a user name with a password (etcd://user:password@host:port)");
    }
    Ok((name.to_owned(), password.filter(|p| !p.is_empty())))
}

/// The key prefix from the URL's path: `/fencelock` when empty; no empty segment, no
/// control character.
fn prefix(path: &str) -> Result<String, &'static str> {
    let path = path.trim_end_matches('/');
    if path.is_empty() {
        return Ok(DEFAULT_PREFIX.to_owned());
    }
    if path[1..].split('/').any(str::is_empty) {
        return Err("a segment of the key prefix is empty (\"//\")");
    }
    if path.chars().any(char::is_control) {
        return Err("the key prefix contains a control character");
    }
    Ok(path.to_owned())
}

/// Checks a lock name as one key segment below the prefix, before any I/O: a `/` would put
/// one lock's keys inside another's range (`a` and `a/b`), so that they would not exclude
/// each other as they should, or would exclude each other when they should not.
pub(crate) fn check_name(name: &str) -> Result<(), InputError> {
    let reason = if name.contains('/') {
        "it contains '/', which separates the segments of etcd keys"
    } else if name.chars().any(char::is_control) {
        "it contains a control character"
    } else {
        return Ok(());
    };
    Err(InputError::InvalidName {
        name: name.to_owned(),
        service: "etcd",
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed() {
        let t = parse_target("etcd://127.0.0.1:2379").unwrap();
        assert_eq!(t.endpoints, ["http://127.0.0.1:2379"]);
        assert_eq!(t.prefix, "/fencelock");
        assert_eq!(t.user, None);
        let t = parse_target("etcd://a:1,b:2,c:3/locks/prod/").unwrap();
        assert_eq!(t.hosts, "a:1,b:2,c:3");
        assert_eq!(t.endpoints.len(), 3);
        assert_eq!(t.prefix, "/locks/prod");
        let t = parse_target("etcd://me:p@ss:w@a:1/").unwrap();
        assert_eq!(t.user, Some(("me".into(), Some("p@ss:w".into()))));
        assert_eq!(t.prefix, "/fencelock");
        assert_eq!(
            parse_target("etcd://me@a:1").unwrap().user,
            Some(("me".into(), None))
        );
        for bad in [
            "etcd://",
            "etcd://a",
            "etcd://a:0",
            "etcd://a:x",
            "etcd://:1",
            "etcd://a:1,/x",
            "etcd://a:1//x",
            "etcd://a:1/x\n",
            "etcd://:secret@a:1",
            "zk://a:1",
        ] {
            assert!(
                matches!(parse_target(bad), Err(InputError::InvalidUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn passwords_stay_out_of_errors_and_debug() {
        let e = parse_target("etcd://u:hunter2@a:x").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let t = parse_target("etcd://u:hunter2@a:1").unwrap();
        assert!(!format!("{t:?}").contains("hunter2"));
    }

    #[test]
    fn names_are_single_segments() {
        for good in ["orders:42", "a.b", "..", "é"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["a/b", "/", "a\0b", "a\u{7f}"] {
            assert!(
                matches!(check_name(bad), Err(InputError::InvalidName { .. })),
                "{bad:?}"
            );
        }
    }
}
