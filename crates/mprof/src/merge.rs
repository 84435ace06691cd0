//! The reports merged by module file and site ([`merge`]), and the prof
//! device's memory-mode histogram layout of a module
//! ([`histogram_pairs`], [`decode_pairs`]).

use crate::{DhatSite, Report};
use std::collections::BTreeMap;

/// A module of the merged profile: the same file (path, device, inode)
/// across processes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Module {
    /// Its path.
    pub path: String,
    /// Device and inode of the file that was mapped.
    pub dev: u64,
    /// See `dev`.
    pub ino: u64,
    /// Current bytes, summed over processes.
    pub current: u64,
    /// High water, summed over processes.
    pub high_water: u64,
    /// Sites by link-time return address.
    pub sites: BTreeMap<u64, Site>,
}

/// A site of the merged profile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Site {
    /// Current bytes at exit.
    pub current: u64,
    /// High water.
    pub high_water: u64,
    /// Blocks allocated.
    pub allocs: u64,
    /// Bytes allocated.
    pub bytes: u64,
    /// Blocks never freed.
    pub live: u64,
    /// DHAT's figures, summed over processes.
    pub dhat: DhatSite,
    /// The pools charged here (bits 1, 2, 4 = pools 1, 2, 3).
    pub pools: u8,
    /// Temporary blocks (freed by their thread before its next allocation).
    pub temporary: u64,
    /// With `--peak`: bytes and blocks live at each process's global peak,
    /// summed over processes.
    pub at_peak: (u64, u64),
}

/// The reports merged by module file and link-time pc, modules in the order
/// first seen. Counters of the same site in several processes are added
/// (a high water is then the sum of each process's own).
pub fn merge(reports: &[Report]) -> Vec<Module> {
    let mut out: Vec<Module> = Vec::new();
    for r in reports {
        let idx: Vec<usize> = r
            .modules
            .iter()
            .map(|m| {
                let key = (&m.path, m.dev, m.ino);
                let i = out
                    .iter()
                    .position(|o| (&o.path, o.dev, o.ino) == key)
                    .unwrap_or_else(|| {
                        out.push(Module {
                            path: m.path.clone(),
                            dev: m.dev,
                            ino: m.ino,
                            ..Default::default()
                        });
                        out.len() - 1
                    });
                out[i].current += m.current.max(0) as u64;
                out[i].high_water += m.high_water.max(0) as u64;
                i
            })
            .collect();
        for s in &r.sites {
            let Some(m) = s.module else { continue };
            let link = s.pc.wrapping_sub(r.modules[m].bias);
            let site = out[idx[m]].sites.entry(link).or_default();
            site.current += s.current.max(0) as u64;
            site.high_water += s.high_water.max(0) as u64;
            site.allocs += s.allocs;
            site.bytes += s.bytes;
            site.live += s.live;
            site.pools |= s.pools;
            site.temporary += s.temporary;
            if let Some((b, k)) = s.at_peak {
                site.at_peak.0 += b.max(0) as u64;
                site.at_peak.1 += k;
            }
            if let Some(d) = s.dhat {
                site.dhat.total_lifetime += d.total_lifetime;
                site.dhat.max_blocks += d.max_blocks;
                site.dhat.gmax_bytes += d.gmax_bytes;
                site.dhat.gmax_blocks += d.gmax_blocks;
            }
        }
    }
    out
}

/// A module's counters in the prof device's memory-mode histogram layout
/// (spec §2.3): `0` current, `1` high water, `2*(p+1)` and `2*(p+1)+1`
/// current and high water at return address p; non-zero values only, in
/// ascending index order.
pub fn histogram_pairs(m: &Module) -> Vec<(u64, u64)> {
    let mut pairs = vec![(0, m.current), (1, m.high_water)];
    for (&p, s) in &m.sites {
        pairs.push((2 * (p + 1), s.current));
        pairs.push((2 * (p + 1) + 1, s.high_water));
    }
    pairs.retain(|&(_, v)| v != 0);
    pairs.sort_unstable();
    pairs
}

/// Decode memory-mode pairs (spec §2.4, TV-P4): the module's (current,
/// high water) and per return address p its (current, high water).
pub fn decode_pairs(pairs: &[(u64, u64)]) -> ((u64, u64), BTreeMap<u64, (u64, u64)>) {
    let mut module = (0, 0);
    let mut sites: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for &(i, v) in pairs {
        match i {
            0 => module.0 = v,
            1 => module.1 = v,
            _ => {
                let q = i - 2;
                let e = sites.entry(q / 2).or_default();
                if q & 1 == 0 {
                    e.0 = v;
                } else {
                    e.1 = v;
                }
            }
        }
    }
    (module, sites)
}
