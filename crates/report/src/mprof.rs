//! mprof(1)'s memory report: bytes charged to allocating sites, attributed
//! to source lines and functions, printed as Inferno's `mprof` printed
//! them (spec §2.6).
//!
//! [`attribute`] turns a module's sites `(p, current, high water)`, where
//! p is the allocating call's return address, into per-line and
//! per-function pairs through the same [`SourceMap`] prof uses, looked up
//! at `p - 1` (the call instruction, as Inferno's library subtracted 1).
//! An instruction spanning several lines shares its bytes as prof shares
//! samples (the first lines get the remainder). [`format()`] prints:
//!
//! ```text
//! "\nModule: %s(%s)\n\n"
//! -l: ["%s:" file] "%d\t%d\t%d\t%s"    line, current, high water, text;  "\n" if -f or -M
//! -f: ["%s:" file] "%d\t%d\t%d\t%s()\n" line, current, high water, name;  "\n" if -M
//! -M: "Module totals\t%d\t%d\n\n"
//! more than one module: "Grand totals\t%d\t%d\n\n"
//! ```
//!
//! With `-H` (not Inferno's) the line and function tables are headed by
//! `line\tcurrent\thigh-water\tsource` and `…\tfunction` (`file:line`
//! with `-n`); the rows are unchanged.
//!
//! Rows with both values zero are printed only with `-v`. The module
//! totals are the module's own counters (its high water is the most its
//! sites held at once, not the sum of their high waters). As in prof's
//! report, lines of several files are grouped by file under a `"%s:\n"`
//! heading (without `-n`), a line whose source was not found is printed
//! without text, and bytes at sites with no line information are summed on
//! a row `"?\t%d\t%d\t(no line information)"`.

use crate::prof::{Function, SourceMap};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Current and high-water bytes.
pub type Bytes = (u64, u64);

fn add(a: &mut Bytes, b: Bytes) {
    a.0 += b.0;
    a.1 += b.1;
}

/// A module's sites, attributed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attribution {
    /// Bytes per (file, line).
    pub lines: BTreeMap<(String, u32), Bytes>,
    /// Bytes per function.
    pub functions: BTreeMap<Function, Bytes>,
    /// Bytes at sites with no line.
    pub no_line: Bytes,
}

/// Attribute `sites` (return address, current, high water) through `map`.
pub fn attribute(sites: &[(u64, u64, u64)], map: &dyn SourceMap) -> Attribution {
    let mut a = Attribution::default();
    for &(p, cur, hw) in sites {
        let pc = p.saturating_sub(1);
        match map.lines(pc) {
            Some(r) if r.last >= r.first => {
                let n = u64::from(r.last - r.first) + 1;
                let share = |v: u64, i: u64| v / n + u64::from(i < v % n);
                for (i, line) in (r.first..=r.last).enumerate() {
                    let b = (share(cur, i as u64), share(hw, i as u64));
                    add(a.lines.entry((r.file.clone(), line)).or_default(), b);
                }
            }
            _ => add(&mut a.no_line, (cur, hw)),
        }
        let f = map.function(pc).unwrap_or(Function {
            file: None,
            line: None,
            name: "??".into(),
            addr: None,
        });
        add(a.functions.entry(f).or_default(), (cur, hw));
    }
    a
}

/// mprof's output options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `-f`: the function table.
    pub functions: bool,
    /// `-l`: the line table.
    pub lines: bool,
    /// `-M`: module totals.
    pub module_totals: bool,
    /// `-n`: prefix rows with their source file.
    pub file_prefix: bool,
    /// `-v`: include rows whose values are zero.
    pub zeros: bool,
    /// `-H` (not Inferno's): head each table with a line naming its
    /// columns (`line\tcurrent\thigh-water\tsource`).
    pub header: bool,
}

impl Options {
    /// Inferno's defaults: `-l` when neither `-f` nor `-l` is given, and
    /// `-M` too when no table option is given at all.
    pub fn with_defaults(mut self) -> Options {
        if !self.functions && !self.lines {
            if !self.module_totals {
                self.module_totals = true;
            }
            self.lines = true;
        }
        self
    }
}

/// One source file of a module, with (current, high-water) bytes per line.
pub type SourceFile = crate::source::SourceFile<Bytes>;

/// One module, ready to print.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleReport {
    /// Its name.
    pub name: String,
    /// Its path.
    pub path: String,
    /// Function rows.
    pub functions: Vec<(Function, Bytes)>,
    /// Files with lines, in path order.
    pub files: Vec<SourceFile>,
    /// Bytes at sites with no line.
    pub no_line: Bytes,
    /// The module's own totals.
    pub totals: Bytes,
}

