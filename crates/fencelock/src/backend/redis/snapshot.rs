//! A lock hash as the status script read it (keys.rs and family.lua describe its fields),
//! read into each holding's facts: the name's kind, every holder with its own token, start
//! and lease, a semaphore's N and an election's leader.
//!
//! A holding's start: every token is planned from the server's clock when it is granted
//! (`max(last + 1, clock in µs)`, tokens.lua), so a token no later than the server's clock
//! now is the grant time in µs, unless the counter ran ahead of the clock at that grant (a
//! clock stepped back, RedLock's proposals); a token ahead of the clock says nothing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::backend::Leader;
use crate::status::{Holder, HolderRole, LockKind, Since};

/// The lock hash's facts.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    pub(crate) kind: Option<LockKind>,
    pub(crate) holders: Vec<Holder>,
    pub(crate) permits: Option<u32>,
    pub(crate) leader: Option<Leader>,
    /// The mutex's or election's `=token`.
    pub(crate) token: Option<u64>,
}

/// Tokens below this (2017 in µs) are not a clock: a counter set by hand or another tool.
const CLOCK_FLOOR_US: u64 = 1_500_000_000_000_000;

/// When a holding with `token` was granted, read at `now_us` on the server's clock.
fn granted(token: u64, now_us: u64) -> Option<Since> {
    (CLOCK_FLOOR_US..=now_us)
        .contains(&token)
        .then(|| Since::Granted(UNIX_EPOCH + Duration::from_micros(token)))
}

/// A family holding: `'<token> <since_us> <term_ms> [write hold ids...]'`: its token, its
/// deadline in ms on the server's clock, and whether it writes.
fn family_holding(text: &str) -> Option<(u64, u64, bool)> {
    let mut parts = text.split(' ');
    let token = parts.next()?.parse().ok()?;
    let since_us: u64 = parts.next()?.parse().ok()?;
    let term_ms: u64 = parts.next()?.parse().ok()?;
    let writes = parts.any(|p| !p.is_empty());
    Some((token, (since_us / 1000).checked_add(term_ms)?, writes))
}

/// Reads the hash's `(field, value)` pairs at `now_us`; `pttl` is the hash's remaining TTL
/// (a mutex's or election's lease). Family holdings past their deadline, or unreadable, are
/// left out, as the next script drops them.
pub(crate) fn read(fields: &[(String, String)], pttl: Option<Duration>, now_us: u64) -> Snapshot {
    let mut snap = Snapshot::default();
    let mut family = None;
    let mut value = None;
    for (field, v) in fields {
        match field.as_str() {
            "=k" => family = Some(v.as_str()),
            "=v" => value = Some(v.clone()),
            "=token" => snap.token = v.parse().ok(),
            _ => {}
        }
    }
    match family {
        Some("rw") => snap.kind = Some(LockKind::ReadWrite),
        Some(k) if k.starts_with("sem:") => {
            snap.kind = Some(LockKind::Semaphore);
            snap.permits = k[4..].parse().ok();
        }
        _ if value.is_some() => snap.kind = Some(LockKind::Election),
        _ => {}
    }
    let holds = |owner: &str| {
        fields
            .iter()
            .find(|(f, _)| f == owner)
            .map_or(0, |(_, ids)| ids.split_whitespace().count() as u64)
    };
    if family.is_some() {
        for (field, v) in fields {
            let Some(owner) = field.strip_prefix("=h:") else {
                continue;
            };
            let Some((token, deadline_ms, writes)) = family_holding(v) else {
                continue;
            };
            let Some(left) = deadline_ms.checked_sub(now_us / 1000).filter(|l| *l > 0) else {
                continue;
            };
            let role = match (snap.kind, writes) {
                (Some(LockKind::Semaphore), _) => HolderRole::Permit,
                (_, true) => HolderRole::Writer,
                (_, false) => HolderRole::Reader,
            };
            let mut holder = Holder::new(owner.to_owned(), role);
            holder.holds = holds(owner).max(1);
            holder.token = Some(token);
            holder.since = granted(token, now_us);
            holder.remaining_lease = Some(Duration::from_millis(left));
            snap.holders.push(holder);
        }
        snap.holders.sort_by_key(|h| h.token);
        return snap;
    }
    let role = match value {
        Some(_) => HolderRole::Leader,
        None => HolderRole::Mutex,
    };
    for (field, ids) in fields.iter().filter(|(f, _)| !f.starts_with('=')) {
        let mut holder = Holder::new(field.clone(), role);
        holder.holds = ids.split_whitespace().count() as u64;
        holder.token = snap.token;
        holder.since = snap.token.and_then(|t| granted(t, now_us));
        holder.remaining_lease = pttl;
        snap.holders.push(holder);
    }
    if !snap.holders.is_empty() {
        snap.kind = snap.kind.or(Some(LockKind::Mutex));
        if let (Some(value), Some(term)) = (value, snap.token) {
            snap.leader = Some(Leader { value, term });
        }
    }
    snap
}

/// The kind a waiting place tells (`attempt window_ms since_us client[:k][ value]`): a
/// read-write lock's (`:r`, `:w`), a semaphore's (`:p`), an election participant's (a
/// value after the client), else a mutex's.
pub(crate) fn place_kind(place: &str) -> LockKind {
    let mut parts = place.splitn(5, ' ').skip(3);
    let client = parts.next().unwrap_or_default();
    match client.rsplit_once(':').map(|(_, k)| k) {
        Some("r" | "w") => LockKind::ReadWrite,
        Some("p") => LockKind::Semaphore,
        _ if parts.next().is_some() => LockKind::Election,
        _ => LockKind::Mutex,
    }
}

/// The time `now_us` (µs on the server's clock) as a `SystemTime`.
#[allow(dead_code)]
pub(crate) fn at(now_us: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(now_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn each_permit_has_its_own_token_and_start() {
        let now = 1_700_000_000_000_000;
        let fields = pairs(&[
            ("=k", "sem:3"),
            ("a:1", "7"),
            ("=h:a:1", "1699999999000000 1699999999000000 30000"),
            ("b:1", "8"),
            ("=h:b:1", "1699999999500000 1699999999500000 30000"),
        ]);
        let snap = read(&fields, Some(Duration::from_secs(29)), now);
        assert_eq!(snap.kind, Some(LockKind::Semaphore));
        assert_eq!(snap.permits, Some(3));
        let tokens: Vec<_> = snap.holders.iter().map(|h| h.token).collect();
        assert_eq!(tokens, [Some(1699999999000000), Some(1699999999500000)]);
        assert_eq!(
            snap.holders[0].held_for(at(now)),
            Some(Duration::from_secs(1))
        );
    }

    #[test]
    fn an_election_names_its_leader_and_a_token_ahead_of_the_clock_no_start() {
        let now = 1_700_000_000_000_000;
        let fields = pairs(&[("p:1", "7"), ("=token", "1800000000000000"), ("=v", "x y")]);
        let snap = read(&fields, None, now);
        assert_eq!(snap.kind, Some(LockKind::Election));
        let leader = snap.leader.unwrap();
        assert_eq!(
            (leader.value.as_str(), leader.term),
            ("x y", 1800000000000000)
        );
        assert_eq!(snap.holders[0].since, None);
        assert_eq!(place_kind("1 5000 17 ab12:r"), LockKind::ReadWrite);
        assert_eq!(place_kind("1 5000 17 ab12 v:p"), LockKind::Election);
        assert_eq!(place_kind("1 5000 17 ab12"), LockKind::Mutex);
    }
}
