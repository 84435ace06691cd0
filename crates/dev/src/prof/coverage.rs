//! prof's coverage mode (`startcp PID`): the control message and the
//! records a coverage report fills.
//!
//! In coverage mode a record's histogram holds **exact execution counts**
//! (spec §2.3, coverage row): one pair per executed instruction,
//! `0x<address> <count>\n`, the address in the module's link-time address
//! space (what `addr2line -e PATH` reads), the count the number of times
//! that instruction ran; every instruction of a basic block carries its
//! block's count. Instructions that never ran have no pair (a histogram
//! skips zeros). The pairs are served by the same one-pair-per-read
//! protocol as the other modes.
//!
//! Nothing in the device counts instructions: the counting runs inside
//! the profiled processes (the coverage engine of `profdev_coverage`),
//! and its counts are handed to the device through
//! [`Prof::coverage_report`], each report replacing the module's pairs
//! (the engine's counts are cumulative).
//!
//! `startcp PID` is parsed exactly: one argument, a process id in decimal
//! (`startcp` alone, `startcp x`, `startcp 1 2` are EINVAL). While another
//! mode is on it fails with EBUSY (the seed ignored the request
//! silently: a documented change, so that a caller learns its request did
//! nothing). A PID that does not exist fails with ESRCH; a writer that may
//! not ptrace PID, with EPERM. Attaching to the process is then
//! [`attach_coverage`]'s job.

use super::ctl::Wanted;
use super::histogram::ModRecord;
use super::{Mode, Prof};
use crate::access::{ptrace_may_attach, Cred};
use crate::ctl;
use crate::pc_counts::PcCounts;
use crate::DevError;
use profdev_coverage::counts::ModuleCoverage;

/// Inject the coverage runtime into the running process `pid` (its
/// threads, and the processes it spawns), counting the modules `wanted`
/// names (empty: the executable and every library it maps).
///
/// The one place `startcp PID` reaches the injector; not connected in this
/// build, so it refuses with a sentence and the device stays off.
fn attach_coverage(pid: u32, wanted: &[Wanted]) -> Result<(), DevError> {
    let _ = wanted;
    Err(DevError::NoDevice(format!(
        "attaching coverage to running process {pid} is not built yet: start the program \
         under `profdev cprof CMD` instead"
    )))
}

/// The process id of `startcp`'s argument: decimal digits only, not 0.
fn parse_pid(word: &str) -> Option<u32> {
    if word.is_empty() || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse::<u32>().ok().filter(|&p| p > 0)
}

/// The histogram pairs of `m`: one per executed instruction, ascending.
pub fn coverage_pairs(m: &ModuleCoverage) -> Vec<(u64, u64)> {
    profdev_coverage::lines::instruction_counts(m)
        .into_iter()
        .filter(|&(_, c)| c > 0)
        .collect()
}

/// A reported module: name, path, canonical path, pairs.
type Prepared = (String, String, Option<String>, Vec<(u64, u64)>);

impl Prof {
    /// `startcp PID`, with `word` the argument and `data` the message.
    pub(super) fn startcp(
        &self,
        word: &str,
        data: &[u8],
        cred: Option<Cred>,
    ) -> Result<(), DevError> {
        let pid = parse_pid(word).ok_or_else(|| DevError::BadCtlArg {
            msg: ctl::quoted(data),
            why: format!("{word:?} is not a process id"),
        })?;
        if let Some(m) = self.mode() {
            return Err(DevError::Busy(format!(
                "the prof device is in {} mode; write stop first",
                m.name()
            )));
        }
        match cred {
            Some(c) => ptrace_may_attach(&c, pid)?,
            None => {
                crate::access::Target::of(pid)?;
            }
        }
        let wanted = self.lock().wanted.clone();
        attach_coverage(pid, &wanted)?;
        self.coverage_launched(pid)
    }

