//! The prf log: what `prfdc` and `prfsnap` write and `prfpr` reads.
//!
//! A log is a header (the loaded address table) followed by records, each a
//! time stamp and a copy of the device's counters. Counters are cumulative
//! since the last load; `prfpr` prints the differences between consecutive
//! records. Two layouts exist; [`parse`] tells them apart by the magic.
//!
//! # The profdev layout (version 1), written by profdev
//!
//! The SVR4 structure widened to 64 bits, behind a magic and a version.
//! Every integer is **little-endian**, whatever the host:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic, the ASCII bytes `PRFLOG64` |
//! | 8 | 4 | version, u32 = 1 |
//! | 12 | 4 | extra counters per record, u32: 2 (user, idle: DG/UX, what profdev writes) or 1 (user: SVR4) |
//! | 16 | 8 | N, u64: number of addresses, at least 1 |
//! | 24 | 8·N | the address table, u64 each, as loaded (the leading 0 included) |
//!
//! then any number of records, each `8 + 8·(N + extra)` bytes:
//!
//! | offset in record | size | field |
//! |---|---|---|
//! | 0 | 8 | time, i64: seconds since 1970-01-01 00:00 UTC (0 prints as `initialization`) |
//! | 8 | 8·N | counter of each address, u64 |
//! | 8 + 8·N | 8 | user-mode ticks, u64 |
//! | 16 + 8·N | 8 | idle ticks, u64 (only when extra = 2) |
//!
//! # The SVR4.0 i386 layout (read, and written for tests)
//!
//! Lineage: SVR4.0 `cmd/profiler/prfsnap.c` and `prfdc.c`, which write the
//! driver's words as they are in memory: 32-bit little-endian, no magic.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | N, i32 |
//! | 4 | 4·N | the address table, u32 each |
//!
//! then records of `4 + 4·(N + 1)` bytes: time (i32, seconds since the
//! epoch), N address counters and the user counter (u32 each).
//!
//! A file whose first eight bytes are not `PRFLOG64` is read as SVR4.
//!
//! # Short files
//!
//! The header must be whole: a missing or short field is an error naming
//! the field and its byte offset, and an address count above
//! [`MAX_ADDRESSES`] (the device's `PRF_GETMAX`) is refused before anything
//! is allocated for it ([`header_len`] gives a streaming reader the
//! header's length from its first 24 bytes). [`parse`] returns the
//! complete records and says in [`PrfLog::partial`] where a last record cut
//! short starts (SVR4 `prfpr` stopped quietly there).
//!
//! # Validation
//!
//! A reader that must not print garbage checks each record with
//! [`check_record`] against the one before it: times from 0 (first record
//! only) to year 9999 that never go back, counters that never go down and
//! grow no faster than any machine ticks. A record that fails is
//! [`PrfLogError::Foreign`]; a last record cut short is
//! [`PrfLogError::Torn`]. `profdev prfpr` prints the intervals before
//! either, then names its byte offset and exits non-zero.
//!
//! ```
//! use profdev_formats::prflog::{self, Header, Layout, Record};
//!
//! let header = Header::new(Layout::Profdev64, 2, vec![0, 0x1000, 0x2000]).unwrap();
//! let mut log = header.encode().unwrap();
//! let rec = Record { time: 1_600_000_000, counters: vec![1, 2, 3, 4, 5] };
//! log.extend(header.encode_record(&rec).unwrap());
//! let parsed = prflog::parse(&log).unwrap();
//! assert_eq!(parsed.header, header);
//! assert_eq!(parsed.records, [rec]);
//! assert!(parsed.partial.is_none());
//! ```

/// The profdev layout's magic.
pub const MAGIC: [u8; 8] = *b"PRFLOG64";
/// The profdev layout's version this module reads and writes.
pub const VERSION: u32 = 1;
/// Byte length of the profdev layout's fixed header (before the addresses).
pub const PROFDEV_FIXED_HEADER: usize = 24;

/// Which of the two layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// profdev's own: magic, version, 64-bit little-endian fields.
    Profdev64,
    /// SVR4.0 i386: 32-bit little-endian words, no magic, N + 1 counters.
    Svr4I386,
}

impl Layout {
    fn word(self) -> usize {
        match self {
            Layout::Profdev64 => 8,
            Layout::Svr4I386 => 4,
        }
    }
}

