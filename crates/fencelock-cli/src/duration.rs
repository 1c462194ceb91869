//! Durations given on the command line (`--wait`, `--lease`, `--kill-grace`, `--work`).
//!
//! Kept free of the rest of the CLI so that the fuzz targets (`fuzz/`) can include it as is.

use std::time::Duration;

/// The longest duration any flag takes: the library's longest timeout and lease (7 days).
pub const MAX_DURATION: Duration = fencelock::MAX_TIMEOUT;

/// Parses a duration like `500ms`, `2s`, `1m`, at most [`MAX_DURATION`]. A longer one is a
/// usage error, never read as "forever": `--wait` without a bound is no `--wait` at all.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 2s, 1m)"))?;
    if d > MAX_DURATION {
        return Err(format!(
            "{} is longer than the maximum of {}",
            humantime::format_duration(d),
            humantime::format_duration(MAX_DURATION)
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_up_to_the_maximum_parse() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("7d"), Ok(MAX_DURATION));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        for bad in [
            "",
            "soon",
            "-1s",
            "7d 1ns",
            "1000years",
            "99999999999999999999999s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let e = parse_duration("8d").unwrap_err();
        assert!(e.contains("maximum of 7days"), "{e}");
    }
}
