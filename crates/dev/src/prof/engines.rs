//! The engines prof's attach modes are handed: what `startcp PID` and
//! `startmp… PID` ask of whoever loads counting code into a running
//! process, and the one watcher that waits for such a process.
//!
//! # Description
//!
//! The device parses the message, checks the writer's right to ptrace
//! the process (`access::ptrace_may_attach`), and hands the engine the
//! [`Permit`] that check gave; the engine stops the process, checks the
//! permit again ([`Permit::check_again`]) before it loads anything, and
//! returns an [`Attached`] process. The device owns what it attached
//! (its `Attachments`), watches each process until it exits
//! ([`watch`]), and at `stop` asks each for a report. The engines
//! themselves live outside this crate (`profdev-attach`: the coverage
//! runtime, uprobes and the accounting library, all through ptrace), so
//! that the device layer names no injector; whoever builds the device
//! table passes them in ([`Engines`], `DevContext::prof_engines`).
//!
//! A device built without engines (the private devices of `profdev prof`
//! and `profdev mprof`) refuses `startcp PID` and `startmp… PID` with
//! ENXIO.

use super::histogram::ModRecord;
use super::{Mode, State};
use crate::access::Permit;
use crate::kit::lock;
use crate::pc_counts::PcCounts;
use crate::DevError;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// One module of an attached process's report, as the device takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleCounts {
    /// The module's name (its file's basename).
    pub name: String,
    /// Its file path.
    pub path: String,
    /// What tells two files of one path apart when the reports of several
    /// processes are merged (the file's device and inode), if known.
    pub file: Option<(u64, u64)>,
    /// Histogram pairs: (address, count) in coverage mode, (index,
    /// bytes) in the memory layout in memory mode.
    pub pairs: Vec<(u64, u64)>,
}

/// A running process an engine loaded counting code into.
pub trait Attached: Send + Sync {
    /// The process.
    fn pid(&self) -> u32;

    /// Does the process still run (not a zombie, not a reused pid)?
    fn running(&self) -> bool;

    /// Ask the running process for a report now, and wait for it
    /// (bounded).
    fn flush(&self) -> Result<(), DevError>;

    /// The counts of every report written so far.
    fn collect(&self) -> Vec<ModuleCounts>;

    /// After `stop`: let go whatever counts only while the device reads
    /// (probes); the process may count on otherwise.
    fn release(&self) {}

    /// The device went while the process runs on: leave it counting,
    /// with what it needs kept, once the last holder lets go.
    fn abandon(&self) {}
}

/// Counts every instruction of a running process (`startcp PID`).
pub trait CoverageEngine: Send + Sync {
    /// Start counting process `pid` (its threads, and what it spawns),
    /// the modules `select` names (basenames or paths; empty: the
    /// executable and every library it maps). `permit`, when a
    /// requester's right was checked, is checked again once the process
    /// is stopped, before anything is loaded into it.
    fn attach(
        &self,
        pid: u32,
        select: &[String],
        permit: Option<Permit>,
    ) -> Result<Box<dyn Attached>, DevError>;
}

/// Counts the allocations of a running process (`startmp… PID`).
pub trait MemoryEngine: Send + Sync {
    /// Start counting the pools `pools` (`POOL_MALLOC`…) of process
    /// `pid`. `permit` as for [`CoverageEngine::attach`].
    fn attach(
        &self,
        pid: u32,
        pools: u8,
        permit: Option<Permit>,
    ) -> Result<Box<dyn Attached>, DevError>;
}

/// The engines a prof device attaches to processes with; none by default.
#[derive(Clone, Default)]
pub struct Engines {
    /// For `startcp PID`.
    pub coverage: Option<Arc<dyn CoverageEngine>>,
    /// For `startmp… PID`.
    pub memory: Option<Arc<dyn MemoryEngine>>,
}

impl std::fmt::Debug for Engines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engines")
            .field("coverage", &self.coverage.is_some())
            .field("memory", &self.memory.is_some())
            .finish()
    }
}

