//! cprof's notes for the user, gathered so that each kind is one line on
//! standard error however many modules or files it concerns (a C
//! library's line table alone names thousands of source files that are
//! not on the machine): blocks not counted, blocks counted through a
//! breakpoint, modules without debug information or that cannot be read
//! or planned, source files not found, files left out of the exports.
//! A kind with one item keeps its one sentence; with more, a line names
//! how many and the first few. Notes of no known kind (rare: a cache
//! that cannot be written, a report that cannot be read) are said as
//! they come, the first [`MAX_OTHER`], then how many more.

use profdev_coverage::launch::{NOTE_TRAPPED, NOTE_TRAPS, NOTE_UNCOUNTED};
use std::collections::BTreeMap;

/// What a note is about. The order is the order of the lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A module the engine did not plan (`PATH (why)`).
    NotCounted,
    /// A module's blocks that could not be counted (`NAME N of M`).
    Uncounted,
    /// A module's blocks counted through a breakpoint (`NAME N`).
    Trapped,
    /// A module file that cannot be read (`PATH: why`).
    Unreadable,
    /// A module without debug information (its path).
    NoDebugInfo,
    /// A source file not found (its path).
    SourceMissing,
    /// A source file left out of the exports (`MODULE: FILE`).
    LeftOut,
}

/// The most items a line names before it counts the rest.
pub const MAX_NAMED: usize = 3;

/// The most notes of no known kind said one per line.
pub const MAX_OTHER: usize = 3;

/// The notes of one run, by kind.
#[derive(Clone, Debug, Default)]
pub struct Notes {
    /// `-a`: files not found are listed as line numbers (the note says so).
    all: bool,
    /// Items per kind, each key once, in order of arrival.
    items: BTreeMap<Kind, Vec<Item>>,
    /// Breakpoints taken.
    traps: u64,
    /// Notes of no known kind, whole.
    other: Vec<String>,
}

/// One thing a kind of note is about.
#[derive(Clone, Debug)]
struct Item {
    /// What makes it the same item (a path).
    key: String,
    /// Its sentence when it is the only one of its kind (None: the kind's
    /// line with this one item).
    alone: Option<String>,
    /// How a line of its kind names it.
    named: String,
}

/// `path`'s basename.
fn base(path: &str) -> &str {
    path.rsplit('/').find(|s| !s.is_empty()).unwrap_or(path)
}

/// `a, b, c and N more`.
fn named(items: &[Item]) -> String {
    let shown: Vec<&str> = items
        .iter()
        .take(MAX_NAMED)
        .map(|i| i.named.as_str())
        .collect();
    let mut s = shown.join(", ");
    if items.len() > MAX_NAMED {
        s.push_str(&format!(" and {} more", items.len() - MAX_NAMED));
    }
    s
}

impl Notes {
    /// Notes for a listing made with `-a` (`all`) or without.
    pub fn new(all: bool) -> Notes {
        Notes {
            all,
            ..Notes::default()
        }
    }

    fn push(&mut self, kind: Kind, key: &str, alone: Option<String>, named: String) {
        let v = self.items.entry(kind).or_default();
        if !v.iter().any(|i| i.key == key) {
            v.push(Item {
                key: key.to_string(),
                alone,
                named,
            });
        }
    }

    /// A module file that cannot be read, and why.
    pub fn unreadable(&mut self, path: &str, why: &str) {
        self.push(
            Kind::Unreadable,
            path,
            Some(format!(
                "cannot read module {path}: {why}: no lines to mark"
            )),
            format!("{path} ({why})"),
        );
    }

    /// A module without debug information.
    pub fn no_debug_info(&mut self, path: &str) {
        self.push(
            Kind::NoDebugInfo,
            path,
            Some(format!("{path} has no debug information: no lines to mark")),
            base(path).to_string(),
        );
    }

    /// A module with `n` blocks that could not be counted (`of`: of how
    /// many, when known).
    pub fn uncounted(&mut self, path: &str, n: &str) {
        self.push(Kind::Uncounted, path, None, format!("{} {n}", base(path)));
    }

    /// A source file not found.
    pub fn source_missing(&mut self, file: &str) {
        let alone = if self.all {
            format!("source file {file} not found: line numbers only")
        } else {
            format!("source file {file} not found: its lines are not listed (-a lists them)")
        };
        self.push(Kind::SourceMissing, file, Some(alone), file.to_string());
    }

    /// A source file of `module` left out of the exports.
    pub fn left_out(&mut self, module_and_file: &str) {
        self.push(
            Kind::LeftOut,
            module_and_file,
            Some(format!(
                "left out of the exports, its source was not found: {module_and_file}"
            )),
            module_and_file.to_string(),
        );
    }

    /// A note of no known kind, said whole (after `cprof: `).
    pub fn other(&mut self, note: impl Into<String>) {
        let note = note.into();
        if !self.other.contains(&note) {
            self.other.push(note);
        }
    }

