//! Pass 9, short blocks: the blocks left to trap get a cheaper way where
//! there is one. A block entered only by falling through a conditional
//! jump that a trampoline copies (so its fall-throughs are counted) takes
//! that count, unpatched ([`How::Fell`]); else a 2-byte jump to a 5-byte
//! one placed in the dead bytes of a block near by ([`How::Hop`]: the
//! bytes of a block, past its patch, that its trampoline copies whole,
//! which nothing runs any more, or the alignment padding between blocks,
//! which never ran). A block that may not trap and finds
//! neither is not counted.

use rustc_hash::FxHashSet as HashSet;

use super::decode::Funcs;
use super::{How, PlannedBlock};

/// What decides whether a block is entered only by falling through the
/// block before it.
pub(super) struct Scope<'a> {
    pub funcs: &'a Funcs,
    /// Functions with an unresolved indirect jump (their leaders are not
    /// all known).
    pub unresolved: &'a HashSet<u64>,
    /// Leaders entered only by falling through a conditional jump.
    pub soft: &'a HashSet<u64>,
}

impl Scope<'_> {
    /// Whether the function holding `addr` has unknown leaders.
    pub fn unresolved_at(&self, addr: u64) -> bool {
        self.unresolved.contains(&self.funcs.of(addr))
    }

    /// The branch (index into `branches`) through whose fall-through
    /// alone `b` is entered from `p`, the block before it: `p`'s counted
    /// conditional jump is its last instruction and `b` starts where it
    /// falls, at a soft leader.
    pub fn falls_only(
        &self,
        p: &PlannedBlock,
        b: &PlannedBlock,
        branches: &[(u64, bool)],
    ) -> Option<u32> {
        let j = p.branch?;
        (p.end == b.start
            && self.soft.contains(&b.start)
            && p.insns.last() == Some(branches[j as usize].0))
        .then_some(j)
    }
}

/// How far before its end a jump's patch may start: its window's first
/// instructions (5 bytes and at most one more instruction of 15) and the
/// padding after them.
const PATCH_REACH: u64 = 256;

/// The dead bytes of the blocks (from past each jump's patch to the
/// block's end, when its trampoline copies it whole and 5 bytes fit),
/// and the alignment padding between them (`padding`, runs of no-ops and
/// `int3` after an instruction that does not go on, which never run:
/// past the patch of the block before, when it runs on into them), as
/// (first free byte, end), by address. (Padding after a call returning
/// into a short block, as in cc1's `call set; mov %rbp,%rax` before a
/// function's last block, is often the only room within reach.)
pub(super) fn dead_bytes(
    blocks: &[PlannedBlock],
    padding: &[(u64, u64)],
    scope: &Scope,
) -> Vec<(u64, u64)> {
    let mut dead = Vec::new();
    for &(start, end) in padding {
        if scope.unresolved_at(start) {
            continue;
        }
        // A jump's patch may run on past its block (over a short block
        // its window covers, then into the padding): every patch that
        // starts close enough before.
        let k = blocks.partition_point(|b| b.start < start);
        let a = blocks[..k]
            .iter()
            .rev()
            .take_while(|b| b.start + PATCH_REACH > start)
            .filter_map(|b| match b.how {
                How::Jmp {
                    from, overwrite, ..
                } => Some(from + u64::from(overwrite)),
                _ => None,
            })
            .fold(start, u64::max);
        if a + 5 <= end {
            dead.push((a, end));
        }
    }
    for b in blocks {
        if let How::Jmp {
            from,
            to,
            overwrite,
        } = b.how
        {
            let a = from + u64::from(overwrite);
            if to >= b.end && a + 5 <= b.end && !scope.unresolved_at(b.start) {
                dead.push((a, b.end));
            }
        }
    }
    dead.sort_unstable();
    dead
}

