//! User stacks without frame pointers: unwinding a sample's copy of the user
//! stack with the mapped objects' `.eh_frame` (through `framehop`, as samply
//! does), falling back to frame pointers where that is better.
//!
//! Most binaries — Rust release builds, distribution C code — are built
//! without frame pointers, so the kernel's frame-pointer callchain stops
//! after a frame or two, or wanders into garbage. With
//! `SessionConfig::user_stack_bytes > 0` each sample carries the user
//! registers (ip, sp, bp) and a copy of the stack from sp upward; the call
//! frame information (CFI) in each object's `.eh_frame` says, for any
//! instruction, where the return address and the caller's registers are.
//!
//! Feed every record to a [`Tasks`] table made with
//! [`Tasks::with_objects`], in timestamp order, and call
//! [`UserUnwinder::unwind`] with that table for each sample: the mappings
//! and the objects (with their CFI, loaded once per object from the file
//! that was mapped) are the table's; the unwinder keeps only per-process
//! unwind modules, rebuilt when the process's mappings change, and reusable
//! buffers ([`UserUnwinder::unwind_into`] allocates nothing per sample).
//!
//! Which chain a sample gets, in order:
//!
//! 1. the CFI unwind, if it reached the root of the stack (`_start`, or a
//!    thread's `clone3`, whose CFI marks the return address undefined);
//! 2. a frame-pointer walk of the stack copy, if it reached the root (a zero
//!    frame pointer, which `_start` sets);
//! 3. otherwise the longer of: the CFI unwind as far as it went, extended
//!    with the kernel's frame-pointer callchain past the last frame both
//!    agree on ("spliced"); the kernel's frame-pointer callchain; the
//!    frame-pointer walk of the copy.
//!
//! Every return address must fall inside an executable mapping of the
//! process; a chain is cut at the first one that does not.
//!
//! Each executable mapping becomes a module whose load bias is taken from
//! the executable PT_LOAD that holds the mapping's page offset (see
//! `UnwindInfo::vaddr_of_mapping`): lld, rustc's default linker, puts the
//! text segment one page above its file offset, and a bias taken from the
//! read-only segment sharing that page made every lookup of a Rust release
//! binary miss its CFI.
//!
//! Measured (tests/unwind_complete.rs in the cli crate, 1 kHz, 16 KB
//! copies): every stack complete — reaching `_start` or the thread's start
//! routine — for C -O2 -fomit-frame-pointer, C++ -O2 with exceptions and a
//! second thread, and Rust release binaries, as perf's `--call-graph dwarf`
//! completes them.
//!
//! # Example
//!
//! ```no_run
//! use profdev_symbolize::{unwind::UserUnwinder, Objects, Tasks};
//! # let records: Vec<profdev_core::Record> = vec![];
//! let mut tasks = Tasks::with_objects(Objects::new());
//! let mut unwinder = UserUnwinder::new();
//! for r in &records {
//!     tasks.observe(r);
//!     if let profdev_core::Record::Sample(s) = r {
//!         let stack = unwinder.unwind(&tasks, s);
//!         println!("{:x?} by {:?}", stack.frames, stack.method);
//!     }
//! }
//! eprintln!("{}", unwinder.stats());
//! ```
//!
//! # Bugs
//!
//! * x86_64 only.
//! * An object whose file could not be opened when its mapping was
//!   reported (a process in another mount namespace whose
//!   `/proc/PID/map_files` entry is gone), or whose build id is not the one
//!   the kernel reported, unwinds by frame pointers only (counted once per
//!   object as `objects_missing`).
//! * The vDSO's CFI is read from profdev's own vDSO, the same image on
//!   the same kernel: a 32-bit process's vDSO is not the same.
//! * A stack deeper than the copy is cut where the copy ends unless the
//!   kernel's frame-pointer chain continues it. Deep stacks need a bigger
//!   copy: cargo (`cargo metadata`) completes 9 of 49 stacks with 16 KB
//!   (perf, with its 8 KB default: 9 of 67) and 49 of 49 with 65016 bytes.
//! * The dynamic loader's `_start` has no CFI: a sample taken while the
//!   loader relocates, before the program runs, ends at the return address
//!   into it (the root of that stack) and is counted as truncated.

