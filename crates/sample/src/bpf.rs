//! An in-kernel PC histogram: a hand-assembled eBPF program on the
//! cpu-clock events that counts kernel PCs into kpdata buckets inside the
//! kernel, so no sample ever crosses a ring buffer.
//!
//! # Synopsis
//!
//! ```no_run
//! use profdev_sample::bpf::KernelHistogram;
//!
//! let (start, end) = (0xffff_ffff_8100_0000, 0xffff_ffff_8240_0000);
//! let mut h = KernelHistogram::open(start, end, 3, 1000)?;
//! h.enable()?;
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! h.disable();
//! let words = h.words(); // kpdata's words, host order
//! # Ok::<(), profdev_core::SourceError>(())
//! ```
//!
//! # Description
//!
//! No libbpf and no compiler: [`program`] assembles the instructions with
//! [`asm::Asm`], a tiny assembler with forward labels (no jump offset is
//! counted by hand), and [`KernelHistogram::open`] loads them with
//! bpf(2) as a `BPF_PROG_TYPE_PERF_EVENT` program (license "GPL"), then
//! attaches it with `PERF_EVENT_IOC_SET_BPF` to one software cpu-clock event
//! per online CPU (pid -1, every task, kernel and user mode, a fixed period
//! of `1e9 / frequency_hz` ns as the ring engine uses). No ring buffer is
//! mapped: the program returns 0, which tells the kernel not to write the
//! sample anywhere.
//!
//! On every tick the program reads the interrupted PC (`regs.ip` of
//! `struct bpf_perf_event_data`, [`REGS_IP_OFFSET`], computed with
//! `offset_of!` on a `#[repr(C)]` mirror of the uapi structs: 128 on
//! x86_64, where `struct pt_regs` has 16 words before `ip`) and applies Inferno 4e's kproftick: word 0 += 1;
//! if `start + (6 << lres) <= ip < end` then word `(ip - start) >> lres`
//! += 1, else word 1 += 1. Both increments are BPF atomic adds (32 bits,
//! wrapping like the original's counters).
//!
//! The words live in a `BPF_MAP_TYPE_ARRAY` created with `BPF_F_MMAPABLE`
//! whose 8-byte elements each hold two consecutive u32 words (an array map
//! rounds its element size up to 8, so u32 elements would waste half of the
//! mapping; the element is a `#[repr(C)]` pair whose field offsets the
//! program uses), and which user space maps shared: [`KernelHistogram::words`]
//! is a copy of the mapping, and words 2–5 of kpdata (microseconds per
//! tick, word count, 4, lres) are written by user space at open and at
//! every [`KernelHistogram::clear`].
//!
//! # Errors
//!
//! EPERM/EACCES from bpf(2) or perf_event_open is
//! [`SourceError::Permission`], one sentence naming CAP_BPF and
//! CAP_PERFMON (or root) and `kernel.unprivileged_bpf_disabled`; a verifier
//! rejection is an [`SourceError::Io`] whose context holds the first lines
//! of the verifier log.
//!
//! # Bugs
//!
//! * x86_64 only (the offset of the PC in `struct pt_regs`); elsewhere
//!   `open` fails with EOPNOTSUPP.
//! * Word 0 is one shared counter incremented by every CPU, an atomic on a
//!   shared cache line; at 10 kHz on many CPUs that costs a little.
//! * `clear` while enabled races with the program: a tick taken during the
//!   clear may be kept or lost. The kprof device clears only on `startclr`.
//!
//! # Testing
//!
//! `tests/golden/kproftick.bpf.txt` is the program's disassembly ([`asm::disassemble`]:
//! each slot's bytes and its text); `PROFDEV_BLESS=1 cargo test -p
//! profdev-sample --lib bpf` rewrites it. `tests/bpf.rs` loads it into the
//! kernel (privileged).

use profdev_core::SourceError;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::procfs::online_cpus;
use crate::sys::{self, flag, PerfEventAttr};

pub mod asm;
pub mod attr;

pub use asm::{encode, op, Insn};
use asm::{Asm, FP, R0, R1, R2, R3, R6, R7, R8};
pub use attr::{fd, syscall, BpfAttr};
use attr::{obj_name, MapCreate, BPF_F_MMAPABLE, BPF_MAP_TYPE_ARRAY, BPF_PROG_TYPE_PERF_EVENT};

