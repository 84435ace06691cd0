//! The labels of the processes sampled: executable path and cgroup (with
//! what it reveals, [`crate::cgroup`]). A process is read from
//! `/proc/PID` when it is first seen (its fork, or its first sample: the
//! processes running when the agent starts), its cgroup again at its exec;
//! the executable of an exec is the first file the kernel reports mapped
//! after it (its MMAP record: no race with the process's end). A process
//! that lives 200 ms between two cuts is still named; its command comes
//! from the recording (the kernel's COMM records). The executable's build
//! id is the one its mapping's record carries, else read, at the
//! process's first sample in an interval, from the file it runs
//! (`/proc/PID/exe`: the inode it runs, not whatever its path names now;
//! headers and notes only; a process never sampled is never read): the
//! kernel leaves a mapping's build id out when the page holding it is not
//! in memory, so the recording's objects alone could leave a process
//! without one. What can no longer be read keeps its last known value.

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
    /// The executable's GNU build id, in lower-case hex.
    pub build_id: Option<String>,
}

/// `bytes` in lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The build id of the executable of process `pid`, read through
/// `proc/PID/exe` (a link followed on purpose: in /proc it is the inode
/// the process runs).
fn exe_build_id(proc: &std::path::Path, pid: u32) -> Option<String> {
    let exe = std::fs::File::open(proc.join(pid.to_string()).join("exe")).ok()?;
    profdev_symbolize::elf::build_id_of(exe).map(|b| hex(&b))
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
        // (The build id: at its first sample, [`Labels::observe`].)
        ProcessLabels {
            exe,
            cgroup,
            build_id: None,
        }
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
    /// Processes whose executable was read and has no build id (a Go
    /// binary without a GNU note, a script's interpreter's file that
    /// lacks one): not read again until they exec. Their file cannot
    /// change meanwhile (a running file is not written: ETXTBSY).
    no_build_id: HashSet<u32>,
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
            no_build_id: HashSet::new(),
        }
    }

    fn learn(&mut self, pid: u32) {
        let read = ProcessLabels::read(&self.proc, pid);
        let known = Arc::make_mut(self.by_pid.entry(pid).or_default());
        if read.exe.is_some() {
            // Read again at its first sample.
            known.build_id = None;
            self.no_build_id.remove(&pid);
        }
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
                self.no_build_id.remove(pid);
                self.exited.remove(pid);
            }
            Record::Mmap {
                pid,
                path,
                build_id,
                ..
            } if path.starts_with('/')
                && !path.starts_with("//")
                && self.exec_pending.remove(pid) =>
            {
                // Else read at its first sample.
                let build_id = build_id.as_ref().filter(|b| !b.is_empty()).map(|b| hex(b));
                let known = Arc::make_mut(self.by_pid.entry(*pid).or_default());
                known.exe = Some(path.clone());
                known.build_id = build_id;
            }
            Record::Exit { pid, tid, .. } if pid == tid => {
                self.exited.insert(*pid);
            }
            Record::Sample(s) if s.pid != 0 => {
                if !self.by_pid.contains_key(&s.pid) {
                    self.learn(s.pid);
                }
                if self.sampled.insert(s.pid) {
                    let proc = &self.proc;
                    if let Some(known) = self.by_pid.get_mut(&s.pid) {
                        if known.build_id.is_none()
                            && known.exe.is_some()
                            && !self.no_build_id.contains(&s.pid)
                        {
                            match exe_build_id(proc, s.pid) {
                                Some(b) => Arc::make_mut(known).build_id = Some(b),
                                None => {
                                    self.no_build_id.insert(s.pid);
                                }
                            }
                        }
                    }
                }
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
            self.no_build_id.remove(&pid);
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
                build_id: Some(vec![0xab, path.len() as u8]),
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
        // The build id its mapping's record carried.
        assert_eq!(l.build_id.as_deref(), Some("ab17"));
        assert_eq!(
            l.cgroup.as_ref().unwrap().systemd_unit.as_deref(),
            Some("hot.service")
        );
        assert!(t.is_empty());
        assert!(t.cut().is_empty());
    }

    /// A process first seen running is named with the build id of the
    /// file it runs (read through /proc/PID/exe), and so is an exec whose
    /// mapping's record carries none; a file that is not ELF gives none.
    #[test]
    fn the_build_id_is_read_from_the_running_file_when_no_record_has_it() {
        let d = fake_proc();
        let me = std::env::current_exe().unwrap();
        let want = profdev_symbolize::elf::ElfLayout::open(&me)
            .unwrap()
            .build_id()
            .map(hex)
            .expect("the test binary has a build id");
        assert_eq!(want.len(), 40);
        let exe = d.path().join("42/exe");
        std::fs::remove_file(&exe).unwrap();
        std::os::unix::fs::symlink(&me, &exe).unwrap();
        let mut t = Labels::new(d.path().to_path_buf());
        t.observe(&sample(42));
        assert_eq!(t.cut()[&42].build_id.as_deref(), Some(want.as_str()));
        // Its exec: the record has no build id, the file has.
        t.observe(&Record::Comm {
            pid: 42,
            tid: 42,
            comm: "again".into(),
            exec: true,
            time: 2,
        });
        let mmap = |build_id| Record::Mmap {
            pid: 42,
            tid: 42,
            addr: 0,
            len: 0,
            pgoff: 0,
            path: me.to_string_lossy().into_owned(),
            file: None,
            build_id,
            time: 3,
        };
        t.observe(&mmap(None));
        t.observe(&sample(42));
        assert_eq!(t.cut()[&42].build_id.as_deref(), Some(want.as_str()));
        // An exec of a file that is not ELF: no build id, not the old one.
        let text = d.path().join("script");
        std::fs::write(&text, "#!/bin/sh\n").unwrap();
        std::fs::remove_file(&exe).unwrap();
        std::os::unix::fs::symlink(&text, &exe).unwrap();
        t.observe(&Record::Comm {
            pid: 42,
            tid: 42,
            comm: "script".into(),
            exec: true,
            time: 4,
        });
        t.observe(&mmap(None));
        t.observe(&sample(42));
        assert_eq!(t.cut()[&42].build_id, None);
        // Read once: the next interval does not read it again (here the
        // link is changed to show it; a running file cannot change)...
        std::fs::remove_file(&exe).unwrap();
        std::os::unix::fs::symlink(&me, &exe).unwrap();
        t.observe(&sample(42));
        assert_eq!(t.cut()[&42].build_id, None, "read again");
        // ... until the process execs.
        t.observe(&Record::Comm {
            pid: 42,
            tid: 42,
            comm: "again".into(),
            exec: true,
            time: 5,
        });
        t.observe(&mmap(None));
        t.observe(&sample(42));
        assert_eq!(t.cut()[&42].build_id.as_deref(), Some(want.as_str()));
    }
}
