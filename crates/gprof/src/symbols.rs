//! The symbols files gprof reads in place of a binary: an ELF whose
//! `.text` covers the histogram and whose symbol table names the functions
//! (`profdev_formats::symelf`). One writer for all of them: a stripped
//! CMD's `CMD.syms` (its `.dynsym` functions and those its `.eh_frame`
//! delimits), the `CMD.syms` of a CMD whose function names gprof would
//! drop, and kgmon's `vmlinux.syms` (the running kernel's text symbols
//! that the profile needs).
//!
//! # Names gprof drops
//!
//! GNU gprof (binutils `corefile.c`, `core_sym_class`) keeps every global
//! and weak text symbol, but leaves out a *local* one (nm `t`) whose name
//! holds a `$` (Rust's legacy mangling: `_ZN…$LT$…$GT$…`, closures) or a
//! `.` not followed by digits, bar `.clone.N` and `.constprop.N` (GCC's
//! `.isra.0`, `.part.0`, `.cold`, LTO's `.lto_priv.0`); the time of such a
//! function is charged to the function before it (`frame_dummy` in a Rust
//! program). Its scan of a name that ends in `.N` also runs on into the
//! next name of the string table, so even a kept `.constprop.0` can be
//! dropped by its neighbour ([`gprof_drops_local`] says what it drops).
//!
//! So in every file written here a local function whose name holds a `.`
//! or a `$` is written as a *global* symbol under its own name, at its
//! address with its size: gprof then keeps it, prints the name unchanged
//! and (with its default `--demangle`) demangles it. No name is rewritten,
//! so none can collide, and the reverse rule is the identity (only the
//! binding changed: gprof `-a`, which hides static functions, shows these).
//! Where another symbol written as it is has the same address (an alias),
//! the local is left out: gprof names that address by the other, as it did.

use crate::Program;
use profdev_formats::gmon::GmonOut;
use profdev_formats::symelf::{self, Binding, Symbol};
use profdev_symbolize::{KernelSymbols, SymOrigin};
use std::collections::HashSet;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Does GNU gprof leave out a local text symbol (nm `t`) named `name`?
/// binutils' `core_sym_class`: an empty name, any `$`, or a `.` group that
/// is not digits (after an optional `clone.` or `constprop.`), as in
/// `f.isra.0`, `f.part.0`, `f.cold`, `f.lto_priv.0`; `f.constprop.0`,
/// `f.clone.3` and `f.12` are kept (but see the module doc: gprof's scan
/// then runs into the next name of the string table).
pub fn gprof_drops_local(name: &str) -> bool {
    let b = name.as_bytes();
    if b.is_empty() {
        return true;
    }
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' {
            return true;
        }
        while b.get(i) == Some(&b'.') {
            let rest = &b[i..];
            if rest.len() > 7 && rest.starts_with(b".clone.") {
                i += 6;
            } else if rest.len() > 11 && rest.starts_with(b".constprop.") {
                i += 10;
            }
            let mut digit = false;
            i += 1;
            while i < b.len() {
                if digit && b[i] == b'.' {
                    break;
                } else if b[i].is_ascii_digit() {
                    digit = true;
                } else {
                    return true;
                }
                i += 1;
            }
        }
        i += 1;
    }
    false
}

/// A symbol as [`for_gprof`] sees it.
trait GprofSymbol {
    fn addr(&self) -> u64;
    fn name(&self) -> &str;
    fn local(&self) -> bool;
    fn make_global(&mut self);
}

impl GprofSymbol for Symbol {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn local(&self) -> bool {
        self.binding == Binding::Local
    }
    fn make_global(&mut self) {
        self.binding = Binding::Global;
    }
}

/// `(address, nm type, name)`: `T` global, `W`/`w` weak, others local
/// (as `symelf::from_nm` writes them).
impl GprofSymbol for (u64, char, &str) {
    fn addr(&self) -> u64 {
        self.0
    }
    fn name(&self) -> &str {
        self.2
    }
    fn local(&self) -> bool {
        !matches!(self.1, 'T' | 'W' | 'w')
    }
    fn make_global(&mut self) {
        self.1 = 'T';
    }
}