use crate::tasks::Tasks;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use object::{Object, ObjectSection, ObjectSegment};
use profdev_core::{ProcessVa, Sample};
use std::collections::HashMap;
use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// Most frames kept per stack (deeper recursion is cut).
pub const MAX_FRAMES: usize = 512;

/// The page size mappings are aligned to.
const PAGE: u64 = 4096;

/// Section bytes shared between the modules of every process mapping the
/// same object.
#[derive(Clone, Debug, Default)]
pub struct Bytes(Arc<[u8]>);

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// What [`UserUnwinder`] needs from one object file (kept by its
/// [`crate::Object`]).
#[derive(Debug)]
pub(crate) struct UnwindInfo {
    /// PT_LOAD segments: (file offset, file size, vaddr, executable).
    loads: Vec<(u64, u64, u64, bool)>,
    text: Option<(Range<u64>, Bytes)>,
    eh_frame: Option<(Range<u64>, Bytes)>,
    eh_frame_hdr: Option<(Range<u64>, Bytes)>,
    got: Option<Range<u64>>,
    debug_frame: Option<Bytes>,
}

impl UnwindInfo {
    pub(crate) fn parse(bytes: &[u8]) -> Option<Self> {
        let file = crate::elf::parse(bytes, std::path::Path::new("")).ok()?;
        let section = |name: &str| {
            let s = file.section_by_name(name)?;
            let data = s.uncompressed_data().ok()?;
            Some((
                s.address()..s.address().saturating_add(s.size()),
                Bytes(Arc::from(&*data)),
            ))
        };
        Some(UnwindInfo {
            loads: file
                .segments()
                .map(|seg| {
                    let (offset, size) = seg.file_range();
                    let exec = match seg.flags() {
                        object::SegmentFlags::Elf { p_flags } => p_flags & object::elf::PF_X != 0,
                        _ => false,
                    };
                    (offset, size, seg.address(), exec)
                })
                .collect(),
            text: section(".text"),
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            got: file
                .section_by_name(".got")
                .map(|s| s.address()..s.address().saturating_add(s.size())),
            debug_frame: section(".debug_frame").map(|(_, b)| b),
        })
    }

    /// The link-time address at which an executable mapping starting at
    /// file offset `pgoff` (page aligned, as the kernel maps) begins.
    ///
    /// The mapping belongs to an executable PT_LOAD whose page-rounded file
    /// range holds `pgoff`, and takes that segment's offset-to-address
    /// delta. Linkers such as lld (rustc's default) and recent GNU ld give
    /// the text segment an address one page past its file offset, and its
    /// first page of file bytes is shared with the read-only segment
    /// before it: taking the first segment that holds `pgoff` (the
    /// read-only one) would put every module one page off and make every
    /// CFI lookup miss.
    fn vaddr_of_mapping(&self, pgoff: u64) -> Option<u64> {
        let holds = |&&(o, size, _, _): &&(u64, u64, u64, bool)| {
            pgoff >= o & !(PAGE - 1)
                && pgoff - (o & !(PAGE - 1)) < size.saturating_add(o & (PAGE - 1))
        };
        self.loads
            .iter()
            .filter(|l| l.3)
            .find(holds)
            .or_else(|| {
                self.loads
                    .iter()
                    .find(|&&(o, size, _, _)| pgoff >= o && pgoff - o < size)
            })
            .map(|&(o, _, vaddr, _)| vaddr.wrapping_add(pgoff).wrapping_sub(o))
    }

