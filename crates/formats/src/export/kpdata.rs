//! Inferno kpdata ([`crate::kpdata`]) from a recording, what `profdev
//! kprof TEXT KPDATA` formats: buckets of `1 << log2` bytes from KTZERO,
//! `_stext` rounded down to a page (kprof's own base, from the first text
//! symbol of TEXT, which is at or below `_stext`), to `_etext` or the end
//! of the highest recorded function. Every sample is a tick; a tick is counted in its bucket
//! when it is a kernel-mode sample with its PC in the text above the six
//! header words, and as outside otherwise (user mode included, as the
//! kprof device counts). Microseconds per tick from the sampling period.

use super::proc_profile::{kernel_pc, kernel_text};
use super::ExportError;
use crate::kpdata::{self, LOG_BUCKET_SIZE, OUTSIDE_TICKS, SPECIAL_WORDS, TOTAL_TICKS};

use crate::recording::Recording;

const PAGE: u64 = 4096;

/// The kpdata words of `rec` with `1 << log2`-byte buckets.
pub fn words(rec: &Recording, log2: u32) -> Result<Vec<u32>, ExportError> {
    let (k, stext, etext) =
        kernel_text(rec).ok_or(ExportError::NoKernelSymbols { format: "kpdata" })?;
    let hi = k
        .functions
        .iter()
        .map(|f| f.start.saturating_add(f.len.max(1)))
        .max()
        .unwrap_or(etext)
        .max(etext);
    let base = stext & !(PAGE - 1);
    let log2 = log2.min(31);
    let len = (hi - base).min(kpdata::MAX_KERNEL_TEXT);
    let words = kpdata::words_for(len, log2);
    if words as u64 > super::MAX_TABLE_WORDS {
        return Err(ExportError::TooLarge {
            format: "kpdata",
            what: "the kernel text",
            words: words as u64,
        });
    }
    let mut w = vec![0u32; words];
    let us = u32::try_from(rec.header.period_ns / 1000).unwrap_or(u32::MAX);
    kpdata::init_header(&mut w, us, log2);
    let n = w.len() as u64;
    let (mut total, mut outside) = (0u32, 0u32);
    for s in &rec.samples {
        total = total.saturating_add(1);
        let bucket = kernel_pc(rec, s, k.id)
            .and_then(|pc| pc.checked_sub(base))
            .map(|d| d >> log2)
            .filter(|&j| j >= SPECIAL_WORDS as u64 && j < n);
        match bucket {
            Some(j) => w[j as usize] = w[j as usize].saturating_add(1),
            None => outside = outside.saturating_add(1),
        }
    }
    w[TOTAL_TICKS] = total;
    w[OUTSIDE_TICKS] = outside;
    debug_assert_eq!(w[LOG_BUCKET_SIZE], log2);
    Ok(w)
}

/// The file's bytes (big-endian words).
pub fn write(rec: &Recording, log2: u32) -> Result<Vec<u8>, ExportError> {
    Ok(kpdata::encode(&words(rec, log2)?))
}
