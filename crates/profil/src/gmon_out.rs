//! GNU gmon.out writer (the tagged "gmon" format read by GNU gprof 2.40).
//!
//! # Synopsis
//!
//! ```
//! use profdev_profil::gmon_out::{Histogram, write_gnu};
//! let bins = [0u16; 4];
//! let hist = Histogram { low_pc: 0x1000, high_pc: 0x1010, prof_rate: 100, bins: &bins };
//! let bytes = write_gnu(&hist, &[]).unwrap();
//! assert_eq!(&bytes[..4], b"gmon");
//! assert_eq!(bytes.len(), 20 + 1 + 40 + 8);
//! ```
//!
//! # Description
//!
//! Lineage: glibc `gmon/gmon.c` as read by `gprof/gmon_io.c` (spec §3.6A),
//! for a 64-bit little-endian ELF (x86_64, aarch64). Every field is written
//! with an explicit width, never as an in-memory struct:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | cookie `"gmon"` |
//! | 4 | version, u32 LE = 1 |
//! | 12 | spare, zero |
//!
//! then one histogram record:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | tag 0 (`GMON_TAG_TIME_HIST`) |
//! | 8 | low_pc, u64 LE (link-time address: the load bias already removed) |
//! | 8 | high_pc, u64 LE |
//! | 4 | hist_size = number of bins, u32 LE |
//! | 4 | prof_rate in Hz, u32 LE |
//! | 15 | dimension `"seconds"`, NUL padded |
//! | 1 | dimension abbreviation `'s'` |
//! | 2 × hist_size | bins, u16 LE |
//!
//! then one 21-byte record per call arc: tag 1, from_pc u64 LE, self_pc u64
//! LE, count u32 LE.
//!
//! gprof spreads the bins evenly over `[low_pc, high_pc)`, so a writer must
//! choose bins of exactly `(high_pc - low_pc) / hist_size` bytes.

use crate::error::Error;

/// `GMON_TAG_TIME_HIST`.
pub const TAG_TIME_HIST: u8 = 0;
/// `GMON_TAG_CG_ARC`.
pub const TAG_CG_ARC: u8 = 1;
/// The file version this writer emits (`GMON_VERSION`).
pub const VERSION: u32 = 1;

/// One histogram record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Histogram<'a> {
    /// First text address covered (link-time address).
    pub low_pc: u64,
    /// One past the last text address covered.
    pub high_pc: u64,
    /// Sampling rate in Hz; gprof prints `1/prof_rate` as the seconds per sample.
    pub prof_rate: u32,
    /// The u16 bins.
    pub bins: &'a [u16],
}

/// One call-graph arc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arc {
    /// Return address in the caller (link-time address).
    pub from_pc: u64,
    /// Entry address of the callee.
    pub self_pc: u64,
    /// Number of calls (gprof reads 32 bits).
    pub count: u32,
}

/// Encode a complete GNU gmon.out: header, one histogram record, the arcs.
pub fn write_gnu(hist: &Histogram<'_>, arcs: &[Arc]) -> Result<Vec<u8>, Error> {
    let nbins = u32::try_from(hist.bins.len()).map_err(|_| Error::TooManyBins {
        bins: hist.bins.len(),
    })?;
    let mut out = Vec::with_capacity(20 + 41 + 2 * hist.bins.len() + 21 * arcs.len());
    out.extend_from_slice(b"gmon");
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&[0u8; 12]);

    out.push(TAG_TIME_HIST);
    out.extend_from_slice(&hist.low_pc.to_le_bytes());
    out.extend_from_slice(&hist.high_pc.to_le_bytes());
    out.extend_from_slice(&nbins.to_le_bytes());
    out.extend_from_slice(&hist.prof_rate.to_le_bytes());
    let mut dimen = [0u8; 15];
    dimen[..7].copy_from_slice(b"seconds");
    out.extend_from_slice(&dimen);
    out.push(b's');
    for bin in hist.bins {
        out.extend_from_slice(&bin.to_le_bytes());
    }

    for arc in arcs {
        out.push(TAG_CG_ARC);
        out.extend_from_slice(&arc.from_pc.to_le_bytes());
        out.extend_from_slice(&arc.self_pc.to_le_bytes());
        out.extend_from_slice(&arc.count.to_le_bytes());
    }
    Ok(out)
}

#[cfg(test)]
#[path = "../tests/common/tv_g1.rs"]
mod tv_g1;

#[cfg(test)]
mod tests {
    use super::*;

    use super::tv_g1::tv_g1;

    #[test]
    fn tv_g1_bytes() {
        let b = tv_g1();
        assert_eq!(b.len(), 892);
        let mut head = vec![0x67, 0x6d, 0x6f, 0x6e, 1, 0, 0, 0];
        head.extend([0; 12]);
        head.push(0);
        head.extend([0x00, 0x10, 0x40, 0, 0, 0, 0, 0]);
        head.extend([0x00, 0x13, 0x40, 0, 0, 0, 0, 0]);
        head.extend([0x80, 0x01, 0, 0]);
        head.extend([0x64, 0, 0, 0]);
        head.extend(b"seconds");
        head.extend([0; 8]);
        head.push(b's');
        assert_eq!(&b[..head.len()], &head[..]);
        // The first arc record follows the 384 bins.
        let arc0 = 20 + 41 + 768;
        assert_eq!(b[arc0], TAG_CG_ARC);
        assert_eq!(&b[arc0 + 1..arc0 + 9], &0x4011f0u64.to_le_bytes());
        assert_eq!(&b[arc0 + 17..arc0 + 21], &2000u32.to_le_bytes());
    }
}
