//! The Inferno kprof(10.1) formatter: `kprof kernel kpdata`.
//!
//! Output, byte for byte as Inferno 4th edition's `utils/kprof/kprof.c`
//! (fields separated by tabs, shown here as spaces):
//!
//! ```text
//! total: 100    in kernel text: 97    outside kernel text: 3
//! KTZERO 80100000
//! ms      %    sym
//! 500     51.5    fnB
//! 300     30.9    fnA
//! 150     15.4    fnC
//! 20      2.0    _start
//! ```
//!
//! Bucket `j` covers `[tbase + j·pcres, tbase + (j+1)·pcres)`, where
//! `tbase` is the first text symbol rounded down to a page; it is charged to
//! symbol S_i when `S_i − tbase ≤ j·pcres < S_(i+1) − tbase`, so a bucket
//! straddling a boundary goes to the symbol it starts in, and buckets at or
//! past the last symbol (normally `_etext`) are never charged. `ms` is
//! `ticks · µs-per-tick / 1000`; the percentage is of in-text ticks,
//! truncated to tenths.
//!
//! Deliberate differences from the original: percentages are computed in
//! 64 bits (the original's 32-bit `100·ticks` overflows past 42 949 672
//! ticks); rows with equal counts are printed in ascending address order
//! (the original's `qsort` left their order unspecified); the original's
//! write one past the end of its record array is not reproduced.

use profdev_formats::kpdata::{Header, Kpdata, SPECIAL_WORDS};
use std::convert::Infallible;
use std::fmt::Write;
use std::ops::Range;

/// Page size used to find `tbase`, as Inferno's kprof did.
pub const PAGE_SIZE: u64 = 4096;

/// Why no table could be printed (after the totals line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KprofError {
    /// The symbol table has no text symbols.
    #[error("no text symbols")]
    NoTextSymbols,
    /// No in-text bucket holds a count.
    #[error("no counts")]
    NoCounts,
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Symbol name.
    pub name: String,
    /// Its address.
    pub addr: u64,
    /// Ticks charged to it.
    pub ticks: u64,
}

/// The formatted report. `text` holds everything printed so far; when
/// `error` is set, kprof stops after `text` and prints `kprof: ERROR`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Standard output.
    pub text: String,
    /// The rows, largest first.
    pub rows: Vec<Row>,
    /// The error that ended the report early.
    pub error: Option<KprofError>,
}

/// Format `data` against text symbols given as `(address, name)` in
/// ascending address order.
pub fn format(symbols: &[(u64, &str)], data: &Kpdata) -> Report {
    let read = |r: Range<u64>| {
        let words = data
            .words
            .get(r.start as usize..r.end as usize)
            .unwrap_or(&[]);
        Ok::<_, Infallible>(words.iter().map(|&w| Ok(w)))
    };
    match format_stream(symbols, &data.header(), read) {
        Ok(report) => report,
        Err(never) => match never {},
    }
}

/// The words of the file [`format_stream`] reads for `header` and
/// `symbols`: from the bucket of the first symbol to the last bucket that
/// starts before the last symbol (normally `_etext`), and no further than
/// the file. Empty when the report needs no bucket (a total of 0, fewer
/// than two symbols).
pub fn buckets_read(symbols: &[(u64, &str)], header: &Header) -> Range<u64> {
    let Some(&(s0, _)) = symbols.first() else {
        return 0..0;
    };
    // (The greatest address: the last, in the order promised.)
    let last = symbols.iter().map(|s| s.0).max().unwrap_or(s0);
    if header.total == 0 || symbols.len() < 2 {
        return 0..0;
    }
    let pcres = header.bucket_size();
    let tbase = s0 & !(PAGE_SIZE - 1);
    let first = (s0 - tbase) / pcres + SPECIAL_WORDS as u64;
    // Bucket j is charged while j * pcres < last - tbase.
    let end = last.saturating_sub(tbase).div_ceil(pcres).min(header.words);
    first..end.max(first)
}

