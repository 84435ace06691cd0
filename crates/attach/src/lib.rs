//! The engines prof's attach modes are handed: counting code loaded into
//! a running process.
//!
//! # Synopsis
//!
//! ```text
//! let engines = profdev_attach::engines();        // for DevContext::prof_engines
//! Prof::with_engines(engine, engines)             // startcp PID, startmp… PID
//! profdev_attach::attach_coverage(pid, &select, permit)   // profdev cprof -p
//! profdev_attach::attach_process(pid, &options, permit) // profdev mprof -p
//! profdev_attach::scan_process(pid, permit)       // profdev mprof -p PID --scan
//! ```
//!
//! # Description
//!
//! The prof device (`profdev_dev::prof`) parses `startcp PID` and
//! `startmp… PID`, checks the writer's right to ptrace PID
//! (`profdev_dev::access::ptrace_may_attach`) and hands the
//! [`Permit`] to an engine it was given
//! ([`profdev_dev::prof::CoverageEngine`],
//! [`profdev_dev::prof::MemoryEngine`]). This crate is those engines, so
//! that the device layer names no injector:
//!
//! * [`coverage`]: the coverage runtime of `profdev_coverage` injected
//!   with ptrace (`profdev_inject`), or, for a statically linked process,
//!   one multi-uprobe link ([`attach_coverage`], [`statically_linked`],
//!   [`CovAttached`]);
//! * [`memory`]: the accounting library of `profdev_mprof` injected with
//!   ptrace ([`attach_process`], [`MemAttached`]);
//! * [`scan`]: a running process stopped, its glibc heap scanned for
//!   unreachable blocks (`profdev_mprof::scan`) read-only, and let go
//!   ([`scan_process`]); nothing is loaded into it.
//!
//! Each engine stops every thread of the process, checks the permit
//! again ([`Permit::check_again`](profdev_dev::access::Permit::check_again))
//! before anything is loaded, and lets the process go untouched (EPERM)
//! if the requester may no longer trace it. `profdev cprof -p` and
//! `profdev mprof -p` call the functions directly, with no device.
//!
//! What each mode counts, its limits and its bugs are documented with the
//! device's modes (`profdev_dev::prof`'s coverage and memory modules).

#![forbid(unsafe_code)]

pub mod coverage;
pub mod memory;
pub mod scan;

pub use coverage::{
    attach_coverage, attach_coverage_in, attach_static_traced, coverage_pairs, statically_linked,
    CovAttached, ATTACH_TIMEOUT,
};
pub use memory::{attach_process, AttachOptions, MemAttached, REPORT_TIMEOUT};
pub use scan::{scan_process, Scanned, MAX_PAUSE};

use profdev_dev::access::Permit;
use profdev_dev::prof::{Attached, CoverageEngine, Engines, MemoryEngine, ModuleCounts};
use profdev_dev::DevError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Both engines, for a prof device that attaches to processes.
pub fn engines() -> Engines {
    Engines {
        coverage: Some(Arc::new(Coverage)),
        memory: Some(Arc::new(Memory)),
    }
}

/// The coverage engine: [`attach_coverage`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Coverage;

impl CoverageEngine for Coverage {
    fn attach(
        &self,
        pid: u32,
        select: &[String],
        permit: Option<Permit>,
    ) -> Result<Box<dyn Attached>, DevError> {
        let a = attach_coverage(pid, select, permit)?;
        Ok(Box::new(CovWatched {
            a: Some(a),
            leave: AtomicBool::new(false),
        }))
    }
}

/// A process counted for a device; left running with its private
/// directory kept when the device went ([`CovAttached::leave_running`]),
/// once the last holder lets go.
struct CovWatched {
    /// Always Some until dropped.
    a: Option<CovAttached>,
    leave: AtomicBool,
}

impl CovWatched {
    fn get(&self) -> &CovAttached {
        self.a.as_ref().expect("taken only when dropped")
    }
}

impl Attached for CovWatched {
    fn pid(&self) -> u32 {
        self.get().pid()
    }

    fn running(&self) -> bool {
        self.get().running()
    }

    fn flush(&self) -> Result<(), DevError> {
        self.get().flush()
    }

    fn collect(&self) -> Vec<ModuleCounts> {
        self.get()
            .counts()
            .iter()
            .map(|m| {
                let path = m.path.to_string_lossy().into_owned();
                let name = m
                    .path
                    .file_name()
                    .map_or_else(|| path.clone(), |n| n.to_string_lossy().into_owned());
                ModuleCounts {
                    name,
                    path,
                    file: None,
                    pairs: coverage_pairs(m),
                }
            })
            .collect()
    }

    fn release(&self) {
        self.get().detach();
    }

    fn abandon(&self) {
        self.leave.store(true, Ordering::Relaxed);
    }
}

/// The device went while the process runs on, patched: its private
/// directory is kept (see [`CovAttached::leave_running`]), so that no
/// other user can take its name and serve it trampolines.
impl Drop for CovWatched {
    fn drop(&mut self) {
        if let Some(a) = self.a.take() {
            if self.leave.load(Ordering::Relaxed) {
                let _ = a.leave_running();
            }
        }
    }
}

/// The memory engine: [`attach_process`] (no wrappers).
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory;

impl MemoryEngine for Memory {
    fn attach(
        &self,
        pid: u32,
        pools: u8,
        permit: Option<Permit>,
    ) -> Result<Box<dyn Attached>, DevError> {
        let options = AttachOptions {
            pools,
            ..Default::default()
        };
        let a = attach_process(pid, &options, permit)?;
        // Directories of earlier attaches that are over (their process
        // gone, their watcher too) go now; this one is held while watched.
        let held = a.hold();
        if let Some(tmp) = a.reports_dir().parent().and_then(|d| d.parent()) {
            profdev_mprof::sweep(tmp, memory::fs_uid());
        }
        Ok(Box::new(MemWatched { a, _held: held }))
    }
}

