//! prof(1)'s report against the spec's TV-P3, as golden files.
//!
//! Fixture recipe: TV-P3's abstract module `X` at `/dis/x.dis`, source
//! lines `a`..`d` in `x.b`; pctosrc: pc0, pc1 → line 1, pc2 → lines 2..3,
//! pc3 → line 4; functions f1 = [0,2) at line 1, f2 = [2,4) at line 2.
//! Adapted: the spec's Dis pairs `1 3`, `3 5`, `4 2` pointed one past the
//! sampled instruction; profdev's pcs are exact, so the pairs are `0 3`,
//! `2 5`, `3 2`. Expected outputs are in tests/golden/ (PROFDEV_BLESS=1
//! rewrites them).

use profdev_report::prof::{
    attribute, format, Function, ModuleProfile, Options, SourceMap, SrcRange,
};
use std::path::Path;

#[path = "common/tv_p3.rs"]
mod tv_p3;
use tv_p3::TvP3;

fn module(name: &str, path: &str, pairs: &[(u64, u64)]) -> ModuleProfile {
    let a = attribute(pairs, &TvP3);
    let mut m = ModuleProfile::new(name, path, &a, true);
    for f in &mut m.files {
        f.text = Some(["a\n", "b\n", "c\n", "d\n"].map(String::from).to_vec());
    }
    m
}

fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    profdev_testkit::golden(&path, actual.as_bytes());
}

const PAIRS: [(u64, u64); 3] = [(0, 3), (2, 5), (3, 2)];

#[test]
fn tv_p3_functions_and_lines() {
    let out = format(
        &[module("X", "/dis/x.dis", &PAIRS)],
        &Options {
            functions: true,
            lines: true,
            ..Default::default()
        },
    );
    golden("tv-p3.out", &out);
}

#[test]
fn tv_p3_default_is_lines() {
    let out = format(&[module("X", "/dis/x.dis", &PAIRS)], &Options::default());
    golden("tv-p3-l.out", &out);
}

#[test]
fn two_modules_with_prefixes_and_zeros() {
    let out = format(
        &[
            module("X", "/dis/x.dis", &PAIRS),
            module("Y", "/dis/y.dis", &[(1, 10)]),
        ],
        &Options {
            functions: true,
            lines: true,
            file_prefix: true,
            zeros: true,
            header: false,
        },
    );
    golden("tv-p3-two-nv.out", &out);
}
