//! Counts where the flags are live: conditional jumps that read the flags
//! of an instruction before the jump they fall through (`jl` into `jg`;
//! `jc` into `jo` into `jp` into `js`, tests/fixtures/flags.c). Every
//! count placed there keeps every flag, so the program prints what it
//! prints natively, and each jump's taken and not-taken counts are the
//! ones the arithmetic gives.

use profdev_coverage::counts::ModuleCoverage;
use profdev_coverage::launch::launch;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn build(dir: &Path, opt: &str) -> PathBuf {
    let out = dir.join(format!("flags{opt}"));
    let st = Command::new("cc")
        .args([opt, "-g", "-o"])
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/flags.c"))
        .status()
        .expect("cc runs");
    assert!(st.success());
    out
}

fn sym(path: &Path, name: &str) -> (u64, u64) {
    let elf = profdev_symbolize::ElfObject::open(path).expect("parses");
    let s = elf
        .symbols()
        .iter()
        .find(|s| s.mangled == name)
        .unwrap_or_else(|| panic!("{name} in {}", path.display()));
    (s.addr, s.addr + s.size)
}

/// (taken, not taken) of the conditional jumps in `range`, by address.
fn branches(m: &ModuleCoverage, (lo, hi): (u64, u64)) -> Edges {
    let mut v: Vec<_> = m
        .branches
        .iter()
        .filter(|b| b.addr >= lo && b.addr < hi)
        .map(|b| (b.addr, (b.taken, b.not_taken)))
        .collect();
    v.sort();
    v.into_iter().map(|(_, c)| c).collect()
}

/// (taken, not taken) per conditional jump.
type Edges = Vec<(u64, u64)>;

/// What the fixture's loop gives: (taken, not taken) of jl and jg in
/// cmp3, and of jc, jo, jp, js in flags4, each reached only when the
/// jumps before it fell through or came back.
fn expected() -> (Edges, Edges) {
    let (mut jl, mut jg) = ((0, 0), (0, 0));
    let mut f = [(0u64, 0u64); 4];
    let count = |c: &mut (u64, u64), taken: bool| {
        if taken {
            c.0 += 1
        } else {
            c.1 += 1
        }
    };
    for i in 0..1000i64 {
        let a = i % 3;
        count(&mut jl, a < 1);
        if a >= 1 {
            count(&mut jg, a > 1);
        }
        let x = if i % 4 == 0 { i64::MAX } else { i };
        let y = if i % 5 == 0 { -1 } else { 1 };
        let (r, of) = x.overflowing_add(y);
        let (_, cf) = (x as u64).overflowing_add(y as u64);
        let pf = (r as u8).count_ones() % 2 == 0;
        let sf = r < 0;
        // Each jump is reached once per call: jc's target comes back to
        // jo, jo's to jp, jp's to js.
        for (k, t) in [cf, of, pf, sf].into_iter().enumerate() {
            count(&mut f[k], t);
        }
    }
    (vec![jl, jg], f.to_vec())
}

#[test]
fn counts_where_the_flags_are_live_keep_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (want3, want4) = expected();
    for opt in ["-O0", "-O1"] {
        let prog = build(tmp.path(), opt);
        let native = Command::new(&prog).output().expect("runs");
        assert!(native.status.success());
        let out = tmp.path().join(format!("stdout{opt}"));
        let mut cmd = Command::new(&prog);
        cmd.stdout(Stdio::from(std::fs::File::create(&out).unwrap()));
        let name = prog.file_name().unwrap().to_string_lossy().into_owned();
        let run = launch(cmd, &[name]).expect("launches");
        assert!(run.status.success(), "{:?}", run.status);
        assert_eq!(
            std::fs::read(&out).unwrap(),
            native.stdout,
            "{opt}: the covered run computes what the native one does"
        );
        assert_eq!(run.modules.len(), 1, "{:?}", run.notes);
        let m = &run.modules[0];
        assert_eq!(m.uncounted, 0, "{opt}: {:?}", run.notes);
        assert_eq!(branches(m, sym(&prog, "cmp3")), want3, "{opt}: jl, jg");
        assert_eq!(
            branches(m, sym(&prog, "flags4")),
            want4,
            "{opt}: jc, jo, jp, js"
        );
    }
}
