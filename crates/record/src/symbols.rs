//! The thread that names sampled addresses, off the ring reader's path:
//! each object opened once per job through the one
//! [`Symbolizer`](profdev_symbolize::Symbolizer) (through the descriptor
//! the objects table kept, else by path), verified against the build id
//! its layout had, and closed, so memory stays bounded in a long
//! recording. Its answers are the recording's symbol tables.

use profdev_formats::recording::{Function, Line};
use profdev_symbolize::symbolizer::ObjectFunction;
use profdev_symbolize::{ElfObject, Object, Symbolizer};
use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

/// Addresses of one object to name.
pub(crate) struct SymbolJob {
    /// The object's id in the recording.
    pub id: u32,
    pub path: String,
    pub object: Option<Arc<Object>>,
    /// The build id its layout had.
    pub want: Option<Vec<u8>>,
    /// Link-time addresses.
    pub offsets: Vec<u64>,
}

/// A symbol table of the recording: the object's id, its source files,
/// its functions.
pub(crate) type SymbolTable = (u32, Vec<String>, Vec<Function>);

/// The naming thread and its two queues. Every job sent is answered, in
/// the order sent (`None` when the object could not be named), so the
/// jobs still out are counted and each answer can be routed to the
/// recording whose job it was.
pub(crate) struct SymbolThread {
    jobs: Sender<SymbolJob>,
    done: Receiver<Option<SymbolTable>>,
    thread: std::thread::JoinHandle<()>,
    outstanding: usize,
}

impl SymbolThread {
    /// Start the thread, keeping the [`KEEP_OPEN`] objects named last
    /// open.
    pub(crate) fn start() -> SymbolThread {
        SymbolThread::keeping(KEEP_OPEN, true)
    }

    /// Start the thread, keeping the `keep_open` objects named last open
    /// (their DWARF parsed: fast for the next addresses, memory held);
    /// without `lines`, functions come from the symbol tables alone and
    /// no DWARF is read.
    pub(crate) fn keeping(keep_open: usize, lines: bool) -> SymbolThread {
        let (jobs, todo) = channel::<SymbolJob>();
        let (tx, done) = channel();
        let thread = std::thread::spawn(move || {
            let mut cache = Cache {
                keep_open,
                lines,
                ..Cache::default()
            };
            for job in todo {
                if tx.send(cache.answer(job)).is_err() {
                    return;
                }
            }
        });
        SymbolThread {
            jobs,
            done,
            thread,
            outstanding: 0,
        }
    }

    /// Queue a job.
    pub(crate) fn send(&mut self, job: SymbolJob) {
        if self.jobs.send(job).is_ok() {
            self.outstanding += 1;
        }
    }

    /// The answer to the oldest job not yet answered, if it is ready:
    /// its table, or `None` when the object could not be named.
    pub(crate) fn try_answer(&mut self) -> Option<Option<SymbolTable>> {
        let answer = self.done.try_recv().ok()?;
        self.outstanding -= 1;
        Some(answer)
    }

    /// The answer to the oldest job not yet answered, waited for; `None`
    /// when none is due.
    pub(crate) fn answer(&mut self) -> Option<Option<SymbolTable>> {
        if self.outstanding == 0 {
            return None;
        }
        let answer = self.done.recv().ok()?;
        self.outstanding -= 1;
        Some(answer)
    }

    /// Jobs sent and not yet answered.
    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Every table still to come, once the thread has done all it was
    /// given; then the thread is gone.
    pub(crate) fn finish(self) -> Vec<SymbolTable> {
        let SymbolThread {
            jobs, done, thread, ..
        } = self;
        drop(jobs);
        let tables = done.iter().flatten().collect();
        let _ = thread.join();
        tables
    }
}

/// What one address of an object was named: its function's start, length
/// and name, and its source file and line.
#[derive(Clone)]
struct Named {
    start: u64,
    len: u64,
    name: String,
    line: Option<(String, u32)>,
}

/// The most addresses the cache keeps (then it starts again empty).
const MAX_CACHED: usize = 200_000;

