//! gmon.out: the profile GNU gprof reads, in the GNU tagged, 4.4BSD and old
//! BSD layouts, plus the 4.4BSD kernel's call-arc table that kgmon dumps.
//!
//! # Synopsis
//!
//! ```text
//! write(&GmonOut, Format, Target) -> Vec<u8>
//! parse(&[u8], Target)            -> Decoded { format, gnu_version, gmon }
//! mcount::ArcTable                   NetBSD's froms/tos arc table (the mcount model)
//! build::CallGraph                   the histogram and arcs made from sampled stacks
//! ```
//!
//! # Description
//!
//! Lineage: GNU gprof 2.40 (`gprof/gmon_io.c`, `gmon_out.h`, `hist.c`,
//! `call_graph.c`) for the reader's rules, glibc `gmon/gmon.c` for the GNU
//! writer, NetBSD `sys/sys/gmon.h` v1.8 and `usr.sbin/kgmon/kgmon.c` v1.22 for
//! the 4.4BSD layout. Nothing here is an in-memory struct written to disk:
//! every field has a width and a byte order, both taken from a [`Target`],
//! because gprof takes them from the executable it is given, not from the
//! host. On x86_64 ([`Target::X86_64`]) addresses are 8 bytes little-endian.
//!
//! Addresses are in the link-time address space of the executable handed to
//! gprof: [`profdev_core::FileAddr`] values for a program (PIE load bias
//! removed), [`profdev_core::KernelPc`] values for the kernel (whose
//! `vmlinux.syms` carries the running kernel's addresses).
//!
//! **GNU tagged** ([`Format::Gnu`], the default), 20-byte header then tagged
//! records until end of file; `W` is the address width (8 on x86_64):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | cookie `"gmon"` |
//! | 4 | 4 | version, u32: 1 (0 is also read) |
//! | 8 | 12 | spare, zero |
//! | | 1 | tag 0 `TIME_HIST`: low_pc (W), high_pc (W), hist_size = number of bins (u32), prof_rate (u32, Hz), dimension (15 bytes, NUL padded, `"seconds"`), abbreviation (1 byte, `'s'`), then hist_size u16 bins |
//! | | 1 | tag 1 `CG_ARC`: from_pc (W), self_pc (W), count (**u32**) |
//! | | 1 | tag 2 `BB_COUNT`: nblocks (u32), then nblocks × (addr (W), count (W)) |
//!
//! **4.4BSD** ([`Format::Bsd`], what NetBSD's kgmon writes): header low_pc
//! (W), high_pc (W), ncnt (i32: header size + histogram bytes), version (i32,
//! `0x00051879`), profrate (i32), spare (3 × i32) — 40 bytes for W = 8, 32 for
//! W = 4 — then `(ncnt - header)/2` u16 bins, then raw arcs to end of file:
//! from_pc (W), self_pc (W), count (W, signed `long`).
//!
//! **Old BSD** ([`Format::OldBsd`]): header low_pc (W), high_pc (W), ncnt (i32)
//! — 20 bytes for W = 8 — then bins, then raw arcs as in 4.4BSD. It carries no
//! clock rate; gprof uses the host's (100 Hz on Linux). Parsing yields
//! `prof_rate` 0.
//!
//! Histogram bin `i` of a record covers `[low_pc + i·s, low_pc + (i+1)·s)` with
//! `s = (high_pc - low_pc) / bins` bytes (gprof keeps `s/2` as a double,
//! `hist_scale`). Kernel-style histograms have 4-byte bins (HISTFRACTION 2 of
//! u16 cells), glibc's too.
//!
//! Detection ([`parse`]) follows gprof: `"gmon"` in the first 4 bytes means GNU;
//! otherwise the u32 after the old BSD header (byte 20 for W = 8) equal to
//! `0x00051879` means 4.4BSD; anything else is old BSD.
//!
//! # Example
//!
//! ```
//! use profdev_formats::gmon::{self, Arc, Format, GmonOut, Histogram, Target};
//!
//! let mut hist = Histogram::new(0x401000, 0x401300, 384, 100);
//! hist.bins[(0x4011b0 - 0x401000) / 2] = 60;
//! let profile = GmonOut {
//!     histograms: vec![hist],
//!     arcs: vec![Arc { from_pc: 0x4011f0, self_pc: 0x4011a6, count: 2000 }],
//!     bb_counts: vec![],
//! };
//! let bytes = gmon::write(&profile, Format::Gnu, Target::X86_64).unwrap();
//! assert_eq!(&bytes[..4], b"gmon");
//! let back = gmon::parse(&bytes, Target::X86_64).unwrap();
//! assert_eq!(back.format, Format::Gnu);
//! assert_eq!(back.gmon, profile);
//! ```
//!
//! # Bugs
//!
//! * The GNU layout stores arc counts as u32; [`write()`] refuses a larger count
//!   rather than truncating it as glibc does. Callers saturate first.
//! * The parser is stricter than gprof: a trailing partial arc, an odd
//!   histogram byte count or a version 0 basic-block record is an error here,
//!   where gprof ignores or misreads it.
//! * Multiple GNU histogram records are returned as they are; summing records
//!   with the same range (as gprof does) is left to the caller.

