//! Counts on source lines: a module's instructions, each with its count,
//! mapped through the module's DWARF line table to the lines and columns
//! they were compiled from.
//!
//! The rules are Inferno's (`appl/lib/profile.b`, spec §2.4), with DWARF's
//! rows in place of Dis instructions' source ranges:
//!
//! * Every known instruction marks its line: code (DIS) and executed (EXE,
//!   count > 0) or never executed (NEX, count 0). A line's mark is the OR
//!   of its instructions' marks: DIS|EXE `+`, DIS|NEX `-`, DIS|EXE|NEX `?`;
//!   a line without code shows a space.
//! * A line's **count** (`-f`, lcov's `DA`, Cobertura's `hits`) is the
//!   *largest* count of its instructions, as Inferno's `-f` printed: the
//!   times the line's most executed part ran (a `for` line's condition).
//! * **Sub-ranges.** A DWARF row names a column; a line's sub-ranges are
//!   its columns, in column order, each with the OR (or the largest count)
//!   of its own instructions, neighbours with equal values merged. When
//!   more than one remains the line prints them all, `a|b|…`
//!   (`for (i = 0; i < n; i++)` under `-f`: `1|11|10`).
//! * A module's **coverage** is `100 * executed / instructions` (integer
//!   division), over every instruction known, with a line or not.
//! * Its **total** is the sum of the counts: the instructions executed.
//!
//! The instructions known are those the plan found (every instruction of
//! every block of [`ModuleCoverage`], count 0 included) or, from a `.prf`
//! record, the ones it lists.

use crate::counts::{Branch, ModuleCoverage};
use profdev_core::FileAddr;
use profdev_symbolize::{ElfObject, LineRow};
use std::collections::BTreeMap;

const DIS: u8 = 1;
const EXE: u8 = 2;
const NEX: u8 = 4;

/// Every instruction of `m` with its count (its block's), ascending.
pub fn instruction_counts(m: &ModuleCoverage) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = m
        .blocks
        .iter()
        .flat_map(|b| b.insns.iter().map(move |i| (i, b.count)))
        .collect();
    out.sort_unstable();
    out.dedup_by_key(|p| p.0);
    out
}

/// One column of a line: what its instructions show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Column {
    /// The column (0 where the line table gives none).
    pub column: u32,
    /// Inferno's codes, OR'd: 1 code, 2 executed, 4 never executed.
    pub codes: u8,
    /// The largest count of its instructions.
    pub count: u64,
}

/// One source line with code.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineCoverage {
    /// Its columns, ascending.
    pub columns: Vec<Column>,
}

impl LineCoverage {
    fn add(&mut self, column: u32, count: u64) {
        let code = DIS | if count > 0 { EXE } else { NEX };
        let i = match self.columns.binary_search_by_key(&column, |c| c.column) {
            Ok(i) => i,
            Err(i) => {
                self.columns.insert(
                    i,
                    Column {
                        column,
                        ..Column::default()
                    },
                );
                i
            }
        };
        self.columns[i].codes |= code;
        self.columns[i].count = self.columns[i].count.max(count);
    }

    /// The OR of its columns' codes.
    pub fn codes(&self) -> u8 {
        self.columns.iter().fold(0, |a, c| a | c.codes)
    }

    /// The line's count: the largest of its instructions'.
    pub fn count(&self) -> u64 {
        self.columns.iter().map(|c| c.count).max().unwrap_or(0)
    }

    /// True if any of its instructions ran.
    pub fn executed(&self) -> bool {
        self.codes() & EXE != 0
    }

    /// What cprof prints in the line's code column: `+`, `-` or `?`, or
    /// with `frequency` the count; `a|b|…` when its sub-ranges differ.
    pub fn mark(&self, frequency: bool) -> String {
        let show = |c: &Column| {
            if frequency {
                c.count.to_string()
            } else {
                code_char(c.codes).to_string()
            }
        };
        let mut parts: Vec<String> = Vec::new();
        for c in &self.columns {
            let s = show(c);
            if parts.last() != Some(&s) {
                parts.push(s);
            }
        }
        if parts.len() > 1 {
            parts.join("|")
        } else if frequency {
            self.count().to_string()
        } else {
            code_char(self.codes()).to_string()
        }
    }
}

