//! The PLT arc rule on synthetic stacks: a sample in a PLT stub
//! (`random_r@plt`) called from `main` makes no arc (gprof reads no PLT
//! symbols and would charge it to `_init`) and is counted as refused; a
//! sample in the program's own function makes the arc; a sample in a
//! shared library makes none and is not counted as refused. The stacks are
//! made up at known addresses of a real executable, so the rule is tested
//! whatever the machine: the end-to-end tests cannot count on a timer
//! sample landing in a one-instruction stub.
//!
//! Fixture recipe: `PROG` below, compiled here with `cc -O1`.

use super::*;
use profdev_symbolize::FnSym;

const PROG: &str = r#"#include <stdlib.h>
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
	sink += hot(1000);
	random_r(&buf, &r);
	sink += r;
	return 0;
}
"#;

/// Where the synthetic process maps the executable: offset 0 here.
const BASE: u64 = 0x5555_0000_0000;

fn compile(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("plt.c"), PROG).unwrap();
    let exe = dir.join("plt-prog");
    let o = std::process::Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(dir.join("plt.c"))
        .output()
        .expect("cc runs");
    assert!(o.status.success(), "cc: {o:?}");
    exe
}

fn sym(exe: &Program, name: &str) -> FnSym {
    exe.elf
        .symbols()
        .iter()
        .find(|s| s.mangled == name)
        .unwrap_or_else(|| panic!("no symbol {name}"))
        .clone()
}

#[test]
fn a_sample_in_a_plt_stub_makes_no_arc_into_init() {
    if !profdev_testkit::tools("the PLT arc rule", &["cc"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let exe = Program::open(&compile(d.path())).unwrap();
    let stub = sym(&exe, "random_r@plt");
    assert_eq!(stub.origin, SymOrigin::Plt);
    let (main, hot, init) = (sym(&exe, "main"), sym(&exe, "hot"), sym(&exe, "_init"));
    // The process address of link-time address `fa` (the whole file is
    // mapped at BASE, offset 0).
    let file_len = std::fs::metadata(&exe.path).unwrap().len();
    let va = |fa: u64| {
        BASE + (0..file_len)
            .find(|&off| exe.elf.file_addr_of_offset(off) == Some(FileAddr(fa)))
            .unwrap_or_else(|| panic!("{fa:#x} is in no load segment"))
    };
    // A return address inside main: its call site is the byte before.
    let (in_stub, in_hot, ret) = (va(stub.addr + 2), va(hot.addr + 4), va(main.addr + 8));
    let path = exe.path.to_str().unwrap().to_string();
    let mut b = Builder::new(exe, Objects::with_loader(|_| None), false);
    b.record(&Record::Mmap {
        pid: 7,
        tid: 7,
        addr: BASE,
        len: 0x4000_0000,
        pgoff: 0,
        path,
        file: None,
        build_id: None,
        time: 0,
    });
    let sample = |ip: u64| {
        Record::Sample(Sample {
            pid: 7,
            tid: 7,
            ip,
            mode: CpuMode::User,
            user_chain: vec![ip, ret],
            ..Sample::default()
        })
    };
    // In the stub, main's call through the PLT: refused, counted.
    b.record(&sample(in_stub));
    b.record(&sample(in_stub));
    // In hot, called by main: the arc.
    b.record(&sample(in_hot));
    // In the shared library (no mapping here): no arc, nothing refused.
    b.record(&sample(0x7f00_0000_1234));
    let g = b.gmon(1000);
    assert_eq!(
        g.arcs,
        vec![gmon::Arc {
            from_pc: main.addr + 7,
            self_pc: hot.addr,
            count: 1
        }],
        "the only arc is main -> hot (random_r@plt at {:#x}, _init at {:#x})",
        stub.addr,
        init.addr
    );
    let c = b.counts();
    // Counted for the stderr line "2 arcs into PLT stubs ... not written".
    assert_eq!((c.samples, c.plt_calls, c.unresolved), (4, 2, 0), "{c:?}");
}
