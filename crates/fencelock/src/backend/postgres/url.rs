//! `postgres://user[:password]@host[:port]/database[?schema=…&sslmode=…&listen=…]` (and
//! `postgresql://`), as libpq reads such URLs where they overlap: percent-encoded parts, the
//! port 5432 when none is given, `sslmode` as libpq names its modes.

use crate::error::InputError;

/// The schema of fencelock's tables when the URL names none.
pub(crate) const DEFAULT_SCHEMA: &str = "fencelock";

/// The longest schema name (see [`schema`]).
const MAX_SCHEMA_LEN: usize = 53;

/// The URL forms, for errors.
const FORM: &str =
    "expected postgres://user[:password]@host[:port]/database[?schema=…&sslmode=…&listen=off]";

/// How the connection is encrypted, as libpq's `sslmode` says. This build has no TLS
/// client, so the modes that allow plain text connect in plain text (as a libpq built
/// without SSL does), and the ones that demand TLS are refused when the URL is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// `disable`: plain text only.
    Disable,
    /// `allow`: plain text first (libpq tries TLS only when the server demands it).
    Allow,
    /// `prefer` (libpq's default): TLS if the server offers it, else plain text.
    Prefer,
}

/// Whether waiters listen for notifications (`LISTEN`) or only re-check the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listen {
    /// The default: listen, after checking on connect that notifications are delivered (a
    /// transaction-pooling proxy accepts `LISTEN` and delivers nothing).
    Auto,
    /// `listen=off`: never listen; waiters re-check at the documented interval.
    Off,
}

/// Where a `postgres://` URL points. `Debug` leaves the password out.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct PgTarget {
    pub(crate) user: String,
    pub(crate) password: Option<String>,
    /// A host name or an IP address (an IPv6 address without its brackets).
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) database: String,
    /// The schema of fencelock's tables (a plain identifier).
    pub(crate) schema: String,
    pub(crate) ssl: SslMode,
    pub(crate) listen: Listen,
    /// `host:port/database`, for errors and logs.
    pub(crate) shown: String,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTarget")
            .field("user", &self.user)
            .field("server", &self.shown)
            .field("schema", &self.schema)
            .field("ssl", &self.ssl)
            .field("listen", &self.listen)
            .finish()
    }
}

/// Parses a `postgres://` or `postgresql://` URL. Everything before the last `@` is user and
/// password, as [`crate::redact_url`] reads it, so that no error can show a password.
pub(crate) fn parse_target(url: &str) -> Result<PgTarget, InputError> {
    let invalid = |reason: &str| InputError::InvalidUrl {
        url: crate::redact_url(url),
        reason: reason.to_owned(),
    };
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
        .ok_or_else(|| invalid(FORM))?;
    let (userinfo, rest) = rest
        .rsplit_once('@')
        .ok_or_else(|| invalid("the URL names no user (postgres://user@host/database)"))?;
    let (user, password) = match userinfo.split_once(':') {
        Some((user, password)) => (user, Some(decode(password).map_err(invalid)?)),
        None => (userinfo, None),
    };
    let user = decode(user).map_err(invalid)?;
    if user.is_empty() {
        return Err(invalid("the user name is empty"));
    }
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, database) = rest
        .split_once('/')
        .ok_or_else(|| invalid("the URL names no database (postgres://user@host/database)"))?;
    let (host, port) = authority_of(authority).map_err(invalid)?;
    let database = decode(database).map_err(invalid)?;
    if database.is_empty() {
        return Err(invalid("the database name is empty"));
    }
    let mut target = PgTarget {
        shown: format!("{authority}/{database}"),
        user,
        password: password.filter(|p| !p.is_empty()),
        host,
        port,
        database,
        schema: DEFAULT_SCHEMA.to_owned(),
        ssl: SslMode::Prefer,
        listen: Listen::Auto,
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| invalid("a query parameter has no value (name=value)"))?;
        let value = decode(value).map_err(invalid)?;
        option(&mut target, key, &value).map_err(|reason| invalid(&reason))?;
    }
    Ok(target)
}

/// One query parameter; any other is refused, never ignored.
fn option(target: &mut PgTarget, key: &str, value: &str) -> Result<(), String> {
    match key {
        "schema" => target.schema = schema(value)?.to_owned(),
        "sslmode" => target.ssl = ssl_mode(value)?,
        "listen" => {
            target.listen = match value {
                "on" | "auto" => Listen::Auto,
                "off" => Listen::Off,
                _ => return Err(format!("listen={value}: expected on or off")),
            }
        }
        _ => {
            return Err(format!(
                "unknown parameter {key:?} (fencelock reads schema, sslmode and listen)"
            ))
        }
    }
    Ok(())
}

/// A libpq `sslmode`: the ones this build can honour, or why not.
fn ssl_mode(value: &str) -> Result<SslMode, String> {
    match value {
        "disable" => Ok(SslMode::Disable),
        "allow" => Ok(SslMode::Allow),
        "prefer" => Ok(SslMode::Prefer),
        "require" | "verify-ca" | "verify-full" => Err(format!(
            "sslmode={value} needs TLS, and this build of fencelock has no TLS client for \
             PostgreSQL; it never falls back to plain text (use a TLS-terminating proxy on \
             the client's host, or sslmode=prefer to accept plain text)"
        )),
        _ => Err(format!(
            "sslmode={value}: expected disable, allow, prefer, require, verify-ca or \
             verify-full"
        )),
    }
}

