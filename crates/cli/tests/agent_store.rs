//! `profdev report --since` and `profdev export --since` over the agent's
//! local store: a store holding two intervals' recordings is reported and
//! exported as one (the samples of both); the window leaves out what is
//! older; an empty window says where the agent should be; a file of
//! another user, or a symbolic link, is not read. `profdev stat --agent`
//! prints a health file. (A real agent filling the store:
//! `agent_e2e.rs`.)

mod common;

use common::profdev;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{SystemTime, UNIX_EPOCH};

/// The synthetic recording of crates/formats/tests/export_golden.rs:
/// main;a;b;c 10, main;d 4, main;d;do_syscall_64;ksys_write 2, and two
/// unknowns.
fn synthetic() -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../formats/tests/golden/export/synthetic.pdrec");
    std::fs::read(p).unwrap()
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A store (0700) holding the synthetic recording as the intervals that
/// ended `ago` seconds ago, 15 seconds each.
fn store(ago: &[u64]) -> (tempfile::TempDir, PathBuf) {
    let d = common::tempdir();
    let dir = d.path().join("store");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let now = now_ns();
    for a in ago {
        let end = now - a * 1_000_000_000;
        let name = profdev_agent::store::file_name(end - 15_000_000_000, end);
        let f = dir.join(name);
        std::fs::write(&f, synthetic()).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    (d, dir)
}

fn run(args: &[&str], dir: &Path) -> Output {
    profdev()
        .args(args)
        .arg("--store")
        .arg(dir)
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn folded(text: &str) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = text
        .lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap();
            (stack.to_string(), n.parse().unwrap())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn report_and_export_since_read_two_intervals_as_one() {
    let one = common::tempdir();
    let single = one.path().join("one.data");
    std::fs::write(&single, synthetic()).unwrap();
    let alone = folded(&ok(&profdev()
        .args(["export", "folded", "-i"])
        .arg(&single)
        .output()
        .unwrap()));
    assert!(alone.contains(&("main;a;b;c".into(), 10)), "{alone:?}");
    // Two intervals in the last 10 minutes, one two hours ago.
    let (_d, dir) = store(&[7200, 120, 30]);
    let both = folded(&ok(&run(&["export", "folded", "--since", "10m"], &dir)));
    let doubled: Vec<(String, u64)> = alone.iter().map(|(s, n)| (s.clone(), 2 * n)).collect();
    assert_eq!(both, doubled);
    let three = folded(&ok(&run(&["export", "folded", "--since", "1d"], &dir)));
    assert!(three.contains(&("main;a;b;c".into(), 30)), "{three:?}");
    let total: u64 = alone.iter().map(|(_, n)| n).sum();
    let report = ok(&run(&["report", "--since", "10m", "--sort", "sym"], &dir));
    assert!(
        report.starts_with(&format!("# {} samples\n", 2 * total)),
        "{report}"
    );
    // The last minute holds one interval.
    let report = ok(&run(&["report", "--since", "1m"], &dir));
    assert!(
        report.starts_with(&format!("# {total} samples\n")),
        "{report}"
    );
}

#[test]
fn an_empty_window_says_where_the_agent_should_be() {
    let (_d, dir) = store(&[7200]);
    let o = run(&["report", "--since", "10m"], &dir);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!(
            "profdev report: no profile in the last 10m in {}: is profdev agent running?\n",
            dir.display()
        )
    );
    let o = run(&["export", "folded", "--since", "2h"], &dir.join("none"));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!(
            "profdev export: no profile in the last 2h in {}: is profdev agent running?\n",
            dir.join("none").display()
        )
    );
    let o = run(&["report", "--since", "soon"], &dir);
    assert_eq!(o.status.code(), Some(2));
    // --store needs --since; --since and -i exclude each other.
    let o = profdev()
        .args(["report", "--store", "/x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["report", "-i", "f", "--since", "1m"], &dir);
    assert_eq!(o.status.code(), Some(2));
}

/// A file that another user owns is skipped with a note; a symbolic link
/// is not followed (not listed as a recording at all).
#[test]
fn another_users_file_and_links_are_not_read() {
    let (_d, dir) = store(&[60, 30]);
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let elsewhere = dir.parent().unwrap().join("elsewhere.data");
    std::fs::write(&elsewhere, synthetic()).unwrap();
    std::fs::remove_file(&names[0]).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &names[0]).unwrap();
    let report = ok(&run(&["report", "--since", "10m"], &dir));
    assert!(report.starts_with("# 18 samples\n"), "{report}");
    if !profdev_testkit::privileged("a store file of another user (chown)", {
        if profdev_testkit::is_root() {
            Ok(())
        } else {
            Err("chown needs root".to_string())
        }
    }) {
        return;
    }
    std::os::unix::fs::chown(&names[1], Some(65534), None).unwrap();
    let o = run(&["report", "--since", "10m"], &dir);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("profdev report: no profile in the last 10m in ")
            && err.contains("belongs to uid 65534")
            && err.contains("; skipped"),
        "{err}"
    );
}

/// `profdev stat --agent DIR` prints a health file as stat's rows: the
/// agent's column and each destination's.
#[test]
fn stat_agent_prints_the_health_file() {
    let d = common::tempdir();
    let state = d.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(
        state.join("health"),
        "state ended\npid 1\ninterval_s 15\nprofiles 4\nsamples 130\nlost 0\n\
         pyroscope.destination http://127.0.0.1:4040\npyroscope.sent 0\npyroscope.failures 5\n\
         pyroscope.last_error connection refused\n",
    )
    .unwrap();
    let out = ok(&profdev()
        .args(["stat", "--agent"])
        .arg(&state)
        .output()
        .unwrap());
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["key", "agent", "agent.pyroscope"]);
    assert!(rows.contains(&vec!["samples", "130", "-"]), "{out}");
    assert!(rows.contains(&vec!["failures", "-", "5"]), "{out}");
    assert!(
        rows.contains(&vec!["last_error", "-", "connection", "refused"]),
        "{out}"
    );
    let o = profdev()
        .args(["stat", "--agent"])
        .arg(d.path().join("none"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no health file in "));
}
