//! The symbols files gprof reads in place of a binary: an ELF whose
//! `.text` covers the histogram and whose symbol table names the functions
//! (`profdev_formats::symelf`). One writer for both: a stripped CMD's
//! `CMD.syms` (its `.dynsym` functions and those its `.eh_frame`
//! delimits) and kgmon's `vmlinux.syms` (the running kernel's text
//! symbols that the profile needs).

use crate::Program;
use profdev_formats::gmon::GmonOut;
use profdev_formats::symelf;
use profdev_symbolize::{KernelSymbols, SymOrigin};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The symbols ELF over `text` of `(address, nm type, name)` symbols.
fn write(text: Range<u64>, syms: &[(u64, char, &str)]) -> Vec<u8> {
    symelf::from_nm(text, syms)
}

/// Where a stripped executable's symbols go: `EXE.syms` beside gmon.out.
pub fn symbols_path(output: &Path, exe: &Path) -> PathBuf {
    let name = exe
        .file_name()
        .map_or_else(|| "a.out".into(), |n| n.to_string_lossy().into_owned());
    output.with_file_name(format!("{name}.syms"))
}

/// For a stripped executable, the symbols ELF gprof reads in its place (as
/// `kgmon -p` writes `vmlinux.syms`): its `.dynsym` functions and the
/// functions its `.eh_frame` FDEs delimit, over the histogram's range.
/// `None` for an executable with a symbol table: gprof reads that.
pub fn exe_symbols_elf(exe: &Program) -> Option<Vec<u8>> {
    if !exe.stripped {
        return None;
    }
    let syms: Vec<(u64, char, String)> = exe
        .elf
        .all_symbols()
        .into_iter()
        .filter(|s| s.addr >= exe.lowpc && s.addr < exe.highpc && s.origin != SymOrigin::Plt)
        .map(|s| {
            let kind = if s.origin == SymOrigin::Table {
                'T'
            } else {
                't'
            };
            (s.addr, kind, s.mangled)
        })
        .collect();
    let nm: Vec<(u64, char, &str)> = syms.iter().map(|(a, k, n)| (*a, *k, n.as_str())).collect();
    Some(write(exe.lowpc..exe.highpc, &nm))
}

/// `vmlinux.syms` for `profile`: the running kernel's text symbols that
/// the profile needs (see `symelf::used_by`), as an ELF whose `.text`
/// covers the histogram.
pub fn vmlinux_syms(running: &KernelSymbols, profile: &GmonOut) -> Vec<u8> {
    let list: Vec<(u64, char, &str)> = running
        .text_symbols()
        .iter()
        .map(|s| (s.addr, s.kind, s.name.as_str()))
        .collect();
    let text = profile
        .histograms
        .first()
        .map_or(0..0, |h| h.low_pc..h.high_pc);
    write(text, &symelf::used_by(&list, profile))
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_formats::gmon::{Arc, Histogram};
    use profdev_symbolize::KSym;

    #[test]
    fn symbols_go_beside_the_profile() {
        assert_eq!(
            symbols_path(Path::new("out/gmon.out"), Path::new("/bin/prog")),
            PathBuf::from("out/prog.syms")
        );
        assert_eq!(
            symbols_path(Path::new("gmon.out"), Path::new("/")),
            PathBuf::from("a.out.syms")
        );
    }

    #[test]
    fn an_unstripped_executable_needs_no_symbols_file() {
        let me = Program::open(&std::env::current_exe().unwrap()).unwrap();
        assert!(exe_symbols_elf(&me).is_none());
    }

    #[test]
    fn vmlinux_syms_names_the_functions_the_profile_needs() {
        let lo = 0xffff_ffff_8100_0000u64;
        let k = |off: u64, name: &str| KSym {
            addr: lo + off,
            kind: 'T',
            name: name.into(),
            module: None,
        };
        let running = KernelSymbols::from_symbols(vec![
            k(0, "_stext"),
            k(0x100, "a"),
            k(0x200, "b"),
            k(0x300, "c"),
            k(0x1000, "_etext"),
        ]);
        let profile = GmonOut {
            histograms: vec![Histogram {
                low_pc: lo,
                high_pc: lo + 0x1000,
                prof_rate: 100,
                dimension: profdev_formats::gmon::SECONDS,
                dimension_abbrev: b's',
                bins: vec![0; 0x400],
            }],
            arcs: vec![Arc {
                from_pc: lo + 0x110,
                self_pc: lo + 0x200,
                count: 3,
            }],
            ..GmonOut::default()
        };
        let elf = vmlinux_syms(&running, &profile);
        use object::{Object, ObjectSymbol};
        let f = object::File::parse(&*elf).unwrap();
        let names: Vec<String> = f
            .symbols()
            .filter_map(|s| s.name().ok().map(String::from))
            .filter(|n| !n.is_empty())
            .collect();
        assert!(names.iter().any(|n| n == "a"), "{names:?}");
        assert!(names.iter().any(|n| n == "b"), "{names:?}");
    }
}
