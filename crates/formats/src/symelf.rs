//! A symbols-only ELF: enough of an executable for GNU gprof (or nm,
//! addr2line's symbol fallback) to name addresses, when no real image is at
//! hand — `profdev kgmon -p` writes one as `vmlinux.syms` from
//! `/proc/kallsyms`.
//!
//! # Description
//!
//! ELF64, little-endian, `EM_X86_64`, `ET_EXEC`, no program headers, five
//! sections:
//!
//! | index | name | type | what |
//! |---|---|---|---|
//! | 0 | | `SHT_NULL` | |
//! | 1 | `.text` | `SHT_NOBITS`, `SHF_ALLOC \| SHF_EXECINSTR` | `sh_addr`/`sh_size` cover the text; no bytes in the file |
//! | 2 | `.symtab` | `SHT_SYMTAB`, entsize 24 | the null symbol, local functions, then global and weak ones (`sh_info` = first non-local) |
//! | 3 | `.strtab` | `SHT_STRTAB` | symbol names |
//! | 4 | `.shstrtab` | `SHT_STRTAB` | section names |
//!
//! Every symbol is `STT_FUNC` in section 1. gprof reads the address width
//! and byte order of gmon.out from this file (8 bytes, little-endian).
//! Symbols outside `[text.start, text.end]` are left out. Give a symbol at
//! `text.end` (the kernel's `_etext`): gprof ends each function at the next
//! symbol, and drops the samples of a last function that has none.
//!
//! # Example
//!
//! ```
//! use profdev_formats::symelf::{self, Binding, Symbol};
//! let syms = [Symbol { addr: 0x401000, size: 0x10, name: "main".into(), binding: Binding::Global }];
//! let elf = symelf::write(0x401000..0x401300, &syms);
//! assert_eq!(&elf[..4], b"\x7fELF");
//! ```

use std::ops::Range;

/// A symbol's binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// `STB_LOCAL` (nm `t`).
    Local,
    /// `STB_GLOBAL` (nm `T`).
    Global,
    /// `STB_WEAK` (nm `W`).
    Weak,
}

/// One function symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Entry address.
    pub addr: u64,
    /// Size in bytes (0 when unknown).
    pub size: u64,
    /// Name, without NUL bytes (any NUL cuts it short).
    pub name: String,
    /// Binding.
    pub binding: Binding,
}

/// The ELF for nm-style function symbols `(address, type letter, name)`
/// in `text`, in any order: sizes run to the next symbol, `T` is global,
/// `W`/`w` weak, anything else local; a `_etext` symbol is added at
/// `text.end` when no symbol is there, so the last function has an end.
pub fn from_nm(text: Range<u64>, symbols: &[(u64, char, &str)]) -> Vec<u8> {
    let mut sorted: Vec<&(u64, char, &str)> = symbols.iter().collect();
    sorted.sort_by_key(|s| s.0);
    let mut out: Vec<Symbol> = sorted
        .iter()
        .enumerate()
        .map(|(i, &&(addr, kind, name))| Symbol {
            addr,
            size: sorted.get(i + 1).map_or(0, |n| n.0 - addr),
            name: name.to_string(),
            binding: match kind {
                'T' => Binding::Global,
                'W' | 'w' => Binding::Weak,
                _ => Binding::Local,
            },
        })
        .collect();
    if !out.iter().any(|s| s.addr == text.end) {
        out.push(Symbol {
            addr: text.end,
            size: 0,
            name: "_etext".into(),
            binding: Binding::Global,
        });
    }
    write(text, &out)
}

