//! Spec §3.8 TV-G1, the common payload, written in the GNU format by our
//! writer. Shared by the writer's unit tests (`src/gmon_out.rs`) and the
//! gprof golden test (`tests/golden.rs`), which bring `write_gnu`, `Arc`
//! and `Histogram` into scope.

use super::*;

/// TV-G1's gmon.out bytes.
pub fn tv_g1() -> Vec<u8> {
    const LO: u64 = 0x401000;
    const HI: u64 = 0x401300;
    let mut bins = vec![0u16; ((HI - LO) / 2) as usize];
    for (addr, n) in [
        (0x4011b0u64, 60u16),
        (0x4011c0, 20),
        (0x4011e0, 15),
        (0x401210, 5),
    ] {
        bins[((addr - LO) / 2) as usize] += n;
    }
    let arcs = [
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
    let hist = Histogram {
        low_pc: LO,
        high_pc: HI,
        prof_rate: 100,
        bins: &bins,
    };
    write_gnu(&hist, &arcs).unwrap()
}
