//! End to end: `profdev sample` on a kernel-heavy workload, system wide,
//! with the real perf_event engine (needs root or CAP_PERFMON).

mod common;
use common::*;

/// The first line of the outside-kernel-text section.
fn outside_header(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|l| l.starts_with("outside kernel text: "))
        .unwrap_or_else(|| panic!("no outside section:\n{stdout}"))
}

#[test]
fn dd_zeroing_routine_is_in_the_top_five_and_dd_is_named() {
    if !privileged("profdev sample end-to-end", can_sample_system()) {
        return;
    }
    let d = tempdir();
    let out_dir = d.path().join("out");
    // Every process is listed (--rows): on a busy machine other processes
    // may outnumber dd's ticks outside kernel text, but never hide them.
    let out = run(profdev()
        .args(["sample", "--report", "-", "--rows", "100000", "-o"])
        .arg(&out_dir)
        .args([
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

    // Five, not three: the table is system wide, and a busy machine's
    // other work (the idle loop, other programs' system calls) may rank
    // above dd's zeroing.
    let top = kprof_top(&stdout, 5);
    assert!(
        top.iter().any(|s| is_zeroing(s)),
        "top five {top:?}\n{stdout}"
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
    // One summary of the counts (the totals), then what was written; the
    // outside section says what "outside kernel text" is.
    let counts: Vec<&str> = stderr.lines().filter(|l| l.contains(" samples")).collect();
    assert_eq!(counts.len(), 1, "{stderr}");
    assert!(
        counts[0].starts_with("profdev sample: totals: "),
        "{stderr}"
    );
    assert!(
        stderr.lines().any(|l| l.starts_with("profdev sample: ")
            && l.ends_with(&format!("; wrote {}", out_dir.join("kpdata").display()))),
        "{stderr}"
    );
    assert!(
        outside_header(&stdout).contains(": user space (programs and their libraries)"),
        "{stdout}"
    );

    // And the formatter reads it back to the same table.
    let again = run(profdev()
        .arg("kprof")
        .arg("/proc/kallsyms")
        .arg(out_dir.join("kpdata")));
    assert!(again.status.success());
    let table = String::from_utf8_lossy(&again.stdout);
    assert!(stdout.starts_with(&*table));

    // Right after the table: how many of its ticks were the idle loop.
    let in_text: u64 = table
        .lines()
        .next()
        .and_then(|l| l.split("in kernel text: ").nth(1))
        .and_then(|r| r.split('\t').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no in-text count in {table}"));
    let idle_line = stdout[table.len()..].lines().next().unwrap();
    let idle: u64 = idle_line
        .strip_prefix("idle: ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no idle line after the table: {idle_line:?}"));
    let t = 1000 * idle / in_text;
    assert_eq!(
        idle_line,
        format!(
            "idle: {idle} of the {in_text} ticks in kernel text ({}.{}%) were the idle loop (pid 0: a CPU with nothing to run)",
            t / 10,
            t % 10
        )
    );
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

/// Can the test run profdev as `nobody`, with the kernel hiding addresses
/// from it? (root to switch users; a kernel.perf_event_paranoid above 0,
/// or nobody may sample and the test has nothing to check.)
fn can_run_as_nobody_refused() -> Result<(), String> {
    if !profdev_testkit::is_root() {
        return Err("switching to the user nobody needs root".into());
    }
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map_err(|e| format!("cannot read kernel.perf_event_paranoid: {e}"))?;
    match paranoid.trim().parse::<i32>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(format!(
            "kernel.perf_event_paranoid is {}: any user may sample",
            paranoid.trim()
        )),
    }
}

#[test]
fn unprivileged_user_gets_the_sysctl_named() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !privileged(
        "unprivileged_user_gets_the_sysctl_named",
        can_run_as_nobody_refused(),
    ) {
        return;
    }
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap();
    let kptr = std::fs::read_to_string("/proc/sys/kernel/kptr_restrict").unwrap();
    // A copy of the binary that nobody can run, in a directory it can use
    // (the build directory may be closed to it).
    let d = tempdir();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let exe = profdev_copy(d.path());
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = std::process::Command::new(&exe);
    cmd.current_dir(d.path())
        .uid(65534)
        .gid(65534)
        .args(["sample", "--", "true"]);
    let out = run(&mut cmd);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // The sysctl that hides the addresses, with its value, and the
    // capabilities that would do.
    let cause = match kptr.trim() {
        "0" => format!(
            "the sysctl kernel.perf_event_paranoid is {},",
            paranoid.trim()
        ),
        k => format!("the sysctl kernel.kptr_restrict is {k},"),
    };
    assert!(err.contains(&cause), "{err}");
    assert!(
        err.contains("CAP_PERFMON") && err.contains("CAP_SYSLOG"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// `--ci`: the outside section's rows carry their 95% intervals; the kprof
/// table above stays kprof's.
#[test]
fn ci_adds_intervals_to_the_outside_section_only() {
    if !privileged("profdev sample --ci", can_sample_system()) {
        return;
    }
    let d = tempdir();
    let out = run(profdev()
        .args(["sample", "--report", "-", "--ci", "--rows", "100000", "-o"])
        .arg(d.path().join("out"))
        .args([
            "--",
            "dd",
            "if=/dev/zero",
            "of=/dev/null",
            "bs=64k",
            "count=300000",
        ]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let (kprof, outside) = stdout.split_once("outside kernel text:").unwrap();
    assert!(!kprof.contains('['), "the kprof table is kprof's: {kprof}");
    assert!(outside.contains("95% Wilson intervals"), "{outside}");
    let procs = outside.split("\nby process\n").nth(1).unwrap();
    assert!(
        procs.starts_with("ticks\t  %\t95% CI\tpid\tcomm\n"),
        "{procs}"
    );
    let dd = procs
        .lines()
        .find(|l| l.ends_with("\tdd"))
        .unwrap_or_else(|| panic!("{procs}"));
    // ticks, share, interval around the share.
    let f: Vec<&str> = dd.split('\t').collect();
    let share: f64 = f[1].trim().parse().unwrap();
    let (lo, hi) = f[2]
        .trim_start_matches('[')
        .split_once("]")
        .unwrap()
        .0
        .split_once(", ")
        .unwrap();
    let (lo, hi): (f64, f64) = (lo.parse().unwrap(), hi.parse().unwrap());
    assert!(lo <= share + 0.1 && share <= hi + 0.1, "{dd}");
}
