//! The gmon.out writer: one [`GmonOut`] encoded in the GNU tagged, 4.4BSD
//! or old BSD layout for a [`Target`].

use super::*;
use super::{bsd, gnu};

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
        Format::Gnu => gnu::write(&mut w, gmon, target)?,
        Format::Bsd | Format::OldBsd => bsd::write(&mut w, gmon, format, target)?,
    }
    Ok(w.out)
}

pub(super) fn check_addr(
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

pub(super) struct Writer {
    pub(super) out: Vec<u8>,
    target: Target,
}

impl Writer {
    pub(super) fn u16(&mut self, v: u16) {
        match self.target.order {
            ByteOrder::Little => self.out.extend_from_slice(&v.to_le_bytes()),
            ByteOrder::Big => self.out.extend_from_slice(&v.to_be_bytes()),
        }
    }

    pub(super) fn u32(&mut self, v: u32) {
        match self.target.order {
            ByteOrder::Little => self.out.extend_from_slice(&v.to_le_bytes()),
            ByteOrder::Big => self.out.extend_from_slice(&v.to_be_bytes()),
        }
    }

    /// An address-wide field; callers have checked that `v` fits.
    pub(super) fn addr(&mut self, v: u64) {
        match (self.target.addr_width, self.target.order) {
            (AddrWidth::W64, ByteOrder::Little) => self.out.extend_from_slice(&v.to_le_bytes()),
            (AddrWidth::W64, ByteOrder::Big) => self.out.extend_from_slice(&v.to_be_bytes()),
            (AddrWidth::W32, _) => self.u32(v as u32),
        }
    }
}
