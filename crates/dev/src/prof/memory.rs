//! prof's memory mode (`startmp[digits] [PID]`): the control message and
//! the records a memory report fills.
//!
//! In memory mode a record's histogram holds bytes, not ticks, in the
//! seed's layout (spec §2.3): index 0 the module's current bytes, 1 its
//! high water, `2*(p+1)` and `2*(p+1)+1` the current and high-water bytes
//! charged to p, the allocating call's return address in the module's
//! link-time address space (consumers subtract 1 to reach the call). The
//! pairs are served by the same one-pair-per-read protocol as sampling's
//! (`0x<index> <bytes>\n`), zero values left out, values 64-bit.
//!
//! Nothing in the device counts allocations: the accounting runs inside
//! the profiled processes (`profdev_mprof`'s preloaded library), and their
//! reports are handed to the device through [`Prof::memory_report`]:
//! `profdev mprof CMD` drives a private instance of this device that way.
//! Attaching to a running process (`startmp… PID`) is not built yet: the
//! message is checked (the writer must be allowed to ptrace PID) and then
//! refused with a sentence saying so.

use super::histogram::ModRecord;
use super::{Mode, Prof};
use crate::access::{ptrace_may_attach, Cred};
use crate::ctl;
use crate::pc_counts::PcCounts;
use crate::DevError;

/// Pools of `startmp` (spec §2.2, Linux meanings): 1 the malloc family,
/// 2 mmap/brk called by the program, 3 file mappings.
pub const POOL_MALLOC: u8 = 1;
/// See [`POOL_MALLOC`].
pub const POOL_MAP: u8 = 2;
/// See [`POOL_MALLOC`].
pub const POOL_FILE: u8 = 4;

/// The pools a `startmp` verb names: `startmp` alone none (memory mode
/// with nothing hooked), else a non-empty combination of the digits 1, 2
/// and 3, each at most once, in any order. `None` for anything else.
pub fn parse_pools(verb: &str) -> Option<u8> {
    let digits = verb.strip_prefix("startmp")?;
    let mut pools = 0u8;
    for c in digits.chars() {
        let bit = match c {
            '1' => POOL_MALLOC,
            '2' => POOL_MAP,
            '3' => POOL_FILE,
            _ => return None,
        };
        if pools & bit != 0 {
            return None;
        }
        pools |= bit;
    }
    Some(pools)
}

/// One module's memory counters, as a report gives them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryModule {
    /// The module's name (its file's basename).
    pub name: String,
    /// Its file path.
    pub path: String,
    /// Pairs in the memory layout (index, bytes), as
    /// `profdev_mprof::histogram_pairs` makes them.
    pub pairs: Vec<(u64, u64)>,
}

impl Prof {
    /// `startmp[digits] [PID]`, with `data` the whole message.
    pub(super) fn startmp(&self, data: &[u8], cred: Option<Cred>) -> Result<(), DevError> {
        let msg = ctl::quoted(data);
        let words: Vec<&str> = msg.split_whitespace().collect();
        let bad = |why: String| DevError::BadCtlArg {
            msg: msg.clone(),
            why,
        };
        let pools = parse_pools(words[0]).ok_or_else(|| {
            bad("the pools after startmp are a combination of the digits 1, 2 and 3".into())
        })?;
        if words.len() > 2 {
            return Err(bad(
                "startmp takes at most one argument, a process id".into()
            ));
        }
        let pid = match words.get(1) {
            None => None,
            Some(w) => match w.parse::<u32>() {
                Ok(p) if p > 0 && !w.starts_with('+') => Some(p),
                _ => return Err(bad(format!("{w:?} is not a process id"))),
            },
        };
        let busy = |m: Mode| {
            DevError::Busy(format!(
                "the prof device is in {} mode; write stop first",
                m.name()
            ))
        };
        if let Some(pid) = pid {
            if let Some(m) = self.mode() {
                return Err(busy(m));
            }
            match cred {
                Some(c) => ptrace_may_attach(&c, pid)?,
                None => {
                    crate::access::Target::of(pid)?;
                }
            }
            return Err(DevError::NoDevice(format!(
                "attaching to running process {pid} is not built yet: start the program under \
                 `profdev mprof CMD` instead"
            )));
        }
        let mut st = self.lock();
        match st.mode {
            None => st.mode = Some(Mode::Memory { pools }),
            Some(Mode::Memory { .. }) => st.mode = Some(Mode::Memory { pools }),
            Some(m) => return Err(busy(m)),
        }
        Ok(())
    }

