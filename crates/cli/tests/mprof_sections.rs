//! `profdev mprof`'s sections after the tables: `--temporary` (blocks
//! freed by their thread before its next allocation, heaptrack's
//! definition) and `--peak` (what was live at the global high-water mark,
//! per stack or per site), on tests/data/mprof's temporary.c and peak.c.

use std::path::{Path, PathBuf};
use std::process::Command;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/mprof")
        .join(name)
}

/// `src` compiled at -O0 with frame pointers into `dir`.
fn compile(src: &str, dir: &Path) -> PathBuf {
    let exe = dir.join(src.trim_end_matches(".c"));
    let status = Command::new("cc")
        .args(["-g", "-O0", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(data(src))
        .status()
        .expect("cannot run cc");
    assert!(status.success(), "cc failed on {src}");
    exe
}

/// mprof's tables and sections of CMD `exe` with `args`.
fn mprof(args: &[&str], exe: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-o", "-", "-e"])
        .args(args)
        .arg(exe)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "mprof failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The section that starts with `head`: its first line, then its rows
/// (after the blank line) up to the next blank line.
fn section<'a>(out: &'a str, head: &str) -> Vec<&'a str> {
    let start = out
        .find(head)
        .unwrap_or_else(|| panic!("no {head:?} in:\n{out}"));
    let mut lines = out[start..].lines();
    let first = lines.next().into_iter();
    first
        .chain(lines.skip(1).take_while(|l| !l.is_empty()))
        .collect()
}

#[test]
fn temporary_blocks_are_counted_at_their_site() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("temporary.c", dir.path());
    let src = data("temporary.c").canonicalize().unwrap();
    for stacks in [&["--no-stacks"][..], &["--pprof", "/dev/null"]] {
        let out = mprof(&[&["--temporary"], stacks].concat(), &exe);
        // Line 9's 1000 blocks, each freed before the next allocation;
        // line 15's 100 kept until after line 16's: none.
        assert_eq!(
            section(&out, "Temporary: "),
            [
                "Temporary: 1000 of 1101 blocks freed by their thread before its next allocation"
                    .to_string(),
                "temporary\tblocks\tsite\tfunction".into(),
                format!("1000\t1000\t{}:9\tmain()", src.display())
            ],
            "{stacks:?}: {out}"
        );
    }
    // Without --temporary the output is the tables alone.
    assert!(!mprof(&[], &exe).contains("Temporary"));
}

#[test]
fn peak_shows_what_was_live_at_the_high_water_mark() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("peak.c", dir.path());
    let src = data("peak.c").canonicalize().unwrap();
    // Per stack: A and B were live at the peak, C (allocated after B's
    // free, smaller) never was.
    let out = mprof(&["--peak"], &exe);
    let rows = section(&out, "Peak: ");
    assert_eq!(rows.len(), 4, "{out}");
    assert_eq!(rows[0], "Peak: 160000 bytes live at the high-water mark");
    assert_eq!(rows[1], "bytes\tblocks\tstack");
    assert!(rows[2].starts_with("100000\t1\t") && rows[2].ends_with(";main;keep_a"));
    assert!(rows[3].starts_with("60000\t1\t") && rows[3].ends_with(";main;keep_b"));
    // Per site.
    let out = mprof(&["--peak", "--no-stacks"], &exe);
    assert_eq!(
        section(&out, "Peak: "),
        [
            "Peak: 160000 bytes live at the high-water mark".to_string(),
            "bytes\tblocks\tsite\tfunction".into(),
            format!("100000\t1\t{}:9\tkeep_a()", src.display()),
            format!("60000\t1\t{}:10\tkeep_b()", src.display()),
        ],
        "{out}"
    );
}
