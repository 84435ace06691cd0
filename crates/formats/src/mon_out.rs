//! mon.out, the file monitor(3C) writes for prof(1): a documented 64-bit layout.
//!
//! # Synopsis
//!
//! ```text
//! MonOut::to_bytes(&self)  -> Result<Vec<u8>, WriteError>
//! MonOut::parse(&[u8])     -> Result<MonOut, ParseError>
//! ```
//!
//! # Description
//!
//! Lineage: SVR4.0 `lib/libc/port/gen/mon.c` (`writeBlocks`) and `<mon.h>`,
//! whose file is the in-memory `struct hdr`, the `struct cnt` array and the
//! histogram written as they are. On the 32-bit original `hdr` is 12 bytes
//! and `cnt` 8. profdev uses the natural LP64 layout of the same C
//! structs (`char *` and `long` 8 bytes, `int` 4), written field by field in
//! little-endian order:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | `lpc`: lowest text address of the histogram, u64 LE |
//! | 8 | 8 | `hpc`: one past the highest, u64 LE |
//! | 16 | 4 | `nfns`: number of call counters that follow, i32 LE |
//! | 20 | 4 | padding, zero (the struct's tail padding) |
//! | 24 | 16 × nfns | `struct cnt { u64 fnpc; i64 mcnt; }`, LE |
//! | 24 + 16·nfns | rest of file | histogram, u16 LE cells, to end of file |
//!
//! The histogram's scale is not stored: a reader recomputes it from the
//! number of cells and `hpc - lpc` exactly as monitor did (with `text =
//! ceil((hpc - lpc) / 2)` WORDs, `scale = cells * 0x10000 / text` when the
//! histogram is smaller than the text, else 0xffff; profdev-profil's
//! `monitor::scale`). Addresses are run-time virtual addresses of the
//! process that wrote the file (for a PIE, the load bias is included).
//!
//! The writer is profdev-profil's monitor(3C); the parser reads what it
//! wrote. It allocates no more than the file's own length implies: `nfns`
//! is checked against the bytes present before the counters are read.
//!
//! # Example
//!
//! ```
//! use profdev_formats::mon_out::{FnCount, MonOut};
//! let m = MonOut { lpc: 0x1000, hpc: 0x9000, counts: vec![FnCount { fnpc: 0, mcnt: 0 }], hist: vec![1, 2] };
//! let bytes = m.to_bytes().unwrap();
//! assert_eq!(bytes.len(), 24 + 16 + 4);
//! assert_eq!(MonOut::parse(&bytes).unwrap(), m);
//! ```
//!
//! # Bugs
//!
//! * Only the LP64 little-endian layout: the 32-bit SVR4 files (12-byte
//!   header, 8-byte counters) are not read.

/// Why a mon.out cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// `nfns` is a C `int`.
    #[error("mon.out: {count} call counters do not fit the 32-bit nfns field")]
    TooManyCounters {
        /// Number of counters given.
        count: usize,
    },
}

/// Why bytes are not a mon.out; every variant names the field and its byte
/// offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The file ends inside a field.
    #[error("mon.out: file of {len} bytes ends inside field {field} at byte offset {offset}")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Byte offset of that field.
        offset: usize,
        /// File length.
        len: usize,
    },
    /// A header field holds an impossible value.
    #[error("mon.out: field {field} at byte offset {offset} holds {value}, which {why}")]
    BadField {
        /// The field being read.
        field: &'static str,
        /// Byte offset of that field.
        offset: usize,
        /// The value found.
        value: u64,
        /// Why it cannot be right.
        why: &'static str,
    },
}

/// Size of `struct hdr` in the 64-bit layout.
pub const HDR_BYTES: usize = 24;
/// Size of `struct cnt` in the 64-bit layout.
pub const CNT_BYTES: usize = 16;

/// One call counter (`struct cnt`): a function's address and its call count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FnCount {
    /// Address of the counted function (0 for an unused slot).
    pub fnpc: u64,
    /// Number of calls.
    pub mcnt: i64,
}

/// A whole mon.out file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MonOut {
    /// Lowest text address covered by the histogram.
    pub lpc: u64,
    /// One past the highest.
    pub hpc: u64,
    /// All call counters of all blocks, in registration order.
    pub counts: Vec<FnCount>,
    /// The last registered histogram.
    pub hist: Vec<u16>,
}

impl MonOut {
    /// Encode in the layout above.
    pub fn to_bytes(&self) -> Result<Vec<u8>, WriteError> {
        let nfns = i32::try_from(self.counts.len()).map_err(|_| WriteError::TooManyCounters {
            count: self.counts.len(),
        })?;
        let mut out =
            Vec::with_capacity(HDR_BYTES + CNT_BYTES * self.counts.len() + 2 * self.hist.len());
        out.extend_from_slice(&self.lpc.to_le_bytes());
        out.extend_from_slice(&self.hpc.to_le_bytes());
        out.extend_from_slice(&nfns.to_le_bytes());
        out.extend_from_slice(&[0u8; 4]);
        for c in &self.counts {
            out.extend_from_slice(&c.fnpc.to_le_bytes());
            out.extend_from_slice(&c.mcnt.to_le_bytes());
        }
        for cell in &self.hist {
            out.extend_from_slice(&cell.to_le_bytes());
        }
        Ok(out)
    }

