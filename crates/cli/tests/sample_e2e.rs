//! End to end: `profdev sample` on a kernel-heavy workload, system wide,
//! with the real perf_event engine (needs root or CAP_PERFMON).

mod common;
use common::*;

#[test]
fn dd_zeroing_routine_is_in_the_top_three_and_dd_is_named() {
    if !privileged("profdev sample end-to-end", can_sample_system()) {
        return;
    }
    let d = tempdir();
    let out_dir = d.path().join("out");
    let out = run(profdev().args(["sample", "-o"]).arg(&out_dir).args([
        "--",
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=64k",
        "count=300000",
    ]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");

    let top = kprof_top(&stdout, 3);
    assert!(
        top.iter().any(|s| is_zeroing(s)),
        "top three {top:?}\n{stdout}"
    );

    // The outside section names dd among the processes.
    let outside = stdout
        .split("\nby process\n")
        .nth(1)
        .expect("an outside-kernel-text section with a per-process table");
    let procs = outside.split("\n\n").next().unwrap();
    assert!(
        procs.lines().any(|l| l.ends_with("\tdd")),
        "dd not among processes:\n{procs}"
    );

    // kpdata was written whole: the header says how many words.
    let data = std::fs::read(out_dir.join("kpdata")).unwrap();
    let word = |i: usize| u32::from_be_bytes(data[4 * i..4 * i + 4].try_into().unwrap());
    assert_eq!(data.len(), word(3) as usize * 4);
    assert_eq!((word(2), word(4), word(5)), (1000, 4, 3));
    assert!(word(0) > 0 && word(0) >= word(1));
    assert!(stderr.contains(" lost, "), "{stderr}");

    // And the formatter reads it back to the same table.
    let again = run(profdev()
        .arg("kprof")
        .arg("/proc/kallsyms")
        .arg(out_dir.join("kpdata")));
    assert!(again.status.success());
    assert!(stdout.starts_with(&*String::from_utf8_lossy(&again.stdout)));
}

#[test]
fn exit_status_of_cmd_is_passed_on() {
    if !privileged("profdev sample exit status", can_sample_system()) {
        return;
    }
    let d = tempdir();
    let out = run(profdev()
        .args(["sample", "-o"])
        .arg(d.path())
        .args(["--", "sh", "-c", "exit 3"]));
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn errors_are_one_sentence_and_write_nothing() {
    let d = tempdir();
    let cases: [(Vec<&str>, &str); 3] = [
        (
            vec!["sample", "-F", "20000", "--", "true"],
            "20000 Hz is above the limit of 10000 Hz per CPU",
        ),
        (
            vec!["sample", "--", "no-such-command-xyz"],
            "no-such-command-xyz: command not found",
        ),
        (
            vec!["sample", "-o", "/proc/profdev-cannot-be-here", "--", "true"],
            "cannot create the directory /proc/profdev-cannot-be-here",
        ),
    ];
    for (args, want) in cases {
        let out = run(profdev().current_dir(d.path()).args(&args));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.starts_with("profdev sample: ") && err.contains(want),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    assert!(
        std::fs::read_dir(d.path()).unwrap().next().is_none(),
        "nothing written"
    );
}

#[test]
fn unprivileged_user_gets_the_sysctl_named() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "SKIPPED unprivileged_user_gets_the_sysctl_named: needs root to switch to nobody"
        );
        return;
    }
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap();
    if paranoid.trim().parse::<i32>().unwrap() <= 0 {
        eprintln!("SKIPPED unprivileged_user_gets_the_sysctl_named: perf_event_paranoid <= 0 lets anyone sample");
        return;
    }
    let d = tempdir();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_profdev"));
    let mut cmd = std::process::Command::new(exe);
    cmd.current_dir(d.path())
        .uid(65534)
        .gid(65534)
        .args(["sample", "--", "true"]);
    let out = run(&mut cmd);
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("Permission denied") && err.contains("cannot run") {
        eprintln!("SKIPPED unprivileged_user_gets_the_sysctl_named: nobody cannot execute the test binary");
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("kernel.perf_event_paranoid"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