/// The header: the layout, the number of extra counters and the address
/// table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The layout read or to write.
    pub layout: Layout,
    /// Counters after the N address counters: 1 (user) or 2 (user, idle).
    pub extra: usize,
    /// The address table as loaded into the device.
    pub addrs: Vec<u64>,
}

/// One record: a time stamp and the counters at that time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Seconds since the epoch (0 means "initialization" to prfpr).
    pub time: i64,
    /// N address counters, the user counter, and (extra = 2) the idle counter.
    pub counters: Vec<u64>,
}

/// Where a last, incomplete record starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partial {
    /// Byte offset of the incomplete record.
    pub offset: u64,
    /// Bytes present of it.
    pub len: u64,
}

/// A parsed log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrfLog {
    /// The header.
    pub header: Header,
    /// The complete records, in file order.
    pub records: Vec<Record>,
    /// A last record cut short, if any.
    pub partial: Option<Partial>,
}

/// Why a log could not be read or written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrfLogError {
    /// The file ends inside a header field.
    #[error("prf log: the {field} at byte offset {offset} is cut short: {need} bytes needed, {have} present")]
    Short {
        field: &'static str,
        offset: u64,
        need: u64,
        have: u64,
    },
    /// The address count is not positive.
    #[error("prf log: the address count at byte offset {offset} is {value}; a log holds at least one address")]
    Count { offset: u64, value: i64 },
    /// More addresses than the device can hold.
    #[error("prf log: the address count at byte offset {offset} is {value}, more than the {MAX_ADDRESSES} the device holds (PRF_GETMAX)")]
    TooMany { offset: u64, value: u64 },
    /// A last record cut short: an append that did not finish.
    #[error("prf log: the record at byte offset {offset} is torn: {len} of its {record_len} bytes are present (an append cut short, e.g. by a full disk)")]
    Torn {
        offset: u64,
        len: u64,
        record_len: u64,
    },
    /// A whole record that cannot follow the one before it.
    #[error("prf log: the record at byte offset {offset} is not one of this log's: {why}")]
    Foreign { offset: u64, why: String },
    /// An unknown version of the profdev layout.
    #[error("prf log: version {version} at byte offset {offset} is not one this reader knows (it reads version 1)")]
    Version { offset: u64, version: u32 },
    /// A bad extra-counter count.
    #[error("prf log: the extra counter count at byte offset {offset} is {value}; it must be 1 (user) or 2 (user and idle)")]
    Extra { offset: u64, value: u64 },
    /// A value too wide for the SVR4 layout (writing only).
    #[error("prf log: {field} {value:#x} does not fit the 32 bits of the SVR4 i386 layout")]
    TooWide { field: &'static str, value: u64 },
    /// A record with the wrong number of counters (writing only).
    #[error("prf log: a record needs {expected} counters (N + {extra}), this one has {got}")]
    Counters {
        expected: usize,
        extra: usize,
        got: usize,
    },
}

impl Header {
    /// A header, checked: at least one address, extra 1 or 2 (1 only for
    /// SVR4).
    pub fn new(layout: Layout, extra: usize, addrs: Vec<u64>) -> Result<Self, PrfLogError> {
        let extra_offset = match layout {
            Layout::Profdev64 => 12,
            Layout::Svr4I386 => 0,
        };
        let extra_ok = match layout {
            Layout::Profdev64 => extra == 1 || extra == 2,
            Layout::Svr4I386 => extra == 1,
        };
        if !extra_ok {
            return Err(PrfLogError::Extra {
                offset: extra_offset,
                value: extra as u64,
            });
        }
        if addrs.is_empty() {
            return Err(PrfLogError::Count {
                offset: if layout == Layout::Profdev64 { 16 } else { 0 },
                value: 0,
            });
        }
        Ok(Header {
            layout,
            extra,
            addrs,
        })
    }

    /// N, the number of addresses.
    pub fn n(&self) -> usize {
        self.addrs.len()
    }

    /// Counters per record: N + extra.
    pub fn counters_per_record(&self) -> usize {
        self.n() + self.extra
    }

    /// Bytes of the header.
    pub fn byte_len(&self) -> usize {
        match self.layout {
            Layout::Profdev64 => PROFDEV_FIXED_HEADER + 8 * self.n(),
            Layout::Svr4I386 => 4 + 4 * self.n(),
        }
    }

