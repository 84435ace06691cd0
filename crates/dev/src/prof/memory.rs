//! prof's memory mode (`startmp[digits] [PID]`): the control message and
//! the records a memory report fills.
//!
//! # Synopsis
//!
//! ```text
//! echo startmp1 > prof/ctl        # memory mode, nothing hooked yet
//! echo startmp1 PID > prof/ctl    # attach to running process PID
//! echo stop > prof/ctl            # PID reports now (or when it exits)
//! cat prof/NNNNNNNN/histogram     # its bytes
//! ```
//!
//! # Description
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
//! the profiled processes (`profdev_mprof`'s library), and their reports
//! are handed to the device through [`Prof::memory_report`]: `profdev
//! mprof CMD` drives a private instance of this device that way, with the
//! library preloaded.
//!
//! **`startmp[digits] PID`** attaches to a running process, as `heaptrack
//! -p` does: the writer must be allowed to ptrace PID (EPERM otherwise:
//! the kernel's rule for the writer, its ids against all of PID's and PID
//! dumpable, checked again on PID itself, held by a pidfd, once every
//! thread is stopped and before the library is loaded, so that a process
//! that exec'd a set-user-id program meanwhile is let go untouched;
//! ESRCH for no such process, EBUSY while sampling or another tracer holds
//! it); memory mode may already be on (`startmp` alone waits for such an
//! attach). The device checks the writer's right and hands the rest to
//! the memory engine it was given ([`MemoryEngine`](super::MemoryEngine):
//! `profdev_attach::attach_process`, which `profdev mprof -p PID` calls
//! too, without a device; a device built without one refuses with
//! ENXIO). The engine writes the library into a fresh private directory
//! (0711, the library 0555, a report directory 0700 owned by the process's
//! user), stops every thread of PID with ptrace (profdev-inject), loads the
//! library with the process's own `dlopen`, and calls its
//! `profdev_mprof_attach`, which redirects the malloc family of every
//! loaded module (their GOT entries) to the library, and of modules loaded
//! later (dlopen is redirected too); then it detaches and the process runs
//! on, counting. Blocks allocated before the attach are never subtracted
//! from anything. Its reports fill the histograms of the modules the
//! `module` list wants, in the layout above: when it exits (the library
//! writes a report at exit; the device watches the process for that), and
//! at `stop`, which first asks every attached process still running for a
//! report (the library's reporter thread, `profdev-mprof`, writes one when
//! the device writes the FIFO `request` in its report directory; `stop`
//! waits for it at most 5 s per process) and then stops.
//! A statically linked program is refused with "process N is out of reach:
//! statically linked, start it under profdev mprof instead" (ENXIO).
//!
//! # Example
//!
//! ```text
//! echo module myprog > /mnt/prof/prof/ctl
//! echo startmp1 4242 > /mnt/prof/prof/ctl
//! # ... 4242 runs ...
//! echo stop > /mnt/prof/prof/ctl
//! cat /mnt/prof/prof/00000001/histogram
//! ```
//!
//! # Bugs
//!
//! * The histograms of an attached process fill when it exits or at
//!   `stop`, not while it runs between: reading a histogram does not ask
//!   for a report. A process that ends with `_exit`, a signal or SIGKILL
//!   writes no exit report: its table of counts (`live.PID.K` in its
//!   report directory, a file the library counts into through a shared
//!   mapping) is read instead, as it is whenever it is newer than the
//!   reports. After `stop` (or `end`) its exit report is dropped: the
//!   histograms keep what `stop` took. Each report replaces the histograms
//!   of the modules it names (processes attached one after the other share
//!   a module such as libc.so.6: the last report wins).
//! * The report directory is the process's user's: what is read from it
//!   is bounded before it is read (a report at most what the library can
//!   write, about 15 MB, checked by its size; a table the size its header
//!   names, 63 MiB; at most 256 files and 64 MiB per reading), and only
//!   regular files opened without following links. The library opens its
//!   FIFO `request` `O_NOFOLLOW` and stops asking for reports if anything
//!   else is found there.
//! * The private directory stays while its process runs after the device
//!   let it go (the device ended, or `mprof -p` was interrupted); it is
//!   removed at a later attach or mprof run of the same user once no
//!   process maps its library and it is over 60 s old.
//! * The library adds a thread to the process (`profdev-mprof`, every
//!   signal blocked, asleep in open(2) on its FIFO).
//! * Children it forks after the attach count too, but only a report
//!   written before the attached process exits is read; programs it execs
//!   are not counted (no `LD_PRELOAD` in their environment).
//! * Every thread is held while the library loads: if one of them holds a
//!   lock `dlopen` needs (the loader's, or malloc's arena), the load gives
//!   up after 20 s and the attach fails, the process left as it was.
//! * The redirected `dlopen` calls the real one from the library, so a
//!   library opened by bare name through its caller's RUNPATH is searched
//!   with the library's instead (as with `heaptrack -p`).
//! * x86-64 and glibc only.

