//! NetBSD's call-arc table, the data structure `_mcount` fills and kgmon
//! dumps (`common/lib/libc/gmon/mcount.c` v1.6, `sys/sys/gmon.h` v1.8).
//!
//! `froms` has one u16 slot per `HASHFRACTION * sizeof(u16)` = 4 bytes of
//! text, indexed by the call site; a non-zero slot heads a chain of `tos`
//! entries, one per callee seen from that site, most recently *found*
//! first. `tos[0].link` counts allocated entries; an allocation reaching
//! `tolimit` is an overflow, which the caller turns into the ERROR state.
//! [`ArcTable::arcs`] lists the arcs in kgmon's dump order.
//!
//! One deliberate difference: mcount accepts `frompc - lowpc == textsize`
//! (it tests `>`), which indexes one slot past `froms`; here call sites
//! must lie strictly inside the text.

use super::Arc;

/// `HASHFRACTION`: froms bytes = text bytes / 2.
pub const HASHFRACTION: u64 = 2;
/// `ARCDENSITY`: tos entries = 2 % of text bytes…
pub const ARCDENSITY: u64 = 2;
/// …at least `MINARCS`…
pub const MINARCS: u64 = 50;
/// …at most `MAXARCS` (tos indices are u16).
pub const MAXARCS: u64 = (1 << 16) - 2;
/// Text bytes per froms slot.
pub const SLOT_BYTES: u64 = HASHFRACTION * 2;

/// `tolimit` for `textsize` bytes of text, as `kmstartup` computes it:
/// `clamp(textsize * ARCDENSITY / 100, MINARCS, MAXARCS)`.
pub fn tolimit_for(textsize: u64) -> u64 {
    (textsize.saturating_mul(ARCDENSITY) / 100).clamp(MINARCS, MAXARCS)
}

/// One `tostruct`: a callee and its count, linked to the next callee of
/// the same call site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ToStruct {
    /// The callee's entry.
    pub selfpc: u64,
    /// Traversals counted (`long` in the original).
    pub count: u64,
    /// Next entry on the chain, 0 at the end.
    pub link: u16,
}

/// What [`ArcTable::record`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// The arc was counted.
    Counted,
    /// The call site is outside the text; nothing was counted.
    OutsideText,
    /// A new entry was needed and the table is full: the caller must
    /// enter the ERROR state.
    Overflow,
}

/// The froms/tos arc table over one text range.
#[derive(Clone, Debug)]
pub struct ArcTable {
    lowpc: u64,
    textsize: u64,
    tolimit: u64,
    froms: Vec<u16>,
    tos: Vec<ToStruct>,
}

impl ArcTable {
    /// A table sized the way NetBSD's `kmstartup` sizes it for the text
    /// `[lowpc, highpc)`, both rounded out to 4 bytes (as the histogram's
    /// cells, [`super::build::text_bounds`]):
    /// `tolimit = clamp(textsize * ARCDENSITY / 100, MINARCS, MAXARCS)`.
    pub fn for_text(lowpc: u64, highpc: u64) -> Self {
        let (lowpc, highpc) = super::build::text_bounds(lowpc, highpc);
        let textsize = highpc.saturating_sub(lowpc);
        Self::with_limit(lowpc, textsize, tolimit_for(textsize))
    }

    /// A table with an explicit `tolimit` (at most [`MAXARCS`] + 1, so
    /// that indices fit a u16).
    pub fn with_limit(lowpc: u64, textsize: u64, tolimit: u64) -> Self {
        let tolimit = tolimit.clamp(1, MAXARCS + 1);
        ArcTable {
            lowpc,
            textsize,
            tolimit,
            froms: vec![0; textsize.div_ceil(SLOT_BYTES) as usize],
            tos: vec![ToStruct::default(); tolimit as usize],
        }
    }

    /// `tolimit`: entries available, counting the unused `tos[0]`.
    pub fn tolimit(&self) -> u64 {
        self.tolimit
    }

    /// Entries in use (`tos[0].link`, capped at `tolimit - 1`).
    pub fn used(&self) -> u64 {
        u64::from(self.tos[0].link).min(self.tolimit - 1)
    }

    /// The froms slot covering text offset `4 * slot`.
    pub fn froms(&self, slot: usize) -> u16 {
        self.froms.get(slot).copied().unwrap_or(0)
    }

    /// `tos[i]` (`tos[0].link` is the allocation counter).
    pub fn tos(&self, i: usize) -> ToStruct {
        self.tos.get(i).copied().unwrap_or_default()
    }

    /// Forget every arc (kgmon -r).
    pub fn reset(&mut self) {
        self.froms.fill(0);
        self.tos.fill(ToStruct::default());
    }

    /// Count one traversal of the arc from call site `frompc` to the
    /// function entered at `selfpc`: `_mcount`'s algorithm.
    pub fn record(&mut self, frompc: u64, selfpc: u64) -> Recorded {
        let off = frompc.wrapping_sub(self.lowpc);
        if off >= self.textsize {
            return Recorded::OutsideText;
        }
        let slot = (off / SLOT_BYTES) as usize;
        let head = self.froms[slot];
        if head == 0 {
            let Some(t) = self.allocate() else {
                return Recorded::Overflow;
            };
            self.froms[slot] = t;
            self.tos[t as usize] = ToStruct {
                selfpc,
                count: 1,
                link: 0,
            };
            return Recorded::Counted;
        }
        let mut top = head as usize;
        if self.tos[top].selfpc == selfpc {
            self.tos[top].count += 1;
            return Recorded::Counted;
        }
        loop {
            let next = self.tos[top].link;
            if next == 0 {
                let Some(t) = self.allocate() else {
                    return Recorded::Overflow;
                };
                self.tos[t as usize] = ToStruct {
                    selfpc,
                    count: 1,
                    link: self.froms[slot],
                };
                self.froms[slot] = t;
                return Recorded::Counted;
            }
            let prev = top;
            top = next as usize;
            if self.tos[top].selfpc == selfpc {
                // Found: count it and move it to the front of the chain.
                self.tos[top].count += 1;
                let t = self.tos[prev].link;
                self.tos[prev].link = self.tos[top].link;
                self.tos[top].link = self.froms[slot];
                self.froms[slot] = t;
                return Recorded::Counted;
            }
        }
    }

    /// `++tos[0].link`, or `None` at `tolimit` (the counter still moves,
    /// as in the original).
    fn allocate(&mut self) -> Option<u16> {
        let t = u64::from(self.tos[0].link) + 1;
        if t >= self.tolimit {
            // Keep the counter saturated at tolimit so it cannot wrap.
            self.tos[0].link = self.tolimit as u16;
            return None;
        }
        self.tos[0].link = t as u16;
        Some(t as u16)
    }

    /// The arcs in kgmon's dump order: by increasing froms slot, each
    /// chain from its head; call sites are the slot's first address.
    pub fn arcs(&self) -> Vec<Arc> {
        let mut out = Vec::new();
        for (slot, &head) in self.froms.iter().enumerate() {
            let mut t = head as usize;
            while t != 0 {
                let to = self.tos[t];
                out.push(Arc {
                    from_pc: self.lowpc + slot as u64 * SLOT_BYTES,
                    self_pc: to.selfpc,
                    count: to.count,
                });
                t = to.link as usize;
            }
        }
        out
    }
}
