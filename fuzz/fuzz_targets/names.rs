//! Lock names and owner ids, any bytes: accepted exactly as documented, and every key of an
//! accepted name has the name as its Redis Cluster hash tag.
#![no_main]

use fencelock_fuzz::{lock_keys, validate_owner};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    // The rules every service shares; the Redis family also refuses braces.
    let name_ok = !s.is_empty() && s.len() <= fencelock::MAX_NAME_LEN;
    assert_eq!(fencelock::validate_name(s).is_ok(), name_ok, "{s:?}");
    let redis_ok = name_ok && !s.contains(['{', '}']);
    assert_eq!(lock_keys(s).is_ok(), redis_ok, "{s:?}");
    if let Ok(keys) = lock_keys(s) {
        for key in &keys {
            let open = key.find('{').expect("hash tag");
            let close = open + 1 + key[open + 1..].find('}').expect("hash tag end");
            assert_eq!(&key[open + 1..close], s);
        }
    }
    let owner_ok = !s.is_empty()
        && s.len() <= fencelock::MAX_OWNER_LEN
        && !s.starts_with('=')
        && !s.chars().any(|c| c.is_whitespace() || c.is_control());
    assert_eq!(validate_owner(s).is_ok(), owner_ok, "{s:?}");
});
