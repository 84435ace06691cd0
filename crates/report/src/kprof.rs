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

use profdev_formats::kpdata::{Kpdata, SPECIAL_WORDS};
use std::fmt::Write;

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
    let w = &data.words;
    let n = w.len();
    let total = data.total();
    let outside = data.outside();
    let delta = total.wrapping_sub(outside);
    let mut text =
        format!("total: {total}\tin kernel text: {delta}\toutside kernel text: {outside}\n");
    let done = |text, rows, error| Report { text, rows, error };
    if total == 0 {
        return done(text, Vec::new(), None);
    }
    let Some(&(s0, _)) = symbols.first() else {
        return done(text, Vec::new(), Some(KprofError::NoTextSymbols));
    };
    let uspertick = u64::from(data.microseconds_per_tick());
    let pcres = data.bucket_size();
    let tbase = s0 & !(PAGE_SIZE - 1);
    let _ = writeln!(text, "KTZERO {tbase:08x}");

    let mut rows = Vec::new();
    let mut j = usize::try_from((s0 - tbase) / pcres).unwrap_or(usize::MAX) + SPECIAL_WORDS;
    for i in 1..symbols.len() {
        if j >= n {
            break;
        }
        let (addr, name) = symbols[i - 1];
        let limit = symbols[i].0.saturating_sub(tbase);
        let mut sum = 0u64;
        while j < n && (j as u64).saturating_mul(pcres) < limit {
            sum = sum.saturating_add(u64::from(w[j]));
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
