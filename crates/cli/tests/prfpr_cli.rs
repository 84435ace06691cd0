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

/// The TV-R4 report up to (not including) its interval number `k` (0-based).
fn first_intervals(k: usize) -> String {
    let golden = report_golden("prfpr_tv_r4.txt");
    let starts = [
        0,
        golden.find("09/13/120 12:26\n09/13/120 12:27").unwrap(),
        golden.find("09/13/120 12:27\n09/13/120 12:28").unwrap(),
        golden.len(),
    ];
    golden[..starts[k]].to_string()
}

#[test]
fn a_log_truncated_mid_record_prints_what_precedes_and_fails() {
    let d = tempdir();
    let (log, map) = fixtures(d.path());
    // Header 20 bytes, records of 24: the fourth record (at 92) keeps 10.
    std::fs::write(&log, &tv_r4_log()[..102]).unwrap();
    let out = run(profdev()
        .env("TZ", "UTC")
        .arg("prfpr")
        .arg(&log)
        .arg("1")
        .arg(&map));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout), first_intervals(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "prfpr: {}: prf log: the record at byte offset 92 is torn: 10 of its 24 bytes are present (an append cut short, e.g. by a full disk); the intervals before it are printed above; truncate the log to 92 bytes to drop it and what follows\n",
            log.display()
        )
    );
}

#[test]
fn a_foreign_record_is_named_by_its_offset() {
    let d = tempdir();
    let (log, map) = fixtures(d.path());
    // Two logs concatenated: the second header is read as a record whose
    // time (4) goes back.
    let mut twice = tv_r4_log();
    twice.extend(tv_r4_log());
    std::fs::write(&log, &twice).unwrap();
    let out = run(profdev()
        .env("TZ", "UTC")
        .arg("prfpr")
        .arg(&log)
        .arg("1")
        .arg(&map));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout), first_intervals(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "prfpr: {}: prf log: the record at byte offset 116 is not one of this log's: its time 4 is before the previous record's 1600000120;",
            log.display()
        )),
        "{err}"
    );

    // Text appended to a profdev log (what prfsnap writes).
    use profdev_formats::prflog::{Header, Layout, Record};
    let header = Header::new(Layout::Profdev64, 2, vec![0, 0xc000_1000, 0xc000_2000]).unwrap();
    let mut bytes = header.encode().unwrap();
    for (t, c) in [(0, [0, 0, 0, 0, 0]), (1_600_000_000, [1, 2, 3, 4, 90])] {
        let rec = Record {
            time: t,
            counters: c.to_vec(),
        };
        bytes.extend(header.encode_record(&rec).unwrap());
    }
    let garbage_at = bytes.len();
    bytes.extend(b"this is not a prf record: someone appended text to the log, twice over.\n");
    std::fs::write(&log, &bytes).unwrap();
    let out = run(profdev()
        .env("TZ", "UTC")
        .arg("prfpr")
        .arg(&log)
        .arg("1")
        .arg(&map));
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("initialization\n09/13/120 12:26\n"),
        "{text}"
    );
    assert!(text.contains("idle     90.0\n"), "{text}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "the record at byte offset {garbage_at} is not one of this log's: its time"
        )),
        "{err}"
    );
}

#[test]
fn a_missing_log_keeps_svr4s_message_and_says_why() {
    let d = tempdir();
    let missing = d.path().join("missing");
    let out = run(profdev().arg("prfpr").arg(&missing));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "error: cannot open data file\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "prfpr: {}: No such file or directory; give the path of a log written by prfsnap or prfdc\n",
            missing.display()
        )
    );
    let (log, _) = fixtures(d.path());
    let out = run(profdev().arg("prfpr").arg(&log).arg("1").arg(&missing));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "error: cannot open namelist file\n"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with(&format!(
            "prfpr: {}: No such file or directory; give /proc/kallsyms",
            missing.display()
        )),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