fn code_char(codes: u8) -> char {
    match codes {
        c if c == DIS | EXE => '+',
        c if c == DIS | NEX => '-',
        c if c == DIS | EXE | NEX => '?',
        _ => ' ',
    }
}

/// A function's entry and how often it was entered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionCoverage {
    /// Its name (demangled).
    pub name: String,
    /// Source file of its entry.
    pub file: String,
    /// Line of its entry.
    pub line: u32,
    /// Its entry address.
    pub addr: u64,
    /// Times its first instruction ran.
    pub count: u64,
}

/// A conditional jump on a source line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchCoverage {
    /// Source file of the jump.
    pub file: String,
    /// Its line.
    pub line: u32,
    /// The jump's counts.
    pub branch: Branch,
    /// Whether the jump instruction itself ever ran.
    pub executed: bool,
}

/// A module's counts on its source lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleLines {
    /// The module's name (its file's basename).
    pub name: String,
    /// The module's file.
    pub path: String,
    /// Lines with code, per source file.
    pub files: BTreeMap<String, BTreeMap<u32, LineCoverage>>,
    /// Functions whose entry is a known instruction with a line, by address.
    pub functions: Vec<FunctionCoverage>,
    /// Conditional jumps with a line, by address.
    pub branches: Vec<BranchCoverage>,
    /// Instructions known.
    pub instructions: u64,
    /// Instructions that ran at least once.
    pub executed: u64,
    /// Sum of the counts: instructions executed.
    pub total: u64,
    /// Known instructions the line table does not place.
    pub no_line: u64,
    /// The files (of `files`) in which the functions of `functions` are
    /// defined: the module's own sources, not the headers whose code was
    /// only inlined into it.
    pub defining: std::collections::BTreeSet<String>,
}

impl ModuleLines {
    /// `100 * executed / instructions`, 0 for a module with none.
    pub fn coverage_percent(&self) -> u64 {
        100u64
            .saturating_mul(self.executed)
            .checked_div(self.instructions)
            .unwrap_or(0)
    }
}

/// Where each address comes from in the source: a module's line table
/// and function symbols. [`ElfObject`] is the real one; tests may use
/// their own.
pub trait LineTable {
    /// Rows covering `[lo, hi)`, ascending.
    fn rows(&self, lo: u64, hi: u64) -> Vec<LineRow>;
    /// Function entries: (address, name), ascending.
    fn functions(&self) -> Vec<(u64, String)>;
    /// The file the function whose entry is `addr` is defined in (its
    /// `DW_AT_decl_file`), when known.
    fn defined_in(&self, _addr: u64) -> Option<String> {
        None
    }
}

impl LineTable for ElfObject {
    fn rows(&self, lo: u64, hi: u64) -> Vec<LineRow> {
        self.line_rows(FileAddr(lo), FileAddr(hi))
    }

    fn functions(&self) -> Vec<(u64, String)> {
        let mut out: Vec<(u64, String)> = self
            .symbols()
            .iter()
            .filter(|s| s.origin == profdev_symbolize::SymOrigin::Table)
            .map(|s| (s.addr, s.name()))
            .collect();
        out.sort();
        out.dedup_by_key(|f| f.0);
        out
    }

    fn defined_in(&self, addr: u64) -> Option<String> {
        self.function_decl(FileAddr(addr)).map(|d| d.0)
    }
}

/// The row holding `pc` in `rows` (ascending, disjoint).
fn row_of(rows: &[LineRow], pc: u64) -> Option<&LineRow> {
    let i = rows.partition_point(|r| r.addr <= pc);
    let r = rows[..i].last()?;
    (pc - r.addr < r.len.max(1)).then_some(r)
}

