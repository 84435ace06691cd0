//! `profdev prfpr` through the binary: TV-R4 byte for byte, its messages and
//! exit statuses (spec §5.5), and the argv[0] dispatch.
//!
//! Fixture recipe: the log is the spec's TV-R4 hex (116 bytes, SVR4 i386
//! layout), the namelist a System.map of the spec's four ELF symbols
//! (start 0xC0000000, read 0xC0001000, write 0xC0002000, idle 0xC0003000);
//! both are written to a temporary directory by the test. The expected
//! output is tests/golden/prfpr_tv_r4.txt, which must also equal the
//! spec's text quoted here.

mod common;
use common::*;
use std::path::{Path, PathBuf};

const TV_R4_MAP: &str = "c0000000 T start\nc0001000 T read\nc0002000 T write\nc0003000 T idle\n";

/// The report crate's TV-R4 fixtures: the log, and prfpr's output, which
/// that crate's tests check against the spec's text.
fn report_golden(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../report/tests/golden")
            .join(name),
    )
    .unwrap()
}

fn tv_r4_log() -> Vec<u8> {
    hex(&report_golden("tv_r4.log.hex")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join(" "))
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn fixtures(dir: &Path) -> (PathBuf, PathBuf) {
    let log = dir.join("log");
    let map = dir.join("System.map");
    std::fs::write(&log, tv_r4_log()).unwrap();
    std::fs::write(&map, TV_R4_MAP).unwrap();
    (log, map)
}

#[test]
fn tv_r4_through_the_binary() {
    let d = tempdir();
    let (log, map) = fixtures(d.path());
    let out = run(profdev()
        .env("TZ", "UTC")
        .arg("prfpr")
        .arg(&log)
        .arg("1")
        .arg(&map));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        report_golden("prfpr_tv_r4.txt")
    );
    assert!(out.stderr.is_empty());
    golden("prfpr_tv_r4.txt", &out.stdout);
}

#[test]
fn local_time_follows_tz() {
    let d = tempdir();
    let (log, map) = fixtures(d.path());
    let out = run(profdev()
        .env("TZ", "UTC-2")
        .arg("prfpr")
        .arg(&log)
        .arg("1")
        .arg(&map));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("initialization\n09/13/120 14:26\n"),
        "{text}"
    );
}

#[test]
fn messages_and_exit_statuses() {
    let d = tempdir();
    let (log, map) = fixtures(d.path());
    let short = d.path().join("short");
    std::fs::write(&short, &tv_r4_log()[..10]).unwrap();
    let zero = d.path().join("zero");
    std::fs::write(&zero, [0u8; 4]).unwrap();
    let one = d.path().join("one-record");
    std::fs::write(&one, &tv_r4_log()[..44]).unwrap();
    let missing = d.path().join("missing");
    let cases: Vec<(Vec<&std::ffi::OsStr>, &str, u8)> = vec![
        (
            vec![],
            "error: usage: prfpr file [ cutoff [ namelist ] ]\n",
            1,
        ),
        (
            vec![log.as_os_str(), "1".as_ref(), map.as_os_str(), "x".as_ref()],
            "error: usage: prfpr file [ cutoff [ namelist ] ]\n",
            1,
        ),
        (
            vec![missing.as_os_str()],
            "error: cannot open data file\n",
            1,
        ),
        (
            vec![log.as_os_str(), "101".as_ref()],
            "error: invalid cutoff percentage\n",
            1,
        ),
        (
            vec![log.as_os_str(), "-1".as_ref()],
            "error: invalid cutoff percentage\n",
            1,
        ),
        (
            vec![zero.as_os_str(), "1".as_ref(), map.as_os_str()],
            "error: bad data file\n",
            1,
        ),
        (
            vec![short.as_os_str(), "1".as_ref(), map.as_os_str()],
            "error: cannot read profile addresses\n",
            1,
        ),
        (
            vec![log.as_os_str(), "1".as_ref(), missing.as_os_str()],
            "error: cannot open namelist file\n",
            1,
        ),
        // One record: nothing to compare, no output (as Reliant UNIX notes).
        (vec![one.as_os_str(), "1".as_ref(), map.as_os_str()], "", 0),
    ];
    for (args, want, code) in cases {
        let out = run(profdev().arg("prfpr").args(&args));
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{args:?}");
        assert_eq!(out.status.code(), Some(i32::from(code)), "{args:?}");
    }
}

#[test]
fn runs_under_its_own_name() {
    let d = tempdir();
    let (log, map) = fixtures(d.path());
    let link = d.path().join("prfpr");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_profdev"), &link).unwrap();
    let out = std::process::Command::new(&link)
        .env("TZ", "UTC")
        .arg(&log)
        .arg("1")
        .arg(&map)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        report_golden("prfpr_tv_r4.txt")
    );
}
