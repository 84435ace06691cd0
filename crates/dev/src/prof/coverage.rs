//! prof's coverage mode (`startcp PID`): the control message, the attach
//! to a running process, and the records a coverage report fills.
//!
//! # Synopsis
//!
//! ```text
//! echo module NAME... > prof/ctl   # what to count (empty: everything)
//! echo startcp PID > prof/ctl      # count running process PID from now on
//! echo stop > prof/ctl             # PID reports now (or when it exits)
//! cat prof/NNNNNNNN/histogram      # 0x<address> <count> per instruction
//! ```
//!
//! # Description
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
//! not ptrace PID, with EPERM (the kernel's rule for the writer: its ids
//! against all of PID's, and PID dumpable); the writer's own process,
//! EINVAL (it would wait for itself). The right is checked again on PID
//! itself (held by a pidfd since the message) once every thread is
//! stopped, before the runtime is loaded, and again before `stop` calls
//! into it: a process that exec'd a set-user-id program (or became
//! non-dumpable) since is let go untouched, EPERM, and `stop` calls into
//! no process that no longer maps the runtime it was given.
//!
//! **The attach** (the coverage engine the device is handed,
//! [`CoverageEngine`](super::CoverageEngine): `profdev_attach::attach_coverage`,
//! which `profdev cprof -p PID` calls too, without a device; a statically
//! linked process is told apart in one place,
//! `profdev_attach::statically_linked`; a device built without a coverage
//! engine refuses with ENXIO): the engine makes a planning
//! server (`profdev_coverage::launch::Server`) whose private directory is
//! 0711, the runtime `libprofdev_cov.so` 0555, its socket 0600 and its
//! report directory `out/` 0700, both owned by PID's user, so a process of
//! another user can load the runtime, reach the socket and write reports,
//! and no third user can; it plans the selected modules PID maps while
//! PID runs on (planning is the slow part). Then it stops every thread of PID with ptrace
//! (profdev-inject), loads the runtime with the process's own `dlopen`,
//! and calls `profdev_cov_attach` in the main thread with every thread's
//! pc: the runtime asks the server for each module the `module` list
//! selects (empty: the executable and every library it maps), the server
//! plans it and encodes its trampolines, and the runtime patches the code
//! in place, leaving out a patch whose bytes hold a stopped thread's pc
//! (that block is reported uncounted). Every thread then gets a counter
//! array of its own as its GS base (set in the registers it resumes
//! with), so threads lose no count, and the process is detached and runs
//! on, counting every block directly (no count is inferred from flow, so
//! frames active at the attach count exactly from there on). Code that
//! ran before the attach has no pair. The server reads a module only
//! through the connecting process's `/proc/PID/map_files/` (the
//! connection's SO_PEERCRED pid): a process cannot make profdev, root,
//! read a file it does not map. It reads of a module only what its ELF
//! headers name (refusing any other file from its first 64 bytes), and
//! for a process of a user other than root and the mount's plans at most
//! 4 MiB of code per module that user can have written (16 MiB read) and
//! 64 MiB per attach, keeps that user's plans in a cache of the user's
//! own (`/var/cache/profdev/coverage/UID/`, 256 MiB), and refuses a
//! report in `out/` larger than the planned modules could write, reading
//! at most 10,000 reports (`profdev_coverage::launch`'s Bounds).
//!
//! The histograms fill when the process exits (the runtime writes a
//! report at exit; the device watches the process for that) and at
//! `stop`, which first stops the process again and calls the runtime's
//! `profdev_cov_flush` in it (a report of the counts so far), then fills
//! the histograms and stops. A process counted already (by `profdev cprof`
//! or an earlier `startcp`), EBUSY.
//!
//! **A statically linked process** (one that maps no libc to load the
//! runtime with) is counted through uprobes instead
//! (`profdev_coverage::uprobe`): its executable (`/proc/PID/exe`) is
//! planned into the same blocks, and one multi-uprobe BPF link, filtered
//! to PID's threads, puts a probe on each block and each conditional
//! jump, counting into a per-CPU BPF array. Nothing is injected and the
//! process is not stopped; counts start when the write returns, exact as
//! the runtime's (a jump's outcome is decided from the saved flags before
//! it runs). `stop` reads the counts in place and removes the probes (a
//! later `startcp` may count the process again, from zero); at exit the
//! counts are read as well. Without CAP_BPF and CAP_PERFMON the
//! write fails with EPERM, and on a kernel without multi-uprobe links
//! (before Linux 6.6) with ENXIO, each with a sentence.
//!
//! # Example
//!
//! ```text
//! echo module myprog > /mnt/prof/prof/ctl
//! echo startcp 4242 > /mnt/prof/prof/ctl
//! # ... 4242 runs ...
//! echo stop > /mnt/prof/prof/ctl
//! cat /mnt/prof/prof/00000001/histogram
//! 0x1219 200000
//! 0x121a 200000
//! ...
//! ```
//!
//! # Bugs
//!
//! * Every thread is held while the trampolines are encoded and the code
//!   patched (the modules the process maps are planned before it is
//!   stopped; a module it maps meanwhile is planned while it waits):
//!   milliseconds for a small program, 0.9 s on the test VM when the
//!   module list is empty (libc's trampolines). A thread
//!   holding a lock `dlopen` needs makes the load give up after 20 s and
//!   the attach fail, the process left as it was. `profdev_cov_attach`
//!   itself may take 300 s (`profdev_attach::ATTACH_TIMEOUT`; the writer waits): a
//!   program so large that encoding and patching take longer is
//!   abandoned half patched, and its threads fault at their first count
//!   (select modules with `module`).
//! * `stop` stops the process again to call `profdev_cov_flush`; a thread
//!   stopped inside the runtime's own `dlopen` hook holds its lock, and
//!   the flush then gives up after 20 s: the histograms keep what the
//!   reports before held.
//! * The code stays patched after `stop` and `end`: the process counts on
//!   (at near-native cost) until it exits, and a second `startcp` on it is
//!   refused (EBUSY). After `stop` its exit report is dropped: the
//!   histograms keep what `stop` took. When the mount goes while such a
//!   process runs, its private directory (in the temporary directory,
//!   `profdev-cov.*`) is left behind, with no socket, for its later
//!   reports: removing it could let another user create one of the same
//!   name and serve the still-patched process code at its next `dlopen`.
//!   The next `startcp` or cprof run after the device's process has
//!   ended removes it once no process maps its runtime.
//! * The histograms fill at `stop` or at exit, not while it runs: reading
//!   a histogram does not ask for a report. A process that ends with a
//!   signal that kills it writes no exit report (SIGINT, SIGTERM and
//!   SIGHUP left at their default do write one).
//! * Threads created after the attach inherit their creator's array (GS
//!   is copied by clone): their counts are kept but may race with it.
//!   Children forked after the attach report what they ran after the
//!   fork, but only reports written before the attached process exits
//!   are read; programs it execs are not counted.
//! * A block whose patch would cover a stopped thread's pc is not counted
//!   at all (it is left out of the histogram).
//! * A static process's probes cost a trap per block executed (0.2–16
//!   µs): it runs many times slower until `stop` or its exit. Its children
//!   are not counted (the link's pid filter is one thread group), nor
//!   what it execs.
//! * x86-64 and glibc only (a static process: any libc).

