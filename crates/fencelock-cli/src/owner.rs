//! Where a holding comes from (issue 23, point 8): `fencelock run` names its owner id after
//! its host, process id, program and start time, so that `status` (and `unlock --force`'s
//! question) can say who holds a lock. Every service already stores the owner id of each
//! holding and lists it in its status, so no wire format changes.
//!
//! The id: `host=HOST,pid=PID,program=PROGRAM,since=UNIX_SECONDS,id=RANDOM` (at most 128
//! bytes, no whitespace, as the library requires); HOST and PROGRAM keep only
//! `[A-Za-z0-9._-]` and are cut short. RANDOM is the start of the client's random id, so that
//! no two runs share an owner.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// The owner id for this process running `program`; `random` is the client's random id.
pub fn for_run(program: &str, random: &str) -> String {
    let name = std::path::Path::new(program)
        .file_name()
        .map_or(program.into(), |n| n.to_string_lossy());
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "host={},pid={},program={},since={since},id={}",
        clean(&host_name(), 40),
        std::process::id(),
        clean(&name, 24),
        clean(&random.chars().take(12).collect::<String>(), 12)
    )
}

/// Reads an owner id made by [`for_run`]; `None` for any other id.
pub fn parse(owner: &str) -> Option<Origin> {
    let mut host = None;
    let mut pid = None;
    let mut program = None;
    let mut since = None;
    for field in owner.split(',') {
        match field.split_once('=')? {
            ("host", v) => host = Some(v.to_string()),
            ("pid", v) => pid = v.parse().ok(),
            ("program", v) => program = Some(v.to_string()),
            ("since", v) => since = v.parse().ok().map(Duration::from_secs),
            ("id", _) => {}
            _ => return None,
        }
    }
    Some(Origin {
        host: host?,
        pid: pid?,
        program: program?,
        since: UNIX_EPOCH + since?,
    })
}

impl Origin {
    /// `HOST, pid PID (PROGRAM), since TIME (AGO ago)`.
    pub fn describe(&self) -> String {
        let ago = SystemTime::now()
            .duration_since(self.since)
            .unwrap_or_default();
        format!(
            "{}, pid {} ({}), since {} ({} ago)",
            self.host,
            self.pid,
            self.program,
            humantime::format_rfc3339_seconds(self.since),
            humantime::format_duration(Duration::from_secs(ago.as_secs()))
        )
    }

    /// The same facts for `--json`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "host": self.host,
            "pid": self.pid,
            "program": self.program,
            "since": humantime::format_rfc3339_seconds(self.since).to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_id_reads_back_and_fits_the_rules() {
        let owner = for_run("/usr/bin/back up.sh", "0123456789abcdef0123");
        assert!(
            owner.len() <= 128 && !owner.contains(char::is_whitespace),
            "{owner}"
        );
        let origin = parse(&owner).unwrap();
        assert_eq!(origin.pid, std::process::id());
        assert_eq!(origin.program, "back_up.sh");
        assert!(owner.ends_with(",id=0123456789ab"), "{owner}");
        assert!(parse("f7c39331d895ccd96a978104e36f86a6:1").is_none());
        let long = for_run(&"x".repeat(300), &"y".repeat(300));
        assert!(long.len() <= 128, "{long}");
    }
}
