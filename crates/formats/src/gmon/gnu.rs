//! The GNU tagged layout (`"gmon"` cookie, what glibc writes): header,
//! then TIME_HIST, CG_ARC and BB_COUNT records.

use super::reader::Reader;
use super::writer::{check_addr, Writer};
use super::*;

/// Encode the GNU layout; `write` has checked the ranges and widths.
pub(super) fn write(w: &mut Writer, gmon: &GmonOut, target: Target) -> Result<(), WriteError> {
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
    Ok(())
}

/// Decode the GNU layout; `parse` has seen its cookie.
pub(super) fn parse(mut r: Reader<'_>) -> Result<Decoded, ParseError> {
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