impl ModuleReport {
    /// A module from its attribution and its totals; texts are filled in
    /// by the caller.
    pub fn new(name: &str, path: &str, a: &Attribution, totals: Bytes) -> Self {
        ModuleReport {
            name: name.into(),
            path: path.into(),
            functions: a.functions.iter().map(|(f, &b)| (f.clone(), b)).collect(),
            files: crate::source::files(&a.lines),
            no_line: a.no_line,
            totals,
        }
    }
}

fn line_rows(out: &mut String, m: &ModuleReport, opts: &Options) {
    if opts.header {
        out.push_str(&crate::prof::header(
            opts.file_prefix,
            "current\thigh-water",
            "source",
        ));
    }
    let layout = crate::source::Layout {
        file_prefix: opts.file_prefix,
        zeros: opts.zeros,
    };
    let shown = |(cur, hw): Bytes| cur != 0 || hw != 0;
    crate::source::write_lines(out, &m.files, layout, shown, |(cur, hw)| {
        format!("{cur}\t{hw}")
    });
    if m.no_line != (0, 0) {
        let _ = writeln!(
            out,
            "?\t{}\t{}\t(no line information)",
            m.no_line.0, m.no_line.1
        );
    }
}

fn function_rows(out: &mut String, m: &ModuleReport, opts: &Options) {
    if opts.header {
        out.push_str(&crate::prof::header(
            opts.file_prefix,
            "current\thigh-water",
            "function",
        ));
    }
    let mut rows: Vec<&(Function, Bytes)> = m
        .functions
        .iter()
        .filter(|(_, b)| *b != (0, 0) || opts.zeros)
        .collect();
    rows.sort_by(|(a, _), (b, _)| {
        (a.file.is_none(), &a.file, a.line, a.addr, &a.name).cmp(&(
            b.file.is_none(),
            &b.file,
            b.line,
            b.addr,
            &b.name,
        ))
    });
    for (f, (cur, hw)) in rows {
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
        let _ = writeln!(out, "{first}\t{cur}\t{hw}\t{}()", f.name);
    }
}

/// The report for `modules`, in the order given.
pub fn format(modules: &[ModuleReport], opts: &Options) -> String {
    let opts = opts.with_defaults();
    let mut out = String::new();
    let mut grand = (0, 0);
    for m in modules {
        add(&mut grand, m.totals);
        let _ = write!(out, "\nModule: {}({})\n\n", m.name, m.path);
        if opts.lines {
            line_rows(&mut out, m, &opts);
            if opts.functions || opts.module_totals {
                out.push('\n');
            }
        }
        if opts.functions {
            function_rows(&mut out, m, &opts);
            if opts.module_totals {
                out.push('\n');
            }
        }
        if opts.module_totals {
            let _ = write!(out, "Module totals\t{}\t{}\n\n", m.totals.0, m.totals.1);
        }
    }
    if modules.len() > 1 {
        let _ = write!(out, "Grand totals\t{}\t{}\n\n", grand.0, grand.1);
    }
    out
}

/// One row of the leak report: the blocks one site never freed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leak {
    /// Bytes never freed.
    pub bytes: u64,
    /// Blocks never freed.
    pub blocks: u64,
    /// `file:line`, or the module and link-time address.
    pub location: String,
    /// The function.
    pub function: String,
}

/// The `--leaks` report: sites with blocks never freed, largest first
/// (ties by location), and the total.
///
/// ```text
/// "Leaks: %d bytes in %d blocks never freed\n\n"
/// "bytes\tblocks\tsite\tfunction\n"
/// "%d\t%d\t%s\t%s()\n"   per site
/// ```
pub fn format_leaks(leaks: &[Leak]) -> String {
    let mut rows: Vec<&Leak> = leaks.iter().filter(|l| l.blocks != 0).collect();
    rows.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then_with(|| a.location.cmp(&b.location))
    });
    let bytes: u64 = rows.iter().map(|l| l.bytes).sum();
    let blocks: u64 = rows.iter().map(|l| l.blocks).sum();
    let mut out = format!("Leaks: {bytes} bytes in {blocks} blocks never freed\n\n");
    if rows.is_empty() {
        return out;
    }
    out.push_str("bytes\tblocks\tsite\tfunction\n");
    for l in rows {
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}()",
            l.bytes, l.blocks, l.location, l.function
        );
    }
    out
}

/// A site's estimates in a sampled run (`--sample-bytes N`): bytes
/// allocated there and still live at the end, each with its standard
/// error.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// Bytes allocated (estimated).
    pub allocated: u64,
    /// Bytes live at the end (estimated).
    pub current: u64,
    /// `file:line`, or the module and link-time address.
    pub location: String,
    /// The function.
    pub function: String,
}

