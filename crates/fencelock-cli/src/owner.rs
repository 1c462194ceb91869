//! Where a holding comes from (issue 23, point 8): `fencelock run` names its owner id after
//! its host, process id, program and start time, so that `status` (and `unlock --force`'s
//! question) can say who holds a lock. Every service already stores the owner id of each
//! holding and lists it in its status, so no wire format changes.
//!
//! The id: `CLIENT:HOST/PID/PROGRAM/UNIX_SECONDS[/ROLE]` (at most 128 bytes, no whitespace,
//! as the library requires); ROLE says which side of a shared lock the run holds (`read`,
//! `write`, `permit-of-N`: see [`Role`]; none for a mutex or a multi-lock), since a lock's
//! status lists owners but not what each holds; CLIENT is the client's random id (hex), so that no two runs share an
//! owner, and so that a Redis forced unlock, which tells each holder's client on a channel
//! named by the owner id's `<hex>:` prefix, reaches this one at once. HOST and PROGRAM keep
//! only `[A-Za-z0-9._-]` and are cut short (to 34 and 24 bytes: the longest id is 127 bytes).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a `fencelock run` holds of a lock other than a mutex: the last field of its owner id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The read side of a read-write lock (`run -s`): `read`.
    Read,
    /// The write side of a read-write lock (`run -x`): `write`.
    Write,
    /// One permit of a semaphore of N (`run --permits N`): `permit-of-N`.
    Permit(u32),
}

impl Role {
    /// The owner id's field.
    fn field(self) -> String {
        match self {
            Role::Read => "read".into(),
            Role::Write => "write".into(),
            Role::Permit(n) => format!("permit-of-{n}"),
        }
    }

    fn parse(field: &str) -> Option<Role> {
        match field {
            "read" => Some(Role::Read),
            "write" => Some(Role::Write),
            _ => field
                .strip_prefix("permit-of-")?
                .parse()
                .ok()
                .map(Role::Permit),
        }
    }

    /// `reader`, `writer`, `permit holder (1 of N)`.
    pub fn word(self) -> String {
        match self {
            Role::Read => "reader".into(),
            Role::Write => "writer".into(),
            Role::Permit(n) => format!("permit holder (1 of {n})"),
        }
    }

    /// The role for `--json`: `read`, `write`, `permit`.
    pub fn json_name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Permit(_) => "permit",
        }
    }
}

/// Where a holding made by `fencelock run` comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The host name.
    pub host: String,
    /// The process id of `fencelock run`.
    pub pid: u32,
    /// PROGRAM's file name.
    pub program: String,
    /// When the run started.
    pub since: SystemTime,
    /// What it holds, for a lock other than a mutex.
    pub role: Option<Role>,
}

/// Keeps the characters an owner id may carry in a field, at most `max` of them.
fn clean(text: &str, max: usize) -> String {
    let kept: String = text
        .chars()
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
            _ => '_',
        })
        .take(max)
        .collect();
    if kept.is_empty() {
        "unknown".into()
    } else {
        kept
    }
}

/// This machine's host name.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// The owner id for this process running `program` and holding `role`; `client` is the
/// client's random id.
pub fn for_run(program: &str, client: &str, role: Option<Role>) -> String {
    let name = std::path::Path::new(program)
        .file_name()
        .map_or(program.into(), |n| n.to_string_lossy());
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let client: String = client
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(32)
        .collect();
    let role = role.map(|r| format!("/{}", r.field())).unwrap_or_default();
    format!(
        "{client}:{}/{}/{}/{since}{role}",
        clean(&host_name(), 34),
        std::process::id(),
        clean(&name, 24),
    )
}

/// Reads an owner id made by [`for_run`]; `None` for any other id.
pub fn parse(owner: &str) -> Option<Origin> {
    let (client, rest) = owner.split_once(':')?;
    if client.is_empty() || !client.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut fields = rest.split('/');
    let (host, pid, program, since) = (
        fields.next()?,
        fields.next()?.parse().ok()?,
        fields.next()?,
        fields.next()?.parse().ok()?,
    );
    let role = match fields.next() {
        Some(field) => Some(Role::parse(field)?),
        None => None,
    };
    if fields.next().is_some() {
        return None;
    }
    Some(Origin {
        host: host.to_string(),
        pid,
        program: program.to_string(),
        since: UNIX_EPOCH + Duration::from_secs(since),
        role,
    })
}

impl Origin {
    /// `HOST, pid PID (PROGRAM), started TIME (AGO ago)`: when the run started (its wait
    /// included), not when it was granted the holding (`status` says that as `since`).
    pub fn describe(&self) -> String {
        let ago = SystemTime::now()
            .duration_since(self.since)
            .unwrap_or_default();
        format!(
            "{}, pid {} ({}), started {} ({} ago)",
            self.host,
            self.pid,
            self.program,
            humantime::format_rfc3339_seconds(self.since),
            humantime::format_duration(Duration::from_secs(ago.as_secs()))
        )
    }

    /// The same facts for `--json`, with the role (`read`, `write`, `permit`, or null for a
    /// mutex) and, for a permit, the semaphore's N as that run asked for it.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "host": self.host,
            "pid": self.pid,
            "program": self.program,
            "started": humantime::format_rfc3339_seconds(self.since).to_string(),
            "role": self.role.map(Role::json_name),
            "permits": match self.role {
                Some(Role::Permit(n)) => Some(n),
                _ => None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_id_reads_back_and_fits_the_rules() {
        let owner = for_run("/usr/bin/back up.sh", "0123456789abcdef0123", None);
        assert!(
            owner.len() <= 128 && !owner.contains(char::is_whitespace),
            "{owner}"
        );
        let origin = parse(&owner).unwrap();
        assert_eq!(origin.pid, std::process::id());
        assert_eq!(origin.program, "back_up.sh");
        // The client's id first: a Redis forced unlock finds the holder's client by it.
        assert!(owner.starts_with("0123456789abcdef0123:"), "{owner}");
        assert!(parse("f7c39331d895ccd96a978104e36f86a6:1").is_none());
        assert!(parse("deploy-42").is_none());
        let long = for_run(&"x".repeat(300), &"f".repeat(300), None);
        assert!(long.len() <= 128, "{long}");
        // The longest role still fits.
        let permit = Some(Role::Permit(fencelock::MAX_PERMITS));
        let long = for_run(&"x".repeat(300), &"f".repeat(300), permit);
        assert!(long.len() <= 128, "{long}");
        assert_eq!(parse(&long).unwrap().role, permit);
    }

    #[test]
    fn roles_read_back() {
        for role in [Role::Read, Role::Write, Role::Permit(3)] {
            let owner = for_run("sleep", "abc", Some(role));
            assert_eq!(parse(&owner).unwrap().role, Some(role), "{owner}");
        }
        assert_eq!(parse(&for_run("sleep", "abc", None)).unwrap().role, None);
        assert!(parse("abc:h/1/p/2/lease").is_none());
        assert!(parse("abc:h/1/p/2/read/x").is_none());
    }
}
