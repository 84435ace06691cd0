//! prof(1)'s time report: samples attributed to source lines and
//! functions, printed as Inferno's `prof` printed them.
//!
//! Two pure steps:
//!
//! 1. [`attribute`] turns a module's histogram pairs `(pc, count)` into
//!    per-line and per-function counts through a [`SourceMap`] (the
//!    module's `pctosrc` and function table; profdev's comes from DWARF
//!    line tables and inlined subroutines, tests use an abstract one). As
//!    in Inferno's `profile.b`, an instruction that spans several lines
//!    shares its count among them: `q = count / n`, `r = count - q*n`, the
//!    first `r` lines get `q + 1`, the rest `q`. A function gets the whole
//!    count of every pc it holds. Unlike Inferno's Dis pcs, which pointed
//!    past the sampled instruction, these pcs are the sampled instruction:
//!    nothing is subtracted.
//! 2. [`format()`] prints modules in the order given (prof lists them oldest
//!    record first), each as:
//!
//! ```text
//! "\nModule: %s(%s)\n\n"                                 name, path
//! -f: per function: ["%s:" file] "%s\t%.2f\t%s()\n"      line, 100*count/tot, name
//!     "\n**** module sampling points %d ****\n\n"        (+ "\n" if -l too)
//! -l: per line:     ["%s:" file] "%d\t%.2f\t%s"          line, 100*count/tot, text with its newline
//!     "\n**** module sampling points %d ****\n\n"
//! after all modules, if more than one: "\n**** total sampling points %d ****\n\n"
//! ```
//!
//! With `-H` (not Inferno's) each table's rows are headed by a line naming
//! the columns, `line\t%time\tfunction` or `line\t%time\tsource`
//! (`file:line` with `-n`); the rows are unchanged.
//!
//! `tot` is the samples of all modules together, so percentages add up to
//! 100 over the whole report. Rows with a zero count are printed only with
//! `-v` (zero lines: every line of each source file that has a sampled
//! line; zero functions: every function the caller lists).
//!
//! Adaptations for ELF modules, where Inferno had one Limbo source per
//! module:
//!
//! * A module's lines may come from several files (headers, inlined
//!   library code). Lines are grouped by file, files in path order; with
//!   more than one file and without `-n`, each group is headed by a line
//!   `"%s:\n"` naming its file.
//! * A line whose source file was not found is printed without its text:
//!   `"%d\t%.2f\n"`.
//! * A function row's first column is its line when the debug info gives
//!   one, else its entry address in hex (`0x1130`, an ELF file address),
//!   else `?`.
//! * A module without line information (no DWARF) prints its function rows
//!   in place of the line table (and no line table at all when `-f` already
//!   printed them).
//! * Samples at pcs with no line are summed on one row,
//!   `"?\t%.2f\t(no line information)\n"`, after the module's lines.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The source range of one instruction: lines `first..=last` of `file`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SrcRange {
    /// Source file path.
    pub file: String,
    /// First line.
    pub first: u32,
    /// Last line (== first for a one-line instruction).
    pub last: u32,
}

/// A function: its name, where it starts in the source, and its entry
/// address if it has an out-of-line body.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Function {
    /// Source file of its first line, if known.
    pub file: Option<String>,
    /// Its first line, if known.
    pub line: Option<u32>,
    /// Its name.
    pub name: String,
    /// Its entry address in the module's ELF address space, if known.
    pub addr: Option<u64>,
}

/// A module's `pctosrc` and function table.
pub trait SourceMap {
    /// The source lines of the instruction at `pc`, if known.
    fn lines(&self, pc: u64) -> Option<SrcRange>;
    /// The function holding `pc`, if known.
    fn function(&self, pc: u64) -> Option<Function>;
}

/// A module's samples, attributed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attribution {
    /// Samples per (file, line).
    pub lines: BTreeMap<(String, u32), u64>,
    /// Samples per function.
    pub functions: BTreeMap<Function, u64>,
    /// Samples at pcs with no line.
    pub no_line: u64,
    /// Samples at pcs in no function.
    pub no_function: u64,
    /// All the module's samples.
    pub total: u64,
}

/// Attribute `pairs` (pc, count) through `map`.
pub fn attribute(pairs: &[(u64, u64)], map: &dyn SourceMap) -> Attribution {
    let mut a = Attribution::default();
    for &(pc, count) in pairs {
        a.total += count;
        match map.lines(pc) {
            Some(r) if r.last >= r.first => {
                let n = u64::from(r.last - r.first) + 1;
                let q = count / n;
                let rem = count - q * n;
                for (i, line) in (r.first..=r.last).enumerate() {
                    let share = if (i as u64) < rem { q + 1 } else { q };
                    if share != 0 {
                        *a.lines.entry((r.file.clone(), line)).or_insert(0) += share;
                    }
                }
            }
            _ => a.no_line += count,
        }
        match map.function(pc) {
            Some(f) => *a.functions.entry(f).or_insert(0) += count,
            None => a.no_function += count,
        }
    }
    a
}

