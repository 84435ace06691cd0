//! The conservative mark: the roots, and every block reachable from them.

use super::heap::{Chunk, Heap, Segment};
use super::{words, ThreadRoots, RED_ZONE};
use profdev_symbolize::maps::MapsEntry;

/// A range of roots, [start, end), within one mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Root {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// Anonymous memory above a guard page holding no live thread's
    /// stack or TLS: glibc's cache of dead threads' stacks is such, and
    /// is left out when its top holds a thread control block
    /// ([`dead_stack`]).
    pub(crate) may_be_dead_stack: bool,
}

/// A mapping that can hold a heap pointer the program put there: readable
/// and writable, and no kernel page ([vvar], [vsyscall]...) or device
/// (`/dev/...` but `/dev/zero`, shared anonymous memory, and `/dev/shm`).
/// Guard pages (no access) and read-only memory are no roots.
pub(crate) fn may_hold_pointers(m: &MapsEntry) -> bool {
    if !(m.perms.read() && m.perms.write()) {
        return false;
    }
    let p = m.path.as_str();
    if p.starts_with('[') {
        return p == "[heap]" || p == "[stack]" || p.starts_with("[anon");
    }
    !p.starts_with("/dev/") || p.starts_with("/dev/zero") || p.starts_with("/dev/shm/")
}

/// The memory ranges that are roots, before the registers: every mapping
/// that may hold pointers ([`may_hold_pointers`]), less glibc's heaps and
/// mmapped chunks (`heap.ranges`: blocks, scanned only when reached) and
/// `skip` (memory of the scan's own: mprof's block table), a thread's
/// stack from its stack pointer less the red zone only.
pub(crate) fn roots(
    maps: &[MapsEntry],
    threads: &[ThreadRoots],
    heap: &Heap,
    skip: &[(u64, u64)],
) -> Vec<Root> {
    let mut holes: Vec<(u64, u64)> = heap.ranges.iter().chain(skip).copied().collect();
    holes.sort_unstable();
    let mut roots = Vec::new();
    for m in maps.iter().filter(|m| may_hold_pointers(m)) {
        let holds = |a: u64| m.start <= a && a < m.end;
        let sp = threads
            .iter()
            .filter(|t| holds(t.sp) || holds(t.sp.saturating_sub(RED_ZONE)))
            .map(|t| t.sp.saturating_sub(RED_ZONE).max(m.start))
            .min();
        let live = sp.is_some() || threads.iter().any(|t| holds(t.fs_base));
        // glibc maps a thread's stack with a guard page (no access) below.
        let guarded = maps
            .iter()
            .any(|g| g.end == m.start && !g.perms.read() && !g.perms.write() && !g.perms.exec());
        let may_be_dead_stack = m.path.is_empty() && !live && guarded;
        let mut s = sp.unwrap_or(m.start);
        let e = m.end;
        for &(hs, he) in &holes {
            if he <= s || hs >= e {
                continue;
            }
            if hs > s {
                roots.push(Root {
                    start: s,
                    end: hs,
                    may_be_dead_stack,
                });
            }
            s = s.max(he);
        }
        if s < e {
            roots.push(Root {
                start: s,
                end: e,
                may_be_dead_stack,
            });
        }
    }
    roots
}

/// How far below a mapping's end a thread control block is looked for.
const TCB_WINDOW: u64 = 16 << 10;

/// The thread control block that the copied `segs` of a mapping ending at
/// `end` hold in their last [`TCB_WINDOW`] bytes, if it is no live
/// thread's (`fs_base`): glibc's `struct pthread`, whose `tcb` and `self`
/// words (at 0 and 16) are its own address. Such a mapping is a dead
/// thread's stack, kept in glibc's cache for the next thread: its stale
/// words would hide leaks. Its `dtv` word (at 8) alone stays a root: the
/// cache keeps that block for the next thread.
pub(crate) fn dead_stack(segs: &[Segment], end: u64, threads: &[ThreadRoots]) -> Option<u64> {
    segs.iter().find_map(|s| {
        let from = s.start.max(end.saturating_sub(TCB_WINDOW));
        (from..s.end().saturating_sub(24)).step_by(8).find(|&a| {
            a % 8 == 0
                && s.word(a) == Some(a)
                && s.word(a + 16) == Some(a)
                && !threads.iter().any(|t| t.fs_base == a)
        })
    })
}

/// The block holding `v`: its index in `blocks` (by address).
fn holding(blocks: &[Chunk], v: u64) -> Option<usize> {
    // Most words are no pointer into the heap: out at once.
    if blocks.first().is_none_or(|b| v < b.mem()) || blocks.last().is_none_or(|b| v >= b.end()) {
        return None;
    }
    let i = blocks.partition_point(|b| b.mem() <= v);
    let b = blocks.get(i.checked_sub(1)?)?;
    (v < b.end()).then_some(i - 1)
}

/// Mark the block holding `v`, if any and not yet, and queue it.
fn visit(blocks: &[Chunk], reached: &mut [bool], work: &mut Vec<usize>, v: u64) {
    if let Some(i) = holding(blocks, v) {
        if !reached[i] {
            reached[i] = true;
            work.push(i);
        }
    }
}

/// Mark every block of `blocks` (by address) reachable from the roots'
/// bytes and the threads' registers, transitively: a pure function of
/// what was copied.
pub(crate) fn mark(
    heap: &Heap,
    blocks: &[Chunk],
    roots: &[Segment],
    threads: &[ThreadRoots],
) -> Vec<bool> {
    let mut reached = vec![false; blocks.len()];
    let mut work = Vec::new();
    for t in threads {
        for &v in &t.registers {
            visit(blocks, &mut reached, &mut work, v);
        }
    }
    for seg in roots {
        words(&seg.bytes, &mut |v| {
            visit(blocks, &mut reached, &mut work, v)
        });
    }
    while let Some(i) = work.pop() {
        let b = blocks[i];
        let bytes = b
            .seg
            .map(|s| &heap.segments[s])
            .and_then(|s| s.slice(b.mem(), b.end().min(s.end())))
            .unwrap_or_default();
        words(bytes, &mut |v| visit(blocks, &mut reached, &mut work, v));
    }
    reached
}
