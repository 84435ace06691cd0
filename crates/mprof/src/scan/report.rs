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