/// `struct pt_regs` of the x86_64 uapi `<asm/ptrace.h>`, which is
/// `bpf_user_pt_regs_t` on x86_64: a layout mirror, never constructed.
/// Also the context of the coverage engine's uprobe programs
/// (`profdev_coverage::uprobe`).
#[repr(C)]
#[allow(
    dead_code,
    reason = "a layout mirror: only offset_of! and size_of read it"
)]
pub struct PtRegs {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub rbp: u64,
    pub rbx: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rax: u64,
    pub rcx: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub orig_rax: u64,
    pub rip: u64,
    pub cs: u64,
    pub eflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

/// `struct bpf_perf_event_data` of `<linux/bpf_perf_event.h>`, the context
/// a perf-event program receives in r1: a layout mirror, never constructed.
#[repr(C)]
#[allow(
    dead_code,
    reason = "a layout mirror: only offset_of! and size_of read it"
)]
struct BpfPerfEventData {
    regs: PtRegs,
    sample_period: u64,
    addr: u64,
}

/// Offset of `regs.ip` in `struct bpf_perf_event_data` (x86_64: `struct
/// pt_regs` r15..orig_ax are 16 words, then ip).
pub const REGS_IP_OFFSET: i16 = std::mem::offset_of!(BpfPerfEventData, regs.rip) as i16;
const _: () = assert!(REGS_IP_OFFSET == 128);

/// One element of the histogram map: two consecutive kpdata words, word
/// `2k` and word `2k + 1` in element `k`.
#[repr(C)]
#[allow(
    dead_code,
    reason = "a layout mirror: only offset_of! and size_of read it"
)]
struct Element {
    even: u32,
    odd: u32,
}

/// Byte offset of the even word in an element (word 0 in element 0).
const EVEN_WORD: i16 = std::mem::offset_of!(Element, even) as i16;
/// Byte offset of the odd word in an element (word 1 in element 0).
const ODD_WORD: i16 = std::mem::offset_of!(Element, odd) as i16;
/// `log2` of a word's size: word `slot` is `(slot & 1) << WORD_SHIFT`
/// bytes into element `slot >> 1`.
const WORD_SHIFT: i32 = 2;
const _: () = assert!(1 << WORD_SHIFT == ODD_WORD && EVEN_WORD == 0);
/// The map's key, a u32 element index, lives on the stack just below the
/// frame pointer.
const KEY_SLOT: i16 = -(std::mem::size_of::<u32>() as i16);

/// Header words of kpdata that the program never touches as buckets.
const SPECIAL_WORDS: u64 = 6;

/// `r0 = map_lookup_elem(map, fp + KEY_SLOT)`: r1 to r5 are clobbered, r0
/// is the element's address or 0.
fn lookup(a: &mut Asm, map_fd: i32) {
    a.ld_map_fd(R1, map_fd)
        .mov_reg(R2, FP)
        .alu_imm(op::ADD, R2, i32::from(KEY_SLOT))
        .call(op::FUNC_MAP_LOOKUP_ELEM);
}

