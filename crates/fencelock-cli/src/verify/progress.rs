//! The progress display while a run goes: one line redrawn in place on a terminal, a plain
//! line every few seconds otherwise.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::check::Tally;
use super::events::{now, read_from};
use super::words::Contended;
use crate::ui::Ui;

/// How often a plain (non-terminal) progress line is printed.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// The progress of the current run.
pub struct Progress {
    ui: Ui,
    last_plain: Option<Instant>,
    run: String,
    dir: PathBuf,
    span: (u64, u64),
    /// What is happening: the fault under way, if any.
    pub doing: String,
    /// How far each event file was read, and the counts so far (by the verdict's rule).
    offsets: HashMap<PathBuf, u64>,
    counts: Tally,
    /// What the run contends for: the counts' rule and words.
    contended: Contended,
}

impl Progress {
    /// Progress to stdout.
    pub fn new(ui: Ui, contended: Contended) -> Self {
        Self {
            ui,
            last_plain: None,
            run: String::new(),
            dir: Default::default(),
            span: (0, 0),
            doing: String::new(),
            offsets: HashMap::new(),
            counts: Tally::default(),
            contended,
        }
    }

    /// Starts following a new run's folder.
    pub fn follow_run(&mut self, run: &str, dir: &Path, span: (u64, u64)) {
        self.run = run.to_owned();
        self.dir = dir.to_owned();
        self.span = span;
        self.offsets.clear();
        self.counts = Tally::default();
    }

    /// Reads what the event files gained since the last tick, and counts it.
    fn follow(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for path in entries.filter_map(|e| e.ok()).map(|e| e.path()) {
            let offset = self.offsets.get(&path).copied().unwrap_or(0);
            let (events, next) = read_from(&path, offset);
            let rule = self.contended.primitive.rule(self.contended.permits);
            events.iter().for_each(|e| self.counts.add(rule, e));
            self.offsets.insert(path, next);
        }
    }

    /// A line that stays.
    pub fn line(&self, text: &str) {
        self.ui.line(text);
    }

    /// Redraws the progress line (on a terminal), or prints it now and then (otherwise).
    pub fn tick(&mut self) {
        let text = self.status();
        if self.ui.tty {
            self.ui.progress(&text);
        } else if self.last_plain.is_none_or(|t| t.elapsed() >= PLAIN_EVERY) {
            self.last_plain = Some(Instant::now());
            self.ui.line(&text);
        }
    }

    /// The run's last progress line, once its clients have ended: every event counted, the
    /// same counts as its verdict's.
    pub fn finish(&mut self) {
        self.follow();
        self.ui.line(&format!(
            "{}: ended  {}",
            self.run,
            self.contended.counts(self.counts)
        ));
    }

    fn status(&mut self) -> String {
        self.follow();
        let secs = |ns: u64| ns as f64 / 1e9;
        let (start, end) = self.span;
        format!(
            "{}: {:>5.1} of {:.0} s  {}{}",
            self.run,
            secs(now().saturating_sub(start)),
            secs(end.saturating_sub(start)),
            self.contended.counts(self.counts),
            if self.doing.is_empty() {
                String::new()
            } else {
                format!("  [{}]", self.doing)
            }
        )
    }

    /// Waits until `t` (ns, monotonic), ticking.
    pub async fn wait_until(&mut self, t: u64) {
        loop {
            let left = t.saturating_sub(now());
            if left == 0 {
                return;
            }
            self.tick();
            tokio::time::sleep(Duration::from_nanos(left).min(Duration::from_millis(500))).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::args::Primitive;
    use crate::verify::check::{check_by, Bounds};
    use crate::verify::events::{read_dir, Kind, Recorder};

    /// Issue 33 (what was found 4): with a read-write lock, the progress line counted the
    /// readers' checked reads as writes taken (49) where the verdict counted writers' only
    /// (42). Both now count from the same events by the same rule.
    #[test]
    fn the_progress_line_counts_what_the_verdict_counts() {
        let dir = tempfile::tempdir().unwrap();
        let rec = Recorder::open(&dir.path().join("client-0.jsonl"), 0).unwrap();
        let writer = |attempt, token, kind: Kind| {
            rec.record(Kind::AcquireCall { attempt });
            rec.record(Kind::Acquired { attempt, token });
            rec.record(kind);
        };
        let accepted = |attempt, token| Kind::WriteAccepted {
            attempt,
            token,
            value: 1,
            stale: false,
        };
        writer(1, 10, accepted(1, 10));
        let reader = rec.part(1);
        for (attempt, token) in [(2, 11), (3, 12)] {
            reader.record(Kind::AcquireCall { attempt });
            reader.record(Kind::Acquired { attempt, token });
            reader.record(accepted(attempt, token));
        }
        reader.record(Kind::Acquired {
            attempt: 4,
            token: 13,
        });
        reader.record(Kind::WriteRejected {
            attempt: 4,
            token: 13,
            highest: None,
        });
        rec.record(Kind::Exit);

        let contended = Contended {
            primitive: Primitive::Rwlock,
            permits: 1,
        };
        let mut progress = Progress::new(Ui { tty: false }, contended);
        progress.follow_run("run", dir.path(), (0, 0));
        progress.follow();
        let events = read_dir(dir.path()).unwrap();
        let bounds = Bounds {
            heals: &[],
            end: now(),
            liveness_bound: 1,
        };
        let verdict = check_by(&events, bounds, Primitive::Rwlock.rule(1));
        assert_eq!(progress.counts, verdict.tally());
        assert_eq!(
            verdict.tally(),
            Tally {
                holds: 4,
                writes: (1, 0),
                reads: (2, 1)
            }
        );
    }
}
