//! gmon.out: the profile GNU gprof reads, in the GNU tagged, 4.4BSD and old
//! BSD layouts, plus the 4.4BSD kernel's call-arc table that kgmon dumps.
//!
//! # Synopsis
//!
//! ```text
//! write(&GmonOut, Format, Target) -> Vec<u8>
//! parse(&[u8], Target)            -> Decoded { format, gnu_version, gmon }
//! mcount::ArcTable                   NetBSD's froms/tos arc table (the mcount model)
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
//! * The GNU layout stores arc counts as u32; [`write`] refuses a larger count
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

/// Encode `gmon` in `format` for an executable of ABI `target`.
pub fn write(gmon: &GmonOut, format: Format, target: Target) -> Result<Vec<u8>, WriteError> {
    for (index, h) in gmon.histograms.iter().enumerate() {
        if h.low_pc > h.high_pc {
            return Err(WriteError::Range {
                index,
                low: h.low_pc,
                high: h.high_pc,
            });
        }
        check_addr(target, "histogram", index, "low_pc", h.low_pc)?;
        check_addr(target, "histogram", index, "high_pc", h.high_pc)?;
    }
    for (index, a) in gmon.arcs.iter().enumerate() {
        check_addr(target, "arc", index, "from_pc", a.from_pc)?;
        check_addr(target, "arc", index, "self_pc", a.self_pc)?;
        let count_bytes = match format {
            Format::Gnu => 4,
            Format::Bsd | Format::OldBsd => target.addr_width.bytes(),
        };
        // BSD counts are a signed `long`.
        let max = match (format, count_bytes) {
            (Format::Gnu, _) => u64::from(u32::MAX),
            (_, 4) => i32::MAX as u64,
            _ => i64::MAX as u64,
        };
        if a.count > max {
            return Err(WriteError::TooWide {
                what: "arc",
                index,
                field: "count",
                value: a.count,
                bytes: count_bytes,
            });
        }
    }
    let mut w = Writer {
        out: Vec::new(),
        target,
    };
    match format {
        Format::Gnu => {
            w.out.extend_from_slice(&GNU_COOKIE);
            w.u32(GNU_VERSION);
            w.out.extend_from_slice(&[0; 12]);
            for (index, h) in gmon.histograms.iter().enumerate() {
                let n = u32::try_from(h.bins.len()).map_err(|_| WriteError::TooManyBins {
                    index,
                    bins: h.bins.len(),
                    field: "hist_size",
                })?;
                w.out.push(TAG_TIME_HIST);
                w.addr(h.low_pc);
                w.addr(h.high_pc);
                w.u32(n);
                w.u32(h.prof_rate);
                w.out.extend_from_slice(&h.dimension);
                w.out.push(h.dimension_abbrev);
                for &b in &h.bins {
                    w.u16(b);
                }
            }
            for a in &gmon.arcs {
                w.out.push(TAG_CG_ARC);
                w.addr(a.from_pc);
                w.addr(a.self_pc);
                w.u32(a.count as u32);
            }
            if !gmon.bb_counts.is_empty() {
                let n = u32::try_from(gmon.bb_counts.len()).map_err(|_| WriteError::TooWide {
                    what: "basic-block record",
                    index: 0,
                    field: "nblocks",
                    value: gmon.bb_counts.len() as u64,
                    bytes: 4,
                })?;
                for (index, b) in gmon.bb_counts.iter().enumerate() {
                    check_addr(target, "basic block", index, "addr", b.addr)?;
                    check_addr(target, "basic block", index, "count", b.count)?;
                }
                w.out.push(TAG_BB_COUNT);
                w.u32(n);
                for b in &gmon.bb_counts {
                    w.addr(b.addr);
                    w.addr(b.count);
                }
            }
        }
        Format::Bsd | Format::OldBsd => {
            if gmon.histograms.len() != 1 {
                return Err(WriteError::HistogramCount {
                    format,
                    count: gmon.histograms.len(),
                });
            }
            if !gmon.bb_counts.is_empty() {
                return Err(WriteError::BbCounts {
                    format,
                    count: gmon.bb_counts.len(),
                });
            }
            let h = &gmon.histograms[0];
            let header = if format == Format::Bsd {
                target.bsd_header_size()
            } else {
                target.old_bsd_header_size()
            };
            let ncnt = h
                .bins
                .len()
                .checked_mul(2)
                .and_then(|b| b.checked_add(header))
                .and_then(|n| i32::try_from(n).ok())
                .ok_or(WriteError::TooManyBins {
                    index: 0,
                    bins: h.bins.len(),
                    field: "ncnt",
                })?;
            // The exact size up front: a kernel profile is megabytes, and
            // growing by doubling would briefly hold twice that.
            let arc_bytes = 3 * target.addr_width.bytes();
            w.out.reserve_exact(
                (ncnt as usize).saturating_add(gmon.arcs.len().saturating_mul(arc_bytes)),
            );
            w.addr(h.low_pc);
            w.addr(h.high_pc);
            w.u32(ncnt as u32);
            if format == Format::Bsd {
                w.u32(GMONVERSION);
                w.u32(h.prof_rate);
                w.out.extend_from_slice(&[0; 12]);
            }
            for &b in &h.bins {
                w.u16(b);
            }
            for a in &gmon.arcs {
                w.addr(a.from_pc);
                w.addr(a.self_pc);
                w.addr(a.count);
            }
        }
    }
    Ok(w.out)
}