/// Short blocks entered only by the fall-through of the block before it,
/// whose conditional jump a trampoline copies: derived, no patch at all.
///
/// The block before must have a trampoline of its own (a jump, a hop, a
/// breakpoint, or the window of an earlier block running on into it): a
/// block left unpatched itself, one that takes its count from the block
/// before it in turn, runs its jump in place, where nothing counts its
/// fall-throughs (`test; js; je; mov`: the `mov` read 0).
pub(super) fn fell(blocks: &mut [PlannedBlock], branches: &[(u64, bool)], scope: &Scope) {
    for bi in 1..blocks.len() {
        let (before, rest) = blocks.split_at_mut(bi);
        let (p, b) = (&before[bi - 1], &mut rest[0]);
        if !matches!(b.how, How::Int3 { .. }) || scope.unresolved_at(b.start) {
            continue;
        }
        let copied = matches!(
            p.how,
            How::Jmp { .. } | How::Int3 { .. } | How::Hop { .. } | How::Covered
        );
        if !copied {
            continue;
        }
        if let Some(j) = scope.falls_only(p, b, branches) {
            b.how = How::Fell { branch: j };
        }
    }
}

/// The blocks still left to trap hop to a slot in `dead` within reach of
/// a `jmp rel8` (taking 5 bytes of it); those that may not trap
/// (`forbidden`) and find none are not counted.
pub(super) fn hop(
    blocks: &mut [PlannedBlock],
    mut dead: Vec<(u64, u64)>,
    forbidden: &[bool],
    scope: &Scope,
) {
    for (bi, b) in blocks.iter_mut().enumerate() {
        let How::Int3 { to } = b.how else { continue };
        if to - b.start < 2 || scope.unresolved_at(b.start) {
            if forbidden[bi] {
                b.how = How::None;
            }
            continue;
        }
        let origin = b.start + 2;
        let lo = origin.saturating_sub(128);
        let hi = origin + 127; // the slot's first byte, at most
        let mut i = dead.partition_point(|d| d.1 < lo + 5);
        let mut found = None;
        while i < dead.len() && dead[i].0 <= hi {
            let at = dead[i].0.max(lo);
            if at + 5 <= dead[i].1 && at <= hi {
                found = Some((i, at));
                break;
            }
            i += 1;
        }
        match found {
            Some((i, at)) => {
                dead[i].0 = at + 5;
                b.how = How::Hop { to, slot: at };
            }
            None if forbidden[bi] => b.how = How::None,
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{block, branching};
    use super::*;

    fn scope<'a>(
        funcs: &'a Funcs,
        unresolved: &'a HashSet<u64>,
        soft: &'a HashSet<u64>,
    ) -> Scope<'a> {
        Scope {
            funcs,
            unresolved,
            soft,
        }
    }

    #[test]
    fn a_copied_jump_leaves_dead_bytes_behind_its_patch() {
        let funcs = Funcs::new(&[0x1000]);
        let (none, soft) = (HashSet::default(), HashSet::default());
        let blocks = [
            // 20 bytes, the first 5 patched, copied whole: 15 dead.
            block(
                0x1000,
                0x1014,
                How::Jmp {
                    from: 0x1000,
                    to: 0x1014,
                    overwrite: 5,
                },
            ),
            // Copied up to a final call: the call still runs there.
            block(
                0x1014,
                0x1030,
                How::Jmp {
                    from: 0x1014,
                    to: 0x102b,
                    overwrite: 5,
                },
            ),
            // Too short for a slot.
            block(
                0x1030,
                0x1039,
                How::Jmp {
                    from: 0x1030,
                    to: 0x1039,
                    overwrite: 5,
                },
            ),
        ];
        assert_eq!(
            dead_bytes(&blocks, &[], &scope(&funcs, &none, &soft)),
            [(0x1005, 0x1014)]
        );
        let unresolved: HashSet<u64> = [0x1000].into_iter().collect();
        assert!(dead_bytes(&blocks, &[], &scope(&funcs, &unresolved, &soft)).is_empty());
    }

    #[test]
    fn padding_is_dead_past_the_patch_that_runs_into_it() {
        let funcs = Funcs::new(&[0x1000, 0x1100]);
        let (none, soft) = (HashSet::default(), HashSet::default());
        let blocks = vec![
            // `xor; ret` (3 bytes): its jump's patch takes 4 bytes of the
            // padding after it.
            block(
                0x1000,
                0x1003,
                How::Jmp {
                    from: 0x1000,
                    to: 0x1003,
                    overwrite: 7,
                },
            ),
            block(0x1010, 0x1012, How::Int3 { to: 0x1012 }),
            block(0x1100, 0x1110, How::Int3 { to: 0x1110 }),
        ];
        // Padding after each (the second run too short for a slot).
        let runs = [(0x1003, 0x1010), (0x1012, 0x1016), (0x1110, 0x1120)];
        assert_eq!(
            dead_bytes(&blocks, &runs, &scope(&funcs, &none, &soft)),
            [(0x1007, 0x1010), (0x1110, 0x1120)]
        );
        // A window run on over a short block before the padding: its
        // patch still takes the padding's first bytes.
        let mut ran_on = blocks.clone();
        ran_on[0].end = 0x1001;
        ran_on.insert(1, block(0x1001, 0x1003, How::Covered));
        assert_eq!(
            dead_bytes(&ran_on, &runs, &scope(&funcs, &none, &soft)),
            [(0x1007, 0x1010), (0x1110, 0x1120)]
        );
        // In a function whose leaders are not all known: not padding for
        // certain.
        let unresolved: HashSet<u64> = [0x1100].into_iter().collect();
        assert_eq!(
            dead_bytes(&blocks, &runs, &scope(&funcs, &unresolved, &soft)),
            [(0x1007, 0x1010)]
        );
    }

    #[test]
    fn a_block_entered_only_by_a_counted_fall_through_is_derived() {
        let funcs = Funcs::new(&[0x1000]);
        let none = HashSet::default();
        let soft: HashSet<u64> = [0x1008].into_iter().collect();
        let p = branching(0x1000, 0x1008, 0);
        let b = block(0x1008, 0x100a, How::Int3 { to: 0x100a });
        let branches = [(0x1006, false)];
        let mut blocks = [p.clone(), b.clone()];
        fell(&mut blocks, &branches, &scope(&funcs, &none, &soft));
        assert_eq!(blocks[1].how, How::Fell { branch: 0 });
        // Not soft (a jump leads there too): left to trap.
        let mut blocks = [p, b];
        fell(
            &mut blocks,
            &branches,
            &scope(&funcs, &none, &HashSet::default()),
        );
        assert_eq!(blocks[1].how, How::Int3 { to: 0x100a });
    }

    #[test]
    fn a_fall_through_of_a_block_run_in_place_is_not_a_count() {
        // `test; js` (counted), `je` (derived from js's fall-throughs, run
        // in place), `mov`: nothing counts je's fall-throughs.
        let funcs = Funcs::new(&[0x1000]);
        let none = HashSet::default();
        let soft: HashSet<u64> = [0x1008, 0x100a].into_iter().collect();
        let p = branching(0x1000, 0x1008, 0);
        let mut je = block(0x1008, 0x100a, How::Int3 { to: 0x100a });
        je.branch = Some(1);
        let mov = block(0x100a, 0x100c, How::Int3 { to: 0x100c });
        let branches = [(0x1006, false), (0x1008, false)];
        let mut blocks = [p, je, mov];
        fell(&mut blocks, &branches, &scope(&funcs, &none, &soft));
        assert_eq!(blocks[1].how, How::Fell { branch: 0 });
        assert_eq!(blocks[2].how, How::Int3 { to: 0x100c });
    }

    #[test]
    fn a_short_block_hops_to_dead_bytes_within_reach() {
        let funcs = Funcs::new(&[0x1000]);
        let (none, soft) = (HashSet::default(), HashSet::default());
        let s = scope(&funcs, &none, &soft);
        let mut blocks = [
            block(0x1100, 0x1103, How::Int3 { to: 0x1103 }),
            block(0x1103, 0x1106, How::Int3 { to: 0x1106 }),
            block(0x1106, 0x1107, How::Int3 { to: 0x1107 }),
            block(0x1200, 0x1203, How::Int3 { to: 0x1203 }),
        ];
        // Room for one slot at 0x1090 (within 128 bytes back of 0x1102),
        // and one far away.
        let dead = vec![(0x1090, 0x1098), (0x5000, 0x5010)];
        hop(&mut blocks, dead, &[false, true, true, false], &s);
        assert_eq!(
            blocks[0].how,
            How::Hop {
                to: 0x1103,
                slot: 0x1090
            }
        );
        // The slot is taken: the next one may not trap, so goes uncounted.
        assert_eq!(blocks[1].how, How::None);
        // One byte long: no room for the hop's jmp rel8, forbidden to trap.
        assert_eq!(blocks[2].how, How::None);
        // Out of reach, allowed to trap: still a trap.
        assert_eq!(blocks[3].how, How::Int3 { to: 0x1203 });
    }
}
