//! A waiter's place in a lock's wait queue, as the scripts store it
//! (`attempt window_ms since_us client`, followed by ` value` for an election's participant),
//! read into the public [`Waiter`].

use std::time::Duration;

use crate::status::Waiter;

/// What the server stored for `owner` (`None`: no place), read at `now_us` on the server's
/// clock.
pub(crate) fn waiter(owner: String, place: Option<&str>, now_us: u64) -> Waiter {
    let unreadable = |reason: String| Waiter {
        owner: owner.clone(),
        age: Duration::ZERO,
        window: Duration::ZERO,
        remaining: Duration::ZERO,
        expired: true,
        unreadable: Some(reason),
    };
    let Some(place) = place else {
        return unreadable("no place recorded".to_owned());
    };
    let Some((window_ms, since_us)) = parse(place) else {
        return unreadable(format!(
            "place {place:?} is not \"attempt window_ms since_us client\""
        ));
    };
    let window_us = window_ms.saturating_mul(1000);
    // As queue.lua's end_holding counts: what is left is since + window - now (a place
    // stamped ahead of this clock, e.g. by a server whose clock went back, has more than its
    // window).
    let remaining_us = since_us.saturating_add(window_us).saturating_sub(now_us);
    Waiter {
        owner,
        age: Duration::from_micros(now_us.saturating_sub(since_us)),
        window: Duration::from_millis(window_ms),
        remaining: Duration::from_micros(remaining_us),
        expired: remaining_us < 2000,
        unreadable: None,
    }
}

/// A place's client id without a read-write lock's or semaphore's kind (`:r`, `:w`, `:p`:
/// family.lua).
fn family_client(client: &str) -> &str {
    match client.rsplit_once(':') {
        Some((id, "r" | "w" | "p")) => id,
        _ => client,
    }
}

/// The window and the time taken of a place in the format the release script reads
/// (queue.lua's parse_place): 'attempt window_ms since_us client', decimal and hex, and an
/// election participant's ' value' (any text) after it.
fn parse(place: &str) -> Option<(u64, u64)> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    let number = |s: &str| digits(s).then(|| s.parse::<u64>().ok()).flatten();
    let mut parts = place.splitn(5, ' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(attempt), Some(window), Some(since), Some(client))
            if digits(attempt) && hex(family_client(client)) =>
        {
            number(window).zip(number(since))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_place_reads_as_a_mutex_place() {
        let now = 1_700_000_001_000_000;
        for place in [
            "11 5000 1700000000000000 ab12:r",
            "11 5000 1700000000000000 ab12:w",
            "11 5000 1700000000000000 ab12:p",
            "11 5000 1700000000000000 ab12",
        ] {
            let w = waiter("o".into(), Some(place), now);
            assert!(w.unreadable.is_none(), "{place}");
            assert_eq!(w.window, Duration::from_secs(5));
            assert_eq!(w.age, Duration::from_secs(1));
        }
        let w = waiter("o".into(), Some("11 5000 1700000000000000 ab12:x"), now);
        assert!(w.unreadable.is_some());
    }
}
