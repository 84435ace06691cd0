//! Pass 10, fall-throughs: a conditional jump's fall-through count is the
//! count of the block after it when that block is entered only by falling
//! through it and is counted on its own (one count fewer on every
//! fall-through).

use super::short::Scope;
use super::{How, PlannedBlock};

/// Per branch, the block its fall-through count is read from, if any.
pub(super) fn fell_from(
    blocks: &[PlannedBlock],
    branches: &[(u64, bool)],
    scope: &Scope,
) -> Vec<Option<u32>> {
    let mut fell_from = vec![None; branches.len()];
    for bi in 1..blocks.len() {
        let (p, b) = (&blocks[bi - 1], &blocks[bi]);
        let counted = match b.how {
            How::Jmp { from, .. } => from == b.start,
            How::Hop { .. } | How::Int3 { .. } | How::Call { .. } | How::Covered | How::Once => {
                true
            }
            How::Fell { .. } | How::Implied { .. } | How::Branches { .. } | How::None => false,
        };
        if !counted || scope.unresolved_at(b.start) {
            continue;
        }
        if let Some(j) = scope.falls_only(p, b, branches) {
            fell_from[j as usize] = Some(bi as u32);
        }
    }
    fell_from
}

#[cfg(test)]
mod tests {
    use super::super::decode::Funcs;
    use super::super::testing::{block, branching};
    use super::*;
    use rustc_hash::FxHashSet as HashSet;

    #[test]
    fn a_fall_through_into_a_block_counted_alone_is_its_count() {
        let funcs = Funcs::new(&[0x1000]);
        let none = HashSet::default();
        let soft: HashSet<u64> = [0x1008, 0x1010].into_iter().collect();
        let scope = Scope {
            funcs: &funcs,
            unresolved: &none,
            soft: &soft,
        };
        let p = branching(0x1000, 0x1008, 0);
        let mut q = branching(0x1008, 0x1010, 1);
        let r = block(0x1010, 0x1012, How::Fell { branch: 1 });
        let branches = [(0x1006, false), (0x100e, true)];
        assert_eq!(
            fell_from(&[p.clone(), q.clone(), r.clone()], &branches, &scope),
            [Some(1), None],
            "the first falls into a block counted on its own, the second into one counted through it"
        );
        // A block whose jump is not at its start is not counted on its own.
        q.how = How::Jmp {
            from: 0x100a,
            to: 0x1010,
            overwrite: 5,
        };
        assert_eq!(fell_from(&[p, q, r], &branches, &scope), [None, None]);
    }
}
