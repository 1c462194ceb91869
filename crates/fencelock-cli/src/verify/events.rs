//! What happened in a verify run, on one clock: every client process and the fault driver
//! stamp their events with `CLOCK_MONOTONIC`, which is the same clock in every process of
//! the machine, so that events of different processes can be ordered and compared.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use nix::time::{clock_gettime, ClockId};
use serde::{Deserialize, Serialize};

/// Nanoseconds on `CLOCK_MONOTONIC`: comparable across the processes of one machine.
pub fn now() -> u64 {
    match clock_gettime(ClockId::CLOCK_MONOTONIC) {
        Ok(t) => (t.tv_sec() as u64) * 1_000_000_000 + t.tv_nsec() as u64,
        // CLOCK_MONOTONIC exists on every Linux; a failure here would be a kernel bug.
        Err(e) => panic!("CLOCK_MONOTONIC: {e}"),
    }
}

/// One thing that happened, in one lane (a client; the same lane across a client's respawns).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// When, in nanoseconds on `CLOCK_MONOTONIC`.
    pub t: u64,
    /// The client's lane, from 0.
    pub client: usize,
    /// The process that recorded it (the fault driver records pauses and kills with the PID
    /// of the client they hit).
    pub pid: u32,
    /// Which of a client's holdings the event is about, for the primitives where one client
    /// holds several or holds in two ways: with `--primitive multi` the index of the lock
    /// (and of its register) in the multi-lock, with `rwlock` 1 for a reader's holding (0 a
    /// writer's). 0 otherwise, and left out of the JSON when 0. Process events (start, exit,
    /// pause, kill) concern all of them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub part: u8,
    /// What happened.
    #[serde(flatten)]
    pub kind: Kind,
}

fn is_zero(part: &u8) -> bool {
    *part == 0
}

impl Event {
    /// Whether the event concerns the whole process (every part of its holdings).
    pub fn process_wide(&self) -> bool {
        matches!(
            self.kind,
            Kind::Start | Kind::Exit | Kind::Paused | Kind::Resumed | Kind::Killed
        )
    }
}

/// What happened. `attempt` numbers a process's acquisitions from 1; with `pid` it names
/// one hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Kind {
    /// A client process started.
    Start,
    /// `acquire` called.
    AcquireCall { attempt: u64 },
    /// `acquire` returned the lock.
    Acquired { attempt: u64, token: u64 },
    /// `acquire` returned without the lock, and the lock was surely not taken (it timed out
    /// waiting for a holder).
    NotAcquired { attempt: u64, error: String },
    /// `acquire` failed in a way that leaves its outcome unknown (the server may have
    /// granted the lock before the error): counted, never assumed either way.
    AcquireUnknown { attempt: u64, error: String },
    /// The register read: its value and the token of the write that stored it.
    Read {
        attempt: u64,
        value: Option<u64>,
        token: Option<u64>,
    },
    /// A write of `value` with `token` sent.
    WriteCall {
        attempt: u64,
        token: u64,
        value: u64,
    },
    /// The register took the write. `stale`: its token was lower than the highest the
    /// register had taken (only possible without fencing, where the value is written anyway).
    WriteAccepted {
        attempt: u64,
        token: u64,
        value: u64,
        stale: bool,
    },
    /// The register refused the write: a higher token had been written.
    WriteRejected {
        attempt: u64,
        token: u64,
        highest: Option<u64>,
    },
    /// The write failed (its outcome is unknown).
    WriteFailed {
        attempt: u64,
        token: u64,
        error: String,
    },
    /// The guard's `lost()` fired.
    Lost { attempt: u64, token: u64 },
    /// `release` returned.
    Released { attempt: u64, ok: bool },
    /// (Elections) the client's observer reported this leader (`None`: nobody leads).
    Observed {
        term: Option<u64>,
        value: Option<String>,
    },
    /// (Elections) the client's observer could no longer follow; it follows anew.
    ObserveFailed { error: String },
    /// The fault driver stopped this client (SIGSTOP).
    Paused,
    /// The fault driver continued this client (SIGCONT).
    Resumed,
    /// The fault driver killed this client (SIGKILL).
    Killed,
    /// The client process finished its run.
    Exit,
}

/// An append-only file of events, one JSON object a line, written as each event happens so
/// that a process killed with SIGKILL loses none it recorded.
#[derive(Clone)]
pub struct Recorder {
    file: Arc<Mutex<File>>,
    client: usize,
    pid: u32,
    part: u8,
}

