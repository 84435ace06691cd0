//! `prfpr` and `prfstat`: the profiler(1M) reports, byte for byte.
//!
//! Lineage: SVR4.0 `cmd/profiler/prfpr.c` (ELF namelist, i386 output) and
//! `prfstat.c`, with DG/UX's idle counter.
//!
//! # prfpr
//!
//! For each pair of consecutive records of a log, prfpr prints both times,
//! then for every counter the share of the interval's ticks it received, in
//! tenths of a percent, truncated:
//!
//! ```text
//! pc = 1000 * (cur[i] - prev[i]) / (sum(cur) - sum(prev))
//! ```
//!
//! and prints it when `pc > 10 * cutoff` (strictly). Counter `i < N` is
//! named after the nearest symbol whose value is at most `addr[i]` and
//! greater than 0 (the first such symbol in namelist order when several
//! share a value), padded as `%-13s` then a TAB and a space; `unknown`
//! when there is none. Counter N prints as `user`, counter N+1 (DG/UX, and
//! profdev's own logs) as `idle`:
//!
//! ```text
//! initialization            shtime(previous record)
//! 09/13/120 12:26           shtime(this record)
//!                           blank line
//! unknown  10.0             no symbol at or below address 0
//! read         \t 50.0      "%-13s\t %d.%d"
//! user     5.0              "user     %d.%d"
//! idle     0.4              "idle     %d.%d"
//!                           blank line after each interval
//! ```
//!
//! An interval without ticks prints `no samples` and a blank line before
//! the closing blank line. A log of one record prints nothing.
//!
//! # The year: `tm_year`, kept on purpose
//!
//! SVR4 printed the date as `%02d/%02d/%02d` of month, day and `tm_year`,
//! the years since 1900, so 2020 prints as `120`. profdev keeps that, for
//! both log layouts: the field is unambiguous (it is 89 for 1989, 120 for
//! 2020 — add 1900), it sorts correctly, and scripts written against prfpr
//! parse exactly this; TV-R4 pins it. Printing `2020` would be a different
//! format under the same name.
//!
//! # Arithmetic width
//!
//! SVR4 computed in 32-bit `int`, so `1000 * diff` overflowed once a counter
//! grew by more than 2 147 483 ticks in one interval (six hours at 100 Hz).
//! profdev computes in 128 bits and does not copy that overflow; below it
//! the results are identical, truncation included.
//!
//! ```
//! use profdev_formats::prflog;
//! use profdev_report::prfpr::{self, Namelist};
//!
//! let header = prflog::Header::new(prflog::Layout::Profdev64, 2, vec![0, 0x1000]).unwrap();
//! let log = prflog::PrfLog {
//!     header,
//!     records: vec![
//!         prflog::Record { time: 0, counters: vec![0, 0, 0, 0] },
//!         prflog::Record { time: 60, counters: vec![0, 3, 1, 0] },
//!     ],
//!     partial: None,
//! };
//! let names = Namelist::new([(0x1000, "do_work".to_string())]);
//! let text = prfpr::report(&log, 1, &names, &prfpr::utc);
//! assert_eq!(text, "initialization\n01/01/70 00:01\n\ndo_work      \t 75.0\nuser     25.0\n\n");
//! ```

use profdev_formats::prflog::{Header, PrfLog, PrfLogError, Record};
use std::fmt::Write as _;

/// State bit: sampling is on.
pub const PRF_ON: i32 = 1;
/// State bit: a valid address table is loaded.
pub const PRF_VAL: i32 = 2;

/// A broken-down time, as far as prfpr prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tm {
    /// Years since 1900 (`tm_year`).
    pub years_since_1900: i64,
    /// Month, 1–12.
    pub month: u32,
    /// Day of the month, 1–31.
    pub day: u32,
    /// Hour, 0–23.
    pub hour: u32,
    /// Minute, 0–59.
    pub minute: u32,
}

/// Seconds since the epoch as UTC (a pure stand-in for `localtime` with
/// `TZ=UTC`).
pub fn utc(t: i64) -> Tm {
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    Tm {
        years_since_1900: year - 1900,
        month,
        day,
        hour: (secs / 3600) as u32,
        minute: (secs % 3600 / 60) as u32,
    }
}

/// Symbols to name the counters with: `(value, name)` pairs in namelist
/// order.
#[derive(Clone, Debug, Default)]
pub struct Namelist {
    /// Sorted by value; among equal values, in namelist order.
    syms: Vec<(u64, String)>,
}

impl Namelist {
    /// A namelist from `(value, name)` pairs in the order the namelist
    /// file lists them.
    pub fn new(symbols: impl IntoIterator<Item = (u64, String)>) -> Self {
        let mut syms: Vec<(u64, String)> = symbols.into_iter().collect();
        syms.sort_by_key(|s| s.0); // stable: ties keep namelist order
        Namelist { syms }
    }

