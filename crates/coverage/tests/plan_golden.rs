//! The planner's and encoder's output, pinned: a digest of the plan and
//! of its trampolines (plain, and recording call targets) for a committed
//! fixture binary (`fixtures/plan_golden.elf`, built from
//! `fixtures/plan_golden.c`), and for the machine's `/bin/true`, `/bin/ls`
//! and libc when they are the very files the digests were taken of (their
//! SHA-256 is in the golden file; another machine's are skipped, said on
//! stderr). The digests were taken before the planner and encoder were
//! cut into passes, so any change to what they make fails here.
//!
//! To add a binary: `PROFDEV_PLAN_GOLDEN_PRINT=1 cargo test -p
//! profdev-coverage --test plan_golden -- --nocapture` prints the lines.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use profdev_coverage::encode::{encode, encode_with, Options};
use profdev_coverage::plan::Plan;
use sha2::{Digest, Sha256};

const GOLDEN: &str = include_str!("fixtures/plan_golden.txt");

fn hex(d: impl AsRef<[u8]>) -> String {
    d.as_ref().iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A digest of everything a plan holds that its users read.
fn plan_digest(plan: &Plan) -> String {
    let mut h = Sha256::new();
    for b in &plan.blocks {
        h.update(format!("{:?}\n", b).as_bytes());
    }
    h.update(format!("{:?}\n", plan.branches).as_bytes());
    h.update(format!("{:?}\n", plan.fell_from).as_bytes());
    h.update(format!("{:?}\n", plan.build_id).as_bytes());
    h.update(format!("{:?}\n", plan.tables).as_bytes());
    h.update(format!("{} {}\n", plan.counters(), plan.uncounted()).as_bytes());
    if !plan.derived.is_empty() {
        h.update(format!("{:?}\n", plan.derived).as_bytes());
    }
    hex(h.finalize())
}

/// A digest of the trampolines of `plan` for one load.
fn encoding_digest(plan: &Plan, opts: Options) -> String {
    let bias = 0x7f00_0000_0000;
    let area = bias - 0x1000_0000;
    let e = if opts == Options::default() {
        encode(plan, bias, area, 100)
    } else {
        encode_with(plan, bias, area, 100, opts)
    };
    let mut h = Sha256::new();
    h.update(&e.code);
    h.update(format!("{:?}\n", e.patches).as_bytes());
    h.update(format!("{} {} {:?}\n", e.failed, e.trapped, e.failed_blocks).as_bytes());
    h.update(format!("{:?} {}\n", e.counter_fixups, e.first_counter).as_bytes());
    hex(h.finalize())
}

/// The golden line of the file at `path`: its SHA-256, then the digests.
fn line(path: &Path) -> (String, String) {
    let bytes = std::fs::read(path).expect("the binary reads");
    let file = hex(Sha256::digest(&bytes));
    let plan = Plan::of_bytes(&bytes, path).expect("plans");
    let on = Options { call_targets: true };
    let digests = format!(
        "plan {} encode {} record {}",
        plan_digest(&plan),
        encoding_digest(&plan, Options::default()),
        encoding_digest(&plan, on)
    );
    (file, digests)
}

/// The digests the golden file holds for a file of SHA-256 `file`.
fn golden(file: &str) -> Option<&'static str> {
    GOLDEN
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(file)?.strip_prefix(' '))
}

fn check(path: &Path, must: bool) {
    let (file, digests) = line(path);
    if std::env::var_os("PROFDEV_PLAN_GOLDEN_PRINT").is_some() {
        println!("\n{file} {digests}");
    }
    match golden(&file) {
        Some(want) => assert_eq!(
            digests,
            want,
            "the plan or encoding of {} changed",
            path.display()
        ),
        None if must => panic!("{} ({file}) is not in the golden file", path.display()),
        None => eprintln!(
            "{} ({file}): another build than the golden file's, skipped",
            path.display()
        ),
    }
}

fn libc() -> Option<PathBuf> {
    let out = std::process::Command::new("cc")
        .arg("-print-file-name=libc.so.6")
        .output()
        .ok()?;
    std::fs::canonicalize(String::from_utf8_lossy(&out.stdout).trim()).ok()
}

#[test]
fn the_fixtures_plan_and_encoding_are_unchanged() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/plan_golden.elf");
    check(&fixture, true);
}

#[test]
fn the_systems_binaries_plans_and_encodings_are_unchanged() {
    let mut paths = vec![PathBuf::from("/bin/true"), PathBuf::from("/bin/ls")];
    paths.extend(libc());
    for p in paths.iter().filter(|p| p.exists()) {
        check(p, false);
    }
}
