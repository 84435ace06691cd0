//! The prof device in a system-wide session (empty module list), checked
//! with binutils addr2line.
//!
//! Fixture recipe: `work.c` in prof_fixture/mod.rs, compiled by the test.
//! The device runs system wide, so other processes' modules show up too;
//! the test looks only at the workload's executable and libc.

mod common;
mod prof_fixture;
use common::*;
use prof_fixture::*;
use profdev_dev::prof::Prof;
use profdev_dev::tree::walk;
use profdev_dev::{Dev, Engine, OpenMode, Qid};
use std::process::Command;
use std::sync::Arc;

fn read_dev(dev: &dyn Dev) -> Vec<Module> {
    let read = |dir: Qid, name: &str, size: u32| -> Vec<Vec<u8>> {
        let f = walk(dev, dir, name).unwrap();
        let mut c = dev.open(f.qid, OpenMode::Read).unwrap();
        let mut reads = Vec::new();
        let mut offset = 0;
        loop {
            let b = dev.read(&mut c, offset, size).unwrap();
            if b.is_empty() {
                return reads;
            }
            offset += b.len() as u64;
            assert!(offset < 1 << 24, "{name} does not end");
            reads.push(b);
        }
    };
    dev.gen(Qid::ROOT)
        .unwrap()
        .into_iter()
        .filter(|e| e.qid.is_dir())
        .map(|d| Module {
            name: String::from_utf8(read(d.qid, "name", 4096).concat())
                .unwrap()
                .trim_end()
                .into(),
            path: String::from_utf8(read(d.qid, "path", 4096).concat())
                .unwrap()
                .trim_end()
                .into(),
            pairs: read(d.qid, "histogram", 64)
                .iter()
                .map(|p| profdev_formats::prof_histogram::parse_pair(p).unwrap())
                .collect(),
        })
        .collect()
}

#[test]
fn system_wide_session_in_process() {
    if !privileged("prof system-wide session", can_sample_system()) {
        return;
    }
    let d = tempdir();
    let work = compile_work(d.path(), "work-inproc");
    let dev = Prof::new(Engine::new(Arc::new(profdev_sample::PerfFactory::new())));
    let ctl = |msg: &str| {
        let f = walk(&dev, Qid::ROOT, "ctl").unwrap();
        let mut c = dev.open(f.qid, OpenMode::Write).unwrap();
        dev.write(&mut c, 0, msg.as_bytes()).unwrap();
    };
    ctl("module\n");
    ctl("interval 1\n");
    ctl("start\n");
    let st = Command::new(&work).output().unwrap();
    assert!(st.status.success());
    ctl("stop\n");
    let modules = read_dev(&dev);
    ctl("end\n");
    check_modules(&modules, &work);
}

/// `profdev prof -f -- ./work`, which calls random_r through its PLT stub:
/// nothing is charged to `_init` or to `??`, and the rows are the
/// program's functions. Whether a sample lands in the one-instruction stub
/// (a `random_r@plt()` row) depends on the machine and its load (one
/// machine gets none, as perf does there), so it is not required; the name
/// of a pc in a stub is tested at known addresses (profdev-symbolize's
/// tests/plt_stubs.rs).
#[test]
fn prof_command_charges_no_plt_stub_to_init() {
    if !privileged("profdev prof on the PLT fixture", can_sample_system()) {
        return;
    }
    let d = tempdir();
    let work = compile_work(d.path(), "work-plt");
    let out = run(profdev()
        .args(["prof", "-f", "-s", "1", "-o", "-", "--"])
        .arg(&work));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let module = stdout
        .split("\nModule: ")
        .find(|m| m.starts_with("work-plt("))
        .unwrap_or_else(|| panic!("no module for work-plt: {stdout}"));
    let rows: Vec<&str> = module
        .lines()
        .filter_map(|l| l.rsplit('\t').next().filter(|_| l.contains('\t')))
        .collect();
    assert!(
        rows.contains(&"hot()") && rows.contains(&"main()"),
        "{module}"
    );
    assert!(
        !rows.contains(&"_init()"),
        "a PLT stub charged to _init: {module}"
    );
    assert!(!rows.contains(&"??()"), "{module}");
    // Every row is one of the program's functions, its stub if sampled,
    // or its startup code (a sample or two at most, see check_modules).
    let others: Vec<&&str> = rows
        .iter()
        .filter(|r| !["hot()", "main()", "random_r@plt()"].contains(r))
        .collect();
    assert!(others.len() <= 3, "{module}");
}

/// `profdev prof -f -- xz`: Debian's liblzma has no symbol table and no
/// debug information; its time is split over its functions by their
/// `.eh_frame` FDEs (`sub_ADDR` rows), not lumped in one `??()` row.
#[test]
fn prof_command_splits_stripped_liblzma() {
    if !privileged("profdev prof on xz", can_sample_system()) {
        return;
    }
    if Command::new("xz").arg("--version").output().is_err() {
        if std::env::var("PROFDEV_REQUIRE_TOOLS").as_deref() == Ok("1") {
            panic!("xz is not installed, and PROFDEV_REQUIRE_TOOLS=1");
        }
        eprintln!("SKIPPED: xz is not installed");
        return;
    }
    let d = tempdir();
    // 2 MB of pseudo-random hex: xz -6 works on it for about a second.
    let input = d.path().join("input.txt");
    let mut x: u64 = 1;
    let text: String = (0..2 << 20)
        .map(|i| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if i % 64 == 63 {
                '\n'
            } else {
                char::from(b"0123456789abcdef"[(x >> 60) as usize])
            }
        })
        .collect();
    std::fs::write(&input, text).unwrap();
    let out = run(profdev()
        .args([
            "prof", "-f", "-s", "1", "-o", "-", "--", "xz", "-6", "-k", "-f",
        ])
        .arg(&input));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let module = stdout
        .split("\nModule: ")
        .find(|m| m.starts_with("liblzma"))
        .unwrap_or_else(|| panic!("no module for liblzma: {stdout}"));
    let rows: Vec<(&str, &str)> = module
        .lines()
        .filter_map(|l| {
            let (first, rest) = l.split_once('\t')?;
            Some((first, rest.split_once('\t')?.1))
        })
        .collect();
    assert!(!rows.iter().any(|r| r.1 == "??()"), "{module}");
    let subs: Vec<_> = rows.iter().filter(|r| r.1.starts_with("sub_")).collect();
    // xz -6 spends its time in several of liblzma's functions (the match
    // finder, the range encoder, the LZMA encoder's loop).
    assert!(subs.len() >= 3, "{module}");
    for (addr, name) in subs {
        // The row's address is the function's: `0x15ae0  sub_15ae0()`.
        assert_eq!(
            format!("sub_{}()", addr.trim_start_matches("0x")),
            *name,
            "{module}"
        );
    }
}
