//! glibc's heap, walked read-only: `main_arena` found by its shape, the
//! arenas, their heaps' chunks, mmapped chunks, and the chunks tcaches
//! and fastbins hold (free, though their in-use bit is set).

use super::{Reader, ScanError, ThreadRoots, HEAP_MAX_SIZE, MAX_ARENAS, MAX_HEAPS};
use profdev_symbolize::maps::MapsEntry;
use std::collections::HashSet;

/// `sizeof(struct malloc_state)` (glibc 2.27 and later, 64-bit).
pub(crate) const STATE_SIZE: u64 = 2200;
/// Offsets in `struct malloc_state`.
pub(crate) const FASTBINS: u64 = 16;
pub(crate) const NFASTBINS: u64 = 10;
pub(crate) const TOP: u64 = 96;
pub(crate) const BINS: u64 = 112;
pub(crate) const NBINS: u64 = 127;
pub(crate) const NEXT: u64 = 2160;
const PREV_INUSE: u64 = 1;
const IS_MMAPPED: u64 = 2;
const PAGE: u64 = 4096;

/// Bytes read from the process at `start`.
pub(crate) struct Segment {
    pub(crate) start: u64,
    pub(crate) bytes: Vec<u8>,
}

impl Segment {
    pub(crate) fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }

    pub(crate) fn slice(&self, start: u64, end: u64) -> Option<&[u8]> {
        if start < self.start || end > self.end() || start > end {
            return None;
        }
        self.bytes
            .get((start - self.start) as usize..(end - self.start) as usize)
    }

    pub(crate) fn word(&self, addr: u64) -> Option<u64> {
        let b = self.slice(addr, addr.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }
}

/// One chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// Its header's address.
    pub(crate) addr: u64,
    /// Its size (flags cleared).
    pub(crate) size: u64,
    /// The next header's `PREV_INUSE` (mmapped chunks: always).
    pub(crate) in_use: bool,
    /// An mmapped chunk (its own mapping).
    pub(crate) mmapped: bool,
    /// The segment holding its bytes.
    pub(crate) seg: Option<usize>,
}

impl Chunk {
    /// The address malloc returned.
    pub(crate) fn mem(&self) -> u64 {
        self.addr + 16
    }

    /// The end of its bytes, [`Chunk::mem`] plus [`Chunk::usable`]: an
    /// interior pointer lies in [mem, end). A heap chunk's last 8 bytes
    /// are the next chunk's `prev_size` field, which holds data while
    /// this chunk is in use.
    pub(crate) fn end(&self) -> u64 {
        self.mem() + self.usable()
    }

    /// `malloc_usable_size`.
    pub(crate) fn usable(&self) -> u64 {
        if self.mmapped {
            self.size - 16
        } else {
            self.size - 8
        }
    }
}

/// The heap as walked.
pub(crate) struct Heap {
    /// Every chunk, by address.
    pub(crate) chunks: Vec<Chunk>,
    /// The bytes of the heaps and mmapped chunks.
    pub(crate) segments: Vec<Segment>,
    /// Chunks (header addresses) in a tcache or a fastbin.
    pub(crate) free: HashSet<u64>,
    /// Arenas walked.
    pub(crate) arenas: usize,
    /// The address ranges of heaps and mmapped chunks: never roots.
    pub(crate) ranges: Vec<(u64, u64)>,
}

fn corrupt(at: u64, what: impl Into<String>) -> ScanError {
    ScanError::Corrupt {
        at,
        what: what.into(),
    }
}

fn word_at(b: &[u8], off: u64) -> Option<u64> {
    let off = usize::try_from(off).ok()?;
    Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

fn is_libc(m: &MapsEntry) -> bool {
    std::path::Path::new(m.file_path())
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("libc.so") || n.starts_with("libc-"))
}

fn anonymous_rw(m: &MapsEntry) -> bool {
    m.path.is_empty() && m.perms.read() && m.perms.write() && !m.perms.shared()
}

/// The mapping holding `addr`.
pub(crate) fn mapping_of(maps: &[MapsEntry], addr: u64) -> Option<&MapsEntry> {
    maps.iter().find(|m| m.start <= addr && addr < m.end)
}

/// How many of the 127 bins at `b[p..]` (an arena at `addr`) are empty,
/// if the bins look like an arena's (no null link).
fn empty_bins(b: &[u8], p: u64, addr: u64) -> Option<u64> {
    let mut empty = 0;
    for i in 0..NBINS {
        let fd = word_at(b, p + BINS + 16 * i)?;
        let bk = word_at(b, p + BINS + 16 * i + 8)?;
        let bin = addr + TOP + 16 * i;
        if fd == bin && bk == bin {
            empty += 1;
        } else if fd == 0 || bk == 0 {
            return None;
        }
    }
    Some(empty)
}

