//! `cprof --hits --lcov` and `--cobertura` (issue 28 item 1): line,
//! function and branch coverage from hit mode, against a counting run of
//! the same program and input as the oracle (its values mapped to 1, 0,
//! and `-` for a jump that never ran). `tests/cprof/hits.c` has an `if`
//! one arm of which never runs, a loop, a `goto` into a block with two
//! ways in, and an `if` whose skip lands on a block with two ways in (its
//! taken edge is a byte of its own: the block it leads to runs either
//! way).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn build(dir: &Path, opt: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cprof/hits.c");
    let exe = dir.join(format!("hits{opt}"));
    profdev_testkit::cc(&src, &[opt, "-g"], &exe);
    exe
}

/// `profdev cprof ARGS` in `dir`: status, standard error.
fn cprof(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .arg("cprof")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("profdev runs");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Cobertura's `<line>` elements, hits mapped to 1 if not 0.
fn cobertura_lines(text: &str, map: bool) -> Vec<String> {
    text.lines()
        .filter(|l| l.trim_start().starts_with("<line "))
        .map(|l| {
            let l = l.trim().to_string();
            match (map, l.split_once(" hits=\"")) {
                (true, Some((a, b))) => {
                    let (n, rest) = b.split_once('"').unwrap();
                    let n = if n == "0" { "0" } else { "1" };
                    format!("{a} hits=\"{n}\"{rest}")
                }
                _ => l,
            }
        })
        .collect()
}

fn tools_ok() -> bool {
    profdev_testkit::tools("cprof --hits", &["cc"])
}

#[test]
fn hit_mode_exports_equal_the_counting_ones_mapped_to_ran_or_not() {
    if !tools_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for opt in ["-O0", "-O2"] {
        let exe = build(d, opt);
        let exe = exe.to_str().unwrap();
        // 1: the loop runs once (x = 0: the two-ways-in block is reached
        // by falling through only); 4: both ways.
        for input in ["1", "4"] {
            let run = |extra: &[&str], info: &str, xml: &str| {
                let mut args = vec!["-q", "-e", "-o", "out", "--lcov", info, "--cobertura", xml];
                args.extend_from_slice(extra);
                args.extend([exe, input]);
                let (st, err) = cprof(d, &args);
                assert_eq!(st, Some(0), "{opt} {input} {extra:?}: {err}");
                (
                    std::fs::read_to_string(d.join(info)).unwrap(),
                    std::fs::read_to_string(d.join(xml)).unwrap(),
                )
            };
            let (counts, counts_xml) = run(&[], "c.info", "c.xml");
            let (hits, hits_xml) = run(&["--hits"], "h.info", "h.xml");
            let want = common::lcov_coverage_lines(&counts, true);
            let got = common::lcov_coverage_lines(&hits, false);
            let brda = got.iter().filter(|l| l.starts_with("BRDA:")).count();
            assert!(brda >= 4, "{opt} {input}: {hits}");
            assert_eq!(got, want, "{opt} {input}: hit mode's lcov");
            assert!(
                got.iter().all(
                    |l| matches!(l.rsplit([',', ':']).next(), Some("0" | "1" | "-"))
                        || l.starts_with("FNDA:")
                ),
                "{got:?}"
            );
            assert_eq!(
                cobertura_lines(&hits_xml, false),
                cobertura_lines(&counts_xml, true),
                "{opt} {input}: hit mode's Cobertura"
            );
        }
    }
}

#[test]
fn genhtml_renders_a_hit_mode_tracefile() {
    if !profdev_testkit::tools("cprof --hits genhtml", &["cc", "genhtml"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exe = build(d, "-O0");
    let (st, err) = cprof(
        d,
        &[
            "-q",
            "-e",
            "-o",
            "out",
            "--hits",
            "--lcov",
            "h.info",
            exe.to_str().unwrap(),
            "4",
        ],
    );
    assert_eq!(st, Some(0), "{err}");
    profdev_testkit::genhtml_renders(&d.join("h.info"), &d.join("html"));
}

#[test]
fn hits_with_counts_or_records_is_refused_in_one_sentence() {
    let dir = tempfile::tempdir().unwrap();
    for (args, word) in [
        (&["--hits", "-f", "true"][..], "-f or --hits"),
        (&["--hits", "-r", "true"][..], "-r or --hits"),
    ] {
        let (st, err) = cprof(dir.path(), args);
        assert_eq!(st, Some(2), "{args:?}: {err}");
        let first = err.lines().next().unwrap_or("");
        assert!(
            first.starts_with("cprof: ") && first.contains(word),
            "{err}"
        );
        assert_eq!(first.matches(". ").count(), 0, "one sentence: {first}");
    }
}
