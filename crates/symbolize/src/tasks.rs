//! The tasks table: every process of a stream, its name, its exec
//! generation and its mappings over time, each mapping holding its
//! [`Object`] from the shared [`Objects`] table.
//!
//! Feed every record, in timestamp order, to [`Tasks::observe`] (a
//! sample source merges its per-CPU streams by time, so an EXIT comes
//! after every earlier sample from any CPU); ask [`Tasks::lookup`] for a
//! sample's mapping at the time of the sample. A process that exited keeps
//! its last address space for [`EXIT_GRACE_NS`] of stream time after its
//! exit — samples taken while it was leaving the kernel still arrive after
//! its EXIT — and is then forgotten, so a long session holds only live
//! processes. [`Tasks::with_objects`] opens each mapped file when its MMAP
//! record arrives (see [`crate::objects`]): the processes of a shell loop
//! that live a millisecond each still symbolize and unwind.

use crate::objects::{Object, Objects};
use profdev_core::{FileId, ProcessVa, Record};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// How long (perf clock ns) an exited process is kept after its EXIT.
pub const EXIT_GRACE_NS: u64 = 1_000_000_000;

/// One executable mapping.
#[derive(Clone, Debug)]
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
    /// The object mapped, when the table has an objects table and the
    /// file could be opened (see [`Tasks::object_error`] otherwise).
    pub object: Option<Arc<Object>>,
}

impl PartialEq for Mapping {
    fn eq(&self, o: &Self) -> bool {
        (
            self.start,
            self.end,
            self.pgoff,
            &self.path,
            self.file,
            &self.build_id,
        ) == (o.start, o.end, o.pgoff, &o.path, o.file, &o.build_id)
            && self.object.as_ref().map(|x| x.id()) == o.object.as_ref().map(|x| x.id())
    }
}

impl Eq for Mapping {}

impl Mapping {
    /// The file offset that `va` maps.
    pub fn file_offset(&self, va: ProcessVa) -> u64 {
        self.pgoff + (va.0 - self.start)
    }

    /// True for file-backed mappings (not `[vdso]`, `//anon`, `[heap]`…).
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/') && !self.path.starts_with("//")
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
    /// Stream time of its exit, once it exited.
    exited: Option<u64>,
    /// Execs seen.
    exec_generation: u32,
    /// Changes to `maps`, so that a consumer caching something per
    /// address space (the unwinder) knows when to rebuild it.
    maps_generation: u64,
}

/// Every process seen in a stream.
#[derive(Clone, Debug, Default)]
pub struct Tasks {
    procs: HashMap<u32, Process>,
    /// tid -> (pid, name).
    thread_names: HashMap<u32, (u32, String)>,
    /// (exit time, pid) of exited processes, oldest first.
    exits: VecDeque<(u64, u32)>,
    objects: Option<Objects>,
    /// The latest time seen.
    now: u64,
    /// Bumped at every change of any address space.
    generation: u64,
    object_errors: u64,
}

impl Tasks {
    /// An empty table that opens no files (mappings carry no object).
    pub fn new() -> Self {
        Tasks::default()
    }

    /// An empty table that opens every mapped file into `objects` when its
    /// MMAP record arrives.
    pub fn with_objects(objects: Objects) -> Self {
        Tasks {
            objects: Some(objects),
            ..Tasks::default()
        }
    }

    /// The objects table, if this table opens files.
    pub fn objects(&self) -> Option<&Objects> {
        self.objects.as_ref()
    }

    /// Mappings whose object could not be opened.
    pub fn object_errors(&self) -> u64 {
        self.object_errors
    }