/// A schema name as fencelock writes it, quoted: a plain identifier (letters, digits, `_`,
/// not starting with a digit) of at most 53 bytes, so that neither it nor its notification
/// channel (`fencelock.<schema>`) passes PostgreSQL's 63 bytes, past which names are cut
/// (and could become another schema's).
fn schema(value: &str) -> Result<&str, String> {
    let plain = value
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    match plain && value.len() <= MAX_SCHEMA_LEN {
        true => Ok(value),
        false => Err(format!(
            "schema={value:?}: expected a plain identifier of at most 53 bytes (letters, \
             digits, _, not starting with a digit)"
        )),
    }
}

/// `host[:port]` or `[v6][:port]`; the port 5432 when none is given.
fn authority_of(authority: &str) -> Result<(String, u16), &'static str> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']').ok_or("an IPv6 host lacks its ']'")?;
            match after {
                "" => (host, None),
                after => (host, Some(after.strip_prefix(':').ok_or("expected :port")?)),
            }
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err("the URL names no host");
    }
    if host.contains(',') {
        return Err("one host only: fencelock takes one PostgreSQL server (or proxy) per URL");
    }
    let port = match port {
        None => 5432,
        Some(port) => match port.parse::<u16>() {
            Ok(p) if p != 0 => p,
            _ => return Err("the port must be in 1..=65535"),
        },
    };
    Ok((host.to_owned(), port))
}

/// Percent-decodes a part of the URL (libpq's URLs encode `@`, `:`, `/` in names so).
fn decode(part: &str) -> Result<String, &'static str> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = part.get(at + 1..at + 3).ok_or("a % escape is cut short")?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| "a % escape is not hexadecimal")?);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    let text = String::from_utf8(out).map_err(|_| "a % escape is not UTF-8")?;
    match text.contains('\0') {
        true => Err("a part of the URL contains a NUL byte"),
        false => Ok(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed() {
        let t = parse_target("postgres://app@db.example:6432/orders").unwrap();
        assert_eq!((t.user.as_str(), t.password.as_deref()), ("app", None));
        assert_eq!((t.host.as_str(), t.port), ("db.example", 6432));
        assert_eq!(t.database, "orders");
        assert_eq!(t.schema, "fencelock");
        assert_eq!((t.ssl, t.listen), (SslMode::Prefer, Listen::Auto));
        assert_eq!(t.shown, "db.example:6432/orders");
        let t = parse_target(
            "postgresql://a%40b:p@ss:w%2F@[::1]/d%20b?schema=locks&sslmode=disable&listen=off",
        )
        .unwrap();
        assert_eq!(
            (t.user.as_str(), t.password.as_deref()),
            ("a@b", Some("p@ss:w/"))
        );
        assert_eq!((t.host.as_str(), t.port), ("::1", 5432));
        assert_eq!((t.database.as_str(), t.schema.as_str()), ("d b", "locks"));
        assert_eq!((t.ssl, t.listen), (SslMode::Disable, Listen::Off));
        assert_eq!(
            parse_target("postgres://u@h/d?sslmode=allow").unwrap().ssl,
            SslMode::Allow
        );
    }

    #[test]
    fn bad_urls_are_input_errors() {
        for bad in [
            "postgres://",
            "postgres://h:5432/d",
            "postgres://@h/d",
            "postgres://u@h",
            "postgres://u@h/",
            "postgres://u@:5432/d",
            "postgres://u@h:0/d",
            "postgres://u@h:x/d",
            "postgres://u@a:1,b:2/d",
            "postgres://u@[::1/d",
            "postgres://u@h/d?schema=1a",
            "postgres://u@h/d?schema=a-b",
            "postgres://u@h/d?schema=a%22b",
            "postgres://u@h/d?listen=maybe",
            "postgres://u@h/d?sslmode=on",
            "postgres://u@h/d?application_name=x",
            "postgres://u@h/d?schema",
            "postgres://u@h/d%zz",
            "postgres://u@h/d%00",
            "redis://u@h/d",
        ] {
            assert!(
                matches!(parse_target(bad), Err(InputError::InvalidUrl { .. })),
                "{bad}"
            );
        }
        let long = format!("postgres://u@h/d?schema={}", "s".repeat(54));
        assert!(parse_target(&long).is_err());
    }

    #[test]
    fn tls_modes_this_build_cannot_honour_are_refused() {
        for mode in ["require", "verify-ca", "verify-full"] {
            let url = format!("postgres://u:hunter2@h/d?sslmode={mode}");
            let e = parse_target(&url).unwrap_err();
            let shown = e.to_string();
            assert!(shown.contains("never falls back to plain text"), "{shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
        }
    }

    #[test]
    fn passwords_stay_out_of_errors_and_debug() {
        for url in [
            "postgres://u:hunter2@h:x/d",
            "postgres://u:hunter2@h/d?bad=1",
            "postgres://u:hun@ter2@h/d?schema=-",
        ] {
            let e = parse_target(url).unwrap_err().to_string();
            assert!(!e.contains("hunter2") && !e.contains("hun@ter2"), "{e}");
        }
        let t = parse_target("postgres://u:hunter2@h/d").unwrap();
        assert!(!format!("{t:?}").contains("hunter2"));
    }
}