/// The program: kproftick over `[start, end)` with buckets of `1 << lres`
/// bytes, counting into the map whose descriptor is `map_fd` (8-byte
/// elements, two u32 words each).
pub fn program(map_fd: i32, start: u64, end: u64, lres: u32) -> Vec<Insn> {
    let first = start.saturating_add(SPECIAL_WORDS << lres);
    let mut a = Asm::new();
    let (no_elem0, counted, outside, bucket, done) =
        (a.label(), a.label(), a.label(), a.label(), a.label());
    // r6 = ctx; r7 = ctx->regs.ip
    a.mov_reg(R6, R1).ldx(op::DW, R7, R6, REGS_IP_OFFSET);
    // r0 = element 0 (words 0 and 1)
    a.mov_imm(R1, 0).stx(op::W, FP, R1, KEY_SLOT);
    lookup(&mut a, map_fd);
    a.jmp_imm(op::JEQ, R0, 0, no_elem0).ja(counted);
    a.bind(no_elem0);
    a.mov_imm(R0, 0).exit();
    // word 0 += 1
    a.bind(counted);
    a.mov_imm(R1, 1).atomic_add(op::W, R0, R1, EVEN_WORD);
    // r2 = slot, if first <= ip < end
    a.mov_reg(R2, R7);
    a.ld_imm64(R3, first).jmp_reg(op::JLT, R2, R3, outside);
    a.ld_imm64(R3, end).jmp_reg(op::JGE, R2, R3, outside);
    a.ld_imm64(R3, start)
        .alu_reg(op::SUB, R2, R3)
        .alu_imm(op::RSH, R2, lres as i32)
        .ja(bucket);
    // outside: word 1 += 1, which lives in element 0 already looked up
    a.bind(outside);
    a.atomic_add(op::W, R0, R1, ODD_WORD).mov_imm(R0, 0).exit();
    // key = slot >> 1; r8 = (slot & 1) << WORD_SHIFT
    a.bind(bucket);
    a.mov_reg(R8, R2)
        .alu_imm(op::AND, R8, 1)
        .alu_imm(op::LSH, R8, WORD_SHIFT)
        .alu_imm(op::RSH, R2, 1)
        .stx(op::W, FP, R2, KEY_SLOT);
    lookup(&mut a, map_fd);
    a.jmp_imm(op::JEQ, R0, 0, done);
    // word slot += 1
    a.alu_reg(op::ADD, R0, R8)
        .mov_imm(R1, 1)
        .atomic_add(op::W, R0, R1, 0);
    a.bind(done);
    a.mov_imm(R0, 0).exit();
    a.finish()
        .expect("the kproftick program binds every label once, within 16-bit jumps")
}

/// `_IOW('$', 8, __u32)`.
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;

fn permission(what: &str) -> SourceError {
    let knob = std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    SourceError::Permission(format!(
        "the kernel refused {what}: an in-kernel BPF histogram needs CAP_BPF and CAP_PERFMON \
         (or root), since /proc/sys/kernel/unprivileged_bpf_disabled is {knob} \
         (sysctl kernel.unprivileged_bpf_disabled)"
    ))
}

fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
}

fn io_error(context: impl Into<String>, source: io::Error) -> SourceError {
    SourceError::Io {
        context: context.into(),
        source,
    }
}

/// The shared mapping of the map's values.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
    words: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; it is