/// Map `insns` (pc, count; ascending) and `branches` through `table`.
pub fn map_lines(
    name: &str,
    path: &str,
    insns: &[(u64, u64)],
    branches: &[Branch],
    table: &dyn LineTable,
) -> ModuleLines {
    let mut m = ModuleLines {
        name: name.into(),
        path: path.into(),
        ..ModuleLines::default()
    };
    let (Some(lo), Some(hi)) = (insns.first(), insns.last()) else {
        return m;
    };
    let rows = table.rows(lo.0, hi.0.saturating_add(1));
    for &(pc, count) in insns {
        m.instructions += 1;
        m.total = m.total.saturating_add(count);
        if count > 0 {
            m.executed += 1;
        }
        match row_of(&rows, pc) {
            Some(r) => m
                .files
                .entry(r.file.clone())
                .or_default()
                .entry(r.line)
                .or_default()
                .add(r.column, count),
            None => m.no_line += 1,
        }
    }
    let count_at = |pc: u64| {
        insns
            .binary_search_by_key(&pc, |p| p.0)
            .ok()
            .map(|i| insns[i].1)
    };
    for (addr, fname) in table.functions() {
        let (Some(count), Some(r)) = (count_at(addr), row_of(&rows, addr)) else {
            continue;
        };
        // Where the function is defined (its out-of-line code), as the
        // line table names that file; else the file of its entry.
        let home = table
            .defined_in(addr)
            .filter(|f| m.files.contains_key(f))
            .unwrap_or_else(|| r.file.clone());
        m.defining.insert(home);
        m.functions.push(FunctionCoverage {
            name: fname,
            file: r.file.clone(),
            line: r.line,
            addr,
            count,
        });
    }
    for b in branches {
        let Some(r) = row_of(&rows, b.addr) else {
            continue;
        };
        m.branches.push(BranchCoverage {
            file: r.file.clone(),
            line: r.line,
            branch: b.clone(),
            executed: count_at(b.addr).unwrap_or(0) > 0 || b.taken > 0 || b.not_taken > 0,
        });
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines 1..: a `for` line with three columns, a partly executed line,
    /// a line never executed.
    struct Table;
    impl LineTable for Table {
        fn rows(&self, _: u64, _: u64) -> Vec<LineRow> {
            let row = |addr, len, line, column| LineRow {
                addr,
                len,
                file: "t.c".into(),
                line,
                column,
            };
            vec![
                row(0x10, 4, 1, 0),
                row(0x14, 2, 2, 10),
                row(0x16, 2, 2, 17),
                row(0x18, 2, 2, 24),
                row(0x20, 4, 3, 5),
                row(0x24, 4, 3, 20),
                row(0x28, 4, 4, 9),
            ]
        }
        fn functions(&self) -> Vec<(u64, String)> {
            vec![(0x10, "f".into()), (0x99, "gone".into())]
        }
    }

    fn lines() -> ModuleLines {
        let insns = [
            (0x10, 1),
            (0x12, 1),
            (0x14, 1),
            (0x16, 11),
            (0x18, 10),
            (0x20, 3),
            (0x22, 3),
            (0x24, 0),
            (0x28, 0),
            (0x40, 7),
        ];
        let b = Branch {
            addr: 0x16,
            taken: 10,
            not_taken: 1,
        };
        map_lines("t", "/t", &insns, &[b], &Table)
    }

    #[test]
    fn marks_counts_and_coverage() {
        let m = lines();
        let f = &m.files["t.c"];
        let marks: Vec<String> = f.values().map(|l| l.mark(false)).collect();
        assert_eq!(marks, ["+", "+", "+|-", "-"]);
        let counts: Vec<String> = f.values().map(|l| l.mark(true)).collect();
        assert_eq!(counts, ["1", "1|11|10", "3|0", "0"]);
        assert_eq!(f[&3].codes(), DIS | EXE | NEX);
        assert_eq!(f[&2].count(), 11);
        assert_eq!((m.instructions, m.executed, m.no_line), (10, 8, 1));
        assert_eq!(m.coverage_percent(), 80);
        assert_eq!(m.total, 1 + 1 + 1 + 11 + 10 + 3 + 3 + 7);
        assert_eq!(
            m.functions.len(),
            1,
            "a function at no known pc is left out"
        );
        assert_eq!((m.functions[0].line, m.functions[0].count), (1, 1));
        assert_eq!(m.defining, ["t.c".to_string()].into());
        assert_eq!(m.branches[0].line, 2);
    }

    #[test]
    fn a_column_with_mixed_instructions_is_partly_executed() {
        let mut l = LineCoverage::default();
        l.add(3, 5);
        l.add(3, 0);
        assert_eq!(l.mark(false), "?");
        assert_eq!(l.mark(true), "5");
        l.add(9, 5);
        assert_eq!(l.mark(false), "?|+");
    }

    #[test]
    fn empty_module() {
        let m = map_lines("x", "/x", &[], &[], &Table);
        assert_eq!(m.coverage_percent(), 0);
        assert!(m.files.is_empty());
    }
}
