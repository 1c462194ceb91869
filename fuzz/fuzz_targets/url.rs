//! Server URLs, any bytes: parsing never panics; what it accepts has the shape its scheme
//! promises; errors carry the redacted URL; and what is shown does not depend on the
//! password (the same URL with another password redacts, and fails, the same way).
#![no_main]

use fencelock::InputError;
use fencelock_fuzz::{parse_url, with_other_password, Parsed};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    let redacted = fencelock::redact_url(input);
    assert_eq!(fencelock::redact_url(&redacted), redacted, "not idempotent");
    let parsed = parse_url(input);
    if let Some((other, password)) = with_other_password(input) {
        assert_eq!(fencelock::redact_url(&other), redacted, "{input:?}");
        // The reason may differ (a password redis-rs cannot decode), but never show it.
        if let (Err(e), Err(e2)) = (&parsed, parse_url(&other)) {
            let (message, message2) = (e.to_string(), e2.to_string());
            if password.len() >= 4 && message.contains(password) {
                assert!(message2.contains(password), "{input:?}: {message}");
            }
        }
    }
    match parsed {
        Ok(Parsed::Single(server)) => {
            assert!(input.starts_with("redis://"));
            assert!(!server.is_empty());
        }
        Ok(Parsed::Cluster(nodes)) => {
            assert!(input.starts_with("redis+cluster://"));
            assert!(nodes > 0);
        }
        Ok(Parsed::Sentinel(sentinels, master)) => {
            assert!(input.starts_with("redis+sentinel://"));
            assert!(sentinels > 0 && !master.is_empty());
        }
        Err(InputError::InvalidUrl { url, reason }) => {
            assert_eq!(url, redacted);
            assert!(!reason.is_empty());
        }
        Err(other) => panic!("not an InvalidUrl: {other:?}"),
    }
});
