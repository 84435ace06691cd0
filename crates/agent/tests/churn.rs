//! Pid churn keeps the agent's memory flat: a fork-heavy machine (here
//! 100,000 short processes, then 3,000 that each outlive their interval
//! alone) fed as records through the pieces `profdev_agent::run_with`
//! drives, in its order (the label table, then the interval recorder;
//! a cut every interval, the cut recordings taken as they are ready).
//! After each cut, what is held from one interval to the next, the label
//! table, the task model, the unwinder's processes and objects, the
//! objects table, stays at most a small constant, not a count of the
//! processes ever seen. Deterministic: synthetic records, stream time
//! only, no sampling and no sleep.

use profdev_agent::labels::Labels;
use profdev_core::{CpuMode, FileId, Record, Sample, UserRegs};
use profdev_record::intervals::{Held, IntervalOptions, Intervals};
use profdev_symbolize::Objects;

const EXE: &str = "/usr/bin/churn";
const BASE: u64 = 0x5555_0000_0000;

/// The records of process `pid`'s life from `t` (ns): fork, exec, the
/// executable's mapping, two samples in it, exit.
fn life(pid: u32, t: u64, out: &mut Vec<Record>) {
    let sample = |time| {
        Record::Sample(Sample {
            ip: BASE + 0x1234,
            pid,
            tid: pid,
            cpu: pid % 2,
            time,
            period: 1_000_000,
            mode: CpuMode::User,
            user_regs: Some(UserRegs {
                ip: BASE + 0x1234,
                sp: 0x7ffc_0000_0000,
                bp: 0,
            }),
            user_stack: vec![0; 64],
            ..Sample::default()
        })
    };
    out.push(Record::Fork {
        pid,
        ppid: 1,
        tid: pid,
        ptid: 1,
        time: t,
    });
    out.push(Record::Comm {
        pid,
        tid: pid,
        comm: format!("churn{}", pid % 7),
        exec: true,
        time: t + 1_000,
    });
    out.push(Record::Mmap {
        pid,
        tid: pid,
        addr: BASE,
        len: 0x10_000,
        pgoff: 0,
        path: EXE.into(),
        file: Some(FileId {
            major: 8,
            minor: 1,
            ino: 4242,
            ino_generation: 0,
        }),
        build_id: None,
        time: t + 2_000,
    });
    out.push(sample(t + 3_000));
    out.push(sample(t + 4_000));
    out.push(Record::Exit {
        pid,
        ppid: 1,
        tid: pid,
        ptid: 1,
        time: t + 5_000,
    });
}

/// The agent's pieces, fed as `run_with` feeds them.
struct Agent {
    labels: Labels,
    iv: Intervals,
    objects: Objects,
    cuts: usize,
    ready: usize,
    /// The most held after any cut.
    most: (usize, Held, usize),
}

impl Agent {
    fn new(proc: &std::path::Path) -> Agent {
        // The executable cannot be read (no unwind information, no
        // symbols): the unwinder remembers it as missing.
        let objects = Objects::with_loader(|_| None);
        let opts = IntervalOptions {
            stacks: true,
            stack_bytes: 16384,
            frequency: 19,
            symbols: true,
            keep_open: 1,
            lines: false,
        };
        Agent {
            labels: Labels::new(proc.to_path_buf()),
            iv: Intervals::new(&opts, objects.clone(), 0),
            objects,
            cuts: 0,
            ready: 0,
            most: (0, Held::default(), 0),
        }
    }

    fn feed(&mut self, records: &[Record]) {
        for r in records {
            self.labels.observe(r);
            self.iv.record(r).unwrap();
        }
    }

    fn cut(&mut self, at: u64) {
        self.iv.tick();
        self.iv.cut(at);
        let processes = self.labels.cut();
        assert!(processes.len() <= 1_000, "{}", processes.len());
        self.cuts += 1;
        self.ready += self.iv.ready().len();
        let held = self.iv.held();
        let m = &mut self.most;
        m.0 = m.0.max(self.labels.len());
        m.1.processes = m.1.processes.max(held.processes);
        m.1.thread_names = m.1.thread_names.max(held.thread_names);
        m.1.unwinder_processes = m.1.unwinder_processes.max(held.unwinder_processes);
        m.1.unwinder_missing = m.1.unwinder_missing.max(held.unwinder_missing);
        m.2 = m.2.max(self.objects.stats().live);
    }
}

#[test]
fn pid_churn_keeps_every_table_bounded() {
    let proc = tempfile::tempdir().unwrap();
    let mut a = Agent::new(proc.path());
    let mut batch = Vec::new();
    // Fast churn: 100,000 processes of 1 ms each, a cut every second of
    // stream time (1,000 processes an interval).
    let ms = 1_000_000u64;
    for i in 0..100_000u32 {
        let t = 1_000 * ms + u64::from(i) * ms;
        batch.clear();
        life(10_000 + i, t, &mut batch);
        a.feed(&batch);
        if (i + 1) % 1_000 == 0 {
            a.cut(t + ms);
        }
    }
    // Slow churn: 3,000 processes 2 s apart, a cut after each, so that
    // every interval's process is long gone before the next starts.
    let start = 200_000 * ms;
    for i in 0..3_000u32 {
        let t = start + u64::from(i) * 2_000 * ms;
        batch.clear();
        life(200_000 + i, t, &mut batch);
        a.feed(&batch);
        a.cut(t + 1_000 * ms);
    }
    a.ready += a.iv.finish().len();
    assert_eq!((a.cuts, a.ready), (3_100, 3_100));
    let (labels, held, live) = a.most;
    eprintln!("most held after a cut: labels {labels}, {held:?}, objects alive {live}");
    // Processes of the last second (exited ones are kept that long).
    assert!(labels <= 1, "label table: {labels}");
    assert!(held.processes <= 2_100, "task model: {held:?}");
    assert!(held.thread_names <= 2_100, "task model: {held:?}");
    // Pruned every 4,096 unwinds.
    assert!(
        held.unwinder_processes <= 4_096 + 2_100,
        "unwinder: {held:?}"
    );
    assert!(held.unwinder_missing <= 128, "unwinder: {held:?}");
    assert!(live <= 16, "objects alive: {live}");
    assert_eq!(a.labels.len(), 0);
}
