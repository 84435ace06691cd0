//! The hot-path benchmark of issue 13 part 5: samples per second, on one
//! core, for
//!
//! - `decode`: raw PERF_RECORD_SAMPLE bytes (with a 2 KB user stack copy)
//!   into [`Record`]s, as the ring reader does;
//! - `attribute/kprof`: the kprof histogram (kpdata buckets) over the
//!   decoded records;
//! - `attribute/prof`: prof's per-module pc counts (every module wanted);
//! - `callchain/decode` and `callchain/kgmon`: kernel-mode samples with a
//!   16-frame kernel callchain and an 8-frame user part (drawn from 1000
//!   fixed stacks, see [`Chains`]) decoded from PERF_RECORD_SAMPLE bytes,
//!   and counted by the kgmon device (cells and mcount arcs);
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
use profdev_dev::kgmon::{Kgmon, KgmonConfig};
use profdev_dev::kprof::{Kprof, KprofConfig};
use profdev_dev::prof::Prof;
use profdev_dev::tree::{self, OpenMode, Qid};
use profdev_dev::Dev;
use profdev_formats::gmon::build::{ArcCounts, ArcSink, CallGraph};
use profdev_sample::decode::{decode_record, RecordLayout};
use profdev_sample::sys::{context, misc, record};
use profdev_symbolize::tasks::Tasks;
use profdev_symbolize::unwind::UserUnwinder;
use profdev_symbolize::Objects;
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
        // (no samples when a filter left the prof benchmark out)
        stats.samples == 0 || stats.unresolved < stats.samples,
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
    frames: u64,
    samples: u64,
    /// Buffers reused from sample to sample.
    stack: Vec<u64>,
    addrs: Vec<Option<u64>>,
}

impl Gmon {
    fn record(&mut self, r: &Record) {
        self.tasks.observe(r);
        let Record::Sample(s) = r else { return };
        if s.mode != CpuMode::User {
            return;
        }
        self.samples += 1;
        self.unwinder.unwind_into(&self.tasks, s, &mut self.stack);
        self.frames += self.stack.len() as u64;
        let tasks = &self.tasks;
        let exe_path = &self.exe_path;
        let file_addr = |i: usize, a: u64| {
            // The sampled instruction, then the calls (return address - 1).
            let va = ProcessVa(if i == 0 { a } else { a.wrapping_sub(1) });
            let m = tasks.lookup(s.pid, va)?;
            (m.path == *exe_path).then(|| m.file_offset(va))
        };
        self.addrs.clear();
        self.addrs
            .extend(self.stack.iter().enumerate().map(|(i, &a)| file_addr(i, a)));
        // No symbol lookup: the callee's address stands for its entry.
        let _ = self.graph.sample(self.addrs.iter().copied(), Some);
    }
}