/// The estimates of a sampled run, one row per site, most allocated first
/// (ties by location), at most `max` rows and a line for the rest: each
/// value with `±` its standard error, bounded by `sqrt(n*B)` for an
/// estimate of B bytes (`std_error`).
///
/// ```text
/// Estimates (sampling every 524288 bytes; ± one standard error):
///
/// allocated       ±       current ±       site    function
/// 600234496       17739   0       0       /home/u/s.c:12  small()
/// ```
pub fn format_estimates(
    sites: &[Estimate],
    n: u64,
    max: usize,
    std_error: &dyn Fn(u64, u64) -> f64,
) -> String {
    let mut rows: Vec<&Estimate> = sites.iter().filter(|e| e.allocated > 0).collect();
    rows.sort_by(|a, b| {
        b.allocated
            .cmp(&a.allocated)
            .then_with(|| a.location.cmp(&b.location))
    });
    let mut out = format!(
        "Estimates (sampling every {n} bytes; \u{b1} one standard error; a site that \
         allocated under {n} bytes may show 0):\n\n\
         allocated\t\u{b1}\tcurrent\t\u{b1}\tsite\tfunction\n"
    );
    for e in rows.iter().take(max) {
        let _ = writeln!(
            out,
            "{}\t{:.0}\t{}\t{:.0}\t{}\t{}()",
            e.allocated,
            std_error(e.allocated, n),
            e.current,
            std_error(e.current, n),
            e.location,
            e.function
        );
    }
    if rows.len() > max {
        let rest: u64 = rows[max..].iter().map(|e| e.allocated).sum();
        let _ = writeln!(
            out,
            "({} more sites, {rest} bytes allocated together)",
            rows.len() - max
        );
    }
    out.push('\n');
    out
}

/// A site's temporary blocks for `--temporary`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Temporary {
    /// Blocks freed by their thread before its next allocation.
    pub temporary: u64,
    /// Blocks allocated there in all.
    pub blocks: u64,
    /// `file:line`, or the module and link-time address.
    pub location: String,
    /// The function.
    pub function: String,
}

/// The `--temporary` report: sites with temporary blocks, most first
/// (ties by location), and the totals of all `sites`.
///
/// ```text
/// Temporary: 1000 of 1100 blocks freed by their thread before its next allocation
///
/// temporary       blocks  site    function
/// 1000    1000    /home/u/t.c:9   main()
/// ```
pub fn format_temporary(sites: &[Temporary]) -> String {
    let all: u64 = sites.iter().map(|t| t.blocks).sum();
    let mut rows: Vec<&Temporary> = sites.iter().filter(|t| t.temporary != 0).collect();
    rows.sort_by(|a, b| {
        b.temporary
            .cmp(&a.temporary)
            .then_with(|| a.location.cmp(&b.location))
    });
    let temporary: u64 = rows.iter().map(|t| t.temporary).sum();
    let mut out = format!(
        "Temporary: {temporary} of {all} blocks freed by their thread before its next \
         allocation\n\n"
    );
    if rows.is_empty() {
        return out;
    }
    out.push_str("temporary\tblocks\tsite\tfunction\n");
    for t in rows {
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}()",
            t.temporary, t.blocks, t.location, t.function
        );
    }
    out
}