/// `main_arena`'s address: in libc's writable data (and the anonymous
/// mapping right after it), the place that looks most like an arena.
pub(crate) fn find_main_arena(r: &Reader, maps: &[MapsEntry]) -> Result<u64, ScanError> {
    let mut best: Option<(u64, u64)> = None;
    let mut libc = false;
    for (i, m) in maps.iter().enumerate() {
        if !is_libc(m) {
            continue;
        }
        libc = true;
        if !(m.perms.read() && m.perms.write()) || m.perms.shared() {
            continue;
        }
        let mut end = m.end;
        if let Some(n) = maps
            .get(i + 1)
            .filter(|n| n.start == m.end && anonymous_rw(n))
        {
            end = n.end;
        }
        let b = r.load(m.start, end)?;
        let mut p = 0u64;
        while p + STATE_SIZE <= b.len() as u64 {
            let addr = m.start + p;
            if word_at(&b, p + NEXT).is_some_and(|n| n != 0) {
                if let Some(e) = empty_bins(&b, p, addr) {
                    if e >= NBINS / 2 && best.is_none_or(|(be, _)| e > be) {
                        best = Some((e, addr));
                    }
                }
            }
            p += 8;
        }
    }
    if !libc {
        return Err(ScanError::NotGlibc(
            "it maps no glibc (libc.so.6): statically linked or another C library, and the \
             scan reads glibc's malloc only"
                .into(),
        ));
    }
    best.map(|(_, a)| a).ok_or_else(|| {
        ScanError::NotGlibc(
            "glibc's main_arena was not found in libc's data: not a glibc malloc the scan \
             knows (2.27 or later, 64-bit)"
                .into(),
        )
    })
}

/// Walk the chunks of `seg` from `start` to `top` (the arena's top chunk,
/// not a block) or to `end`, into `out`. Each size is checked before the
/// walk moves past it.
pub(crate) fn walk(
    seg: &Segment,
    seg_idx: usize,
    start: u64,
    end: u64,
    top: Option<u64>,
    out: &mut Vec<Chunk>,
) -> Result<(), ScanError> {
    let mut c = start;
    let mut prev: Option<usize> = None;
    loop {
        if c == end {
            break;
        }
        let raw = seg
            .word(c + 8)
            .ok_or_else(|| corrupt(c, "a chunk header past the heap's end"))?;
        if let Some(i) = prev {
            out[i].in_use = raw & PREV_INUSE != 0;
        }
        prev = None;
        if Some(c) == top {
            break;
        }
        let size = raw & !7;
        if size == 0 {
            break; // a fencepost ends the heap
        }
        if size == 16 {
            c += 16; // a fencepost
            continue;
        }
        if size < 32 || size % 16 != 0 || size > end - c {
            return Err(corrupt(c, format!("chunk size 0x{raw:x}")));
        }
        if raw & IS_MMAPPED != 0 {
            return Err(corrupt(c, "an mmapped chunk inside a heap"));
        }
        prev = Some(out.len());
        out.push(Chunk {
            addr: c,
            size,
            in_use: false,
            mmapped: false,
            seg: Some(seg_idx),
        });
        c += size;
    }
    if top.is_some_and(|t| t >= start && t < end) && c != top.unwrap_or(0) {
        return Err(corrupt(c, "the walk did not reach the top chunk"));
    }
    Ok(())
}

/// The mmapped chunks at the start of mapping `m` (mappings next to each
/// other merge: one after the other).
fn mmapped(r: &Reader, m: &MapsEntry, out: &mut Vec<Chunk>) -> Result<(), ScanError> {
    let mut pos = m.start;
    while pos + 16 <= m.end {
        let (Some(prev_size), Some(raw)) = (r.word(pos)?, r.word(pos + 8)?) else {
            break;
        };
        let size = raw & !7;
        if prev_size != 0 || raw & 7 != IS_MMAPPED || size < PAGE || size % PAGE != 0 {
            break;
        }
        if size > m.end - pos {
            break;
        }
        out.push(Chunk {
            addr: pos,
            size,
            in_use: true,
            mmapped: true,
            seg: None,
        });
        pos += size;
    }
    Ok(())
}

/// An arena: its address and its `malloc_state`'s bytes.
struct Arena {
    addr: u64,
    state: Vec<u8>,
}

impl Arena {
    fn top(&self) -> u64 {
        word_at(&self.state, TOP).unwrap_or(0)
    }
}

