//! Whole allocation stacks merged across processes ([`merge_stacks`]).

use crate::Report;
use std::collections::HashMap;

/// A stack of the merged profile: the same frames (module file and
/// link-time return address) in several processes, added up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stack {
    /// Its frames, the site first then its callers: the module's path
    /// (empty when in none) and the return address, link-time within
    /// the module (as the process saw it when in none).
    pub frames: Vec<(String, u64)>,
    /// Stacks met when a process's stack table was full (no frames).
    pub overflow: bool,
    /// Blocks allocated.
    pub allocs: u64,
    /// Bytes allocated.
    pub bytes: u64,
    /// Blocks not freed at the end.
    pub live: u64,
    /// Bytes not freed at the end.
    pub current: u64,
    /// Temporary blocks (freed by their thread before its next allocation).
    pub temporary: u64,
    /// With `--peak`: bytes and blocks live at each process's global
    /// peak, summed over processes.
    pub at_peak: (u64, u64),
}

/// The reports' stacks merged by their frames, in the frames' order.
/// Frames are compared as (module number, address) while merging, each
/// module's path kept once: a run of many processes has many stacks of
/// deep, shared frames (the pyenv shim's 40 processes: 64 ms of String
/// copies and comparisons before, a few now).
pub fn merge_stacks(reports: &[Report]) -> Vec<Stack> {
    // Module numbers by path; 0 is no module (its path is empty).
    let mut numbers: HashMap<&str, u32> = HashMap::from([("", 0)]);
    let mut paths: Vec<&str> = vec![""];
    let mut index: HashMap<(bool, Vec<(u32, u64)>), usize> = HashMap::new();
    let mut out: Vec<Stack> = Vec::new();
    for r in reports {
        let numbered: Vec<u32> = r
            .modules
            .iter()
            .map(|m| {
                *numbers.entry(m.path.as_str()).or_insert_with(|| {
                    paths.push(&m.path);
                    (paths.len() - 1) as u32
                })
            })
            .collect();
        for s in &r.stacks {
            let key: Vec<(u32, u64)> = s
                .frames
                .iter()
                .map(
                    |&(m, pc)| match m.and_then(|m| Some((numbered.get(m)?, &r.modules[m]))) {
                        Some((&n, m)) => (n, pc.wrapping_sub(m.bias)),
                        None => (0, pc),
                    },
                )
                .collect();
            let i = *index
                .entry((s.overflow, key))
                .or_insert_with_key(|(overflow, key)| {
                    out.push(Stack {
                        frames: key
                            .iter()
                            .map(|&(n, pc)| (paths[n as usize].to_string(), pc))
                            .collect(),
                        overflow: *overflow,
                        ..Default::default()
                    });
                    out.len() - 1
                });
            let e = &mut out[i];
            e.allocs += s.allocs;
            e.bytes += s.bytes;
            e.live += s.live;
            e.current += s.current.max(0) as u64;
            e.temporary += s.temporary;
            if let Some((b, k)) = s.at_peak {
                e.at_peak.0 += b.max(0) as u64;
                e.at_peak.1 += k;
            }
        }
    }
    out.sort_unstable_by(|a, b| (a.overflow, &a.frames).cmp(&(b.overflow, &b.frames)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_parse_and_merge_by_link_time_frames() {
        let a = "profdev-mprof 1\npid 7\nmodule 0 0x1000 1 2 0 0 /bin/x\n\
                 site 0x1139 0 0 100 1 100 0\n\
                 stack 1 100 0 0 0:0x1139 0:0x1200 -1:0x77\n\
                 stack 2 30 1 10 overflow\nuntracked 0 0 0\nend\n";
        let r = Report::parse(a).unwrap();
        assert_eq!(
            r.stacks[0].frames,
            [(Some(0), 0x1139), (Some(0), 0x1200), (None, 0x77)]
        );
        assert!(r.stacks[1].overflow && r.stacks[1].frames.is_empty());
        let b = a.replace("0x1000", "0x5000").replace("0:0x1", "0:0x5");
        let m = merge_stacks(&[r, Report::parse(&b).unwrap()]);
        assert_eq!(m.len(), 2);
        let s = m.iter().find(|s| !s.overflow).unwrap();
        assert_eq!(
            s.frames,
            [
                ("/bin/x".into(), 0x139),
                ("/bin/x".into(), 0x200),
                (String::new(), 0x77)
            ]
        );
        assert_eq!((s.allocs, s.bytes, s.live, s.current), (2, 200, 0, 0));
        let o = m.iter().find(|s| s.overflow).unwrap();
        assert_eq!((o.allocs, o.bytes, o.live, o.current), (4, 60, 2, 20));
        for bad in [
            "stack 1 1 0 0 5:0x10",
            "stack 1 1 0 0 0x10",
            "stack 1 1 0 0 0:0x1 overflow",
        ] {
            let t = a.replace("stack 2 30 1 10 overflow", bad);
            assert!(Report::parse(&t).is_err(), "{bad}");
        }
    }
}