    /// Hand the device a memory report: each module's record (created the
    /// first time, if the module list wants it) takes `pairs` as its
    /// histogram, replacing what it held. Refused (EINVAL) unless the
    /// device is in memory mode.
    pub fn memory_report(&self, modules: &[MemoryModule]) -> Result<(), DevError> {
        let wanted = {
            let st = self.lock();
            if !matches!(st.mode, Some(Mode::Memory { .. })) {
                return Err(DevError::Invalid(
                    "a memory report needs memory mode (startmp)".into(),
                ));
            }
            st.wanted.clone()
        };
        // Canonical paths outside the lock.
        let canon: Vec<Option<String>> = modules
            .iter()
            .map(|m| {
                std::fs::canonicalize(&m.path)
                    .ok()
                    .map(|p| p.to_string_lossy().into_owned())
            })
            .collect();
        let mut st = self.lock();
        for (m, canon) in modules.iter().zip(canon) {
            let wants = wanted.is_empty()
                || wanted.iter().any(|w| {
                    w.raw == m.name
                        || w.raw == m.path
                        || (w.canonical.is_some() && w.canonical == canon)
                });
            if let Some(r) = st
                .records
                .iter_mut()
                .find(|r| r.memory.is_some() && r.path == m.path)
            {
                r.memory = Some(m.pairs.clone());
                continue;
            }
            if !wants {
                continue;
            }
            let id = st.next_id;
            st.next_id = st.next_id.saturating_add(1);
            st.records.push(ModRecord {
                id,
                name: m.name.clone(),
                path: m.path.clone(),
                counts: PcCounts::default(),
                object: None,
                memory: Some(m.pairs.clone()),
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

    #[test]
    fn pools() {
        assert_eq!(parse_pools("startmp"), Some(0));
        assert_eq!(parse_pools("startmp1"), Some(1));
        assert_eq!(parse_pools("startmp13"), Some(5));
        assert_eq!(parse_pools("startmp321"), Some(7));
        for bad in ["startmp0", "startmp4", "startmp11", "startmpx", "startm"] {
            assert_eq!(parse_pools(bad), None, "{bad}");
        }
    }

    #[test]
    fn startmp_messages() {
        let d = dev();
        for bad in [
            "startmp4",
            "startmp11",
            "startmp1 x",
            "startmp1 1 2",
            "startmp1 0",
            "startmpa",
        ] {
            assert!(
                matches!(write(&d, bad, None), Err(DevError::BadCtlArg { .. })),
                "{bad}"
            );
            assert_eq!(d.mode(), None, "{bad} changes nothing");
        }
        assert_eq!(write(&d, "startmp13\n", None), Ok(10));
        assert_eq!(d.mode(), Some(Mode::Memory { pools: 5 }));
        // Another start while memory mode is on: sampling's is ignored.
        write(&d, "start", None).unwrap();
        assert_eq!(d.mode(), Some(Mode::Memory { pools: 5 }));
        // A PID while a mode is active: EBUSY.
        let me = std::process::id();
        assert!(matches!(
            write(&d, &format!("startmp1 {me}"), None),
            Err(DevError::Busy(_))
        ));
        write(&d, "stop", None).unwrap();
        assert_eq!(d.mode(), None);
        // No such process: ESRCH, before anything else.
        assert_eq!(
            write(&d, "startmp1 2147483647", None),
            Err(DevError::NoProcess(2147483647))
        );
        // Not allowed to ptrace: EPERM (nobody may not trace pid 1).
        let nobody = Cred {
            uid: 65534,
            gid: 65534,
            pid: 0,
        };
        assert!(matches!(
            write(&d, "startmp1 1", Some(nobody)),
            Err(DevError::NotPermitted(_))
        ));
        // Allowed: refused with the sentence, never a fake success.
        match write(&d, &format!("startmp1 {me}"), None) {
            Err(DevError::NoDevice(why)) => assert!(why.contains("not built yet"), "{why}"),
            r => panic!("{r:?}"),
        }
        assert_eq!(d.mode(), None);
    }

    #[test]
    fn reports_fill_histograms_in_the_memory_layout() {
        let d = dev();
        let m = MemoryModule {
            name: "known".into(),
            path: "/x/known".into(),
            pairs: vec![(0, 4096), (1, 8192), (7, 64)],
        };
        assert!(matches!(
            d.memory_report(std::slice::from_ref(&m)),
            Err(DevError::Invalid(_))
        ));
        write(&d, "module known", None).unwrap();
        write(&d, "startmp1", None).unwrap();
        let other = MemoryModule {
            name: "libc.so.6".into(),
            path: "/lib/libc.so.6".into(),
            pairs: vec![(0, 1)],
        };
        d.memory_report(&[m.clone(), other]).unwrap();
        let dir = walk(&d, Qid::ROOT, "00000001").unwrap();
        assert!(
            walk(&d, Qid::ROOT, "00000002").is_err(),
            "libc is not wanted"
        );
        let h = walk(&d, dir.qid, "histogram").unwrap();
        let mut chan = d.open(h.qid, OpenMode::Read).unwrap();
        let mut pairs = Vec::new();
        loop {
            let b = d.read(&mut chan, 0, 64).unwrap();
            if b.is_empty() {
                break;
            }
            pairs.push(String::from_utf8(b).unwrap());
        }
        assert_eq!(pairs, ["0x0 4096\n", "0x1 8192\n", "0x7 64\n"]);
        // A later report replaces the counts.
        d.memory_report(&[MemoryModule {
            pairs: vec![(1, 10)],
            ..m
        }])
        .unwrap();
        let mut chan = d.open(h.qid, OpenMode::Read).unwrap();
        assert_eq!(d.read(&mut chan, 0, 64).unwrap(), b"0x1 10\n");
        write(&d, "end", None).unwrap();
        assert!(walk(&d, Qid::ROOT, "00000001").is_err());
    }
}