impl Heap {
    /// Find and walk every arena's heaps and the mmapped chunks; mark the
    /// tcaches' and fastbins' chunks free.
    pub(crate) fn walk(
        r: &Reader,
        maps: &[MapsEntry],
        threads: &[ThreadRoots],
    ) -> Result<Heap, ScanError> {
        let main = find_main_arena(r, maps)?;
        let mut arenas = vec![Arena {
            addr: main,
            state: r.load(main, main + STATE_SIZE)?,
        }];
        let mut next = word_at(&arenas[0].state, NEXT).unwrap_or(main);
        while next != main {
            if arenas.len() >= MAX_ARENAS {
                return Err(corrupt(next, "more arenas than the scan follows"));
            }
            if arenas.iter().any(|a| a.addr == next) {
                return Err(corrupt(
                    next,
                    "the arenas' list does not lead back to main_arena",
                ));
            }
            if !mapping_of(maps, next).is_some_and(anonymous_rw) {
                return Err(corrupt(next, "an arena outside anonymous memory"));
            }
            let state = r.load(next, next + STATE_SIZE)?;
            let n = word_at(&state, NEXT).unwrap_or(0);
            arenas.push(Arena { addr: next, state });
            next = n;
        }
        let mut heap = Heap {
            chunks: Vec::new(),
            segments: Vec::new(),
            free: HashSet::new(),
            arenas: arenas.len(),
            ranges: Vec::new(),
        };
        heap.main_heap(r, maps, &arenas[0])?;
        for a in &arenas[1..] {
            heap.arena_heaps(r, maps, a)?;
        }
        for m in maps.iter().filter(|m| anonymous_rw(m)) {
            let taken = heap.ranges.iter().any(|&(s, e)| s < m.end && m.start < e);
            let stack = threads.iter().any(|t| m.start <= t.sp && t.sp < m.end);
            if !taken && !stack {
                let from = heap.chunks.len();
                mmapped(r, m, &mut heap.chunks)?;
                if let (Some(f), Some(l)) = (heap.chunks.get(from), heap.chunks.last()) {
                    let (start, end) = (f.addr, l.end());
                    heap.ranges.push((start, end));
                    let idx = heap.segments.len();
                    heap.segments.push(Segment {
                        start,
                        bytes: r.load(start, end)?,
                    });
                    heap.chunks[from..]
                        .iter_mut()
                        .for_each(|c| c.seg = Some(idx));
                }
            }
        }
        heap.chunks.sort_by_key(|c| c.addr);
        for a in &arenas {
            heap.fastbins(a)?;
        }
        heap.tcaches();
        Ok(heap)
    }

    fn main_heap(&mut self, r: &Reader, maps: &[MapsEntry], a: &Arena) -> Result<(), ScanError> {
        let top = a.top();
        if top == a.addr + TOP {
            return Ok(()); // malloc never ran: its top is still the unsorted bin
        }
        let Some(m) = maps
            .iter()
            .find(|m| m.path == "[heap]" && m.start <= top && top < m.end)
        else {
            return Err(corrupt(
                top,
                "main_arena's top chunk is outside [heap] (a main arena grown by mmap is not \
                 read)",
            ));
        };
        let end = (top + 16).min(m.end);
        let seg = Segment {
            start: m.start,
            bytes: r.load(m.start, end)?,
        };
        let idx = self.segments.len();
        walk(&seg, idx, m.start, end, Some(top), &mut self.chunks)?;
        self.segments.push(seg);
        self.ranges.push((m.start, m.end));
        Ok(())
    }

    fn arena_heaps(&mut self, r: &Reader, maps: &[MapsEntry], a: &Arena) -> Result<(), ScanError> {
        let top = a.top();
        let first = a.addr & !(HEAP_MAX_SIZE - 1);
        let info_size = a.addr - first;
        if info_size != 32 && info_size != 48 {
            return Err(corrupt(a.addr, "an arena not right after its heap_info"));
        }
        let mut h = top & !(HEAP_MAX_SIZE - 1);
        for _ in 0..MAX_HEAPS {
            let (Some(ar), Some(prev), Some(size)) = (r.word(h)?, r.word(h + 8)?, r.word(h + 16)?)
            else {
                return Err(ScanError::Unreadable { at: h, len: 24 });
            };
            if ar != a.addr || !(info_size + 32..=HEAP_MAX_SIZE).contains(&size) {
                return Err(corrupt(h, "a heap_info that does not name its arena"));
            }
            if !mapping_of(maps, h).is_some_and(|m| m.end >= h + size && anonymous_rw(m)) {
                return Err(corrupt(h, "a heap larger than its mapping"));
            }
            let start = if h == first {
                (a.addr + STATE_SIZE + 15) & !15
            } else {
                h + info_size
            };
            let end = h + size;
            let in_heap = top >= start && top < end;
            let load_end = if in_heap { (top + 16).min(end) } else { end };
            let seg = Segment {
                start: h,
                bytes: r.load(h, load_end)?,
            };
            let idx = self.segments.len();
            walk(
                &seg,
                idx,
                start,
                load_end,
                in_heap.then_some(top),
                &mut self.chunks,
            )?;
            self.segments.push(seg);
            self.ranges.push((h, h + HEAP_MAX_SIZE));
            if prev == 0 || h == first {
                return Ok(());
            }
            if prev & (HEAP_MAX_SIZE - 1) != 0 {
                return Err(corrupt(h, "a heap_info whose prev is not a heap"));
            }
            h = prev;
        }
        Err(corrupt(a.addr, "more heaps than the scan follows"))
    }