    /// Decode; errors name the field and its byte offset.
    pub fn parse(b: &[u8]) -> Result<MonOut, ParseError> {
        let len = b.len();
        let u64_at = |field, offset: usize| -> Result<u64, ParseError> {
            b.get(offset..offset + 8)
                .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
                .ok_or(ParseError::Truncated { field, offset, len })
        };
        let lpc = u64_at("lpc", 0)?;
        let hpc = u64_at("hpc", 8)?;
        let nfns = b
            .get(16..20)
            .map(|s| i32::from_le_bytes(s.try_into().expect("4 bytes")))
            .ok_or(ParseError::Truncated {
                field: "nfns",
                offset: 16,
                len,
            })?;
        if len < HDR_BYTES {
            return Err(ParseError::Truncated {
                field: "padding",
                offset: 20,
                len,
            });
        }
        if nfns < 0 {
            return Err(ParseError::BadField {
                field: "nfns",
                offset: 16,
                value: nfns as u32 as u64,
                why: "is negative",
            });
        }
        let nfns = nfns as usize;
        if (len - HDR_BYTES) / CNT_BYTES < nfns {
            return Err(ParseError::Truncated {
                field: "cnt",
                offset: HDR_BYTES + CNT_BYTES * ((len - HDR_BYTES) / CNT_BYTES),
                len,
            });
        }
        let mut counts = Vec::with_capacity(nfns);
        for i in 0..nfns {
            let at = HDR_BYTES + CNT_BYTES * i;
            counts.push(FnCount {
                fnpc: u64_at("cnt.fnpc", at)?,
                mcnt: u64_at("cnt.mcnt", at + 8)? as i64,
            });
        }
        let hist_at = HDR_BYTES + CNT_BYTES * nfns;
        let rest = &b[hist_at..];
        if rest.len() % 2 != 0 {
            return Err(ParseError::Truncated {
                field: "histogram cell",
                offset: len - 1,
                len,
            });
        }
        let hist = rest
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        Ok(MonOut {
            lpc,
            hpc,
            counts,
            hist,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_explicit() {
        let m = MonOut {
            lpc: 0x0102_0304_0506_0708,
            hpc: 0x1112_1314_1516_1718,
            counts: vec![FnCount {
                fnpc: 0x2122,
                mcnt: -2,
            }],
            hist: vec![0x3132, 0x4142],
        };
        let b = m.to_bytes().unwrap();
        let want: Vec<u8> = [
            &[8, 7, 6, 5, 4, 3, 2, 1][..],
            &[0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11],
            &[1, 0, 0, 0, 0, 0, 0, 0],
            &[0x22, 0x21, 0, 0, 0, 0, 0, 0],
            &[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            &[0x32, 0x31, 0x42, 0x41],
        ]
        .concat();
        assert_eq!(b, want);
        assert_eq!(MonOut::parse(&b).unwrap(), m);
    }

    #[test]
    fn bad_files_name_field_and_offset() {
        let e = MonOut::parse(&[0; 10]).unwrap_err().to_string();
        assert_eq!(
            e,
            "mon.out: file of 10 bytes ends inside field hpc at byte offset 8"
        );
        let mut b = MonOut {
            counts: vec![FnCount::default(); 2],
            ..Default::default()
        }
        .to_bytes()
        .unwrap();
        b.truncate(50);
        let e = MonOut::parse(&b).unwrap_err().to_string();
        assert_eq!(
            e,
            "mon.out: file of 50 bytes ends inside field cnt at byte offset 40"
        );
        let mut b = MonOut::default().to_bytes().unwrap();
        b[16..20].copy_from_slice(&(-1i32).to_le_bytes());
        let e = MonOut::parse(&b).unwrap_err().to_string();
        assert_eq!(
            e,
            "mon.out: field nfns at byte offset 16 holds 4294967295, which is negative"
        );
        let mut b = MonOut {
            hist: vec![1],
            ..Default::default()
        }
        .to_bytes()
        .unwrap();
        b.push(0);
        let e = MonOut::parse(&b).unwrap_err().to_string();
        assert_eq!(
            e,
            "mon.out: file of 27 bytes ends inside field histogram cell at byte offset 26"
        );
    }
}

#[cfg(test)]
mod sweep {
    use super::*;

    /// Stand-in for the fuzz target on stable: every prefix of a valid file
    /// and a spread of corrupted bytes parse or fail, never panic; what
    /// parses writes back to the same bytes.
    #[test]
    fn truncations_and_corruptions_never_panic() {
        let good = MonOut {
            lpc: 0x1000,
            hpc: 0x9000,
            counts: vec![
                FnCount {
                    fnpc: 0x1010,
                    mcnt: 3
                };
                3
            ],
            hist: vec![1, 2, 3, 4, 5],
        }
        .to_bytes()
        .unwrap();
        for n in 0..good.len() {
            if let Ok(m) = MonOut::parse(&good[..n]) {
                assert_eq!(m.to_bytes().unwrap(), &good[..n]);
            }
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut bad = good.clone();
            let i = (seed as usize) % bad.len();
            bad[i] = (seed >> 32) as u8;
            if let Ok(m) = MonOut::parse(&bad) {
                // The padding is not kept: compare the rest.
                let mut back = m.to_bytes().unwrap();
                back[20..24].copy_from_slice(&bad[20..24]);
                assert_eq!(back, bad);
            }
        }
    }
}