/// The names already made, by object (path and build id) and address: a
/// recorder cut into intervals (`crate::intervals`) asks for the same hot
/// addresses at every cut, and a large object's DWARF is slow to open.
#[derive(Default)]
struct Cache {
    by_object: HashMap<ObjectKey, HashMap<u64, Option<Named>>>,
    entries: usize,
    /// The objects named most recently, kept open (their DWARF parsed
    /// once, not at each new address), least recently used first.
    open: Vec<(ObjectKey, ElfObject)>,
    /// How many of them are kept.
    keep_open: usize,
    /// Whether lines are named (from DWARF).
    lines: bool,
}

/// An object of the cache: path, build id (empty if none), and the
/// objects table's id of the open file (0 if none).
type ObjectKey = (String, Vec<u8>, u64);

/// How many objects the cache keeps open.
const KEEP_OPEN: usize = 4;

/// The functions (and with `lines`, lines) of `addrs` in `elf`.
fn name(
    lines: bool,
    elf: &ElfObject,
    addrs: &[u64],
) -> profdev_symbolize::symbolizer::ObjectFunctions {
    if lines {
        Symbolizer::name_in(elf, addrs)
    } else {
        Symbolizer::name_only_in(elf, addrs)
    }
}

impl Cache {
    /// The job's symbol table, from the cache where it can.
    fn answer(&mut self, job: SymbolJob) -> Option<SymbolTable> {
        // An object is its build id, else the file the objects table
        // holds open (its id); with neither it could be another file by
        // the next job, and is not cached.
        let object_id = job.object.as_ref().map_or(0, |o| o.id());
        if job.want.is_none() && object_id == 0 {
            return symbolize(job);
        }
        let key: ObjectKey = (
            job.path.clone(),
            job.want.clone().unwrap_or_default(),
            object_id,
        );
        if self.entries > MAX_CACHED {
            *self = Cache {
                keep_open: self.keep_open,
                lines: self.lines,
                ..Cache::default()
            };
        }
        let known = self.by_object.entry(key.clone()).or_default();
        let missing: Vec<u64> = job
            .offsets
            .iter()
            .copied()
            .filter(|o| !known.contains_key(o))
            .collect();
        let (id, offsets) = (job.id, job.offsets.clone());
        if !missing.is_empty() {
            self.entries += missing.len();
            let named = match self.open.iter().position(|(k, _)| *k == key) {
                Some(i) => {
                    // Most recently used last.
                    let e = self.open.remove(i);
                    self.open.push(e);
                    Some(name(
                        self.lines,
                        &self.open[self.open.len() - 1].1,
                        &missing,
                    ))
                }
                None => {
                    let elf = Symbolizer::open_object(
                        job.object.as_deref(),
                        &job.path,
                        job.want.as_deref(),
                    );
                    elf.map(|elf| {
                        let named = name(self.lines, &elf, &missing);
                        if self.keep_open > 0 {
                            if self.open.len() >= self.keep_open {
                                self.open.remove(0);
                            }
                            self.open.push((key, elf));
                        }
                        named
                    })
                }
            };
            let Some(named) = named else {
                // Not the file sampled, or not readable: ask again next
                // time rather than remember a miss.
                return None;
            };
            // One entry per address a symbol holds: each address's own is
            // the one holding it with its line, else any holding it.
            for &o in &missing {
                let f = named
                    .funcs
                    .iter()
                    .filter(|f| f.start <= o && o < f.start.saturating_add(f.len.max(1)))
                    .max_by_key(|f| (f.line.is_some_and(|l| l.0 == o), f.start));
                let n = f.map(|f| Named {
                    start: f.start,
                    len: f.len,
                    name: f.name.clone(),
                    line: f.line.filter(|l| l.0 == o).map(|(_, file, line)| {
                        let file = named.files.get(file as usize).cloned().unwrap_or_default();
                        (file, line)
                    }),
                });
                known.insert(o, n);
            }
        }
        let mut files: Vec<String> = Vec::new();
        let mut funcs = Vec::new();
        for o in offsets {
            let Some(Some(n)) = known.get(&o) else {
                continue;
            };
            let lines = n.line.iter().map(|(file, line)| {
                let i = files.iter().position(|f| f == file).unwrap_or_else(|| {
                    files.push(file.clone());
                    files.len() - 1
                });
                Line {
                    addr: o,
                    file: i as u32,
                    line: *line,
                }
            });
            funcs.push(Function {
                start: n.start,
                len: n.len,
                name: n.name.clone(),
                lines: lines.collect(),
            });
        }
        Some((id, files, funcs))
    }
}