    /// Bytes of one record.
    pub fn record_len(&self) -> usize {
        let w = self.layout.word();
        w + w * self.counters_per_record()
    }

    /// The header's bytes.
    pub fn encode(&self) -> Result<Vec<u8>, PrfLogError> {
        let mut out = Vec::with_capacity(self.byte_len());
        match self.layout {
            Layout::Profdev64 => {
                out.extend_from_slice(&MAGIC);
                out.extend_from_slice(&VERSION.to_le_bytes());
                out.extend_from_slice(&(self.extra as u32).to_le_bytes());
                out.extend_from_slice(&(self.n() as u64).to_le_bytes());
                for a in &self.addrs {
                    out.extend_from_slice(&a.to_le_bytes());
                }
            }
            Layout::Svr4I386 => {
                let n = i32::try_from(self.n()).map_err(|_| PrfLogError::TooWide {
                    field: "address count",
                    value: self.n() as u64,
                })?;
                out.extend_from_slice(&n.to_le_bytes());
                for &a in &self.addrs {
                    out.extend_from_slice(&narrow("address", a)?.to_le_bytes());
                }
            }
        }
        Ok(out)
    }

    /// One record's bytes.
    pub fn encode_record(&self, record: &Record) -> Result<Vec<u8>, PrfLogError> {
        if record.counters.len() != self.counters_per_record() {
            return Err(PrfLogError::Counters {
                expected: self.counters_per_record(),
                extra: self.extra,
                got: record.counters.len(),
            });
        }
        let mut out = Vec::with_capacity(self.record_len());
        match self.layout {
            Layout::Profdev64 => {
                out.extend_from_slice(&record.time.to_le_bytes());
                for c in &record.counters {
                    out.extend_from_slice(&c.to_le_bytes());
                }
            }
            Layout::Svr4I386 => {
                let t = i32::try_from(record.time).map_err(|_| PrfLogError::TooWide {
                    field: "time",
                    value: record.time as u64,
                })?;
                out.extend_from_slice(&t.to_le_bytes());
                for &c in &record.counters {
                    out.extend_from_slice(&narrow("counter", c)?.to_le_bytes());
                }
            }
        }
        Ok(out)
    }
}

fn narrow(field: &'static str, value: u64) -> Result<u32, PrfLogError> {
    u32::try_from(value).map_err(|_| PrfLogError::TooWide { field, value })
}

/// A cursor over the file's bytes that names what it failed to read.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, field: &'static str, need: usize) -> Result<&'a [u8], PrfLogError> {
        let have = self.bytes.len() - self.pos;
        if have < need {
            return Err(PrfLogError::Short {
                field,
                offset: self.pos as u64,
                need: need as u64,
                have: have as u64,
            });
        }
        let s = &self.bytes[self.pos..self.pos + need];
        self.pos += need;
        Ok(s)
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, PrfLogError> {
        Ok(u32::from_le_bytes(
            self.take(field, 4)?.try_into().unwrap_or([0; 4]),
        ))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, PrfLogError> {
        Ok(u64::from_le_bytes(
            self.take(field, 8)?.try_into().unwrap_or([0; 8]),
        ))
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }
}

/// The layout of a file, from its first bytes.
pub fn layout_of(bytes: &[u8]) -> Layout {
    if bytes.len() >= MAGIC.len() && bytes[..MAGIC.len()] == MAGIC {
        Layout::Profdev64
    } else {
        Layout::Svr4I386
    }
}

/// The most addresses a log may hold: the device's `PRF_GETMAX` (130560).
/// A larger count is refused before anything is allocated for it.
pub const MAX_ADDRESSES: u64 = 130_560;

