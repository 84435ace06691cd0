//! `kpdata`: the Inferno 4th-edition kprof(3) histogram.
//!
//! Lineage: Inferno 4e `os/port/devkprof.c`. The file is a sequence of
//! 32-bit unsigned words, each **big-endian**:
//!
//! | word | name | contents |
//! |---|---|---|
//! | 0 | SpecialTotalTicks | ticks while profiling was on |
//! | 1 | SpecialOutsideTicks | ticks whose PC fell in no bucket |
//! | 2 | SpecialMicroSecondsPerTick | the sampling period in µs |
//! | 3 | SpecialSamples | number of words in the file, `nbuf` |
//! | 4 | SpecialSampleSize | 4 |
//! | 5 | SpecialSampleLogBucketSize | log2 of bytes per bucket (3) |
//! | 6 … nbuf-1 | bucket k | ticks with `(pc - KTZERO) >> log2 == k` |
//!
//! The six header words shadow buckets 0–5, so PCs in the first
//! `6 << log2` bytes of text count as outside.

/// Number of header words that shadow the first buckets.
pub const SPECIAL_WORDS: usize = 6;
/// Word index: total ticks.
pub const TOTAL_TICKS: usize = 0;
/// Word index: ticks outside kernel text.
pub const OUTSIDE_TICKS: usize = 1;
/// Word index: microseconds per tick.
pub const MICROSECONDS_PER_TICK: usize = 2;
/// Word index: number of words.
pub const SAMPLES: usize = 3;
/// Word index: bytes per counter (always 4).
pub const SAMPLE_SIZE: usize = 4;
/// Word index: log2 of the bucket size.
pub const LOG_BUCKET_SIZE: usize = 5;
/// Default log2 bucket size (Inferno's LRES).
pub const DEFAULT_LOG_BUCKET_SIZE: u32 = 3;

/// The most kernel text a kpdata file can describe: 1 GiB, x86_64 Linux's
/// `KERNEL_IMAGE_SIZE` (the whole kernel image, text and data, fits in it).
pub const MAX_KERNEL_TEXT: u64 = 1 << 30;

/// Bytes of the header: the six special words.
pub const HEADER_LEN: usize = SPECIAL_WORDS * 4;