/// [`format`] for a file read as it is formatted: `header` is its header
/// ([`Header::parse`]), and `read(range)` yields the words of the file at
/// the indices `range` ([`buckets_read`]), in order. `read` is called at
/// most once, and not at all for a file whose total is 0: memory and
/// reading are bounded by the symbols, never by the file's length. Words
/// that end early (a file that shrank) end the buckets there, as a
/// shorter file would; an error of `read` or of a word is returned.
pub fn format_stream<I, E>(
    symbols: &[(u64, &str)],
    header: &Header,
    read: impl FnOnce(Range<u64>) -> Result<I, E>,
) -> Result<Report, E>
where
    I: Iterator<Item = Result<u32, E>>,
{
    let total = header.total;
    let outside = header.outside;
    let delta = total.wrapping_sub(outside);
    let mut text =
        format!("total: {total}\tin kernel text: {delta}\toutside kernel text: {outside}\n");
    let done = |text, rows, error| Ok(Report { text, rows, error });
    if total == 0 {
        return done(text, Vec::new(), None);
    }
    let Some(&(s0, _)) = symbols.first() else {
        return done(text, Vec::new(), Some(KprofError::NoTextSymbols));
    };
    let uspertick = u64::from(header.microseconds_per_tick);
    let pcres = header.bucket_size();
    let tbase = s0 & !(PAGE_SIZE - 1);
    let _ = writeln!(text, "KTZERO {tbase:08x}");

    let range = buckets_read(symbols, header);
    let (mut j, mut end) = (range.start, range.end);
    let mut words = if range.is_empty() {
        None
    } else {
        Some(read(range)?)
    };
    let mut rows = Vec::new();
    for i in 1..symbols.len() {
        if j >= end {
            break;
        }
        let (addr, name) = symbols[i - 1];
        let limit = symbols[i].0.saturating_sub(tbase);
        let mut sum = 0u64;
        while j < end && j.saturating_mul(pcres) < limit {
            match words.as_mut().and_then(Iterator::next) {
                Some(w) => sum = sum.saturating_add(u64::from(w?)),
                None => {
                    end = j;
                    break;
                }
            }
            j += 1;
        }
        if sum != 0 {
            rows.push(Row {
                name: name.to_string(),
                addr,
                ticks: sum,
            });
        }
    }
    if rows.is_empty() {
        return done(text, rows, Some(KprofError::NoCounts));
    }
    rows.sort_by(|a, b| b.ticks.cmp(&a.ticks).then(a.addr.cmp(&b.addr)));
    text.push_str("ms\t  %\tsym\n");
    // In u128: a sum of u32 buckets times a u32 period (or times 1000)
    // does not fit u64 for large counts, and it cannot overflow u128.
    let delta = u128::from(delta);
    for r in &rows {
        let ticks = u128::from(r.ticks);
        let ms = ticks * u128::from(uspertick) / 1000;
        let pct = (100 * ticks).checked_div(delta).unwrap_or(0);
        let tenth = (1000 * ticks).checked_div(delta).unwrap_or(0) % 10;
        let _ = writeln!(text, "{ms}\t{pct:3}.{tenth}\t{}", r.name);
    }
    done(text, rows, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_formats::kpdata::encode;

    #[test]
    fn zero_total_prints_only_totals() {
        let d = Kpdata::parse(&encode(&[0; 128])).unwrap();
        let r = format(&[(0x8010_0000, "_start")], &d);
        assert_eq!(
            r.text,
            "total: 0\tin kernel text: 0\toutside kernel text: 0\n"
        );
        assert_eq!(r.error, None);
    }

    #[test]
    fn no_counts_and_no_symbols() {
        let mut w = vec![0u32; 128];
        w[0] = 5;
        w[1] = 5;
        w[4] = 4;
        w[5] = 3;
        let d = Kpdata::parse(&encode(&w)).unwrap();
        let r = format(&[(0x8010_0000, "_start"), (0x8010_0400, "etext")], &d);
        assert_eq!(r.error, Some(KprofError::NoCounts));
        assert_eq!(format(&[], &d).error, Some(KprofError::NoTextSymbols));
    }

    #[test]
    fn huge_counts_do_not_overflow_the_ms_column() {
        // Two full buckets at the largest period: 2 * (2^32 - 1) ticks of
        // (2^32 - 1) µs each, which overflows u64 when multiplied.
        let mut w = vec![0u32; 16];
        w[0] = u32::MAX;
        (w[2], w[3], w[4], w[5]) = (u32::MAX, 16, 4, 3);
        w[8] = u32::MAX;
        w[9] = u32::MAX;
        let d = Kpdata::parse(&encode(&w)).unwrap();
        let r = format(&[(0x1000, "fnA"), (0x1080, "end")], &d);
        assert_eq!(r.error, None);
        assert!(
            r.text
                .ends_with("ms\t  %\tsym\n36893488130239234\t200.0\tfnA\n"),
            "{}",
            r.text
        );
    }

    /// TV-K4's symbols and words.
    fn tv_k4() -> (Vec<(u64, &'static str)>, Vec<u32>) {
        let syms = vec![
            (0x8010_0000, "_start"),
            (0x8010_0040, "fnA"),
            (0x8010_0100, "fnB"),
            (0x8010_0200, "fnC"),
            (0x8010_0400, "etext"),
        ];
        let mut w = vec![0u32; 128];
        (w[0], w[1], w[2], w[3], w[4], w[5]) = (100, 3, 10000, 128, 4, 3);
        (w[6], w[10], w[40], w[100]) = (2, 30, 50, 15);
        (syms, w)
    }

    #[test]
    fn tv_k4_streamed_reads_only_the_charged_buckets() {
        let (syms, w) = tv_k4();
        let whole = format(&syms, &Kpdata::parse(&encode(&w)).unwrap());
        assert_eq!(
            whole.text,
            "total: 100\tin kernel text: 97\toutside kernel text: 3\nKTZERO 80100000\n\
             ms\t  %\tsym\n500\t 51.5\tfnB\n300\t 30.9\tfnA\n150\t 15.4\tfnC\n20\t  2.0\t_start\n"
        );
        // The same file claiming 2^30 words: the buckets up to etext are
        // read (6..128), once, and the report is the same.
        let mut header = Header::parse(&encode(&w[..6]), 1 << 32).unwrap();
        assert_eq!(buckets_read(&syms, &header), 6..128);
        let mut asked = Vec::new();
        let r = format_stream(&syms, &header, |r: Range<u64>| {
            asked.push(r.clone());
            Ok::<_, ()>(r.map(|j| Ok(w[j as usize])))
        })
        .unwrap();
        assert_eq!(asked.len(), 1);
        assert_eq!((asked[0].clone(), r), (6..128, whole));
        // A file shorter than etext's bucket: read to its end.
        header.words = 41;
        assert_eq!(buckets_read(&syms, &header), 6..41);
        // A total of 0 reads nothing (TV-K6).
        header.total = 0;
        assert_eq!(buckets_read(&syms, &header), 0..0);
        let r = format_stream(&syms, &header, |_| -> Result<std::iter::Empty<_>, ()> {
            panic!("read a file whose total is 0")
        });
        assert_eq!(
            r.unwrap().text,
            "total: 0\tin kernel text: 4294967293\toutside kernel text: 3\n"
        );
    }

    #[test]
    fn streamed_words_that_end_early_or_fail() {
        let (syms, w) = tv_k4();
        let header = Header::parse(&encode(&w[..6]), 512).unwrap();
        // Words that end at 41 (the file shrank): as a 41-word file.
        let short = format_stream(&syms, &header, |r: Range<u64>| {
            Ok::<_, ()>(r.take_while(|&j| j < 41).map(|j| Ok(w[j as usize])))
        })
        .unwrap();
        let want = format(&syms, &Kpdata::parse(&encode(&w[..41])).unwrap());
        assert_eq!(short, want);
        assert_eq!(short.rows.len(), 3);
        // A read error is returned.
        let e = format_stream(&syms, &header, |r: Range<u64>| {
            Ok(r.map(|j| {
                if j < 20 {
                    Ok(w[j as usize])
                } else {
                    Err("EIO")
                }
            }))
        });
        assert_eq!(e, Err("EIO"));
        assert_eq!(
            format_stream(&syms, &header, |_| -> Result<std::iter::Empty<_>, _> {
                Err("EIO")
            }),
            Err("EIO")
        );
    }

    #[test]
    fn straddling_bucket_goes_to_the_symbol_it_starts_in() {
        let mut w = vec![0u32; 16];
        w[0] = 2;
        (w[2], w[3], w[4], w[5]) = (1000, 16, 4, 3);
        w[8] = 1; // bytes 0x40..0x48: straddles fnB at 0x44
        w[9] = 1; // 0x48..0x50: fnB
        let d = Kpdata::parse(&encode(&w)).unwrap();
        let syms = [(0x1000, "fnA"), (0x1044, "fnB"), (0x1080, "end")];
        let r = format(&syms, &d);
        assert_eq!(
            r.rows
                .iter()
                .map(|r| (r.name.as_str(), r.ticks))
                .collect::<Vec<_>>(),
            [("fnA", 1), ("fnB", 1)]
        );
    }
}