    /// The chunk whose header is at `addr`.
    pub(crate) fn chunk_at(&self, addr: u64) -> Option<&Chunk> {
        self.chunks
            .binary_search_by_key(&addr, |c| c.addr)
            .ok()
            .map(|i| &self.chunks[i])
    }

    /// A word of a heap segment.
    pub(crate) fn word(&self, addr: u64) -> Option<u64> {
        self.segments.iter().find_map(|s| s.word(addr))
    }

    /// The next link after `link` stored at `at`: safe-linked (glibc
    /// 2.32+) or plain, whichever `valid` accepts (0 ends a list).
    fn reveal(&self, at: u64, valid: &dyn Fn(u64) -> bool) -> Option<u64> {
        let raw = self.word(at)?;
        let safe = (at >> 12) ^ raw;
        [safe, raw].into_iter().find(|&n| n == 0 || valid(n))
    }

    fn fastbins(&mut self, a: &Arena) -> Result<(), ScanError> {
        for j in 0..NFASTBINS {
            let size = 32 + 16 * j;
            let valid = |p: u64| self.chunk_at(p).is_some_and(|c| c.size == size && c.in_use);
            let mut p = word_at(&a.state, FASTBINS + 8 * j).unwrap_or(0);
            let mut list = Vec::new();
            while p != 0 {
                if !valid(p) || list.len() > self.chunks.len() {
                    return Err(corrupt(p, format!("fastbin {j} of arena 0x{:x}", a.addr)));
                }
                list.push(p);
                p = self
                    .reveal(p + 16, &valid)
                    .ok_or_else(|| corrupt(p, format!("fastbin {j} of arena 0x{:x}", a.addr)))?;
            }
            self.free.extend(list);
        }
        Ok(())
    }

    /// The chunks of every thread's tcache: each in-use chunk of a
    /// `tcache_perthread_struct`'s size whose lists all parse.
    fn tcaches(&mut self) {
        let mut free = Vec::new();
        for c in &self.chunks {
            if c.in_use && !c.mmapped && (c.size == 0x290 || c.size == 0x250) {
                if let Some(list) = self.tcache(c) {
                    free.extend(list);
                }
            }
        }
        self.free.extend(free);
    }

    /// The chunks of the tcache in chunk `c`, if it is one: 64 lists,
    /// each of chunks of its size (`counts` may be one off: a thread
    /// stopped between a list's update and its count's).
    fn tcache(&self, c: &Chunk) -> Option<Vec<u64>> {
        let wide = c.size == 0x290;
        let mem = c.mem();
        let entries = mem + if wide { 128 } else { 64 };
        let seg = &self.segments[c.seg?];
        let counts = seg.slice(mem, entries)?;
        let mut free = Vec::new();
        for i in 0..64u64 {
            let count = if wide {
                u16::from_le_bytes([counts[2 * i as usize], counts[2 * i as usize + 1]]) as usize
            } else {
                counts[i as usize] as usize
            };
            let size = 32 + 16 * i;
            let valid = |e: u64| {
                e >= 16
                    && self
                        .chunk_at(e - 16)
                        .is_some_and(|c| c.size == size && c.in_use)
            };
            let mut e = seg.word(entries + 8 * i)?;
            let mut n = 0;
            while e != 0 {
                if !valid(e) || n > count || n > self.chunks.len() {
                    return None;
                }
                free.push(e - 16);
                n += 1;
                e = self.reveal(e, &valid)?;
            }
            if n + 1 < count {
                return None;
            }
        }
        Some(free)
    }

    /// The blocks: chunks in use and in no tcache or fastbin, by address.
    pub(crate) fn blocks(&self) -> Vec<Chunk> {
        self.chunks
            .iter()
            .filter(|c| c.in_use && !self.free.contains(&c.addr))
            .copied()
            .collect()
    }
}
