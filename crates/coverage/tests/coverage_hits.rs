//! Hit mode (cprof's marks): a chain of blocks, each entered only by the
//! jump before it, has one probe, and every block of the program is
//! marked run exactly when the counting run counts it (also a block
//! whose conditional jump leads where another block jumps too).

use profdev_coverage::counts::ModuleCoverage;
use profdev_coverage::launch::launch_in;
use profdev_coverage::plan::{How, Mode, Plan};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn build(dir: &Path, opt: &str) -> PathBuf {
    let out = dir.join(format!("chain{opt}"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chain.c");
    profdev_testkit::cc(&src, &[opt, "-g"], &out);
    out
}

fn run(prog: &Path, mode: Mode) -> ModuleCoverage {
    let mut cmd = Command::new(prog);
    cmd.arg("7").stdout(Stdio::null());
    let name = prog.file_name().unwrap().to_string_lossy().into_owned();
    let r = launch_in(cmd, &[name], mode).expect("launches");
    assert!(r.status.success(), "{:?}", r.status);
    let mut m = r.modules;
    assert_eq!(m.len(), 1, "{m:?}");
    m.pop().unwrap()
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

#[test]
fn a_chain_has_fewer_probes_than_blocks_and_exact_marks() {
    let tmp = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O2"] {
        let prog = build(tmp.path(), opt);
        let bytes = std::fs::read(&prog).unwrap();
        let plan = Plan::of_bytes_in(&bytes, &prog, Mode::Hits).unwrap();
        let counts = Plan::of_bytes(&bytes, &prog).unwrap();
        for f in ["chainfn", "nochain"] {
            let (lo, hi) = sym(&prog, f);
            let of = |p: &Plan| -> Vec<How> {
                p.blocks
                    .iter()
                    .filter(|b| lo <= b.start && b.start < hi)
                    .map(|b| b.how)
                    .collect()
            };
            let (h, c) = (of(&plan), of(&counts));
            assert_eq!(h.len(), 3, "{opt} {f}: {h:?}");
            let probed = |v: &[How]| {
                v.iter()
                    .filter(|h| !matches!(h, How::Implied { .. }))
                    .count()
            };
            assert_eq!(probed(&c), 3, "{opt} {f}: counts {c:?}");
            assert_eq!(probed(&h), 1, "{opt} {f}: hits {h:?}");
        }
        // forkx's jump leads where forky jumps too: it keeps its probe.
        let (fx, _) = sym(&prog, "forkx");
        let x = plan.block_at(fx).unwrap();
        assert!(!matches!(
            plan.blocks[x].how,
            How::Branches { .. } | How::Implied { .. }
        ));
        assert!(plan.probes() < counts.probes());
        let hits = run(&prog, Mode::Hits);
        let exact = run(&prog, Mode::Counts);
        assert_eq!(hits.blocks.len(), exact.blocks.len());
        for (h, e) in hits.blocks.iter().zip(&exact.blocks) {
            assert_eq!(h.start, e.start);
            assert!(h.count <= 1, "{opt}: {:#x} counted {}", h.start, h.count);
            assert_eq!(h.count > 0, e.count > 0, "{opt}: block {:#x}", h.start);
        }
        let ran = |f: &str| {
            let (lo, hi) = sym(&prog, f);
            let v: Vec<u64> = hits
                .blocks
                .iter()
                .filter(|b| lo <= b.start && b.start < hi)
                .map(|b| b.count)
                .collect();
            v
        };
        assert_eq!(ran("chainfn"), [1, 1, 1], "{opt}");
        assert_eq!(ran("nochain"), [0, 0, 0], "{opt}");
        assert_eq!(ran("forkx"), [0, 0], "{opt}");
        assert!(hits.branches.is_empty(), "no branch in hit mode");
    }
}
