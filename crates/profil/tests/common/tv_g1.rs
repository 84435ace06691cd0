//! Spec §3.8 TV-G1, the common payload, written in the GNU format by the
//! gmon.out writer this library uses (`profdev_formats::gmon`), for the
//! gprof golden test (`tests/golden.rs`).

use profdev_formats::gmon::{self, Arc, Format, GmonOut, Histogram, Target};

/// TV-G1's gmon.out bytes.
pub fn tv_g1() -> Vec<u8> {
    const LO: u64 = 0x401000;
    const HI: u64 = 0x401300;
    let mut hist = Histogram::new(LO, HI, ((HI - LO) / 2) as usize, 100);
    for (addr, n) in [
        (0x4011b0u64, 60u16),
        (0x4011c0, 20),
        (0x4011e0, 15),
        (0x401210, 5),
    ] {
        hist.bins[((addr - LO) / 2) as usize] += n;
    }
    let arcs = vec![
        Arc {
            from_pc: 0x4011f0,
            self_pc: 0x4011a6,
            count: 2000,
        },
        Arc {
            from_pc: 0x401210,
            self_pc: 0x4011da,
            count: 200,
        },
        Arc {
            from_pc: 0x401220,
            self_pc: 0x4011a6,
            count: 1,
        },
    ];
    let profile = GmonOut {
        histograms: vec![hist],
        arcs,
        bb_counts: vec![],
    };
    gmon::write(&profile, Format::Gnu, Target::X86_64).unwrap()
}