    /// Coverage mode for `pid`, a process the caller started under the
    /// coverage engine itself (as `profdev cprof CMD` does): no attach, no
    /// permission check. EBUSY while another mode is on.
    pub fn coverage_launched(&self, pid: u32) -> Result<(), DevError> {
        let mut st = self.lock();
        match st.mode {
            None => {
                st.mode = Some(Mode::Coverage { pid });
                Ok(())
            }
            Some(m) => Err(DevError::Busy(format!(
                "the prof device is in {} mode; write stop first",
                m.name()
            ))),
        }
    }

    /// Hand the device a coverage report: each module's record (created
    /// the first time, if the module list wants it) takes the module's
    /// executed instructions and counts as its histogram, replacing what
    /// it held. Refused (EINVAL) unless the device is in coverage mode.
    pub fn coverage_report(&self, modules: &[ModuleCoverage]) -> Result<(), DevError> {
        let wanted = {
            let st = self.lock();
            if !matches!(st.mode, Some(Mode::Coverage { .. })) {
                return Err(DevError::Invalid(
                    "a coverage report needs coverage mode (startcp)".into(),
                ));
            }
            st.wanted.clone()
        };
        // Files are looked at outside the lock.
        let prepared: Vec<Prepared> = modules
            .iter()
            .map(|m| {
                let path = m.path.to_string_lossy().into_owned();
                let name = m
                    .path
                    .file_name()
                    .map_or_else(|| path.clone(), |n| n.to_string_lossy().into_owned());
                let canon = std::fs::canonicalize(&m.path)
                    .ok()
                    .map(|p| p.to_string_lossy().into_owned());
                (name, path, canon, coverage_pairs(m))
            })
            .collect();
        let mut st = self.lock();
        for (name, path, canon, pairs) in prepared {
            if let Some(r) = st
                .records
                .iter_mut()
                .find(|r| r.memory.is_some() && r.path == path)
            {
                r.memory = Some(pairs);
                continue;
            }
            let wants = wanted.is_empty()
                || wanted.iter().any(|w| {
                    w.raw == name
                        || w.raw == path
                        || (w.canonical.is_some() && w.canonical == canon)
                });
            if !wants {
                continue;
            }
            let id = st.next_id;
            st.next_id = st.next_id.saturating_add(1);
            st.records.push(ModRecord {
                id,
                name,
                path,
                counts: PcCounts::default(),
                object: None,
                memory: Some(pairs),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, ReplayFactory};
    use crate::tree::{walk, OpenMode, Qid};
    use crate::Dev;
    use profdev_coverage::counts::{Block, Branch};
    use std::sync::Arc;

    fn dev() -> Prof {
        Prof::new(Engine::new(Arc::new(ReplayFactory::new(vec![]))))
    }

    fn write(dev: &Prof, msg: &str, cred: Option<Cred>) -> Result<usize, DevError> {
        let e = walk(dev, Qid::ROOT, "ctl").unwrap();
        let mut chan = dev.open(e.qid, OpenMode::Write).unwrap();
        chan.cred = cred;
        let r = dev.write(&mut chan, 0, msg.as_bytes());
        dev.close(chan);
        r
    }

    fn histogram(d: &Prof, dir: &str) -> Vec<String> {
        let dir = walk(d, Qid::ROOT, dir).unwrap();
        let h = walk(d, dir.qid, "histogram").unwrap();
        let mut chan = d.open(h.qid, OpenMode::Read).unwrap();
        let mut pairs = Vec::new();
        loop {
            let b = d.read(&mut chan, 0, 64).unwrap();
            if b.is_empty() {
                break;
            }
            pairs.push(String::from_utf8(b).unwrap());
        }
        pairs
    }

    #[test]
    fn startcp_parse_and_errors() {
        let d = dev();
        for bad in [
            "startcp",
            "startcp x",
            "startcp 1 2",
            "startcp 0",
            "startcp +5",
            "startcp -1",
            "startcp 0x10",
        ] {
            assert!(
                matches!(write(&d, bad, None), Err(DevError::BadCtlArg { .. })),
                "{bad}"
            );
            assert_eq!(d.mode(), None, "{bad} changes nothing");
        }
        assert!(
            matches!(write(&d, "startcpx 1", None), Err(DevError::BadCtl(_))),
            "verbs match exactly"
        );
        // No such process: ESRCH.
        assert_eq!(
            write(&d, "startcp 2147483647", None),
            Err(DevError::NoProcess(2147483647))
        );
        // Not allowed to ptrace: EPERM (nobody may not trace pid 1).
        let nobody = Cred {
            uid: 65534,
            gid: 65534,
            pid: 0,
        };
        assert!(matches!(
            write(&d, "startcp 1", Some(nobody)),
            Err(DevError::NotPermitted(_))
        ));
        // Allowed: the injector is not connected: a sentence, never a
        // fake success.
        let me = std::process::id();
        match write(&d, &format!("startcp {me}\n"), None) {
            Err(DevError::NoDevice(why)) => assert!(why.contains("not built yet"), "{why}"),
            r => panic!("{r:?}"),
        }
        assert_eq!(d.mode(), None);
        // Another mode on: EBUSY (the seed ignored it).
        write(&d, "startmp1", None).unwrap();
        assert!(matches!(
            write(&d, &format!("startcp {me}"), None),
            Err(DevError::Busy(_))
        ));
        assert!(matches!(d.coverage_launched(me), Err(DevError::Busy(_))));
        write(&d, "stop", None).unwrap();
        d.coverage_launched(me).unwrap();
        assert_eq!(d.mode(), Some(Mode::Coverage { pid: me }));
        // Sampling's start is ignored in another mode, as in Inferno.
        write(&d, "start", None).unwrap();
        assert_eq!(d.mode(), Some(Mode::Coverage { pid: me }));
        assert!(matches!(
            write(&d, &format!("startcp {me}"), None),
            Err(DevError::Busy(_))
        ));
    }

    fn module(path: &str) -> ModuleCoverage {
        ModuleCoverage {
            path: path.into(),
            build_id: None,
            blocks: vec![
                Block {
                    start: 0x1130,
                    end: 0x113a,
                    insns: vec![0x1130, 0x1134, 0x1137],
                    count: 10,
                },
                Block {
                    start: 0x113a,
                    end: 0x1140,
                    insns: vec![0x113a],
                    count: 0,
                },
                Block {
                    start: 0x1140,
                    end: 0x1144,
                    insns: vec![0x1140, 0x1142],
                    count: 2,
                },
            ],
            branches: vec![Branch {
                addr: 0x1137,
                taken: 8,
                not_taken: 2,
            }],
            uncounted: 0,
        }
    }

    #[test]
    fn histogram_holds_one_pair_per_executed_instruction() {
        let d = dev();
        let m = module("/x/known");
        assert!(matches!(
            d.coverage_report(std::slice::from_ref(&m)),
            Err(DevError::Invalid(_))
        ));
        write(&d, "module known", None).unwrap();
        d.coverage_launched(std::process::id()).unwrap();
        d.coverage_report(&[m.clone(), module("/lib/libc.so.6")])
            .unwrap();
        assert!(
            walk(&d, Qid::ROOT, "00000002").is_err(),
            "libc is not wanted"
        );
        assert_eq!(
            histogram(&d, "00000001"),
            [
                "0x1130 10\n",
                "0x1134 10\n",
                "0x1137 10\n",
                "0x1140 2\n",
                "0x1142 2\n"
            ]
        );
        // A later report replaces the counts (the engine's are cumulative).
        let mut later = m;
        later.blocks[1].count = 3;
        d.coverage_report(&[later]).unwrap();
        assert_eq!(histogram(&d, "00000001")[3], "0x113a 3\n");
        write(&d, "stop", None).unwrap();
        assert_eq!(histogram(&d, "00000001").len(), 6, "kept after stop");
        write(&d, "end", None).unwrap();
        assert!(walk(&d, Qid::ROOT, "00000001").is_err());
    }
}
