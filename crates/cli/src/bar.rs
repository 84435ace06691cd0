//! A progress bar (indicatif) for a long step a user waits for after a
//! run: `profdev prof` symbolizing a big profile, `profdev export` writing
//! a big export; any command with such a step takes one the same way. Drawn on stderr only when stderr is a terminal and the
//! step is big enough to be waited for; otherwise nothing at all, so
//! scripts and pipes see exactly the text they saw before. Cleared when the
//! step ends (or the bar is dropped on an error).
//!
//! ```text
//! profdev prof: symbolizing [#########>---------------]  41230/100000
//! ```

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// Steps with less work than this (pcs to symbolize, bytes to write) end
/// before a bar would be read: none is drawn.
pub const WORTH_A_BAR: u64 = 20_000;

/// The bar of one step; nothing when not on a terminal.
pub struct Bar(Option<ProgressBar>);

impl Bar {
    /// A bar `NAME: WHAT [...] pos/len` on stderr if stderr is a terminal
    /// and `len` is at least [`WORTH_A_BAR`].
    pub fn start(name: &str, what: &str, len: u64) -> Bar {
        Bar::on(name, what, len, std::io::stderr().is_terminal())
    }

    fn on(name: &str, what: &str, len: u64, terminal: bool) -> Bar {
        if terminal && len >= WORTH_A_BAR {
            Bar::drawn_on(name, what, len, ProgressDrawTarget::stderr())
        } else {
            Bar(None)
        }
    }

    fn drawn_on(name: &str, what: &str, len: u64, target: ProgressDrawTarget) -> Bar {
        let style = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("#>-");
        Bar(Some(
            ProgressBar::with_draw_target(Some(len), target)
                .with_style(style)
                .with_message(format!("{name}: {what}")),
        ))
    }

    /// `n` more units done.
    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.inc(n);
        }
    }

    /// Is a bar shown?
    #[cfg(test)]
    fn shown(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for Bar {
    /// The step is over (or failed): the bar goes.
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_off_a_terminal() {
        let b = Bar::on("profdev prof", "symbolizing", 1 << 40, false);
        assert!(!b.shown());
        b.inc(5);
        drop(b);
        // Nor on a terminal for a short step.
        assert!(!Bar::on("x", "y", WORTH_A_BAR - 1, true).shown());
    }

    #[test]
    fn a_shown_bar_counts() {
        let b = Bar::drawn_on(
            "profdev prof",
            "symbolizing",
            100,
            ProgressDrawTarget::hidden(),
        );
        assert!(b.shown());
        b.inc(40);
        b.inc(2);
        let inner = b.0.as_ref().unwrap();
        assert_eq!((inner.position(), inner.length()), (42, Some(100)));
        assert_eq!(inner.message(), "profdev prof: symbolizing");
        drop(b);
    }
}
