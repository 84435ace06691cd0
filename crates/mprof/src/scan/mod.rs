//! The live leak scan (`profdev mprof -p PID --scan`): the blocks of
//! glibc's malloc that nothing reachable points to, found in a stopped
//! process's memory, including blocks allocated before anything was
//! attached.
//!
//! Everything here is a pure function of what a [`Memory`] reader returns,
//! the process's mappings and its threads' registers ([`ThreadRoots`]),
//! in two phases: [`copy`], while the caller (`profdev_attach::scan`)
//! holds the process stopped, walks the heap and copies the heaps, the
//! mmapped chunks and the roots through a reader of `/proc/PID/mem`;
//! [`scan_copy`], after the process is let go, marks and reports. The
//! pause is the copy (with mprof's table in the process, the mark and
//! the table's reading too). Tests hand over synthetic memory images.
//!
//! **The heap** (`heap`), walked read-only:
//!
//! * `main_arena` is found in libc's writable data (its file-backed
//!   writable mappings and the anonymous one right after them) by its
//!   shape: at least half of its 127 bins empty, each an empty bin's `fd`
//!   and `bk` pointing at the bin itself, and a non-null `next`. Its `top`
//!   names the main heap's top chunk.
//! * The main heap (`[heap]`): chunk headers from the mapping's start to
//!   that top chunk, each size checked (a multiple of 16, at least 32, not
//!   past the mapping, no `IS_MMAPPED` bit) before the walk moves on.
//! * The other arenas, from `main_arena.next` (at most [`MAX_ARENAS`]):
//!   each lies in a heap aligned to [`HEAP_MAX_SIZE`] whose `heap_info`
//!   names it; its heaps are its top chunk's and their `prev` chain (at
//!   most [`MAX_HEAPS`] each), each walked from its first chunk (after the
//!   `malloc_state` in the arena's first heap, after the `heap_info` in
//!   the others) to the top chunk or to `heap_info.size`.
//! * Mmapped chunks: an anonymous writable mapping that starts with a
//!   chunk header of `IS_MMAPPED` whose size is whole pages within the
//!   mapping (and the chunks following it, mappings being merged).
//! * A chunk is in use when the next header's `PREV_INUSE` bit says so;
//!   those in a tcache or a fastbin are free all the same: every in-use
//!   chunk of the size of a `tcache_perthread_struct` (0x290, glibc
//!   2.30 and later; 0x250 before) whose 64 lists each lead through chunks
//!   of that list's size is a thread's tcache, and its lists' chunks are
//!   free; each arena's ten fastbins likewise. Links are read with glibc
//!   2.32's safe-linking (`(address >> 12) ^ next`), else as they are.
//!
//! **The mark** (`mark`), conservative: every 8-byte aligned word of the
//! roots that points into a block (its first byte up to its chunk's end:
//! interior pointers count) marks it; a marked block's words mark others,
//! transitively. The roots, as valgrind's memcheck takes all the memory
//! the client maps: every thread's general and vector registers (XMM0-15
//! and, with XSAVE, the AVX and AVX-512 parts the kernel saves: a copy in
//! progress holds pointers there); and every readable
//! and writable mapping, private or shared (modules' data and bss, TLS,
//! memory the program maps itself: Python's object arenas, whose blocks
//! counted as leaked before, 94 of 1,453 in an idle `python3`, now none),
//! except
//!
//! * glibc's heaps and mmapped chunks: the blocks, scanned when reached;
//! * a thread's stack below its stack pointer less the 128-byte red zone
//!   (the stack's mapping also holds its TLS and thread control block:
//!   glibc places them at the top);
//! * kernel pages (`[vvar]`, `[vsyscall]`...) and devices (`/dev/...`
//!   but `/dev/zero`, shared anonymous memory, and `/dev/shm`); guard
//!   pages and read-only memory, which are no roots at all;
//! * glibc's cache of dead threads' stacks, whose stale words would hide
//!   leaks: anonymous memory right above a guard page (no access),
//!   holding no live thread's stack pointer or `fs` base, whose last
//!   16 KiB hold a thread control block (a `struct pthread` whose `tcb`
//!   and `self` words are its own address); its `dtv` word alone is a
//!   root (the cache keeps that block);
//! * the tables of mprof's library when it is in the process (`table`).
//!
//! **Where mprof saw them** (`table`): in a process carrying a counting
//! libprofdev_mprof (launched under mprof or attached by it), the mark
//! runs while the process is still held, and each unreachable block's
//! entry in mprof's block table, and the site, stack and module it names,
//! are read then ([`Scan::seen`], [`Scan::origins`]).
//!
//! **Bounds.** Every walk is bounded by the sizes of the mappings it lies
//! in; every list by the number of chunks walked; every read by
//! [`Limits::max_bytes`] in all, roots and mprof's table included (the
//! scan is refused beyond, before the read is made, never reported in
//! part: the copy is at most that large); a
//! header that does not parse ends the scan with the address where it
//! did not ([`ScanError::Corrupt`]), never a loop.

