//! Steps 2 and 3: a place in the area for each piece (from a bound on its
//! size, so nothing is encoded twice), which gives every block's entry;
//! then each piece encoded in its place, its branches led to the entries
//! of the blocks they reach, and the patches that lead the module there.

use iced_x86::{Code, FlowControl, OpKind};
use rustc_hash::FxHashMap as HashMap;

use super::piece::Piece;
use super::seq::{bound, enc_fix, jmp, Fixups, SENTINEL};
use super::{Ctx, Patch, PATCH_CALL5, PATCH_CALL6, PATCH_INT3, PATCH_JMP, PATCH_REL8};
use crate::plan::{How, PlannedBlock};

/// The least room of a stub (one holding a recording takes more).
const STUB: u64 = 48;

/// Where one piece goes in the area (run-time addresses).
struct Place {
    /// Its first stub, and each stub's room.
    stub_at: u64,
    stub_size: u64,
    /// Its main part, and that part's room.
    main_at: u64,
    main_size: u64,
    /// Where its block's trampoline is entered.
    entry: u64,
}

/// The area laid out and encoded.
pub(super) struct Laid {
    pub code: Vec<u8>,
    /// Patches by address.
    pub patches: Vec<Patch>,
    /// Blocks counted through a trap.
    pub trapped: u64,
    pub counter_fixups: Vec<u32>,
    /// Offsets in `code` of the 32-bit fields that reach the module.
    pub far_fixups: Vec<u32>,
    /// Whether every reference to the module is such a field.
    pub movable: bool,
    /// Blocks whose trampoline failed to encode (left unpatched).
    pub failed_blocks: Vec<usize>,
}

/// The room each of `p`'s stubs gets.
fn stub_size(p: &Piece) -> u64 {
    p.stubs
        .iter()
        .map(|s| bound(s).max(STUB))
        .max()
        .unwrap_or(STUB)
}

/// The places of `pieces`, one after the other from the area's start,
/// each given the room `sizes` says (its stubs' and its main part's,
/// [`Sizes`]) or, without sizes, a bound on what it may take; the
/// entries of the blocks whose trampoline another one may jump into
/// (those patched at their start) by their run-time address; and the
/// end of the last piece.
fn place(
    cx: &Ctx,
    pieces: &[Piece],
    sizes: Option<&[Sizes]>,
) -> (Vec<Place>, HashMap<u64, u64>, u64) {
    let mut entries = HashMap::default();
    let mut at = cx.area;
    let mut places = Vec::with_capacity(pieces.len());
    for (k, p) in pieces.iter().enumerate() {
        let b = &cx.plan.blocks[p.block];
        let (size, main_size) = match sizes {
            Some(s) => (s[k].stub, s[k].main),
            None => (
                stub_size(p),
                if p.main.is_empty() { 0 } else { bound(&p.main) },
            ),
        };
        let stubs = size * p.stubs.len() as u64;
        let (stub_at, main_at) = (at, at + stubs);
        let entry = if matches!(b.how, How::Call { .. }) {
            stub_at
        } else {
            main_at
        };
        // Only a block whose patch sits at its start can be entered
        // through its trampoline from another one.
        let at_start = match b.how {
            How::Int3 { .. } | How::Hop { .. } | How::Fell { .. } => true,
            How::Jmp { from, .. } => from == b.start,
            _ => false,
        };
        if at_start {
            entries.insert(b.start + cx.bias, entry);
        }
        places.push(Place {
            stub_at,
            stub_size: size,
            main_at,
            main_size,
            entry,
        });
        at = main_at + main_size;
    }
    (places, entries, at)
}

/// The room one piece takes once encoded: each of its stubs' (the
/// longest) and its main part's, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sizes {
    stub: u64,
    main: u64,
}

