//! The progress display while a run goes: one line redrawn in place on a terminal, a plain
//! line every few seconds otherwise.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::events::{now, read_from, Kind};
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
    /// How far each event file was read, and the counts so far: acquired, writes taken,
    /// writes refused.
    offsets: HashMap<PathBuf, u64>,
    counts: (usize, usize, usize),
}

impl Progress {
    /// Progress to stdout.
    pub fn new(ui: Ui) -> Self {
        Self {
            ui,
            last_plain: None,
            run: String::new(),
            dir: Default::default(),
            span: (0, 0),
            doing: String::new(),
            offsets: HashMap::new(),
            counts: (0, 0, 0),
        }
    }

    /// Starts following a new run's folder.
    pub fn follow_run(&mut self, run: &str, dir: &Path, span: (u64, u64)) {
        self.run = run.to_owned();
        self.dir = dir.to_owned();
        self.span = span;
        self.offsets.clear();
        self.counts = (0, 0, 0);
    }

    /// Reads what the event files gained since the last tick, and counts it.
    fn follow(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for path in entries.filter_map(|e| e.ok()).map(|e| e.path()) {
            let offset = self.offsets.get(&path).copied().unwrap_or(0);
            let (events, next) = read_from(&path, offset);
            for e in events {
                match e.kind {
                    Kind::Acquired { .. } => self.counts.0 += 1,
                    Kind::WriteAccepted { .. } => self.counts.1 += 1,
                    Kind::WriteRejected { .. } => self.counts.2 += 1,
                    _ => {}
                }
            }
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

    fn status(&mut self) -> String {
        self.follow();
        let (acquired, accepted, rejected) = self.counts;
        let secs = |ns: u64| ns as f64 / 1e9;
        let (start, end) = self.span;
        format!(
            "{}: {:>5.1} of {:.0} s  acquired {acquired}  writes {accepted} taken, {rejected} \
             refused{}",
            self.run,
            secs(now().saturating_sub(start)),
            secs(end.saturating_sub(start)),
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
