//! Export speed (issue 16 part 5): a synthetic recording of N samples
//! (default 1 000 000) with 20-deep stacks over 4 objects of 2 000
//! functions each with line tables, read and written in every format;
//! prints the bytes and each step's wall time and CPU time. `bench/record.sh` runs it:
//!
//! ```text
//! cargo run --release -p profdev-formats --example export_speed [N [SAVE]]
//! ```
//!
//! Each time is of making the format's bytes from the read recording; the
//! perf-script text is streamed to a byte counter as `profdev export`
//! streams it to its output. With SAVE, the recording is also written
//! there, for timing `profdev export FORMAT -i SAVE -o - >/dev/null`.

use profdev_formats::export::{
    firefox, folded, gmon, kpdata, otlp, perf_script, pprof, proc_profile, svg,
};
use profdev_formats::recording::{
    self, Encoder, Frame, Function, Header, Line, ObjectInfo, ObjectKind, SampleInfo, Task,
    FLAG_STACKS,
};
use std::time::Instant;

const FUNCS: u64 = 2000;
const DEPTH: usize = 20;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let t = Instant::now();
    let mut e = Encoder::new(&Header {
        flags: FLAG_STACKS,
        start_ns: 1_700_000_000_000_000_000,
        period_ns: 1_000_000,
    });
    for tid in 0..8u32 {
        e.task(&Task {
            pid: 1000 + tid / 4,
            tid: 1000 + tid,
            generation: 0,
            time: 0,
            comm: format!("worker{}", tid / 4),
        });
    }
    let mut objects = Vec::new();
    for o in 0..4u64 {
        let kind = if o == 3 {
            ObjectKind::Kernel
        } else {
            ObjectKind::User
        };
        let base = if o == 3 {
            0xffff_ffff_8100_0000
        } else {
            0x1000
        };
        let id = e.object(&ObjectInfo {
            kind,
            dev: 0x801,
            inode: 100 + o,
            build_id: vec![o as u8; 20],
            path: format!("/usr/lib/object{o}.so"),
        });
        let funcs: Vec<Function> = (0..FUNCS)
            .map(|i| Function {
                start: base + i * 0x100,
                len: 0x100,
                name: format!("namespace::module{o}::function_{i}"),
                lines: (0..4)
                    .map(|l| Line {
                        addr: base + i * 0x100 + l * 0x40,
                        file: (i % 10) as u32,
                        line: (i * 10 + l) as u32,
                    })
                    .collect(),
            })
            .collect();
        let mut funcs = funcs;
        if kind == ObjectKind::Kernel {
            // The kernel text's edges, as profdev record writes them.
            for (name, at) in [("_stext", base), ("_etext", base + FUNCS * 0x100)] {
                funcs.push(Function {
                    start: at,
                    len: 0,
                    name: name.into(),
                    lines: vec![],
                });
            }
        }
        let files: Vec<String> = (0..10).map(|f| format!("src/file{f}.c")).collect();
        e.symbols(id, &files, &funcs).unwrap();
        objects.push((id, base));
    }
    // A deterministic mix of stacks: 5 000 distinct call paths.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut bytes = e.take();
    let mut frames = Vec::with_capacity(DEPTH);
    for s in 0..n {
        let path = next() % 5000;
        let kernel = path % 10 == 0;
        frames.clear();
        for d in 0..DEPTH as u64 {
            let (id, base) = if kernel && d < 4 {
                objects[3]
            } else {
                objects[((path + d) % 3) as usize]
            };
            let f = (path * 31 + d * 7) % FUNCS;
            frames.push(Frame {
                object: id,
                offset: base + f * 0x100 + (d * 8) % 0x100,
            });
        }
        let tid = 1000 + (s % 8) as u32;
        e.sample(
            &SampleInfo {
                time: s * 1_000_000,
                cpu: (s % 2) as u32,
                pid: 1000 + (tid - 1000) / 4,
                tid,
                weight: 1_000_000,
                kernel,
                off_cpu: None,
            },
            &frames,
        )
        .unwrap();
        if e.pending() > 1 << 20 {
            bytes.extend(e.take());
        }
    }
    e.end();
    bytes.extend(e.take());
    if let Some(path) = std::env::args().nth(2) {
        // For timing `profdev export` itself on the same recording.
        std::fs::write(&path, &bytes).unwrap();
        println!("saved the recording as {path}");
    }
    println!(
        "generate: {n} samples, {DEPTH} frames each: {} bytes ({:.1} per sample) in {:.2?}",
        bytes.len(),
        bytes.len() as f64 / n as f64,
        t.elapsed()
    );
    let (t, c) = (Instant::now(), cpu());
    let rec = recording::read(&bytes).unwrap();
    println!("read: {:.2?} ({:.2?} of CPU)", t.elapsed(), cpu() - c);
    let time = |name: &str, f: &dyn Fn() -> usize| {
        let (t, c) = (Instant::now(), cpu());
        let len = f();
        println!(
            "{name}: {len} bytes in {:.2?} ({:.2?} of CPU)",
            t.elapsed(),
            cpu() - c
        );
    };
    time("names (every writer's first step)", &|| {
        profdev_formats::export::Names::new(&rec).funcs.len()
    });
    time("folded", &|| folded::write(&rec).len());
    time("svg", &|| svg::write(&rec, &svg::Options::default()).len());
    time("pprof", &|| pprof::write(&rec).len());
    time("firefox", &|| firefox::write(&rec).len());
    // Streamed, as profdev export writes it (1.6 GB not held in memory).
    time("perf-script", &|| {
        let script = perf_script::Script::new(&rec);
        let mut out = Counted(0);
        script.write_to(&mut out).unwrap();
        assert_eq!(out.0, script.len());
        out.0
    });
    time("gmon", &|| {
        gmon::write(&rec, &gmon::Select::default()).unwrap().0.len()
    });
    time("kpdata", &|| kpdata::write(&rec, 3).unwrap().len());
    time("proc-profile", &|| {
        proc_profile::write(&rec, 2).unwrap().len()
    });
    time("otlp", &|| otlp::write(&rec).len());
}

/// A writer that counts and drops the bytes (the perf-script export's
/// destination in this benchmark; `profdev export` writes them to its
/// output instead).
struct Counted(usize);

impl std::io::Write for Counted {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len();
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// This thread's CPU time (user and system): on a machine shared with other
/// work, wall time also counts the waits for a CPU.
fn cpu() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