/// prof's output options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `-f`: the function table.
    pub functions: bool,
    /// `-l`: the line table (the default when neither is asked for).
    pub lines: bool,
    /// `-n`: prefix each row with its source file and a colon.
    pub file_prefix: bool,
    /// `-v`: include rows whose count is zero.
    pub zeros: bool,
    /// `-H` (not Inferno's): head each table with a line naming its
    /// columns ([`header`]).
    pub header: bool,
}

/// The line `-H` puts before a table's rows: its columns' names,
/// tab-separated as the rows are; `what` names the last column
/// (`function`, `source`). With `-n` the first column is `file:line`.
pub fn header(file_prefix: bool, middle: &str, what: &str) -> String {
    let first = if file_prefix { "file:line" } else { "line" };
    format!("{first}\t{middle}\t{what}\n")
}

/// One source file of a module, with samples per line.
pub type SourceFile = crate::source::SourceFile<u64>;

/// One module, ready to print.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleProfile {
    /// Its name.
    pub name: String,
    /// Its file path.
    pub path: String,
    /// Function rows: every sampled function, plus zero ones to show with
    /// `-v`.
    pub functions: Vec<(Function, u64)>,
    /// Source files with sampled lines, in path order.
    pub files: Vec<SourceFile>,
    /// True if the module has line information at all.
    pub has_lines: bool,
    /// Samples at pcs with no line.
    pub no_line: u64,
    /// Samples at pcs in no function.
    pub no_function: u64,
    /// The module's samples.
    pub total: u64,
}

impl ModuleProfile {
    /// A module from its attribution; source texts are filled in later
    /// (they are the caller's I/O).
    pub fn new(name: &str, path: &str, a: &Attribution, has_lines: bool) -> Self {
        ModuleProfile {
            name: name.to_string(),
            path: path.to_string(),
            functions: a.functions.iter().map(|(f, &n)| (f.clone(), n)).collect(),
            files: crate::source::files(&a.lines),
            has_lines,
            no_line: a.no_line,
            no_function: a.no_function,
            total: a.total,
        }
    }
}

fn pct(count: u64, tot: u64) -> f64 {
    if tot == 0 {
        0.0
    } else {
        100.0 * count as f64 / tot as f64
    }
}

fn function_rows(out: &mut String, m: &ModuleProfile, opts: &Options, tot: u64) {
    if opts.header {
        out.push_str(&header(opts.file_prefix, "%time", "function"));
    }
    let mut rows: Vec<&(Function, u64)> = m
        .functions
        .iter()
        .filter(|(_, n)| *n != 0 || opts.zeros)
        .collect();
    // Source order; rows without a file (no debug info) after, by address.
    rows.sort_by(|(a, _), (b, _)| {
        (a.file.is_none(), &a.file, a.line, a.addr, &a.name).cmp(&(
            b.file.is_none(),
            &b.file,
            b.line,
            b.addr,
            &b.name,
        ))
    });
    for (f, n) in rows {
        if opts.file_prefix {
            if let Some(file) = &f.file {
                let _ = write!(out, "{file}:");
            }
        }
        let first = match (f.line, f.addr) {
            (Some(l), _) => l.to_string(),
            (None, Some(a)) => format!("{a:#x}"),
            (None, None) => "?".to_string(),
        };
        let _ = writeln!(out, "{first}\t{:.2}\t{}()", pct(*n, tot), f.name);
    }
    if m.no_function != 0 {
        let _ = writeln!(out, "?\t{:.2}\t??()", pct(m.no_function, tot));
    }
}

fn line_rows(out: &mut String, m: &ModuleProfile, opts: &Options, tot: u64) {
    if opts.header {
        out.push_str(&header(opts.file_prefix, "%time", "source"));
    }
    let layout = crate::source::Layout {
        file_prefix: opts.file_prefix,
        zeros: opts.zeros,
    };
    crate::source::write_lines(
        out,
        &m.files,
        layout,
        |_| true,
        |n| format!("{:.2}", pct(n, tot)),
    );
    if m.no_line != 0 {
        let _ = writeln!(out, "?\t{:.2}\t(no line information)", pct(m.no_line, tot));
    }
}

/// The report for `modules` (in the order given).
pub fn format(modules: &[ModuleProfile], opts: &Options) -> String {
    let mut opts = *opts;
    if !opts.functions && !opts.lines {
        opts.lines = true;
    }
    let tot: u64 = modules.iter().map(|m| m.total).sum();
    let mut out = String::new();
    for m in modules {
        let _ = write!(out, "\nModule: {}({})\n\n", m.name, m.path);
        let trailer = format!("\n**** module sampling points {} ****\n\n", m.total);
        if opts.functions {
            function_rows(&mut out, m, &opts, tot);
            out.push_str(&trailer);
        }
        if opts.lines {
            if m.has_lines {
                if opts.functions {
                    out.push('\n');
                }
                line_rows(&mut out, m, &opts, tot);
                out.push_str(&trailer);
            } else if !opts.functions {
                function_rows(&mut out, m, &opts, tot);
                out.push_str(&trailer);
            }
        }
    }
    if modules.len() > 1 {
        let _ = write!(out, "\n**** total sampling points {tot} ****\n\n");
    }
    out
}

