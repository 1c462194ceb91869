//! Durations given on the command line (`--wait`, `--lease`, `--kill-grace`, `--work`).
//!
//! Kept free of the rest of the CLI so that the fuzz targets (`fuzz/`) can include it as is.

use std::time::Duration;

/// The longest duration any flag takes: the library's longest timeout and lease (7 days).
pub const MAX_DURATION: Duration = fencelock::MAX_TIMEOUT;

/// Parses a duration like `500ms`, `2s`, `1m`, at most [`MAX_DURATION`]. A longer one is a
/// usage error, never read as "forever": `--wait` without a bound is no `--wait` at all.
/// Numbers above about 10^11 (`300000000000ns`) are refused whatever their unit.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if sum_bound_secs(s) >= HUMANTIME_SAFE_SECS {
        return Err(format!(
            "{s:?} has numbers too large for a duration (the maximum is {})",
            humantime::format_duration(MAX_DURATION)
        ));
    }
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

/// Input whose sum may come near `u64::MAX` seconds is kept from humantime: 2.4 panics with
/// "overflow in Duration::new" when a sum reaches `u64::MAX` seconds with a carried
/// nanosecond (`18446744073709551615s 999ms 1ms`; chronotope/humantime#66, found by the
/// `durations` fuzz target). Half of `u64::MAX` leaves a wide margin.
const HUMANTIME_SAFE_SECS: u64 = u64::MAX / 2;

/// An upper bound, in seconds, of what humantime could sum from `s`, from its numbers alone:
/// each number as years (the largest unit), plus one year for its fraction. humantime reads
/// digits separated by whitespace as one number (`1 000s`), and digits after a `.` as the
/// fraction, which adds less than one unit.
fn sum_bound_secs(s: &str) -> u64 {
    const YEAR: u64 = 31_557_600;
    let mut bound = 0u64;
    let mut number: Option<u64> = None;
    let mut in_fraction = false;
    let mut close = |number: &mut Option<u64>| {
        if let Some(n) = number.take() {
            bound = bound.saturating_add(n.saturating_add(1).saturating_mul(YEAR));
        }
    };
    for c in s.chars() {
        match c {
            '0'..='9' if in_fraction => {}
            '0'..='9' => {
                let digit = u64::from(c as u8 - b'0');
                number = Some(number.unwrap_or(0).saturating_mul(10).saturating_add(digit));
            }
            c if c.is_whitespace() => {}
            '.' => {
                close(&mut number);
                in_fraction = true;
            }
            _ => {
                close(&mut number);
                in_fraction = false;
            }
        }
    }
    close(&mut number);
    bound
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
        // These made humantime 2.4 panic (found by the `durations` fuzz target).
        for panicked in [
            "18446744073709551615s 999ms 1ms",
            "18446744073709551615s 1000000000ns",
            "018446744073709551614.2s1.4\ns0.4s",
            "18 446 744 073 709 551 615s 999ms 1ms",
        ] {
            let e = parse_duration(panicked).unwrap_err();
            assert!(e.contains("too large"), "{panicked}: {e}");
        }
        assert_eq!(parse_duration("1 000ms"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("1.5 s"), Ok(Duration::from_millis(1500)));
        assert_eq!(
            parse_duration("604800000000000ns"),
            Err(
                "\"604800000000000ns\" has numbers too large for a duration (the maximum is 7days)"
                    .to_owned()
            )
        );
        let e = parse_duration("8d").unwrap_err();
        assert!(e.contains("maximum of 7days"), "{e}");
    }

    /// Any string: no panic, and nothing above the maximum. Numbers with units: accepted
    /// exactly up to the maximum (the libFuzzer target `durations` in fuzz/ runs this longer).
    #[test]
    fn any_string_parses_or_fails_cleanly() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};
        let strings = prop_oneof![
            any::<String>(),
            "[0-9]{0,25}(\\.[0-9]{0,3})? ?(ns|us|µs|ms|s|m|h|d|w|M|y|years|sec|nsec|x)?( [0-9]{1,3}[smh])?",
        ];
        TestRunner::new(Config::with_cases(3_000))
            .run(&strings, |s| {
                if let Ok(d) = parse_duration(&s) {
                    prop_assert!(d <= MAX_DURATION, "{s:?} gave {d:?}");
                }
                Ok(())
            })
            .unwrap();
        let units = [
            ("ms", Duration::from_millis(1)),
            ("s", Duration::from_secs(1)),
            ("m", Duration::from_secs(60)),
            ("h", Duration::from_secs(3600)),
            ("d", Duration::from_secs(86_400)),
        ];
        TestRunner::new(Config::with_cases(3_000))
            .run(&(any::<u64>(), 0..units.len()), |(n, u)| {
                let (unit, one) = units[u];
                let expected = u32::try_from(n)
                    .ok()
                    .and_then(|n| one.checked_mul(n))
                    .filter(|d| *d <= MAX_DURATION);
                prop_assert_eq!(parse_duration(&format!("{n}{unit}")).ok(), expected);
                Ok(())
            })
            .unwrap();
    }
}