mod heap;
mod mark;
mod report;
mod table;

#[cfg(test)]
mod tests;

pub use report::{render, Group, OriginGroup, Seen};

use profdev_symbolize::maps::MapsEntry;
use std::cell::Cell;

/// glibc's `HEAP_MAX_SIZE` on 64-bit machines: a non-main arena's heaps
/// are this size and aligned to it.
pub const HEAP_MAX_SIZE: u64 = 64 << 20;
/// At most this many arenas are followed from `main_arena.next`.
pub const MAX_ARENAS: usize = 1024;
/// At most this many heaps per arena.
pub const MAX_HEAPS: usize = 1024;
/// The red zone below a thread's stack pointer (x86-64 SysV ABI).
pub const RED_ZONE: u64 = 128;

/// The memory of the stopped process.
pub trait Memory {
    /// Fill `buf` with the bytes at `addr`; false when any of them cannot
    /// be read (or the reader gave up: [`Memory::expired`]).
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;

    /// Whether the reader's time is up: the copy then stops with
    /// [`ScanError::Expired`]. Checked before every read.
    fn expired(&self) -> bool {
        false
    }
}

/// A stopped thread's roots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadRoots {
    /// Its id.
    pub tid: u32,
    /// Its stack pointer.
    pub sp: u64,
    /// Its `fs` base (the thread pointer: TLS).
    pub fs_base: u64,
    /// Its general and vector registers' words, each a candidate pointer.
    pub registers: Vec<u64>,
}

/// What a scan may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes read from the process in all (heaps, roots, block contents).
    pub max_bytes: u64,
}

impl Limits {
    /// 1 GiB.
    pub const DEFAULT: Limits = Limits { max_bytes: 1 << 30 };
}

/// Why a scan gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanError {
    /// The process does not allocate with glibc's malloc, or glibc's
    /// state was not found: the sentence says which.
    NotGlibc(String),
    /// A heap header or list does not parse.
    Corrupt {
        /// Where.
        at: u64,
        /// What was wrong.
        what: String,
    },
    /// More than [`Limits::max_bytes`] would be read.
    TooLarge {
        /// The limit.
        max: u64,
    },
    /// A read the heap's own headers asked for failed.
    Unreadable {
        /// Its address.
        at: u64,
        /// Its length.
        len: u64,
    },
    /// The reader's time ran out ([`Memory::expired`]).
    Expired,
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanError::NotGlibc(why) => write!(f, "{why}"),
            ScanError::Corrupt { at, what } => write!(
                f,
                "glibc's heap does not parse at 0x{at:x}: {what} (a corrupt heap, an allocator \
                 other than glibc's, or a thread stopped inside malloc: try again)"
            ),
            ScanError::TooLarge { max } => write!(
                f,
                "the heap and roots need more than {} MiB read: larger than the scan's bound",
                max >> 20
            ),
            ScanError::Unreadable { at, len } => {
                write!(f, "cannot read {len} bytes at 0x{at:x} of the process")
            }
            ScanError::Expired => write!(f, "the scan ran out of time"),
        }
    }
}

impl std::error::Error for ScanError {}

