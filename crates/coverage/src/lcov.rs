//! `cprof --lcov FILE` and `--cobertura FILE`: a run's counts grouped by
//! source file ([`source_records`]), the data that
//! `profdev_formats::lcov` and `profdev_formats::cobertura` write.
//!
//! A line's count is the largest count of its instructions (as `cprof
//! -f` shows it). Each conditional jump gives two branches on its line,
//! numbered by the jump's order on the line; a jump that never ran has no
//! counts. A function's count is the count of its first instruction. A
//! source file compiled into several modules (a header) is kept per
//! module here; lcov's writer sums it over the modules.
//!
//! Files whose source text was not found are left out (genhtml would
//! fail on them); `SourceRecords::left_out` names them for a note.

use crate::listing::Listing;
use profdev_formats::lcov::{SourceRecord, SourceRecords};

/// Add `file`'s counts in module `m` to `r`.
fn add_module(r: &mut SourceRecord, m: &crate::lines::ModuleLines, file: &str) {
    if let Some(lines) = m.files.get(file) {
        for (&n, l) in lines {
            let c = r.lines.entry(n).or_insert(0);
            *c = c.saturating_add(l.count());
        }
    }
    for f in m.functions.iter().filter(|f| f.file == file) {
        let e = r.functions.entry(f.name.clone()).or_insert((f.line, 0));
        e.1 = e.1.saturating_add(f.count);
    }
    for b in m.branches.iter().filter(|b| b.file == file) {
        let jump = b.executed.then_some((b.branch.taken, b.branch.not_taken));
        r.jumps.entry(b.line).or_default().push(jump);
    }
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
            let r = out
                .by_module
                .entry((m.name.clone(), file.clone()))
                .or_default();
            add_module(r, m, file);
        }
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
            profdev_formats::lcov::lcov(&r),
            "TN:\nSF:/s/a.c\nFN:1,main\nFNDA:1,main\nFNF:1\nFNH:1\n\
             BRDA:2,0,0,3\nBRDA:2,0,1,1\nBRF:2\nBRH:2\nDA:1,1\nDA:2,4\nLF:2\nLH:2\nend_of_record\n\
             TN:\nSF:/s/h.h\nFN:7,inl\nFNDA:0,inl\nFNF:1\nFNH:0\n\
             BRDA:7,0,0,-\nBRDA:7,0,1,-\nBRF:2\nBRH:0\nDA:7,0\nLF:1\nLH:0\nend_of_record\n"
        );
    }
}
