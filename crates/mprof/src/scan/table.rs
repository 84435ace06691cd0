//! mprof's block table in a scanned process (c/mprof.c's "the block
//! table" and `mprof_scan_table`): where mprof saw the unreachable blocks
//! allocated, read from the stopped process like the heap (read-only,
//! every read charged to the scan's limit).
//!
//! The library's writable data (a file mapping of `libprofdev_mprof.so`)
//! holds `mprof_scan_table`, found by its magic: the addresses of the
//! table's top level, its leaves and the shared table (sites, stacks,
//! modules). A block's entry, at its address's slot of its leaf, is
//! `size << 17 | site << 1 | 1` (0: none, a block allocated before mprof
//! or one sampling left out), followed, with stacks, by its stack's
//! index. A module's frames are named by the file the process maps with
//! the device and inode the library recorded (else the same path): never
//! by a path the process's memory alone names.

use super::{Reader, ScanError, Seen};
use profdev_symbolize::maps::MapsEntry;
use std::collections::HashMap;
use std::sync::Arc;

const MAGIC: &[u8; 16] = b"profdev-mscan 1\0";
/// The shared table's header (c/mprof.c's `struct live_header`).
const LIVE_MAGIC: &[u8; 16] = b"profdev-mlive 1\0";
/// A stack's frames at most (c/mprof.c's `MAX_DEPTH`).
const MAX_DEPTH: u64 = 64;

/// The table as `mprof_scan_table` describes it.
pub(crate) struct Table {
    top: u64,
    top_slots: u64,
    leaf_shift: u32,
    entry_shift: u32,
    stack_word: u64,
    leaves: Vec<u64>,
    live: u64,
    head: Vec<u8>,
}

fn u32_at(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 4).map_or(0, |w| {
        u32::from_le_bytes(w.try_into().unwrap_or([0; 4])) as u64
    })
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 8)
        .map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
}

/// The library's `mprof_scan_table`, when the process carries a counting
/// libprofdev_mprof (launched under mprof or attached by it).
pub(crate) fn find(r: &Reader, maps: &[MapsEntry]) -> Result<Option<Table>, ScanError> {
    for m in maps.iter().filter(|m| {
        m.perms.read()
            && m.perms.write()
            && !m.perms.shared()
            && m.is_file()
            && m.file_path().rsplit('/').next() == Some("libprofdev_mprof.so")
    }) {
        let data = r.load(m.start, m.end)?;
        let Some(off) = (0..data.len().saturating_sub(88))
            .step_by(8)
            .find(|&o| &data[o..o + 16] == MAGIC)
        else {
            continue;
        };
        let d = &data[off..off + 88];
        let word = |a: u64| r.word(a).map(|w| w.unwrap_or(0));
        if word(u64_at(d, 80))? as u32 == 0 {
            return Ok(None); // not counting
        }
        let (leaf_shift, top_slots, max_leaves) = (u32_at(d, 16), u32_at(d, 20), u32_at(d, 24));
        if !(12..=47).contains(&leaf_shift) || top_slots > 1 << 24 || max_leaves > 1 << 16 {
            return Ok(None);
        }
        let top = word(u64_at(d, 32))?;
        let entry_shift = (word(u64_at(d, 40))? as u32).min(3);
        let stack_word = (word(u64_at(d, 48))? as u32 as u64).min(3);
        let n = (word(u64_at(d, 64))? as u32 as u64).min(max_leaves);
        let live = word(u64_at(d, 72))?;
        let head = r.load(live, live.saturating_add(256))?;
        if top == 0 || &head[..16] != LIVE_MAGIC {
            return Ok(None);
        }
        let list = u64_at(d, 56);
        let idx = if n == 0 {
            Vec::new()
        } else {
            r.load(list, list.saturating_add(4 * n))?
        };
        let mut leaves = Vec::new();
        for t in idx.chunks_exact(4).map(|t| u32_at(t, 0)) {
            let leaf = if t < top_slots {
                word(top.wrapping_add(8 * t))?
            } else {
                0
            };
            if leaf != 0 {
                leaves.push(leaf);
            }
        }
        return Ok(Some(Table {
            top,
            top_slots,
            leaf_shift: leaf_shift as u32,
            entry_shift,
            stack_word,
            leaves,
            live,
            head,
        }));
    }
    Ok(None)
}

/// Where one stack or site was, as (module, pc) pairs.
type Frames = Vec<(Option<u64>, u64)>;
/// The same named: (the module's file, link-time pc); `None`: unknown.
type Named = Option<Arc<Vec<(String, u64)>>>;