#[cfg(test)]
#[path = "../tests/common/tv_p3.rs"]
mod tv_p3;

#[cfg(test)]
mod tests {
    use super::*;

    use super::tv_p3::TvP3;

    /// TV-P3's pairs `1 3`, `3 5`, `4 2` were Dis pcs one past the sampled
    /// instruction; as exact pcs they are `0 3`, `2 5`, `3 2`.
    const TV_P3_PAIRS: [(u64, u64); 3] = [(0, 3), (2, 5), (3, 2)];

    #[test]
    fn tv_p3_attribution() {
        let a = attribute(&TV_P3_PAIRS, &TvP3);
        let lines: Vec<_> = a.lines.iter().map(|((_, l), &n)| (*l, n)).collect();
        assert_eq!(lines, [(1, 3), (2, 3), (3, 2), (4, 2)]);
        let fns: Vec<_> = a
            .functions
            .iter()
            .map(|(f, &n)| (f.name.as_str(), n))
            .collect();
        assert_eq!(fns, [("f1", 3), ("f2", 7)]);
        assert_eq!((a.total, a.no_line, a.no_function), (10, 0, 0));
    }

    #[test]
    fn split_gives_the_remainder_to_the_first_lines() {
        struct Wide;
        impl SourceMap for Wide {
            fn lines(&self, _: u64) -> Option<SrcRange> {
                Some(SrcRange {
                    file: "w".into(),
                    first: 10,
                    last: 13,
                })
            }
            fn function(&self, _: u64) -> Option<Function> {
                None
            }
        }
        let a = attribute(&[(0, 6), (1, 1)], &Wide);
        let lines: Vec<_> = a.lines.iter().map(|((_, l), &n)| (*l, n)).collect();
        // 6 over 4 lines: 2,2,1,1; then 1 over 4 lines: 1,0,0,0.
        assert_eq!(lines, [(10, 3), (11, 2), (12, 1), (13, 1)]);
        assert_eq!(a.no_function, 7);
    }

    fn tv_p3_module() -> ModuleProfile {
        let a = attribute(&TV_P3_PAIRS, &TvP3);
        let mut m = ModuleProfile::new("X", "/dis/x.dis", &a, true);
        m.files[0].text = Some(["a\n", "b\n", "c\n", "d\n"].map(String::from).to_vec());
        m
    }

    #[test]
    fn tv_p3_report() {
        let out = format(
            &[tv_p3_module()],
            &Options {
                functions: true,
                lines: true,
                ..Default::default()
            },
        );
        assert_eq!(
            out,
            "\nModule: X(/dis/x.dis)\n\n1\t30.00\tf1()\n2\t70.00\tf2()\n\n\
             **** module sampling points 10 ****\n\n\n\
             1\t30.00\ta\n2\t30.00\tb\n3\t20.00\tc\n4\t20.00\td\n\n\
             **** module sampling points 10 ****\n\n"
        );
    }

    #[test]
    fn h_heads_each_table_and_leaves_the_rows_alone() {
        let opts = Options {
            functions: true,
            lines: true,
            ..Default::default()
        };
        let plain = format(&[tv_p3_module()], &opts);
        let headed = format(
            &[tv_p3_module()],
            &Options {
                header: true,
                ..opts
            },
        );
        assert_eq!(
            headed,
            plain
                .replace(
                    "\n\n1\t30.00\tf1",
                    "\n\nline\t%time\tfunction\n1\t30.00\tf1"
                )
                .replace("\n\n1\t30.00\ta", "\n\nline\t%time\tsource\n1\t30.00\ta")
        );
        assert_eq!(
            header(true, "%time", "source"),
            "file:line\t%time\tsource\n"
        );
    }

    #[test]
    fn defaults_prefixes_zeros_and_missing_sources() {
        let mut m = tv_p3_module();
        m.files[0].text.as_mut().unwrap().push("e\n".into());
        let out = format(
            std::slice::from_ref(&m),
            &Options {
                file_prefix: true,
                zeros: true,
                ..Default::default()
            },
        );
        assert!(out.contains("x.b:4\t20.00\td\nx.b:5\t0.00\te\n"), "{out}");
        m.files[0].text = None;
        m.files[0].values.remove(&2);
        let out = format(&[m], &Options::default());
        assert!(
            out.contains("\n1\t30.00\n3\t20.00\n4\t20.00\n\n****"),
            "{out}"
        );
    }
}