// only accessed through AtomicU32 loads and stores, which are sound from
// any thread.
unsafe impl Send for Mapping {}
// SAFETY: as above; &Mapping only hands out atomic accesses.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn atomics(&self) -> &[AtomicU32] {
        // SAFETY: `ptr` is a live, page-aligned, read-write shared mapping of
        // `len >= words * 4` bytes, valid until Drop; AtomicU32 has the size
        // and alignment of u32, and every access (ours and the BPF program's
        // atomic adds) is atomic, so there is no data race.
        unsafe { std::slice::from_raw_parts(self.ptr as *const AtomicU32, self.words) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; no reference
        // from `atomics` outlives `self`.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

/// A kpdata histogram counted in the kernel by a BPF program on the
/// cpu-clock events of every online CPU.
pub struct KernelHistogram {
    // Field order is drop order: events first (detaches the program), then
    // the program, the mapping, the map.
    events: Vec<OwnedFd>,
    _prog: OwnedFd,
    mapping: Mapping,
    _map: OwnedFd,
    header: [u32; 4],
}

impl KernelHistogram {
    /// Load the program for `[start, end)` with buckets of `1 << log_bucket`
    /// bytes at `frequency_hz` per CPU; disabled and cleared.
    pub fn open(
        start: u64,
        end: u64,
        log_bucket: u32,
        frequency_hz: u32,
    ) -> Result<KernelHistogram, SourceError> {
        if !cfg!(target_arch = "x86_64") {
            return Err(io_error(
                "the BPF histogram knows where the PC is only on x86_64",
                io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            ));
        }
        if frequency_hz == 0 || log_bucket > 31 || end <= start {
            return Err(SourceError::Frequency(format!(
                "a BPF histogram needs a nonzero frequency, a bucket log below 32 and a nonempty \
                 text range (got {frequency_hz} Hz, lres {log_bucket}, {start:#x}..{end:#x})"
            )));
        }
        let nbuf = (end - start).div_ceil(1 << log_bucket) as usize;
        let nbuf = nbuf.max(SPECIAL_WORDS as usize);
        let nwords = u32::try_from(nbuf).map_err(|_| {
            SourceError::Frequency(format!("{nbuf} buckets do not fit a kpdata word count"))
        })?;
        let elements = nbuf.div_ceil(2) as u32;

        let map = fd(&mut MapCreate {
            map_type: BPF_MAP_TYPE_ARRAY,
            key_size: std::mem::size_of::<u32>() as u32,
            value_size: std::mem::size_of::<Element>() as u32,
            max_entries: elements,
            map_flags: BPF_F_MMAPABLE,
        })
        .map_err(|e| {
            if is_permission(&e) {
                permission("creating a BPF map")
            } else {
                io_error(
                    format!("cannot create a BPF array map of {elements} elements"),
                    e,
                )
            }
        })?;

        let len =
            (elements as usize * std::mem::size_of::<Element>()).next_multiple_of(sys::page_size());
        // SAFETY: a fresh shared mapping of the map's values; the kernel
        // checks that `len` fits the map and that it was created mmapable.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io_error(
                format!("cannot map the {} KiB BPF histogram", len / 1024),
                io::Error::last_os_error(),
            ));
        }
        let mapping = Mapping {
            ptr,
            len,
            words: nbuf,
        };

        let insns = program(map.as_raw_fd(), start, end, log_bucket);
        let code = encode(&insns);
        let prog =
            match attr::load_program(BPF_PROG_TYPE_PERF_EVENT, 0, obj_name(b"kproftck"), &code) {
                Ok(fd) => fd,
                Err(e) if is_permission(&e.error) && e.log.is_empty() => {
                    return Err(permission("loading a BPF program"));
                }
                Err(e) => {
                    return Err(io_error(
                        format!(
                            "the BPF verifier rejected the kprof program: {}",
                            e.log_head()
                        ),
                        e.error,
                    ));
                }
            };

        let cpus = online_cpus().map_err(|e| io_error("cannot list the online CPUs", e))?;
        let period = 1_000_000_000 / u64::from(frequency_hz);
        let attr = PerfEventAttr {
            type_: sys::PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: sys::PERF_COUNT_SW_CPU_CLOCK,
            sample_period: period,
            sample_type: sys::sample::IP,
            flags: flag::DISABLED,
            ..PerfEventAttr::default()
        };
        let mut events = Vec::with_capacity(cpus.len());
        for &cpu in &cpus {
            let fd = sys::perf_event_open(&attr, -1, cpu as i32).map_err(|e| {
                if is_permission(&e) {
                    permission(&format!("the cpu-clock event of CPU {cpu}"))
                } else {
                    io_error(format!("cannot open the cpu-clock event of CPU {cpu}"), e)
                }
            })?;
            let fd_arg = prog.as_raw_fd();
            // SAFETY: SET_BPF takes the program descriptor by value; both
            // descriptors are live for the call.
            let ret = unsafe { libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_SET_BPF as _, fd_arg) };
            if ret < 0 {
                let e = io::Error::last_os_error();
                return Err(if is_permission(&e) {
                    permission(&format!("attaching BPF to the cpu-clock of CPU {cpu}"))
                } else {
                    io_error(
                        format!("cannot attach the BPF program to the cpu-clock of CPU {cpu}"),
                        e,
                    )
                });
            }
            events.push(fd);
        }
        let mut h = KernelHistogram {
            events,
            _prog: prog,
            mapping,
            _map: map,
            header: [1_000_000 / frequency_hz.max(1), nwords, 4, log_bucket],
        };
        h.clear();
        Ok(h)
    }

    /// Start counting on every CPU.
    pub fn enable(&mut self) -> Result<(), SourceError> {
        for fd in &self.events {
            sys::enable(fd).map_err(|e| io_error("cannot enable a cpu-clock event", e))?;
        }
        Ok(())
    }

    /// Stop counting on every CPU; a tick in progress finishes first (the
    /// ioctl waits for the event to be scheduled out on its CPU).
    pub fn disable(&mut self) {
        for fd in &self.events {
            let _ = sys::disable(fd);
        }
    }

    /// Zero the words and rewrite words 2–5 (Inferno's kprofbufinit).
    pub fn clear(&mut self) {
        let w = self.mapping.atomics();
        for a in w {
            a.store(0, Ordering::Relaxed);
        }
        for (i, &v) in self.header.iter().enumerate() {
            w[2 + i].store(v, Ordering::Relaxed);
        }
    }

    /// The words of kpdata, in host order.
    pub fn words(&self) -> Vec<u32> {
        self.mapping
            .atomics()
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect()
    }

    /// The number of CPUs counted.
    pub fn cpus(&self) -> usize {
        self.events.len()
    }
}