    fn section_info(&self) -> ExplicitModuleSectionInfo<Bytes> {
        ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text.as_ref().map(|t| t.0.clone()),
            text: self.text.as_ref().map(|t| t.1.clone()),
            got_svma: self.got.clone(),
            eh_frame_svma: self.eh_frame.as_ref().map(|t| t.0.clone()),
            eh_frame: self.eh_frame.as_ref().map(|t| t.1.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|t| t.0.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|t| t.1.clone()),
            debug_frame: self.debug_frame.clone(),
            ..ExplicitModuleSectionInfo::default()
        }
    }
}

/// One process's modules, built from its mappings in the tasks table.
#[derive(Clone, Default)]
struct Proc {
    unwinder: UnwinderX86_64<Bytes>,
    /// Executable mappings, sorted by start, non-overlapping.
    maps: Vec<Range<u64>>,
    /// The tasks table's `maps_generation` this was built from.
    generation: u64,
}

impl Proc {
    fn is_code(&self, addr: u64) -> bool {
        let i = self.maps.partition_point(|m| m.start <= addr);
        self.maps[..i].last().is_some_and(|m| addr < m.end)
    }
}

/// How a stack was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnwindMethod {
    /// CFI unwind of the stack copy, to the root.
    Cfi,
    /// Frame-pointer walk of the stack copy, to the root.
    FramePointers,
    /// CFI unwind as far as it went, continued by the kernel's
    /// frame-pointer callchain.
    Spliced,
    /// The kernel's frame-pointer callchain (no usable stack copy, or it was
    /// the longest partial result).
    KernelChain,
    /// A partial CFI or frame-pointer unwind (the root was not reached).
    Truncated,
    /// Nothing beyond the sampled instruction.
    IpOnly,
}

/// A user stack: `frames[0]` is the sampled instruction, the others are
/// return addresses, innermost first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserStack {
    /// Frame addresses in the process.
    pub frames: Vec<ProcessVa>,
    /// How they were found.
    pub method: UnwindMethod,
}

impl UserStack {
    /// The address to symbolize for frame `i`: the sampled instruction for
    /// frame 0, the call instruction (return address - 1) for the others.
    /// A return address can be the first byte of the next function when the
    /// call was the last instruction (a noreturn call).
    pub fn lookup_address(&self, i: usize) -> ProcessVa {
        let a = self.frames[i];
        if i == 0 {
            a
        } else {
            ProcessVa(a.0.wrapping_sub(1))
        }
    }
}

/// Counts kept so that no unwinding failure is silent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindStats {
    /// User stacks asked for.
    pub samples: u64,
    /// Reached the root by CFI.
    pub cfi: u64,
    /// Reached the root by a frame-pointer walk of the copy.
    pub frame_pointers: u64,
    /// CFI, then the kernel's frame-pointer chain.
    pub spliced: u64,
    /// The kernel's frame-pointer chain alone.
    pub kernel_chain: u64,
    /// Did not reach the root: the unwind failures.
    pub truncated: u64,
    /// Samples without registers or stack copy.
    pub no_stack_copy: u64,
    /// Mapped objects that could not be read or parsed.
    pub objects_missing: u64,
}

impl fmt::Display for UnwindStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} user stacks: {} unwound by CFI, {} by frame pointers, {} CFI continued by the \
             kernel's frame-pointer chain, {} kernel chain only, {} truncated (unwind failures); \
             {} without a stack copy; {} objects unreadable",
            self.samples,
            self.cfi,
            self.frame_pointers,
            self.spliced,
            self.kernel_chain,
            self.truncated,
            self.no_stack_copy,
            self.objects_missing
        )
    }
}

