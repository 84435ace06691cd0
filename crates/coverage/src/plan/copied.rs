//! Code the module copies elsewhere at run time, found by symbol: never
//! patched.
//!
//! A patch is a `jmp rel32` to a trampoline next to the module, or an
//! `int3` the runtime knows by address. Copied elsewhere, the jump lands
//! as far from the copy as the trampoline was from the original, where
//! nothing is mapped, and the breakpoint is at an address the runtime
//! does not know. V8 (linked into node) does this to its embedded
//! builtins: with short builtin calls (on a 64-bit machine with 4 GiB of
//! memory or more), each isolate copies the blob
//! `v8_Default_embedded_blob_code_` (its length in the 32-bit
//! `v8_Default_embedded_blob_code_size_`) into its code range, after
//! the runtime has patched it, and runs the copy: node crashed in its
//! first JavaScript function (issue 28, item 4). Those blocks are left
//! uncounted ([`super::Plan::copied`] says which, for cprof's note); a
//! module without the symbols (stripped) is planned whole.

use object::{Object, ObjectSymbol};

/// The blob's symbol, `v8_<Variant>_embedded_blob_code_`, and the suffix
/// of the name of its length's.
const PREFIX: &str = "v8_";
const CODE: &str = "_embedded_blob_code_";
const SIZE: &str = "_embedded_blob_code_size_";

/// The ranges (start, end) of `file`'s code that the module copies at
/// run time: V8's embedded builtins, their length read from `data` (the
/// sections' addresses and bytes).
pub(super) fn copied(file: &object::File, data: &[(u64, &[u8])]) -> Vec<(u64, u64)> {
    let mut code: Vec<(&str, u64)> = Vec::new();
    let mut size: Vec<(&str, u64)> = Vec::new();
    for s in file.symbols().chain(file.dynamic_symbols()) {
        let Ok(name) = s.name() else { continue };
        let Some(variant) = name.strip_prefix(PREFIX) else {
            continue;
        };
        if let Some(v) = variant.strip_suffix(SIZE) {
            size.push((v, s.address()));
        } else if let Some(v) = variant.strip_suffix(CODE) {
            code.push((v, s.address()));
        }
    }
    let mut out: Vec<(u64, u64)> = code
        .iter()
        .filter_map(|&(v, at)| {
            let (_, size_at) = size.iter().find(|(w, _)| *w == v)?;
            let len = read_u32(data, *size_at)?;
            (len > 0).then(|| (at, at + u64::from(len)))
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The little-endian 32-bit word at `addr` in `data`.
fn read_u32(data: &[(u64, &[u8])], addr: u64) -> Option<u32> {
    data.iter().find_map(|&(a, bytes)| {
        let off = usize::try_from(addr.checked_sub(a)?).ok()?;
        let w = bytes.get(off..off.checked_add(4)?)?;
        Some(u32::from_le_bytes(w.try_into().ok()?))
    })
}

/// Whether `addr` lies in one of the `ranges`.
pub(super) fn within(ranges: &[(u64, u64)], addr: u64) -> bool {
    ranges.iter().any(|&(lo, hi)| lo <= addr && addr < hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_is_read_from_the_section_that_holds_it() {
        let bytes = [0u8, 0, 0x10, 0x20, 0, 0, 9];
        let data: [(u64, &[u8]); 1] = [(0x400, &bytes)];
        assert_eq!(read_u32(&data, 0x402), Some(0x2010));
        assert_eq!(read_u32(&data, 0x404), None, "runs past the section");
        assert_eq!(read_u32(&data, 0x3ff), None);
        assert!(within(&[(0x10, 0x20)], 0x10) && !within(&[(0x10, 0x20)], 0x20));
    }
}
