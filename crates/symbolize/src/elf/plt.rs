//! Symbols for the PLT entries of an x86-64 object (`NAME@plt`).

use super::{FnSym, SymOrigin};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable};

const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_JUMP_SLOT: u32 = 7;
const R_X86_64_IRELATIVE: u32 = 37;
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// Symbols for the PLT entries of an x86-64 object, named as binutils'
/// `elf_x86_64_get_synthetic_symtab` and perf name them: each entry's
/// `jmp *disp(%rip)` (with or without `endbr64` and `bnd`) reads a GOT
/// slot; the dynamic relocation of that slot (`R_X86_64_JUMP_SLOT` from
/// `.rela.plt`, `R_X86_64_GLOB_DAT` from `.rela.dyn` for `.plt.got`) names
/// the symbol: `NAME@plt`, or `*ABS*+0xADDR@plt` for an IFUNC resolved
/// in place (`R_X86_64_IRELATIVE`). Layouts:
///
/// * `.plt`, lazy: PLT0 (16 bytes, `push GOT+8; jmp *GOT+16`), then 16-byte
///   entries `jmp *slot; push i; jmp PLT0`;
/// * `.plt` with IBT (`-z ibtplt`, `-z ibt`): PLT0, then 16-byte lazy stubs
///   `endbr64; push i; jmp PLT0` that jump through no slot, while the
///   entries calls go to are in `.plt.sec` (16 bytes, `endbr64; bnd jmp
///   *slot; nop`);
/// * `.plt.got`: 8-byte `jmp *slot; nop` or, with IBT, 16-byte `endbr64; bnd
///   jmp *slot; nop` entries for functions whose address is also taken.
///
/// Code in `.plt` that jumps through no slot (PLT0, IBT lazy stubs) is one
/// symbol per run, named `.plt`, as objdump labels it.
pub(super) fn plt_symbols(file: &object::File<'_>) -> Vec<FnSym> {
    if file.architecture() != object::Architecture::X86_64 || !file.is_little_endian() {
        return Vec::new();
    }
    let mut slots: std::collections::HashMap<u64, String> = std::collections::HashMap::new();
    if let (Some(relocs), Some(dynsym)) = (file.dynamic_relocations(), file.dynamic_symbol_table())
    {
        for (offset, r) in relocs {
            let object::RelocationFlags::Elf { r_type } = r.flags() else {
                continue;
            };
            let name = match (r_type, r.target()) {
                (R_X86_64_JUMP_SLOT | R_X86_64_GLOB_DAT, object::RelocationTarget::Symbol(i)) => {
                    match dynsym.symbol_by_index(i).ok().and_then(|s| s.name().ok()) {
                        Some(n) if !n.is_empty() => n.to_string(),
                        _ => continue,
                    }
                }
                (R_X86_64_IRELATIVE, _) => format!("*ABS*+{:#x}", r.addend()),
                _ => continue,
            };
            // `.rela.plt` first, then `.rela.dyn`: keep the first name.
            slots.entry(offset).or_insert(name);
        }
    }
    let mut out: Vec<FnSym> = Vec::new();
    let push_plt = |out: &mut Vec<FnSym>, addr: u64, size: u64, name: String| {
        // Merge runs of unnamed lazy-binding code into one `.plt` symbol.
        if let Some(last) = out.last_mut() {
            if last.mangled == ".plt" && name == ".plt" && last.addr + last.size == addr {
                last.size += size;
                return;
            }
        }
        out.push(FnSym {
            addr,
            size,
            mangled: name,
            origin: SymOrigin::Plt,
        });
    };
    for section in [".plt", ".plt.sec", ".plt.got"] {
        let Some(sec) = file.section_by_name(section) else {
            continue;
        };
        let Ok(data) = sec.data() else { continue };
        let base = sec.address();
        let entry = match section {
            ".plt.got" if !data.starts_with(&ENDBR64) => 8,
            _ => 16,
        };
        let mut at = 0usize;
        while at + entry <= data.len() {
            let bytes = &data[at..at + entry];
            let addr = base + at as u64;
            let name = got_jump(bytes)
                .and_then(|(end, disp)| {
                    let slot = (addr + end as u64).wrapping_add(disp as i64 as u64);
                    slots.get(&slot)
                })
                .map(|n| format!("{n}@plt"));
            match name {
                Some(n) => push_plt(&mut out, addr, entry as u64, n),
                None if section == ".plt" => push_plt(&mut out, addr, entry as u64, ".plt".into()),
                None => {}
            }
            at += entry;
        }
    }
    out
}

/// In a PLT entry, the first `jmp *disp32(%rip)` (`ff 25`, possibly after
/// `endbr64` and with a `bnd` (`f2`) prefix): the offset just past it and
/// its displacement. PLT0's `push` and `jmp` read GOT+8 and GOT+16, which no
/// relocation names, so PLT0 stays unnamed.
fn got_jump(entry: &[u8]) -> Option<(usize, i32)> {
    let mut i = 0;
    if entry.starts_with(&ENDBR64) {
        i = 4;
    }
    if entry.get(i) == Some(&0xf2) {
        i += 1;
    }
    if entry.get(i..i + 2)? != [0xff, 0x25] {
        return None;
    }
    let disp = i32::from_le_bytes(entry.get(i + 2..i + 6)?.try_into().ok()?);
    Some((i + 6, disp))
}
