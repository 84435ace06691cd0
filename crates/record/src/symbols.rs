//! The thread that names sampled addresses, off the ring reader's path:
//! each object opened once per job through the one
//! [`Symbolizer`](profdev_symbolize::Symbolizer) (through the descriptor
//! the objects table kept, else by path), verified against the build id
//! its layout had, and closed, so memory stays bounded in a long
//! recording. Its answers are the recording's symbol tables.

use profdev_formats::recording::{Function, Line};
use profdev_symbolize::symbolizer::ObjectFunction;
use profdev_symbolize::{Object, Symbolizer};
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
    /// Start the thread.
    pub(crate) fn start() -> SymbolThread {
        let (jobs, todo) = channel::<SymbolJob>();
        let (tx, done) = channel();
        let thread = std::thread::spawn(move || {
            for job in todo {
                if tx.send(symbolize(job)).is_err() {
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
}
