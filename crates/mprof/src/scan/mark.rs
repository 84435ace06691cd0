//! The conservative mark: the roots, and every block reachable from them.

use super::heap::{mapping_of, Chunk, Heap, Segment};
use super::{words, ThreadRoots, RED_ZONE};
use profdev_symbolize::maps::MapsEntry;

/// The memory ranges that are roots, [start, end), before the registers.
pub(crate) fn roots(maps: &[MapsEntry], threads: &[ThreadRoots], heap: &Heap) -> Vec<(u64, u64)> {
    let writable = |m: &MapsEntry| m.perms.read() && m.perms.write() && !m.perms.shared();
    let mut out = Vec::new();
    let mut stacks = Vec::new();
    for t in threads {
        if let Some(m) = mapping_of(maps, t.sp.saturating_sub(RED_ZONE))
            .or_else(|| mapping_of(maps, t.sp))
            .filter(|m| writable(m))
        {
            out.push((t.sp.saturating_sub(RED_ZONE).max(m.start), m.end));
            stacks.push(m.start);
        }
    }
    for t in threads {
        if let Some(m) = mapping_of(maps, t.fs_base)
            .filter(|m| writable(m) && m.path != "[heap]" && !stacks.contains(&m.start))
        {
            out.push((m.start, m.end));
        }
    }
    for (i, m) in maps.iter().enumerate() {
        if m.is_file() && writable(m) {
            out.push((m.start, m.end));
            if let Some(n) = maps
                .get(i + 1)
                .filter(|n| n.start == m.end && n.path.is_empty() && writable(n))
            {
                out.push((n.start, n.end));
            }
        }
    }
    // Each byte once (a stack may also be a module's bss...), and never
    // a heap's: a mapping merged with an mmapped chunk keeps the rest.
    out.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (s, e) in out {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    let mut holes = heap.ranges.clone();
    holes.sort_unstable();
    let mut roots = Vec::new();
    for (mut s, e) in merged {
        for &(hs, he) in &holes {
            if he <= s || hs >= e {
                continue;
            }
            if hs > s {
                roots.push((s, hs));
            }
            s = s.max(he);
        }
        if s < e {
            roots.push((s, e));
        }
    }
    roots
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