impl Table {
    /// The library's own memory, never a root: the table's top level,
    /// its leaves, the shared table.
    pub(crate) fn skip(&self) -> Vec<(u64, u64)> {
        let leaf = (8u64 << (self.leaf_shift - 4)) << self.entry_shift;
        let mut v = vec![
            (self.top, self.top.saturating_add(8 * self.top_slots)),
            (self.live, self.live.saturating_add(u64_at(&self.head, 24))),
        ];
        v.extend(self.leaves.iter().map(|&l| (l, l.saturating_add(leaf))));
        v
    }

    /// Whether mprof samples (`--sample-bytes`): the blocks it left out
    /// are not in its table either (the header's `obj_shift`, at 208).
    pub(crate) fn sampled(&self) -> bool {
        self.h(16) >= 212 && self.h(208) != 0
    }

    fn h(&self, o: usize) -> u64 {
        u32_at(&self.head, o)
    }

    /// The shared table's address at the offset its header holds at
    /// `field`, plus `plus` (wrapping: the values are the process's).
    fn addr(&self, field: usize, plus: u64) -> u64 {
        self.live
            .wrapping_add(u64_at(&self.head, field))
            .wrapping_add(plus)
    }

    /// The entries of `blocks` ((address, usable size), by address), each
    /// resolved to its site and stack: one per block, `None` where mprof
    /// has none. The entries are read in runs (entries less than a page
    /// apart in one read), the stacks, sites and modules once each.
    pub(crate) fn seen(
        &self,
        r: &Reader,
        maps: &[MapsEntry],
        blocks: &[(u64, u64)],
    ) -> Result<Vec<Option<Seen>>, ScanError> {
        let width = 8u64 << self.entry_shift;
        let mut leaves: HashMap<u64, u64> = HashMap::new();
        // Each block's entry's address (0: none).
        let mut at = Vec::with_capacity(blocks.len());
        for &(mem, _) in blocks {
            let t = mem >> self.leaf_shift;
            if mem % 16 != 0 || t >= self.top_slots {
                at.push(0);
                continue;
            }
            let leaf = match leaves.get(&t) {
                Some(&l) => l,
                None => {
                    let l = r.word(self.top.wrapping_add(8 * t))?.unwrap_or(0);
                    leaves.insert(t, l);
                    l
                }
            };
            let slot = (mem >> 4) & ((1 << (self.leaf_shift - 4)) - 1);
            at.push(if leaf == 0 {
                0
            } else {
                leaf.wrapping_add(slot * width)
            });
        }
        let mut order: Vec<usize> = (0..blocks.len()).filter(|&i| at[i] != 0).collect();
        order.sort_by_key(|&i| at[i]);
        // (entry, stack) of each block.
        let mut entry = vec![(0u64, None::<u64>); blocks.len()];
        let mut k = 0;
        while k < order.len() {
            let start = at[order[k]];
            let mut j = k + 1;
            while j < order.len()
                && at[order[j]] - start < 1 << 20
                && at[order[j]] <= at[order[j - 1]].saturating_add(4096)
            {
                j += 1;
            }
            let end = at[order[j - 1]].saturating_add(width);
            let mut run = Vec::new();
            r.load_pieces(start, end, &mut run)?;
            for &i in &order[k..j] {
                let word = |a: u64| run.iter().find_map(|s| s.word(a));
                let stack = match self.stack_word {
                    0 => None,
                    w => word(at[i] + 8 * w).map(|s| s as u32 as u64),
                };
                entry[i] = (word(at[i]).unwrap_or(0), stack);
            }
            k = j;
        }
        let mut known: HashMap<(bool, u64), Option<Frames>> = HashMap::new();
        let mut named: HashMap<(bool, u64), Named> = HashMap::new();
        let mut modules: HashMap<u64, Option<(String, u64)>> = HashMap::new();
        let mut out = Vec::with_capacity(blocks.len());
        for (&(_, usable), &(v, stack)) in blocks.iter().zip(&entry) {
            let asked = v >> 17;
            if v & 1 == 0 || asked > usable {
                out.push(None);
                continue;
            }
            let stack = stack.filter(|&s| s != 0 && s < self.h(184));
            let mut key = (false, (v >> 1) & 0xffff);
            if let Some(s) = stack {
                if self.frames(r, &mut known, true, s)?.is_some() {
                    key = (true, s);
                }
            }
            let frames = match named.get(&key) {
                Some(f) => f.clone(),
                None => {
                    let f = match self.frames(r, &mut known, key.0, key.1)? {
                        Some(frames) => Some(Arc::new(self.name(r, maps, &mut modules, frames)?)),
                        None => None,
                    };
                    named.insert(key, f.clone());
                    f
                }
            };
            out.push(frames.map(|frames| Seen {
                asked,
                frames,
                stack: key.0,
            }));
        }
        Ok(out)
    }

