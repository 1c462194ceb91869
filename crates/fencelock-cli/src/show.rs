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

use std::time::{Duration, SystemTime};

use fencelock::{Holder, HolderRole, LockKind, LockStatus, Since, Waiter};
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

/// The first line: what the name is and whether (how much of) it is held, per kind.
/// `lock "NAME" is held|free` (a mutex, or a name whose kind the layout does not tell),
/// `read-write lock "NAME" is held by N readers|a writer` or `is free`,
/// `semaphore "NAME": K of N permits held`, `election "NAME" is led|has no leader`.
pub fn headline(status: &LockStatus) -> String {
    let name = &status.name;
    let readers = |s: &LockStatus| {
        s.holders
            .iter()
            .filter(|h| h.role == HolderRole::Reader)
            .count()
    };
    match (status.kind, status.held) {
        (Some(LockKind::Semaphore), _) => format!(
            "semaphore {name:?}: {} of {} permits held",
            status.holders.len(),
            status.permits.map_or("?".to_string(), |n| n.to_string())
        ),
        (Some(LockKind::ReadWrite), true) if readers(status) == status.holders.len() => {
            let n = readers(status);
            let s = if n == 1 { "" } else { "s" };
            format!("read-write lock {name:?} is held by {n} reader{s}")
        }
        (Some(LockKind::ReadWrite), true) => {
            format!("read-write lock {name:?} is held by a writer")
        }
        (Some(LockKind::ReadWrite), false) => format!("read-write lock {name:?} is free"),
        (Some(LockKind::Election), true) => format!("election {name:?} is led"),
        (Some(LockKind::Election), false) => format!("election {name:?} has no leader"),
        (_, true) => format!("lock {name:?} is held"),
        (_, false) => format!("lock {name:?} is free"),
    }
}

/// Whether `status` exits 0: a semaphore when all its N permits are held; any other kind
/// when someone holds it (an election: when someone leads).
pub fn full(status: &LockStatus) -> bool {
    match status.kind {
        Some(LockKind::Semaphore) => status
            .permits
            .is_some_and(|n| status.holders.len() as u64 >= u64::from(n)),
        _ => status.held,
    }
}

/// A holding's start: `since TIME (AGO ago)` where the holding's grant time is known,
/// `queued at TIME (AGO ago)` where only its entry's queueing time is.
fn since_text(since: Since) -> (&'static str, String) {
    let at = since.time();
    let ago = SystemTime::now().duration_since(at).unwrap_or_default();
    let text = format!(
        "{} ({} ago)",
        humantime::format_rfc3339_seconds(at),
        human(Duration::from_secs(ago.as_secs()))
    );
    match since {
        Since::Queued(_) => ("queued at", text),
        _ => ("since", text),
    }
}

