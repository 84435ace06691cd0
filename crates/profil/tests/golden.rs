//! Golden files for the deterministic outputs: the index table of spec §4.7
//! rendered by our three formulas, and GNU gprof's report on a gmon.out from
//! our writer (spec §3.8 TV-G1).
//!
//! `PROFDEV_BLESS=1 cargo test -p profdev-profil --test golden` rewrites the
//! files under tests/golden; review the diff against the spec before
//! committing.

mod common;
#[path = "common/tv_g1.rs"]
mod tv_g1;

use std::path::{Path, PathBuf};
use std::process::Command;

use profdev_profil::index::{Formula, Tick};

fn golden(name: &str) -> PathBuf {
    Path::new(common::MANIFEST_DIR)
        .join("tests/golden")
        .join(name)
}

fn check_golden(name: &str, actual: &str) {
    profdev_testkit::golden(&golden(name), actual.as_bytes());
}

fn show(t: Tick) -> String {
    match t {
        Tick::Cell(i) => format!("{i}"),
        Tick::Ignored => "ignored".into(),
        Tick::Off => "off".into(),
        Tick::Rejected => "EINVAL".into(),
    }
}

/// Spec §4.7's rows, then a few more (64-bit distances, buffer ends, bufsiz 0).
#[test]
fn index_table() {
    const OFFSET: usize = 0x40_0000;
    const BIG: usize = 1 << 30;
    let rows: &[(i128, u32, usize)] = &[
        (0, 0x10000, BIG),
        (3, 0xFFFF, BIG),
        (3, 0x10000, BIG),
        (7, 0x5555, BIG),
        (8, 0x4000, BIG),
        (15, 0x4000, BIG),
        (16, 0x4000, BIG),
        (32769, 0xFFFF, BIG),
        (65535, 2, BIG),
        (65536, 2, BIG),
        (100, 1, BIG),
        (100, 0, BIG),
        (-1, 0x8000, BIG),
        (3, 0xFFFF, 0),
        (100, 0, 0),
        (32769, 0xFFFF, 0),
        // extra rows
        (9, 0xFFFF, 10),
        (11, 0xFFFF, 10),
        (9, 0xFFFF, 9),
        (1, 0xFFFF, BIG),
        (2, 0xFFFF, BIG),
        (0x1_0000_0000, 0xFFFF, usize::MAX),
        (0x7fff_ffff_ffff, 0x8000, usize::MAX),
        (40, 0x18000, BIG),
        (40, 0x8000, BIG),
    ];
    let mut out = String::new();
    out.push_str(
        "# profil(2) cell index for pc = offset + d (offset 0x400000); spec 4.7 rows first\n",
    );
    out.push_str(&format!(
        "{:>16} {:>8} {:>20} {:>12} {:>12} {:>12}\n",
        "d", "scale", "bufsiz", "svr4", "bsd", "glibc"
    ));
    for &(d, scale, bufsiz) in rows {
        let pc = (OFFSET as i128 + d) as usize;
        let cells: Vec<String> = Formula::ALL
            .iter()
            .map(|f| show(f.tick(pc, OFFSET, scale, bufsiz)))
            .collect();
        out.push_str(&format!(
            "{:>16} {:>8} {:>20} {:>12} {:>12} {:>12}\n",
            d,
            format!("{scale:#x}"),
            bufsiz,
            cells[0],
            cells[1],
            cells[2]
        ));
    }
    check_golden("index_table.txt", &out);
}

/// Assemble the spec's fixture ELF (§3.8): `_start`, `leaf`, `mid`, `main`.
fn fake_elf(dir: &Path) -> PathBuf {
    let src = Path::new(common::MANIFEST_DIR).join("tests/fixtures/fake.s");
    let obj = dir.join("fake.o");
    let exe = dir.join("fake");
    let st = Command::new("as")
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .status()
        .expect("run as (binutils)");
    assert!(st.success());
    let st = Command::new("ld")
        .args(["-Ttext=0x401000", "-e", "_start", "-o"])
        .arg(&exe)
        .arg(&obj)
        .status()
        .expect("run ld (binutils)");
    assert!(st.success());
    exe
}

/// The GNU gmon.out writer monstartup/_mcleanup use (profdev_formats') on
/// the spec's TV-G1 payload; GNU gprof's report
/// must be the spec's (golden file copied from spec §3.8).
#[test]
fn gprof_reads_our_gmon_out_tv_g1() {
    let dir = common::tempdir();
    let exe = fake_elf(dir.path());
    let bytes = tv_g1::tv_g1();
    assert_eq!(bytes.len(), 892);
    let gmon = dir.path().join("v_gnu.out");
    std::fs::write(&gmon, &bytes).unwrap();
    let out = Command::new("gprof")
        .arg("-b")
        .arg(&exe)
        .arg(&gmon)
        .output()
        .expect("run gprof (binutils)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_golden("tv_g1_gprof.txt", &String::from_utf8_lossy(&out.stdout));
}
