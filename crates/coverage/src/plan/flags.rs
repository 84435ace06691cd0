//! Pass 7, flag liveness: whether the flags a count's `inc` writes are
//! live where it goes. Decided from a block's own instructions (a read
//! before every one of them is written: live; all written, or a call or
//! return reached: dead), else from the blocks it leads to, one block
//! further and no more; unknown is live.

use iced_x86::{FlowControl, Instruction, OpKind};
use rustc_hash::FxHashMap as HashMap;

use super::INC_FLAGS;

/// The liveness of the flags at the blocks of one module.
pub(super) struct Flags<'a> {
    insns: &'a [Instruction],
    blocks: &'a [(usize, usize)],
    /// Block index by start address.
    start_index: HashMap<u64, usize>,
}

/// What a run of instructions says on its own of the flags at its start:
/// `Some(true)` dead, `Some(false)` live, `None` undecided at its end.
fn local(insns: &[Instruction]) -> Option<bool> {
    let mut killed = 0u32;
    for x in insns {
        if x.rflags_read() & INC_FLAGS & !killed != 0 {
            return Some(false);
        }
        if matches!(
            x.flow_control(),
            FlowControl::Call | FlowControl::IndirectCall | FlowControl::Return
        ) {
            return Some(true);
        }
        killed |= x.rflags_modified();
        if killed & INC_FLAGS == INC_FLAGS {
            return Some(true);
        }
    }
    None
}

impl<'a> Flags<'a> {
    /// The liveness over `blocks` (instruction index ranges of `insns`).
    pub fn new(insns: &'a [Instruction], blocks: &'a [(usize, usize)]) -> Flags<'a> {
        let start_index = blocks
            .iter()
            .enumerate()
            .map(|(b, (s, _))| (insns[*s].ip(), b))
            .collect();
        Flags {
            insns,
            blocks,
            start_index,
        }
    }

    /// Whether the flags are dead, by its own instructions, at the start
    /// of the block starting at `addr` (false when no block starts there).
    fn dead_at_block(&self, addr: u64) -> bool {
        match self.start_index.get(&addr) {
            Some(&b) => {
                let (s, e) = self.blocks[b];
                local(&self.insns[s..e]) == Some(true)
            }
            None => false,
        }
    }

    /// Whether the flags are live before `insns[from]`, running to
    /// `insns[to - 1]` and, when that decides nothing, into the blocks
    /// the last one leads to.
    pub fn live_from(&self, from: usize, to: usize) -> bool {
        if let Some(dead) = local(&self.insns[from..to]) {
            return !dead;
        }
        let last = &self.insns[to - 1];
        let near = last.op0_kind() == OpKind::NearBranch64;
        match last.flow_control() {
            FlowControl::Next => !self.dead_at_block(last.next_ip()),
            FlowControl::UnconditionalBranch if near => {
                !self.dead_at_block(last.near_branch_target())
            }
            FlowControl::ConditionalBranch if near => {
                !(self.dead_at_block(last.near_branch_target())
                    && self.dead_at_block(last.next_ip()))
            }
            _ => true,
        }
    }

    /// Whether the flags are live where a conditional jump falls through
    /// to `addr` (looking one block further, as for a block).
    pub fn live_at_block(&self, addr: u64) -> bool {
        match self.start_index.get(&addr) {
            Some(&b) => {
                let (s, e) = self.blocks[b];
                self.live_from(s, e)
            }
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::decode::decode;
    use super::*;

    /// Blocks of the given instruction counts, in order.
    fn setup(bytes: &[u8], lens: &[usize]) -> (Vec<Instruction>, Vec<(usize, usize)>) {
        let code = decode(&[(0x1000, bytes.to_vec())]);
        let mut raw = Vec::new();
        let mut at = 0;
        for &n in lens {
            raw.push((at, at + n));
            at += n;
        }
        assert_eq!(at, code.insns.len());
        (code.insns, raw)
    }

    #[test]
    fn a_read_before_a_write_is_live_and_a_full_write_is_dead() {
        // block 0: jne +0 (reads ZF) | block 1: xor eax,eax (writes all
        // but AF, which it leaves undefined: modified all the same); ret
        let (insns, raw) = setup(&[0x75, 0x00, 0x31, 0xc0, 0xc3], &[1, 2]);
        let f = Flags::new(&insns, &raw);
        assert!(f.live_from(0, 1));
        assert!(!f.live_from(1, 3));
        assert!(!f.live_at_block(0x1002));
        assert!(f.live_at_block(0x1003), "no block starts there: live");
    }

    #[test]
    fn undecided_looks_one_block_further() {
        // block 0: mov eax,ecx (no flags); jmp block 2 | block 1: ret |
        // block 2: add eax,1 (writes them all); ret
        let bytes = [0x89, 0xc8, 0xeb, 0x01, 0xc3, 0x83, 0xc0, 0x01, 0xc3];
        let (insns, raw) = setup(&bytes, &[2, 1, 2]);
        let f = Flags::new(&insns, &raw);
        assert!(!f.live_from(0, 2), "the jump's target writes them first");
        // The mov alone falls into no block start: live.
        assert!(f.live_from(0, 1));
        // The ret alone: a return kills them.
        assert!(!f.live_from(2, 3));
        // A conditional jump (jb reads only CF, which `inc` keeps) needs
        // both ways dead: to a `ret`, but falling into `mov eax,ecx`
        // (undecided): live; falling into `xor eax,eax`: dead.
        let (insns, raw) = setup(&[0x72, 0x02, 0x89, 0xc8, 0xc3], &[1, 1, 1]);
        assert!(Flags::new(&insns, &raw).live_from(0, 1));
        let (insns, raw) = setup(&[0x72, 0x02, 0x31, 0xc0, 0xc3], &[1, 1, 1]);
        assert!(!Flags::new(&insns, &raw).live_from(0, 1));
    }
}
