//! The Linux `/proc/profile` layout (spec §6.3), what `readprofile -p FILE
//! -m System.map` reads: word 0 the step `1 << shift`, then `prof_len =
//! (_etext - _stext) >> shift` u32 counters, counter k the kernel-mode
//! samples with PC in `[_stext + k·step, _stext + (k+1)·step)`, the last
//! counter also the sink for every kernel-mode PC outside that range
//! (readprofile's `*unknown*`). As the kernel counts, user-mode samples
//! are not counted. Words are little-endian (the kernel writes native
//! words; x86_64 and aarch64 Linux are little-endian). `_stext` and
//! `_etext` are the recorded kernel symbol table's; a recording without
//! them cannot be exported in this layout.

use super::ExportError;
use crate::recording::{Object, ObjectKind, Recording};

/// The kernel object and its text range `[stext, etext)`: its `_stext`
/// and `_etext` symbols, which `profdev record` writes.
pub fn kernel_text(rec: &Recording) -> Option<(&Object, u64, u64)> {
    let k = rec
        .objects
        .iter()
        .find(|o| o.info.kind == ObjectKind::Kernel && !o.functions.is_empty())?;
    let named = |n: &str| k.functions.iter().find(|f| f.name == n).map(|f| f.start);
    let (stext, etext) = (named("_stext")?, named("_etext")?);
    (etext > stext).then_some((k, stext, etext))
}

/// The kernel PC of a kernel-mode sample: its innermost frame when that
/// frame is in the kernel object.
pub(crate) fn kernel_pc(rec: &Recording, s: &crate::recording::Sample, kernel: u32) -> Option<u64> {
    if !s.kernel {
        return None;
    }
    let f = rec.stack(s).first()?;
    (f.object == kernel).then_some(f.offset)
}

/// The profile words of `rec` with `1 << shift`-byte counters.
pub fn words(rec: &Recording, shift: u32) -> Result<Vec<u32>, ExportError> {
    let (k, stext, etext) = kernel_text(rec).ok_or(ExportError::NoKernelSymbols {
        format: "proc-profile",
    })?;
    let shift = shift.min(63);
    let prof_len = ((etext - stext) >> shift).max(1);
    if prof_len >= super::MAX_TABLE_WORDS {
        return Err(ExportError::TooLarge {
            format: "proc-profile",
            what: "the kernel text",
            words: prof_len,
        });
    }
    let prof_len = prof_len as usize;
    let mut w = vec![0u32; prof_len + 1];
    w[0] = 1u32.checked_shl(shift).unwrap_or(0);
    for s in &rec.samples {
        if !s.kernel {
            continue;
        }
        let slot = match kernel_pc(rec, s, k.id) {
            Some(pc) => (pc.wrapping_sub(stext) >> shift).min(prof_len as u64 - 1) as usize,
            None => prof_len - 1,
        };
        w[1 + slot] = w[1 + slot].saturating_add(1);
    }
    Ok(w)
}

/// The file's bytes.
pub fn write(rec: &Recording, shift: u32) -> Result<Vec<u8>, ExportError> {
    Ok(words(rec, shift)?
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect())
}