/// Unwinds user stacks of the processes of a [`Tasks`] table.
///
/// The unwinder keeps, per process, the unwind modules built from the
/// process's mappings (rebuilt when they change) and framehop's cache; the
/// mappings and objects themselves are the tasks table's.
pub struct UserUnwinder {
    procs: HashMap<u32, Proc>,
    cache: CacheX86_64,
    stats: UnwindStats,
    /// Objects whose unwind information is missing, counted once each;
    /// those no longer alive are dropped now and then, so that a machine
    /// that keeps starting and ending processes does not grow it.
    missing: HashMap<u64, std::sync::Weak<crate::objects::Object>>,
    /// Buffers reused from sample to sample.
    scratch: Scratch,
    unwinds: u64,
}

#[derive(Default)]
struct Scratch {
    kernel_chain: Vec<u64>,
    cfi: Vec<u64>,
    fp: Vec<u64>,
    kernel: Vec<u64>,
}

impl Default for UserUnwinder {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for UserUnwinder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserUnwinder")
            .field("processes", &self.procs.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl UserUnwinder {
    /// An unwinder with nothing cached.
    pub fn new() -> Self {
        UserUnwinder {
            procs: HashMap::new(),
            cache: CacheX86_64::new(),
            stats: UnwindStats::default(),
            missing: HashMap::new(),
            scratch: Scratch::default(),
            unwinds: 0,
        }
    }

    /// Counts so far.
    pub fn stats(&self) -> UnwindStats {
        self.stats
    }

    /// Processes whose modules are kept, and objects remembered as
    /// missing unwind information: what forgetting bounds.
    pub fn held(&self) -> (usize, usize) {
        (self.procs.len(), self.missing.len())
    }

    /// Process `pid`'s modules, (re)built from `tasks` if its mappings
    /// changed since.
    fn proc_for(&mut self, tasks: &Tasks, pid: u32) -> &Proc {
        let generation = tasks.maps_generation(pid);
        self.unwinds += 1;
        if self.unwinds % 4096 == 0 {
            // Processes the tasks table forgot.
            self.procs.retain(|&p, _| tasks.maps_generation(p) != 0);
        }
        let stale = self
            .procs
            .get(&pid)
            .is_none_or(|p| p.generation != generation);
        if stale {
            let mut p = Proc {
                generation,
                ..Proc::default()
            };
            for m in tasks.mappings(pid) {
                p.maps.push(m.start..m.end);
                let Some(object) = &m.object else { continue };
                let Some(info) = object.unwind_info() else {
                    if self.missing.len() >= 64 && self.missing.len().is_power_of_two() {
                        self.missing.retain(|_, o| o.strong_count() > 0);
                    }
                    let weak = std::sync::Arc::downgrade(object);
                    if self.missing.insert(object.id(), weak).is_none() {
                        self.stats.objects_missing += 1;
                    }
                    continue;
                };
                let Some(vaddr) = info.vaddr_of_mapping(m.pgoff) else {
                    continue;
                };
                p.unwinder.add_module(Module::new(
                    m.path.clone(),
                    m.start..m.end,
                    m.start.wrapping_sub(vaddr),
                    info.section_info(),
                ));
            }
            self.procs.insert(pid, p);
        }
        &self.procs[&pid]
    }

    /// The user stack of `sample`, in process `sample.pid` of `tasks`.
    pub fn unwind(&mut self, tasks: &Tasks, sample: &Sample) -> UserStack {
        let mut frames = Vec::new();
        let method = self.unwind_into(tasks, sample, &mut frames);
        UserStack {
            frames: frames.into_iter().map(ProcessVa).collect(),
            method,
        }
    }

    /// The user stack of `sample` into `out` (cleared first): frame
    /// addresses, innermost first, as [`UserStack::frames`]; returns how
    /// they were found. Allocates nothing once its buffers have grown.
    pub fn unwind_into(
        &mut self,
        tasks: &Tasks,
        sample: &Sample,
        out: &mut Vec<u64>,
    ) -> UnwindMethod {
        out.clear();
        self.stats.samples += 1;
        self.proc_for(tasks, sample.pid);
        let proc = &self.procs[&sample.pid];
        let stats = &mut self.stats;
        let Scratch {
            kernel_chain,
            cfi,
            fp,
            kernel,
        } = &mut self.scratch;
        kernel_chain.clear();
        kernel_chain.extend(
            sample
                .user_chain
                .iter()
                .copied()
                .filter(|&a| a < PERF_CONTEXT_MAX),
        );
        let (regs, stack) = match sample.user_regs {
            Some(r) if !sample.user_stack.is_empty() => (r, &sample.user_stack[..]),
            _ => {
                stats.no_stack_copy += 1;
                valid_prefix(proc, kernel_chain, out);
                let method = if out.len() > 1 {
                    stats.kernel_chain += 1;
                    UnwindMethod::KernelChain
                } else {
                    stats.truncated += 1;
                    UnwindMethod::IpOnly
                };
                if out.is_empty() && sample.ip != 0 {
                    out.push(sample.ip);
                }
                return method;
            }
        };
        let read = |addr: u64| read_u64(regs.sp, stack, addr);

        // 1. CFI.
        cfi.clear();
        let mut cfi_complete = false;
        {
            let mut read_stack = |a: u64| read(a).ok_or(());
            let mut it = proc.unwinder.iter_frames(
                regs.ip,
                UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp),
                &mut self.cache,
                &mut read_stack,
            );
            loop {
                match it.next() {
                    Ok(Some(f)) => {
                        let a = f.address();
                        if matches!(f, FrameAddress::ReturnAddress(_)) && !proc.is_code(a - 1) {
                            break;
                        }
                        cfi.push(a);
                        if cfi.len() == MAX_FRAMES {
                            break;
                        }
                    }
                    Ok(None) => {
                        cfi_complete = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
        if cfi_complete {
            stats.cfi += 1;
            out.extend_from_slice(cfi);
            return UnwindMethod::Cfi;
        }

        // 2. Frame pointers over the copy.
        let fp_complete = frame_pointer_walk(proc, regs.ip, regs.bp, regs.sp, &read, fp);
        if fp_complete {
            stats.frame_pointers += 1;
            out.extend_from_slice(fp);
            return UnwindMethod::FramePointers;
        }

        // 3. The longest partial answer: CFI continued by the kernel's
        // chain past the last frame both agree on, the kernel's chain, the
        // CFI unwind, the frame-pointer walk (the first longest wins).
        valid_prefix(proc, kernel_chain, kernel);
        let splice_at = match cfi.last() {
            Some(&last) if cfi.len() > 1 => kernel.iter().position(|&a| a == last),
            _ => None,
        };
        let spliced_len =
            splice_at.map_or(0, |k| (cfi.len() + kernel.len() - k - 1).min(MAX_FRAMES));
        let mut best = (cfi.len(), UnwindMethod::Truncated, 0u8);
        for candidate in [
            (spliced_len, UnwindMethod::Spliced, 1u8),
            (kernel.len(), UnwindMethod::KernelChain, 2),
            (fp.len(), UnwindMethod::Truncated, 3),
        ] {
            if candidate.0 > best.0 {
                best = candidate;
            }
        }
        match best.2 {
            0 => out.extend_from_slice(cfi),
            1 => {
                out.extend_from_slice(cfi);
                out.extend_from_slice(&kernel[splice_at.unwrap_or(0) + 1..]);
                out.truncate(MAX_FRAMES);
            }
            2 => out.extend_from_slice(kernel),
            _ => out.extend_from_slice(fp),
        }
        let mut method = best.1;
        match method {
            UnwindMethod::Spliced => stats.spliced += 1,
            UnwindMethod::KernelChain => stats.kernel_chain += 1,
            _ => stats.truncated += 1,
        }
        if out.len() <= 1 && method == UnwindMethod::Truncated {
            method = UnwindMethod::IpOnly;
        }
        if out.is_empty() {
            out.push(regs.ip);
        }
        method
    }
}

/// perf marks context switches in callchains with values at or above
/// `PERF_CONTEXT_MAX` (-4095 as u64).
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

/// Read the u64 at `addr` from a stack copy that starts at `sp`.
fn read_u64(sp: u64, stack: &[u8], addr: u64) -> Option<u64> {
    let off = usize::try_from(addr.checked_sub(sp)?).ok()?;
    let b = stack.get(off..off.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// The frame-pointer walk the kernel does, over the stack copy: the return
/// address is at `bp + 8`, the caller's frame pointer at `bp`. Complete when
/// it reaches a zero frame pointer.
fn frame_pointer_walk(
    proc: &Proc,
    ip: u64,
    mut bp: u64,
    sp: u64,
    read: &impl Fn(u64) -> Option<u64>,
    frames: &mut Vec<u64>,
) -> bool {
    frames.clear();
    frames.push(ip);
    let mut floor = sp;
    while frames.len() < MAX_FRAMES {
        if bp == 0 {
            return frames.len() > 1;
        }
        if bp < floor || bp % 8 != 0 {
            break;
        }
        // A hostile bp near the top of the address space must end the
        // walk, not overflow.
        let (Some(next), Some(ret), Some(above)) = (
            read(bp),
            bp.checked_add(8).and_then(read),
            bp.checked_add(16),
        ) else {
            break;
        };
        if ret == 0 || !proc.is_code(ret - 1) {
            break;
        }
        frames.push(ret);
        floor = above;
        bp = next;
    }
    false
}

/// The leading entries of a kernel callchain whose return addresses lie in
/// executable mappings.
fn valid_prefix(proc: &Proc, chain: &[u64], out: &mut Vec<u64>) {
    out.clear();
    for (i, &a) in chain.iter().enumerate().take(MAX_FRAMES) {
        if i > 0 && (a == 0 || !proc.is_code(a - 1)) {
            break;
        }
        out.push(a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_core::{Record, UserRegs};

    fn proc_with(map: Range<u64>) -> Proc {
        Proc {
            maps: vec![map],
            ..Proc::default()
        }
    }

    #[test]
    fn frame_pointer_walk_stops_at_zero_and_validates() {
        let p = proc_with(0x1000..0x2000);
        // sp = 0x100; frames at bp 0x110 -> 0x130 -> 0.
        let mut stack = vec![0u8; 0x40];
        let put = |s: &mut Vec<u8>, at: u64, v: u64| {
            let o = (at - 0x100) as usize;
            s[o..o + 8].copy_from_slice(&v.to_le_bytes());
        };
        put(&mut stack, 0x110, 0x130);
        put(&mut stack, 0x118, 0x1500);
        put(&mut stack, 0x130, 0);
        put(&mut stack, 0x138, 0x1600);
        let read = |a| read_u64(0x100, &stack, a);
        let mut f = Vec::new();
        let complete = frame_pointer_walk(&p, 0x1234, 0x110, 0x100, &read, &mut f);
        assert_eq!(f, vec![0x1234, 0x1500, 0x1600]);
        assert!(complete);
        // A return address outside any mapping cuts the walk.
        put(&mut stack, 0x138, 0x9999);
        let read = |a| read_u64(0x100, &stack, a);
        let complete = frame_pointer_walk(&p, 0x1234, 0x110, 0x100, &read, &mut f);
        assert_eq!(f, vec![0x1234, 0x1500]);
        assert!(!complete);
    }

    /// lld's layout (rustc's default linker): the text segment's address is
    /// one page above its file offset, and its first file page is shared
    /// with the read-only segment before it. The r-x mapping at page offset
    /// 0x12000 starts at link-time address 0x13000, not 0x12000.
    #[test]
    fn mapping_bias_comes_from_the_executable_segment() {
        let info = UnwindInfo {
            loads: vec![
                (0, 0x12f5c, 0, false),
                (0x12f60, 0x3e6f0, 0x13f60, true),
                (0x51650, 0x27f0, 0x53650, false),
            ],
            text: None,
            eh_frame: None,
            eh_frame_hdr: None,
            got: None,
            debug_frame: None,
        };
        assert_eq!(info.vaddr_of_mapping(0x12000), Some(0x13000));
        assert_eq!(info.vaddr_of_mapping(0x13000), Some(0x14000));
        // GNU ld's classic layout: offsets and addresses agree.
        let gnu = UnwindInfo {
            loads: vec![(0, 0x628, 0, false), (0x1000, 0x1fd, 0x1000, true)],
            ..info
        };
        assert_eq!(gnu.vaddr_of_mapping(0x1000), Some(0x1000));
    }

    /// An object whose build id is not the one the kernel reported for the
    /// mapping (rebuilt at the same path) is not used.
    #[test]
    fn a_different_build_id_is_a_missing_object() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let mmap = |build_id: Option<Vec<u8>>| Record::Mmap {
            pid: 7,
            tid: 7,
            addr: 0x5555_0000_0000,
            len: 0x1000,
            pgoff: 0,
            path: "/the/exe".into(),
            file: None,
            build_id,
            time: 0,
        };
        let mut tasks =
            Tasks::with_objects(crate::Objects::with_loader(move |_| Some(exe.clone())));
        let mut u = UserUnwinder::new();
        let s = Sample {
            pid: 7,
            ip: 0x5555_0000_0010,
            ..Sample::default()
        };
        tasks.observe(&mmap(Some(vec![1, 2, 3])));
        u.unwind(&tasks, &s);
        assert_eq!(u.stats().objects_missing, 1);
        tasks.observe(&mmap(None));
        u.unwind(&tasks, &s);
        assert_eq!(u.stats().objects_missing, 1);
    }

    #[test]
    fn own_vdso_has_cfi() {
        let image = crate::objects::own_vdso().expect("a vDSO in /proc/self/maps");
        let info = UnwindInfo::parse(&image).expect("the vDSO is ELF");
        assert!(info.eh_frame.is_some() || info.eh_frame_hdr.is_some());
        assert_eq!(info.vaddr_of_mapping(0), Some(0));
    }

    #[test]
    fn no_stack_copy_uses_the_kernel_chain() {
        let mut tasks = Tasks::with_objects(crate::Objects::with_loader(|_| None));
        let mut u = UserUnwinder::new();
        tasks.observe(&Record::Mmap {
            pid: 7,
            tid: 7,
            addr: 0x1000,
            len: 0x1000,
            pgoff: 0,
            path: "/nonexistent".into(),
            file: None,
            build_id: None,
            time: 0,
        });
        let s = Sample {
            pid: 7,
            tid: 7,
            ip: 0x1010,
            user_chain: vec![0x1010, 0x1100, 0x1200, 0x77777, 0x1300],
            ..Sample::default()
        };
        let st = u.unwind(&tasks, &s);
        assert_eq!(st.method, UnwindMethod::KernelChain);
        assert_eq!(
            st.frames,
            vec![ProcessVa(0x1010), ProcessVa(0x1100), ProcessVa(0x1200)]
        );
        assert_eq!(st.lookup_address(1), ProcessVa(0x10ff));
        let stats = u.stats();
        assert_eq!(
            (stats.samples, stats.no_stack_copy, stats.objects_missing),
            (1, 1, 1)
        );
        // Registers but nothing known: the ip alone, counted as truncated.
        let s = Sample {
            pid: 8,
            ip: 0x5000,
            user_regs: Some(UserRegs {
                ip: 0x5000,
                sp: 0x100,
                bp: 0x8,
            }),
            user_stack: vec![0; 64],
            ..Sample::default()
        };
        let st = u.unwind(&tasks, &s);
        assert_eq!(st.frames, vec![ProcessVa(0x5000)]);
        assert_eq!(st.method, UnwindMethod::IpOnly);
        assert_eq!(u.stats().truncated, 1);
    }
}
