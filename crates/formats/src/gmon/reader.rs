//! The gmon.out reader: layout detection as gprof does it, the BSD
//! layouts, the GNU tagged records, and the length bound a reader checks
//! before reading.

use super::*;

/// The most bytes a GNU-format gmon.out is read up to: its records are
/// tagged, so no header bounds them; 1 GiB is far above any real profile.
pub const MAX_GNU_LEN: u64 = 1 << 30;

/// The most bytes a gmon.out that begins with `prefix` (its first
/// `Target::bsd_header_size` bytes, or fewer) can hold, from its header
/// alone: for the BSD layouts, `ncnt` (header and histogram) plus the
/// kernel's most arcs (`mcount::MAXARCS`, as kgmon's tos table holds), one
/// arc being three address-wide words; for GNU's, [`MAX_GNU_LEN`]. A reader
/// refuses a longer file before reading it.
///
/// ```
/// use profdev_formats::gmon::{max_len, Target};
/// let mut h = vec![0u8; 40];
/// h[16..20].copy_from_slice(&1000u32.to_le_bytes()); // ncnt
/// assert_eq!(max_len(&h, Target::X86_64), 1000 + 65534 * 24);
/// ```
pub fn max_len(prefix: &[u8], target: Target) -> u64 {
    if prefix.starts_with(&GNU_COOKIE) {
        return MAX_GNU_LEN;
    }
    let w = target.addr_width.bytes();
    let ncnt = prefix
        .get(2 * w..2 * w + 4)
        .map(|b| {
            let b = [b[0], b[1], b[2], b[3]];
            u64::from(match target.order {
                ByteOrder::Little => u32::from_le_bytes(b),
                ByteOrder::Big => u32::from_be_bytes(b),
            })
        })
        .unwrap_or(0);
    ncnt.saturating_add(mcount::MAXARCS * 3 * w as u64)
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