/// The fixed part of the header: (layout, extra, N), checked.
fn fixed_header(c: &mut Cursor<'_>) -> Result<(Layout, usize, u64), PrfLogError> {
    let layout = layout_of(c.bytes);
    let (extra, n, offset) = match layout {
        Layout::Profdev64 => {
            c.take("magic", 8)?;
            let version = c.u32("version")?;
            if version != VERSION {
                return Err(PrfLogError::Version { offset: 8, version });
            }
            let extra = c.u32("extra counter count")?;
            if extra != 1 && extra != 2 {
                return Err(PrfLogError::Extra {
                    offset: 12,
                    value: u64::from(extra),
                });
            }
            let n = c.u64("address count")?;
            if n == 0 || n > i64::MAX as u64 {
                return Err(PrfLogError::Count {
                    offset: 16,
                    value: n as i64,
                });
            }
            (extra as usize, n, 16)
        }
        Layout::Svr4I386 => {
            let n = c.u32("address count")? as i32;
            if n <= 0 {
                return Err(PrfLogError::Count {
                    offset: 0,
                    value: i64::from(n),
                });
            }
            (1, n as u64, 0)
        }
    };
    if n > MAX_ADDRESSES {
        return Err(PrfLogError::TooMany { offset, value: n });
    }
    Ok((layout, extra, n))
}

/// The length of the header that begins with `prefix` (at least its first
/// 24 bytes, or the whole file if shorter), from its fixed part alone: a
/// reader reads that many bytes and gives them to [`parse_header`], having
/// allocated no more than [`MAX_ADDRESSES`] allow.
pub fn header_len(prefix: &[u8]) -> Result<usize, PrfLogError> {
    let mut c = Cursor {
        bytes: prefix,
        pos: 0,
    };
    let (layout, _, n) = fixed_header(&mut c)?;
    Ok(c.pos + n as usize * layout.word())
}

/// Read the header; returns it and its length in bytes.
pub fn parse_header(bytes: &[u8]) -> Result<(Header, usize), PrfLogError> {
    let mut c = Cursor { bytes, pos: 0 };
    let (layout, extra, n) = fixed_header(&mut c)?;
    let word = layout.word();
    // Check the table is present before allocating for it.
    let need = n.saturating_mul(word as u64);
    if need > c.remaining() as u64 {
        return Err(PrfLogError::Short {
            field: "address table",
            offset: c.pos as u64,
            need,
            have: c.remaining() as u64,
        });
    }
    let table = c.take("address table", need as usize)?;
    let addrs = decode_words(table, word);
    Ok((
        Header {
            layout,
            extra,
            addrs,
        },
        c.pos,
    ))
}

/// Decode one whole record (`bytes` is [`Header::record_len`] long).
pub fn decode_record(header: &Header, bytes: &[u8]) -> Record {
    let word = header.layout.word();
    let time = if word == 8 {
        i64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8]))
    } else {
        i64::from(i32::from_le_bytes(bytes[..4].try_into().unwrap_or([0; 4])))
    };
    Record {
        time,
        counters: decode_words(&bytes[word..], word),
    }
}

/// The latest time a record may carry: the end of year 9999.
pub const MAX_TIME: i64 = 253_402_300_799;

/// The most ticks a log can gain per second: 100 ticks per second (the
/// device's clock) on each of Linux's most CPUs (8192).
pub const MAX_TICKS_PER_SECOND: u64 = 100 * 8192;

/// Check that `rec`, at byte `offset`, can follow `prev` (the record
/// before it, if any) in one log: a time from 0 to [`MAX_TIME`], 0 only
/// for the first record ("initialization"), never earlier than the
/// previous record's; counters that never go down (they are cumulative
/// until the next load) and that grow by no more ticks than the time
/// between the two records allows (when both have a time). A record that
/// fails is not one of this log's: written over a torn append, appended
/// from another log, or garbage ([`PrfLogError::Foreign`]).
pub fn check_record(prev: Option<&Record>, rec: &Record, offset: u64) -> Result<(), PrfLogError> {
    let foreign = |why: String| Err(PrfLogError::Foreign { offset, why });
    if rec.time < 0 || rec.time > MAX_TIME {
        return foreign(format!(
            "its time {} is not a date from 1970 to 9999",
            rec.time
        ));
    }
    let Some(prev) = prev else {
        return Ok(());
    };
    if rec.time == 0 {
        return foreign("only the first record may have time 0 (initialization)".into());
    }
    if rec.time < prev.time {
        return foreign(format!(
            "its time {} is before the previous record's {}",
            rec.time, prev.time
        ));
    }
    let mut gained: u128 = 0;
    for (i, (&c, &p)) in rec.counters.iter().zip(&prev.counters).enumerate() {
        if c < p {
            return foreign(format!(
                "counter {i} went down from {p} to {c} (counters only grow until the next load)"
            ));
        }
        gained += u128::from(c - p);
    }
    if prev.time > 0 {
        let seconds = (rec.time - prev.time) as u128 + 1;
        let most = seconds * u128::from(MAX_TICKS_PER_SECOND);
        if gained > most {
            return foreign(format!(
                "its counters grew by {gained} ticks in {} seconds, more than any machine ticks",
                seconds - 1
            ));
        }
    }
    Ok(())
}