use super::engines::{merge, no_engine, report_into, watch, Kind, ModuleCounts};
use super::{Mode, Prof};
use crate::access::{ptrace_may_attach, Cred};
use crate::ctl;
use crate::DevError;
use std::path::Path;

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
            // Memory mode may be on (with nothing hooked, or other
            // processes attached); any other mode is busy.
            if let Some(m) = self.mode().filter(|m| !matches!(m, Mode::Memory { .. })) {
                return Err(busy(m));
            }
            let permit = match cred {
                Some(c) => {
                    let permit = ptrace_may_attach(&c, pid)?;
                    // The writer waits for this write: stopping it would
                    // wait for ever.
                    if c.pid != 0
                        && (c.pid == pid
                            || Path::new(&format!("/proc/{pid}/task/{}", c.pid)).exists())
                    {
                        return Err(bad(format!(
                            "process {pid} is the one writing this message: attach to it \
                             from another process"
                        )));
                    }
                    Some(permit)
                }
                None => {
                    crate::access::Target::of(pid)?;
                    None
                }
            };
            // Pools: the digits given, or the malloc family alone.
            let hooked = if pools == 0 { POOL_MALLOC } else { pools };
            let engine = self
                .engines
                .memory
                .clone()
                .ok_or_else(|| no_engine("memory"))?;
            let attached = engine.attach(pid, hooked, permit)?;
            {
                let mut st = self.lock();
                match st.mode {
                    Some(Mode::Memory { pools: p }) => {
                        st.mode = Some(Mode::Memory { pools: p | hooked })
                    }
                    None => st.mode = Some(Mode::Memory { pools: hooked }),
                    Some(m) => return Err(busy(m)), // started meanwhile
                }
            }
            watch(
                std::sync::Arc::downgrade(&self.state),
                &self.attached,
                Kind::Memory,
                attached,
            );
            return Ok(());
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
        let modules: Vec<ModuleCounts> = modules
            .iter()
            .map(|m| ModuleCounts {
                name: m.name.clone(),
                path: m.path.clone(),
                file: None,
                pairs: m.pairs.clone(),
            })
            .collect();
        report_into(&self.state, Kind::Memory, &modules)
    }

    /// Before `stop`: ask every process this device attached and that
    /// still runs for a report now (the engine waits a bounded time), and
    /// fill the histograms from them, merged (a module several processes
    /// map is summed); then let each go on uncounted (detached).
    pub(super) fn memory_snapshot(&self) {
        if !matches!(self.mode(), Some(Mode::Memory { .. })) {
            return;
        }
        let mut modules = Vec::new();
        let mut any = false;
        for a in self.attached.live(Kind::Memory) {
            if a.running() {
                let _ = a.flush();
                modules.extend(a.collect());
                any = true;
                a.release();
            }
        }
        if any {
            let _ = report_into(&self.state, Kind::Memory, &merge(modules));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{walk, OpenMode, Qid};
    use crate::Dev;

    use super::super::tests::{idle as dev, write_as as write};

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
        write(&d, "stop", None).unwrap();
        assert_eq!(d.mode(), None);
        // A PID while sampling: EBUSY.
        let me = std::process::id();
        write(&d, "start", None).unwrap();
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
        // No memory engine given: ENXIO, nothing changed (the real
        // engine's refusals: profdev-attach's tests; real attaches:
        // tests/mprof_attach.rs of the cli).
        match write(&d, &format!("startmp1 {me}"), None) {
            Err(DevError::NoDevice(why)) => assert!(why.contains("memory engine"), "{why}"),
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
