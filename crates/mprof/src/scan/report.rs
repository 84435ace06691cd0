//! The scan's report: unreachable blocks grouped by size.

use super::Scan;
use std::collections::BTreeMap;
use std::time::Duration;

/// Unreachable blocks of one usable size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    /// The usable size of each (`malloc_usable_size`).
    pub size: u64,
    /// How many.
    pub count: u64,
}

impl Group {
    /// Their bytes.
    pub fn bytes(&self) -> u64 {
        self.size * self.count
    }
}

/// Where mprof saw a block allocated (its block table's entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The bytes the program asked for.
    pub asked: u64,
    /// Its stack, the site first then its callers (just the site without
    /// stacks): each the module's file (empty when in none) and the
    /// return address, link-time within the module.
    pub frames: std::sync::Arc<Vec<(String, u64)>>,
    /// Whether `frames` is a whole stack (else the site alone).
    pub stack: bool,
}

/// Unreachable blocks of one allocating stack or site, or of none mprof
/// saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginGroup {
    /// The stack's frames, as [`Seen::frames`]; `None`: blocks mprof
    /// did not see allocated (before it, or left out by sampling).
    pub frames: Option<Vec<(String, u64)>>,
    /// How many.
    pub blocks: u64,
    /// Their usable bytes.
    pub bytes: u64,
    /// The bytes asked for (0 for `frames: None`).
    pub asked: u64,
}

/// `blocks` grouped by `seen` (one each), most usable bytes first.
pub(crate) fn origins(blocks: &[(u64, u64)], seen: &[Option<Seen>]) -> Vec<OriginGroup> {
    let mut by: BTreeMap<Option<&[(String, u64)]>, OriginGroup> = BTreeMap::new();
    for (&(_, size), s) in blocks.iter().zip(seen) {
        let key = s.as_ref().map(|s| s.frames.as_slice());
        let g = by.entry(key).or_insert_with(|| OriginGroup {
            frames: key.map(|f| f.to_vec()),
            blocks: 0,
            bytes: 0,
            asked: 0,
        });
        g.blocks += 1;
        g.bytes += size;
        g.asked += s.as_ref().map_or(0, |s| s.asked);
    }
    let mut v: Vec<OriginGroup> = by.into_values().collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.frames.cmp(&b.frames)));
    v
}

/// `blocks` ((address, usable size)) grouped by size, most bytes first
/// (then the larger size first).
pub(crate) fn groups(blocks: &[(u64, u64)]) -> Vec<Group> {
    let mut by: BTreeMap<u64, u64> = BTreeMap::new();
    for &(_, size) in blocks {
        *by.entry(size).or_default() += 1;
    }
    let mut v: Vec<Group> = by
        .into_iter()
        .map(|(size, count)| Group { size, count })
        .collect();
    v.sort_by(|a, b| b.bytes().cmp(&a.bytes()).then(b.size.cmp(&a.size)));
    v
}

/// The report of a scan of process `pid`, which was held `pause`:
/// a summary line, then `blocks × size = bytes` rows.
pub fn render(scan: &Scan, pid: u32, pause: Duration) -> String {
    let lost: u64 = scan.unreachable.iter().map(|&(_, s)| s).sum();
    let mut out = format!(
        "Unreachable: {lost} bytes in {} blocks, of {} bytes in {} blocks in use \
         (process {pid}: {} arenas, {} threads, {} bytes of roots; held {} ms)\n",
        scan.unreachable.len(),
        scan.bytes,
        scan.blocks,
        scan.arenas,
        scan.threads,
        scan.root_bytes,
        pause.as_millis()
    );
    if scan.unreachable.is_empty() {
        return out;
    }
    out.push_str("\nblocks\tsize\tbytes\n");
    for g in scan.groups() {
        out.push_str(&format!("{}\t{}\t{}\n", g.count, g.size, g.bytes()));
    }
    out
}
