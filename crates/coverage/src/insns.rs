//! A block's instruction addresses: a view of one buffer that a whole
//! plan shares.
//!
//! cc1 has 1,350,000 blocks. With an allocation of its own per block,
//! reading its plan from the cache was that many `malloc`s (and as many
//! `free`s at the exit), the addresses scattered over the heap with a
//! header each. A plan read from the cache holds every block's
//! addresses in one buffer, in block order, and each block a range of
//! it ([`Builder`]); the counts take the same view (a reference count,
//! not a copy). A list made alone ([`Insns::from`] a `Vec`) has a buffer
//! of its own.
//!
//! The buffer holds a block's first address whole and each later one as
//! its distance from the one before, a byte (an x86 instruction is 1 to
//! 15 bytes long, and a block's instructions follow each other): cc1's
//! 14 million addresses take 26 MB, not 113 MB, of fresh pages in every
//! run that reads its plan. A list with a gap of more than 255 bytes, or
//! addresses not ascending, makes its whole buffer one of 8-byte
//! addresses instead.
//!
//! The cache keeps the buffer as it is, with each block's length in it
//! ([`Builder::parts`]); read back ([`views_of`]), it is taken whole, not
//! decoded, and a plan read from a mapped file views the file's bytes.

use std::fmt;
use std::sync::Arc;

/// A plan's (or one list's) addresses; a cache file keeps them as they
/// are, with where each block's list ends ([`Builder::parts`],
/// [`views_of`]).
pub enum Buf {
    /// Per block: its first address (8 bytes, little-endian), then one
    /// byte per later instruction, its distance (1 to 255) from the one
    /// before. (A plan read from a mapped cache file: the file's bytes.)
    Near(bytes::Bytes),
    /// Per block: its addresses.
    Wide(Vec<u64>),
}

/// A [`Builder`]'s buffer, growing.
enum Growing {
    Near(Vec<u8>),
    Wide(Vec<u64>),
}

/// Start addresses of a block's instructions, ascending.
#[derive(Clone)]
pub struct Insns {
    buf: Arc<Buf>,
    // Invariant: lo <= hi <= the buffer's length; a `Near` range is empty
    // or holds 8 bytes and more.
    lo: u32,
    hi: u32,
}

impl Insns {
    /// Its number of instructions.
    pub fn len(&self) -> usize {
        let n = (self.hi - self.lo) as usize;
        match &*self.buf {
            Buf::Near(_) if n > 0 => n - 7,
            _ => n,
        }
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.lo == self.hi
    }

    /// Its instructions' addresses, in order.
    pub fn iter(&self) -> Iter<'_> {
        let (lo, hi) = (self.lo as usize, self.hi as usize);
        match &*self.buf {
            Buf::Near(b) if lo < hi => Iter(Walk::Near {
                at: Some(u64::from_le_bytes(
                    b[lo..lo + 8].try_into().unwrap_or_default(),
                )),
                rest: b[lo + 8..hi].iter(),
            }),
            Buf::Near(_) => Iter(Walk::Near {
                at: None,
                rest: [].iter(),
            }),
            Buf::Wide(v) => Iter(Walk::Wide(v[lo..hi].iter())),
        }
    }

    /// The first address.
    pub fn first(&self) -> Option<u64> {
        self.iter().next()
    }

    /// The last address.
    pub fn last(&self) -> Option<u64> {
        match &*self.buf {
            Buf::Wide(v) => v[self.lo as usize..self.hi as usize].last().copied(),
            Buf::Near(_) => self.iter().last(),
        }
    }

    /// The `k`th address.
    pub fn get(&self, k: usize) -> Option<u64> {
        match &*self.buf {
            Buf::Wide(v) => v[self.lo as usize..self.hi as usize].get(k).copied(),
            Buf::Near(_) => self.iter().nth(k),
        }
    }

    /// Whether `self` and `other` are views of the same buffer.
    pub fn same_buffer(&self, other: &Insns) -> bool {
        Arc::ptr_eq(&self.buf, &other.buf)
    }
}

/// [`Insns::iter`].
pub struct Iter<'a>(Walk<'a>);

enum Walk<'a> {
    Near {
        at: Option<u64>,
        rest: std::slice::Iter<'a, u8>,
    },
    Wide(std::slice::Iter<'a, u64>),
}