/// Lay `pieces` out in the area and encode them, packed.
///
/// Twice: first each piece in a room bounded from its instructions
/// ([`bound`], [`STUB`]: nothing can overflow it), which gives the length
/// each piece's code really took; then again, the pieces one after the
/// other in exactly those lengths. The bounds are loose (a count, a
/// copied branch of rel8 reach and the stubs' least room make sqlite3's
/// 1 MB of code an 11 MB area, most of it `int3` between trampolines),
/// and a hot loop's trampolines spread over that many more cache lines
/// and pages than its code did. Packing cannot make a piece longer: every
/// distance between two trampolines only shrinks, so a branch that
/// reached with rel8 still does, and a branch to the module is rel32
/// either way. Should any piece still not fit (the encoder's choices are
/// its own), the first layout is kept, whole.
pub(super) fn lay_out(cx: &Ctx, pieces: Vec<Piece>) -> Laid {
    let (loose, sizes) = encode_at(cx, pieces.clone(), None);
    let (packed, _) = encode_at(cx, pieces, Some(&sizes));
    if packed.failed_blocks == loose.failed_blocks {
        packed
    } else {
        loose
    }
}

/// `pieces` laid out with `sizes` (or bounds: [`place`]) and encoded,
/// and the length each piece took (its room where it failed).
fn encode_at(cx: &Ctx, pieces: Vec<Piece>, sizes: Option<&[Sizes]>) -> (Laid, Vec<Sizes>) {
    let (places, entries, end) = place(cx, &pieces, sizes);
    let redirect = |t: u64| entries.get(&t).copied().unwrap_or(t);
    let mut out = Laid {
        code: vec![0xCCu8; (end - cx.area) as usize],
        patches: Vec::new(),
        trapped: 0,
        counter_fixups: Vec::new(),
        far_fixups: Vec::new(),
        movable: true,
        failed_blocks: Vec::new(),
    };
    let span = (cx.area, end);
    let mut took = Vec::with_capacity(pieces.len());
    for (p, at) in pieces.into_iter().zip(&places) {
        let b = &cx.plan.blocks[p.block];
        let block = p.block;
        match emit(cx, p, at, &redirect, sizes.is_some(), span, &mut out) {
            Some(s) => took.push(s),
            None => {
                took.push(Sizes {
                    stub: at.stub_size,
                    main: at.main_size,
                });
                // Other trampolines may lead here: go on, uncounted, in
                // the original code (left unpatched).
                if !matches!(b.how, How::Fell { .. }) {
                    out.failed_blocks.push(block);
                }
                if let Some((c, fx)) = enc_fix(&[jmp(b.start + cx.bias)], at.entry, span) {
                    out.put(cx, at.entry, &c);
                    out.fixed(at.entry - cx.area, fx);
                }
                continue;
            }
        }
        out.patch(b, at.entry, cx.bias);
    }
    out.patches.sort_by_key(|p| p.addr);
    (out, took)
}

impl Laid {
    /// The fixups of code put at offset `off` of the area.
    fn fixed(&mut self, off: u64, fx: Fixups) {
        let at = |o: u32| (u64::from(o) + off) as u32;
        self.counter_fixups.extend(fx.counters.into_iter().map(at));
        self.far_fixups.extend(fx.far.into_iter().map(at));
        self.movable &= fx.movable;
    }

    /// `bytes` into the area's code at run-time address `at`.
    fn put(&mut self, cx: &Ctx, at: u64, bytes: &[u8]) {
        let off = (at - cx.area) as usize;
        self.code[off..off + bytes.len()].copy_from_slice(bytes);
    }

