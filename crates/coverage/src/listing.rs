//! cprof's listing (spec §2.6): each module's source lines beside their
//! marks, as Inferno's `cpshow` printed them.
//!
//! ```text
//! "\nModule: %s(%s)\t%d%% coverage\n\n"        name, path, coverage
//! per source line: ["%s:" file] "%d\t" CODE "\t%s"   line, mark, text with its newline
//! "\n**** module instructions %d ****\n\n"      instructions executed (the sum of the counts)
//! more than one module: "\n**** total number instructions %d ****\n\n"
//! ```
//!
//! CODE is `+`, `-`, `?` or a space (see [`crate::lines`]), or with `-f`
//! the line's count (a space for a line without code), or `a|b|…` when
//! the line's sub-ranges differ. As in Inferno, a module at 100% coverage
//! prints only its header unless `-f` is given.
//!
//! Adaptations for ELF modules, as `profdev prof`'s report makes them:
//! a module's lines come from several files; they are listed file by file
//! in path order, and with more than one file (and without `-n`) each
//! file's lines are headed by `"%s:\n"`. A file whose text was not found
//! lists only its lines with code, without text: `"%d\t" CODE "\n"`. A
//! module with no line information prints `(no line information)` in
//! place of the lines. Inferno's footer said "dis instructions"; these are
//! machine instructions.

use crate::lines::ModuleLines;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// cprof's display options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `-f`: counts instead of marks.
    pub frequency: bool,
    /// `-n`: prefix each line with its source file and a colon.
    pub file_prefix: bool,
    /// `-H` (not Inferno's): head each module's rows with a line naming
    /// the columns: `line\tmark\tsource`, or `line\tcount\tsource` with
    /// `-f` (`file:line` with `-n`).
    pub header: bool,
}

/// A module and the text of its source files (`None`: not found), each
/// file's lines with their newlines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The module's counts on its lines.
    pub lines: ModuleLines,
    /// Source text by file path, as [`ModuleLines::files`] names them.
    pub sources: BTreeMap<String, Option<Vec<String>>>,
}

/// The listing of `modules`, in the order given.
pub fn format(modules: &[Listing], opts: &Options) -> String {
    let mut out = String::new();
    let mut total = 0u64;
    for l in modules {
        let m = &l.lines;
        total = total.saturating_add(m.total);
        let pct = m.coverage_percent();
        let _ = write!(out, "\nModule: {}({})\t{pct}% coverage\n\n", m.name, m.path);
        if pct == 100 && !opts.frequency {
            continue;
        }
        if m.files.is_empty() {
            out.push_str("(no line information)\n");
        } else if opts.header {
            let first = if opts.file_prefix {
                "file:line"
            } else {
                "line"
            };
            let what = if opts.frequency { "count" } else { "mark" };
            let _ = writeln!(out, "{first}\t{what}\tsource");
        }
        let headed = m.files.len() > 1 && !opts.file_prefix;
        for (file, lines) in &m.files {
            if headed {
                let _ = writeln!(out, "{file}:");
            }
            let prefix = if opts.file_prefix {
                format!("{file}:")
            } else {
                String::new()
            };
            match l.sources.get(file).and_then(Option::as_ref) {
                Some(text) => {
                    for (i, s) in text.iter().enumerate() {
                        let n = i as u32 + 1;
                        let mark = lines
                            .get(&n)
                            .map_or_else(|| " ".to_string(), |c| c.mark(opts.frequency));
                        let nl = if s.ends_with('\n') { "" } else { "\n" };
                        let _ = write!(out, "{prefix}{n}\t{mark}\t{s}{nl}");
                    }
                }
                None => {
                    for (n, c) in lines {
                        let _ = writeln!(out, "{prefix}{n}\t{}", c.mark(opts.frequency));
                    }
                }
            }
        }
        let _ = write!(out, "\n**** module instructions {} ****\n\n", m.total);
    }
    if modules.len() > 1 {
        let _ = write!(out, "\n**** total number instructions {total} ****\n\n");
    }
    out
}

/// The largest source file read: 64 MiB.
pub const MAX_SOURCE: u64 = 64 << 20;

