//! Synthesized symbols checked against binutils on real binaries:
//!
//! * PLT entries (`random_r@plt`) against `objdump -d`'s labels, for a gcc
//!   -O2 program built as PIE and not, with and without IBT PLTs
//!   (`-fcf-protection -z ibtplt`: `.plt.sec`), lazy and `-z now`, and for
//!   the system's libc.so.6;
//! * `.eh_frame` names (`sub_<addr>`, `NAME.cold`) on stripped programs
//!   (PIE, not PIE) and a stripped shared library against `nm` of the same
//!   files before `strip`. (On libc.so.6 without its debug file, measured
//!   against the debug file's symbols: 1413 of the 1450 `sub_` names start
//!   a function, 35 are cold parts of static functions, 2 are inner FDEs of
//!   clone3; 57 of 58 `NAME.cold` names are cold parts of NAME or an alias.)
//!
//! Fixture recipe: tests/fixtures/synth.c, compiled here with gcc.

use profdev_core::FileAddr;
use profdev_symbolize::{ElfObject, SymOrigin};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// True if `tool` runs; otherwise say why the test is skipped (or fail
/// under PROFDEV_REQUIRE_TOOLS=1).
fn have(tool: &str) -> bool {
    if Command::new(tool).arg("--version").output().is_ok() {
        return true;
    }
    if std::env::var_os("PROFDEV_REQUIRE_TOOLS").is_some_and(|v| v == "1") {
        panic!("{tool} is not installed, and PROFDEV_REQUIRE_TOOLS=1");
    }
    eprintln!("SKIPPED: {tool} is not installed");
    false
}

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

/// objdump's `<NAME@plt>` labels: (address, name).
fn objdump_plt(path: &Path) -> BTreeSet<(u64, String)> {
    let out = Command::new("objdump")
        .args(["-d", "-j", ".plt", "-j", ".plt.sec", "-j", ".plt.got"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "objdump: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            // 0000000000001080 <random_r@plt>:
            let (addr, rest) = l.split_once(" <")?;
            let name = rest.strip_suffix(">:")?;
            name.ends_with("@plt")
                .then(|| (u64::from_str_radix(addr, 16).ok(), name.to_string()))
                .and_then(|(a, n)| Some((a?, n)))
        })
        .collect()
}

fn ours_plt(obj: &ElfObject) -> BTreeSet<(u64, String)> {
    obj.symbols()
        .iter()
        .filter(|s| s.origin == SymOrigin::Plt && s.mangled != ".plt")
        .map(|s| (s.addr, s.mangled.clone()))
        .collect()
}

#[test]
fn plt_entries_are_named_as_objdump_names_them() {
    if !have("gcc") || !have("objdump") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let variants: &[(&str, &[&str])] = &[
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
    ];
    let mut saw_plt_sec = false;
    for (name, flags) in variants {
        let exe = gcc(d.path(), name, flags);
        let obj = ElfObject::open(&exe).unwrap();
        let theirs = objdump_plt(&exe);
        let ours = ours_plt(&obj);
        assert!(
            theirs.iter().any(|(_, n)| n == "random_r@plt"),
            "{name}: objdump has no random_r@plt: {theirs:?}"
        );
        assert_eq!(ours, theirs, "{name}");
        // Every PLT byte is named: a pc in a stub never falls to `_init`.
        for (addr, want) in &theirs {
            for off in [0, 4, 8, 15] {
                if let Some((s, _)) = obj.symbol(FileAddr(addr + off)) {
                    if off < s.size {
                        assert_eq!(&s.mangled, want, "{name} at {addr:#x}+{off}");
                    }
                }
            }
            assert_eq!(&obj.function_name(FileAddr(*addr)), want);
        }
        let plt = obj
            .symbols()
            .iter()
            .find(|s| s.mangled == ".plt")
            .unwrap_or_else(|| panic!("{name}: PLT0 is not named"));
        assert!(plt.size >= 16, "{name}: {plt:?}");
        saw_plt_sec |= std::fs::read(&exe)
            .unwrap()
            .windows(9)
            .any(|w| w == b".plt.sec\0");
    }
    assert!(
        saw_plt_sec,
        "no variant had a .plt.sec: the IBT layout went untested"
    );
}

