//! The 4.4BSD layout (what NetBSD's kgmon writes) and the old BSD one:
//! header, u16 bins, then raw arcs to end of file.

use super::reader::Reader;
use super::writer::Writer;
use super::*;

/// Encode a BSD layout; `write` has checked the ranges and widths.
pub(super) fn write(
    w: &mut Writer,
    gmon: &GmonOut,
    format: Format,
    target: Target,
) -> Result<(), WriteError> {
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
    // The exact size up front: a kernel profile is megabytes, and growing
    // by doubling would briefly hold twice that.
    let arc_bytes = 3 * target.addr_width.bytes();
    w.out
        .reserve_exact((ncnt as usize).saturating_add(gmon.arcs.len().saturating_mul(arc_bytes)));
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
    Ok(())
}

/// Decode a BSD layout; `parse` has detected which from the header.
pub(super) fn parse(mut r: Reader<'_>, format: Format) -> Result<Decoded, ParseError> {
    let bytes = r.bytes;
    let target = r.target;
    let old = target.old_bsd_header_size();
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