fn check_addr(
    target: Target,
    what: &'static str,
    index: usize,
    field: &'static str,
    value: u64,
) -> Result<(), WriteError> {
    if target.addr_width == AddrWidth::W32 && value > u64::from(u32::MAX) {
        return Err(WriteError::TooWide {
            what,
            index,
            field,
            value,
            bytes: 4,
        });
    }
    Ok(())
}

struct Writer {
    out: Vec<u8>,
    target: Target,
}

impl Writer {
    fn u16(&mut self, v: u16) {
        match self.target.order {
            ByteOrder::Little => self.out.extend_from_slice(&v.to_le_bytes()),
            ByteOrder::Big => self.out.extend_from_slice(&v.to_be_bytes()),
        }
    }

    fn u32(&mut self, v: u32) {
        match self.target.order {
            ByteOrder::Little => self.out.extend_from_slice(&v.to_le_bytes()),
            ByteOrder::Big => self.out.extend_from_slice(&v.to_be_bytes()),
        }
    }

    /// An address-wide field; callers have checked that `v` fits.
    fn addr(&mut self, v: u64) {
        match (self.target.addr_width, self.target.order) {
            (AddrWidth::W64, ByteOrder::Little) => self.out.extend_from_slice(&v.to_le_bytes()),
            (AddrWidth::W64, ByteOrder::Big) => self.out.extend_from_slice(&v.to_be_bytes()),
            (AddrWidth::W32, _) => self.u32(v as u32),
        }
    }
}