/// What a scan found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Blocks in use (tcache and fastbin chunks left out).
    pub blocks: u64,
    /// Their usable bytes.
    pub bytes: u64,
    /// The unreachable blocks: (user address, usable size), by address.
    pub unreachable: Vec<(u64, u64)>,
    /// Arenas walked (the main one included).
    pub arenas: usize,
    /// Chunks found free in tcaches and fastbins.
    pub cached_free: u64,
    /// Threads whose registers and stacks were roots.
    pub threads: usize,
    /// Bytes of roots scanned (stacks and the other mappings).
    pub root_bytes: u64,
    /// Bytes read from the process in all.
    pub read_bytes: u64,
    /// With mprof's block table in the process: where mprof saw each
    /// unreachable block allocated (by `unreachable`'s order; `None`:
    /// not in its table). `None` without the table.
    pub seen: Option<Vec<Option<Seen>>>,
    /// Why mprof's table, found in the process, was not read (the time
    /// or the bytes ran out first): the scan stands without it.
    pub unseen: Option<String>,
    /// mprof in the process samples (`--sample-bytes`): the blocks not
    /// in its table were left out by the sampling, or allocated before it.
    pub sampled: bool,
}

impl Scan {
    /// The unreachable blocks grouped by usable size, most bytes first.
    pub fn groups(&self) -> Vec<Group> {
        report::groups(&self.unreachable)
    }

    /// With mprof's table ([`Scan::seen`]): the unreachable blocks
    /// grouped by allocating stack (or site), most bytes first, those it
    /// did not see in one group of their own.
    pub fn origins(&self) -> Option<Vec<OriginGroup>> {
        self.seen
            .as_ref()
            .map(|seen| report::origins(&self.unreachable, seen))
    }
}

/// Reads through a [`Memory`], counting against the limit.
pub(crate) struct Reader<'a> {
    mem: &'a dyn Memory,
    read: Cell<u64>,
    max: u64,
}

/// The size of one piece of a streamed read.
const PIECE: usize = 1 << 20;

impl<'a> Reader<'a> {
    fn new(mem: &'a dyn Memory, limits: Limits) -> Self {
        Reader {
            mem,
            read: Cell::new(0),
            max: limits.max_bytes,
        }
    }

    fn charge(&self, len: u64) -> Result<(), ScanError> {
        if self.mem.expired() {
            return Err(ScanError::Expired);
        }
        let total = self.read.get().saturating_add(len);
        if total > self.max {
            return Err(ScanError::TooLarge { max: self.max });
        }
        self.read.set(total);
        Ok(())
    }

    /// The bytes of [start, end), whole (charged before it is allocated).
    pub(crate) fn load(&self, start: u64, end: u64) -> Result<Vec<u8>, ScanError> {
        let len = end.saturating_sub(start);
        self.charge(len)?;
        let mut v = vec![0u8; len as usize];
        for (i, piece) in v.chunks_mut(PIECE).enumerate() {
            let at = start + (i * PIECE) as u64;
            if self.mem.expired() {
                return Err(ScanError::Expired);
            }
            if !self.mem.read(at, piece) {
                return Err(ScanError::Unreadable { at, len });
            }
        }
        Ok(v)
    }

    /// One little-endian word at `addr`, if readable (charged).
    pub(crate) fn word(&self, addr: u64) -> Result<Option<u64>, ScanError> {
        self.charge(8)?;
        let mut b = [0u8; 8];
        Ok(self.mem.read(addr, &mut b).then(|| u64::from_le_bytes(b)))
    }

    /// The readable bytes of [start, end) (8-aligned), in pieces of at
    /// most 1 MiB; an unreadable piece is left out (a root that cannot be
    /// read holds nothing the scan can see).
    pub(crate) fn load_pieces(
        &self,
        start: u64,
        end: u64,
        out: &mut Vec<heap::Segment>,
    ) -> Result<(), ScanError> {
        let mut at = (start + 7) & !7;
        let end = end & !7;
        while at < end {
            let n = ((end - at) as usize).min(PIECE);
            self.charge(n as u64)?;
            let mut bytes = vec![0u8; n];
            if self.mem.read(at, &mut bytes) {
                out.push(heap::Segment { start: at, bytes });
            }
            at += n as u64;
        }
        Ok(())
    }
}