/// The symbols gprof needs to report `profile` exactly: every function
/// holding a non-empty histogram cell, a call site or a callee, and the
/// symbol after each, which ends it. gprof looks up each symbol's source
/// line by a linear search of the symbol table, so a whole kernel's 120,000
/// symbols cost it minutes of CPU per run; with only these it reports
/// the same numbers in a moment. `symbols` is `(address, nm type, name)`.
pub fn used_by<'a>(
    symbols: &[(u64, char, &'a str)],
    profile: &crate::gmon::GmonOut,
) -> Vec<(u64, char, &'a str)> {
    let mut sorted: Vec<(u64, char, &str)> = symbols.to_vec();
    sorted.sort_by_key(|s| s.0);
    let mut keep = vec![false; sorted.len()];
    let holder = |pc: u64| sorted.partition_point(|s| s.0 <= pc).checked_sub(1);
    let mark = |keep: &mut Vec<bool>, i: Option<usize>| {
        if let Some(i) = i {
            keep[i] = true;
            if i + 1 < keep.len() {
                keep[i + 1] = true;
            }
        }
    };
    for h in &profile.histograms {
        let n = h.bins.len() as u128;
        let span = u128::from(h.high_pc.saturating_sub(h.low_pc));
        for (i, _) in h.bins.iter().enumerate().filter(|(_, &b)| b != 0) {
            let lo = h.low_pc + (i as u128 * span / n) as u64;
            let hi = h.low_pc + ((i as u128 + 1) * span / n) as u64;
            // The function holding the cell's first byte and any starting
            // inside it.
            mark(&mut keep, holder(lo));
            let first = sorted.partition_point(|s| s.0 <= lo);
            let last = sorted.partition_point(|s| s.0 < hi);
            for j in first..last {
                mark(&mut keep, Some(j));
            }
        }
    }
    for a in &profile.arcs {
        mark(&mut keep, holder(a.from_pc));
        mark(&mut keep, holder(a.self_pc));
    }
    sorted
        .into_iter()
        .zip(keep)
        .filter_map(|(s, k)| k.then_some(s))
        .collect()
}

const EHDR: usize = 64;
const SHDR: usize = 64;
const SYM: usize = 24;
const SHSTRTAB: &[u8] = b"\0.text\0.symtab\0.strtab\0.shstrtab\0";

/// The ELF bytes for functions `symbols` in the text `text`.
pub fn write(text: Range<u64>, symbols: &[Symbol]) -> Vec<u8> {
    let inside = |s: &&Symbol| s.addr >= text.start && s.addr <= text.end;
    let locals = symbols
        .iter()
        .filter(inside)
        .filter(|s| s.binding == Binding::Local);
    let others = symbols
        .iter()
        .filter(inside)
        .filter(|s| s.binding != Binding::Local);
    let mut strtab = vec![0u8];
    let mut symtab = vec![0u8; SYM];
    let mut first_global = 1u32;
    for (n, s) in locals.chain(others).enumerate() {
        let name_off = strtab.len() as u32;
        let name = s.name.split('\0').next().unwrap_or("");
        strtab.extend_from_slice(name.as_bytes());
        strtab.push(0);
        let bind: u8 = match s.binding {
            Binding::Local => {
                first_global = n as u32 + 2;
                0
            }
            Binding::Global => 1,
            Binding::Weak => 2,
        };
        symtab.extend_from_slice(&name_off.to_le_bytes());
        symtab.push(bind << 4 | 2); // STT_FUNC
        symtab.push(0); // st_other: STV_DEFAULT
        symtab.extend_from_slice(&1u16.to_le_bytes()); // .text
        symtab.extend_from_slice(&s.addr.to_le_bytes());
        symtab.extend_from_slice(&s.size.to_le_bytes());
    }
    let symtab_off = EHDR;
    let strtab_off = symtab_off + symtab.len();
    let shstrtab_off = strtab_off + strtab.len();
    let shoff = (shstrtab_off + SHSTRTAB.len()).div_ceil(8) * 8;

    let mut out = Vec::with_capacity(shoff + 5 * SHDR);
    // e_ident: magic, ELFCLASS64, ELFDATA2LSB, EV_CURRENT, ELFOSABI_NONE.
    out.extend_from_slice(b"\x7fELF\x02\x01\x01\x00");
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&2u16.to_le_bytes()); // e_type ET_EXEC
    out.extend_from_slice(&62u16.to_le_bytes()); // e_machine EM_X86_64
    out.extend_from_slice(&1u32.to_le_bytes()); // e_version
    out.extend_from_slice(&text.start.to_le_bytes()); // e_entry
    out.extend_from_slice(&0u64.to_le_bytes()); // e_phoff
    out.extend_from_slice(&(shoff as u64).to_le_bytes()); // e_shoff
    out.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    out.extend_from_slice(&(EHDR as u16).to_le_bytes()); // e_ehsize
    out.extend_from_slice(&56u16.to_le_bytes()); // e_phentsize
    out.extend_from_slice(&0u16.to_le_bytes()); // e_phnum
    out.extend_from_slice(&(SHDR as u16).to_le_bytes()); // e_shentsize
    out.extend_from_slice(&5u16.to_le_bytes()); // e_shnum
    out.extend_from_slice(&4u16.to_le_bytes()); // e_shstrndx
    debug_assert_eq!(out.len(), EHDR);
    out.extend_from_slice(&symtab);
    out.extend_from_slice(&strtab);
    out.extend_from_slice(SHSTRTAB);
    out.resize(shoff, 0);

    let mut shdr = |name: u32,
                    kind: u32,
                    flags: u64,
                    addr: u64,
                    offset: usize,
                    size: u64,
                    link: u32,
                    info: u32,
                    align: u64,
                    entsize: u64| {
        out.extend_from_slice(&name.to_le_bytes());
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&addr.to_le_bytes());
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&link.to_le_bytes());
        out.extend_from_slice(&info.to_le_bytes());
        out.extend_from_slice(&align.to_le_bytes());
        out.extend_from_slice(&entsize.to_le_bytes());
    };
    shdr(0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    // .text: SHT_NOBITS (8), SHF_ALLOC | SHF_EXECINSTR (2 | 4).
    shdr(
        1,
        8,
        6,
        text.start,
        EHDR,
        text.end - text.start,
        0,
        0,
        16,
        0,
    );
    // .symtab: SHT_SYMTAB (2), linked to .strtab (3).
    shdr(
        7,
        2,
        0,
        0,
        symtab_off,
        symtab.len() as u64,
        3,
        first_global,
        8,
        SYM as u64,
    );
    shdr(15, 3, 0, 0, strtab_off, strtab.len() as u64, 0, 0, 1, 0);
    shdr(23, 3, 0, 0, shstrtab_off, SHSTRTAB.len() as u64, 0, 0, 1, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn used_by_keeps_holders_and_their_ends() {
        use crate::gmon::{Arc, GmonOut, Histogram};
        let syms = [
            (0x1000, 'T', "a"),
            (0x1010, 't', "b"),
            (0x1020, 'T', "c"),
            (0x1030, 'T', "d"),
            (0x1040, 'T', "e"),
            (0x1050, 'W', "f"),
            (0x1060, 'T', "g"),
        ];
        let mut h = Histogram::new(0x1000, 0x1070, 0x70 / 4, 100);
        h.bins[0x14 / 4] = 3; // in b
        let profile = GmonOut {
            histograms: vec![h],
            arcs: vec![Arc {
                from_pc: 0x1044,
                self_pc: 0x1050,
                count: 1,
            }],
            bb_counts: vec![],
        };
        let names: Vec<&str> = used_by(&syms, &profile).iter().map(|s| s.2).collect();
        assert_eq!(names, ["b", "c", "e", "f", "g"]);
    }

    #[test]
    fn layout() {
        let syms = [
            Symbol {
                addr: 0x1010,
                size: 0,
                name: "g".into(),
                binding: Binding::Global,
            },
            Symbol {
                addr: 0x1000,
                size: 0x10,
                name: "l".into(),
                binding: Binding::Local,
            },
            Symbol {
                addr: 0x9000,
                size: 0,
                name: "outside".into(),
                binding: Binding::Global,
            },
        ];
        let e = write(0x1000..0x2000, &syms);
        let u16_at = |o: usize| u16::from_le_bytes(e[o..o + 2].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(e[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(e[o..o + 8].try_into().unwrap());
        assert_eq!((u16_at(16), u16_at(18), u16_at(60)), (2, 62, 5));
        let shoff = u64_at(40) as usize;
        assert_eq!(shoff % 8, 0);
        assert_eq!(e.len(), shoff + 5 * 64);
        // .symtab: 3 entries (null, l, g), sh_info 2 (first global).
        let symtab = shoff + 2 * 64;
        assert_eq!(u64_at(symtab + 32), 3 * 24);
        assert_eq!(u32_at(symtab + 44), 2);
        // The local comes first, named "l".
        assert_eq!(e[64 + 24 + 4], 2);
        assert_eq!(u64_at(64 + 24 + 8), 0x1000);
        assert_eq!(e[64 + 48 + 4], 0x12);
        // .text covers the range.
        let text = shoff + 64;
        assert_eq!((u64_at(text + 16), u64_at(text + 32)), (0x1000, 0x1000));
    }
}