fn decode_words(bytes: &[u8], word: usize) -> Vec<u64> {
    bytes
        .chunks_exact(word)
        .map(|w| {
            if word == 8 {
                u64::from_le_bytes(w.try_into().unwrap_or([0; 8]))
            } else {
                u64::from(u32::from_le_bytes(w.try_into().unwrap_or([0; 4])))
            }
        })
        .collect()
}

/// Read a whole log: the header and every complete record.
pub fn parse(bytes: &[u8]) -> Result<PrfLog, PrfLogError> {
    let (header, mut pos) = parse_header(bytes)?;
    let record_len = header.record_len();
    let mut records = Vec::new();
    let mut partial = None;
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        if rest.len() < record_len {
            partial = Some(Partial {
                offset: pos as u64,
                len: rest.len() as u64,
            });
            break;
        }
        records.push(decode_record(&header, &rest[..record_len]));
        pos += record_len;
    }
    Ok(PrfLog {
        header,
        records,
        partial,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_len_and_the_address_bound() {
        let h = Header::new(Layout::Profdev64, 2, vec![0, 0x10, 0x20]).unwrap();
        let bytes = h.encode().unwrap();
        assert_eq!(header_len(&bytes[..24]), Ok(24 + 3 * 8));
        let svr4 = Header::new(Layout::Svr4I386, 1, vec![0, 0x10]).unwrap();
        assert_eq!(header_len(&svr4.encode().unwrap()[..4]), Ok(4 + 2 * 4));
        // Counts beyond PRF_GETMAX are refused from the fixed part alone.
        let mut big = bytes[..24].to_vec();
        big[16..24].copy_from_slice(&(MAX_ADDRESSES + 1).to_le_bytes());
        assert_eq!(
            header_len(&big),
            Err(PrfLogError::TooMany {
                offset: 16,
                value: MAX_ADDRESSES + 1
            })
        );
        assert!(matches!(parse(&big), Err(PrfLogError::TooMany { .. })));
        let svr4_big = (i32::MAX).to_le_bytes();
        assert!(matches!(
            header_len(&svr4_big),
            Err(PrfLogError::TooMany { offset: 0, .. })
        ));
    }

    #[test]
    fn records_are_checked_against_the_one_before() {
        let r = |time, c: &[u64]| Record {
            time,
            counters: c.to_vec(),
        };
        let init = r(0, &[0, 0, 0]);
        let a = r(1_600_000_000, &[10, 50, 5]);
        let b = r(1_600_000_060, &[10, 51, 1005]);
        assert_eq!(check_record(None, &init, 0), Ok(()));
        assert_eq!(check_record(Some(&init), &a, 40), Ok(()));
        assert_eq!(check_record(Some(&a), &b, 80), Ok(()));
        assert_eq!(check_record(Some(&a), &a, 80), Ok(()), "same second");
        let foreign = |prev: &Record, rec: &Record| match check_record(Some(prev), rec, 80) {
            Err(PrfLogError::Foreign { offset: 80, why }) => why,
            other => panic!("{rec:?} after {prev:?}: {other:?}"),
        };
        assert!(foreign(&a, &r(0, &[10, 50, 5])).contains("time 0"));
        assert!(foreign(&b, &a).contains("before the previous"));
        assert!(foreign(&a, &r(1_600_000_001, &[9, 50, 5])).contains("went down"));
        assert!(foreign(&a, &r(-1, &[10, 50, 5])).contains("1970 to 9999"));
        assert!(foreign(&a, &r(MAX_TIME + 1, &[10, 50, 5])).contains("1970 to 9999"));
        // One second, 819201 more ticks than 8192 CPUs at 100 Hz give in two.
        let fast = r(1_600_000_001, &[10, 50, 5 + 2 * MAX_TICKS_PER_SECOND + 1]);
        assert!(foreign(&a, &fast).contains("more than any machine ticks"));
        let e = check_record(Some(&a), &r(-5, &[0]), 1234).unwrap_err();
        assert_eq!(
            e.to_string(),
            "prf log: the record at byte offset 1234 is not one of this log's: its time -5 is not a date from 1970 to 9999"
        );
    }

    /// TV-R4's log, as the spec gives it: little-endian 32-bit words.
    const TV_R4_WORDS: &str = "04000000 00000000 001000c0 002000c0 003000c0 \
        00000000 00000000 00000000 00000000 00000000 00000000 \
        00105e5f 0a000000 32000000 1e000000 05000000 05000000 \
        3c105e5f 0a000000 32000000 1e000000 05000000 05000000 \
        78105e5f 0a000000 33000000 1e000000 05000000 ed030000";

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn tv_r4() -> PrfLog {
        let header = Header::new(
            Layout::Svr4I386,
            1,
            vec![0, 0xC000_1000, 0xC000_2000, 0xC000_3000],
        )
        .unwrap();
        let rec = |time, c: [u64; 5]| Record {
            time,
            counters: c.to_vec(),
        };
        PrfLog {
            header,
            records: vec![
                rec(0, [0, 0, 0, 0, 0]),
                rec(1_600_000_000, [10, 50, 30, 5, 5]),
                rec(1_600_000_060, [10, 50, 30, 5, 5]),
                rec(1_600_000_120, [10, 51, 30, 5, 1005]),
            ],
            partial: None,
        }
    }

    fn encode(log: &PrfLog) -> Vec<u8> {
        let mut out = log.header.encode().unwrap();
        for r in &log.records {
            out.extend(log.header.encode_record(r).unwrap());
        }
        out
    }

    #[test]
    fn tv_r4_svr4_bytes_parse_and_reencode() {
        let bytes = hex(TV_R4_WORDS);
        assert_eq!(bytes.len(), 116);
        assert_eq!(layout_of(&bytes), Layout::Svr4I386);
        assert_eq!(parse(&bytes).unwrap(), tv_r4());
        assert_eq!(encode(&tv_r4()), bytes);
    }

    #[test]
    fn profdev_layout_byte_for_byte() {
        let header = Header::new(Layout::Profdev64, 2, vec![0, 0xffff_ffff_8100_0000]).unwrap();
        let rec = Record {
            time: -1,
            counters: vec![1, 2, 3, 0x0102_0304_0506_0708],
        };
        let mut bytes = header.encode().unwrap();
        bytes.extend(header.encode_record(&rec).unwrap());
        let expected = [
            &b"PRFLOG64"[..],
            &1u32.to_le_bytes(),
            &2u32.to_le_bytes(),
            &2u64.to_le_bytes(),
            &0u64.to_le_bytes(),
            &hex("00 00 00 81 ff ff ff ff"),
            &hex("ff ff ff ff ff ff ff ff"),
            &1u64.to_le_bytes(),
            &2u64.to_le_bytes(),
            &3u64.to_le_bytes(),
            &hex("08 07 06 05 04 03 02 01"),
        ]
        .concat();
        assert_eq!(bytes, expected);
        assert_eq!(header.byte_len(), 40);
        assert_eq!(header.record_len(), 40);
        let log = parse(&bytes).unwrap();
        assert_eq!(log.header, header);
        assert_eq!(log.records, [rec]);
    }

    #[test]
    fn header_errors_name_field_and_offset() {
        assert_eq!(
            parse(b"").unwrap_err().to_string(),
            "prf log: the address count at byte offset 0 is cut short: 4 bytes needed, 0 present"
        );
        assert_eq!(
            parse(&hex("00000000")).unwrap_err(),
            PrfLogError::Count {
                offset: 0,
                value: 0
            }
        );
        assert_eq!(
            parse(&hex("ffffffff")).unwrap_err(),
            PrfLogError::Count {
                offset: 0,
                value: -1
            }
        );
        assert_eq!(
            parse(&hex("03000000 00000000 01000000")).unwrap_err(),
            PrfLogError::Short {
                field: "address table",
                offset: 4,
                need: 12,
                have: 8
            }
        );
        // A huge count is refused before any allocation.
        assert!(matches!(
            parse(&hex("ffffff7f")).unwrap_err(),
            PrfLogError::TooMany { offset: 0, .. }
        ));
        let mut v = b"PRFLOG64".to_vec();
        assert_eq!(
            parse(&v).unwrap_err().to_string(),
            "prf log: the version at byte offset 8 is cut short: 4 bytes needed, 0 present"
        );
        v.extend(7u32.to_le_bytes());
        assert_eq!(
            parse(&v).unwrap_err().to_string(),
            "prf log: version 7 at byte offset 8 is not one this reader knows (it reads version 1)"
        );
        v.truncate(8);
        v.extend(1u32.to_le_bytes());
        v.extend(3u32.to_le_bytes());
        assert_eq!(
            parse(&v).unwrap_err(),
            PrfLogError::Extra {
                offset: 12,
                value: 3
            }
        );
        v.truncate(12);
        v.extend(2u32.to_le_bytes());
        v.extend(0u64.to_le_bytes());
        assert_eq!(
            parse(&v).unwrap_err(),
            PrfLogError::Count {
                offset: 16,
                value: 0
            }
        );
        v.truncate(16);
        v.extend(u64::MAX.to_le_bytes());
        assert!(matches!(parse(&v).unwrap_err(), PrfLogError::Count { .. }));
        v.truncate(16);
        v.extend(2u64.to_le_bytes());
        v.extend(5u64.to_le_bytes());
        assert_eq!(
            parse(&v).unwrap_err().to_string(),
            "prf log: the address table at byte offset 24 is cut short: 16 bytes needed, 8 present"
        );
    }

    #[test]
    fn short_last_record_is_reported_not_an_error() {
        let bytes = hex(TV_R4_WORDS);
        for cut in 20..bytes.len() {
            let log = parse(&bytes[..cut]).unwrap();
            let whole = (cut - 20) / 24;
            assert_eq!(log.records.len(), whole);
            let rest = (cut - 20) % 24;
            if rest == 0 {
                assert_eq!(log.partial, None);
            } else {
                assert_eq!(
                    log.partial,
                    Some(Partial {
                        offset: (20 + whole * 24) as u64,
                        len: rest as u64
                    })
                );
            }
        }
    }

    #[test]
    fn every_prefix_of_a_profdev_log_parses_or_errs_without_panic() {
        let header = Header::new(Layout::Profdev64, 2, vec![0, 16, 32]).unwrap();
        let mut bytes = header.encode().unwrap();
        for t in 0..3 {
            bytes.extend(
                header
                    .encode_record(&Record {
                        time: t,
                        counters: vec![t as u64; 5],
                    })
                    .unwrap(),
            );
        }
        for cut in 0..=bytes.len() {
            let r = parse(&bytes[..cut]);
            if cut < header.byte_len() {
                assert!(r.is_err(), "cut {cut}");
            } else {
                assert_eq!(r.unwrap().records.len(), (cut - header.byte_len()) / 48);
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A small deterministic generator: both layouts, all sorts of counts.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = (next() % 96) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if next() % 2 == 0 && len >= 24 {
                bytes[..8].copy_from_slice(&MAGIC);
                bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
                bytes[12..16].copy_from_slice(&(1 + next() as u32 % 2).to_le_bytes());
                bytes[16..24].copy_from_slice(&(next() % 8).to_le_bytes());
            } else if len >= 4 {
                bytes[..4].copy_from_slice(&((next() % 8) as u32).to_le_bytes());
            }
            if let Ok(log) = parse(&bytes) {
                let h = &log.header;
                let used = h.byte_len() + log.records.len() * h.record_len();
                let partial = log.partial.map_or(0, |p| p.len as usize);
                assert_eq!(used + partial, bytes.len());
            }
        }
    }

    #[test]
    fn writing_checks_widths_and_counts() {
        let svr4 = Header::new(Layout::Svr4I386, 1, vec![0, 0x1_0000_0000]).unwrap();
        assert_eq!(
            svr4.encode().unwrap_err().to_string(),
            "prf log: address 0x100000000 does not fit the 32 bits of the SVR4 i386 layout"
        );
        assert!(Header::new(Layout::Svr4I386, 2, vec![0]).is_err());
        assert!(Header::new(Layout::Profdev64, 2, vec![]).is_err());
        let h = Header::new(Layout::Profdev64, 2, vec![0, 1, 2]).unwrap();
        assert_eq!(
            h.encode_record(&Record {
                time: 0,
                counters: vec![0; 4]
            })
            .unwrap_err()
            .to_string(),
            "prf log: a record needs 5 counters (N + 2), this one has 4"
        );
    }
}
