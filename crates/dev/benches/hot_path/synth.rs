//! The synthetic sample stream of the hot-path benchmark (issue 13 part 5).
//!
//! Recipe (everything below is derived from it, deterministically):
//!
//! - one real user stack: this benchmark binary recurses 16 frames deep
//!   ([`capture`]) and copies the 2 KB of its stack above the stack pointer
//!   together with ip, sp and bp, exactly what perf's `REGS_USER` and
//!   `STACK_USER` (2048 bytes) would deliver. The stack is real (real return
//!   addresses, real CFI in the binary the unwinder loads), and it is taken
//!   at run time, so no binary blob is committed and the fixture always
//!   matches the binary that unwinds it;
//! - 100 processes (pids 1000..1100), each announced by an exec COMM and 20
//!   executable MMAPs: module 0 is this binary's text at its real address,
//!   modules 1..19 are the same text through symlinks `modNN` in a temporary
//!   directory, 256 MB apart, so every module is a real ELF file;
//! - then 1,000,000 samples drawn from a seeded xorshift64* generator (no
//!   clock, no OS randomness): pid uniform over the 100 processes, a quarter
//!   of them in kernel mode at a pc uniform over a 16 MB kernel text, the
//!   rest in user mode at a pc uniform over a uniformly chosen module,
//!   each user sample carrying the captured registers and 2 KB stack copy
//!   (so the unwinder always unwinds the real 16-frame stack, whatever
//!   module the sampled pc is in).
//!
//! The benchmark consumes the stream in batches; after the millionth sample
//! the sample part starts again from the seed.

use profdev_core::{CpuMode, KernelPc, KernelText, Record, Sample, UserRegs};
use profdev_sample::decode::RecordLayout;
use profdev_sample::sys::{misc, record, REGS_ABI_NONE, USER_REG_BITS};
use std::path::{Path, PathBuf};

/// Samples in the stream.
pub const SAMPLES: u64 = 1_000_000;
/// Processes in the stream.
pub const PROCESSES: u32 = 100;
/// Modules mapped in every process.
pub const MODULES: u64 = 20;
/// Bytes of user stack copied per sample (perf's `sample_stack_user`).
pub const STACK_BYTES: usize = 2048;
/// Depth of the captured recursion.
pub const DEPTH: u32 = 16;
/// The seed of the sample draws.
pub const SEED: u64 = 0x5eed_0f13_2026_0005;
/// First pid.
pub const FIRST_PID: u32 = 1000;
/// The synthetic kernel text.
pub const KERNEL_TEXT: KernelText = KernelText {
    start: KernelPc(0xffff_ffff_8100_0000),
    end: KernelPc(0xffff_ffff_8200_0000),
};
/// Distance between module bases.
const MODULE_STRIDE: u64 = 0x1000_0000;
/// `PERF_SAMPLE_REGS_ABI_64`.
const REGS_ABI_64: u64 = 2;

/// What [`capture`] took: registers and the stack copy.
#[derive(Clone, Debug)]
pub struct Capture {
    pub regs: UserRegs,
    pub stack: Vec<u8>,
}

/// Recurse `DEPTH` frames, then copy the stack. Each level keeps a live
/// local so the frames are real frames, and is never inlined.
#[inline(never)]
fn recurse(level: u32, out: &mut Option<Capture>) -> u64 {
    let local = std::hint::black_box(u64::from(level) * 3 + 1);
    if level == DEPTH {
        *out = snapshot();
        return local;
    }
    let below = recurse(level + 1, out);
    std::hint::black_box(below.wrapping_add(local))
}

