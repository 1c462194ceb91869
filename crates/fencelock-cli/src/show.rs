//! What `fencelock status` prints, as text and as JSON (the same facts), in the words of the
//! service the lock is on: Redis counts a lease and keeps the last token; ZooKeeper and etcd
//! tie a holding and a waiter's place to the client's session (lease), and keep no token for
//! a free lock (theirs are the zxid or revision of the holder's node or key).
//!
//! Text: `lock "NAME" is held|free`, then `  LABEL: VALUE` lines with the values in one
//! column, then the wait queue (see [`waiters`]). A lock held by several owners (readers,
//! permits) says how many (`holders:`) and lists each: its role and origin when `run` made its
//! owner id (`reader:`, `writer:`, `permit holder:`, `held by:` for a mutex), and its id.
//! JSON: each owner's `origin` has `role` (`read`, `write`, `permit`, null) and `permits`.

use std::time::Duration;

use fencelock::{LockStatus, Waiter};
use serde_json::json;

use crate::owner;

/// The service a status came from, and what it tracks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Service {
    /// One Redis deployment.
    Redis,
    /// RedLock over several Redis servers (no wait queue).
    RedLock,
    /// ZooKeeper: holdings and places live as long as the client's session.
    ZooKeeper,
    /// etcd: holdings and places live as long as the client's lease.
    Etcd,
}

impl Service {
    /// The service of these URLs.
    pub fn of(urls: &[String]) -> Service {
        match crate::services::service(urls.first().map_or("", String::as_str)) {
            "ZooKeeper" => Service::ZooKeeper,
            "etcd" => Service::Etcd,
            _ if urls.len() > 1 => Service::RedLock,
            _ => Service::Redis,
        }
    }

    /// What a holding or a place lives as long as, on a session-based service.
    fn session(self) -> Option<&'static str> {
        match self {
            Service::ZooKeeper => Some("session"),
            Service::Etcd => Some("lease"),
            Service::Redis | Service::RedLock => None,
        }
    }
}

/// A waiter whose place can no longer be handed the lock (its window is over).
fn expired(w: &Waiter) -> bool {
    w.expired || (!w.window.is_zero() && w.remaining.is_zero())
}

fn human(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}

/// One `  LABEL: VALUE` line, values in one column.
fn line(label: &str, value: &str) {
    outln!("  {:<17}{value}", format!("{label}:"));
}

/// The remaining lease in words.
fn lease_text(status: &LockStatus, service: Service) -> String {
    match (status.remaining_lease, service.session()) {
        (Some(d), _) => human(d),
        (None, Some(session)) => format!(
            "as long as the holder's {session} lives (it ends its timeout after the server \
             last heard from the holder)"
        ),
        (None, None) => "no expiry (the key has none: set by something else?)".into(),
    }
}

/// Prints the status as text.
pub fn text(status: &LockStatus, service: Service) {
    if status.held {
        outln!("lock {:?} is held", status.name);
        if status.owners.len() > 1 {
            line(
                "holders",
                &format!("{} (sharing it: each below)", status.owners.len()),
            );
        }
        for (owner, count) in &status.owners {
            if let Some(origin) = owner::parse(owner) {
                let (label, value) = held_by(&origin);
                line(label, &value);
            }
            line("owner id", &format!("{owner} (hold count {count})"));
        }
        line("remaining lease", &lease_text(status, service));
        if let Some(token) = status.fencing_token {
            line("fencing token", &token.to_string());
        }
    } else {
        outln!("lock {:?} is free", status.name);
        match (status.last_token, service.session()) {
            (Some(token), _) => line("last token", &token.to_string()),
            (None, Some(_)) => line(
                "last token",
                "not kept (tokens are the zxid or revision of the holder's node or key)",
            ),
            (None, None) => line("last token", "none: never taken"),
        }
    }
    match service {
        Service::RedLock => line("waiters", "not tracked (RedLock keeps no wait queue)"),
        _ => waiters(&status.waiters, service),
    }
}

