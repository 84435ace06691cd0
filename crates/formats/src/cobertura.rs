//! `cprof --cobertura FILE`: Cobertura XML (coverage-04.dtd), what CI
//! services (GitLab, Jenkins, Azure) read.
//!
//! One `<package>` per module (named after it), one `<class>` per source
//! file found (`filename` is the file's path without its leading `/`,
//! under the single `<source>/</source>`), one `<method>` per function
//! entered through a known first instruction, one `<line>` per line with
//! code (`hits` = the line's count, as lcov's `DA`); a line with
//! conditional jumps has `branch="true"` and `condition-coverage="P%
//! (taken/all)"`, two branches per jump. Rates are `covered / valid` with
//! four decimals (1 when nothing is valid). The same files are left out as
//! from the lcov tracefile (see [`crate::lcov`]). `timestamp` is given by
//! the caller (milliseconds since the epoch), so output is deterministic.

use crate::lcov::{SourceRecord, SourceRecords};
use std::collections::BTreeMap;
use std::fmt::Write as _;

fn rate(covered: usize, valid: usize) -> String {
    if valid == 0 {
        "1".into()
    } else {
        format!("{:.4}", covered as f64 / valid as f64)
    }
}

/// `s` escaped for an XML attribute.
fn attr(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' => {
                let _ = write!(out, "&#{};", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn totals<'a>(
    records: impl Iterator<Item = &'a SourceRecord> + Clone,
) -> (usize, usize, usize, usize) {
    let (mut lv, mut lc, mut bv, mut bc) = (0, 0, 0, 0);
    for r in records {
        let (v, c) = r.line_totals();
        let (bvv, bcc) = r.branch_totals();
        lv += v;
        lc += c;
        bv += bvv;
        bc += bcc;
    }
    (lv, lc, bv, bc)
}

/// The `<line>` of `line` in `r`.
fn line_element(out: &mut String, indent: &str, r: &SourceRecord, line: u32, hits: u64) {
    match r.jumps.get(&line) {
        Some(jumps) => {
            let all = 2 * jumps.len();
            let taken: usize = jumps
                .iter()
                .map(|j| j.map_or(0, |(t, n)| usize::from(t > 0) + usize::from(n > 0)))
                .sum();
            let _ = writeln!(
                out,
                "{indent}<line number=\"{line}\" hits=\"{hits}\" branch=\"true\" \
                 condition-coverage=\"{}% ({taken}/{all})\"/>",
                100 * taken / all.max(1)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "{indent}<line number=\"{line}\" hits=\"{hits}\" branch=\"false\"/>"
            );
        }
    }
}

/// The Cobertura document of `records`.
pub fn cobertura(records: &SourceRecords, timestamp_ms: u64) -> String {
    let mut by_module: BTreeMap<&str, Vec<(&str, &SourceRecord)>> = BTreeMap::new();
    for ((module, file), r) in &records.by_module {
        by_module.entry(module).or_default().push((file, r));
    }
    let (lv, lc, bv, bc) = totals(records.by_module.values());
    let mut out = String::from("<?xml version=\"1.0\" ?>\n");
    out.push_str(
        "<!DOCTYPE coverage SYSTEM \"http://cobertura.sourceforge.net/xml/coverage-04.dtd\">\n",
    );
    let _ = writeln!(
        out,
        "<coverage line-rate=\"{}\" branch-rate=\"{}\" lines-covered=\"{lc}\" lines-valid=\"{lv}\" \
         branches-covered=\"{bc}\" branches-valid=\"{bv}\" complexity=\"0\" version=\"profdev {}\" \
         timestamp=\"{timestamp_ms}\">",
        rate(lc, lv),
        rate(bc, bv),
        env!("CARGO_PKG_VERSION")
    );
    out.push_str("  <sources>\n    <source>/</source>\n  </sources>\n  <packages>\n");
    for (module, files) in by_module {
        let (lv, lc, bv, bc) = totals(files.iter().map(|(_, r)| *r));
        let _ = writeln!(
            out,
            "    <package name=\"{}\" line-rate=\"{}\" branch-rate=\"{}\" complexity=\"0\">\n      <classes>",
            attr(module),
            rate(lc, lv),
            rate(bc, bv)
        );
        for (file, r) in files {
            let (lv, lc) = r.line_totals();
            let (bv, bc) = r.branch_totals();
            let name = std::path::Path::new(file)
                .file_name()
                .map_or_else(|| file.to_string(), |n| n.to_string_lossy().into_owned());
            let _ = writeln!(
                out,
                "        <class name=\"{}\" filename=\"{}\" line-rate=\"{}\" branch-rate=\"{}\" complexity=\"0\">",
                attr(&name),
                attr(file.trim_start_matches('/')),
                rate(lc, lv),
                rate(bc, bv)
            );
            out.push_str("          <methods>\n");
            let mut fns: Vec<(&String, &(u32, u64))> = r.functions.iter().collect();
            fns.sort_by_key(|(n, (l, _))| (*l, *n));
            for (fname, &(line, hits)) in fns {
                let _ = writeln!(
                    out,
                    "            <method name=\"{}\" signature=\"\" line-rate=\"{}\" branch-rate=\"1\" complexity=\"0\">\n              <lines>",
                    attr(fname),
                    if hits > 0 { "1" } else { "0" }
                );
                line_element(&mut out, "                ", r, line, hits);
                out.push_str("              </lines>\n            </method>\n");
            }
            out.push_str("          </methods>\n          <lines>\n");
            for (&line, &hits) in &r.lines {
                line_element(&mut out, "            ", r, line, hits);
            }
            out.push_str("          </lines>\n        </class>\n");
        }
        out.push_str("      </classes>\n    </package>\n");
    }
    out.push_str("  </packages>\n</coverage>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document() {
        let mut r = SourceRecord::default();
        r.lines.insert(3, 5);
        r.lines.insert(4, 0);
        r.functions.insert("main".into(), (3, 1));
        r.jumps.insert(3, vec![Some((5, 0))]);
        let records = SourceRecords {
            by_module: [(("a&b".to_string(), "/src/a.c".to_string()), r)].into(),
            left_out: vec![],
        };
        let x = cobertura(&records, 7);
        assert!(x.contains(
            "lines-covered=\"1\" lines-valid=\"2\" branches-covered=\"1\" branches-valid=\"2\""
        ));
        assert!(x.contains("<package name=\"a&amp;b\" line-rate=\"0.5000\" branch-rate=\"0.5000\""));
        assert!(x.contains("filename=\"src/a.c\""));
        assert!(x.contains(
            "<line number=\"3\" hits=\"5\" branch=\"true\" condition-coverage=\"50% (1/2)\"/>"
        ));
        assert!(x.contains("<line number=\"4\" hits=\"0\" branch=\"false\"/>"));
        assert!(x.contains("timestamp=\"7\""));
        assert!(x.ends_with("</coverage>\n"));
    }
}