use super::ctl::Wanted;
use super::engines::{no_engine, report_into, watch, Kind, ModuleCounts};
use super::{Mode, Prof};
use crate::access::{ptrace_may_attach, Cred};
use crate::ctl;
use crate::DevError;
use std::path::Path;
use std::sync::Arc;

/// The process id of `startcp`'s argument: decimal digits only, not 0.
fn parse_pid(word: &str) -> Option<u32> {
    if word.is_empty() || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse::<u32>().ok().filter(|&p| p > 0)
}

/// The planning server's selection for the device's module list: each
/// name as written, and for a name that is a file its canonical path and
/// that path's file name (the device's module list decides exactly, in
/// [`Prof::coverage_report`]; the server only needs to plan the module
/// however the process names it).
fn select_words(wanted: &[Wanted]) -> Vec<String> {
    let mut select: Vec<String> = Vec::new();
    for w in wanted {
        select.push(w.raw.clone());
        if let Some(c) = &w.canonical {
            select.push(c.clone());
            if let Some(n) = Path::new(c).file_name() {
                select.push(n.to_string_lossy().into_owned());
            }
        }
    }
    select
}

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
        let permit = match cred {
            Some(c) => Some(ptrace_may_attach(&c, pid)?),
            None => {
                crate::access::Target::of(pid)?;
                None
            }
        };
        if let Some(c) = cred {
            // The writer waits for this write: stopping it would wait for
            // ever.
            if c.pid != 0
                && (c.pid == pid || Path::new(&format!("/proc/{pid}/task/{}", c.pid)).exists())
            {
                return Err(DevError::BadCtlArg {
                    msg: ctl::quoted(data),
                    why: format!(
                        "process {pid} is the one writing this message: attach to it from \
                         another process"
                    ),
                });
            }
        }
        let engine = self
            .engines
            .coverage
            .clone()
            .ok_or_else(|| no_engine("coverage"))?;
        let wanted = self.lock().wanted.clone();
        let attached = engine.attach(pid, &select_words(&wanted), permit)?;
        self.coverage_launched(pid)?;
        watch(
            Arc::downgrade(&self.state),
            &self.attached,
            Kind::Coverage,
            attached,
        );
        Ok(())
    }

    /// Before `stop`: ask every process this device attached and that
    /// still runs for a report now, and fill the histograms from the
    /// counts so far.
    pub(super) fn coverage_snapshot(&self) {
        if !matches!(self.mode(), Some(Mode::Coverage { .. })) {
            return;
        }
        for a in self.attached.live(Kind::Coverage) {
            if a.running() {
                let _ = a.flush();
            }
            let _ = report_into(&self.state, Kind::Coverage, &a.collect());
            a.release();
        }
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
    /// executed instructions and counts (`pairs`, one per executed
    /// instruction, ascending, as `profdev_attach::coverage_pairs` makes
    /// them) as its histogram, replacing what it held. Refused (EINVAL)
    /// unless the device is in coverage mode.
    pub fn coverage_report(&self, modules: &[ModuleCounts]) -> Result<(), DevError> {
        report_into(&self.state, Kind::Coverage, modules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{walk, Qid};

    use super::super::tests::{histogram, idle as dev, write_as as write};

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
        // No coverage engine given: ENXIO, nothing changed (the real
        // engine's refusals: profdev-attach's tests).
        let me = std::process::id();
        match write(&d, &format!("startcp {me}\n"), None) {
            Err(DevError::NoDevice(why)) => assert!(why.contains("coverage engine"), "{why}"),
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

    fn module(path: &str, pairs: &[(u64, u64)]) -> ModuleCounts {
        ModuleCounts {
            name: path.rsplit('/').next().unwrap().into(),
            path: path.into(),
            file: None,
            pairs: pairs.to_vec(),
        }
    }

    const PAIRS: [(u64, u64); 5] = [
        (0x1130, 10),
        (0x1134, 10),
        (0x1137, 10),
        (0x1140, 2),
        (0x1142, 2),
    ];

    #[test]
    fn histogram_holds_one_pair_per_executed_instruction() {
        let d = dev();
        let m = module("/x/known", &PAIRS);
        assert!(matches!(
            d.coverage_report(std::slice::from_ref(&m)),
            Err(DevError::Invalid(_))
        ));
        write(&d, "module known", None).unwrap();
        d.coverage_launched(std::process::id()).unwrap();
        d.coverage_report(&[m.clone(), module("/lib/libc.so.6", &PAIRS)])
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
        later.pairs.insert(3, (0x113a, 3));
        d.coverage_report(&[later]).unwrap();
        assert_eq!(histogram(&d, "00000001")[3], "0x113a 3\n");
        write(&d, "stop", None).unwrap();
        assert_eq!(histogram(&d, "00000001").len(), 6, "kept after stop");
        write(&d, "end", None).unwrap();
        assert!(walk(&d, Qid::ROOT, "00000001").is_err());
    }
}