/// The `--peak` report: `peak` bytes live at the global high-water mark,
/// then what held them, largest first (ties by name): `rows` of (bytes,
/// blocks, what), `what` a site and its function (`column` "site\tfunction")
/// or a stack's frames (`column` "stack").
///
/// ```text
/// Peak: 160000 bytes live at the high-water mark
///
/// bytes   blocks  stack
/// 100000  1       main;keep_a
/// ```
pub fn format_peak(peak: u64, column: &str, rows: &[(u64, u64, String)]) -> String {
    let mut rows: Vec<&(u64, u64, String)> = rows.iter().filter(|r| r.0 != 0 || r.1 != 0).collect();
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.2.cmp(&b.2)));
    let mut out = format!("Peak: {peak} bytes live at the high-water mark\n\n");
    if rows.is_empty() {
        return out;
    }
    let _ = writeln!(out, "bytes\tblocks\t{column}");
    for (bytes, blocks, what) in rows {
        let _ = writeln!(out, "{bytes}\t{blocks}\t{what}");
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn estimates_are_listed_most_first_with_their_errors() {
        let e = |allocated, current, location: &str| Estimate {
            allocated,
            current,
            location: location.into(),
            function: "f".into(),
        };
        let sites = [
            e(100, 100, "a.c:1"),
            e(0, 0, "never.c:1"),
            e(400, 0, "b.c:2"),
            e(100, 0, "c.c:3"),
        ];
        let se = |b: u64, n: u64| ((b * n) as f64).sqrt();
        let text = format_estimates(&sites, 4, 2, &se);
        let rows: Vec<&str> = text.lines().skip(3).collect();
        assert_eq!(
            rows,
            [
                "400\t40\t0\t0\tb.c:2\tf()",
                "100\t20\t100\t20\ta.c:1\tf()",
                "(1 more sites, 100 bytes allocated together)",
                "",
            ],
            "{text}"
        );
        assert!(
            text.starts_with("Estimates (sampling every 4 bytes;"),
            "{text}"
        );
    }

    use super::*;
    use crate::prof::SrcRange;

    /// Return addresses 11 and 21 are calls on lines 1 and 2 of `x.c`, in
    /// `f` (line 1); 31 has no line.
    struct Map;
    impl SourceMap for Map {
        fn lines(&self, pc: u64) -> Option<SrcRange> {
            let line = match pc {
                10 => 1,
                20 => 2,
                _ => return None,
            };
            Some(SrcRange {
                file: "x.c".into(),
                first: line,
                last: line,
            })
        }
        fn function(&self, _: u64) -> Option<Function> {
            Some(Function {
                file: Some("x.c".into()),
                line: Some(1),
                name: "f".into(),
                addr: Some(0),
            })
        }
    }

    #[test]
    fn lines_functions_totals() {
        let a = attribute(&[(11, 40000, 100000), (21, 0, 10), (31, 5, 5)], &Map);
        let mut m = ModuleReport::new("x", "/x", &a, (40005, 100010));
        m.files[0].text = Some(vec!["a = malloc(100);\n".into(), "b\n".into()]);
        let out = format(std::slice::from_ref(&m), &Options::default());
        assert_eq!(
            out,
            "\nModule: x(/x)\n\n1\t40000\t100000\ta = malloc(100);\n2\t0\t10\tb\n\
             ?\t5\t5\t(no line information)\n\nModule totals\t40005\t100010\n\n"
        );
        let out = format(
            &[m.clone(), m],
            &Options {
                functions: true,
                ..Default::default()
            },
        );
        assert_eq!(
            out,
            "\nModule: x(/x)\n\n1\t40005\t100015\tf()\n\nModule: x(/x)\n\n\
             1\t40005\t100015\tf()\nGrand totals\t80010\t200020\n\n"
        );
    }

    #[test]
    fn h_heads_the_line_and_function_tables() {
        let a = Attribution {
            functions: [(
                Function {
                    file: None,
                    line: Some(1),
                    name: "f".into(),
                    addr: None,
                },
                (5, 10),
            )]
            .into(),
            ..Attribution::default()
        };
        let m = ModuleReport::new("x", "/x", &a, (5, 10));
        let out = format(
            &[m],
            &Options {
                functions: true,
                lines: true,
                header: true,
                ..Default::default()
            },
        );
        assert_eq!(
            out,
            "\nModule: x(/x)\n\nline\tcurrent\thigh-water\tsource\n\n\
             line\tcurrent\thigh-water\tfunction\n1\t5\t10\tf()\n"
        );
    }

    #[test]
    fn leaks_largest_first() {
        let l = |bytes, blocks, loc: &str| Leak {
            bytes,
            blocks,
            location: loc.into(),
            function: "main".into(),
        };
        let out = format_leaks(&[
            l(40000, 400, "k.c:23"),
            l(0, 0, "k.c:13"),
            l(65536, 1, "k.c:26"),
        ]);
        assert_eq!(
            out,
            "Leaks: 105536 bytes in 401 blocks never freed\n\nbytes\tblocks\tsite\tfunction\n\
             65536\t1\tk.c:26\tmain()\n40000\t400\tk.c:23\tmain()\n"
        );
    }

    #[test]
    fn temporary_and_peak_sections() {
        let t = |temporary, blocks, location: &str| Temporary {
            temporary,
            blocks,
            location: location.into(),
            function: "main".into(),
        };
        assert_eq!(
            format_temporary(&[t(0, 100, "x.c:3"), t(5, 5, "x.c:9"), t(7, 8, "x.c:2")]),
            "Temporary: 12 of 113 blocks freed by their thread before its next allocation\n\n\
             temporary\tblocks\tsite\tfunction\n7\t8\tx.c:2\tmain()\n5\t5\tx.c:9\tmain()\n"
        );
        assert_eq!(
            format_peak(
                9,
                "stack",
                &[(4, 1, "main;b".into()), (5, 1, "main;a".into())]
            ),
            "Peak: 9 bytes live at the high-water mark\n\nbytes\tblocks\tstack\n\
             5\t1\tmain;a\n4\t1\tmain;b\n"
        );
        assert!(format_peak(0, "stack", &[(0, 0, "x".into())]).ends_with("mark\n\n"));
    }
}