/// A process counted for a device, its directory held against sweeps.
struct MemWatched {
    a: MemAttached,
    _held: Option<std::fs::File>,
}

impl Attached for MemWatched {
    fn pid(&self) -> u32 {
        self.a.pid()
    }

    fn running(&self) -> bool {
        self.a.running()
    }

    fn flush(&self) -> Result<(), DevError> {
        self.a.request_report(REPORT_TIMEOUT);
        Ok(())
    }

    fn collect(&self) -> Vec<ModuleCounts> {
        memory::modules_of(&self.a.reports())
    }

    /// After `stop` (its last report taken): the process goes on, no
    /// longer counted.
    fn release(&self) {
        if self.a.running() {
            let _ = self.a.detach();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_coverage::counts::{Block, Branch, ModuleCoverage};
    use profdev_dev::engine::ReplayFactory;
    use profdev_dev::prof::{Mode, Prof};
    use profdev_dev::tree::walk;
    use profdev_dev::{Dev, Engine, OpenMode, Qid};

    /// A device fed by nothing, attaching with this crate's engines.
    fn dev() -> Prof {
        Prof::with_engines(Engine::new(Arc::new(ReplayFactory::new(vec![]))), engines())
    }

    fn write(d: &Prof, msg: &str) -> Result<usize, DevError> {
        let e = walk(d, Qid::ROOT, "ctl").unwrap();
        let mut chan = d.open(e.qid, OpenMode::Write).unwrap();
        let r = d.write(&mut chan, 0, msg.as_bytes());
        d.close(chan);
        r
    }

    #[test]
    fn the_engines_refuse_profdev_itself() {
        // Never a fake success (real attaches: tests/cprof_attach.rs and
        // tests/mprof_attach.rs of the cli).
        let d = dev();
        let me = std::process::id();
        match write(&d, &format!("startcp {me}\n")) {
            Err(DevError::NotPermitted(why)) => assert!(why.contains("profdev itself"), "{why}"),
            r => panic!("{r:?}"),
        }
        assert_eq!(d.mode(), None);
        match write(&d, &format!("startmp1 {me}")) {
            Err(DevError::NotPermitted(why)) => assert!(why.contains("profdev itself"), "{why}"),
            r => panic!("{r:?}"),
        }
        assert_eq!(d.mode(), None);
        // No such process: ESRCH, from the device before any engine.
        assert_eq!(
            write(&d, "startcp 2147483647"),
            Err(DevError::NoProcess(2147483647))
        );
        write(&d, "startmp1").unwrap();
        assert_eq!(d.mode(), Some(Mode::Memory { pools: 1 }));
    }

    #[test]
    fn coverage_pairs_are_the_executed_instructions() {
        let m = ModuleCoverage {
            path: "/x/known".into(),
            build_id: None,
            blocks: vec![
                Block {
                    start: 0x1130,
                    end: 0x113a,
                    insns: vec![0x1130, 0x1134, 0x1137].into(),
                    count: 10,
                },
                Block {
                    start: 0x113a,
                    end: 0x1140,
                    insns: vec![0x113a].into(),
                    count: 0,
                },
                Block {
                    start: 0x1140,
                    end: 0x1144,
                    insns: vec![0x1140, 0x1142].into(),
                    count: 2,
                },
            ],
            branches: vec![Branch {
                addr: 0x1137,
                taken: 8,
                not_taken: 2,
            }],
            uncounted: 0,
            file: None,
        };
        assert_eq!(
            coverage_pairs(&m),
            [
                (0x1130, 10),
                (0x1134, 10),
                (0x1137, 10),
                (0x1140, 2),
                (0x1142, 2)
            ]
        );
    }

    fn report(
        pid: u32,
        modules: &[(&str, u64)],
        sites: &[(usize, u64, i64)],
    ) -> profdev_mprof::Report {
        use profdev_mprof::{ReportModule, ReportSite};
        profdev_mprof::Report {
            pid,
            modules: modules
                .iter()
                .map(|&(path, ino)| ReportModule {
                    bias: 0x1000,
                    dev: 8,
                    ino,
                    current: 100,
                    high_water: 300,
                    path: path.into(),
                })
                .collect(),
            sites: sites
                .iter()
                .map(|&(module, pc, current)| ReportSite {
                    pc,
                    module: Some(module),
                    current,
                    high_water: current * 2,
                    allocs: 1,
                    bytes: current as u64,
                    live: 1,
                    dhat: None,
                    pools: 1,
                    temporary: 0,
                    at_peak: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn stop_merges_processes_as_mprof_merges_reports() {
        // Two attached processes (the first with a child), sharing libc;
        // a module of one path but another file stays apart.
        let first = [
            report(
                10,
                &[("/bin/a", 1), ("/lib/libc.so.6", 2)],
                &[(0, 0x1010, 64), (1, 0x1200, 8)],
            ),
            report(
                11,
                &[("/lib/libc.so.6", 2)],
                &[(0, 0x1200, 16), (0, 0x1300, 0)],
            ),
        ];
        let second = [report(
            20,
            &[("/lib/libc.so.6", 2), ("/bin/a", 9)],
            &[(0, 0x1200, 32), (1, 0x1010, 1)],
        )];
        let per_process: Vec<ModuleCounts> = memory::modules_of(&first)
            .into_iter()
            .chain(memory::modules_of(&second))
            .collect();
        let all: Vec<profdev_mprof::Report> = first.iter().chain(&second).cloned().collect();
        assert_eq!(
            profdev_dev::prof::merge_counts(per_process),
            memory::modules_of(&all)
        );
    }
}
