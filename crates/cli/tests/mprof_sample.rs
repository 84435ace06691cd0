//! `profdev mprof --sample-bytes N`: estimates from sampling by bytes,
//! against the exact counts of the same run (a python dict-building run)
//! or a known pattern (tests/data/mprof/sampled.c).
//!
//! Why the bounds hold with overwhelming probability: an estimate of B
//! bytes sampled every N bytes has a standard error of at most √(N·B)
//! (profdev_mprof::sample). The seed is also fixed
//! (PROFDEV_MPROF_SAMPLE_SEED), so a run repeats itself where the
//! program's allocations do.

use std::path::Path;
use std::process::Command;

const N: &str = "524288";

/// mprof (pool 1) with `args` and CMD, PYTHONMALLOC=malloc and a fixed
/// seed; the tables (standard output).
fn mprof(args: &[&std::ffi::OsStr], cmd: &[&std::ffi::OsStr]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-1", "-o", "-"])
        .args(args)
        .args(cmd)
        .env("PYTHONMALLOC", "malloc")
        .env("PYTHONHASHSEED", "0")
        .env("PROFDEV_MPROF_SAMPLE_SEED", "29")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "mprof failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The folded file's bytes per line ending with `;leaf` (all lines: "").
fn folded_bytes(file: &Path, leaf: &str) -> u64 {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .filter(|l| leaf.is_empty() || l.rsplit_once(' ').unwrap().0.ends_with(leaf))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}

/// python3 building a dict of 2,000,000 str -> [int] with every object
/// from malloc (PYTHONMALLOC=malloc): about 490 MB allocated, so the
/// standard error at N = 512 KiB is at most √(N/B) ≈ 3.3% of the total,
/// and 15% is 4.6 of them (a miss about once in 250,000 runs).
#[test]
fn python_dict_total_within_15_percent() {
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        eprintln!("skipped: no /usr/bin/python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("dict.py");
    std::fs::write(
        &script,
        "d = {}\nfor i in range(2000000):\n    d[str(i)] = [i]\n",
    )
    .unwrap();
    let cmd = [python.as_os_str(), script.as_os_str()];
    let exact = dir.path().join("exact.folded");
    let out = mprof(&["--folded".as_ref(), exact.as_os_str()], &cmd);
    assert!(!out.contains("estimates"), "{out}");
    let sampled = dir.path().join("sampled.folded");
    let out = mprof(
        &[
            "--sample-bytes".as_ref(),
            N.as_ref(),
            "--folded".as_ref(),
            sampled.as_os_str(),
        ],
        &cmd,
    );
    assert!(
        out.contains("mprof: estimates from sampling every 524288 bytes on average"),
        "{out}"
    );
    assert!(out.contains("at most sqrt(524288*B)"), "{out}");
    let (e, s) = (folded_bytes(&exact, ""), folded_bytes(&sampled, ""));
    assert!(e > 300_000_000, "the exact run allocated {e} bytes only");
    let rel = (s as f64 - e as f64).abs() / e as f64;
    assert!(rel < 0.15, "estimate {s} against {e} bytes ({rel:.3})");
}

/// The known pattern: small() 600 MB in 1,000-byte blocks (standard error
/// ≤ √(N/B) = 3%: 15% is 5 of them), big() 400 MiB in 4 MiB blocks (each
/// sampled with probability 1-e^-8: the estimate is within a fraction of
/// a percent), kept() 200 MiB... 200 blocks of 1 MiB live at the end
/// (p = 1-e^-2 each: a relative error of √((1-p)/p/200) ≈ 2.8%, 15% is
/// 5.4 of them). Freed blocks credit back exactly what they were charged:
/// nothing of small() or big() is live at the end.
#[test]
fn known_pattern_estimates() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mprof/sampled.c");
    let exe = dir.path().join("sampled");
    let status = Command::new("cc")
        .args(["-g", "-O0", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("cannot run cc");
    assert!(status.success());
    let (alloc, inuse) = (dir.path().join("a.folded"), dir.path().join("i.folded"));
    let mut tables = Vec::new();
    for (file, kind) in [(&alloc, "alloc"), (&inuse, "inuse")] {
        tables.push(mprof(
            &[
                "--sample-bytes".as_ref(),
                N.as_ref(),
                "--folded-type".as_ref(),
                kind.as_ref(),
                "--folded".as_ref(),
                file.as_os_str(),
            ],
            &[exe.as_os_str()],
        ));
    }
    let near = |got: u64, want: f64, tol: f64, what: &str| {
        let rel = (got as f64 - want).abs() / want;
        assert!(rel < tol, "{what}: {got} against {want} ({rel:.4})");
    };
    near(folded_bytes(&alloc, ";small"), 600e6, 0.15, "small");
    near(folded_bytes(&alloc, ";big"), 400.0 * 1048576.0, 0.01, "big");
    near(
        folded_bytes(&alloc, ";kept"),
        200.0 * 1048576.0,
        0.15,
        "kept",
    );
    // The estimates' section: a row per site, each value with its
    // standard error, at most sqrt(N*B).
    let row = |f: &str| -> Vec<f64> {
        let l = tables[0]
            .lines()
            .find(|l| l.ends_with(&format!("\t{f}()")))
            .unwrap_or_else(|| panic!("{f}: {}", tables[0]));
        l.split('\t').take(4).map(|v| v.parse().unwrap()).collect()
    };
    assert!(tables[0].contains("\nallocated\t\u{b1}\tcurrent\t\u{b1}\tsite\tfunction\n"));
    let n: f64 = N.parse().unwrap();
    let small = row("small");
    near(small[0] as u64, 600e6, 0.15, "small's row");
    assert!(
        small[1] > 0.0 && small[1] <= (n * small[0]).sqrt() + 1.0,
        "{small:?}"
    );
    let kept = row("kept");
    near(kept[2] as u64, 200.0 * 1048576.0, 0.15, "kept's current");
    assert!(
        kept[3] > 0.0 && kept[3] <= (n * kept[2]).sqrt() + 1.0,
        "{kept:?}"
    );
    assert_eq!(folded_bytes(&inuse, ";small"), 0);
    assert_eq!(folded_bytes(&inuse, ";big"), 0);
    near(
        folded_bytes(&inuse, ";kept"),
        200.0 * 1048576.0,
        0.15,
        "kept live",
    );
}
