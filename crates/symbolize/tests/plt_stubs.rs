//! PLT stubs named at known addresses, without binutils: the deterministic
//! test of what a sample in a stub is charged to (`random_r@plt`, never
//! `_init`). The end-to-end profiling tests cannot assert it: whether a
//! timer sample lands in a one-instruction stub depends on the machine and
//! its load.
//!
//! The oracle reads the ELF file itself (the `object` crate's parsing,
//! none of the symbolizer's code): every direct `call rel32` in the
//! program's functions whose target lies in `.plt`, `.plt.sec` or
//! `.plt.got` is a call through a stub; the stub's `jmp *disp32(%rip)`
//! (after `endbr64` and a `bnd` prefix with IBT) names its GOT slot, and
//! the dynamic relocation of that slot names the function. Every byte of
//! each stub found so must then be named `NAME@plt` by the symbolizer.
//!
//! Fixture recipe: tests/fixtures/synth.c (which calls `random_r`,
//! `initstate_r`, `fprintf`... through the PLT), compiled here with gcc in
//! each PLT layout: PIE and not, with and without IBT (`.plt.sec`), lazy
//! and `-z now`, and as prof's tests build their workload (`-g -O1`).

use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget};
use profdev_core::FileAddr;
use profdev_symbolize::{ElfObject, SymOrigin};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/synth.c")
}

fn gcc(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let out = Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(fixture())
        .output()
        .unwrap();
    assert!(out.status.success(), "gcc {flags:?}: {out:?}");
    exe
}

/// A PLT stub found from a call site: its address, its length, and the
/// function its GOT slot's relocation names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stub {
    addr: u64,
    len: u64,
    name: String,
}

/// The stubs the program's functions call, by name, read from the file's
/// bytes, sections, symbols and dynamic relocations only.
fn stubs_called(bytes: &[u8]) -> BTreeMap<String, Stub> {
    let file = object::File::parse(bytes).unwrap();
    // GOT slot -> the name of the symbol its relocation binds.
    let dynsyms: HashMap<usize, String> = file
        .dynamic_symbols()
        .map(|s| (s.index().0, s.name().unwrap_or("").to_string()))
        .collect();
    let slots: HashMap<u64, String> = file
        .dynamic_relocations()
        .into_iter()
        .flatten()
        .filter_map(|(at, r)| match r.target() {
            RelocationTarget::Symbol(i) => Some((at, dynsyms.get(&i.0)?.clone())),
            _ => None,
        })
        .filter(|(_, n)| !n.is_empty())
        .collect();
    let plt: Vec<(String, u64, Vec<u8>)> = [".plt", ".plt.sec", ".plt.got"]
        .iter()
        .filter_map(|n| {
            let s = file.section_by_name(n)?;
            Some((n.to_string(), s.address(), s.data().ok()?.to_vec()))
        })
        .collect();
    assert!(!plt.is_empty(), "no PLT section at all");
    // The stub at `target`: where its `jmp *disp32(%rip)` points.
    let stub_at = |target: u64| -> Option<Stub> {
        let (sec, base, data) = plt
            .iter()
            .find(|(_, a, d)| target >= *a && target < a + d.len() as u64)?;
        let code = &data[(target - base) as usize..];
        let mut at = 0;
        if code.starts_with(&ENDBR64) {
            at += 4;
        }
        if code.get(at) == Some(&0xf2) {
            at += 1; // bnd
        }
        if code.get(at..at + 2)? != [0xff, 0x25] {
            return None;
        }
        let disp = i32::from_le_bytes(code.get(at + 2..at + 6)?.try_into().ok()?);
        let slot = (target + at as u64 + 6).wrapping_add(disp as i64 as u64);
        // Entries of .plt and .plt.sec are 16 bytes; .plt.got's 8, or 16
        // with IBT.
        let len = if sec == ".plt.got" && !code.starts_with(&ENDBR64) {
            8
        } else {
            16
        };
        Some(Stub {
            addr: target,
            len,
            name: slots.get(&slot)?.clone(),
        })
    };
    let text = file.section_by_name(".text").unwrap();
    let text_data = text.data().unwrap();
    let mut out = BTreeMap::new();
    for f in file
        .symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text)
    {
        let (lo, hi) = (f.address(), f.address() + f.size());
        if lo < text.address() || hi > text.address() + text_data.len() as u64 {
            continue;
        }
        let body = &text_data[(lo - text.address()) as usize..(hi - text.address()) as usize];
        for (i, w) in body.windows(5).enumerate() {
            if w[0] != 0xe8 {
                continue;
            }
            let rel = i32::from_le_bytes(w[1..5].try_into().unwrap());
            let target = (lo + i as u64 + 5).wrapping_add(rel as i64 as u64);
            if let Some(s) = stub_at(target) {
                out.insert(s.name.clone(), s);
            }
        }
    }
    out
}