impl Iterator for Iter<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        match &mut self.0 {
            Walk::Near { at, rest } => {
                let here = (*at)?;
                *at = rest.next().map(|&d| here + u64::from(d));
                Some(here)
            }
            Walk::Wide(v) => v.next().copied(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.0 {
            Walk::Near { at, rest } => usize::from(at.is_some()) + rest.len(),
            Walk::Wide(v) => v.len(),
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Insns {
    type Item = u64;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Blocks' lists, one after another, in one buffer: [`Builder::push`]
/// each, then [`Builder::views`].
pub struct Builder {
    buf: Growing,
    /// Per block, where its list ends in `buf`.
    ends: Vec<u32>,
}

impl Builder {
    /// For about `blocks` blocks of `insns` instructions in all.
    pub fn with_capacity(blocks: usize, insns: usize) -> Builder {
        let mut b = Vec::with_capacity(blocks.saturating_mul(7).saturating_add(insns));
        crate::cache::huge_pages(&mut b);
        Builder {
            buf: Growing::Near(b),
            ends: Vec::with_capacity(blocks),
        }
    }

    /// Add the next block's list; None when the buffer would pass what a
    /// view holds (4 GiB).
    pub fn push(&mut self, addrs: &[u64]) -> Option<()> {
        let near = addrs
            .windows(2)
            .all(|w| (1..=255).contains(&(w[1].wrapping_sub(w[0]))));
        if !near {
            self.widen();
        }
        match &mut self.buf {
            Growing::Near(b) => {
                if let Some((&first, rest)) = addrs.split_first() {
                    b.extend_from_slice(&first.to_le_bytes());
                    let mut at = first;
                    b.extend(rest.iter().map(|&a| {
                        let d = (a - at) as u8;
                        at = a;
                        d
                    }));
                }
            }
            Growing::Wide(v) => v.extend_from_slice(addrs),
        }
        let end = match &self.buf {
            Growing::Near(b) => b.len(),
            Growing::Wide(v) => v.len(),
        };
        self.ends.push(u32::try_from(end).ok()?);
        Some(())
    }

    /// Make the buffer one of 8-byte addresses (the blocks so far kept).
    fn widen(&mut self) {
        let Growing::Near(b) = &mut self.buf else {
            return;
        };
        let mut wide = Vec::with_capacity(b.len());
        let buf = Arc::new(Buf::Near(std::mem::take(b).into()));
        let mut lo = 0;
        for end in &mut self.ends {
            let view = Insns {
                buf: buf.clone(),
                lo,
                hi: *end,
            };
            lo = *end;
            wide.extend(view.iter());
            // (Fewer entries than bytes: within u32 as the bytes were.)
            *end = wide.len() as u32;
        }
        self.buf = Growing::Wide(wide);
    }

    /// Every block's view, in the order pushed.
    pub fn views(self) -> impl Iterator<Item = Insns> {
        let (parts, ends) = self.parts();
        views(Arc::new(parts), ends)
    }

    /// The buffer, and where each block's list ends in it.
    pub fn parts(self) -> (Buf, Vec<u32>) {
        let buf = match self.buf {
            Growing::Near(b) => Buf::Near(b.into()),
            Growing::Wide(v) => Buf::Wide(v),
        };
        (buf, self.ends)
    }
}

fn views(buf: Arc<Buf>, ends: Vec<u32>) -> impl Iterator<Item = Insns> {
    let mut lo = 0;
    ends.into_iter().map(move |hi| {
        let v = Insns {
            buf: buf.clone(),
            lo,
            hi,
        };
        lo = hi;
        v
    })
}

/// The views of a buffer and its blocks' ends ([`Builder::parts`], read
/// back); None when an end lies before the one before it or past the
/// buffer, or a list of [`Buf::Near`] is neither empty nor 8 bytes and
/// more (a first address whole).
pub fn views_of(buf: Buf, ends: Vec<u32>) -> Option<impl Iterator<Item = Insns>> {
    let len = match &buf {
        Buf::Near(b) => b.len(),
        Buf::Wide(v) => v.len(),
    };
    let near = matches!(buf, Buf::Near(_));
    let mut lo = 0;
    for &hi in &ends {
        let n = hi.checked_sub(lo)? as usize;
        if hi as usize > len || (near && n > 0 && n < 8) {
            return None;
        }
        lo = hi;
    }
    Some(views(Arc::new(buf), ends))
}

impl From<Vec<u64>> for Insns {
    /// A list with a buffer of its own (its addresses whole: a plan
    /// being made holds these until [`share`] packs them).
    ///
    /// # Panics
    ///
    /// With more than 2^32 addresses (32 GiB of them).
    fn from(v: Vec<u64>) -> Insns {
        let hi = u32::try_from(v.len()).expect("at most 2^32 instructions in a block");
        Insns {
            buf: Arc::new(Buf::Wide(v)),
            lo: 0,
            hi,
        }
    }
}

impl Default for Insns {
    fn default() -> Insns {
        Insns {
            buf: Arc::new(Buf::Wide(Vec::new())),
            lo: 0,
            hi: 0,
        }
    }
}

impl fmt::Debug for Insns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Insns {
    fn eq(&self, other: &Insns) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Insns {}

impl PartialEq<[u64]> for Insns {
    fn eq(&self, other: &[u64]) -> bool {
        self.iter().eq(other.iter().copied())
    }
}

impl<const N: usize> PartialEq<[u64; N]> for Insns {
    fn eq(&self, other: &[u64; N]) -> bool {
        *self == other[..]
    }
}

impl PartialEq<Vec<u64>> for Insns {
    fn eq(&self, other: &Vec<u64>) -> bool {
        *self == other[..]
    }
}

/// Move every block's addresses into one buffer (as a plan read from
/// the cache holds them): one allocation instead of one a block.
pub(crate) fn share(blocks: &mut [crate::plan::PlannedBlock]) {
    let mut b = Builder::with_capacity(blocks.len(), blocks.iter().map(|b| b.insns.len()).sum());
    let mut one = Vec::new();
    for blk in blocks.iter() {
        one.clear();
        one.extend(blk.insns.iter());
        if b.push(&one).is_none() {
            return; // (Past 4 GiB: each keeps its own.)
        }
    }
    for (blk, v) in blocks.iter_mut().zip(b.views()) {
        blk.insns = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(lists: &[&[u64]]) -> Vec<Insns> {
        let mut b = Builder::with_capacity(lists.len(), 0);
        for l in lists {
            b.push(l).unwrap();
        }
        b.views().collect()
    }

    #[test]
    fn a_view_is_its_blocks_addresses() {
        let v = built(&[&[1, 2], &[3, 7, 8], &[], &[300]]);
        assert_eq!(v[0], [1, 2]);
        assert_eq!(v[1], [3, 7, 8]);
        assert!(v[2].is_empty() && v[2].first().is_none() && v[2].last().is_none());
        assert_eq!(v[3], [300]);
        assert!(v[0].same_buffer(&v[3]));
        assert!(matches!(*v[0].buf, Buf::Near(_)));
        assert_eq!(
            (v[1].len(), v[1].first(), v[1].last()),
            (3, Some(3), Some(8))
        );
        assert_eq!((v[1].get(1), v[1].get(3)), (Some(7), None));
        assert_eq!(v[1].iter().len(), 3);
        assert_eq!(v[1], Insns::from(vec![3, 7, 8]));
        assert!(matches!(*Insns::from(vec![3, 7, 8]).buf, Buf::Wide(_)));
        assert!(!v[1].same_buffer(&Insns::from(vec![3, 7, 8])));
        assert_eq!(format!("{:?}", v[1]), "[3, 7, 8]");
    }

    #[test]
    fn a_gap_past_a_byte_widens_the_whole_buffer() {
        let far = 0xffff_ffff_0000_u64;
        let v = built(&[
            &[10, 12],
            &[20, 20 + 255],
            &[30, 30 + 256, far],
            &[5],
            &[9, 4],
        ]);
        assert!(matches!(*v[0].buf, Buf::Wide(_)));
        assert_eq!(v[0], [10, 12]);
        assert_eq!(v[1], [20, 275]);
        assert_eq!(v[2], [30, 286, far]);
        assert_eq!(
            (v[2].len(), v[2].last(), v[2].get(2)),
            (3, Some(far), Some(far))
        );
        assert_eq!(v[3], [5]);
        assert_eq!(v[4], [9, 4]);
        assert_eq!(Insns::from(vec![1, 1]), [1, 1]);
        assert_eq!(Insns::default().len(), 0);
    }
}