    /// The symbol prfpr names `addr` after: the greatest value `v` with
    /// `0 < v <= addr`, the first in namelist order among symbols sharing it.
    pub fn nearest(&self, addr: u64) -> Option<&str> {
        let end = self.syms.partition_point(|s| s.0 <= addr);
        let value = self.syms[..end].last()?.0;
        if value == 0 {
            return None;
        }
        let first = self.syms.partition_point(|s| s.0 < value);
        Some(&self.syms[first].1)
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// True if there are no symbols.
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }
}

/// prfpr's errors, each printed as `error: <message>` on standard output
/// with exit status 1, as SVR4 did.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrfprError {
    /// Wrong number of arguments.
    #[error("usage: prfpr file [ cutoff [ namelist ] ]")]
    Usage,
    /// The log cannot be opened.
    #[error("cannot open data file")]
    CannotOpenData,
    /// The cutoff is outside 0–100.
    #[error("invalid cutoff percentage")]
    InvalidCutoff,
    /// The address count is missing or not positive (or, for profdev's
    /// layout, the magic header is damaged).
    #[error("bad data file")]
    BadDataFile,
    /// The address table is cut short.
    #[error("cannot read profile addresses")]
    CannotReadAddresses,
    /// The namelist cannot be opened.
    #[error("cannot open namelist file")]
    CannotOpenNamelist,
}

impl PrfprError {
    /// prfpr's verdict on a log that did not parse.
    pub fn from_log_error(e: &PrfLogError) -> Self {
        match e {
            // SVR4 read the table it was told of and failed: more
            // addresses than the device holds could not be read either.
            PrfLogError::Short {
                field: "address table",
                ..
            }
            | PrfLogError::TooMany { .. } => PrfprError::CannotReadAddresses,
            _ => PrfprError::BadDataFile,
        }
    }
}

/// C's `atoi`: leading blanks, an optional sign, then digits up to the
/// first non-digit; 0 if there are none.
pub fn atoi(s: &str) -> i64 {
    let s = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut v: i64 = 0;
    for b in digits.bytes().take_while(u8::is_ascii_digit) {
        v = v.saturating_mul(10).saturating_add(i64::from(b - b'0'));
    }
    if neg {
        -v
    } else {
        v
    }
}

/// The cutoff argument, read with `atoi` as SVR4 did (`abc` is 0) and
/// checked to be 0–100.
pub fn parse_cutoff(arg: &str) -> Result<u32, PrfprError> {
    match atoi(arg) {
        v @ 0..=100 => Ok(v as u32),
        _ => Err(PrfprError::InvalidCutoff),
    }
}

/// `%02.2d`: at least two digits, the sign in front.
fn d02(out: &mut String, v: i64) {
    if v < 0 {
        let _ = write!(out, "-{:02}", v.unsigned_abs());
    } else {
        let _ = write!(out, "{v:02}");
    }
}

fn shtime(out: &mut String, t: i64, localtime: &dyn Fn(i64) -> Tm) {
    if t == 0 {
        out.push_str("initialization\n");
        return;
    }
    let tm = localtime(t);
    d02(out, i64::from(tm.month));
    out.push('/');
    d02(out, i64::from(tm.day));
    out.push('/');
    d02(out, tm.years_since_1900);
    out.push(' ');
    d02(out, i64::from(tm.hour));
    out.push(':');
    d02(out, i64::from(tm.minute));
    out.push('\n');
}

/// prfpr's output for `log` with `cutoff` percent (0–100), naming counters
/// from `names` and breaking times down with `localtime`.
pub fn report(
    log: &PrfLog,
    cutoff: u32,
    names: &Namelist,
    localtime: &dyn Fn(i64) -> Tm,
) -> String {
    let mut r = Reporter::new(&log.header, cutoff, names, localtime);
    let mut out = String::new();
    for rec in &log.records {
        out.push_str(&r.push(rec));
    }
    out
}

/// prfpr one record at a time: [`Reporter::push`] each record in file
/// order and print what it returns, the interval that record ends. It
/// keeps only the previous record, so a reader streaming a log needs
/// memory for one record whatever the log's length.
pub struct Reporter<'a> {
    header: &'a Header,
    cutoff: u32,
    names: &'a Namelist,
    localtime: &'a dyn Fn(i64) -> Tm,
    /// The previous record and the sum of its counters.
    prev: Option<(Record, i128)>,
}

impl<'a> Reporter<'a> {
    /// A reporter for a log with `header`.
    pub fn new(
        header: &'a Header,
        cutoff: u32,
        names: &'a Namelist,
        localtime: &'a dyn Fn(i64) -> Tm,
    ) -> Self {
        Reporter {
            header,
            cutoff,
            names,
            localtime,
            prev: None,
        }
    }