/// The most bytes a kpdata file that begins with `header` (its first
/// [`HEADER_LEN`] bytes, or fewer) can hold: the words of
/// [`MAX_KERNEL_TEXT`] at the bucket size in word 5 (1-byte buckets if
/// word 5 is missing or out of range), and no more than word 3's count
/// when it gives one, plus up to 3 trailing bytes the formatter ignores.
/// A reader refuses a longer file before reading it.
///
/// ```
/// use profdev_formats::kpdata::{encode, max_len};
/// let mut w = vec![0u32; 128];
/// (w[0], w[3], w[4], w[5]) = (1, 128, 4, 3);
/// assert_eq!(max_len(&encode(&w)), 128 * 4 + 3);
/// // No count: as many words as 1 GiB of text in 8-byte buckets.
/// w[3] = 0;
/// assert_eq!(max_len(&encode(&w)), 4 * ((1 << 27) + 6) + 3);
/// ```
pub fn max_len(header: &[u8]) -> u64 {
    let word = |i: usize| {
        header
            .get(4 * i..4 * i + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let log = word(LOG_BUCKET_SIZE).filter(|&l| l <= 31).unwrap_or(0);
    let by_text = 4 * ((MAX_KERNEL_TEXT >> log) + SPECIAL_WORDS as u64) + 3;
    match word(SAMPLES) {
        Some(n) if n as usize >= SPECIAL_WORDS => by_text.min(4 * u64::from(n) + 3),
        _ => by_text,
    }
}

/// Number of words covering `text_len` bytes of text with buckets of
/// `1 << log_bucket` bytes: a partial last bucket is rounded up (the
/// original truncated and then wrote one word out of bounds), and there are
/// always at least the six header words.
pub fn words_for(text_len: u64, log_bucket: u32) -> usize {
    let size = 1u64 << log_bucket;
    let n = text_len.div_ceil(size);
    usize::try_from(n).unwrap_or(usize::MAX).max(SPECIAL_WORDS)
}

/// Fill the header words of `words` (which must hold at least six) for a
/// profile of `words.len()` words: words 2–5. Words 0 and 1 are left alone.
pub fn init_header(words: &mut [u32], microseconds_per_tick: u32, log_bucket: u32) {
    words[MICROSECONDS_PER_TICK] = microseconds_per_tick;
    words[SAMPLES] = u32::try_from(words.len()).unwrap_or(u32::MAX);
    words[SAMPLE_SIZE] = 4;
    words[LOG_BUCKET_SIZE] = log_bucket;
}

/// Encode words as the file's bytes (big-endian).
pub fn encode(words: &[u32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(words.len() * 4);
    for w in words {
        out.extend_from_slice(&w.to_be_bytes());
    }
    out
}

/// Why a kpdata file cannot be used. The messages are the kprof
/// formatter's own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KpdataError {
    /// Fewer than two whole words.
    #[error("data file too short")]
    TooShort,
    /// Fewer than the six header words, so the header is incomplete.
    #[error("data file too short: {words} words, the header needs 6")]
    NoHeader { words: usize },
    /// Word 4 is not 4.
    #[error("only sample size 4 supported")]
    SampleSize { found: u32 },
    /// Longer than any kernel's text needs (see [`max_len`]).
    #[error("data file of {len} bytes is longer than a kpdata file can be ({max} bytes at most by its header and a 1 GiB kernel text); is it a kpdata file?")]
    TooLong { len: u64, max: u64 },
    /// Word 5 is not a usable shift.
    #[error("log2 bucket size {found} in word 5 (byte offset 20) is out of range 0..=31")]
    LogBucket { found: u32 },
}

/// What the formatter needs of a kpdata file before its buckets: the
/// header words and the file's length in words, checked as the formatter
/// checks them. A reader that has this need read no more of a file whose
/// total is 0 (only the totals line is printed), and of any other only the
/// buckets a report charges (see `profdev_report::kprof::format_stream`):
/// a file is never read whole.
///
/// ```
/// use profdev_formats::kpdata::{encode, Header};
/// // A 4 GiB file of zeros: its first 24 bytes say all there is to say.
/// let h = Header::parse(&[0; 24], 1 << 32).unwrap();
/// assert_eq!((h.words, h.total), (1 << 30, 0));
/// let mut w = [0u32; 6];
/// (w[0], w[2], w[4], w[5]) = (7, 1000, 4, 3);
/// let h = Header::parse(&encode(&w), 1 << 20).unwrap();
/// assert_eq!((h.total, h.bucket_size()), (7, 8));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Whole words in the file (its length / 4: the formatter's `n`).
    pub words: u64,
    /// Word 0.
    pub total: u32,
    /// Word 1.
    pub outside: u32,
    /// Word 2 (0 if the header is absent).
    pub microseconds_per_tick: u32,
    /// Word 5 (0 if the header is absent; unchecked when `total` is 0).
    pub log_bucket_size: u32,
}

impl Header {
    /// Check the header of a kpdata file `len` bytes long whose first
    /// bytes are `prefix` (its first `min(len, HEADER_LEN)` bytes; more
    /// are ignored, fewer are read as a file that ends there).
    pub fn parse(prefix: &[u8], len: u64) -> Result<Header, KpdataError> {
        let prefix = &prefix[..prefix.len().min(HEADER_LEN)];
        let len = if prefix.len() < HEADER_LEN {
            len.min(prefix.len() as u64)
        } else {
            len
        };
        let n = len / 4;
        if n < 2 {
            return Err(KpdataError::TooShort);
        }
        let word = |i: usize| {
            prefix
                .get(4 * i..4 * i + 4)
                .map_or(0, |c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        };
        let header = Header {
            words: n,
            total: word(TOTAL_TICKS),
            outside: word(OUTSIDE_TICKS),
            microseconds_per_tick: word(MICROSECONDS_PER_TICK),
            log_bucket_size: word(LOG_BUCKET_SIZE),
        };
        if header.total == 0 {
            // kprof prints only the totals line in this case; the rest of
            // the header need not be there.
            return Ok(header);
        }
        if n < SPECIAL_WORDS as u64 {
            return Err(KpdataError::NoHeader { words: n as usize });
        }
        if word(SAMPLE_SIZE) != 4 {
            return Err(KpdataError::SampleSize {
                found: word(SAMPLE_SIZE),
            });
        }
        if header.log_bucket_size > 31 {
            return Err(KpdataError::LogBucket {
                found: header.log_bucket_size,
            });
        }
        Ok(header)
    }

    /// Bytes per bucket, `1 << word 5` (1 if the header is absent, or
    /// out of range in a file with no ticks, whose header is not checked).
    pub fn bucket_size(&self) -> u64 {
        if self.log_bucket_size <= 31 && self.words >= SPECIAL_WORDS as u64 {
            1u64 << self.log_bucket_size
        } else {
            1
        }
    }
}

/// A decoded kpdata file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kpdata {
    /// Every word, header included, in host order.
    pub words: Vec<u32>,
}

impl Kpdata {
    /// Decode a whole file. Trailing bytes that do not make a word are
    /// ignored (the formatter uses `length / 4`).
    pub fn parse(bytes: &[u8]) -> Result<Kpdata, KpdataError> {
        Header::parse(bytes, bytes.len() as u64)?;
        let words: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(Kpdata { words })
    }

    /// The header, as [`Header::parse`] reads it from the file.
    pub fn header(&self) -> Header {
        let word = |i: usize| self.words.get(i).copied().unwrap_or(0);
        Header {
            words: self.words.len() as u64,
            total: word(TOTAL_TICKS),
            outside: word(OUTSIDE_TICKS),
            microseconds_per_tick: word(MICROSECONDS_PER_TICK),
            log_bucket_size: word(LOG_BUCKET_SIZE),
        }
    }

    /// Word 0.
    pub fn total(&self) -> u32 {
        self.words[TOTAL_TICKS]
    }

    /// Word 1.
    pub fn outside(&self) -> u32 {
        self.words[OUTSIDE_TICKS]
    }

    /// Word 2 (0 if the header is absent).
    pub fn microseconds_per_tick(&self) -> u32 {
        self.words.get(MICROSECONDS_PER_TICK).copied().unwrap_or(0)
    }

    /// Bytes per bucket, `1 << word 5` (1 if the header is absent, or
    /// out of range in a file with no ticks, whose header is not checked).
    pub fn bucket_size(&self) -> u64 {
        self.header().bucket_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_last_bucket_rounds_up() {
        assert_eq!(words_for(0x400, 3), 128);
        assert_eq!(words_for(0x401, 3), 129);
        assert_eq!(words_for(0x3ff, 3), 128);
        assert_eq!(words_for(1, 3), 6);
    }

    #[test]
    fn encode_is_big_endian() {
        assert_eq!(encode(&[0x64, 1]), [0, 0, 0, 0x64, 0, 0, 0, 1]);
    }

    #[test]
    fn parse_errors_are_the_formatters() {
        assert_eq!(Kpdata::parse(&[0; 4]), Err(KpdataError::TooShort));
        assert_eq!(Kpdata::parse(&[0; 7]), Err(KpdataError::TooShort));
        let mut w = vec![0u32; 8];
        w[0] = 1;
        w[4] = 8;
        let e = Kpdata::parse(&encode(&w)).unwrap_err();
        assert_eq!(e.to_string(), "only sample size 4 supported");
        w[4] = 4;
        w[5] = 40;
        assert!(matches!(
            Kpdata::parse(&encode(&w)),
            Err(KpdataError::LogBucket { found: 40 })
        ));
        // A zero total needs no header.
        assert!(Kpdata::parse(&[0; 8]).is_ok());
        assert_eq!(
            Kpdata::parse(&encode(&[5, 0, 0])),
            Err(KpdataError::NoHeader { words: 3 })
        );
    }
}

#[cfg(test)]
mod header {
    use super::*;

    #[test]
    fn the_header_alone_decides_as_the_whole_file_does() {
        let mut w = vec![0u32; 16];
        w[0] = 10;
        init_header(&mut w, 1000, 3);
        let good = encode(&w);
        for n in 0..good.len() {
            let whole = Kpdata::parse(&good[..n]);
            let head = Header::parse(&good[..n.min(HEADER_LEN)], n as u64);
            assert_eq!(head, whole.map(|k| k.header()), "{n} bytes");
        }
        let h = Header::parse(&good, good.len() as u64).unwrap();
        assert_eq!(
            h,
            Header {
                words: 16,
                total: 10,
                outside: 0,
                microseconds_per_tick: 1000,
                log_bucket_size: 3
            }
        );
        // A prefix shorter than the header reads as a file that ends there.
        assert_eq!(
            Header::parse(&good[..12], 1 << 30),
            Err(KpdataError::NoHeader { words: 3 })
        );
        // A total of 0: the length is the file's, nothing else is checked.
        let zero = Header::parse(&[0; 24], 1 << 32).unwrap();
        assert_eq!(
            (zero.words, zero.total, zero.bucket_size()),
            (1 << 30, 0, 1)
        );
        assert_eq!(Header::parse(&[0; 7], 7), Err(KpdataError::TooShort));
    }
}

#[cfg(test)]
mod sweep {
    use super::*;

    /// Stand-in for the fuzz target on stable: every prefix of a valid file
    /// and a spread of corrupted headers parse or fail, never panic.
    #[test]
    fn truncations_and_corruptions_never_panic() {
        let mut w = vec![0u32; 64];
        w[0] = 10;
        init_header(&mut w, 1000, 3);
        let good = encode(&w);
        for n in 0..good.len() {
            let _ = Kpdata::parse(&good[..n]);
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut bad = good.clone();
            let i = (seed as usize) % bad.len();
            bad[i] = (seed >> 32) as u8;
            if let Ok(k) = Kpdata::parse(&bad) {
                let _ = (k.bucket_size(), k.microseconds_per_tick());
            }
        }
    }
}
