//! DHAT's JSON format (valgrind's `dh_view.html` opens it), for
//! `mprof --dhat FILE`: version 2, mode `heap`, with what the accounting
//! knows: per allocating site (a "program point" of one frame) its total
//! bytes and blocks (`tb`, `tbk`), the sum of its blocks' lifetimes (`tl`),
//! its high water and the blocks live then (`mb`, `mbk`), its bytes and
//! blocks at the global peak (`gb`, `gbk`, t-gmax) and at the end (`eb`,
//! `ebk`). Block lifetimes are recorded (`bklt` true); accesses are not
//! (`bkacc` false). Times are microseconds (`tu` "µs", `Mtu` "s").

use std::fmt::Write as _;

/// One program point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DhatSite {
    /// Its frame as DHAT prints one: `0xADDR: function (file:line)`.
    pub frame: String,
    /// Its counters.
    pub counts: DhatCounts,
}

/// A program point's counters, as DHAT names them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DhatCounts {
    /// Bytes allocated there (`tb`).
    pub total_bytes: u64,
    /// Blocks allocated there (`tbk`).
    pub total_blocks: u64,
    /// The sum of its blocks' lifetimes, µs (`tl`).
    pub total_lifetime: u64,
    /// Its high water in bytes (`mb`).
    pub max_bytes: u64,
    /// Its blocks live at its high water (`mbk`).
    pub max_blocks: u64,
    /// Its bytes at the global peak (`gb`).
    pub gmax_bytes: u64,
    /// Its blocks at the global peak (`gbk`).
    pub gmax_blocks: u64,
    /// Its bytes still allocated at the end (`eb`).
    pub end_bytes: u64,
    /// Its blocks still allocated at the end (`ebk`).
    pub end_blocks: u64,
}

/// The run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DhatRun {
    /// The command line.
    pub cmd: String,
    /// The (first) process's id.
    pub pid: u32,
    /// The run's end (`te`) and its global peak (`tg`), in µs.
    pub end_us: u64,
    /// See `end_us`.
    pub gmax_us: u64,
}

/// A JSON string literal.
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The JSON text.
pub fn encode(run: &DhatRun, sites: &[DhatSite]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "{{\"dhatFileVersion\":2,\"mode\":\"heap\",\"verb\":\"Allocated\",\
         \"bklt\":true,\"bkacc\":false,\"tu\":\"µs\",\"Mtu\":\"s\",\"tuth\":1000,\
         \"cmd\":{},\"pid\":{},\"te\":{},\"tg\":{},\n\"pps\":[",
        quote(&run.cmd),
        run.pid,
        run.end_us,
        run.gmax_us
    );
    for (i, s) in sites.iter().enumerate() {
        let c = &s.counts;
        let _ = write!(
            out,
            "{}\n{{\"tb\":{},\"tbk\":{},\"tl\":{},\"mb\":{},\"mbk\":{},\"gb\":{},\"gbk\":{},\
             \"eb\":{},\"ebk\":{},\"fs\":[{}]}}",
            if i == 0 { "" } else { "," },
            c.total_bytes,
            c.total_blocks,
            c.total_lifetime,
            c.max_bytes,
            c.max_blocks,
            c.gmax_bytes,
            c.gmax_blocks,
            c.end_bytes,
            c.end_blocks,
            i + 1
        );
    }
    out.push_str("\n],\n\"ftbl\":[\"[root]\"");
    for s in sites {
        let _ = write!(out, ",\n{}", quote(&s.frame));
    }
    out.push_str("\n]}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_escapes() {
        let run = DhatRun {
            cmd: "./a \"b\"".into(),
            pid: 7,
            end_us: 900,
            gmax_us: 400,
        };
        let counts = DhatCounts {
            end_bytes: 5,
            max_bytes: 10,
            total_blocks: 2,
            total_bytes: 15,
            end_blocks: 1,
            total_lifetime: 800,
            max_blocks: 2,
            gmax_bytes: 10,
            gmax_blocks: 2,
        };
        let j = encode(
            &run,
            &[DhatSite {
                frame: "0x1139: main (x.c:3)".into(),
                counts,
            }],
        );
        assert!(
            j.starts_with("{\"dhatFileVersion\":2,\"mode\":\"heap\""),
            "{j}"
        );
        assert!(j.contains("\"cmd\":\"./a \\\"b\\\"\""), "{j}");
        assert!(j.contains(
            "{\"tb\":15,\"tbk\":2,\"tl\":800,\"mb\":10,\"mbk\":2,\"gb\":10,\"gbk\":2,\"eb\":5,\"ebk\":1,\"fs\":[1]}"
        ));
        assert!(
            j.contains("\"ftbl\":[\"[root]\",\n\"0x1139: main (x.c:3)\"\n]}"),
            "{j}"
        );
    }
}
