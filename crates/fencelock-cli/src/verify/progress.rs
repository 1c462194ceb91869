//! The progress display while a run goes: one line redrawn in place on a terminal, a plain
//! line every few seconds otherwise.

use std::path::Path;
use std::time::{Duration, Instant};

use super::events::{now, read_dir, Kind};
use crate::ui::Ui;

/// How often a plain (non-terminal) progress line is printed.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// The progress of the current run.
pub struct Progress {
    ui: Ui,
    last_plain: Option<Instant>,
    /// The run's name, e.g. `run` or `control`.
    pub run: String,
    /// The run's folder (its event files).
    pub dir: std::path::PathBuf,
    /// When the run started and ends (ns, monotonic).
    pub span: (u64, u64),
    /// What is happening: the fault under way, if any.
    pub doing: String,
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
        }
    }

    /// A line that stays.
    pub fn line(&self, text: &str) {
        self.ui.line(text);
    }

    /// Redraws the progress line (on a terminal), or prints it now and then (otherwise).
    pub fn tick(&mut self) {
        let text = self.status(&self.dir);
        if self.ui.tty {
            self.ui.progress(&text);
        } else if self.last_plain.is_none_or(|t| t.elapsed() >= PLAIN_EVERY) {
            self.last_plain = Some(Instant::now());
            self.ui.line(&text);
        }
    }

    fn status(&self, dir: &Path) -> String {
        let events = read_dir(dir).unwrap_or_default();
        let count = |f: fn(&Kind) -> bool| events.iter().filter(|e| f(&e.kind)).count();
        let acquired = count(|k| matches!(k, Kind::Acquired { .. }));
        let accepted = count(|k| matches!(k, Kind::WriteAccepted { .. }));
        let rejected = count(|k| matches!(k, Kind::WriteRejected { .. }));
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
