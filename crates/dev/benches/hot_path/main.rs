//! The hot-path benchmark of issue 13 part 5: samples per second, on one
//! core, for
//!
//! - `decode`: raw PERF_RECORD_SAMPLE bytes (with a 2 KB user stack copy)
//!   into [`Record`]s, as the ring reader does;
//! - `attribute/kprof`: the kprof histogram (kpdata buckets) over the
//!   decoded records;
//! - `attribute/prof`: prof's per-module pc counts (every module wanted);
//! - `unwind/gmon`: gmon-style attribution with user-stack unwinding:
//!   the task table and [`UserUnwinder`] observe every record, each user
//!   sample is unwound from its stack copy, its frames mapped to file
//!   addresses, the innermost counted in the histogram of the executable
//!   and each caller/callee pair counted as an arc by the shared builder
//!   (`profdev_formats::gmon::build`, what `profdev gmon` does per sample,
//!   without its symbol lookups).
//!
//! The stream and its recipe are in `synth.rs`; run with
//! `cargo bench -p profdev-dev --bench hot_path`. Figures and targets are
//! in bench/README.md.

mod synth;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use profdev_core::{CpuMode, ProcessVa, Record};
use profdev_dev::engine::{Engine, ReplayFactory};
use profdev_dev::kprof::{Kprof, KprofConfig};
use profdev_dev::prof::Prof;
use profdev_dev::tree::{self, OpenMode, Qid};
use profdev_dev::Dev;
use profdev_formats::gmon::build::{ArcCounts, ArcSink, CallGraph};
use profdev_sample::decode::decode_record;
use profdev_symbolize::tasks::Tasks;
use profdev_symbolize::unwind::UserUnwinder;
use std::sync::Arc;
use synth::Stream;

/// Samples per measured batch.
const BATCH: usize = 4096;

fn idle_engine() -> Engine {
    Engine::new(Arc::new(ReplayFactory::new(Vec::new())))
}

fn decode(c: &mut Criterion, stream: &mut Stream) {
    let layout = synth::layout();
    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("perf_record_sample", |b| {
        b.iter_batched(
            || {
                let mut bytes = Vec::new();
                for r in stream.batch(BATCH) {
                    if let Record::Sample(s) = r {
                        synth::encode_sample(&mut bytes, &s, &layout);
                    }
                }
                bytes
            },
            |bytes| {
                let mut out = Vec::with_capacity(BATCH);
                let mut at = 0;
                while at < bytes.len() {
                    let size = usize::from(u16::from_ne_bytes([bytes[at + 6], bytes[at + 7]]));
                    let rec = decode_record(&bytes[at..at + size], &layout, 0)
                        .expect("a well-formed record")
                        .expect("a sample");
                    out.push(rec);
                    at += size;
                }
                assert_eq!(out.len(), BATCH);
                (bytes, out)
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

fn attribute(c: &mut Criterion, stream: &mut Stream) {
    let preamble = stream.preamble();
    let kprof = Kprof::new(KprofConfig::new(synth::KERNEL_TEXT), idle_engine());
    kprof.feed(&preamble);
    let prof = Prof::new(idle_engine());
    let ctl = tree::walk(&prof, Qid::ROOT, "ctl").expect("prof's ctl");
    let mut chan = prof.open(ctl.qid, OpenMode::Write).expect("open ctl");
    prof.write(&mut chan, 0, b"start\n").expect("prof starts");
    prof.feed(&preamble);

    let mut g = c.benchmark_group("attribute");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("kprof", |b| {
        b.iter_batched(
            || stream.batch(BATCH),
            |batch| {
                kprof.feed(&batch);
                batch
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("prof", |b| {
        b.iter_batched(
            || stream.batch(BATCH),
            |batch| {
                prof.feed(&batch);
                batch
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
    let stats = prof.stats();
    assert!(
        stats.samples > 0 && stats.unresolved < stats.samples,
        "prof resolved no sample: {stats:?}"
    );
}

/// gmon-style attribution of user samples with unwinding.
struct Gmon {
    tasks: Tasks,
    unwinder: UserUnwinder,
    /// The executable, its text as file offsets.
    exe_path: String,
    graph: CallGraph<ArcCounts>,
    /// The sample at hand's frames, reused.
    scratch: Vec<Option<u64>>,
    frames: u64,
    samples: u64,
}

impl Gmon {
    fn record(&mut self, r: &Record) {
        self.tasks.observe(r);
        self.unwinder.observe(r);
        let Record::Sample(s) = r else { return };
        if s.mode != CpuMode::User {
            return;
        }
        self.samples += 1;
        let stack = self.unwinder.unwind(s);
        self.frames += stack.frames.len() as u64;
        let file_addr = |i: usize| {
            let va = stack.lookup_address(i);
            let m = self.tasks.lookup(s.pid, va)?;
            (m.path == self.exe_path).then(|| m.file_offset(ProcessVa(va.0)))
        };
        let mut frames = std::mem::take(&mut self.scratch);
        frames.clear();
        frames.extend((0..stack.frames.len()).map(file_addr));
        // No symbol lookup: the callee's address stands for its entry.
        let _ = self.graph.sample(frames.iter().copied(), Some);
        self.scratch = frames;
    }
}

fn unwind(c: &mut Criterion, stream: &mut Stream) {
    let exe = &stream.modules[0];
    let mut gmon = Gmon {
        tasks: Tasks::new(),
        unwinder: UserUnwinder::new(),
        exe_path: exe.path.clone(),
        graph: CallGraph::new(exe.pgoff, exe.pgoff + exe.len, ArcCounts::default()),
        scratch: Vec::new(),
        frames: 0,
        samples: 0,
    };
    for r in stream.preamble() {
        gmon.record(&r);
    }
    // The recipe promises a 16-frame stack: check the unwinder sees it.
    let probe = stream.capture.clone();
    let mut s = stream.sample();
    while s.mode != CpuMode::User {
        s = stream.sample();
    }
    s.user_regs = Some(probe.regs);
    s.user_stack = probe.stack;
    let depth = gmon.unwinder.unwind(&s).frames.len();
    assert!(
        depth > synth::DEPTH as usize,
        "the captured stack unwinds to {depth} frames, fewer than its {} recursion frames",
        synth::DEPTH
    );
    eprintln!("hot_path: the captured user stack unwinds to {depth} frames");

    let mut g = c.benchmark_group("unwind");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("gmon", |b| {
        b.iter_batched(
            || stream.batch(BATCH),
            |batch| {
                for r in &batch {
                    gmon.record(r);
                }
                batch
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
    eprintln!(
        "hot_path: {} user samples unwound, {:.1} frames each, {} arcs; {}",
        gmon.samples,
        gmon.frames as f64 / gmon.samples.max(1) as f64,
        gmon.graph.arcs().len(),
        gmon.unwinder.stats()
    );
}

fn hot_path(c: &mut Criterion) {
    let Some(mut stream) = Stream::new() else {
        eprintln!("SKIPPED hot_path: capturing a user stack needs x86_64");
        return;
    };
    decode(c, &mut stream);
    attribute(c, &mut stream);
    unwind(c, &mut stream);
}

criterion_group!(benches, hot_path);
criterion_main!(benches);
