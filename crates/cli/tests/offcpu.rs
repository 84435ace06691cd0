//! `profdev record -g --off-cpu` on real programs: where a program
//! sleeps and where it waits for a lock, with the time it spent there.
//!
//! Each test reads the recording through the library's views (the
//! reports and exports of `--type` are tested on synthetic recordings in
//! their crates) and asserts what any correct recording of the program
//! holds on a busy machine too: `napper` sleeps 2 s however loaded the
//! machine is (a wake-up late by the load adds to it, so the bound on the
//! long side is the time the program lived less the 2 s it burns), and
//! `burner` runs for 2 s of wall-clock time (on a loaded machine partly
//! preempted, which `wall` counts and `off-cpu` does not).

mod common;

use common::{can_sample_system, fixture, privileged, profdev, tempdir};
use profdev_formats::export::Names;
use profdev_formats::recording::{self, OffCpu, Recording, SampleType};
use std::path::{Path, PathBuf};
use std::process::Command;

fn ready(what: &str) -> bool {
    privileged(what, can_sample_system()) && profdev_testkit::tools(what, &["gcc"])
}

fn build(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let o = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(fixture(&format!("{name}.c")))
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc: {o:?}");
    exe
}

fn record(exe: &Path, out: &Path) -> Recording {
    record_timed(exe, out).0
}

/// [`record`], and the wall-clock time the whole `profdev record` took
/// (which holds the program's lifetime).
fn record_timed(exe: &Path, out: &Path) -> (Recording, std::time::Duration) {
    let started = std::time::Instant::now();
    let o = profdev()
        .args(["record", "--off-cpu", "-o"])
        .arg(out)
        .arg("--")
        .arg(exe)
        .output()
        .unwrap();
    let took = started.elapsed();
    assert!(o.status.success(), "record: {o:?}");
    (recording::read(&std::fs::read(out).unwrap()).unwrap(), took)
}

/// Nanoseconds of the samples of `rec` with `func` anywhere in their
/// stack, and of all its samples.
fn ns_with(rec: &Recording, func: &str) -> (u64, u64) {
    let names = Names::new(rec);
    let mut with = 0;
    for (i, s) in rec.samples.iter().enumerate() {
        if names
            .stack(i)
            .iter()
            .any(|&f| names.funcs[f as usize].name == func)
        {
            with += s.weight;
        }
    }
    (with, rec.samples.iter().map(|s| s.weight).sum())
}

#[test]
fn napper_sleeps_off_cpu_and_the_wall_view_splits_nap_and_burn() {
    if !ready("profdev record --off-cpu of a sleeping program") {
        return;
    }
    let d = tempdir();
    let exe = build(d.path(), "napper", &[]);
    let (rec, took) = record_timed(&exe, &d.path().join("nb.data"));
    assert!(rec.has_off_cpu());
    assert_ne!(rec.header.flags & recording::FLAG_OFF_CPU, 0);

    let off = rec.clone().view(SampleType::OffCpu);
    let (nap, total) = ns_with(&off, "napper");
    assert!(
        nap as f64 >= 0.8 * total as f64,
        "napper has {nap} of {total} ns off the CPU"
    );
    // 20 sleeps of 100 ms: 2 s. Each wake-up's wait for a CPU adds to it,
    // without a bound on a busy machine; but napper() is off the CPU only
    // within the program's lifetime, which `profdev record`'s holds, less
    // the 2 s (CLOCK_MONOTONIC) burner() runs after it.
    let lifetime = u64::try_from(took.as_nanos()).unwrap();
    let most = lifetime.saturating_sub(2_000_000_000);
    assert!(
        (1_500_000_000..=most).contains(&nap),
        "napper off the CPU for {nap} ns; at most {most} ns: `profdev record` took {took:?}"
    );
    // Its intervals are sleeps, each where it blocked: in nanosleep, in
    // the kernel's scheduler.
    let names = Names::new(&off);
    let napping: Vec<usize> = (0..off.samples.len())
        .filter(|&i| {
            names
                .stack(i)
                .iter()
                .any(|&f| names.funcs[f as usize].name == "napper")
        })
        .collect();
    assert!(napping.len() >= 20, "{} naps", napping.len());
    for &i in &napping {
        assert_eq!(off.samples[i].off_cpu, Some(OffCpu::Sleep));
        let stack = names.stack(i);
        assert!(
            names.funcs[stack[0] as usize].kernel,
            "innermost is the kernel's"
        );
    }

    let wall = rec.view(SampleType::Wall);
    let (nap, total) = ns_with(&wall, "napper");
    let (burn, _) = ns_with(&wall, "burner");
    // Each is about 2 s of the wall (napper more on a busy machine, its
    // wake-ups late): at least 1.5 s each, whatever the load (shares
    // would move with the late wake-ups); a view without the sleeps has
    // almost none of napper's.
    for (name, ns) in [("napper", nap), ("burner", burn)] {
        assert!(
            ns >= 1_500_000_000,
            "{name} has {ns} ns of the wall time ({nap} and {burn} of {total} ns)"
        );
    }
}

#[test]
fn a_thread_blocked_on_a_mutex_shows_the_lock_stack_off_cpu() {
    if !ready("profdev record --off-cpu of a thread waiting for a lock") {
        return;
    }
    let d = tempdir();
    let exe = build(d.path(), "lockwait", &["-pthread"]);
    let rec = record(&exe, &d.path().join("lock.data")).view(SampleType::OffCpu);
    let names = Names::new(&rec);
    let name = |f: u32| names.funcs[f as usize].name.as_str();
    let mut waited = 0u64;
    for (i, s) in rec.samples.iter().enumerate() {
        let stack = names.stack(i);
        if stack.iter().any(|&f| name(f) == "wait_for_lock") {
            // Blocked on the futex, in the lock: the lock's stack.
            assert!(
                stack.iter().any(|&f| name(f).contains("futex")),
                "{:?}",
                stack.iter().map(|&f| name(f)).collect::<Vec<_>>()
            );
            assert!(
                stack
                    .iter()
                    .any(|&f| name(f).contains("mutex_lock") || name(f).contains("lll_lock")),
                "{:?}",
                stack.iter().map(|&f| name(f)).collect::<Vec<_>>()
            );
            assert_eq!(s.off_cpu, Some(OffCpu::Sleep));
            waited += s.weight;
        }
    }
    // The holder sleeps 1 s with the lock held, from before the waiter
    // asks for it.
    assert!(
        (500_000_000..=2_000_000_000).contains(&waited),
        "waited {waited} ns for the lock"
    );
}
