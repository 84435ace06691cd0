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
//! and function counts are summed over the modules ([`lcov_marks`]:
//! marks, the largest).
//!
//! Files whose source text was not found are left out (genhtml would
//! fail on them); [`SourceRecords::left_out`] names them for a note.
//! profdev-coverage groups a run's counts into [`SourceRecords`]
//! (`profdev_coverage::lcov::source_records`); this module and
//! [`crate::cobertura`] write them.

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

/// The tracefile of `records`.
pub fn lcov(records: &SourceRecords) -> String {
    tracefile(records, u64::saturating_add)
}

/// The tracefile of `records` whose counts are marks (1 ran, 0 did
/// not: `cprof --hits`): a header's line compiled into several modules
/// ran if it ran in any, so the modules' marks merge by the largest, not
/// by their sum.
pub fn lcov_marks(records: &SourceRecords) -> String {
    tracefile(records, u64::max)
}

/// The tracefile of `records`, a file's line and function counts over
/// several modules merged by `merge`.
fn tracefile(records: &SourceRecords, merge: fn(u64, u64) -> u64) -> String {
    let mut by_file: BTreeMap<&str, SourceRecord> = BTreeMap::new();
    for ((_, file), r) in &records.by_module {
        let e = by_file.entry(file).or_default();
        for (&n, &c) in &r.lines {
            let v = e.lines.entry(n).or_insert(0);
            *v = merge(*v, c);
        }
        for (name, &(line, c)) in &r.functions {
            let v = e.functions.entry(name.clone()).or_insert((line, 0));
            v.1 = merge(v.1, c);
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

    #[test]
    fn a_header_in_two_modules_is_one_record() {
        let mut r = SourceRecord::default();
        r.lines.insert(7, 2);
        r.functions.insert("inl".into(), (7, 1));
        r.jumps.insert(7, vec![Some((1, 0))]);
        let mut other = r.clone();
        other.jumps.insert(7, vec![None]);
        let records = SourceRecords {
            by_module: [
                (("a".to_string(), "/s/h.h".to_string()), r),
                (("b".to_string(), "/s/h.h".to_string()), other),
            ]
            .into(),
            left_out: vec![],
        };
        assert_eq!(
            lcov(&records),
            "TN:\nSF:/s/h.h\nFN:7,inl\nFNDA:2,inl\nFNF:1\nFNH:1\n\
             BRDA:7,0,0,1\nBRDA:7,0,1,0\nBRDA:7,1,0,-\nBRDA:7,1,1,-\nBRF:4\nBRH:1\n\
             DA:7,4\nLF:1\nLH:1\nend_of_record\n"
        );
    }

    #[test]
    fn marks_of_a_header_in_two_modules_merge_by_the_largest() {
        let mut ran = SourceRecord::default();
        ran.lines.insert(7, 1);
        ran.lines.insert(8, 0);
        ran.functions.insert("inl".into(), (7, 1));
        let records = SourceRecords {
            by_module: [
                (("a".to_string(), "/s/h.h".to_string()), ran.clone()),
                (("b".to_string(), "/s/h.h".to_string()), ran),
            ]
            .into(),
            left_out: vec![],
        };
        assert_eq!(
            lcov_marks(&records),
            "TN:\nSF:/s/h.h\nFN:7,inl\nFNDA:1,inl\nFNF:1\nFNH:1\nBRF:0\nBRH:0\n\
             DA:7,1\nDA:8,0\nLF:2\nLH:1\nend_of_record\n"
        );
        assert!(lcov(&records).contains("DA:7,2\n"), "counts are summed");
    }
}
