//! A block's instruction addresses: a view of one buffer that a whole
//! plan shares.
//!
//! cc1 has 1,350,000 blocks. With an allocation of its own per block,
//! reading its plan from the cache was that many `malloc`s (and as many
//! `free`s at the exit), the addresses scattered over the heap with a
//! header each. A plan read from the cache holds every block's
//! addresses in one buffer, in block order, and each block a range of
//! it ([`Insns::shared`]); the counts take the same view (a reference
//! count, not a copy). A list made alone ([`Insns::from`] a `Vec`) has a
//! buffer of its own.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// Start addresses of a block's instructions, ascending (derefs to a
/// slice).
#[derive(Clone)]
pub struct Insns {
    buf: Arc<Vec<u64>>,
    // Invariant: lo <= hi <= buf.len().
    lo: u32,
    hi: u32,
}

impl Insns {
    /// The addresses `range` of `buf`; None when the range is not within
    /// it (or past what a view holds: 2^32 addresses).
    pub fn shared(buf: &Arc<Vec<u64>>, range: Range<usize>) -> Option<Insns> {
        if range.start > range.end || range.end > buf.len() {
            return None;
        }
        Some(Insns {
            buf: Arc::clone(buf),
            lo: u32::try_from(range.start).ok()?,
            hi: u32::try_from(range.end).ok()?,
        })
    }

    /// Whether `self` and `other` are views of the same buffer.
    pub fn same_buffer(&self, other: &Insns) -> bool {
        Arc::ptr_eq(&self.buf, &other.buf)
    }
}

impl Deref for Insns {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        &self.buf[self.lo as usize..self.hi as usize]
    }
}

impl<'a> IntoIterator for &'a Insns {
    type Item = &'a u64;
    type IntoIter = std::slice::Iter<'a, u64>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl From<Vec<u64>> for Insns {
    /// A list with a buffer of its own.
    ///
    /// # Panics
    ///
    /// With more than 2^32 addresses (32 GiB of them).
    fn from(v: Vec<u64>) -> Insns {
        let hi = u32::try_from(v.len()).expect("at most 2^32 instructions in a block");
        Insns {
            buf: Arc::new(v),
            lo: 0,
            hi,
        }
    }
}

impl Default for Insns {
    fn default() -> Insns {
        Insns::from(Vec::new())
    }
}

impl fmt::Debug for Insns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Insns {
    fn eq(&self, other: &Insns) -> bool {
        **self == **other
    }
}

impl Eq for Insns {}

impl PartialEq<[u64]> for Insns {
    fn eq(&self, other: &[u64]) -> bool {
        **self == *other
    }
}

impl<const N: usize> PartialEq<[u64; N]> for Insns {
    fn eq(&self, other: &[u64; N]) -> bool {
        **self == other[..]
    }
}

impl PartialEq<Vec<u64>> for Insns {
    fn eq(&self, other: &Vec<u64>) -> bool {
        **self == other[..]
    }
}

/// Move every block's addresses into one buffer (as a plan read from
/// the cache holds them): one allocation instead of one a block.
pub(crate) fn share(blocks: &mut [crate::plan::PlannedBlock]) {
    let mut all = Vec::with_capacity(blocks.iter().map(|b| b.insns.len()).sum());
    let ranges: Vec<Range<usize>> = blocks
        .iter()
        .map(|b| {
            let lo = all.len();
            all.extend_from_slice(&b.insns);
            lo..all.len()
        })
        .collect();
    let all = Arc::new(all);
    for (b, r) in blocks.iter_mut().zip(ranges) {
        if let Some(v) = Insns::shared(&all, r) {
            b.insns = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_is_its_range_of_the_buffer() {
        let buf = Arc::new(vec![1, 2, 3, 4, 5]);
        let a = Insns::shared(&buf, 1..3).unwrap();
        let b = Insns::shared(&buf, 3..5).unwrap();
        assert_eq!(*a, [2, 3]);
        assert_eq!(b, [4, 5]);
        assert!(a.same_buffer(&b));
        assert_eq!(a, Insns::from(vec![2, 3]));
        assert!(!a.same_buffer(&Insns::from(vec![2, 3])));
        assert!(Insns::shared(&buf, 5..5).unwrap().is_empty());
        assert_eq!(format!("{a:?}"), "[2, 3]");
    }

    #[test]
    fn a_range_outside_the_buffer_is_refused() {
        let buf = Arc::new(vec![1, 2, 3]);
        assert!(Insns::shared(&buf, 2..4).is_none());
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 2..1;
        assert!(Insns::shared(&buf, backwards).is_none());
        assert!(Insns::shared(&buf, 4..4).is_none());
    }
}