/// Would gprof misread this symbol as written in the binary: a local whose
/// name holds `.` or `$` (see the module doc)?
fn misread<S: GprofSymbol>(s: &S) -> bool {
    s.local() && s.name().contains(['.', '$'])
}

/// `symbols` as they are written for gprof (module doc): each local whose
/// name holds `.` or `$` made global, or left out where a symbol written
/// as it is has its address. Also the names gprof would have dropped
/// ([`gprof_drops_local`]) that it now keeps.
fn for_gprof<S: GprofSymbol>(mut symbols: Vec<S>) -> (Vec<S>, Vec<String>) {
    let as_is: HashSet<u64> = symbols
        .iter()
        .filter(|s| !misread(*s))
        .map(GprofSymbol::addr)
        .collect();
    let mut kept = Vec::new();
    symbols.retain_mut(|s| {
        if !misread(s) {
            return true;
        }
        if as_is.contains(&s.addr()) {
            return false;
        }
        if gprof_drops_local(s.name()) {
            kept.push(s.name().to_string());
        }
        s.make_global();
        true
    });
    (symbols, kept)
}

/// Up to two of `names`, demangled as profdev's reports show them, and
/// how many more: `a, b and 3 more`.
pub(crate) fn examples(names: &[String]) -> String {
    let mut s = names
        .iter()
        .take(2)
        .map(|n| profdev_symbolize::elf::demangle(n))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > 2 {
        s.push_str(&format!(" and {} more", names.len() - 2));
    }
    s
}

/// The symbols ELF over `text` of `(address, nm type, name)` symbols.
fn write(text: Range<u64>, syms: &[(u64, char, &str)]) -> Vec<u8> {
    symelf::from_nm(text, syms)
}

/// Where CMD's symbols go: `CMD.syms` beside gmon.out.
pub fn symbols_path(output: &Path, exe: &Path) -> PathBuf {
    let name = exe
        .file_name()
        .map_or_else(|| "a.out".into(), |n| n.to_string_lossy().into_owned());
    output.with_file_name(format!("{name}.syms"))
}

/// Why `CMD.syms` is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// CMD has no symbol table: its functions come from `.dynsym` and
    /// `.eh_frame`.
    Stripped,
    /// gprof would drop these names of CMD's symbol table
    /// ([`gprof_drops_local`]): they are global symbols in the file.
    Names(Vec<String>),
}

/// A symbols ELF for CMD and why it is needed.
pub struct SymbolsFile {
    /// The ELF's bytes.
    pub elf: Vec<u8>,
    /// Why gprof needs it in place of CMD.
    pub reason: Reason,
}