use std::fmt;

/// `GMONVERSION`, the 4.4BSD header's version word.
pub const GMONVERSION: u32 = 0x0005_1879;

/// The GNU header's cookie.
pub const GNU_COOKIE: [u8; 4] = *b"gmon";

/// The GNU format version this module writes (`GMON_VERSION`).
pub const GNU_VERSION: u32 = 1;

/// `"seconds"` NUL padded to 15 bytes: the GNU histogram's dimension.
pub const SECONDS: [u8; 15] = *b"seconds\0\0\0\0\0\0\0\0";

const TAG_TIME_HIST: u8 = 0;
const TAG_CG_ARC: u8 = 1;
const TAG_BB_COUNT: u8 = 2;

/// Which gmon.out layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Format {
    /// GNU tagged format (`"gmon"` cookie), what glibc writes.
    #[default]
    Gnu,
    /// 4.4BSD format (`GMONVERSION` header), what NetBSD's kgmon writes.
    Bsd,
    /// The BSD format before 4.4 (no version, no clock rate).
    OldBsd,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Gnu => "gnu",
            Format::Bsd => "bsd",
            Format::OldBsd => "oldbsd",
        })
    }
}

/// Byte order of every multi-byte field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    /// Least significant byte first (x86_64, aarch64 Linux).
    Little,
    /// Most significant byte first.
    Big,
}

/// Width of an address (and of a BSD arc count).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddrWidth {
    /// 4-byte addresses (ELF32 executables).
    W32,
    /// 8-byte addresses (ELF64 executables).
    W64,
}

impl AddrWidth {
    /// The width in bytes.
    pub fn bytes(self) -> usize {
        match self {
            AddrWidth::W32 => 4,
            AddrWidth::W64 => 8,
        }
    }
}

/// The executable's ABI, which fixes field widths and byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// Byte order.
    pub order: ByteOrder,
    /// Address width.
    pub addr_width: AddrWidth,
}

impl Target {
    /// x86_64 ELF: 8-byte little-endian addresses.
    pub const X86_64: Target = Target {
        order: ByteOrder::Little,
        addr_width: AddrWidth::W64,
    };

    /// aarch64 ELF (Linux, little-endian): 8-byte little-endian addresses,
    /// the same field widths as x86_64.
    pub const AARCH64: Target = Target {
        order: ByteOrder::Little,
        addr_width: AddrWidth::W64,
    };

    /// Size of the 4.4BSD header for this target (40 or 32 bytes).
    pub fn bsd_header_size(self) -> usize {
        2 * self.addr_width.bytes() + 24
    }

    /// Size of the old BSD header for this target (20 or 12 bytes).
    pub fn old_bsd_header_size(self) -> usize {
        2 * self.addr_width.bytes() + 4
    }
}

/// One PC histogram: `bins.len()` u16 cells evenly covering
/// `[low_pc, high_pc)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// First address covered.
    pub low_pc: u64,
    /// End of the covered range (exclusive).
    pub high_pc: u64,
    /// Samples per second of the clock that filled the bins (the "hz" gprof
    /// divides by); 0 when the file did not say (old BSD).
    pub prof_rate: u32,
    /// The unit of a sample, NUL padded (GNU only; [`SECONDS`] otherwise).
    pub dimension: [u8; 15],
    /// One-letter abbreviation of the unit (GNU only; `b's'` otherwise).
    pub dimension_abbrev: u8,
    /// The cells.
    pub bins: Vec<u16>,
}