/// Decode a gmon.out for an executable of ABI `target`, detecting the layout
/// as gprof does.
pub fn parse(bytes: &[u8], target: Target) -> Result<Decoded, ParseError> {
    if bytes.len() < 20 {
        return Err(ParseError::TooShort { len: bytes.len() });
    }
    let mut r = Reader {
        bytes,
        pos: 0,
        target,
    };
    if bytes[..4] == GNU_COOKIE {
        return parse_gnu(r);
    }
    let old = target.old_bsd_header_size();
    let format = if bytes.len() >= old + 4 && r.peek_u32(old) == GMONVERSION {
        Format::Bsd
    } else {
        Format::OldBsd
    };
    let low_pc = r.addr("low_pc")?;
    let high_pc = r.addr("high_pc")?;
    let ncnt_at = r.pos;
    let ncnt = r.u32("ncnt")?;
    let mut prof_rate = 0;
    let header = if format == Format::Bsd {
        r.u32("version")?;
        prof_rate = r.u32("profrate")?;
        r.take("spare", 12)?;
        target.bsd_header_size()
    } else {
        old
    };
    if low_pc > high_pc {
        return Err(ParseError::BadField {
            field: "low_pc",
            offset: 0,
            value: low_pc,
            problem: "it is above high_pc",
        });
    }
    let ncnt = ncnt as i32;
    if ncnt < header as i32 {
        return Err(ParseError::BadField {
            field: "ncnt",
            offset: ncnt_at,
            value: ncnt as u32 as u64,
            problem: "it is smaller than the header",
        });
    }
    let hist_bytes = ncnt as usize - header;
    if hist_bytes % 2 != 0 {
        return Err(ParseError::BadField {
            field: "ncnt",
            offset: ncnt_at,
            value: ncnt as u64,
            problem: "the histogram byte count it implies is odd",
        });
    }
    let mut hist = Histogram::new(low_pc, high_pc, 0, prof_rate);
    hist.bins = r.bins(hist_bytes / 2)?;
    let mut arcs = Vec::new();
    while r.pos < bytes.len() {
        let from_pc = r.addr("arc from_pc")?;
        let self_pc = r.addr("arc self_pc")?;
        let count_at = r.pos;
        let count = r.addr("arc count")?;
        let signed = match target.addr_width {
            AddrWidth::W32 => i64::from(count as u32 as i32),
            AddrWidth::W64 => count as i64,
        };
        if signed < 0 {
            return Err(ParseError::BadField {
                field: "arc count",
                offset: count_at,
                value: count,
                problem: "a count cannot be negative",
            });
        }
        arcs.push(Arc {
            from_pc,
            self_pc,
            count,
        });
    }
    Ok(Decoded {
        format,
        gnu_version: None,
        gmon: GmonOut {
            histograms: vec![hist],
            arcs,
            bb_counts: Vec::new(),
        },
    })
}