/// The symbols ELF gprof reads in place of CMD's executable, when it
/// cannot read the executable itself: for a stripped one (as `kgmon -p`
/// writes `vmlinux.syms`), its `.dynsym` functions and the functions its
/// `.eh_frame` FDEs delimit; for one whose symbol table has a function
/// gprof would drop ([`gprof_drops_local`]), the table's code symbols in
/// `.text` with their addresses and sizes, written as the module doc says.
/// `None` when gprof reads the executable as it is.
pub fn exe_symbols_elf(exe: &Program) -> Option<SymbolsFile> {
    if !exe.stripped {
        return table_symbols_elf(exe);
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
    let (nm, _) = for_gprof(nm);
    Some(SymbolsFile {
        elf: write(exe.lowpc..exe.highpc, &nm),
        reason: Reason::Stripped,
    })
}

/// The symbols file of an executable with a symbol table, when gprof
/// would drop one of its functions.
fn table_symbols_elf(exe: &Program) -> Option<SymbolsFile> {
    if !exe
        .table
        .iter()
        .any(|s| s.binding == Binding::Local && gprof_drops_local(&s.name))
    {
        return None;
    }
    let (mut syms, dropped) = for_gprof(exe.table.clone());
    // gprof ends each function at the next symbol: one at the end of the
    // histogram ends the last (in the binary, `_fini` or the like does).
    if !syms.iter().any(|s| s.addr == exe.highpc) {
        syms.push(Symbol {
            addr: exe.highpc,
            size: 0,
            name: "_etext".into(),
            binding: Binding::Global,
        });
    }
    Some(SymbolsFile {
        elf: symelf::write(exe.lowpc..exe.highpc, &syms),
        reason: Reason::Names(dropped),
    })
}

/// `vmlinux.syms` for `profile`: the running kernel's text symbols that
/// the profile needs (see `symelf::used_by`), as an ELF whose `.text`
/// covers the histogram, written as the module doc says (a `.isra.0`,
/// `.cold` function a global symbol under its own name).
pub fn vmlinux_syms(running: &KernelSymbols, profile: &GmonOut) -> Vec<u8> {
    vmlinux_syms_named(running, profile).0
}

/// [`vmlinux_syms`], and the names in it that gprof would have dropped
/// ([`gprof_drops_local`]) as the kernel has them.
pub fn vmlinux_syms_named(running: &KernelSymbols, profile: &GmonOut) -> (Vec<u8>, Vec<String>) {
    let list: Vec<(u64, char, &str)> = running
        .text_symbols()
        .iter()
        .map(|s| (s.addr, s.kind, s.name.as_str()))
        .collect();
    let (list, dropped) = for_gprof(list);
    let dropped: HashSet<String> = dropped.into_iter().collect();
    let text = profile
        .histograms
        .first()
        .map_or(0..0, |h| h.low_pc..h.high_pc);
    let used = symelf::used_by(&list, profile);
    let kept = used
        .iter()
        .filter(|s| dropped.contains(s.2))
        .map(|s| s.2.to_string())
        .collect();
    (write(text, &used), kept)
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
    fn a_rust_executable_needs_a_symbols_file() {
        // The test binary: Rust's legacy mangling puts `$` in local names.
        let me = Program::open(&std::env::current_exe().unwrap()).unwrap();
        let file = exe_symbols_elf(&me).unwrap();
        let Reason::Names(names) = &file.reason else {
            panic!("{:?}", file.reason)
        };
        assert!(names.iter().all(|n| gprof_drops_local(n)), "{names:?}");
        assert!(names.iter().any(|n| n.contains('$')), "{names:?}");
    }

    #[test]
    fn the_names_gprof_drops() {
        for kept in [
            "main",
            "f.constprop.0",
            "f.clone.3",
            "f.12",
            "f.constprop.0.1",
            "f.clone.1.constprop.2",
            "_ZN3foo3bar17h0123456789abcdefE",
        ] {
            assert!(!gprof_drops_local(kept), "{kept}");
        }
        for dropped in [
            "",
            "_ZN4core3ptr13drop_in_place$LT$u8$GT$17h0123456789abcdefE",
            "f.isra.0",
            "f.part.0",
            "f.cold",
            "f.lto_priv.0",
            "f.constprop.0.isra.0",
            "f.constprop.x",
            "f.clone.",
            "f..1",
        ] {
            assert!(gprof_drops_local(dropped), "{dropped}");
        }
    }

    #[test]
    fn locals_with_dots_or_dollars_become_global_unless_aliased() {
        let list: Vec<(u64, char, &str)> = vec![
            (0x10, 't', "a"),
            (0x20, 't', "b.isra.0"),
            (0x30, 't', "c.constprop.0"),
            (0x40, 'T', "d"),
            (0x40, 't', "d.part.0"),
            (0x50, 'T', "e.cold"),
            (0x60, 'W', "f$g"),
        ];
        let (out, kept) = for_gprof(list);
        assert_eq!(
            out,
            [
                (0x10, 't', "a"),
                (0x20, 'T', "b.isra.0"),
                (0x30, 'T', "c.constprop.0"),
                (0x40, 'T', "d"),
                (0x50, 'T', "e.cold"),
                (0x60, 'W', "f$g"),
            ]
        );
        assert_eq!(kept, ["b.isra.0"]);
        assert_eq!(
            examples(&[
                "_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17haccf132067295e48E".into(),
                "f.isra.0".into(),
                "g.cold".into(),
            ]),
            "std::rt::lang_start::{{closure}}, f.isra.0 and 1 more"
        );
        // Nothing to change: the same list, the same bytes.
        let plain: Vec<(u64, char, &str)> = vec![(0x10, 't', "a"), (0x20, 'T', "b")];
        assert_eq!(for_gprof(plain.clone()), (plain, vec![]));
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