    /// The patches leading block `b` to its trampoline entered at `entry`.
    fn patch(&mut self, b: &PlannedBlock, entry: u64, bias: u64) {
        let (kind, addr, len) = match b.how {
            How::Jmp {
                from, overwrite, ..
            } => (PATCH_JMP, from, overwrite),
            How::Int3 { .. } => {
                self.trapped += 1;
                (PATCH_INT3, b.start, 1)
            }
            How::Hop { slot, .. } => {
                self.patches.push(Patch {
                    addr: slot + bias,
                    entry,
                    kind: PATCH_JMP,
                    len: 5,
                });
                self.patches.push(Patch {
                    addr: b.start + bias,
                    entry: slot + bias,
                    kind: PATCH_REL8,
                    len: 2,
                });
                return;
            }
            // The block's final call (the whole block, or after a
            // prefix that runs in place).
            How::Call { len: 5 } => (PATCH_CALL5, b.end - 5, 5),
            How::Call { .. } => (PATCH_CALL6, b.end - 6, 6),
            How::None
            | How::Once
            | How::Covered
            | How::Fell { .. }
            | How::Implied { .. }
            | How::Branches { .. } => return,
        };
        self.patches.push(Patch {
            addr: addr + bias,
            entry,
            kind,
            len,
        });
    }
}

/// Encode piece `p` at its place `at`, its branches redirected: the
/// length its stubs (the longest) and its main part took, or None when
/// some part did not fit.
///
/// `packed` (the pieces one after another in the rooms they took): a
/// main part whose final jump leads to the very next byte after its room
/// (the trampoline of the block it falls or jumps into, laid out next)
/// drops that jump and ends in no-ops up to its room's end, so the run
/// goes on there without a taken branch (python3's dictionary lookup: a
/// `jmp` to the next instruction between every two blocks).
fn emit(
    cx: &Ctx,
    p: Piece,
    at: &Place,
    redirect: &dyn Fn(u64) -> u64,
    packed: bool,
    span: (u64, u64),
    out: &mut Laid,
) -> Option<Sizes> {
    let mut ok = true;
    let mut took = Sizes { stub: 0, main: 0 };
    for (k, mut stub) in p.stubs.into_iter().enumerate() {
        let s_at = at.stub_at + at.stub_size * k as u64;
        let last = stub.len() - 1;
        if stub[last].code() == Code::Jmp_rel32_64 {
            let t = redirect(stub[last].near_branch_target());
            stub[last].set_near_branch64(t);
        }
        match enc_fix(&stub, s_at, span) {
            Some((c, fx)) if c.len() as u64 <= at.stub_size => {
                out.put(cx, s_at, &c);
                out.fixed(s_at - cx.area, fx);
                took.stub = took.stub.max(c.len() as u64);
            }
            _ => ok = false,
        }
    }
    if !ok {
        return None;
    }
    if p.main.is_empty() {
        return Some(took);
    }
    let mut main = p.main;
    for x in main.iter_mut() {
        let t = x.near_branch_target();
        if x.op0_kind() == OpKind::NearBranch64 && t >= SENTINEL {
            x.set_near_branch64(at.stub_at + at.stub_size * (t - SENTINEL));
        } else if matches!(
            x.flow_control(),
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch
        ) && x.op0_kind() == OpKind::NearBranch64
        {
            x.set_near_branch64(redirect(t));
        }
    }
    let end = at.main_at + at.main_size;
    let falls = packed
        && main.len() > 1
        && main
            .last()
            .is_some_and(|x| x.code() == Code::Jmp_rel32_64 && x.near_branch_target() == end);
    if falls {
        main.pop();
    }
    match enc_fix(&main, at.main_at, span) {
        Some((c, fx)) if c.len() as u64 <= at.main_size => {
            out.put(cx, at.main_at, &c);
            out.fixed(at.main_at - cx.area, fx);
            took.main = c.len() as u64;
            if falls {
                let pad = nops(at.main_size - took.main);
                out.put(cx, at.main_at + took.main, &pad);
            }
            Some(took)
        }
        _ => None,
    }
}