/// The label and value of a holder `run` made: `held by` (a mutex), `reader`, `writer` or
/// `permit holder` (`…, one of N permits`), then where it comes from.
fn held_by(origin: &owner::Origin) -> (&'static str, String) {
    let from = origin.describe();
    match origin.role {
        None => ("held by", from),
        Some(owner::Role::Read) => ("reader", from),
        Some(owner::Role::Write) => ("writer", from),
        Some(owner::Role::Permit(n)) => ("permit holder", format!("{from}, one of {n} permits")),
    }
}

/// The wait queue: a header `  waiters:         none` or
/// `  waiters:         N in arrival order[ (E expired[, U unreadable])]`, then one line per
/// place in arrival order, owners padded to one width:
/// `    N. OWNER  age AGE, valid for LEFT` (the window has time left),
/// `    N. OWNER  age AGE, expired AGO ago` (the release will skip it: a dead waiter),
/// `    N. OWNER  age AGE, kept while its session lives` (ZooKeeper; etcd: lease; no window),
/// or `    N. OWNER  unreadable: WHY`. Durations in humantime form, whole milliseconds.
/// Documented in the README; tests parse it.
fn waiters(waiters: &[Waiter], service: Service) {
    if waiters.is_empty() {
        line("waiters", "none");
        return;
    }
    let unreadable = waiters.iter().filter(|w| w.unreadable.is_some()).count();
    let dead = waiters
        .iter()
        .filter(|w| expired(w) && w.unreadable.is_none())
        .count();
    let mut counts = Vec::new();
    if dead > 0 {
        counts.push(format!("{dead} expired"));
    }
    if unreadable > 0 {
        counts.push(format!("{unreadable} unreadable"));
    }
    let mut header = format!("{} in arrival order", waiters.len());
    if !counts.is_empty() {
        header.push_str(&format!(" ({})", counts.join(", ")));
    }
    line("waiters", &header);
    let width = waiters.iter().map(|w| w.owner.len()).max().unwrap_or(0);
    for (i, w) in waiters.iter().enumerate() {
        let state = match (&w.unreadable, service.session()) {
            (Some(why), _) => format!("unreadable: {why}"),
            (None, _) if expired(w) => format!(
                "age {}, expired {} ago",
                human(w.age),
                human(w.age.saturating_sub(w.window))
            ),
            (None, Some(session)) if w.window.is_zero() => {
                format!("age {}, kept while its {session} lives", human(w.age))
            }
            (None, _) => format!("age {}, valid for {}", human(w.age), human(w.remaining)),
        };
        outln!("    {}. {:<width$}  {state}", i + 1, w.owner);
    }
}

/// The status as JSON: the facts the text shows.
pub fn json(status: &LockStatus, service: Service) -> serde_json::Value {
    let ms = |d: Duration| d.as_millis() as u64;
    let owners: Vec<_> = status
        .owners
        .iter()
        .map(|(owner, count)| {
            json!({
                "owner": owner,
                "hold_count": count,
                "origin": owner::parse(owner).map(|o| o.json()),
            })
        })
        .collect();
    let waiters: Vec<_> = status
        .waiters
        .iter()
        .map(|w| {
            json!({
                "owner": w.owner,
                "age_ms": ms(w.age),
                "window_ms": (!w.window.is_zero() || service.session().is_none())
                    .then(|| ms(w.window)),
                "remaining_ms": (!w.window.is_zero() || service.session().is_none())
                    .then(|| ms(w.remaining)),
                "kept_while": service.session().filter(|_| w.window.is_zero()),
                "expired": expired(w),
                "unreadable": w.unreadable,
            })
        })
        .collect();
    json!({
        "name": status.name,
        "service": format!("{service:?}").to_lowercase(),
        "held": status.held,
        "owners": owners,
        "remaining_lease_ms": status.remaining_lease.map(ms),
        "lease_kept_while": service.session().filter(|_| status.remaining_lease.is_none()),
        "fencing_token": status.fencing_token,
        "last_token": status.last_token,
        "last_token_kept": status.last_token.is_some() || service.session().is_none(),
        "waiters": (service != Service::RedLock).then_some(waiters),
    })
}
