//! `histogram`: the text of a prof(3) module histogram.
//!
//! Lineage: Inferno 4e `emu/port/devprof.c`, which returned one pair per
//! read as `sprint("%d %lud", index, count)`: no newline, no NUL. profdev's
//! prof device keeps one pair per read but changes the pair's text:
//!
//! ```text
//! 0x<pc> <count>\n
//! ```
//!
//! * `pc` is an address in the module's own ELF address space (load bias
//!   removed), in lowercase hexadecimal with a `0x` prefix, so that
//!   `addr2line -e PATH 0x1139` resolves it as it stands (addr2line reads
//!   every address as hexadecimal; a decimal pc would be misread).
//! * `count` is decimal, never zero (the device skips empty buckets).
//! * Each pair ends with a newline, so `cat histogram` prints clean lines
//!   and a concatenation of reads is still parseable.
//!
//! Pairs come in strictly increasing pc. [`parse_pair`] also accepts the
//! original's form (decimal index, no newline), so a histogram copied off
//! an Inferno machine still reads.
//!
//! ```
//! use profdev_formats::prof_histogram::{encode_pair, parse_pair, parse_text};
//! assert_eq!(encode_pair(0x1139, 5), "0x1139 5\n");
//! assert_eq!(parse_pair(b"0x1139 5\n").unwrap(), (0x1139, 5));
//! assert_eq!(parse_pair(b"12 5").unwrap(), (12, 5));
//! assert_eq!(parse_text("0x1 5\n0x4 7\n").unwrap(), [(1, 5), (4, 7)]);
//! ```

/// Why histogram text cannot be used. Offsets are byte offsets into the
/// text given to the parser.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistogramError {
    /// A pair is not exactly two fields (the library's "bad histogram
    /// data").
    #[error("bad histogram data at byte {offset}: expected \"pc count\", found {found:?}")]
    Fields { offset: usize, found: String },
    /// The pc field is not a number.
    #[error("bad histogram data at byte {offset}: pc {found:?} is not a number")]
    Pc { offset: usize, found: String },
    /// The count field is not a positive decimal number.
    #[error("bad histogram data at byte {offset}: count {found:?} is not a positive number")]
    Count { offset: usize, found: String },
    /// Pairs out of order or repeated.
    #[error("bad histogram data at byte {offset}: pc {pc:#x} does not follow {previous:#x}")]
    Order {
        offset: usize,
        pc: u64,
        previous: u64,
    },
}

/// The text of one pair, newline included.
pub fn encode_pair(pc: u64, count: u64) -> String {
    format!("0x{pc:x} {count}\n")
}

/// Parse one pair (the bytes of one read): `0x<hex> <count>` or the
/// original's `<decimal> <count>`, with or without a trailing newline.
pub fn parse_pair(bytes: &[u8]) -> Result<(u64, u64), HistogramError> {
    parse_at(bytes, 0)
}

fn parse_at(bytes: &[u8], offset: usize) -> Result<(u64, u64), HistogramError> {
    let text = String::from_utf8_lossy(bytes);
    let fields: Vec<&str> = text.split_ascii_whitespace().collect();
    let [pc, count] = fields[..] else {
        return Err(HistogramError::Fields {
            offset,
            found: text.trim_end().to_string(),
        });
    };
    let pc_value = match pc.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => pc.parse(),
    }
    .map_err(|_| HistogramError::Pc {
        offset,
        found: pc.to_string(),
    })?;
    let count_offset = offset + text.rfind(count).unwrap_or(0);
    let count_value = count
        .parse::<u64>()
        .ok()
        .filter(|&c| c != 0)
        .ok_or_else(|| HistogramError::Count {
            offset: count_offset,
            found: count.to_string(),
        })?;
    Ok((pc_value, count_value))
}

/// Parse a whole histogram as `cat` prints it: one pair per line, pcs
/// strictly increasing.
pub fn parse_text(text: &str) -> Result<Vec<(u64, u64)>, HistogramError> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if !line.trim().is_empty() {
            let (pc, count) = parse_at(line.as_bytes(), offset)?;
            if let Some(&(previous, _)) = out.last() {
                if pc <= previous {
                    return Err(HistogramError::Order {
                        offset,
                        pc,
                        previous,
                    });
                }
            }
            out.push((pc, count));
        }
        offset += line.len();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for (pc, n) in [(0, 1), (0x1139, 5), (u64::MAX, u64::MAX)] {
            assert_eq!(parse_pair(encode_pair(pc, n).as_bytes()).unwrap(), (pc, n));
        }
    }

    #[test]
    fn errors_name_the_byte() {
        assert_eq!(
            parse_pair(b"0x12").unwrap_err().to_string(),
            "bad histogram data at byte 0: expected \"pc count\", found \"0x12\""
        );
        assert_eq!(
            parse_text("0x1 5\n0xzz 3\n").unwrap_err(),
            HistogramError::Pc {
                offset: 6,
                found: "0xzz".into()
            }
        );
        assert_eq!(
            parse_text("0x1 5\n0x2 0\n").unwrap_err(),
            HistogramError::Count {
                offset: 10,
                found: "0".into()
            }
        );
        assert_eq!(
            parse_text("0x4 5\n0x2 1\n").unwrap_err().to_string(),
            "bad histogram data at byte 6: pc 0x2 does not follow 0x4"
        );
        assert!(parse_pair(b"1 2 3").is_err());
        assert!(parse_pair(b"").is_err());
        assert!(parse_pair(b"1 -2").is_err());
    }
}