fn parse_gnu(mut r: Reader<'_>) -> Result<Decoded, ParseError> {
    r.take("cookie", 4)?;
    let version = r.u32("version")?;
    if version > 1 {
        return Err(ParseError::UnsupportedVersion { version });
    }
    r.take("spare", 12)?;
    let mut gmon = GmonOut::default();
    while r.pos < r.bytes.len() {
        let tag_at = r.pos;
        let tag = r.take("tag", 1)?[0];
        match tag {
            TAG_TIME_HIST => {
                let low_pc = r.addr("histogram low_pc")?;
                let high_pc = r.addr("histogram high_pc")?;
                let n = r.u32("histogram hist_size")?;
                let prof_rate = r.u32("histogram prof_rate")?;
                let mut dimension = [0; 15];
                dimension.copy_from_slice(r.take("histogram dimension", 15)?);
                let dimension_abbrev = r.take("histogram dimension abbreviation", 1)?[0];
                if low_pc > high_pc {
                    return Err(ParseError::BadField {
                        field: "histogram low_pc",
                        offset: tag_at + 1,
                        value: low_pc,
                        problem: "it is above high_pc",
                    });
                }
                let bins = r.bins(n as usize)?;
                gmon.histograms.push(Histogram {
                    low_pc,
                    high_pc,
                    prof_rate,
                    dimension,
                    dimension_abbrev,
                    bins,
                });
            }
            TAG_CG_ARC => {
                let from_pc = r.addr("arc from_pc")?;
                let self_pc = r.addr("arc self_pc")?;
                let count = u64::from(r.u32("arc count")?);
                gmon.arcs.push(Arc {
                    from_pc,
                    self_pc,
                    count,
                });
            }
            TAG_BB_COUNT => {
                if version == 0 {
                    return Err(ParseError::BadField {
                        field: "tag",
                        offset: tag_at,
                        value: u64::from(tag),
                        problem: "basic-block records of version 0 files are not supported",
                    });
                }
                let n = r.u32("basic-block nblocks")?;
                for _ in 0..n {
                    let addr = r.addr("basic-block addr")?;
                    let count = r.addr("basic-block count")?;
                    gmon.bb_counts.push(BbCount { addr, count });
                }
            }
            _ => {
                return Err(ParseError::BadTag {
                    offset: tag_at,
                    tag,
                })
            }
        }
    }
    Ok(Decoded {
        format: Format::Gnu,
        gnu_version: Some(version),
        gmon,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    target: Target,
}

impl<'a> Reader<'a> {
    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], ParseError> {
        let available = self.bytes.len() - self.pos;
        if available < n {
            return Err(ParseError::Truncated {
                field,
                offset: self.pos,
                needed: n,
                available,
            });
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn peek_u32(&self, at: usize) -> u32 {
        let b: [u8; 4] = self.bytes[at..at + 4].try_into().expect("4 bytes");
        match self.target.order {
            ByteOrder::Little => u32::from_le_bytes(b),
            ByteOrder::Big => u32::from_be_bytes(b),
        }
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, ParseError> {
        let at = self.pos;
        self.take(field, 4)?;
        Ok(self.peek_u32(at))
    }

    fn addr(&mut self, field: &'static str) -> Result<u64, ParseError> {
        match self.target.addr_width {
            AddrWidth::W32 => self.u32(field).map(u64::from),
            AddrWidth::W64 => {
                let b: [u8; 8] = self.take(field, 8)?.try_into().expect("8 bytes");
                Ok(match self.target.order {
                    ByteOrder::Little => u64::from_le_bytes(b),
                    ByteOrder::Big => u64::from_be_bytes(b),
                })
            }
        }
    }

    fn bins(&mut self, n: usize) -> Result<Vec<u16>, ParseError> {
        let at = self.pos;
        let available = self.bytes.len() - at;
        if n.checked_mul(2).is_none_or(|need| need > available) {
            return Err(ParseError::Truncated {
                field: "histogram bins",
                offset: at,
                needed: n.saturating_mul(2),
                available,
            });
        }
        let raw = self.take("histogram bins", 2 * n)?;
        Ok(raw
            .chunks_exact(2)
            .map(|c| match self.target.order {
                ByteOrder::Little => u16::from_le_bytes([c[0], c[1]]),
                ByteOrder::Big => u16::from_be_bytes([c[0], c[1]]),
            })
            .collect())
    }
}

pub mod mcount;

#[cfg(test)]
mod tests {
    use super::mcount::{ArcTable, Recorded, ToStruct};
    use super::*;

    fn sample() -> GmonOut {
        let mut h = Histogram::new(0x1000, 0x1010, 4, 250);
        h.bins = vec![1, 0, 0xffff, 7];
        GmonOut {
            histograms: vec![h],
            arcs: vec![
                Arc {
                    from_pc: 0x1004,
                    self_pc: 0x1008,
                    count: 3,
                },
                Arc {
                    from_pc: 0x100c,
                    self_pc: 0x1000,
                    count: 1,
                },
            ],
            bb_counts: vec![],
        }
    }

    #[test]
    fn round_trip_every_layout_and_target() {
        let targets = [
            Target::X86_64,
            Target {
                order: ByteOrder::Big,
                addr_width: AddrWidth::W32,
            },
            Target {
                order: ByteOrder::Big,
                addr_width: AddrWidth::W64,
            },
        ];
        for target in targets {
            for format in [Format::Gnu, Format::Bsd, Format::OldBsd] {
                let bytes = write(&sample(), format, target).unwrap();
                let d = parse(&bytes, target).unwrap();
                assert_eq!(d.format, format, "{format} {target:?}");
                let mut want = sample();
                if format == Format::OldBsd {
                    want.histograms[0].prof_rate = 0;
                }
                assert_eq!(d.gmon, want, "{format} {target:?}");
            }
        }
    }

    #[test]
    fn gnu_basic_blocks_round_trip() {
        let mut g = sample();
        g.bb_counts = vec![BbCount {
            addr: 0x1002,
            count: 9,
        }];
        let bytes = write(&g, Format::Gnu, Target::X86_64).unwrap();
        assert_eq!(parse(&bytes, Target::X86_64).unwrap().gmon, g);
        assert_eq!(
            write(&g, Format::Bsd, Target::X86_64),
            Err(WriteError::BbCounts {
                format: Format::Bsd,
                count: 1
            })
        );
    }

    #[test]
    fn writer_refuses_what_the_layout_cannot_hold() {
        let mut g = sample();
        g.arcs[1].count = u64::from(u32::MAX) + 1;
        let e = write(&g, Format::Gnu, Target::X86_64).unwrap_err();
        assert_eq!(
            e.to_string(),
            "arc 1: count 0x100000000 does not fit in 4 bytes"
        );
        assert!(write(&g, Format::Bsd, Target::X86_64).is_ok());
        let two = GmonOut {
            histograms: vec![sample().histograms[0].clone(); 2],
            ..GmonOut::default()
        };
        assert_eq!(
            write(&two, Format::Bsd, Target::X86_64)
                .unwrap_err()
                .to_string(),
            "a bsd gmon.out holds exactly one histogram, not 2"
        );
        let mut wide = sample();
        wide.histograms[0].high_pc = 1 << 40;
        let t32 = Target {
            order: ByteOrder::Little,
            addr_width: AddrWidth::W32,
        };
        assert_eq!(
            write(&wide, Format::Gnu, t32).unwrap_err().to_string(),
            "histogram 0: high_pc 0x10000000000 does not fit in 4 bytes"
        );
    }

    #[test]
    fn parse_errors_name_field_and_offset() {
        let good = write(&sample(), Format::Gnu, Target::X86_64).unwrap();
        let e = |b: &[u8]| parse(b, Target::X86_64).unwrap_err().to_string();
        assert_eq!(
            e(&good[..10]),
            "gmon.out is 10 bytes long, too short to be a gmon file (at least 20)"
        );
        let mut v2 = good.clone();
        v2[4] = 2;
        assert_eq!(
            e(&v2),
            "gmon.out: version at byte 4 is 2; only versions 0 and 1 exist"
        );
        let mut tag7 = good.clone();
        tag7[20] = 7;
        assert_eq!(
            e(&tag7),
            "gmon.out: record tag at byte 20 is 7, not 0 (histogram), 1 (arc) or 2 (basic blocks)"
        );
        assert_eq!(
            e(&good[..20 + 1 + 40 + 3]),
            "gmon.out: histogram bins at byte 61 needs 8 bytes but the file ends after 3"
        );
        assert_eq!(
            e(&good[..good.len() - 2]),
            "gmon.out: arc count at byte 107 needs 4 bytes but the file ends after 2"
        );
        let bsd = write(&sample(), Format::Bsd, Target::X86_64).unwrap();
        assert_eq!(
            e(&bsd[..bsd.len() - 1]),
            "gmon.out: arc count at byte 88 needs 8 bytes but the file ends after 7"
        );
        let mut small = bsd.clone();
        small[16..20].copy_from_slice(&8u32.to_le_bytes());
        assert_eq!(
            e(&small),
            "gmon.out: ncnt at byte 16 is 0x8: it is smaller than the header"
        );
        let mut inverted = bsd.clone();
        inverted[0..8].copy_from_slice(&0x2000u64.to_le_bytes());
        assert_eq!(
            e(&inverted),
            "gmon.out: low_pc at byte 0 is 0x2000: it is above high_pc"
        );
    }

    #[test]
    fn version_zero_reads_like_one() {
        let mut b = write(&sample(), Format::Gnu, Target::X86_64).unwrap();
        b[4] = 0;
        let d = parse(&b, Target::X86_64).unwrap();
        assert_eq!(d.gnu_version, Some(0));
        assert_eq!(d.gmon, sample());
    }

    #[test]
    fn bin_of_uses_the_exact_width() {
        let h = Histogram::new(0x401000, 0x401300, 192, 1000);
        assert_eq!(h.bin_of(0x401000), Some(0));
        assert_eq!(h.bin_of(0x4011d8), Some((0x1d8) / 4));
        assert_eq!(h.bin_of(0x4012ff), Some(191));
        assert_eq!(h.bin_of(0x401300), None);
        assert_eq!(h.bin_of(0xfff), None);
    }

    /// TV-G6: tolimit 5, lowpc 0, calls (0x10→A), (0x10→A), (0x10→B), (0x10→A).
    #[test]
    fn tv_g6_mcount_model() {
        const A: u64 = 0xa000;
        const B: u64 = 0xb000;
        let mut t = ArcTable::with_limit(0, 1 << 20, 5);
        for callee in [A, A, B] {
            assert_eq!(t.record(0x10, callee), Recorded::Counted);
        }
        // After call 3 the chain of froms[4] is B(tos[2]) -> A(tos[1]).
        assert_eq!(t.froms(4), 2);
        assert_eq!(t.tos(2).link, 1);
        assert_eq!(t.record(0x10, A), Recorded::Counted);
        assert_eq!(t.froms(4), 1);
        assert_eq!(t.tos(0).link, 2);
        assert_eq!(
            t.tos(1),
            ToStruct {
                selfpc: A,
                count: 3,
                link: 2
            }
        );
        assert_eq!(
            t.tos(2),
            ToStruct {
                selfpc: B,
                count: 1,
                link: 0
            }
        );
        assert_eq!(
            t.arcs(),
            vec![
                Arc {
                    from_pc: 0x10,
                    self_pc: A,
                    count: 3
                },
                Arc {
                    from_pc: 0x10,
                    self_pc: B,
                    count: 1
                },
            ]
        );
        // Two more new arcs use tos[3] and tos[4]; the next overflows.
        assert_eq!(t.record(0x20, A), Recorded::Counted);
        assert_eq!(t.record(0x24, B), Recorded::Counted);
        assert_eq!(t.froms(8), 3);
        assert_eq!(t.froms(9), 4);
        assert_eq!(t.used(), 4);
        assert_eq!(t.record(0x28, A), Recorded::Overflow);
        assert_eq!(t.froms(10), 0);
        // Existing arcs still count (what happens after kgmon -b resumes).
        assert_eq!(t.record(0x10, B), Recorded::Counted);
        assert_eq!(t.record(0x30, B), Recorded::Overflow);
        t.reset();
        assert_eq!(t.used(), 0);
        assert!(t.arcs().is_empty());
    }

    #[test]
    fn mcount_rejects_call_sites_outside_text() {
        let mut t = ArcTable::with_limit(0x1000, 0x100, 50);
        assert_eq!(t.record(0xfff, 1), Recorded::OutsideText);
        // mcount's `>` would accept frompc == lowpc + textsize; we do not.
        assert_eq!(t.record(0x1100, 1), Recorded::OutsideText);
        assert_eq!(t.record(0x10ff, 1), Recorded::Counted);
        assert_eq!(t.arcs()[0].from_pc, 0x10fc);
    }

    #[test]
    fn netbsd_sizing() {
        // Spec §3.2 example: textsize 8463176, tolimit clamped to 65534.
        let t = ArcTable::for_text(0xffffffff80200000, 0xffffffff80a12345);
        assert_eq!(t.tolimit(), 65534);
        let small = ArcTable::for_text(0x1000, 0x1100);
        assert_eq!(small.tolimit(), 50);
    }
}

#[cfg(test)]
mod sweep {
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
}
