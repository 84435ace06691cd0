//! The labels of the processes sampled: executable path and cgroup (with
//! what it reveals, [`crate::cgroup`]). A process is read from
//! `/proc/PID` when it is first seen (its fork, or its first sample: the
//! processes running when the agent starts), its cgroup again at its exec;
//! the executable of an exec is the first file the kernel reports mapped
//! after it (its MMAP record: no race with the process's end). A process
//! that lives 200 ms between two cuts is still named; its command comes
//! from the recording (the kernel's COMM records), and build ids from the
//! recording's objects, as every mapping carries one. What can no longer
//! be read keeps its last known value.

use crate::cgroup::{self, Cgroup};
use profdev_core::Record;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

/// The most bytes read of a `/proc/PID/cgroup` file.
const MAX_CGROUP_BYTES: u64 = 64 * 1024;

/// What is known of one process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessLabels {
    /// The executable's path (`/proc/PID/exe`).
    pub exe: Option<String>,
    /// Its cgroup.
    pub cgroup: Option<Cgroup>,
}

impl ProcessLabels {
    /// The labels of process `pid` read from `proc` (`/proc`), as far as
    /// it can still be read.
    pub fn read(proc: &std::path::Path, pid: u32) -> ProcessLabels {
        use std::io::Read;
        let dir = proc.join(pid.to_string());
        let exe = std::fs::read_link(dir.join("exe"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        let mut text = String::new();
        let cgroup = std::fs::File::open(dir.join("cgroup"))
            .and_then(|f| f.take(MAX_CGROUP_BYTES).read_to_string(&mut text))
            .ok()
            .and_then(|_| cgroup::parse(&text));
        ProcessLabels { exe, cgroup }
    }
}

/// The labels of the processes seen, kept while they live and for the
/// cut of the interval they ended in.
pub struct Labels {
    proc: PathBuf,
    by_pid: HashMap<u32, Arc<ProcessLabels>>,
    exited: HashSet<u32>,
    sampled: HashSet<u32>,
    /// Processes that exec'ed and whose executable's mapping is still to
    /// come.
    exec_pending: HashSet<u32>,
}

impl Labels {
    /// A table reading processes from `proc` (`/proc`).
    pub fn new(proc: PathBuf) -> Labels {
        Labels {
            proc,
            by_pid: HashMap::new(),
            exited: HashSet::new(),
            sampled: HashSet::new(),
            exec_pending: HashSet::new(),
        }
    }

    fn learn(&mut self, pid: u32) {
        let read = ProcessLabels::read(&self.proc, pid);
        let known = Arc::make_mut(self.by_pid.entry(pid).or_default());
        known.exe = read.exe.or(known.exe.take());
        known.cgroup = read.cgroup.or(known.cgroup.take());
        self.exited.remove(&pid);
    }

    /// Take in one record (before the recorder does, or after: only the
    /// process ids and kinds matter).
    pub fn observe(&mut self, r: &Record) {
        match r {
            Record::Fork { pid, tid, .. } if pid == tid => self.learn(*pid),
            Record::Comm {
                pid, exec: true, ..
            } => {
                let read = ProcessLabels::read(&self.proc, *pid);
                let known = Arc::make_mut(self.by_pid.entry(*pid).or_default());
                known.cgroup = read.cgroup.or(known.cgroup.take());
                self.exec_pending.insert(*pid);
                self.exited.remove(pid);
            }
            Record::Mmap { pid, path, .. }
                if path.starts_with('/')
                    && !path.starts_with("//")
                    && self.exec_pending.remove(pid) =>
            {
                let known = Arc::make_mut(self.by_pid.entry(*pid).or_default());
                known.exe = Some(path.clone());
            }
            Record::Exit { pid, tid, .. } if pid == tid => {
                self.exited.insert(*pid);
            }
            Record::Sample(s) if s.pid != 0 => {
                if !self.by_pid.contains_key(&s.pid) {
                    self.learn(s.pid);
                }
                self.sampled.insert(s.pid);
            }
            _ => {}
        }
    }

    /// The labels of the processes sampled since the last cut; processes
    /// that exited are forgotten.
    pub fn cut(&mut self) -> BTreeMap<u32, Arc<ProcessLabels>> {
        let out = self
            .sampled
            .drain()
            .filter_map(|pid| Some((pid, self.by_pid.get(&pid)?.clone())))
            .collect();
        for pid in self.exited.drain() {
            self.by_pid.remove(&pid);
            self.exec_pending.remove(&pid);
        }
        out
    }

    /// Processes known.
    pub fn len(&self) -> usize {
        self.by_pid.len()
    }

    /// Whether no process is known.
    pub fn is_empty(&self) -> bool {
        self.by_pid.is_empty()
    }
}

/// This machine's host name (`/proc/sys/kernel/hostname`).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_core::Sample;

    /// A fake /proc: process 42 runs /usr/bin/hot in a docker container.
    fn fake_proc() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("42");
        std::fs::create_dir(&p).unwrap();
        std::os::unix::fs::symlink("/usr/bin/hot", p.join("exe")).unwrap();
        std::fs::write(p.join("cgroup"), "0::/user.slice/shell.scope\n").unwrap();
        d
    }

    fn sample(pid: u32) -> Record {
        Record::Sample(Sample {
            pid,
            tid: pid,
            ..Sample::default()
        })
    }

    /// A process is read at its fork and its exec (its executable from
    /// the mapping after the exec), kept through its exit for the cut of
    /// its interval, then forgotten; the idle task is never read.
    #[test]
    fn a_process_is_named_in_the_interval_it_ended_in() {
        let d = fake_proc();
        let mut t = Labels::new(d.path().to_path_buf());
        t.observe(&Record::Fork {
            pid: 42,
            ppid: 1,
            tid: 42,
            ptid: 1,
            time: 1,
        });
        // Its exec: the executable is the first file mapped after it, the
        // cgroup what /proc says now.
        std::fs::write(d.path().join("42/cgroup"), "0::/system.slice/hot.service\n").unwrap();
        t.observe(&Record::Comm {
            pid: 42,
            tid: 42,
            comm: "hot".into(),
            exec: true,
            time: 2,
        });
        for path in ["//anon", "/usr/bin/hot-after-exec", "/lib/ld.so"] {
            t.observe(&Record::Mmap {
                pid: 42,
                tid: 42,
                addr: 0,
                len: 0,
                pgoff: 0,
                path: path.into(),
                file: None,
                build_id: None,
                time: 3,
            });
        }
        // Gone from /proc before its first sample is read.
        std::fs::remove_dir_all(d.path().join("42")).unwrap();
        t.observe(&sample(42));
        t.observe(&sample(0));
        t.observe(&Record::Exit {
            pid: 42,
            ppid: 1,
            tid: 42,
            ptid: 1,
            time: 2,
        });
        let cut = t.cut();
        assert_eq!(cut.len(), 1);
        let l = &cut[&42];
        assert_eq!(l.exe.as_deref(), Some("/usr/bin/hot-after-exec"));
        assert_eq!(
            l.cgroup.as_ref().unwrap().systemd_unit.as_deref(),
            Some("hot.service")
        );
        assert!(t.is_empty());
        assert!(t.cut().is_empty());
    }
}
