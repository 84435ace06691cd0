//! `cprof --lcov FILE`: an lcov tracefile (what `genhtml` and most CI
//! services read), one record per source file:
//!
//! ```text
//! TN:
//! SF:<source file>
//! FN:<line>,<function>      FNDA:<entries>,<function>     FNF:<functions>  FNH:<entered>
//! BRDA:<line>,<jump>,0,<taken>   BRDA:<line>,<jump>,1,<not taken>   BRF:<branches>  BRH:<taken ever>
//! DA:<line>,<count>         LF:<lines with code>  LH:<lines executed>
//! end_of_record
//! ```
//!
//! A line's count is the largest count of its instructions (as `cprof
//! -f` shows it). Each conditional jump gives two branches on its line,
//! `0` taken and `1` fallen through, numbered by the jump's order on the
//! line; a jump that never ran has `-` for both, as lcov writes them. A
//! function's count is the count of its first instruction. A source file
//! compiled into several modules (a header) gets one record: its line
//! and function counts are summed over the modules.
//!
//! Files whose source text was not found are left out (genhtml would
//! fail on them); [`SourceRecords::left_out`] names them for a note.

use crate::listing::Listing;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One conditional jump's two branches: `None` if the jump never ran.
pub type Jump = Option<(u64, u64)>;

/// The counts of one source file, over one or more modules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceRecord {
    /// Line → count.
    pub lines: BTreeMap<u32, u64>,
    /// Function name → (line, entries).
    pub functions: BTreeMap<String, (u32, u64)>,
    /// Line → its jumps, in address order.
    pub jumps: BTreeMap<u32, Vec<Jump>>,
}

impl SourceRecord {
    fn add_module(&mut self, m: &crate::lines::ModuleLines, file: &str) {
        if let Some(lines) = m.files.get(file) {
            for (&n, l) in lines {
                let c = self.lines.entry(n).or_insert(0);
                *c = c.saturating_add(l.count());
            }
        }
        for f in m.functions.iter().filter(|f| f.file == file) {
            let e = self.functions.entry(f.name.clone()).or_insert((f.line, 0));
            e.1 = e.1.saturating_add(f.count);
        }
        for b in m.branches.iter().filter(|b| b.file == file) {
            let jump = b.executed.then_some((b.branch.taken, b.branch.not_taken));
            self.jumps.entry(b.line).or_default().push(jump);
        }
    }

    /// Lines with code, and those executed.
    pub fn line_totals(&self) -> (usize, usize) {
        (
            self.lines.len(),
            self.lines.values().filter(|&&c| c > 0).count(),
        )
    }

    /// Branches (two per jump), and those taken at least once.
    pub fn branch_totals(&self) -> (usize, usize) {
        let all = self.jumps.values().flatten();
        let found = 2 * all.clone().count();
        let hit = all
            .map(|j| j.map_or(0, |(t, n)| usize::from(t > 0) + usize::from(n > 0)))
            .sum();
        (found, hit)
    }
}

/// The records of the files whose text was found, and the others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceRecords {
    /// (module name, file) → counts, for Cobertura; lcov merges by file.
    pub by_module: BTreeMap<(String, String), SourceRecord>,
    /// Source files left out, with their module: `module: file`.
    pub left_out: Vec<String>,
}

/// Group `modules`' counts by source file.
pub fn source_records(modules: &[Listing]) -> SourceRecords {
    let mut out = SourceRecords::default();
    for l in modules {
        let m = &l.lines;
        for file in m.files.keys() {
            if !matches!(l.sources.get(file), Some(Some(_))) {
                out.left_out.push(format!("{}: {file}", m.path));
                continue;
            }
            out.by_module
                .entry((m.name.clone(), file.clone()))
                .or_default()
                .add_module(m, file);
        }
    }
    out
}