/// One job's symbol table; `None` when the object cannot be opened or is
/// no longer the file sampled.
pub(crate) fn symbolize(job: SymbolJob) -> Option<SymbolTable> {
    let named = Symbolizer::object_functions(
        job.object.as_deref(),
        &job.path,
        job.want.as_deref(),
        &job.offsets,
    )?;
    Some((job.id, named.files, functions(named.funcs)))
}

/// The symbolizer's answer as the recording's functions.
fn functions(funcs: Vec<ObjectFunction>) -> Vec<Function> {
    funcs
        .into_iter()
        .map(|f| Function {
            start: f.start,
            len: f.len,
            name: f.name,
            lines: f
                .line
                .map(|(addr, file, line)| Line { addr, file, line })
                .into_iter()
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread names this test binary's own function and hands the
    /// table back at `finish`; an object that cannot be opened gives none.
    #[test]
    fn the_thread_names_what_it_is_given() {
        let exe = std::env::current_exe().unwrap();
        let elf = profdev_symbolize::ElfObject::open(&exe).unwrap();
        let sym = elf
            .symbols()
            .iter()
            .find(|s| s.name().contains("the_thread_names_what_it_is_given"))
            .expect("the test's own symbol")
            .clone();
        let mut t = SymbolThread::start();
        t.send(SymbolJob {
            id: 9,
            path: "/nonexistent/profdev-record-test".into(),
            object: None,
            want: None,
            offsets: vec![1],
        });
        t.send(SymbolJob {
            id: 3,
            path: exe.to_str().unwrap().into(),
            object: None,
            want: elf.build_id().map(<[u8]>::to_vec),
            offsets: vec![sym.addr],
        });
        let tables = t.finish();
        assert_eq!(tables.len(), 1);
        let (id, files, funcs) = &tables[0];
        assert_eq!(*id, 3);
        assert_eq!(funcs.len(), 1);
        assert_eq!(
            (funcs[0].start, funcs[0].name.as_str()),
            (sym.addr, &*sym.name())
        );
        for l in &funcs[0].lines {
            assert_eq!(l.addr, sym.addr);
            assert!(files[l.file as usize].ends_with("symbols.rs"), "{files:?}");
        }
    }

    /// Asked twice for the same addresses, the thread answers the same
    /// table (the second time from its cache).
    #[test]
    fn the_cache_answers_as_the_object_did() {
        let exe = std::env::current_exe().unwrap();
        let elf = profdev_symbolize::ElfObject::open(&exe).unwrap();
        let sym = elf
            .symbols()
            .iter()
            .find(|s| s.name().contains("the_cache_answers_as_the_object_did"))
            .expect("the test's own symbol")
            .clone();
        let job = || SymbolJob {
            id: 3,
            path: exe.to_str().unwrap().into(),
            object: None,
            want: elf.build_id().map(<[u8]>::to_vec),
            offsets: vec![sym.addr, sym.addr + 1],
        };
        let mut t = SymbolThread::start();
        t.send(job());
        let first = t.answer().unwrap().unwrap();
        t.send(job());
        let second = t.answer().unwrap().unwrap();
        assert_eq!(first, second);
        assert_eq!(first.2.len(), 2);
        assert!(first.2.iter().all(|f| f.start == sym.addr));
        assert_eq!(t.finish().len(), 0);
    }
}
