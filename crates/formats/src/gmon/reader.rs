//! The gmon.out reader: layout detection as gprof does it, the BSD
//! layouts, the GNU tagged records, and the length bound a reader checks
//! before reading.

use super::*;
use super::{bsd, gnu};

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
    let r = Reader {
        bytes,
        pos: 0,
        target,
    };
    if bytes[..4] == GNU_COOKIE {
        return gnu::parse(r);
    }
    let old = target.old_bsd_header_size();
    let format = if bytes.len() >= old + 4 && r.peek_u32(old) == GMONVERSION {
        Format::Bsd
    } else {
        Format::OldBsd
    };
    bsd::parse(r, format)
}

pub(super) struct Reader<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
    pub(super) target: Target,
}

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], ParseError> {
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

    pub(super) fn peek_u32(&self, at: usize) -> u32 {
        let b: [u8; 4] = self.bytes[at..at + 4].try_into().expect("4 bytes");
        match self.target.order {
            ByteOrder::Little => u32::from_le_bytes(b),
            ByteOrder::Big => u32::from_be_bytes(b),
        }
    }

    pub(super) fn u32(&mut self, field: &'static str) -> Result<u32, ParseError> {
        let at = self.pos;
        self.take(field, 4)?;
        Ok(self.peek_u32(at))
    }

    pub(super) fn addr(&mut self, field: &'static str) -> Result<u64, ParseError> {
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

    pub(super) fn bins(&mut self, n: usize) -> Result<Vec<u16>, ParseError> {
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
