//! The three profil(2) index formulas, as pure functions.
//!
//! # Synopsis
//!
//! ```
//! use profdev_profil::index::{svr4, bsd, glibc, Tick};
//! // d = 32769 bytes past the offset, scale 0xFFFF, a large buffer:
//! assert_eq!(svr4(0x1000 + 32769, 0x1000, 0xFFFF, 1 << 20), Tick::Cell(16383));
//! assert_eq!(bsd(0x1000 + 32769, 0x1000, 0xFFFF, 1 << 20), Tick::Cell(16384));
//! assert_eq!(glibc(0x1000 + 32769, 0x1000, 0xFFFF, 1 << 20), Tick::Cell(16383));
//! ```
//!
//! # Description
//!
//! Every clock tick, profil(2) maps the interrupted program counter `pc` to
//! one `unsigned short` cell of the buffer. With `d = pc - offset`:
//!
//! * [`svr4`] (NEWS-os 5 / SVR4.0, the semantics this crate implements):
//!   `cell = (d * (scale & 0xFFFE)) >> 17`; scale 0 or 1 (and 0x10000, whose
//!   low 16 bits are 0) turn profiling off; `d < 0` and cells at or past
//!   `bufsiz / 2` are ignored, so `bufsiz` 0 makes profiling ineffective.
//!   The product is taken in 128 bits, so no 64-bit PC overflows (the
//!   original kept the low 32 bits of a 32-bit product).
//! * [`bsd`] (4.4BSD kernel): `byte = ((d * scale) >> 16) & ~1`,
//!   `cell = byte / 2`; scale 0 is off and scale above 0x10000 is `EINVAL`.
//! * [`glibc`] (user-space emulation): `i = d / 2` in unsigned `size_t`
//!   arithmetic (a PC below the offset wraps to a huge index and is then
//!   ignored), then `cell = i * scale / 65536` computed as
//!   `i / 65536 * scale + (i % 65536) * scale / 65536`; scale 0 does **not**
//!   turn it off (everything lands in cell 0).
//!
//! The SVR4 and BSD formulas agree except in the lowest bit of the scale; the
//! glibc one halves before scaling, so it differs from both for odd `d` and
//! at cell boundaries (spec §4.7 lists the rows).
//!
//! `bufsiz` is in bytes, as in every profil(2); the number of cells is
//! `bufsiz / 2`.

/// What one clock tick at a given PC does to the histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tick {
    /// Add the tick to the `u16` cell with this index.
    Cell(usize),
    /// The PC lies below the offset or past the last cell: nothing is counted.
    Ignored,
    /// The scale turns profiling off: nothing is counted.
    Off,
    /// The profil call itself fails (BSD: `EINVAL` for a scale above 0x10000).
    Rejected,
}

/// Which lineage's arithmetic to use; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Formula {
    /// NEWS-os 5 / SVR4.0 (what this crate's profil does).
    Svr4,
    /// 4.4BSD / NetBSD / FreeBSD kernel.
    Bsd,
    /// glibc's SIGPROF emulation (`sysdeps/posix/profil.c`).
    Glibc,
}

impl Formula {
    /// Every formula, in the column order of spec §4.7.
    pub const ALL: [Formula; 3] = [Formula::Svr4, Formula::Bsd, Formula::Glibc];

    /// The lineage's name as used in reports and golden files.
    pub fn name(self) -> &'static str {
        match self {
            Formula::Svr4 => "svr4",
            Formula::Bsd => "bsd",
            Formula::Glibc => "glibc",
        }
    }

    /// Map one tick at `pc` with this formula.
    pub fn tick(self, pc: usize, offset: usize, scale: u32, bufsiz: usize) -> Tick {
        match self {
            Formula::Svr4 => svr4(pc, offset, scale, bufsiz),
            Formula::Bsd => bsd(pc, offset, scale, bufsiz),
            Formula::Glibc => glibc(pc, offset, scale, bufsiz),
        }
    }
}