#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn snapshot() -> Option<Capture> {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers into locals; touches no memory.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    let mut stack = vec![0u8; STACK_BYTES];
    // SAFETY: [sp, sp + 2048) is this thread's stack: this frame and its
    // callers' (the 16 recursion frames, criterion's and main's frames lie
    // above, and the main thread's stack is far larger than 2 KB). It is
    // read as bytes while no one writes it.
    unsafe {
        std::ptr::copy_nonoverlapping(sp as *const u8, stack.as_mut_ptr(), STACK_BYTES);
    }
    Some(Capture {
        regs: UserRegs { ip, sp, bp },
        stack,
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn snapshot() -> Option<Capture> {
    None
}

/// Capture the real 16-frame stack of this binary (x86_64 only).
pub fn capture() -> Option<Capture> {
    let mut out = None;
    std::hint::black_box(recurse(1, &mut out));
    out
}

/// The executable text mapping of this binary: (start, len, pgoff, path).
fn own_text() -> (u64, u64, u64, PathBuf) {
    let exe = std::fs::canonicalize("/proc/self/exe").expect("/proc/self/exe");
    let maps = profdev_symbolize::maps::read_self().expect("/proc/self/maps");
    for m in maps {
        if !m.perms.exec() || Path::new(&m.path) != exe {
            continue;
        }
        return (m.start, m.end - m.start, m.offset, exe);
    }
    panic!(
        "no executable mapping of {} in /proc/self/maps",
        exe.display()
    );
}

/// xorshift64*: small, seeded, the same on every machine.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One module of the synthetic processes.
#[derive(Clone, Debug)]
pub struct Module {
    pub path: String,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
}

/// The stream: preamble (COMM and MMAP records) then samples, generated
/// on demand.
pub struct Stream {
    pub capture: Capture,
    pub modules: Vec<Module>,
    /// Holds the module symlinks.
    _dir: tempfile::TempDir,
    rng: Rng,
    emitted: u64,
    time: u64,
}

impl Stream {
    /// Build the stream from the recipe. `None` where no stack can be
    /// captured (not x86_64).
    pub fn new() -> Option<Stream> {
        let capture = capture()?;
        let (start, len, pgoff, exe) = own_text();
        assert!(
            capture.regs.ip >= start && capture.regs.ip < start + len,
            "the captured ip is outside this binary's text"
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let modules = (0..MODULES)
            .map(|k| {
                let link = dir.path().join(format!("mod{k:02}"));
                std::os::unix::fs::symlink(&exe, &link).expect("a module symlink");
                // Module 0 is the binary itself (the captured stack's return
                // addresses are in it); the others are the same file
                // further up.
                let path = if k == 0 { exe.clone() } else { link };
                Module {
                    path: path.to_string_lossy().into_owned(),
                    start: start + k * MODULE_STRIDE,
                    len,
                    pgoff,
                }
            })
            .collect();
        Some(Stream {
            capture,
            modules,
            _dir: dir,
            rng: Rng(SEED),
            emitted: 0,
            time: 1,
        })
    }

    /// COMM and MMAP records of every process.
    pub fn preamble(&self) -> Vec<Record> {
        let mut out = Vec::new();
        for i in 0..PROCESSES {
            let pid = FIRST_PID + i;
            out.push(Record::Comm {
                pid,
                tid: pid,
                comm: format!("synth{i:03}"),
                exec: true,
                time: 0,
            });
            for m in &self.modules {
                out.push(Record::Mmap {
                    pid,
                    tid: pid,
                    addr: m.start,
                    len: m.len,
                    pgoff: m.pgoff,
                    path: m.path.clone(),
                    // No device/inode: prof would check them against
                    // the file, and the symlinks share the binary's.
                    file: None,
                    build_id: None,
                    time: 0,
                });
            }
        }
        out
    }

    /// The next sample of the stream (wrapping after [`SAMPLES`]).
    pub fn sample(&mut self) -> Sample {
        if self.emitted == SAMPLES {
            self.emitted = 0;
            self.rng = Rng(SEED);
        }
        self.emitted += 1;
        self.time += 1000;
        let r = &mut self.rng;
        let pid = FIRST_PID + r.below(u64::from(PROCESSES)) as u32;
        let cpu = r.below(2) as u32;
        let mut s = Sample {
            pid,
            tid: pid,
            cpu,
            time: self.time,
            period: 1_000_000,
            ..Sample::default()
        };
        if r.below(4) == 0 {
            s.mode = CpuMode::Kernel;
            s.ip = KERNEL_TEXT.start.0 + r.below(KERNEL_TEXT.len());
        } else {
            let m = &self.modules[r.below(MODULES) as usize];
            s.mode = CpuMode::User;
            s.ip = m.start + r.below(m.len);
            s.user_regs = Some(self.capture.regs);
            s.user_stack = self.capture.stack.clone();
        }
        s
    }

    /// The next `n` samples as records.
    pub fn batch(&mut self, n: usize) -> Vec<Record> {
        (0..n).map(|_| Record::Sample(self.sample())).collect()
    }
}

/// The layout the records are encoded in: profdev's with a 2 KB user
/// stack copy (IP|TID|TIME|CPU|PERIOD|REGS_USER|STACK_USER).
pub fn layout() -> RecordLayout {
    let mut config = profdev_core::SessionConfig::system(1000);
    config.callchain = false;
    config.user_stack_bytes = STACK_BYTES as u32;
    RecordLayout::for_config(&config)
}

fn put(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_ne_bytes());
}

/// Append `s` as the kernel writes a PERF_RECORD_SAMPLE under [`layout`].
pub fn encode_sample(out: &mut Vec<u8>, s: &Sample, layout: &RecordLayout) {
    let at = out.len();
    let misc_bits = match s.mode {
        CpuMode::Kernel => misc::KERNEL,
        CpuMode::User => misc::USER,
        CpuMode::Other => 0,
    };
    out.extend_from_slice(&record::SAMPLE.to_ne_bytes());
    out.extend_from_slice(&misc_bits.to_ne_bytes());
    out.extend_from_slice(&0u16.to_ne_bytes()); // size, below
    put(out, s.ip);
    out.extend_from_slice(&s.pid.to_ne_bytes());
    out.extend_from_slice(&s.tid.to_ne_bytes());
    put(out, s.time);
    out.extend_from_slice(&s.cpu.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    put(out, s.period);
    let (bp, sp, ip) = USER_REG_BITS.expect("user registers on this architecture");
    match s.user_regs {
        Some(regs) => {
            put(out, REGS_ABI_64);
            for bit in 0..64 {
                if layout.regs_user_mask & (1 << bit) == 0 {
                    continue;
                }
                let v = if bit == bp {
                    regs.bp
                } else if bit == sp {
                    regs.sp
                } else if bit == ip {
                    regs.ip
                } else {
                    0
                };
                put(out, v);
            }
        }
        None => put(out, REGS_ABI_NONE),
    }
    put(out, s.user_stack.len() as u64);
    if !s.user_stack.is_empty() {
        out.extend_from_slice(&s.user_stack);
        put(out, s.user_stack.len() as u64); // dyn_size
    }
    let size = u16::try_from(out.len() - at).expect("a record fits in 64 KB");
    out[at + 6..at + 8].copy_from_slice(&size.to_ne_bytes());
}
