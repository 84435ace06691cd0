//! Patches as the planning server sends them (the `TEXT` answer of
//! [`crate::launch`]'s protocol): 12 bytes each, relative to the load,
//! so the same bytes serve a load at any bias and area. Half of the 24
//! bytes of absolute addresses they replace: cc1's 1,350,000 one-shot
//! probes are 16 MB on the socket, not 32, and nothing is moved per load.
//!
//! A record is, little-endian: u32 the address less the bias; u32 the
//! entry, less the bias for [`PATCH_REL8`] (a jump within the module),
//! as it is for [`PATCH_ONCE`] (a block index), less the area's address
//! for the others (a trampoline); u16 the kind; u16 the length.

use std::borrow::Cow;

use super::{Encoded, Patch, PATCH_ONCE, PATCH_REL8};

/// Bytes per patch on the wire.
pub const WIRE: usize = 12;

/// Patches as records, for a load at `bias0` with its area at `area0`
/// (what a cache file keeps: bias 0, the area at the offset it was
/// encoded for).
#[derive(Clone, Debug, Default)]
pub struct Records {
    /// The records, [`WIRE`] bytes each (a whole number of them).
    bytes: bytes::Bytes,
    pub bias0: u64,
    pub area0: u64,
}

impl Records {
    /// `bytes` as records; None when they are not a whole number of
    /// records, one's kind is not a patch's, or their addresses do not
    /// ascend.
    pub fn new(bytes: bytes::Bytes, bias0: u64, area0: u64) -> Option<Records> {
        let addr = |r: &[u8]| u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
        let known = |r: &[u8]| (1..=6).contains(&u16::from_le_bytes([r[8], r[9]]));
        let mut last = None;
        let ok = bytes.len() % WIRE == 0
            && bytes.chunks_exact(WIRE).all(|r| {
                let a = Some(addr(r));
                known(r) && std::mem::replace(&mut last, a) < a
            });
        ok.then_some(Records {
            bytes,
            bias0,
            area0,
        })
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.bytes.len() / WIRE
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Their bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The patches they hold.
    pub fn patches(&self) -> Vec<Patch> {
        self.bytes
            .chunks_exact(WIRE)
            .map(|r| patch_of(r.try_into().expect("a record"), self.bias0, self.area0))
            .collect()
    }
}

impl Encoded {
    /// The patches of this encoding (made for a load at `bias0`, its area
    /// at `area0`) on the wire; None when one does not fit in a record (a
    /// module or area past 4 GiB, a kind or length past 16 bits). An
    /// encoding read from the cache for that load has them already.
    pub fn wire(&self, bias0: u64, area0: u64) -> Option<Cow<'_, [u8]>> {
        if let Some(r) = self
            .records
            .as_ref()
            .filter(|r| (r.bias0, r.area0) == (bias0, area0))
        {
            return Some(Cow::Borrowed(r.bytes()));
        }
        let patches = self.patch_list();
        let mut out = Vec::with_capacity(patches.len() * WIRE);
        for p in patches.iter() {
            let entry = match p.kind {
                PATCH_REL8 => p.entry.checked_sub(bias0)?,
                PATCH_ONCE => p.entry,
                _ => p.entry.checked_sub(area0)?,
            };
            let addr = u32::try_from(p.addr.checked_sub(bias0)?).ok()?;
            out.extend_from_slice(&addr.to_le_bytes());
            out.extend_from_slice(&u32::try_from(entry).ok()?.to_le_bytes());
            out.extend_from_slice(&u16::try_from(p.kind).ok()?.to_le_bytes());
            out.extend_from_slice(&u16::try_from(p.len).ok()?.to_le_bytes());
        }
        Some(Cow::Owned(out))
    }
}