#[test]
fn every_byte_of_a_called_plt_stub_is_named_name_at_plt() {
    if !profdev_testkit::tools("PLT stubs at known addresses", &["gcc"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let variants: &[(&str, &[&str])] = &[
        ("prof-work", &["-g", "-O1"]),
        ("pie", &["-O2", "-fcf-protection=none"]),
        ("pie-cet", &["-O2", "-fcf-protection"]),
        ("pie-ibtplt", &["-O2", "-fcf-protection", "-Wl,-z,ibtplt"]),
        (
            "pie-ibtplt-now",
            &["-O2", "-fcf-protection", "-Wl,-z,ibtplt,-z,now"],
        ),
        ("nopie", &["-O2", "-no-pie", "-fcf-protection=none"]),
        (
            "nopie-ibtplt",
            &["-O2", "-no-pie", "-fcf-protection", "-Wl,-z,ibtplt"],
        ),
        ("pie-now", &["-O2", "-Wl,-z,now"]),
        ("pie-lazy", &["-O2", "-Wl,-z,lazy"]),
    ];
    let mut sections = std::collections::BTreeSet::new();
    for (name, flags) in variants {
        let exe = gcc(d.path(), name, flags);
        let bytes = std::fs::read(&exe).unwrap();
        let stubs = stubs_called(&bytes);
        let random_r = stubs
            .get("random_r")
            .unwrap_or_else(|| panic!("{name}: no call through random_r's stub: {stubs:?}"));
        let file = object::File::parse(&*bytes).unwrap();
        sections.insert(
            file.sections()
                .find(|s| random_r.addr >= s.address() && random_r.addr < s.address() + s.size())
                .and_then(|s| s.name().ok().map(str::to_string))
                .unwrap(),
        );
        let init = file
            .symbols()
            .find(|s| s.name() == Ok("_init"))
            .map(|s| s.address());
        eprintln!(
            "{name}: {}",
            stubs
                .values()
                .map(|s| format!("{}@plt at {:#x}", s.name, s.addr))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let obj = ElfObject::open(&exe).unwrap();
        for s in stubs.values() {
            let want = format!("{}@plt", s.name);
            for pc in s.addr..s.addr + s.len {
                let (sym, off) = obj
                    .symbol(FileAddr(pc))
                    .unwrap_or_else(|| panic!("{name}: {pc:#x} in {want} has no symbol"));
                assert_eq!(sym.mangled, want, "{name}: {pc:#x}");
                assert_eq!(sym.origin, SymOrigin::Plt, "{name}: {pc:#x}");
                assert_eq!((sym.addr, off), (s.addr, pc - s.addr), "{name}: {pc:#x}");
                assert_eq!(obj.function_name(FileAddr(pc)), want, "{name}: {pc:#x}");
                assert_ne!(Some(sym.addr), init, "{name}: {pc:#x} charged to _init");
            }
        }
    }
    // The layouts met: the lazy PLT and IBT's second PLT at least.
    assert!(
        sections.contains(".plt") && sections.contains(".plt.sec"),
        "random_r's stub was only in {sections:?}"
    );
}
