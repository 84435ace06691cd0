//! A recording cut into intervals, for a sampler that runs for days and
//! hands on one profile per interval (`profdev agent`): the same recorder
//! as `profdev record`'s (task and mapping model, unwinder, objects, the
//! symbol thread), whose recording is ended and begun again at each cut.
//! The cut does not wait for the symbol thread: a recording cut waits
//! for the answers to its own jobs (answered in order, so each is routed
//! to the recording that asked) and comes out of `ready` when it has them.
//! Each piece is a whole recording (`profdev_formats::recording::read`
//! reads it) with its own task, object and symbol entries; the model,
//! the unwinder and the objects table go on across cuts, so a process
//! seen in one interval is known in the next.

use crate::recorder::{Recorder, Setup};
use crate::symbols::SymbolThread;
use crate::Error;
use profdev_core::Record;
use profdev_formats::recording::{Encoder, Header, FLAG_STACKS};
use profdev_symbolize::Objects;

/// What each interval records.
#[derive(Clone, Debug)]
pub struct IntervalOptions {
    /// Stacks: the kernel's callchain, the user stack unwound.
    pub stacks: bool,
    /// With stacks, the bytes of user stack each sample copies.
    pub stack_bytes: u32,
    /// Samples per second per CPU (the recordings' period).
    pub frequency: u32,
    /// Name the functions and lines sampled.
    pub symbols: bool,
    /// Objects whose DWARF the naming thread keeps parsed between
    /// addresses (each can be a hundred MB for a large binary with debug
    /// information; 0: each is parsed for its new addresses and freed).
    pub keep_open: usize,
    /// Name source lines too (the objects' DWARF read); else functions
    /// from the symbol tables alone.
    pub lines: bool,
}

/// What an [`Intervals`] holds from one cut to the next, that pid churn
/// must not grow (the tables of a cut's recording start empty at each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// Processes of the task model (exited ones are kept a second).
    pub processes: usize,
    /// Thread names of the task model.
    pub thread_names: usize,
    /// Processes whose unwind modules the unwinder keeps.
    pub unwinder_processes: usize,
    /// Objects the unwinder remembers as having no unwind information.
    pub unwinder_missing: usize,
}

/// The recorder whose recording is cut at each interval (see the module
/// doc).
pub struct Intervals {
    rec: Recorder,
    header: Header,
}

impl Intervals {
    /// A recorder of `opts`, its tasks' files kept in `objects` (the table
    /// the live source reports mappings to); the first interval begins at
    /// `start_ns` (Unix nanoseconds).
    pub fn new(opts: &IntervalOptions, objects: Objects, start_ns: u64) -> Intervals {
        let header = Header {
            flags: if opts.stacks { FLAG_STACKS } else { 0 },
            start_ns,
            period_ns: 1_000_000_000 / u64::from(opts.frequency.max(1)),
        };
        let setup = Setup {
            stacks: opts.stacks,
            stack_bytes: opts.stack_bytes,
            symbols: opts.symbols,
            only_tid: None,
        };
        let thread = opts
            .symbols
            .then(|| SymbolThread::keeping(opts.keep_open, opts.lines));
        Intervals {
            rec: Recorder::new(Encoder::new(&header), &setup, objects, thread),
            header,
        }
    }

    /// Take in one record.
    pub fn record(&mut self, r: &Record) -> Result<(), Error> {
        self.rec.record(r)
    }

    /// Hand the addresses first sampled since the last tick to the symbol
    /// thread and write the tables it has finished (call it about once a
    /// second, so that the cut has little left to wait for).
    pub fn tick(&mut self) {
        self.rec.flush_symbols();
        self.rec.drain_symbols();
    }

    /// Samples in the interval so far.
    pub fn samples(&self) -> u64 {
        self.rec.enc.samples()
    }

    /// End the interval now; the next begins at `next_start_ns` (Unix
    /// nanoseconds). Its recording comes out of [`Intervals::ready`] once
    /// the symbol thread has named what it sampled: the caller goes on
    /// reading meanwhile.
    pub fn cut(&mut self, next_start_ns: u64) {
        self.header.start_ns = next_start_ns;
        self.rec.cut(Encoder::new(&self.header));
    }

    /// The recordings of the intervals cut whose symbols are done, oldest
    /// first.
    pub fn ready(&mut self) -> Vec<Vec<u8>> {
        self.rec.ready()
    }

    /// The recordings of every interval cut, their symbols waited for (at
    /// the end).
    pub fn finish(&mut self) -> Vec<Vec<u8>> {
        self.rec.wait_cuts()
    }

    /// What is held across cuts (see [`Held`]).
    pub fn held(&self) -> Held {
        self.rec.held()
    }

    /// With stacks, the unwinder's counts as a sentence.
    pub fn unwind_stats(&self) -> Option<String> {
        self.rec.unwind_stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_core::{CpuMode, Sample};
    use profdev_formats::recording::read;

    fn sample(pid: u32, time: u64) -> Record {
        Record::Sample(Sample {
            ip: 0xffff_ffff_8100_0010,
            pid,
            tid: pid,
            time,
            period: 1_000_000,
            mode: CpuMode::Kernel,
            kernel_chain: vec![0xffff_ffff_8100_0010],
            ..Sample::default()
        })
    }

    /// Each cut is a whole recording with its own task and kernel object
    /// entries and the start it was given; a thread named before the cut
    /// is named again after it.
    #[test]
    fn each_cut_is_a_whole_recording() {
        let opts = IntervalOptions {
            stacks: true,
            stack_bytes: 8192,
            frequency: 19,
            symbols: false,
            keep_open: 0,
            lines: false,
        };
        let mut iv = Intervals::new(&opts, Objects::new(), 1_000);
        iv.record(&Record::Comm {
            pid: 7,
            tid: 7,
            comm: "hot".into(),
            exec: true,
            time: 1,
        })
        .unwrap();
        iv.record(&sample(7, 2)).unwrap();
        iv.record(&sample(7, 3)).unwrap();
        assert_eq!(iv.samples(), 2);
        iv.cut(2_000);
        iv.record(&sample(7, 4)).unwrap();
        assert_eq!(iv.samples(), 1);
        iv.cut(3_000);
        let cuts = iv.finish();
        assert_eq!(cuts.len(), 2);
        let first = read(&cuts[0]).unwrap();
        let second = read(&cuts[1]).unwrap();
        assert_eq!((first.samples.len(), second.samples.len()), (2, 1));
        assert_eq!(
            (first.header.start_ns, second.header.start_ns),
            (1_000, 2_000)
        );
        assert_eq!(first.header.period_ns, 1_000_000_000 / 19);
        for rec in [&first, &second] {
            assert_eq!(rec.tasks.len(), 1);
            assert_eq!(rec.tasks[0].comm, "hot");
            assert_eq!(rec.objects.len(), 1);
            assert_eq!(rec.objects[0].info.path, "[kernel.kallsyms]");
        }
    }
}
