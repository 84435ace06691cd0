//! A module's histogram in memory: pc → count, compact.
//!
//! A system-wide prof session charges every user pc of every process on the
//! machine, so a module such as `librustc_driver.so` or `libLLVM.so`
//! collects hundreds of thousands of distinct pcs in an hour. A
//! `BTreeMap<u64, u64>` spends about 27 bytes on each; this spends 8 on a pc
//! below 4 GiB counted fewer than 2^32 times (every pc of an ordinary
//! module): a sorted `Vec` of `(u32, u32)`, new pcs gathered in a small
//! map and merged in batches. Anything else goes to a `BTreeMap`.

use std::collections::BTreeMap;

/// New pcs held before a merge into the sorted vector.
const PENDING_MAX: usize = 4096;

/// pc → count, never 0.
#[derive(Clone, Debug, Default)]
pub(crate) struct PcCounts {
    /// Sorted by pc, exact capacity.
    small: Vec<(u32, u32)>,
    /// pcs not yet in `small`.
    pending: BTreeMap<u32, u64>,
    /// pcs at or above 4 GiB, and counts that outgrew a u32.
    wide: BTreeMap<u64, u64>,
}

impl PcCounts {
    /// One more tick at `pc`.
    pub(crate) fn add(&mut self, pc: u64) {
        let Ok(small_pc) = u32::try_from(pc) else {
            *self.wide.entry(pc).or_insert(0) += 1;
            return;
        };
        if let Ok(i) = self.small.binary_search_by_key(&small_pc, |&(p, _)| p) {
            match self.small[i].1.checked_add(1) {
                Some(c) => self.small[i].1 = c,
                None => {
                    self.small.remove(i);
                    self.wide.insert(pc, u64::from(u32::MAX) + 1);
                }
            }
            return;
        }
        if let Some(c) = self.wide.get_mut(&pc) {
            *c += 1;
            return;
        }
        *self.pending.entry(small_pc).or_insert(0) += 1;
        if self.pending.len() >= PENDING_MAX {
            self.merge();
        }
    }

    /// Move the pending pcs into the sorted vector.
    fn merge(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        let mut merged = Vec::with_capacity(self.small.len() + pending.len());
        let mut old = self.small.iter().copied().peekable();
        for (pc, c) in pending {
            while let Some(&(p, n)) = old.peek() {
                if p >= pc {
                    break;
                }
                merged.push((p, n));
                old.next();
            }
            match u32::try_from(c) {
                Ok(c) => merged.push((pc, c)),
                Err(_) => {
                    self.wide.insert(u64::from(pc), c);
                }
            }
        }
        merged.extend(old);
        self.small = merged;
    }

    /// Bytes held, roughly: the sorted vector's capacity, and about 32
    /// bytes per entry of each map (key, value and the tree's share).
    pub(crate) fn heap_bytes(&self) -> u64 {
        let small = self.small.capacity() * std::mem::size_of::<(u32, u32)>();
        let maps = (self.pending.len() + self.wide.len()) * 32;
        (small + maps) as u64
    }

    /// Every (pc, count), in increasing pc.
    pub(crate) fn pairs(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = self
            .small
            .iter()
            .map(|&(p, c)| (u64::from(p), u64::from(c)))
            .chain(self.pending.iter().map(|(&p, &c)| (u64::from(p), c)))
            .chain(self.wide.iter().map(|(&p, &c)| (p, c)))
            .collect();
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn same_pairs_as_a_map() {
        // pcs from a few regions, with repeats, in an order that is neither
        // sorted nor reversed, across several merges; some above 4 GiB.
        let mut counts = PcCounts::default();
        let mut model = BTreeMap::new();
        let mut x: u64 = 12345;
        for i in 0..50_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let pc = match i % 5 {
                0 => 0x1000 + (x >> 40) % 20_000,
                1 => 0x40_0000 + (x >> 33) % 3_000,
                2 => 0x7fff_ffff + (x >> 50) % 3,
                3 => (1 << 40) + (x >> 44) % 500,
                _ => 0x1000 + i,
            };
            counts.add(pc);
            *model.entry(pc).or_insert(0u64) += 1;
        }
        let want: Vec<(u64, u64)> = model.into_iter().collect();
        assert_eq!(counts.pairs(), want);
        assert!(counts.small.len() > PENDING_MAX, "merged at least once");
    }

    #[test]
    fn a_count_past_u32_moves_to_the_wide_map() {
        let mut counts = PcCounts::default();
        counts.add(7);
        counts.merge();
        counts.small[0].1 = u32::MAX;
        counts.add(7);
        counts.add(7);
        assert_eq!(counts.pairs(), [(7, u64::from(u32::MAX) + 2)]);
        assert!(counts.small.is_empty());
    }

    #[test]
    fn empty() {
        assert!(PcCounts::default().pairs().is_empty());
    }
}