/// One record read back for a load at `bias` with its area at `area`
/// (what the runtime's `cover` does in C).
pub fn patch_of(rec: &[u8; WIRE], bias: u64, area: u64) -> Patch {
    let half = |i: usize| u32::from_le_bytes([rec[i], rec[i + 1], rec[i + 2], rec[i + 3]]);
    let short = |i: usize| u32::from(u16::from_le_bytes([rec[i], rec[i + 1]]));
    let (kind, entry) = (short(8), u64::from(half(4)));
    Patch {
        addr: bias.wrapping_add(half(0).into()),
        entry: match kind {
            PATCH_REL8 => bias.wrapping_add(entry),
            PATCH_ONCE => entry,
            _ => area.wrapping_add(entry),
        },
        kind,
        len: short(10),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{PATCH_INT3, PATCH_JMP};

    /// A patch at `addr` past the bias `bias0`.
    fn p(bias0: u64, addr: u64, entry: u64, kind: u32, len: u32) -> Patch {
        Patch {
            addr: bias0 + addr,
            entry,
            kind,
            len,
        }
    }

    /// A jump into the area, a jump within the module, a one-shot probe.
    fn three(bias0: u64, area0: u64) -> Vec<Patch> {
        vec![
            p(bias0, 0x1000, area0 + 0x40, PATCH_JMP, 7),
            p(bias0, 0x1010, bias0 + 0x1040, PATCH_REL8, 2),
            p(bias0, 0x1020, 77, PATCH_ONCE, 1),
        ]
    }

    #[test]
    fn a_patch_read_back_for_any_load_is_the_patch_moved_there() {
        let (bias0, area0) = (0x5555_0000_0000, 0x5554_c000_0000);
        let mut patches = three(bias0, area0);
        patches.push(p(bias0, 0xffff_fff0, area0 + 0x7fff_0000, PATCH_INT3, 1));
        let enc = Encoded {
            patches,
            ..Encoded::default()
        };
        let wire = enc.wire(bias0, area0).expect("it fits");
        assert_eq!(wire.len(), 4 * WIRE);
        let (bias, area) = (0x7f00_1234_5000, 0x7f00_0000_0000);
        let back: Vec<Patch> = wire
            .chunks_exact(WIRE)
            .map(|r| patch_of(r.try_into().unwrap(), bias, area))
            .collect();
        assert_eq!(back, enc.patches_for(bias0, area0, bias, area));
        // Past 4 GiB from the bias, or a length past 16 bits: no record.
        let far = Encoded {
            patches: vec![p(bias0, 1 << 32, area0, PATCH_JMP, 5)],
            ..Encoded::default()
        };
        assert_eq!(far.wire(bias0, area0), None);
        let long = Encoded {
            patches: vec![p(bias0, 0, area0, PATCH_JMP, 1 << 16)],
            ..Encoded::default()
        };
        assert_eq!(long.wire(bias0, area0), None);
    }

    #[test]
    fn records_kept_are_the_patches_and_are_sent_as_they_are() {
        let (bias0, area0) = (0, 0x4000_0000);
        let made = Encoded {
            patches: three(bias0, area0),
            ..Encoded::default()
        };
        let wire = made.wire(bias0, area0).unwrap().into_owned();
        let kept = Encoded {
            records: Records::new(wire.clone().into(), bias0, area0),
            ..Encoded::default()
        };
        assert_eq!((kept.patch_count(), kept.patches.len()), (3, 0));
        assert_eq!(kept.patch_list(), made.patch_list());
        let (bias, area) = (0x7f00_0000_0000, 0x7f00_4000_0000);
        assert_eq!(
            kept.patches_for(bias0, area0, bias, area),
            made.patches_for(bias0, area0, bias, area)
        );
        // Sent as kept (no copy); for another load's bias and area, made.
        assert!(matches!(kept.wire(bias0, area0), Some(Cow::Borrowed(w)) if w == &wire[..]));
        assert_eq!(kept.wire(bias, area), made.wire(bias, area));
        // Damaged: a record cut short, an unknown kind, addresses that do
        // not ascend.
        assert!(Records::new(wire[..wire.len() - 1].to_vec().into(), 0, 0).is_none());
        let mut bad = wire.clone();
        bad[8] = 7;
        assert!(Records::new(bad.into(), 0, 0).is_none());
        let mut bad = wire.clone();
        bad[WIRE..WIRE + 4].copy_from_slice(&0x1000u32.to_le_bytes());
        assert!(Records::new(bad.into(), 0, 0).is_none());
    }
}