/// The refusal of a device built without the engine `what` needs.
pub(super) fn no_engine(what: &str) -> DevError {
    DevError::NoDevice(format!(
        "this prof device attaches to no process ({what} engine not given)"
    ))
}

/// Which report a watched process's counts are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Coverage,
    Memory,
}

/// The processes one device attached, per mode, for reports at `stop`;
/// entries whose process was read at its exit are gone (their watcher
/// held the last reference).
#[derive(Default)]
pub(super) struct Attachments {
    coverage: Mutex<Vec<Weak<dyn Attached>>>,
    memory: Mutex<Vec<Weak<dyn Attached>>>,
}

impl Attachments {
    fn of(&self, kind: Kind) -> &Mutex<Vec<Weak<dyn Attached>>> {
        match kind {
            Kind::Coverage => &self.coverage,
            Kind::Memory => &self.memory,
        }
    }

    /// The processes of `kind` still watched.
    pub(super) fn live(&self, kind: Kind) -> Vec<Arc<dyn Attached>> {
        let mut reg = lock(self.of(kind));
        reg.retain(|a| a.strong_count() > 0);
        reg.iter().filter_map(Weak::upgrade).collect()
    }
}

/// How often a watcher looks whether its process still runs.
const POLL: Duration = Duration::from_millis(50);

/// Note `a` among `attachments` and watch it until it exits (or the
/// device, `state`, goes), then hand its counts to the device (refused
/// if the mode is off by now: see the modes' Bugs).
pub(super) fn watch(
    state: Weak<Mutex<State>>,
    attachments: &Attachments,
    kind: Kind,
    a: Box<dyn Attached>,
) {
    let a: Arc<dyn Attached> = Arc::from(a);
    lock(attachments.of(kind)).push(Arc::downgrade(&a));
    let prefix = match kind {
        Kind::Coverage => "cprof",
        Kind::Memory => "mprof",
    };
    let spawned = std::thread::Builder::new()
        .name(format!("{prefix}-{}", a.pid()))
        .spawn(move || {
            while a.running() {
                if state.strong_count() == 0 {
                    a.abandon();
                    return;
                }
                std::thread::sleep(POLL);
            }
            let Some(state) = state.upgrade() else { return };
            let _ = report_into(&state, kind, &a.collect());
        });
    // Without a thread the exit report is never read; `stop` still asks.
    let _ = spawned;
}

