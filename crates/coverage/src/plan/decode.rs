//! Pass 1, decode: the executable sections swept linearly into
//! instructions, and the function starts as a sorted list that answers
//! "which function holds this address".
//!
//! The sweep starts again at every function the symbol tables name:
//! data in the code (OpenSSL's assembly keeps its tables in `.text`, node
//! links it in) decodes as garbage that can run over the next function's
//! first bytes, and a block planned there would patch them. An
//! instruction that would cross such a start is one `Code::INVALID`
//! instruction up to it (never planned), and decoding goes on from the
//! start. Not at the starts only `.eh_frame` gives: an FDE may begin off
//! an instruction (glibc's `__restore_rt`'s, one byte early, so that the
//! unwinder finds it from a return address), and a sweep started there
//! misdecoded `__restore_rt` and patched it: every signal handler's
//! return crashed.

use iced_x86::{Decoder, DecoderOptions, Instruction};
use rustc_hash::FxHashMap as HashMap;

/// A module's code, decoded.
pub(super) struct Code {
    /// Every instruction of every section, in address order within a
    /// section (an undecodable byte is one `Code::INVALID` instruction).
    pub insns: Vec<Instruction>,
    /// Instruction index by address.
    index: HashMap<u64, usize>,
    /// The sections' first addresses.
    pub section_starts: Vec<u64>,
}

impl Code {
    /// Whether an instruction starts at `a`.
    pub fn is_insn(&self, a: u64) -> bool {
        self.index.contains_key(&a)
    }
}

/// Decode `sections` (address, bytes), each from its start.
#[cfg(test)]
pub(super) fn decode(sections: &[(u64, Vec<u8>)]) -> Code {
    decode_at(sections, &Funcs::new(&[]))
}

/// Decode `sections` (address, bytes), each from its start and again
/// from every start of `funcs` (see the module doc).
pub(super) fn decode_at(sections: &[(u64, Vec<u8>)], funcs: &Funcs) -> Code {
    let mut insns: Vec<Instruction> = Vec::new();
    let mut section_starts = Vec::new();
    for (addr, bytes) in sections {
        section_starts.push(*addr);
        let mut d = Decoder::with_ip(64, bytes, *addr, DecoderOptions::NONE);
        // The next function start after the instruction being decoded.
        let mut next = funcs.0.partition_point(|&f| f <= *addr);
        while d.can_decode() {
            let x = d.decode();
            while next < funcs.0.len() && funcs.0[next] <= x.ip() {
                next += 1;
            }
            match funcs.0.get(next) {
                Some(&f) if f < x.next_ip() => {
                    let mut bad = Instruction::default();
                    // The length first: iced keeps the next ip.
                    bad.set_len((f - x.ip()) as usize);
                    bad.set_ip(x.ip());
                    insns.push(bad);
                    let at = (f - addr) as usize;
                    if d.set_position(at).is_err() {
                        break;
                    }
                    d.set_ip(f);
                }
                _ => insns.push(x),
            }
        }
    }
    let index = insns.iter().enumerate().map(|(i, x)| (x.ip(), i)).collect();
    Code {
        insns,
        index,
        section_starts,
    }
}

/// The module's function starts, sorted.
pub(super) struct Funcs(pub(super) Vec<u64>);

impl Funcs {
    /// The starts given, in any order, with repeats.
    pub fn new(starts: &[u64]) -> Funcs {
        let mut funcs = starts.to_vec();
        funcs.sort_unstable();
        funcs.dedup();
        Funcs(funcs)
    }

    /// The start of the function holding `a`: the last start at or
    /// before it, 0 when there is none.
    pub fn of(&self, a: u64) -> u64 {
        match self.0.binary_search(&a) {
            Ok(i) => self.0[i],
            Err(0) => 0,
            Err(i) => self.0[i - 1],
        }
    }

    /// Where the function starting at `f` ends: the next start, or
    /// `u64::MAX` (also when `f` is no start).
    pub fn end(&self, f: u64) -> u64 {
        match self.0.binary_search(&f) {
            Ok(i) if i + 1 < self.0.len() => self.0[i + 1],
            _ => u64::MAX,
        }
    }

    /// Whether a function starts at `a`.
    pub fn is_start(&self, a: u64) -> bool {
        self.0.binary_search(&a).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Data before a function decodes as an instruction running over its
    /// first byte: the sweep stops there and starts again at the function.
    #[test]
    fn the_sweep_starts_again_at_every_function() {
        // 0x1000: 0x83 0x33 (would take the next bytes: cmp with imm8);
        // 0x1002 (a function): mov %rbx,%r8; ret.
        let bytes = vec![0x83, 0x33, 0x49, 0x89, 0xd8, 0xc3];
        let funcs = Funcs::new(&[0x1002]);
        let code = decode_at(&[(0x1000, bytes.clone())], &funcs);
        assert_eq!(code.insns[0].code(), iced_x86::Code::INVALID);
        assert_eq!((code.insns[0].ip(), code.insns[0].len()), (0x1000, 2));
        assert!(code.is_insn(0x1002) && code.is_insn(0x1005));
        // Without the start, the sweep runs over it.
        let code = decode(&[(0x1000, bytes)]);
        assert!(!code.is_insn(0x1002));
    }
    use iced_x86::Code as Op;

    #[test]
    fn every_section_is_swept_from_its_start() {
        // nop; ret | (other section) mov eax,1; ud2 byte 0x06 (invalid in 64-bit)
        let code = decode(&[
            (0x1000, vec![0x90, 0xc3]),
            (0x2000, vec![0xb8, 1, 0, 0, 0, 0x06]),
        ]);
        let ips: Vec<u64> = code.insns.iter().map(|x| x.ip()).collect();
        assert_eq!(ips, [0x1000, 0x1001, 0x2000, 0x2005]);
        assert_eq!(code.section_starts, [0x1000, 0x2000]);
        assert_eq!(code.insns[2].code(), Op::Mov_r32_imm32);
        assert_eq!(code.insns[3].code(), Op::INVALID);
        assert!(code.is_insn(0x2005));
        assert!(!code.is_insn(0x2001), "inside an instruction");
    }

    #[test]
    fn an_address_belongs_to_the_last_function_started_before_it() {
        let f = Funcs::new(&[0x300, 0x100, 0x200, 0x100]);
        assert_eq!(f.of(0x50), 0, "before every function");
        assert_eq!(f.of(0x100), 0x100);
        assert_eq!(f.of(0x1ff), 0x100);
        assert_eq!(f.of(0x350), 0x300);
        assert_eq!(f.end(0x100), 0x200);
        assert_eq!(f.end(0x300), u64::MAX, "the last runs on");
        assert_eq!(f.end(0x150), u64::MAX, "not a start");
        assert!(f.is_start(0x200) && !f.is_start(0x201));
    }
}