impl Recorder {
    /// Appends to `path` (a respawned client goes on in its lane's file).
    pub fn open(path: &Path, client: usize) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            file: Arc::new(Mutex::new(file)),
            client,
            pid: std::process::id(),
            part: 0,
        })
    }

    /// The same file, recording events of `part` (see [`Event::part`]).
    pub fn part(&self, part: u8) -> Recorder {
        Recorder {
            part,
            ..self.clone()
        }
    }

    /// Records `kind` now.
    pub fn record(&self, kind: Kind) {
        self.record_as(self.client, self.pid, kind);
    }

    /// Records `kind` now in another lane, for another process: the fault driver's record
    /// of what it did to a client.
    pub fn record_as(&self, client: usize, pid: u32, kind: Kind) {
        let event = Event {
            t: now(),
            client,
            pid,
            part: self.part,
            kind,
        };
        let mut line = serde_json::to_string(&event).unwrap_or_default();
        line.push('\n');
        // One write per line, on an O_APPEND file: lines are never interleaved or torn.
        if let Ok(mut file) = self.file.lock() {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// Makes `dir` ready for a run's event files: created if missing, and emptied of the
/// `*.jsonl` files an earlier run left there. The recorders append (a respawned client goes
/// on in its lane's file), so a report folder used twice would otherwise mix two runs'
/// events, whose tokens and values start over: false violations.
pub fn fresh_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("jsonl") {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// Reads the events of every `*.jsonl` file in `dir`. A last line cut short by a kill is
/// skipped.
pub fn read_dir(dir: &Path) -> std::io::Result<Vec<Event>> {
    let mut events = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("jsonl") {
            events.extend(read_file(&path));
        }
    }
    events.sort_by_key(|e| e.t);
    Ok(events)
}

/// The complete lines added to `path` since `offset`, parsed, and the offset after the
/// last complete line: for readers that follow a file as it grows (a line being written is
/// left for the next call).
pub fn read_from(path: &Path, offset: u64) -> (Vec<Event>, u64) {
    let Some(text) = text_from(path, offset) else {
        return (Vec::new(), offset);
    };
    let complete = text.rfind('\n').map_or(0, |i| i + 1);
    (parse(&text[..complete]), offset + complete as u64)
}

/// The events in the last `bytes` of a file: enough for its latest events without reading a
/// long run's whole history.
pub fn read_tail(path: &Path, bytes: u64) -> Vec<Event> {
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    let from = len.saturating_sub(bytes);
    let text = text_from(path, from).unwrap_or_default();
    // Past the offset, the first line is a cut one unless the window holds the whole file.
    let first = if from == 0 {
        0
    } else {
        text.find('\n').map_or(text.len(), |i| i + 1)
    };
    let complete = text.rfind('\n').map_or(0, |i| i + 1).max(first);
    parse(&text[first..complete])
}

fn text_from(path: &Path, offset: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut bytes = Vec::new();
    let mut file = File::open(path).ok()?;
    file.seek(SeekFrom::Start(offset)).ok()?;
    file.read_to_end(&mut bytes).ok()?;
    // A cut may fall inside a multi-byte character: keep what decodes.
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn parse(lines: &str) -> Vec<Event> {
    lines
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The events in one file (empty if it cannot be read).
pub fn read_file(path: &Path) -> Vec<Event> {
    parse(&std::fs::read_to_string(path).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_as_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client-0.jsonl");
        let rec = Recorder::open(&path, 0).unwrap();
        rec.record(Kind::Acquired {
            attempt: 1,
            token: 7,
        });
        rec.record(Kind::Lost {
            attempt: 1,
            token: 7,
        });
        std::fs::write(dir.path().join("cut.jsonl"), "{\"t\":1,\"cli").unwrap();
        let events = read_dir(dir.path()).unwrap();
        assert_eq!(events.len(), 2);
        assert!(events[0].t <= events[1].t);
        assert_eq!(
            events[0].kind,
            Kind::Acquired {
                attempt: 1,
                token: 7
            }
        );
        let json = serde_json::to_string(&events[1]).unwrap();
        assert!(json.contains("\"event\":\"lost\""), "{json}");
    }

    #[test]
    fn a_folder_used_again_starts_without_the_earlier_runs_events() {
        let dir = tempfile::tempdir().unwrap();
        let earlier = Recorder::open(&dir.path().join("client-0.jsonl"), 0).unwrap();
        earlier.record(Kind::AcquireCall { attempt: 1 });
        std::fs::write(dir.path().join("report.html"), "kept").unwrap();
        fresh_dir(dir.path()).unwrap();
        assert!(read_dir(dir.path()).unwrap().is_empty());
        assert!(dir.path().join("report.html").exists());
        let again = Recorder::open(&dir.path().join("client-0.jsonl"), 0).unwrap();
        again.record(Kind::AcquireCall { attempt: 1 });
        assert_eq!(read_dir(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn a_growing_file_is_followed_line_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client-1.jsonl");
        let rec = Recorder::open(&path, 1).unwrap();
        for attempt in 1..=3 {
            rec.record(Kind::AcquireCall { attempt });
        }
        let (events, offset) = read_from(&path, 0);
        assert_eq!(events.len(), 3);
        assert_eq!(offset, std::fs::metadata(&path).unwrap().len());
        // A line being written is left for later.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"t\":5,")
            .unwrap();
        assert_eq!(read_from(&path, offset), (Vec::new(), offset));
        let line = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .len() as u64;
        let tail = read_tail(&path, line + 10);
        assert_eq!(tail.len(), 1, "{tail:?}");
        assert_eq!(tail[0].kind, Kind::AcquireCall { attempt: 3 });
    }
}