    /// Update the table with one record.
    pub fn observe(&mut self, record: &Record) {
        let time = record.time();
        if time > self.now {
            self.now = time;
            self.retire();
        }
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
                    p.exited = None;
                    p.exec_generation += 1;
                    self.generation += 1;
                    p.maps_generation = self.generation;
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
                let end = addr.saturating_add(*len);
                let object = self.objects.as_ref().and_then(|objects| {
                    let got =
                        objects.for_mapping(*pid, *addr..end, path, *file, build_id.as_deref());
                    if got.is_err() && path.starts_with('/') {
                        self.object_errors += 1;
                    }
                    got.ok()
                });
                let m = Mapping {
                    start: *addr,
                    end,
                    pgoff: *pgoff,
                    path: path.clone(),
                    file: *file,
                    build_id: build_id.clone(),
                    object,
                };
                self.generation += 1;
                let p = self.procs.entry(*pid).or_default();
                p.maps.retain(|o| o.end <= m.start || o.start >= m.end);
                let at = p.maps.partition_point(|o| o.start < m.start);
                p.maps.insert(at, m);
                p.maps_generation = self.generation;
            }
            Record::Fork { pid, ppid, tid, .. } if pid != ppid && pid == tid => {
                let parent = self.procs.get(ppid).cloned().unwrap_or_default();
                self.generation += 1;
                self.procs.insert(
                    *pid,
                    Process {
                        exited: None,
                        maps_generation: self.generation,
                        ..parent
                    },
                );
            }
            Record::Exit { pid, tid, .. } if pid == tid => {
                if let Some(p) = self.procs.get_mut(pid) {
                    p.exited = Some(time);
                    self.exits.push_back((time, *pid));
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

    /// Forget the processes that exited more than [`EXIT_GRACE_NS`] ago.
    fn retire(&mut self) {
        while let Some(&(at, pid)) = self.exits.front() {
            if self.now.saturating_sub(at) <= EXIT_GRACE_NS {
                break;
            }
            self.exits.pop_front();
            // Unless the pid was reused since (a later fork or exec).
            if self.procs.get(&pid).is_some_and(|p| p.exited == Some(at)) {
                self.forget(pid);
            }
        }
    }

    /// The mapping holding `va` in process `pid`.
    pub fn lookup(&self, pid: u32, va: ProcessVa) -> Option<&Mapping> {
        let maps = &self.procs.get(&pid)?.maps;
        let i = maps.partition_point(|m| m.start <= va.0);
        maps[..i].last().filter(|m| va.0 < m.end)
    }

    /// Every mapping of process `pid`, by address.
    pub fn mappings(&self, pid: u32) -> &[Mapping] {
        self.procs.get(&pid).map_or(&[], |p| &p.maps)
    }

    /// A number that changes whenever process `pid`'s mappings change (0
    /// for an unknown process).
    pub fn maps_generation(&self, pid: u32) -> u64 {
        self.procs.get(&pid).map_or(0, |p| p.maps_generation)
    }

    /// How many times process `pid` has exec'd in this stream.
    pub fn exec_generation(&self, pid: u32) -> u32 {
        self.procs.get(&pid).map_or(0, |p| p.exec_generation)
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

    /// Forget process `pid` and its threads' names now (the table also
    /// does this by itself [`EXIT_GRACE_NS`] after an exit).
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
        // Its other threads' names went at their own exits.
        if self.thread_names.get(&pid).is_some_and(|(p, _)| *p == pid) {
            self.thread_names.remove(&pid);
        }
    }

    /// Processes and thread names held: what forgetting bounds.
    pub fn held(&self) -> (usize, usize) {
        (self.procs.len(), self.thread_names.len())
    }

    /// True once the process has exited.
    pub fn has_exited(&self, pid: u32) -> bool {
        self.procs.get(&pid).is_some_and(|p| p.exited.is_some())
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
        // Or after the grace period, by themselves.
        for pid in 3000..3100u32 {
            let at = u64::from(pid) * 2 * EXIT_GRACE_NS;
            t.observe(&Record::Comm {
                pid,
                tid: pid,
                comm: "x".into(),
                exec: true,
                time: at,
            });
            t.observe(&Record::Exit {
                pid,
                ppid: 1,
                tid: pid,
                ptid: 1,
                time: at + 1,
            });
            assert!(t.has_exited(pid));
            assert_eq!(t.comm(pid), Some("x"), "kept through its grace");
        }
        assert_eq!(t.held(), (2, 2), "all but the last forgotten");
        assert_eq!(t.thread_comm(10), Some("t10"));
        // A tid reused by another process keeps the new owner's name.
        t.observe(&comm(20, 21));
        t.observe(&exit(10, 21));
        assert_eq!(t.thread_comm(21), Some("t21"));
    }
}