/// The effective SVR4 scale: only bits 1..15 survive (`scale & 0xFFFE`).
pub fn svr4_effective_scale(scale: u32) -> u32 {
    scale & 0xFFFE
}

/// Whether SVR4 profiling is on for this scale (`(scale & ~1) != 0` in the
/// 16-bit u-area field, i.e. `scale & 0xFFFE != 0`).
pub fn svr4_is_on(scale: u32) -> bool {
    svr4_effective_scale(scale) != 0
}

/// SVR4 cell index: `((pc - offset) * (scale & 0xFFFE)) >> 17`.
pub fn svr4(pc: usize, offset: usize, scale: u32, bufsiz: usize) -> Tick {
    let s = svr4_effective_scale(scale);
    if s == 0 {
        return Tick::Off;
    }
    let Some(d) = pc.checked_sub(offset) else {
        return Tick::Ignored;
    };
    let cell = ((d as u128) * u128::from(s)) >> 17;
    if cell >= (bufsiz / 2) as u128 {
        return Tick::Ignored;
    }
    Tick::Cell(cell as usize)
}

/// The first byte offset `d` that lands in SVR4 cell `cell` (the inverse of
/// [`svr4`] for a scale that is on): `ceil(cell * 2^17 / (scale & 0xFFFE))`.
/// Returns `None` when the scale is off.
pub fn svr4_cell_start(cell: usize, scale: u32) -> Option<u128> {
    let s = u128::from(svr4_effective_scale(scale));
    if s == 0 {
        return None;
    }
    Some(((cell as u128) << 17).div_ceil(s))
}

/// 4.4BSD cell index: `(((pc - offset) * scale) >> 16) & ~1` bytes.
pub fn bsd(pc: usize, offset: usize, scale: u32, bufsiz: usize) -> Tick {
    if scale > 0x10000 {
        return Tick::Rejected;
    }
    if scale == 0 {
        return Tick::Off;
    }
    let Some(d) = pc.checked_sub(offset) else {
        return Tick::Ignored;
    };
    let byte = (((d as u128) * u128::from(scale)) >> 16) & !1;
    if byte >= bufsiz as u128 {
        return Tick::Ignored;
    }
    Tick::Cell((byte / 2) as usize)
}