fn unwind(c: &mut Criterion, stream: &mut Stream) {
    let exe = &stream.modules[0];
    let mut gmon = Gmon {
        tasks: Tasks::with_objects(Objects::new()),
        unwinder: UserUnwinder::new(),
        exe_path: exe.path.clone(),
        graph: CallGraph::new(exe.pgoff, exe.pgoff + exe.len, ArcCounts::default()),
        frames: 0,
        samples: 0,
        stack: Vec::new(),
        addrs: Vec::new(),
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
    let depth = gmon.unwinder.unwind(&gmon.tasks, &s).frames.len();
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

/// Kernel-mode samples with callchains: 1000 fixed stacks of 16 kernel
/// frames (the ip, then 15 return addresses) in 64 K functions of 256
/// bytes over the synthetic kernel text, each with 8 user frames; a
/// sample picks a stack uniformly (seeded xorshift64*).
struct Chains {
    stacks: Vec<Vec<u64>>,
    user: Vec<u64>,
    rng: u64,
    time: u64,
}

impl Chains {
    const STACKS: usize = 1000;
    const KERNEL_FRAMES: usize = 16;
    const FUNCTION_BYTES: u64 = 256;

    fn new() -> Self {
        let mut c = Chains {
            stacks: Vec::new(),
            user: (0..8).map(|i| 0x5555_0000_1000 + 0x40 * i).collect(),
            rng: synth::SEED,
            time: 0,
        };
        let text = synth::KERNEL_TEXT;
        for _ in 0..Self::STACKS {
            let stack = (0..Self::KERNEL_FRAMES)
                .map(|_| text.start.0 + c.below(text.len()))
                .collect();
            c.stacks.push(stack);
        }
        c
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    fn functions() -> Vec<u64> {
        let text = synth::KERNEL_TEXT;
        (0..text.len() / Self::FUNCTION_BYTES)
            .map(|i| text.start.0 + i * Self::FUNCTION_BYTES)
            .collect()
    }

    fn sample(&mut self) -> profdev_core::Sample {
        let i = self.below(Self::STACKS as u64) as usize;
        let stack = &self.stacks[i];
        self.time += 1000;
        profdev_core::Sample {
            ip: stack[0],
            pid: synth::FIRST_PID,
            tid: synth::FIRST_PID,
            time: self.time,
            period: 1_000_000,
            mode: CpuMode::Kernel,
            kernel_chain: stack.clone(),
            user_chain: self.user.clone(),
            ..profdev_core::Sample::default()
        }
    }

    fn batch(&mut self, n: usize) -> Vec<Record> {
        (0..n).map(|_| Record::Sample(self.sample())).collect()
    }

    fn layout() -> RecordLayout {
        RecordLayout::for_config(&profdev_core::SessionConfig {
            callchain: true,
            ..profdev_core::SessionConfig::system(1000)
        })
    }

    /// `s` as the kernel writes it under [`Chains::layout`]: IP, TID, TIME,
    /// CPU, PERIOD, then the callchain with its context markers.
    fn encode(out: &mut Vec<u8>, s: &profdev_core::Sample) {
        let put = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_ne_bytes());
        let at = out.len();
        out.extend_from_slice(&record::SAMPLE.to_ne_bytes());
        out.extend_from_slice(&misc::KERNEL.to_ne_bytes());
        out.extend_from_slice(&0u16.to_ne_bytes());
        put(out, s.ip);
        out.extend_from_slice(&s.pid.to_ne_bytes());
        out.extend_from_slice(&s.tid.to_ne_bytes());
        put(out, s.time);
        put(out, u64::from(s.cpu));
        put(out, s.period);
        put(out, (2 + s.kernel_chain.len() + s.user_chain.len()) as u64);
        put(out, context::KERNEL);
        for &ip in &s.kernel_chain {
            put(out, ip);
        }
        put(out, context::USER);
        for &ip in &s.user_chain {
            put(out, ip);
        }
        let size = u16::try_from(out.len() - at).expect("a record fits in 64 KB");
        out[at + 6..at + 8].copy_from_slice(&size.to_ne_bytes());
    }
}

fn callchains(c: &mut Criterion) {
    let mut chains = Chains::new();
    let layout = Chains::layout();
    let kgmon = Kgmon::new(
        KgmonConfig::new(synth::KERNEL_TEXT, &Chains::functions()),
        idle_engine(),
    );
    let ctl = tree::walk(&kgmon, Qid::ROOT, "ctl").expect("kgmon's ctl");
    let mut chan = kgmon.open(ctl.qid, OpenMode::Write).expect("open ctl");
    kgmon.write(&mut chan, 0, b"begin\n").expect("kgmon begins");

    let mut g = c.benchmark_group("callchain");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("decode", |b| {
        b.iter_batched(
            || {
                let mut bytes = Vec::new();
                for r in chains.batch(BATCH) {
                    if let Record::Sample(s) = r {
                        Chains::encode(&mut bytes, &s);
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
    g.bench_function("kgmon", |b| {
        b.iter_batched(
            || chains.batch(BATCH),
            |batch| {
                kgmon.feed(&batch);
                batch
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
    let n = kgmon.counters();
    assert!(
        n.ticks > 0 && n.overflow == 0 && kgmon.state() == profdev_dev::kgmon::GmonState::On,
        "kgmon did not count the stream: {n:?}"
    );
    eprintln!("hot_path: kgmon {n:?}");
}

fn hot_path(c: &mut Criterion) {
    let Some(mut stream) = Stream::new() else {
        eprintln!("SKIPPED hot_path: capturing a user stack needs x86_64");
        return;
    };
    decode(c, &mut stream);
    attribute(c, &mut stream);
    callchains(c);
    unwind(c, &mut stream);
}

criterion_group!(benches, hot_path);
criterion_main!(benches);
