//! The CLI's duration flags (`--wait`, `--lease`, `--kill-grace`), any bytes: no panic, and
//! nothing above the maximum is accepted.
#![no_main]

use fencelock_fuzz::{parse_duration, MAX_DURATION};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = parse_duration(s) {
        assert!(d <= MAX_DURATION, "{s:?} gave {d:?}");
    }
});