/// glibc cell index, reproducing its `size_t` arithmetic (wrapping included).
pub fn glibc(pc: usize, offset: usize, scale: u32, bufsiz: usize) -> Tick {
    let nsamples = bufsiz / 2;
    let scale = scale as usize;
    let mut i = pc.wrapping_sub(offset) / 2;
    i = (i / 65536)
        .wrapping_mul(scale)
        .wrapping_add((i % 65536).wrapping_mul(scale) / 65536);
    if i < nsamples {
        Tick::Cell(i)
    } else {
        Tick::Ignored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFF: usize = 0x40_0000;
    const BIG: usize = 1 << 30;

    /// Spec §4.7, one row per line: d, scale, then SVR4, BSD, glibc.
    fn table() -> Vec<(i64, u32, Tick, Tick, Tick)> {
        use Tick::*;
        vec![
            (0, 0x10000, Off, Cell(0), Cell(0)),
            (3, 0xFFFF, Cell(1), Cell(1), Cell(0)),
            (3, 0x10000, Off, Cell(1), Cell(1)),
            (7, 0x5555, Cell(1), Cell(1), Cell(0)),
            (8, 0x4000, Cell(1), Cell(1), Cell(1)),
            (15, 0x4000, Cell(1), Cell(1), Cell(1)),
            (16, 0x4000, Cell(2), Cell(2), Cell(2)),
            (32769, 0xFFFF, Cell(16383), Cell(16384), Cell(16383)),
            (65535, 2, Cell(0), Cell(0), Cell(0)),
            (65536, 2, Cell(1), Cell(1), Cell(1)),
            (100, 1, Off, Cell(0), Cell(0)),
            (100, 0, Off, Off, Cell(0)),
            (-1, 0x8000, Ignored, Ignored, Ignored),
        ]
    }

    fn pc(d: i64) -> usize {
        (OFF as i64 + d) as usize
    }

    #[test]
    fn spec_4_7_table() {
        for (d, scale, s, b, g) in table() {
            assert_eq!(
                svr4(pc(d), OFF, scale, BIG),
                s,
                "svr4 d={d} scale={scale:#x}"
            );
            assert_eq!(bsd(pc(d), OFF, scale, BIG), b, "bsd d={d} scale={scale:#x}");
            assert_eq!(
                glibc(pc(d), OFF, scale, BIG),
                g,
                "glibc d={d} scale={scale:#x}"
            );
        }
    }

    #[test]
    fn bufsiz_zero_is_ineffective_for_every_formula() {
        for (d, scale, ..) in table() {
            for f in Formula::ALL {
                let t = f.tick(pc(d), OFF, scale, 0);
                assert!(
                    matches!(t, Tick::Ignored | Tick::Off),
                    "{f:?} d={d} scale={scale:#x}: {t:?}"
                );
            }
        }
    }

    #[test]
    fn last_cell_and_one_past() {
        // bufsiz 10 bytes = 5 cells; scale 0xFFFF: cell 4 starts at d = ceil(4*2^17/0xFFFE) = 9.
        assert_eq!(svr4(OFF + 9, OFF, 0xFFFF, 10), Tick::Cell(4));
        assert_eq!(svr4(OFF + 11, OFF, 0xFFFF, 10), Tick::Ignored);
        // An odd bufsiz drops the half cell.
        assert_eq!(svr4(OFF + 9, OFF, 0xFFFF, 9), Tick::Ignored);
    }

    #[test]
    fn svr4_is_exact_for_64_bit_pcs() {
        let off = 0x7fff_0000_0000usize;
        assert_eq!(
            svr4(off + (1 << 32), off, 0xFFFF, usize::MAX),
            Tick::Cell(2_147_418_112)
        );
        // The largest distance does not overflow.
        let t = svr4(usize::MAX, 0, 0xFFFE, usize::MAX);
        assert_eq!(
            t,
            Tick::Cell(((usize::MAX as u128 * 0xFFFE) >> 17) as usize)
        );
    }

    #[test]
    fn scale_high_bits_are_dropped_by_svr4() {
        // Only the low 16 bits (minus bit 0) survive: 0x18000 acts as 0x8000.
        assert_eq!(
            svr4(OFF + 40, OFF, 0x18000, BIG),
            svr4(OFF + 40, OFF, 0x8000, BIG)
        );
        assert_eq!(bsd(OFF + 40, OFF, 0x18000, BIG), Tick::Rejected);
    }

    /// Where SVR4 and glibc differ at scale 0xFFFF (what the tests' C
    /// programs use): within the first 32 KiB, by exactly one cell, for odd
    /// distances only (SVR4 `floor(d/2 - d/2^16)`, glibc `floor(d/2) - 1`).
    #[test]
    fn svr4_and_glibc_differ_by_one_cell_for_odd_distances() {
        for d in 2..(1usize << 15) {
            let (Tick::Cell(s), Tick::Cell(g)) = (
                svr4(OFF + d, OFF, 0xFFFF, BIG),
                glibc(OFF + d, OFF, 0xFFFF, BIG),
            ) else {
                panic!("d={d}");
            };
            assert_eq!(s - g, d % 2, "d={d}: svr4 {s} glibc {g}");
        }
    }

    #[test]
    fn cell_start_inverts_svr4() {
        for scale in [2u32, 0x4000, 0x5555, 0x8000, 0xFFFF] {
            for cell in 0..300usize {
                let start = svr4_cell_start(cell, scale).unwrap() as usize;
                assert_eq!(svr4(OFF + start, OFF, scale, BIG), Tick::Cell(cell));
                if start > 0 {
                    assert_ne!(svr4(OFF + start - 1, OFF, scale, BIG), Tick::Cell(cell));
                }
            }
        }
        assert_eq!(svr4_cell_start(3, 1), None);
    }
}
