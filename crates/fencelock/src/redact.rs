//! Passwords out of URLs before they reach a message or a log, for every service's URLs.

/// The URL with any password replaced by `***`, for messages and logs.
///
/// Everything before the last `@` counts as user and password, as the URL parser reads it:
/// a password may contain `/`, `?`, `#` or `@` unencoded (most such URLs are then rejected,
/// and the error must not show the password either). A URL without `scheme://` is redacted
/// the same way.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (&url[..scheme.len() + 3], rest),
        None => ("", url),
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => {
            let masked = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                // `redis://secret@host`: redis-rs reads a lone userinfo as the password.
                None => "***".to_owned(),
            };
            format!("{scheme}{masked}@{host}")
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
        // Delimiters in a password do not end it early (found by tests/fuzz_inputs.rs).
        assert_eq!(redact_url("redis://:pa/ss@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact_url("redis://u:p?w#x@h:1"), "redis://u:***@h:1");
        assert_eq!(redact_url("redis://p@w@h"), "redis://***@h");
        assert_eq!(redact_url("u:pw@h:1"), "u:***@h:1");
    }
}