    /// `frames` with their modules named (see the module doc).
    fn name(
        &self,
        r: &Reader,
        maps: &[MapsEntry],
        modules: &mut HashMap<u64, Option<(String, u64)>>,
        frames: Frames,
    ) -> Result<Vec<(String, u64)>, ScanError> {
        let mut n = Vec::with_capacity(frames.len());
        for (m, pc) in frames {
            let m = match m {
                Some(i) => self.module(r, maps, modules, i)?,
                None => None,
            };
            n.push(match m {
                Some((path, bias)) => (path, pc.wrapping_sub(bias)),
                None => (String::new(), pc),
            });
        }
        Ok(n)
    }

    /// A stack's frames (`stack`) or a site's one frame, cached.
    fn frames(
        &self,
        r: &Reader,
        known: &mut HashMap<(bool, u64), Option<Frames>>,
        stack: bool,
        i: u64,
    ) -> Result<Option<Frames>, ScanError> {
        if let Some(f) = known.get(&(stack, i)) {
            return Ok(f.clone());
        }
        let f = if stack {
            self.stack_frames(r, i)?
        } else {
            self.site_frame(r, i)?
        };
        known.insert((stack, i), f.clone());
        Ok(f)
    }

    fn site_frame(&self, r: &Reader, i: u64) -> Result<Option<Frames>, ScanError> {
        let (nsites, size) = (self.h(60), self.h(68));
        if i >= nsites {
            return Ok(None);
        }
        let at = self.addr(48, i * size);
        let pc = r.word(at.wrapping_add(self.h(104)))?.unwrap_or(0);
        let module = r.word(at.wrapping_add(self.h(108)))?.unwrap_or(0) as u32 as i32;
        Ok((pc != 0 && module != 0)
            .then(|| vec![(u64::try_from(module.saturating_sub(1)).ok(), pc)]))
    }

    fn stack_frames(&self, r: &Reader, i: u64) -> Result<Option<Frames>, ScanError> {
        if self.h(192) != 128 || self.h(196) != 16 {
            return Ok(None);
        }
        let at = self.addr(168, i * 128);
        let (Some(w8), Some(w16)) = (r.word(at.wrapping_add(8))?, r.word(at.wrapping_add(16))?)
        else {
            return Ok(None);
        };
        let (ready, depth, first) = (w8 & 0xffff_ffff, w8 >> 32, w16 & 0xffff_ffff);
        if ready == 0 || depth == 0 || depth > MAX_DEPTH || first + depth > self.h(188) {
            return Ok(None);
        }
        let f = self.addr(176, first * 16);
        let b = r.load(f, f.saturating_add(depth * 16))?;
        Ok(Some(
            b.chunks_exact(16)
                .map(|fr| {
                    let m = u64_at(fr, 8) as u32 as i32;
                    (u64::try_from(m).ok(), u64_at(fr, 0))
                })
                .collect(),
        ))
    }

    /// Module `i`'s file as the process maps it, and its bias.
    fn module(
        &self,
        r: &Reader,
        maps: &[MapsEntry],
        cache: &mut HashMap<u64, Option<(String, u64)>>,
        i: u64,
    ) -> Result<Option<(String, u64)>, ScanError> {
        if let Some(m) = cache.get(&i) {
            return Ok(m.clone());
        }
        let (max, size) = (self.h(56), self.h(64));
        let m = if i < max && size <= 4096 {
            let at = self.addr(32, i * size);
            let rec = r.load(at, at.saturating_add(size))?;
            let bias = u64_at(&rec, self.h(72) as usize);
            let (p, n) = (self.h(76) as usize, self.h(80) as usize);
            let path = rec.get(p..p + n).unwrap_or_default();
            let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
            let path = String::from_utf8_lossy(path);
            let (dev, ino) = (
                u64_at(&rec, self.h(84) as usize),
                u64_at(&rec, self.h(88) as usize),
            );
            let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
            let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
            maps.iter()
                .filter(|m| m.is_file())
                .find(|m| m.inode == ino && m.major as u64 == major && m.minor as u64 == minor)
                .or_else(|| maps.iter().find(|m| m.is_file() && m.file_path() == path))
                .map(|m| (m.file_path().to_string(), bias))
        } else {
            None
        };
        cache.insert(i, m.clone());
        Ok(m)
    }
}
