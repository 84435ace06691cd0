//! Shared by the prof device tests: the workload and the addr2line checks.
//!
//! Fixture recipe: `work.c` below, compiled by the test with `cc -g -O1`,
//! spends about half its time in its own `hot` and half in libc's
//! `random_r` (an exported, non-IFUNC function that does its work itself,
//! so that even without libc's debug information `addr2line -f` names it
//! from the dynamic symbol table), called through its PLT stub
//! `random_r@plt`. A sample may land in the stub or not: that depends on
//! the machine and its load (one machine gets none, as perf does there),
//! so the checks below never require one; where one lands it must be
//! named `random_r@plt`. The naming itself is tested at known addresses
//! (profdev-symbolize's tests/plt_stubs.rs).
#![allow(dead_code)] // each test file uses a different subset

use std::path::Path;
use std::process::Command;

pub const WORK_C: &str = r#"#include <stdio.h>
#include <stdlib.h>

static volatile unsigned long sink;

__attribute__((noipa)) unsigned long hot(unsigned long n)
{
	unsigned long x = 1;
	for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + i;
	return x;
}

int main(void)
{
	static char state[64];
	struct random_data buf = {0};
	int32_t r;
	initstate_r(1, state, sizeof state, &buf);
	for (int k = 0; k < 60; k++) {
		sink += hot(5000000);
		for (int j = 0; j < 4000000; j++) {
			random_r(&buf, &r);
			sink += r;
		}
	}
	printf("%lu\n", sink);
	return 0;
}
"#;

/// One module directory as read back.
#[derive(Debug)]
pub struct Module {
    pub name: String,
    pub path: String,
    pub pairs: Vec<(u64, u64)>,
}

/// `addr2line -f -e PATH pc…`: the function of each pc.
pub fn addr2line_functions(path: &str, pcs: &[u64]) -> Vec<String> {
    let out = Command::new("addr2line")
        .arg("-f")
        .arg("-e")
        .arg(path)
        .args(pcs.iter().map(|pc| format!("{pc:#x}")))
        .output()
        .expect("the test needs binutils addr2line");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Compile work.c into `dir/name`.
pub fn compile_work(dir: &Path, name: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("work.c"), WORK_C).unwrap();
    let st = Command::new("cc")
        .args(["-g", "-O1", "-o", name, "work.c"])
        .current_dir(dir)
        .status()
        .expect("the test needs cc");
    assert!(st.success());
    std::fs::canonicalize(dir.join(name)).unwrap()
}

/// Check the workload's and libc's directories against addr2line.
pub fn check_modules(modules: &[Module], work: &Path) {
    let work = work.to_string_lossy();
    let exe = modules
        .iter()
        .find(|m| m.path == work)
        .unwrap_or_else(|| panic!("no directory for {work} among {modules:#?}"));
    assert_eq!(Some(exe.name.as_str()), work.rsplit('/').next());
    let libc = modules
        .iter()
        .find(|m| m.name == "libc.so.6")
        .unwrap_or_else(|| panic!("no directory for libc among {modules:#?}"));

    // The executable: only this workload runs it. Its pcs are in hot(),
    // in main()'s loop around random_r, or in random_r's PLT stub (if any
    // sample landed there), and in nothing else but the few instructions
    // of its startup and exit code.
    // profdev's own symbolizer names them; addr2line, the oracle, agrees
    // wherever it knows a name (it prints ?? for PLT stubs).
    let pcs: Vec<u64> = exe.pairs.iter().map(|p| p.0).collect();
    let theirs = addr2line_functions(&exe.path, &pcs);
    let obj = profdev_symbolize::ElfObject::open(Path::new(&exe.path)).unwrap();
    let names: Vec<String> = pcs
        .iter()
        .map(|&pc| obj.function_name(profdev_core::FileAddr(pc)))
        .collect();
    for ((pc, ours), theirs) in pcs.iter().zip(&names).zip(&theirs) {
        if theirs == "??" {
            assert!(
                ours.ends_with("@plt"),
                "{pc:#x}: addr2line ??, profdev {ours}"
            );
        } else {
            assert_eq!(ours, theirs, "{pc:#x}");
        }
        assert_ne!(ours, "_init", "{pc:#x}: a PLT stub charged to _init");
    }
    let total: u64 = exe.pairs.iter().map(|p| p.1).sum();
    let count = |f: &str| -> u64 {
        exe.pairs
            .iter()
            .zip(&names)
            .filter(|(_, n)| *n == f)
            .map(|(p, _)| p.1)
            .sum()
    };
    let (in_hot, in_main, in_plt) = (count("hot"), count("main"), count("random_r@plt"));
    eprintln!(
        "work: {total} samples, {in_hot} in hot(), {in_main} in main(), {in_plt} in random_r@plt"
    );
    // Bounds any correct profiler meets on any machine, idle or busy: the
    // executable's own code runs about half a second (measured 528 to 911
    // samples at 1 ms, idle and busy, on two machines); a machine several
    // times faster still gives 100.
    assert!(total >= 100, "too few samples of work: {total}");
    // hot() and main()'s loop share the executable's time in a ratio that
    // depends on the processor (measured 316 of 636 here, 334 of 911 on
    // another machine): a tenth is far below either.
    assert!(in_hot * 10 > total, "{names:?}");
    assert!(in_main > 0, "{names:?}");
    // Startup and exit run for microseconds: a sample or two at most.
    let elsewhere = total - in_hot - in_main - in_plt;
    assert!(
        elsewhere <= 3,
        "{elsewhere} samples outside hot, main and random_r@plt: {names:?}"
    );

    // libc: every process uses it; this workload's random_r must be there.
    let pcs: Vec<u64> = libc.pairs.iter().map(|p| p.0).collect();
    let names = addr2line_functions(&libc.path, &pcs);
    let in_random: u64 = libc
        .pairs
        .iter()
        .zip(&names)
        .filter(|(_, n)| n.contains("random_r"))
        .map(|(p, _)| p.1)
        .sum();
    eprintln!(
        "libc: {} samples, {in_random} in random_r by addr2line",
        libc.pairs.iter().map(|p| p.1).sum::<u64>()
    );
    // random_r does about as much work as the executable's own code
    // (measured 199 to 353 samples against its 528 to 563): a tenth of
    // the executable's count is far below that.
    assert!(
        in_random * 10 >= total,
        "random_r has {in_random} samples, the executable {total}: {names:?}"
    );
}
