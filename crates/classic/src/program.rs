//! The program a command runs: is it statically linked (no interpreter
//! to preload a library with)? cprof counts such a program through
//! uprobes instead; mprof cannot reach its allocations.

use std::path::Path;

/// An ELF file with no PT_INTERP is statically linked (64-bit
/// little-endian only; anything else is left to the exec). Only a file
/// whose every program header is there and names a loadable segment is
/// judged: a truncated or malformed one is not "static" (the exec says
/// what is wrong with it).
pub fn is_static(b: &[u8]) -> bool {
    const PT_LOAD: u32 = 1;
    const PT_INTERP: u32 = 3;
    let u16_at = |o: usize| b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
    };
    if !b.starts_with(b"\x7fELF") || b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    if phentsize < 4 {
        return false;
    }
    let types: Option<Vec<u32>> = (0..phnum as u64)
        .map(|i| {
            let o = usize::try_from(phoff.checked_add(i * phentsize as u64)?).ok()?;
            let t = b.get(o..o.checked_add(4)?)?;
            Some(u32::from_le_bytes(t.try_into().ok()?))
        })
        .collect();
    types.is_some_and(|t| t.contains(&PT_LOAD) && !t.contains(&PT_INTERP))
}

/// Is the ELF file `program` statically linked (no interpreter)? False
/// when it cannot be read or is not ELF (a script: its interpreter is what
/// runs). Reads at most the first 64 KiB, where the program headers are.
pub fn is_static_program(program: &Path) -> bool {
    use std::io::Read as _;
    let mut head = Vec::new();
    std::fs::File::open(program)
        .and_then(|f| f.take(64 << 10).read_to_end(&mut head))
        .is_ok()
        && head.starts_with(b"\x7fELF")
        && is_static(&head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_detection() {
        let exe = std::env::current_exe().unwrap();
        let bytes = std::fs::read(&exe).unwrap();
        assert!(!is_static(&bytes), "the test binary is dynamically linked");
        assert!(!is_static(b"#!/bin/sh\n"));
        // Cut inside its program headers: malformed, not "static".
        assert!(!is_static(&bytes[..0x48]));
        // A header and one PT_LOAD, no PT_INTERP: static.
        let mut elf = vec![0u8; 0x40 + 0x38];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        elf[0x40] = 1;
        assert!(is_static(&elf));
        elf[0x40] = 3;
        assert!(!is_static(&elf), "PT_INTERP");
        // A program header count that runs past the file.
        elf[0x40] = 1;
        elf[0x38..0x3a].copy_from_slice(&2u16.to_le_bytes());
        assert!(!is_static(&elf));
    }
}