impl Drop for KernelHistogram {
    fn drop(&mut self) {
        self.disable();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoder_golden_instructions() {
        // Hand-checked against <linux/bpf.h>: opcode, dst|src<<4, off, imm.
        let cases: &[(Insn, [u8; 8])] = &[
            (Insn::mov_reg(6, 1), [0xbf, 0x16, 0, 0, 0, 0, 0, 0]),
            (
                Insn::ldx(op::DW, 7, 6, 128),
                [0x79, 0x67, 0x80, 0, 0, 0, 0, 0],
            ),
            (Insn::mov_imm(1, 0), [0xb7, 0x01, 0, 0, 0, 0, 0, 0]),
            (
                Insn::stx(op::W, 10, 1, -4),
                [0x63, 0x1a, 0xfc, 0xff, 0, 0, 0, 0],
            ),
            (
                Insn::alu_imm(op::ADD, 2, -4),
                [0x07, 0x02, 0, 0, 0xfc, 0xff, 0xff, 0xff],
            ),
            (Insn::call(1), [0x85, 0, 0, 0, 1, 0, 0, 0]),
            (Insn::jmp_imm(op::JEQ, 0, 0, 1), [0x15, 0, 1, 0, 0, 0, 0, 0]),
            (
                Insn::jmp_reg(op::JLT, 2, 3, 6),
                [0xad, 0x32, 6, 0, 0, 0, 0, 0],
            ),
            (
                Insn::jmp_reg(op::JGE, 2, 3, 4),
                [0x3d, 0x32, 4, 0, 0, 0, 0, 0],
            ),
            (
                Insn::atomic_add(op::W, 0, 1, 4),
                [0xc3, 0x10, 4, 0, 0, 0, 0, 0],
            ),
            (Insn::alu_reg(op::SUB, 2, 3), [0x1f, 0x32, 0, 0, 0, 0, 0, 0]),
            (Insn::alu_imm(op::RSH, 2, 3), [0x77, 0x02, 0, 0, 3, 0, 0, 0]),
            (Insn::alu_imm(op::AND, 8, 1), [0x57, 0x08, 0, 0, 1, 0, 0, 0]),
            (Insn::alu_imm(op::LSH, 8, 2), [0x67, 0x08, 0, 0, 2, 0, 0, 0]),
            (Insn::ja(3), [0x05, 0, 3, 0, 0, 0, 0, 0]),
            (Insn::exit(), [0x95, 0, 0, 0, 0, 0, 0, 0]),
        ];
        for (insn, bytes) in cases {
            assert_eq!(&insn.encode(), bytes, "{insn:?}");
        }
        let [lo, hi] = Insn::ld_imm64(3, 0xffff_ffff_8100_0030);
        assert_eq!(lo.encode(), [0x18, 0x03, 0, 0, 0x30, 0, 0x00, 0x81]);
        assert_eq!(hi.encode(), [0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        let [lo, hi] = Insn::ld_map_fd(1, 7);
        assert_eq!(lo.encode(), [0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(hi.encode(), [0; 8]);
    }

    /// The program as the kernel receives it: bytes and readable text.
    #[test]
    fn program_disassembly_golden() {
        let p = program(5, 0xffff_ffff_8100_0000, 0xffff_ffff_8240_0000, 3);
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/golden/kproftick.bpf.txt"
        );
        profdev_testkit::golden(path.as_ref(), asm::disassemble(&p).as_bytes());
    }

    #[test]
    fn jumps_land_inside_the_program() {
        let p = program(5, 0x1000, 0x2000, 3);
        for (i, insn) in p.iter().enumerate() {
            if insn.code & 0x07 == op::JMP
                && insn.code & 0xf0 != op::CALL
                && insn.code & 0xf0 != op::EXIT
            {
                let target = i as i64 + 1 + i64::from(insn.off);
                assert!((0..p.len() as i64).contains(&target), "insn {i}");
            }
        }
        assert_eq!(p.last(), Some(&Insn::exit()));
    }
}
