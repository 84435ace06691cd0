//! Truncated and corrupted files: parsed or refused, never a panic.

use super::*;

/// Stand-in for the fuzz target on stable: every prefix of valid files
/// and a spread of corrupted bytes parse or fail, never panic, and what
/// parses encodes again.
#[test]
fn truncations_and_corruptions_never_panic() {
    let mut h = Histogram::new(0x1000, 0x1040, 16, 100);
    h.bins[3] = 7;
    let g = GmonOut {
        histograms: vec![h],
        arcs: vec![Arc {
            from_pc: 0x1004,
            self_pc: 0x1010,
            count: 5,
        }],
        bb_counts: vec![BbCount {
            addr: 0x1000,
            count: 1,
        }],
    };
    let mut bsd = g.clone();
    bsd.bb_counts.clear();
    let files = [
        write(&g, Format::Gnu, Target::X86_64).unwrap(),
        write(&bsd, Format::Bsd, Target::X86_64).unwrap(),
        write(&bsd, Format::OldBsd, Target::X86_64).unwrap(),
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for good in &files {
        for n in 0..good.len() {
            let _ = parse(&good[..n], Target::X86_64);
        }
        for _ in 0..3000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut bad = good.clone();
            let i = (seed as usize) % bad.len();
            bad[i] = (seed >> 32) as u8;
            if let Ok(d) = parse(&bad, Target::X86_64) {
                let _ = write(&d.gmon, d.format, Target::X86_64);
            }
        }
    }
}
