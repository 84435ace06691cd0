//! Tasks and their mappings, rebuilt from a record stream.
//!
//! Feed every record, in timestamp order, to [`Tasks::observe`]; ask
//! [`Tasks::lookup`] for a sample's mapping at the time of the sample. A
//! process that exited keeps its last address space, so its samples still
//! symbolize at the end of a session.

use profdev_core::{FileId, ProcessVa, Record};
use std::collections::HashMap;

/// One executable mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// File path as the kernel reported it.
    pub path: String,
    /// Device and inode.
    pub file: Option<FileId>,
    /// Build id.
    pub build_id: Option<Vec<u8>>,
}

impl Mapping {
    /// The file offset that `va` maps.
    pub fn file_offset(&self, va: ProcessVa) -> u64 {
        self.pgoff + (va.0 - self.start)
    }

    /// True for file-backed mappings (not `[vdso]`, `//anon`, `[heap]`…).
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/')
    }

    /// The last path component.
    pub fn basename(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

#[derive(Clone, Debug, Default)]
struct Process {
    comm: String,
    maps: Vec<Mapping>,
    exited: bool,
}

/// Every process seen in a stream.
#[derive(Clone, Debug, Default)]
pub struct Tasks {
    procs: HashMap<u32, Process>,
    /// tid -> (pid, name).
    thread_names: HashMap<u32, (u32, String)>,
}

impl Tasks {
    /// An empty table.
    pub fn new() -> Self {
        Tasks::default()
    }

    /// Update the table with one record.
    pub fn observe(&mut self, record: &Record) {
        match record {
            Record::Comm {
                pid,
                tid,
                comm,
                exec,
                ..
            } => {
                let p = self.procs.entry(*pid).or_default();
                if *exec {
                    p.maps.clear();
                    p.exited = false;
                }
                if pid == tid {
                    p.comm = comm.clone();
                }
                self.thread_names.insert(*tid, (*pid, comm.clone()));
            }
            Record::Mmap {
                pid,
                addr,
                len,
                pgoff,
                path,
                file,
                build_id,
                ..
            } => {
                let m = Mapping {
                    start: *addr,
                    end: addr.saturating_add(*len),
                    pgoff: *pgoff,
                    path: path.clone(),
                    file: *file,
                    build_id: build_id.clone(),
                };
                let p = self.procs.entry(*pid).or_default();
                p.maps.retain(|o| o.end <= m.start || o.start >= m.end);
                let at = p.maps.partition_point(|o| o.start < m.start);
                p.maps.insert(at, m);
            }
            Record::Fork { pid, ppid, tid, .. } if pid != ppid && pid == tid => {
                let parent = self.procs.get(ppid).cloned().unwrap_or_default();
                self.procs.insert(
                    *pid,
                    Process {
                        exited: false,
                        ..parent
                    },
                );
            }
            Record::Exit { pid, tid, .. } if pid == tid => {
                if let Some(p) = self.procs.get_mut(pid) {
                    p.exited = true;
                }
            }
            // A thread that ends before its process: its name goes, or a
            // long-lived process that keeps starting threads would fill
            // the table.
            Record::Exit { pid, tid, .. }
                if self.thread_names.get(tid).is_some_and(|(p, _)| p == pid) =>
            {
                self.thread_names.remove(tid);
            }
            _ => {}
        }
    }

    /// The mapping holding `va` in process `pid`.
    pub fn lookup(&self, pid: u32, va: ProcessVa) -> Option<&Mapping> {
        let maps = &self.procs.get(&pid)?.maps;
        let i = maps.partition_point(|m| m.start <= va.0);
        maps[..i].last().filter(|m| va.0 < m.end)
    }

    /// The process's name (its main thread's comm), if seen.
    pub fn comm(&self, pid: u32) -> Option<&str> {
        self.procs
            .get(&pid)
            .map(|p| p.comm.as_str())
            .filter(|c| !c.is_empty())
    }

    /// A thread's name, if seen.
    pub fn thread_comm(&self, tid: u32) -> Option<&str> {
        self.thread_names.get(&tid).map(|(_, name)| name.as_str())
    }

    /// Forget process `pid` and its threads' names (after its exit, once
    /// no sample of it can still arrive), so that a long session does not
    /// keep every address space and name it ever saw.
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
        // Its other threads' names went at their own exits.
        if self.thread_names.get(&pid).is_some_and(|(p, _)| *p == pid) {
            self.thread_names.remove(&pid);
        }
    }

    /// Processes and thread names held: what [`Tasks::forget`] bounds.
    pub fn held(&self) -> (usize, usize) {
        (self.procs.len(), self.thread_names.len())
    }

    /// True once the process has exited.
    pub fn has_exited(&self, pid: u32) -> bool {
        self.procs.get(&pid).is_some_and(|p| p.exited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mmap(pid: u32, addr: u64, len: u64, path: &str) -> Record {
        Record::Mmap {
            pid,
            tid: pid,
            addr,
            len,
            pgoff: 0x1000,
            path: path.into(),
            file: None,
            build_id: None,
            time: 0,
        }
    }

    #[test]
    fn exec_fork_exit() {
        let mut t = Tasks::new();
        t.observe(&mmap(10, 0x1000, 0x1000, "/bin/sh"));
        t.observe(&Record::Fork {
            pid: 11,
            ppid: 10,
            tid: 11,
            ptid: 10,
            time: 1,
        });
        assert_eq!(t.lookup(11, ProcessVa(0x1800)).unwrap().path, "/bin/sh");
        t.observe(&Record::Comm {
            pid: 11,
            tid: 11,
            comm: "dd".into(),
            exec: true,
            time: 2,
        });
        assert!(t.lookup(11, ProcessVa(0x1800)).is_none());
        t.observe(&mmap(11, 0x5000, 0x2000, "/usr/bin/dd"));
        t.observe(&Record::Exit {
            pid: 11,
            ppid: 10,
            tid: 11,
            ptid: 11,
            time: 3,
        });
        let m = t.lookup(11, ProcessVa(0x6000)).unwrap();
        assert_eq!(
            (m.basename(), m.file_offset(ProcessVa(0x6000))),
            ("dd", 0x2000)
        );
        assert_eq!(t.comm(11), Some("dd"));
        assert!(t.has_exited(11));
        assert!(t.lookup(11, ProcessVa(0x7000)).is_none());
    }

    #[test]
    fn overlapping_mmap_replaces() {
        let mut t = Tasks::new();
        t.observe(&mmap(1, 0x1000, 0x3000, "/a"));
        t.observe(&mmap(1, 0x2000, 0x1000, "/b"));
        assert!(t.lookup(1, ProcessVa(0x1000)).is_none());
        assert_eq!(t.lookup(1, ProcessVa(0x2000)).unwrap().path, "/b");
    }

    #[test]
    fn exited_threads_and_forgotten_processes_leave_nothing() {
        let mut t = Tasks::new();
        let comm = |pid, tid| Record::Comm {
            pid,
            tid,
            comm: format!("t{tid}"),
            exec: false,
            time: 0,
        };
        let exit = |pid, tid| Record::Exit {
            pid,
            ppid: 1,
            tid,
            ptid: 1,
            time: 0,
        };
        // A long-lived process starting and ending threads.
        t.observe(&comm(10, 10));
        for tid in 11..1000 {
            t.observe(&comm(10, tid));
            assert_eq!(t.thread_comm(tid), Some(format!("t{tid}").as_str()));
            t.observe(&exit(10, tid));
        }
        assert_eq!(t.held(), (1, 1));
        // Short-lived processes, forgotten after their exit.
        for pid in 2000..3000 {
            t.observe(&mmap(pid, 0x1000, 0x1000, "/bin/true"));
            t.observe(&comm(pid, pid));
            t.observe(&exit(pid, pid));
            assert!(t.has_exited(pid));
            t.forget(pid);
        }
        assert_eq!(t.held(), (1, 1));
        assert_eq!(t.thread_comm(10), Some("t10"));
        // A tid reused by another process keeps the new owner's name.
        t.observe(&comm(20, 21));
        t.observe(&exit(10, 21));
        assert_eq!(t.thread_comm(21), Some("t21"));
    }
}