    /// The text of the interval `cur` ends (empty for the first record).
    pub fn push(&mut self, cur: &Record) -> String {
        let mut out = String::new();
        let total = |c: &[u64]| c.iter().map(|&v| i128::from(v)).sum::<i128>();
        let sum = total(&cur.counters);
        let Some((prev, osum)) = self.prev.take() else {
            self.prev = Some((cur.clone(), sum));
            return out;
        };
        let n = self.header.n();
        shtime(&mut out, prev.time, self.localtime);
        shtime(&mut out, cur.time, self.localtime);
        out.push('\n');
        if sum == osum {
            out.push_str("no samples\n\n");
        } else {
            for (i, (&c, &p)) in cur.counters.iter().zip(&prev.counters).enumerate() {
                let pc = 1000 * (i128::from(c) - i128::from(p)) / (sum - osum);
                if pc <= 10 * i128::from(self.cutoff) {
                    continue;
                }
                let (whole, tenth) = (pc / 10, pc % 10);
                if i == n {
                    let _ = writeln!(out, "user     {whole}.{tenth}");
                } else if i == n + 1 {
                    let _ = writeln!(out, "idle     {whole}.{tenth}");
                } else {
                    match self
                        .header
                        .addrs
                        .get(i)
                        .and_then(|&a| self.names.nearest(a))
                    {
                        Some(name) => {
                            let _ = writeln!(out, "{name:<13}\t {whole}.{tenth}");
                        }
                        None => {
                            let _ = writeln!(out, "unknown  {whole}.{tenth}");
                        }
                    }
                }
            }
        }
        out.push('\n');
        self.prev = Some((cur.clone(), sum));
        out
    }
}

/// prfstat's report: `profiling enabled` or `profiling disabled`, then,
/// if a table is loaded, `N kernel text addresses`.
pub fn prfstat_report(status: i32, size: i64) -> String {
    let mut out = format!(
        "profiling {}\n",
        if status & PRF_ON != 0 {
            "enabled"
        } else {
            "disabled"
        }
    );
    if status & PRF_VAL != 0 {
        let _ = writeln!(out, "{size} kernel text addresses");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_formats::prflog::{Header, Layout, Record};

    #[test]
    fn utc_breaks_down_like_gmtime() {
        assert_eq!(
            utc(1_600_000_000),
            Tm {
                years_since_1900: 120,
                month: 9,
                day: 13,
                hour: 12,
                minute: 26
            }
        );
        assert_eq!(utc(1).years_since_1900, 70);
        assert_eq!((utc(951_782_400).month, utc(951_782_400).day), (2, 29)); // 2000-02-29
        assert_eq!(utc(-1).years_since_1900, 69);
        assert_eq!((utc(-1).hour, utc(-1).minute), (23, 59));
        assert_eq!(utc(4_102_444_800).years_since_1900, 200); // 2100-01-01
    }

    #[test]
    fn nearest_follows_elf_search() {
        let names = Namelist::new([
            (0x20, "b".to_string()),
            (0, "zero".to_string()),
            (0x10, "a1".to_string()),
            (0x10, "a2".to_string()),
        ]);
        assert_eq!(names.nearest(0), None, "value 0 never names anything");
        assert_eq!(names.nearest(0xf), None);
        assert_eq!(names.nearest(0x10), Some("a1"), "first of equal values");
        assert_eq!(names.nearest(0x1f), Some("a1"));
        assert_eq!(names.nearest(u64::MAX), Some("b"));
    }

    #[test]
    fn atoi_and_cutoff() {
        assert_eq!(atoi("  12abc"), 12);
        assert_eq!(atoi("-3"), -3);
        assert_eq!(atoi("abc"), 0);
        assert_eq!(parse_cutoff("abc"), Ok(0));
        assert_eq!(parse_cutoff("100"), Ok(100));
        assert_eq!(parse_cutoff("101"), Err(PrfprError::InvalidCutoff));
        assert_eq!(parse_cutoff("-1"), Err(PrfprError::InvalidCutoff));
    }

    #[test]
    fn one_record_prints_nothing_and_dates_before_1900_keep_the_sign() {
        let header = Header::new(Layout::Profdev64, 2, vec![0]).unwrap();
        let mut log = PrfLog {
            header,
            records: vec![Record {
                time: 5,
                counters: vec![1, 2, 3],
            }],
            partial: None,
        };
        assert_eq!(report(&log, 1, &Namelist::default(), &utc), "");
        log.records.push(Record {
            time: -2_300_000_000, // 1897
            counters: vec![1, 2, 3],
        });
        assert_eq!(
            report(&log, 1, &Namelist::default(), &utc),
            "01/01/70 00:00\n02/11/-03 15:06\n\nno samples\n\n\n"
        );
    }

    #[test]
    fn log_errors_map_to_the_seeds_messages() {
        let short = profdev_formats::prflog::parse(&[3, 0, 0, 0, 1]).unwrap_err();
        assert_eq!(
            PrfprError::from_log_error(&short),
            PrfprError::CannotReadAddresses
        );
        let empty = profdev_formats::prflog::parse(&[]).unwrap_err();
        assert_eq!(PrfprError::from_log_error(&empty), PrfprError::BadDataFile);
        let zero = profdev_formats::prflog::parse(&[0, 0, 0, 0]).unwrap_err();
        assert_eq!(
            PrfprError::from_log_error(&zero).to_string(),
            "bad data file"
        );
    }
}