/// Hand the device (`state`) a report of `kind`: each module's record
/// (created the first time, if the module list wants it) takes the
/// module's pairs as its histogram, replacing what it held. Refused
/// (EINVAL) unless the device is in that mode. Files are looked at
/// outside the lock.
pub(super) fn report_into(
    state: &Mutex<State>,
    kind: Kind,
    modules: &[ModuleCounts],
) -> Result<(), DevError> {
    let wanted = {
        let st = lock(state);
        match (kind, st.mode) {
            (Kind::Coverage, Some(Mode::Coverage { .. }))
            | (Kind::Memory, Some(Mode::Memory { .. })) => {}
            (Kind::Coverage, _) => {
                return Err(DevError::Invalid(
                    "a coverage report needs coverage mode (startcp)".into(),
                ))
            }
            (Kind::Memory, _) => {
                return Err(DevError::Invalid(
                    "a memory report needs memory mode (startmp)".into(),
                ))
            }
        }
        st.wanted.clone()
    };
    let canon: Vec<Option<String>> = modules
        .iter()
        .map(|m| {
            std::fs::canonicalize(&m.path)
                .ok()
                .map(|p| p.to_string_lossy().into_owned())
        })
        .collect();
    let mut st = lock(state);
    for (m, canon) in modules.iter().zip(canon) {
        if let Some(r) = st
            .records
            .iter_mut()
            .find(|r| r.memory.is_some() && r.path == m.path)
        {
            r.memory = Some(m.pairs.clone());
            continue;
        }
        let wants = wanted.is_empty()
            || wanted.iter().any(|w| {
                w.raw == m.name
                    || w.raw == m.path
                    || (w.canonical.is_some() && w.canonical == canon)
            });
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

/// The modules of several processes' reports as one report (what `stop`
/// hands the device in memory mode): modules of one path and file summed
/// pair by pair, pairs that sum to 0 left out, modules in the order
/// first seen. For memory-layout pairs this is what
/// `profdev_mprof::merge` gives merging the reports themselves.
pub fn merge(modules: Vec<ModuleCounts>) -> Vec<ModuleCounts> {
    let mut out: Vec<(ModuleCounts, std::collections::BTreeMap<u64, u64>)> = Vec::new();
    for m in modules {
        let i = match out
            .iter()
            .position(|(o, _)| o.path == m.path && o.file == m.file)
        {
            Some(i) => i,
            None => {
                out.push((
                    ModuleCounts {
                        pairs: Vec::new(),
                        ..m.clone()
                    },
                    Default::default(),
                ));
                out.len() - 1
            }
        };
        for (k, v) in m.pairs {
            *out[i].1.entry(k).or_default() += v;
        }
    }
    out.into_iter()
        .map(|(mut m, pairs)| {
            m.pairs = pairs.into_iter().filter(|&(_, v)| v != 0).collect();
            m
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(path: &str, file: u64, pairs: &[(u64, u64)]) -> ModuleCounts {
        ModuleCounts {
            name: path.rsplit('/').next().unwrap().into(),
            path: path.into(),
            file: Some((1, file)),
            pairs: pairs.to_vec(),
        }
    }

    #[test]
    fn merge_sums_one_file_and_keeps_others_apart() {
        let merged = merge(vec![
            m("/lib/a", 1, &[(0, 5), (1, 7)]),
            m("/lib/b", 2, &[(0, 1)]),
            m("/lib/a", 1, &[(0, 2), (4, 3)]),
            m("/lib/a", 9, &[(0, 1)]),
        ]);
        assert_eq!(
            merged,
            [
                m("/lib/a", 1, &[(0, 7), (1, 7), (4, 3)]),
                m("/lib/b", 2, &[(0, 1)]),
                m("/lib/a", 9, &[(0, 1)]),
            ]
        );
    }

    /// One attach a fake engine was asked for: pid, selection, pools,
    /// whether a permit came.
    type Asked = (u32, Vec<String>, u8, bool);

    /// What a fake engine was asked and what its process does.
    #[derive(Default)]
    struct Log {
        attaches: Mutex<Vec<Asked>>,
        flushes: std::sync::atomic::AtomicUsize,
        releases: std::sync::atomic::AtomicUsize,
        abandoned: std::sync::atomic::AtomicUsize,
        running: std::sync::atomic::AtomicBool,
    }

    /// An engine that loads nothing: its "process" runs while the log
    /// says so and reports `modules`.
    struct Fake {
        log: Arc<Log>,
        modules: Vec<ModuleCounts>,
    }

    struct FakeAttached {
        pid: u32,
        log: Arc<Log>,
        modules: Vec<ModuleCounts>,
    }

    impl Attached for FakeAttached {
        fn pid(&self) -> u32 {
            self.pid
        }
        fn running(&self) -> bool {
            self.log.running.load(Ordering::SeqCst)
        }
        fn flush(&self) -> Result<(), DevError> {
            self.log.flushes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn collect(&self) -> Vec<ModuleCounts> {
            self.modules.clone()
        }
        fn release(&self) {
            self.log.releases.fetch_add(1, Ordering::SeqCst);
        }
        fn abandon(&self) {
            self.log.abandoned.fetch_add(1, Ordering::SeqCst);
        }
    }

    use std::sync::atomic::Ordering;

    impl Fake {
        fn attached(&self, pid: u32) -> Box<dyn Attached> {
            Box::new(FakeAttached {
                pid,
                log: self.log.clone(),
                modules: self.modules.clone(),
            })
        }
    }

    impl CoverageEngine for Fake {
        fn attach(
            &self,
            pid: u32,
            select: &[String],
            permit: Option<Permit>,
        ) -> Result<Box<dyn Attached>, DevError> {
            lock(&self.log.attaches).push((pid, select.to_vec(), 0, permit.is_some()));
            Ok(self.attached(pid))
        }
    }

    impl MemoryEngine for Fake {
        fn attach(
            &self,
            pid: u32,
            pools: u8,
            permit: Option<Permit>,
        ) -> Result<Box<dyn Attached>, DevError> {
            lock(&self.log.attaches).push((pid, Vec::new(), pools, permit.is_some()));
            Ok(self.attached(pid))
        }
    }

    fn device(modules: Vec<ModuleCounts>) -> (super::super::Prof, Arc<Log>) {
        use crate::engine::{Engine, ReplayFactory};
        let log = Arc::new(Log::default());
        log.running.store(true, Ordering::SeqCst);
        let fake = Arc::new(Fake {
            log: log.clone(),
            modules,
        });
        let engines = Engines {
            coverage: Some(fake.clone()),
            memory: Some(fake),
        };
        let d = super::super::Prof::with_engines(
            Engine::new(Arc::new(ReplayFactory::new(vec![]))),
            engines,
        );
        (d, log)
    }

    use super::super::tests::{histogram, write_as as write};

    #[test]
    fn startcp_hands_the_engine_the_process_and_stop_reads_it() {
        let (d, log) = device(vec![m("/x/known", 1, &[(0x10, 3), (0x14, 1)])]);
        write(&d, "module known /no/such/file", None).unwrap();
        // pid 1 exists; no writer's credentials: no permit to check.
        write(&d, "startcp 1", None).unwrap();
        assert_eq!(d.mode(), Some(Mode::Coverage { pid: 1 }));
        assert_eq!(
            *lock(&log.attaches),
            [(1, vec!["known".into(), "/no/such/file".into()], 0, false)]
        );
        write(&d, "stop", None).unwrap();
        assert_eq!(log.flushes.load(Ordering::SeqCst), 1, "asked for a report");
        assert_eq!(log.releases.load(Ordering::SeqCst), 1, "let go after");
        assert_eq!(histogram(&d, "00000001"), ["0x10 3\n", "0x14 1\n"]);
        assert_eq!(log.abandoned.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn startmp_pid_stop_merges_every_running_process() {
        let (d, log) = device(vec![
            m("/x/known", 1, &[(0, 10), (4, 2)]),
            m("/x/other", 2, &[(0, 1)]),
        ]);
        write(&d, "startmp1 1", None).unwrap();
        write(&d, "startmp3 1", None).unwrap();
        assert_eq!(d.mode(), Some(Mode::Memory { pools: 5 }));
        let pools: Vec<u8> = lock(&log.attaches).iter().map(|a| a.2).collect();
        assert_eq!(pools, [1, 4]);
        write(&d, "stop", None).unwrap();
        assert_eq!(log.flushes.load(Ordering::SeqCst), 2);
        // Two processes mapping the same two files: their counts summed
        // (not the last report winning).
        assert_eq!(histogram(&d, "00000001"), ["0x0 20\n", "0x4 4\n"]);
        assert_eq!(histogram(&d, "00000002"), ["0x0 2\n"]);
    }

    #[test]
    fn a_device_that_goes_abandons_what_it_watches() {
        let (d, log) = device(Vec::new());
        write(&d, "startcp 1", None).unwrap();
        drop(d);
        profdev_testkit::wait_until("the watcher abandons", Duration::from_secs(10), || {
            log.abandoned.load(Ordering::SeqCst) == 1
        });
        assert_eq!(log.flushes.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn an_exit_report_fills_the_histograms() {
        let (d, log) = device(vec![m("/x/known", 1, &[(0x10, 7)])]);
        write(&d, "startcp 1", None).unwrap();
        log.running.store(false, Ordering::SeqCst);
        profdev_testkit::wait_until("the exit report", Duration::from_secs(10), || {
            crate::tree::walk(&d, crate::tree::Qid::ROOT, "00000001").is_ok()
        });
        assert_eq!(histogram(&d, "00000001"), ["0x10 7\n"]);
        assert_eq!(log.flushes.load(Ordering::SeqCst), 0, "no request at exit");
    }
}
