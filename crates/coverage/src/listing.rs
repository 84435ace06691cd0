//! cprof's listing (spec §2.6): each module's source lines beside their
//! marks, as Inferno's `cpshow` printed them.
//!
//! ```text
//! "\nModule: %s(%s)\t%d%% coverage\n\n"        name, path, coverage
//! per source line: ["%s:" file] "%d\t" CODE "\t%s"   line, mark, text with its newline
//! "\n**** module instructions %d ****\n\n"      instructions executed (the sum of the counts;
//!                                              in hit mode, 1 per block that ran: those that ran)
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
//! in path order, and with more than one file in the module (and without
//! `-n`) each file's lines are headed by `"%s:\n"`. Inferno's footer said
//! "dis instructions"; these are machine instructions.
//!
//! By default only a module's own source files whose text was read are
//! listed: files in which one of its functions is defined
//! ([`ModuleLines::defining`]; all its files when it names no function),
//! so that the lines of a program are not lost among those of its
//! libraries' sources (the line tables of a C library name thousands of
//! files that are not on the machine, and the compiler's intrinsic
//! headers, which are, for code inlined from them). A module with none
//! prints its header and footer only. With [`Options::all`] (`-a`) every
//! file is listed: a header whose code was only inlined, and a file whose
//! text was not found as its lines with code, without text (`"%d\t"
//! CODE "\n"`); a module with no line information prints `(no line
//! information)` in place of the lines.

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
    /// `-a`: list the files whose text was not found too (line numbers
    /// and marks only), and say `(no line information)` for a module
    /// without lines.
    pub all: bool,
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
        if m.files.is_empty() && opts.all {
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
            let text = l.sources.get(file).and_then(Option::as_ref);
            let own = m.defining.is_empty() || m.defining.contains(file);
            if !opts.all && (text.is_none() || !own) {
                continue;
            }
            if headed {
                let _ = writeln!(out, "{file}:");
            }
            let prefix = if opts.file_prefix {
                format!("{file}:")
            } else {
                String::new()
            };
            match text {
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
        let all = Options {
            all: true,
            ..Options::default()
        };
        let text = format(std::slice::from_ref(&m), &all);
        assert!(text.contains("\n\n1\t+\n3\t+\n4\t-\n\n****"), "{text}");
        // By default a file not found lists no rows: header and totals.
        assert_eq!(
            format(std::slice::from_ref(&m), &Options::default()),
            "\nModule: t(/bin/t)\t75% coverage\n\n\n**** module instructions 25 ****\n\n"
        );
        m.lines.executed = 4;
        assert_eq!(
            format(&[m], &Options::default()),
            "\nModule: t(/bin/t)\t100% coverage\n\n"
        );
    }

    #[test]
    fn only_files_read_are_listed_unless_all() {
        let mut m = module();
        let gone = m.lines.files["t.c"].clone();
        m.lines.files.insert("/build/gone.c".into(), gone.clone());
        m.sources.insert("/build/gone.c".into(), None);
        let text = format(std::slice::from_ref(&m), &Options::default());
        assert!(!text.contains("gone.c"), "{text}");
        assert!(
            text.contains("\n\nt.c:\n1\t+\tint f()\n"),
            "still headed: the module has two files: {text}"
        );
        let all = Options {
            all: true,
            ..Options::default()
        };
        let text = format(std::slice::from_ref(&m), &all);
        assert!(
            text.contains("/build/gone.c:\n1\t+\n3\t+\n4\t-\n"),
            "{text}"
        );
        // A header whose code was only inlined (no function defined in
        // it): listed with -a only.
        m.lines.defining.insert("t.c".into());
        m.lines
            .files
            .insert("/usr/include/x.h".into(), gone.clone());
        m.sources
            .insert("/usr/include/x.h".into(), Some(vec!["inline\n".into()]));
        let text = format(std::slice::from_ref(&m), &Options::default());
        assert!(!text.contains("x.h"), "{text}");
        assert!(text.contains("\n\nt.c:\n1\t+\tint f()\n"), "{text}");
        assert!(
            format(std::slice::from_ref(&m), &all).contains("/usr/include/x.h:\n1\t+\tinline\n")
        );
        // A module without lines: its header and totals, `(no line
        // information)` with -a only.
        m.lines.files.clear();
        let text = format(std::slice::from_ref(&m), &Options::default());
        assert!(!text.contains("no line information"), "{text}");
        assert!(format(&[m], &all).contains("\n\n(no line information)\n\n****"));
    }
}
