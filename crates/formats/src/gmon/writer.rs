//! The gmon.out writer: one [`GmonOut`] encoded in the GNU tagged, 4.4BSD
//! or old BSD layout for a [`Target`].

use super::*;

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