/// Each little-endian 8-byte word of `bytes` to `f`.
pub(crate) fn words(bytes: &[u8], f: &mut dyn FnMut(u64)) {
    for w in bytes.chunks_exact(8) {
        f(u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
}

/// What a scan needs of the process, copied while it is stopped
/// ([`copy`]); [`scan_copy`] works on it after the process is let go.
pub struct Copied {
    heap: heap::Heap,
    roots: Vec<heap::Segment>,
    threads: Vec<ThreadRoots>,
    read_bytes: u64,
    /// With mprof's table: the scan, marked while the process was held
    /// (the table's entries of the unreachable blocks read then).
    done: Option<Scan>,
}

impl Copied {
    /// Bytes read from the process.
    pub fn read_bytes(&self) -> u64 {
        self.read_bytes
    }
}

/// While the process is stopped: find glibc's arenas, walk their heaps,
/// and copy the heaps, the mmapped chunks and the roots, through `mem`
/// (the process mapped as `maps`, with `threads`' registers).
pub fn copy(
    mem: &dyn Memory,
    maps: &[MapsEntry],
    threads: &[ThreadRoots],
    limits: Limits,
) -> Result<Copied, ScanError> {
    let reader = Reader::new(mem, limits);
    let heap = heap::Heap::walk(&reader, maps, threads)?;
    let table = table::find(&reader, maps)?;
    let skip = table.as_ref().map(|t| t.skip()).unwrap_or_default();
    let mut roots = Vec::new();
    for r in mark::roots(maps, threads, &heap, &skip) {
        let mut pieces = Vec::new();
        reader.load_pieces(r.start, r.end, &mut pieces)?;
        match r
            .may_be_dead_stack
            .then(|| mark::dead_stack(&pieces, r.end, threads))
        {
            Some(Some(tcb)) => roots.extend(pieces.iter().find_map(|s| {
                let dtv = s.slice(tcb + 8, tcb + 16)?;
                Some(heap::Segment {
                    start: tcb + 8,
                    bytes: dtv.to_vec(),
                })
            })),
            _ => roots.append(&mut pieces),
        }
    }
    let mut c = Copied {
        heap,
        roots,
        threads: threads.to_vec(),
        read_bytes: reader.read.get(),
        done: None,
    };
    if let Some(t) = table {
        let mut s = scan_copy(&c);
        s.sampled = t.sampled();
        match t.seen(&reader, maps, &s.unreachable) {
            Ok(seen) => s.seen = Some(seen),
            Err(e @ (ScanError::Expired | ScanError::TooLarge { .. })) => {
                s.unseen = Some(match e {
                    ScanError::TooLarge { max } => {
                        format!("it would pass the scan's bound of {} MiB read", max >> 20)
                    }
                    _ => "the time the process may be held ran out".into(),
                })
            }
            Err(e) => return Err(e),
        }
        s.read_bytes = reader.read.get();
        c.read_bytes = s.read_bytes;
        c.done = Some(s);
    }
    Ok(c)
}

/// The mark over what [`copy`] copied, and the unreachable blocks: no
/// reading of the process.
pub fn scan_copy(c: &Copied) -> Scan {
    if let Some(s) = &c.done {
        return s.clone();
    }
    let blocks = c.heap.blocks();
    let reached = mark::mark(&c.heap, &blocks, &c.roots, &c.threads);
    let mut scan = Scan {
        arenas: c.heap.arenas,
        cached_free: c.heap.free.len() as u64,
        threads: c.threads.len(),
        root_bytes: c.roots.iter().map(|s| s.bytes.len() as u64).sum(),
        read_bytes: c.read_bytes,
        ..Scan::default()
    };
    for (b, &reached) in blocks.iter().zip(&reached) {
        scan.blocks += 1;
        scan.bytes += b.usable();
        if !reached {
            scan.unreachable.push((b.mem(), b.usable()));
        }
    }
    scan
}

/// [`copy`] then [`scan_copy`].
pub fn scan(
    mem: &dyn Memory,
    maps: &[MapsEntry],
    threads: &[ThreadRoots],
    limits: Limits,
) -> Result<Scan, ScanError> {
    copy(mem, maps, threads, limits).map(|c| scan_copy(&c))
}