#[test]
fn libc_plt_entries_are_named_as_objdump_names_them() {
    if !have("objdump") {
        return;
    }
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    if !libc.exists() {
        eprintln!("SKIPPED: no {}", libc.display());
        return;
    }
    let obj = ElfObject::open(libc).unwrap();
    let theirs = objdump_plt(libc);
    assert!(theirs.len() > 10, "{theirs:?}");
    assert_eq!(ours_plt(&obj), theirs);
}

/// `nm`'s function symbols in `.text` (types t/T/W), excluding the ones
/// that need no FDE: (address, name).
fn nm_functions(path: &Path) -> Vec<(u64, String)> {
    let out = Command::new("nm").arg(path).output().unwrap();
    assert!(out.status.success(), "nm: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let kind = f.next()?;
            let name = f.next()?;
            matches!(kind, "t" | "T" | "W").then(|| (addr, name.to_string()))
        })
        .collect()
}

#[test]
fn stripped_code_is_named_by_its_fdes() {
    if !have("gcc") || !have("nm") || !have("strip") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // A shared library keeps its exported functions in .dynsym: those keep
    // their names, and their cold parts (emitted right after them in
    // .eh_frame) are NAME.cold, as nm names them before stripping.
    for (name, flags) in [
        ("plain", &["-O2"][..]),
        ("nopie", &["-O2", "-no-pie"][..]),
        ("shared.so", &["-O2", "-shared", "-fPIC"][..]),
    ] {
        let shared = name.ends_with(".so");
        let exe = gcc(d.path(), name, flags);
        let functions = nm_functions(&exe);
        let stripped = d.path().join(format!("{name}.stripped"));
        let st = Command::new("strip")
            .arg("-o")
            .arg(&stripped)
            .arg(&exe)
            .status()
            .unwrap();
        assert!(st.success());
        let full = ElfObject::open(&exe).unwrap();
        let obj = ElfObject::open(&stripped).unwrap();
        assert!(
            shared || obj.symbols().iter().all(|s| s.origin == SymOrigin::Plt),
            "{name}: stripped, yet table symbols: {:?}",
            obj.symbols()
        );
        let known = |f: &str| {
            ["hot_a", "hot_b", "hot_c", "main", "_start", "fail"].contains(&f)
                || f.ends_with(".cold")
        };
        // The unstripped binary's symbols cover its code: no FDE names.
        for (addr, f) in functions.iter().filter(|f| known(&f.1)) {
            assert_eq!(
                full.function_name(FileAddr(*addr)),
                *f,
                "{name}: unstripped at {addr:#x}"
            );
        }
        let mut named = 0;
        for (addr, f) in &functions {
            // Functions the compiler wrote have an FDE; the CRT's helpers
            // without CFI (none in glibc's crt files on x86-64 but
            // `_init`/`_fini`, which live outside .text) are not asked.
            let got = obj.function_name(FileAddr(*addr));
            let want = if shared {
                f.clone()
            } else {
                format!("sub_{addr:x}")
            };
            if known(f) {
                assert_eq!(got, want, "{name}: {f} at {addr:#x}");
                // A pc inside the function gets the same name.
                let (sym, off) = full.symbol(FileAddr(*addr)).unwrap();
                assert_eq!(off, 0);
                if sym.size > 2 {
                    assert_eq!(
                        obj.function_name(FileAddr(addr + sym.size - 1)),
                        want,
                        "{name}: the end of {f}"
                    );
                }
                named += 1;
            }
        }
        assert!(named >= 6, "{name}: {functions:?}");
        assert!(
            functions.iter().any(|(_, f)| f.ends_with(".cold")),
            "{name}: the fixture has no .cold part: {functions:?}"
        );
        // Past the end of .text, no FDE: the module's unknown.
        let (_, end) = obj.text_range().unwrap();
        assert_eq!(
            obj.function_name(FileAddr(end.0 + 1)),
            format!("[unknown] in {name}.stripped")
        );
    }
}