/// Prints the status as text: the headline, an election's leader, each holder (what it
/// holds and where from, its owner id, token, start and lease), then the wait queue.
pub fn text(status: &LockStatus, service: Service) {
    outln!("{}", headline(status));
    if let Some(leader) = &status.leader {
        line("leader value", &leader.value);
        line("term", &leader.term.to_string());
    }
    if status.held {
        if status.holders.len() > 1 {
            line(
                "holders",
                &format!("{} (sharing it: each below)", status.holders.len()),
            );
        }
        for holder in &status.holders {
            self::holder(holder, service);
        }
    } else {
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

/// One holder's lines.
fn holder(holder: &Holder, service: Service) {
    let (label, value) = match owner::parse(&holder.owner) {
        Some(origin) => held_by(holder.role, &origin),
        None => (role_label(holder.role), "(owner id below)".to_string()),
    };
    line(label, &value);
    line(
        "owner id",
        &format!("{} (hold count {})", holder.owner, holder.holds),
    );
    if let Some(token) = holder.token {
        line("fencing token", &token.to_string());
    }
    match holder.since.map(since_text) {
        Some((label, value)) => line(label, &value),
        None => line("since", "not known (etcd keeps no time with a key)"),
    }
    let lease = match (holder.remaining_lease, service.session()) {
        (Some(d), _) => human(d),
        (None, Some(session)) => format!(
            "as long as the holder's {session} lives (it ends its timeout after the server \
             last heard from the holder)"
        ),
        (None, None) => "no expiry (the key has none: set by something else?)".into(),
    };
    line("remaining lease", &lease);
}

/// The label of a holder `run` did not make: `held by`, `reader`, `writer`, `permit
/// holder`, `leader`.
fn role_label(role: HolderRole) -> &'static str {
    match role {
        HolderRole::Reader => "reader",
        HolderRole::Writer => "writer",
        HolderRole::Permit => "permit holder",
        HolderRole::Leader => "leader",
        _ => "held by",
    }
}

/// The label and value of a holder `run` made: its role's label, then where it comes from
/// (a permit: `…, one of N permits` as that run asked).
fn held_by(role: HolderRole, origin: &owner::Origin) -> (&'static str, String) {
    let from = origin.describe();
    match origin.role {
        Some(owner::Role::Permit(n)) => ("permit holder", format!("{from}, one of {n} permits")),
        _ => (role_label(role), from),
    }
}

/// The wait queue: a header `  waiters:         none` or
/// `  waiters:         N in arrival order[ (E expired[, U unreadable])]`, then one line per
/// place in arrival order, owners padded to one width:
/// `    N. OWNER  age AGE, valid for LEFT` (the window has time left),
/// `    N. OWNER  age AGE, expired AGO ago` (the release will skip it: a dead waiter),
/// `    N. OWNER  age AGE, kept while its session lives` (ZooKeeper: no window),
/// `    N. OWNER  age not known, kept while its lease lives` (etcd: no time kept),
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
            // etcd keeps no time with a key: no age to show.
            (None, Some(session)) if service == Service::Etcd => {
                format!("age not known, kept while its {session} lives")
            }
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
    let holders: Vec<_> = status.holders.iter().map(holder_json).collect();
    let waiters: Vec<_> = status
        .waiters
        .iter()
        .map(|w| {
            json!({
                "owner": w.owner,
                "age_ms": (service != Service::Etcd).then(|| ms(w.age)),
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
        "kind": status.kind.map(LockKind::word),
        "service": format!("{service:?}").to_lowercase(),
        "held": status.held,
        "full": full(status),
        "permits": status.permits,
        "permits_held": (status.kind == Some(LockKind::Semaphore)).then_some(status.holders.len()),
        "leader": status.leader.as_ref().map(|l| json!({"value": l.value, "term": l.term})),
        "holders": holders,
        "owners": owners,
        "remaining_lease_ms": status.remaining_lease.map(ms),
        "lease_kept_while": service.session().filter(|_| status.remaining_lease.is_none()),
        "fencing_token": status.fencing_token,
        "last_token": status.last_token,
        "last_token_kept": status.last_token.is_some() || service.session().is_none(),
        "waiters": (service != Service::RedLock).then_some(waiters),
    })
}

/// One holder as JSON: `since` (RFC 3339, whole seconds) and `since_is` (`granted` or
/// `queued`), both null where the start is not known.
fn holder_json(h: &Holder) -> serde_json::Value {
    let since = h.since.map(|s| {
        let is = match s {
            Since::Queued(_) => "queued",
            _ => "granted",
        };
        (humantime::format_rfc3339_millis(s.time()).to_string(), is)
    });
    json!({
        "owner": h.owner,
        "role": h.role.word(),
        "hold_count": h.holds,
        "token": h.token,
        "since": since.as_ref().map(|s| s.0.clone()),
        "since_is": since.map(|s| s.1),
        "held_ms": h.held_for(SystemTime::now()).map(|d| d.as_millis() as u64),
        "remaining_lease_ms": h.remaining_lease.map(|d| d.as_millis() as u64),
        "origin": owner::parse(&h.owner).map(|o| o.json()),
    })
}