/// `n` bytes of no-ops, in as few instructions as the recommended
/// multi-byte forms allow (at most 9 bytes each).
fn nops(n: u64) -> Vec<u8> {
    const FORMS: [&[u8]; 9] = [
        &[0x90],
        &[0x66, 0x90],
        &[0x0f, 0x1f, 0x00],
        &[0x0f, 0x1f, 0x40, 0x00],
        &[0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
        &[0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
        &[0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
    ];
    let mut out = Vec::with_capacity(n as usize);
    let mut left = n as usize;
    while left > 0 {
        let k = left.min(FORMS.len());
        out.extend_from_slice(FORMS[k - 1]);
        left -= k;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::seq::count_seq;
    use super::super::{encode, Options};
    use super::*;
    use crate::plan::Plan;
    use iced_x86::{Decoder, DecoderOptions};

    const BIAS: u64 = 0x5555_0000_0000;
    const AREA: u64 = BIAS + 0x1000_0000;

    fn plan(bytes: &[u8]) -> Plan {
        Plan::new(vec![(0x1000, bytes.to_vec())], &[0x1000], &[], &[])
    }

    #[test]
    fn a_jump_into_a_patched_block_enters_its_trampoline() {
        // mov eax,1; jmp L | L: mov ecx,2; ret
        let bytes = [0xb8, 1, 0, 0, 0, 0xeb, 0x00, 0xb9, 2, 0, 0, 0, 0xc3];
        let plan = plan(&bytes);
        let e = encode(&plan, BIAS, AREA, 0);
        assert_eq!(e.failed, 0);
        let kinds: Vec<(u64, u32)> = e.patches.iter().map(|p| (p.addr, p.kind)).collect();
        assert_eq!(
            kinds,
            [(BIAS + 0x1000, PATCH_JMP), (BIAS + 0x1007, PATCH_JMP)]
        );
        // The copied `jmp L` leads to L's trampoline, not to L.
        let first = (e.patches[0].entry - AREA) as usize;
        let mut d = Decoder::with_ip(
            64,
            &e.code[first..],
            e.patches[0].entry,
            DecoderOptions::NONE,
        );
        let jump = std::iter::from_fn(|| Some(d.decode()))
            .take(8)
            .find(|x| x.code() == Code::Jmp_rel32_64 || x.code() == Code::Jmp_rel8_64)
            .expect("the copied jump");
        assert_eq!(jump.near_branch_target(), e.patches[1].entry);
    }

    fn laid() -> Laid {
        Laid {
            code: vec![0xcc; 256],
            patches: Vec::new(),
            trapped: 0,
            counter_fixups: Vec::new(),
            far_fixups: Vec::new(),
            movable: true,
            failed_blocks: Vec::new(),
        }
    }

    fn block(how: How) -> PlannedBlock {
        PlannedBlock {
            start: 0x1000,
            end: 0x1003,
            insns: vec![0x1000].into(),
            how,
            flags_live: false,
            branch: None,
        }
    }

    #[test]
    fn each_way_of_counting_has_its_patches() {
        let mut out = laid();
        out.patch(
            &block(How::Hop {
                to: 0x1003,
                slot: 0x1050,
            }),
            AREA,
            BIAS,
        );
        assert_eq!(
            out.patches,
            [
                Patch {
                    addr: BIAS + 0x1050,
                    entry: AREA,
                    kind: PATCH_JMP,
                    len: 5
                },
                Patch {
                    addr: BIAS + 0x1000,
                    entry: BIAS + 0x1050,
                    kind: PATCH_REL8,
                    len: 2
                },
            ]
        );
        let mut out = laid();
        out.patch(&block(How::Int3 { to: 0x1003 }), AREA, BIAS);
        out.patch(&block(How::Call { len: 6 }), AREA, BIAS);
        out.patch(&block(How::Covered), AREA, BIAS);
        out.patch(&block(How::Fell { branch: 0 }), AREA, BIAS);
        let kinds: Vec<(u32, u32)> = out.patches.iter().map(|p| (p.kind, p.len)).collect();
        assert_eq!(kinds, [(PATCH_INT3, 1), (PATCH_CALL6, 6)]);
        assert_eq!(out.trapped, 1);
    }

    #[test]
    fn trampolines_are_packed_one_after_another() {
        // A loop of short blocks: cmp; jcc | inc; jmp back | calls; ret.
        // cmp edi,5; jl L2 | L1: add eax,1; sub edi,1; jmp L0 | L2: mov
        // ecx,2; call f | mov edx,3; ret
        let bytes = [
            0x83, 0xff, 0x05, 0x7c, 0x08, // cmp edi,5; jl +8
            0x83, 0xc0, 0x01, 0x83, 0xef, 0x01, 0xeb, 0xf3, // add; sub; jmp 0x1000
            0xb9, 2, 0, 0, 0, 0xe8, 0x00, 0x00, 0x00, 0x00, // mov ecx,2; call next
            0xba, 3, 0, 0, 0, 0xc3, // mov edx,3; ret
        ];
        let plan = plan(&bytes);
        let e = encode(&plan, BIAS, AREA, 0);
        assert_eq!(e.failed, 0);
        // No filler between trampolines: each starts where the last ended
        // (laid out by bounds, 60% of this area was int3).
        assert!(!e.code.is_empty());
        assert_eq!(e.code.iter().filter(|&&b| b == 0xcc).count(), 0);
        // Every patch leads into the area, and every count is relocatable.
        for p in &e.patches {
            assert!((AREA..AREA + e.code.len() as u64).contains(&p.entry));
        }
        assert!(!e.counter_fixups.is_empty());
        // A trampoline that runs into the next one laid out goes on with
        // no jump to the next byte.
        let mut d = Decoder::with_ip(64, &e.code, AREA, DecoderOptions::NONE);
        let mut jumps = 0;
        while d.can_decode() {
            let x = d.decode();
            assert_ne!(x.code(), Code::INVALID);
            if x.mnemonic() == iced_x86::Mnemonic::Jmp && x.op0_kind() != OpKind::Register {
                jumps += 1;
                assert_ne!(x.near_branch_target(), x.next_ip(), "{x:?}");
            }
        }
        assert!(jumps > 0);
    }

    #[test]
    fn no_ops_fill_any_length_in_whole_instructions() {
        for n in 0..40u64 {
            let pad = nops(n);
            assert_eq!(pad.len() as u64, n);
            let mut d = Decoder::with_ip(64, &pad, 0, DecoderOptions::NONE);
            while d.can_decode() {
                assert_eq!(d.decode().mnemonic(), iced_x86::Mnemonic::Nop);
            }
        }
    }

    #[test]
    fn a_piece_that_does_not_fit_its_room_fails() {
        let plan = plan(&[0xc3]);
        let cx = Ctx {
            plan: &plan,
            bias: BIAS,
            area: AREA,
            first_counter: 0,
            opts: Options::default(),
        };
        let piece = || Piece {
            block: 0,
            stubs: Vec::new(),
            main: count_seq(7, false, false),
        };
        let at = |main_size| Place {
            stub_at: AREA,
            stub_size: STUB,
            main_at: AREA,
            main_size,
            entry: AREA,
        };
        let mut out = laid();
        assert!(emit(
            &cx,
            piece(),
            &at(4),
            &|t| t,
            false,
            (AREA, AREA + 256),
            &mut out
        )
        .is_none());
        assert!(out.counter_fixups.is_empty());
        // `incq %gs:disp32` is 9 bytes: what it took, not its room.
        assert_eq!(
            emit(
                &cx,
                piece(),
                &at(64),
                &|t| t,
                false,
                (AREA, AREA + 256),
                &mut out
            ),
            Some(Sizes { stub: 0, main: 9 })
        );
        // `incq %gs:56`: its displacement's offset is listed for relocation.
        assert_eq!(out.counter_fixups.len(), 1);
        let o = out.counter_fixups[0] as usize;
        assert_eq!(out.code[o..o + 4], 56u32.to_le_bytes());
    }
}
