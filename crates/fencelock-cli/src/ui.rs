//! Output for long-running commands (`demo`, `verify`): one progress line redrawn in place
//! on a terminal, plain lines otherwise.

use std::io::Write;

/// Progress on a terminal (one line redrawn in place), plain lines otherwise.
pub struct Ui {
    /// Whether stdout is a terminal.
    pub tty: bool,
}

impl Ui {
    /// Prints a line that stays (clearing a progress line first).
    pub fn line(&self, text: &str) {
        if self.tty {
            out!("\r\x1b[2K");
        }
        outln!("{text}");
    }

    /// Redraws the progress line; off a terminal, prints nothing (callers print plain lines
    /// at their own pace instead).
    pub fn progress(&self, text: &str) {
        if self.tty {
            out!("\r\x1b[2K{text}");
            let _ = std::io::stdout().flush();
        }
    }
}