/// The tracefile of `records`.
pub fn lcov(records: &SourceRecords) -> String {
    let mut by_file: BTreeMap<&str, SourceRecord> = BTreeMap::new();
    for ((_, file), r) in &records.by_module {
        let e = by_file.entry(file).or_default();
        for (&n, &c) in &r.lines {
            let v = e.lines.entry(n).or_insert(0);
            *v = v.saturating_add(c);
        }
        for (name, &(line, c)) in &r.functions {
            let v = e.functions.entry(name.clone()).or_insert((line, 0));
            v.1 = v.1.saturating_add(c);
        }
        for (&n, j) in &r.jumps {
            e.jumps.entry(n).or_default().extend(j.iter().copied());
        }
    }
    let mut out = String::new();
    for (file, r) in by_file {
        let _ = write!(out, "TN:\nSF:{file}\n");
        let mut fns: Vec<(&String, &(u32, u64))> = r.functions.iter().collect();
        fns.sort_by_key(|(name, (line, _))| (*line, *name));
        for (name, (line, _)) in &fns {
            let _ = writeln!(out, "FN:{line},{name}");
        }
        for (name, (_, c)) in &fns {
            let _ = writeln!(out, "FNDA:{c},{name}");
        }
        let hit = fns.iter().filter(|(_, (_, c))| *c > 0).count();
        let _ = write!(out, "FNF:{}\nFNH:{hit}\n", fns.len());
        for (line, jumps) in &r.jumps {
            for (i, j) in jumps.iter().enumerate() {
                let (t, n) = match j {
                    Some((t, n)) => (t.to_string(), n.to_string()),
                    None => ("-".into(), "-".into()),
                };
                let _ = write!(out, "BRDA:{line},{i},0,{t}\nBRDA:{line},{i},1,{n}\n");
            }
        }
        let (bf, bh) = r.branch_totals();
        let _ = write!(out, "BRF:{bf}\nBRH:{bh}\n");
        for (line, c) in &r.lines {
            let _ = writeln!(out, "DA:{line},{c}");
        }
        let (lf, lh) = r.line_totals();
        let _ = write!(out, "LF:{lf}\nLH:{lh}\nend_of_record\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counts::Branch;
    use crate::lines::{map_lines, LineTable};
    use profdev_symbolize::LineRow;

    struct Table;
    impl LineTable for Table {
        fn rows(&self, _: u64, _: u64) -> Vec<LineRow> {
            let row = |addr, file: &str, line| LineRow {
                addr,
                len: 2,
                file: file.into(),
                line,
                column: 1,
            };
            vec![
                row(0, "/s/a.c", 1),
                row(2, "/s/a.c", 2),
                row(4, "/s/h.h", 7),
                row(6, "/s/gone.c", 1),
            ]
        }
        fn functions(&self) -> Vec<(u64, String)> {
            vec![(0, "main".into()), (4, "inl".into())]
        }
    }

    #[test]
    fn records_and_left_out_files() {
        let insns = [(0, 1), (2, 4), (4, 0), (6, 1)];
        let branches = [
            Branch {
                addr: 2,
                taken: 3,
                not_taken: 1,
            },
            Branch {
                addr: 4,
                taken: 0,
                not_taken: 0,
            },
        ];
        let lines = map_lines("m", "/bin/m", &insns, &branches, &Table);
        let sources = [
            ("/s/a.c".to_string(), Some(vec!["x\n".to_string()])),
            ("/s/h.h".to_string(), Some(vec![])),
            ("/s/gone.c".to_string(), None),
        ]
        .into();
        let r = source_records(&[Listing { lines, sources }]);
        assert_eq!(r.left_out, ["/bin/m: /s/gone.c"]);
        assert_eq!(
            lcov(&r),
            "TN:\nSF:/s/a.c\nFN:1,main\nFNDA:1,main\nFNF:1\nFNH:1\n\
             BRDA:2,0,0,3\nBRDA:2,0,1,1\nBRF:2\nBRH:2\nDA:1,1\nDA:2,4\nLF:2\nLH:2\nend_of_record\n\
             TN:\nSF:/s/h.h\nFN:7,inl\nFNDA:0,inl\nFNF:1\nFNH:0\n\
             BRDA:7,0,0,-\nBRDA:7,0,1,-\nBRF:2\nBRH:0\nDA:7,0\nLF:1\nLH:0\nend_of_record\n"
        );
    }
}