/// Read the source files of `lines` (bounded by [`MAX_SOURCE`]); the ones
/// not found are `None`, and named in the second value.
pub fn read_sources(lines: &ModuleLines) -> (BTreeMap<String, Option<Vec<String>>>, Vec<String>) {
    use profdev_symbolize::open::{read_bounded, Follow};
    let mut out = BTreeMap::new();
    let mut missing = Vec::new();
    for file in lines.files.keys() {
        let text = read_bounded(std::path::Path::new(file), MAX_SOURCE, Follow::Yes)
            .ok()
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .split_inclusive('\n')
                    .map(String::from)
                    .collect::<Vec<_>>()
            });
        if text.is_none() {
            missing.push(file.clone());
        }
        out.insert(file.clone(), text);
    }
    (out, missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lines::LineCoverage;

    fn module() -> Listing {
        let mut lines = ModuleLines {
            name: "t".into(),
            path: "/bin/t".into(),
            instructions: 4,
            executed: 3,
            total: 25,
            ..ModuleLines::default()
        };
        let mut a = LineCoverage::default();
        let mut b = LineCoverage::default();
        let mut c = LineCoverage::default();
        lines_add(&mut a, &[(1, 5)]);
        lines_add(&mut b, &[(3, 10), (9, 10)]);
        lines_add(&mut c, &[(2, 0)]);
        let f = lines.files.entry("t.c".into()).or_default();
        f.insert(1, a);
        f.insert(3, b);
        f.insert(4, c);
        let text = ["int f()\n", "{\n", "  x();\n", "  y();\n", "}"];
        Listing {
            lines,
            sources: [(
                "t.c".to_string(),
                Some(text.iter().map(|s| s.to_string()).collect()),
            )]
            .into(),
        }
    }

    fn lines_add(l: &mut LineCoverage, cols: &[(u32, u64)]) {
        for &(col, n) in cols {
            let codes = 1 | if n > 0 { 2 } else { 4 };
            l.columns.push(crate::lines::Column {
                column: col,
                codes,
                count: n,
            });
        }
    }

    #[test]
    fn marks_and_counts() {
        let m = module();
        assert_eq!(
            format(std::slice::from_ref(&m), &Options::default()),
            "\nModule: t(/bin/t)\t75% coverage\n\n1\t+\tint f()\n2\t \t{\n3\t+\t  x();\n\
             4\t-\t  y();\n5\t \t}\n\n**** module instructions 25 ****\n\n"
        );
        let opts = Options {
            frequency: true,
            file_prefix: true,
            ..Options::default()
        };
        let text = format(&[m.clone(), m], &opts);
        assert!(text.starts_with(
            "\nModule: t(/bin/t)\t75% coverage\n\nt.c:1\t5\tint f()\nt.c:2\t \t{\nt.c:3\t10\t"
        ));
        assert!(text.ends_with("\n**** total number instructions 50 ****\n\n"));
    }

    #[test]
    fn h_heads_the_rows_and_leaves_them_alone() {
        let m = module();
        let plain = format(std::slice::from_ref(&m), &Options::default());
        let opts = Options {
            frequency: true,
            header: true,
            ..Options::default()
        };
        let counts = Options {
            header: false,
            ..opts
        };
        assert_eq!(
            format(std::slice::from_ref(&m), &opts),
            format(std::slice::from_ref(&m), &counts)
                .replace("coverage\n\n1\t5", "coverage\n\nline\tcount\tsource\n1\t5")
        );
        let marks = Options {
            header: true,
            ..Options::default()
        };
        assert_eq!(
            format(&[m], &marks),
            plain.replace("coverage\n\n1", "coverage\n\nline\tmark\tsource\n1")
        );
    }

    #[test]
    fn missing_sources_and_full_coverage() {
        let mut m = module();
        m.sources.insert("t.c".into(), None);
        let text = format(std::slice::from_ref(&m), &Options::default());
        assert!(text.contains("\n\n1\t+\n3\t+\n4\t-\n\n****"), "{text}");
        m.lines.executed = 4;
        assert_eq!(
            format(&[m], &Options::default()),
            "\nModule: t(/bin/t)\t100% coverage\n\n"
        );
    }
}