impl Histogram {
    /// A zeroed histogram of `nbins` cells over `[low_pc, high_pc)`, counting
    /// seconds at `prof_rate` Hz.
    pub fn new(low_pc: u64, high_pc: u64, nbins: usize, prof_rate: u32) -> Self {
        Histogram {
            low_pc,
            high_pc,
            prof_rate,
            dimension: SECONDS,
            dimension_abbrev: b's',
            bins: vec![0; nbins],
        }
    }

    /// The cell counting `pc`, if `pc` is covered. Uses the exact rational
    /// bin width, so it agrees with gprof for any bin size.
    pub fn bin_of(&self, pc: u64) -> Option<usize> {
        if pc < self.low_pc || pc >= self.high_pc || self.bins.is_empty() {
            return None;
        }
        let span = u128::from(self.high_pc - self.low_pc);
        let i = u128::from(pc - self.low_pc) * self.bins.len() as u128 / span;
        Some(i as usize)
    }
}

/// One call-graph arc: `count` traversals from the call site `from_pc` into
/// the function starting at `self_pc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arc {
    /// An address in the caller (the call site).
    pub from_pc: u64,
    /// The callee's entry address.
    pub self_pc: u64,
    /// How many times the arc was counted.
    pub count: u64,
}

/// One basic-block execution count (GNU tag 2; unused by modern GCC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BbCount {
    /// The block's address.
    pub addr: u64,
    /// Times it ran.
    pub count: u64,
}

/// The contents of a gmon.out, independent of its layout.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GmonOut {
    /// PC histograms (the BSD layouts hold exactly one).
    pub histograms: Vec<Histogram>,
    /// Call-graph arcs, in file order.
    pub arcs: Vec<Arc>,
    /// Basic-block counts (GNU layout only).
    pub bb_counts: Vec<BbCount>,
}

/// What [`parse`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The detected layout.
    pub format: Format,
    /// The GNU header's version (0 or 1); `None` for the BSD layouts.
    pub gnu_version: Option<u32>,
    /// The contents.
    pub gmon: GmonOut,
}

/// Why a profile cannot be written in the requested layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The BSD layouts have room for one histogram only.
    #[error("a {format} gmon.out holds exactly one histogram, not {count}")]
    HistogramCount { format: Format, count: usize },
    /// The BSD layouts have no basic-block records.
    #[error("a {format} gmon.out cannot hold basic-block counts ({count} given)")]
    BbCounts { format: Format, count: usize },
    /// `low_pc > high_pc`.
    #[error("histogram {index}: low_pc {low:#x} is above high_pc {high:#x}")]
    Range { index: usize, low: u64, high: u64 },
    /// Too many bins for the 32-bit size field.
    #[error("histogram {index}: {bins} bins do not fit the {field} field")]
    TooManyBins {
        index: usize,
        bins: usize,
        field: &'static str,
    },
    /// A value does not fit its field on this target.
    #[error("{what} {index}: {field} {value:#x} does not fit in {bytes} bytes")]
    TooWide {
        what: &'static str,
        index: usize,
        field: &'static str,
        value: u64,
        bytes: usize,
    },
}

/// Why bytes are not a gmon.out. Every variant names the field and its byte
/// offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Under 20 bytes: no layout's header fits.
    #[error("gmon.out is {len} bytes long, too short to be a gmon file (at least 20)")]
    TooShort { len: usize },
    /// The file ends inside a field.
    #[error("gmon.out: {field} at byte {offset} needs {needed} bytes but the file ends after {available}")]
    Truncated {
        field: &'static str,
        offset: usize,
        needed: usize,
        available: usize,
    },
    /// A GNU version other than 0 and 1.
    #[error("gmon.out: version at byte 4 is {version}; only versions 0 and 1 exist")]
    UnsupportedVersion { version: u32 },
    /// An unknown GNU record tag.
    #[error("gmon.out: record tag at byte {offset} is {tag}, not 0 (histogram), 1 (arc) or 2 (basic blocks)")]
    BadTag { offset: usize, tag: u8 },
    /// A field whose value makes no sense.
    #[error("gmon.out: {field} at byte {offset} is {value:#x}: {problem}")]
    BadField {
        field: &'static str,
        offset: usize,
        value: u64,
        problem: &'static str,
    },
}

mod bsd;
mod gnu;
mod reader;
mod writer;

pub use reader::{max_len, parse, MAX_GNU_LEN};
pub use writer::write;

pub mod build;
pub mod mcount;

#[cfg(test)]
mod sweep;
#[cfg(test)]
mod tests;