    /// A note of the coverage engine (`Server::collect`, an attach), put
    /// with its kind.
    pub fn engine(&mut self, note: &str) {
        if let Some((path, n)) = note
            .strip_suffix(NOTE_UNCOUNTED)
            .and_then(|r| r.rsplit_once(": "))
        {
            return self.uncounted(path, n);
        }
        if let Some((path, n)) = note
            .strip_suffix(NOTE_TRAPPED)
            .and_then(|r| r.rsplit_once(": "))
        {
            let named = format!("{} {n}", base(path));
            return self.push(Kind::Trapped, path, None, named);
        }
        if let Some(n) = note
            .strip_suffix(NOTE_TRAPS)
            .and_then(|n| n.parse::<u64>().ok())
        {
            self.traps = self.traps.saturating_add(n);
            return;
        }
        if let Some((path, why)) = note
            .strip_suffix("; not counted")
            .and_then(|r| r.split_once(": "))
            .filter(|p| p.0.starts_with('/'))
        {
            let named = format!("{path} ({why})");
            return self.push(Kind::NotCounted, path, Some(note.to_string()), named);
        }
        self.other(note);
    }

    /// True when there is nothing to say.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && self.traps == 0 && self.other.is_empty()
    }

    /// The lines to say, each with its `cprof: `, one per kind.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (&kind, items) in &self.items {
            out.push(format!("cprof: {}", self.line(kind, items)));
        }
        if self.traps > 0 && !self.items.contains_key(&Kind::Trapped) {
            out.push(format!("cprof: {}{NOTE_TRAPS}", self.traps));
        }
        for n in self.other.iter().take(MAX_OTHER) {
            out.push(format!("cprof: {n}"));
        }
        if self.other.len() > MAX_OTHER {
            out.push(format!(
                "cprof: and {} more notes",
                self.other.len() - MAX_OTHER
            ));
        }
        out
    }

    fn line(&self, kind: Kind, items: &[Item]) -> String {
        if let [Item { alone: Some(s), .. }] = items {
            return s.clone();
        }
        let (n, names) = (items.len(), named(items));
        match kind {
            Kind::NotCounted => format!("{n} modules not counted: {names}"),
            Kind::Uncounted => {
                format!("blocks that could not be counted (their lines show no mark): {names}")
            }
            Kind::Trapped => {
                let mut s = format!(
                    "blocks shorter than a jump, counted through a breakpoint (slower): {names}"
                );
                if self.traps > 0 {
                    s.push_str(&format!("; {}{NOTE_TRAPS}", self.traps));
                }
                s
            }
            Kind::Unreadable => format!("{n} modules cannot be read, no lines to mark: {names}"),
            Kind::NoDebugInfo => format!(
                "{n} modules have no debug information (cc -g, or their debug packages), no \
                 lines to mark: {names}"
            ),
            Kind::SourceMissing if self.all => {
                format!("{n} source files not found, listed as line numbers only: {names}")
            }
            Kind::SourceMissing => format!(
                "{n} source files not found, their lines not listed (-a lists them): {names}"
            ),
            Kind::LeftOut => format!(
                "{n} source files left out of the exports, their source was not found: {names}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_one_line() {
        let mut n = Notes::new(false);
        for i in 0..1890 {
            n.source_missing(&format!("/b/f{i}.c"));
        }
        n.source_missing("/b/f0.c");
        n.engine("/lib/libc.so.6: 12 of 3400 blocks could not be counted");
        n.engine(&format!("/lib/libc.so.6: 40{NOTE_TRAPPED}"));
        n.engine(&format!("/t/small: 2{NOTE_TRAPPED}"));
        n.engine(&format!("1234{NOTE_TRAPS}"));
        n.no_debug_info("/lib/libc.so.6");
        n.no_debug_info("/lib/ld.so");
        assert_eq!(
            n.lines(),
            [
                "cprof: blocks that could not be counted (their lines show no mark): libc.so.6 \
                 12 of 3400",
                "cprof: blocks shorter than a jump, counted through a breakpoint (slower): \
                 libc.so.6 40, small 2; 1234 breakpoints were taken",
                "cprof: 2 modules have no debug information (cc -g, or their debug packages), \
                 no lines to mark: libc.so.6, ld.so",
                "cprof: 1890 source files not found, their lines not listed (-a lists them): \
                 /b/f0.c, /b/f1.c, /b/f2.c and 1887 more",
            ]
        );
    }

    #[test]
    fn one_item_keeps_its_sentence() {
        let mut n = Notes::new(true);
        n.source_missing("/x/gone.c");
        n.left_out("/bin/k: /x/gone.c");
        n.no_debug_info("/bin/k");
        n.engine("/bin/k: too large for the bounds; not counted");
        assert_eq!(
            n.lines(),
            [
                "cprof: /bin/k: too large for the bounds; not counted",
                "cprof: /bin/k has no debug information: no lines to mark",
                "cprof: source file /x/gone.c not found: line numbers only",
                "cprof: left out of the exports, its source was not found: /bin/k: /x/gone.c",
            ]
        );
    }

    #[test]
    fn other_notes_are_said_whole_then_counted() {
        let mut n = Notes::default();
        assert!(n.is_empty());
        for i in 0..5 {
            n.engine(&format!("cache {i} cannot be written"));
        }
        n.engine("cache 0 cannot be written");
        let l = n.lines();
        assert_eq!(l.len(), MAX_OTHER + 1);
        assert_eq!(l[0], "cprof: cache 0 cannot be written");
        assert_eq!(l[MAX_OTHER], "cprof: and 2 more notes");
    }
}
