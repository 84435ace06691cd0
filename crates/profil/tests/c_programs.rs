//! End-to-end tests: C programs from tests/c built against libprofdev_profil
//! (static and shared) and against glibc, run, and their histograms checked.
//!
//! Counts depend on timing, so the checks are shares, each against the
//! share its program is built to have, within five binomial standard
//! deviations over the count (`profdev_testkit::assert_share_at_least`):
//! never exact numbers, and never a margin that holds only usually.

mod common;

use common::{attribute, compile, run, run_ok, tempdir, Link};
use profdev_profil::index::Formula;
use std::os::unix::process::ExitStatusExt;

/// The least share of the counts a function that burns all of a program's
/// CPU time (tests/c/common.h's `burn`) holds: the rest is main's loop and
/// startup; the clock reads in the loop run in the vDSO, outside the text.
const HOT_SHARE: f64 = 0.95;

/// The least share of `hot` in hot.c (600 ms of 660 in hot and cold) and
/// monitor.c (500 of 550): 0.909, less main's loop.
const HOT_C_SHARE: f64 = 0.85;

/// Run tests/c/hot.c; attribute its cells with the formula of the profil
/// it used, and with the other lineage's formula.
fn hot_run(link: Link) -> (common::Attribution, common::Attribution) {
    let dir = tempdir();
    let exe = compile("hot", link, dir.path());
    let dump = run_ok(&exe, &["600", "60"], dir.path(), &[]);
    let (own, other) = if link == Link::Glibc {
        (Formula::Glibc, Formula::Svr4)
    } else {
        (Formula::Svr4, Formula::Glibc)
    };
    let a = attribute(&exe, &dump, "main", own, &["hot", "cold"]);
    let b = attribute(&exe, &dump, "main", other, &["hot", "cold"]);
    eprintln!(
        "{link:?}: {} counts, hot {:.3}, cold {:.3} ({} formula); hot {:.3} read with the {} formula",
        a.total,
        a.fraction("hot"),
        a.fraction("cold"),
        own.name(),
        b.fraction("hot"),
        other.name()
    );
    (a, b)
}

fn hot_fraction(link: Link) -> (f64, f64, u64) {
    let (a, _) = hot_run(link);
    (a.fraction("hot"), a.fraction("cold"), a.total)
}

#[test]
fn hot_function_holds_most_counts_static() {
    let (hot, cold, total) = hot_fraction(Link::Static);
    assert!(
        total >= 30,
        "only {total} ticks in ~660 ms of CPU at 100 Hz"
    );
    profdev_testkit::assert_share_at_least("hot()", hot, total, HOT_C_SHARE);
    assert!(cold < hot, "cold() holds {cold:.3}");
}

#[test]
fn hot_function_holds_most_counts_shared() {
    let (hot, _, total) = hot_fraction(Link::Shared);
    assert!(total >= 30, "only {total} ticks");
    profdev_testkit::assert_share_at_least("hot()", hot, total, HOT_C_SHARE);
}

/// The same program under glibc's profil and ours: both put the hot
/// function on top with a similar share. The cells differ only as the
/// formulas say: mapping each function through its own formula gives the
/// same picture.
#[test]
fn glibc_and_ours_agree_on_the_hot_function() {
    let (g, g_other) = hot_run(Link::Glibc);
    let (o, o_other) = hot_run(Link::Static);
    let (g_hot, o_hot) = (g.fraction("hot"), o.fraction("hot"));
    profdev_testkit::assert_share_at_least("glibc: hot()", g_hot, g.total, HOT_C_SHARE);
    profdev_testkit::assert_share_at_least("ours: hot()", o_hot, o.total, HOT_C_SHARE);
    // Two estimates of one share: five deviations of their difference.
    let margin = profdev_testkit::share_margin(g.total, HOT_C_SHARE)
        .hypot(profdev_testkit::share_margin(o.total, HOT_C_SHARE));
    assert!(
        (g_hot - o_hot).abs() <= margin,
        "hot: glibc {g_hot:.3} of {} vs ours {o_hot:.3} of {}: more than {margin:.3} apart",
        g.total,
        o.total
    );
    // Both tick at 100 Hz of process CPU time over the same work.
    let ratio = o.total as f64 / g.total as f64;
    assert!(
        (0.6..=1.6).contains(&ratio),
        "totals: glibc {}, ours {}",
        g.total,
        o.total
    );
    // At scale 0xFFFF the formulas differ by one cell for odd distances
    // only (index::tests; the hot functions lie in the first 32 KiB), so reading either histogram with the other
    // formula moves at most the function's edge cells.
    for (own, other) in [(&g, &g_other), (&o, &o_other)] {
        let shift = (own.fraction("hot") - other.fraction("hot")).abs();
        assert!(
            shift <= 0.05,
            "reading with the other formula moved {shift:.3} of the counts"
        );
    }
}

#[test]
fn scale_0_1_and_0x10000_turn_profiling_off() {
    let dir = tempdir();
    let exe = compile("hot", Link::Static, dir.path());
    for scale in ["0", "1", "0x10000"] {
        let dump = run_ok(&exe, &["200", "0", scale], dir.path(), &[]);
        assert_eq!(
            dump.total("main"),
            0,
            "scale {scale} counted:\n{}",
            dump.text
        );
    }
}

#[test]
fn bufsiz_0_is_ineffective() {
    let dir = tempdir();
    let exe = compile("hot", Link::Static, dir.path());
    let dump = run_ok(&exe, &["200", "0", "0xFFFF", "0"], dir.path(), &[]);
    assert_eq!(dump.total("main"), 0, "bufsiz 0 counted:\n{}", dump.text);
}

/// glibc's scale 0 keeps sampling into cell 0 (spec §4.4): a control showing
/// the off test above would notice a glibc-like implementation.
#[test]
fn glibc_scale_0_still_counts_into_cell_0() {
    let dir = tempdir();
    let exe = compile("hot", Link::Glibc, dir.path());
    let dump = run_ok(&exe, &["200", "0", "0"], dir.path(), &[]);
    let cells = &dump.cells["main"];
    assert_eq!(
        cells.keys().copied().collect::<Vec<_>>(),
        vec![0],
        "{}",
        dump.text
    );
    assert!(cells[&0] >= 5);
}

#[test]
fn fork_parent_and_child_count_into_their_own_copies() {
    let dir = tempdir();
    let exe = compile("fork", Link::Static, dir.path());
    let dump = run_ok(&exe, &["400"], dir.path(), &[]);
    assert_eq!(dump.value("child_status"), 0);
    let fns = ["parent_hot", "child_hot"];
    let p = attribute(&exe, &dump, "parent", Formula::Svr4, &fns);
    let c = attribute(&exe, &dump, "child", Formula::Svr4, &fns);
    eprintln!(
        "parent: {} counts, parent_hot {:.3}, child_hot {:.3}; child: {} counts, parent_hot {:.3}, child_hot {:.3}",
        p.total,
        p.fraction("parent_hot"),
        p.fraction("child_hot"),
        c.total,
        c.fraction("parent_hot"),
        c.fraction("child_hot")
    );
    assert!(c.total >= 20, "the child counted only {} ticks", c.total);
    assert!(p.total >= 20, "the parent counted only {} ticks", p.total);
    profdev_testkit::assert_share_at_least(
        "child: child_hot",
        c.fraction("child_hot"),
        c.total,
        HOT_SHARE,
    );
    profdev_testkit::assert_share_at_least(
        "parent: parent_hot",
        p.fraction("parent_hot"),
        p.total,
        HOT_SHARE,
    );
    // Separate copies: neither sees the other's function.
    assert_eq!(c.per_function["parent_hot"], 0);
    assert_eq!(p.per_function["child_hot"], 0);
}

/// glibc's forked child stops counting (spec §4.4) — the control for the
/// test above.
#[test]
fn glibc_fork_child_does_not_count() {
    let dir = tempdir();
    let exe = compile("fork", Link::Glibc, dir.path());
    let dump = run_ok(&exe, &["200"], dir.path(), &[]);
    assert_eq!(dump.total("child"), 0);
    assert!(dump.total("parent") >= 10);
}

#[test]
fn exec_after_profil_runs_the_new_image_to_completion() {
    let dir = tempdir();
    let exe = compile("exec", Link::Static, dir.path());
    // Five images in a row, each profiled and burning CPU up to its exec;
    // at 1000 Hz a stray tick would be very likely to arrive.
    for hz in ["100", "1000"] {
        let out = run(
            &exe,
            &["5", "100"],
            dir.path(),
            &[("PROFDEV_PROFIL_HZ", hz)],
        );
        assert!(
            out.status.success(),
            "at {hz} Hz: {} (signal {:?}), stdout {}",
            out.status,
            out.status.signal(),
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "survived");
    }
}

/// Control: under glibc the exec'd image is killed by SIGPROF (spec §4.4).
#[test]
fn glibc_exec_after_profil_is_killed_by_sigprof() {
    let dir = tempdir();
    let exe = compile("exec", Link::Glibc, dir.path());
    let out = run(&exe, &["1", "100"], dir.path(), &[]);
    assert_eq!(out.status.signal(), Some(libc::SIGPROF), "{}", out.status);
}

#[test]
fn unmapped_buffer_turns_profiling_off_and_the_process_survives() {
    let dir = tempdir();
    let exe = compile("unmap", Link::Static, dir.path());
    let d = run_ok(&exe, &["unmap", "150"], dir.path(), &[]);
    assert!(d.text.contains("survived"));
    assert!(d.value("before") >= 5, "{}", d.text);
    assert_eq!(
        d.value("after"),
        0,
        "memory mapped at the old address was counted into:\n{}",
        d.text
    );
}

#[test]
fn read_only_buffer_turns_profiling_off_and_the_process_survives() {
    let dir = tempdir();
    let exe = compile("unmap", Link::Static, dir.path());
    let d = run_ok(&exe, &["readonly", "150"], dir.path(), &[]);
    assert!(d.text.contains("survived"));
    assert!(d.value("before") >= 5, "{}", d.text);
    assert_eq!(d.value("while_readonly"), 0);
    assert_eq!(
        d.value("after"),
        0,
        "profiling came back after the buffer became writable:\n{}",
        d.text
    );
}

/// Control: glibc's profil crashes on an unmapped buffer.
#[test]
fn glibc_unmapped_buffer_crashes() {
    let dir = tempdir();
    let exe = compile("unmap", Link::Glibc, dir.path());
    let out = run(&exe, &["unmap", "150"], dir.path(), &[]);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{}", out.status);
}

#[test]
fn ticks_go_to_the_thread_that_consumed_the_cpu() {
    let dir = tempdir();
    let exe = compile("threads", Link::Static, dir.path());
    let fns = ["main_hot", "worker_hot", "main"];
    // How many ticks a run gets is the kernel's: with both CPUs busy it
    // coalesces SIGPROFs still pending (16 of ~40 expected seen under a
    // busy CI repeat). So a run too short to judge shares is run again,
    // twice as long, a bounded number of times; what is asserted is where
    // the ticks went.
    let attributed = |mode: &str, ms: u32, enough: u64| {
        let mut ms = ms;
        loop {
            let d = run_ok(&exe, &[mode, &ms.to_string()], dir.path(), &[]);
            let a = attribute(&exe, &d, "main", Formula::Svr4, &fns);
            if a.total >= enough || ms >= 8 * 400 {
                assert!(
                    a.total >= enough,
                    "{} counts for {ms} ms of CPU per thread",
                    a.total
                );
                return a;
            }
            eprintln!("{mode} {ms} ms: only {} counts; running longer", a.total);
            ms *= 2;
        }
    };
    // The worker burns while main sleeps in pthread_join.
    let a = attributed("worker", 400, 25);
    eprintln!(
        "worker only: {} counts, worker_hot {:.3}",
        a.total,
        a.fraction("worker_hot")
    );
    profdev_testkit::assert_share_at_least(
        "worker_hot",
        a.fraction("worker_hot"),
        a.total,
        HOT_SHARE,
    );
    // Both burn the same amount of their own CPU time.
    let a = attributed("both", 700, 100);
    let (m, w) = (a.fraction("main_hot"), a.fraction("worker_hot"));
    eprintln!(
        "both: {} counts, main_hot {m:.3}, worker_hot {w:.3}",
        a.total
    );
    // Each thread is charged for its own loop, and nearly every tick lands
    // in one of them. Not "half each": the kernel sends the timer's signal
    // to the thread running when the process clock expires, and with other
    // processes competing for the CPUs the two threads do not run side by
    // side for equal stretches (one clean CI run measured 78/22 of 139).
    profdev_testkit::assert_share_at_least("main_hot and worker_hot", m + w, a.total, HOT_SHARE);
    for (name, share) in [("main_hot", m), ("worker_hot", w)] {
        assert!(
            share >= 0.1,
            "{name}: {:.1}% of {} counts; each thread burned its own loop as long",
            share * 100.0,
            a.total
        );
    }
}

#[test]
fn a_later_call_replaces_the_earlier_one() {
    let dir = tempdir();
    let exe = compile("replace", Link::Static, dir.path());
    let d = run_ok(&exe, &["200"], dir.path(), &[]);
    assert!(d.value("a_at_switch") >= 5, "{}", d.text);
    assert_eq!(
        d.value("a_final"),
        d.value("a_at_switch"),
        "the replaced buffer kept counting"
    );
    assert!(d.value("b_final") >= 5, "{}", d.text);
}

#[test]
fn gprof_reads_monstartup_output_with_hot_on_top() {
    let dir = tempdir();
    let exe = compile("gmon", Link::Static, dir.path());
    run_ok(&exe, &["500", "50"], dir.path(), &[]);
    let (pct, name, text) = common::gprof_top(&exe, &dir.path().join("gmon.out"));
    eprintln!("{text}");
    assert_eq!(name, "hot", "top of the flat profile:\n{text}");
    assert!(pct >= 75.0, "hot has {pct}%:\n{text}");
    assert!(
        text.contains("Each sample counts as 0.01 seconds."),
        "{text}"
    );
}

#[test]
fn gmon_out_prefix_names_the_file() {
    let dir = tempdir();
    let exe = compile("gmon", Link::Shared, dir.path());
    let out = run(
        &exe,
        &["100", "10"],
        dir.path(),
        &[("GMON_OUT_PREFIX", "prof")],
    );
    assert!(out.status.success());
    let files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("prof."))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0]["prof.".len()..].parse::<u32>().is_ok(),
        "{files:?}"
    );
    assert!(!dir.path().join("gmon.out").exists());
}

#[test]
fn monitor_writes_mon_out_with_the_hot_function() {
    use profdev_profil::index::{svr4, Tick};
    use profdev_profil::mon_out::MonOut;
    let dir = tempdir();
    let exe = compile("monitor", Link::Static, dir.path());
    let d = run_ok(&exe, &["600", "500", "50"], dir.path(), &[]);
    let bytes = std::fs::read(dir.path().join("mon.out")).expect("mon.out written");
    let m = MonOut::parse(&bytes).unwrap();
    let line: Vec<&str> = d
        .text
        .lines()
        .find(|l| l.starts_with("text "))
        .unwrap()
        .split(' ')
        .collect();
    let (lpc, hpc) = (
        u64::from_str_radix(line[1], 16).unwrap(),
        u64::from_str_radix(line[2], 16).unwrap(),
    );
    assert_eq!((m.lpc, m.hpc), (lpc, hpc));
    assert_eq!(m.counts.len(), 600);
    let text_words = (hpc - lpc).div_ceil(2) as usize;
    assert_eq!(m.hist.len(), text_words / 2);
    let scale = profdev_profil::monitor::scale((hpc - lpc) as usize, m.hist.len());
    assert!((0x7ff0..=0x8000).contains(&scale), "scale {scale:#x}");
    // Attribute with the SVR4 formula at monitor's scale.
    let elf = common::elf_functions(&exe);
    let bias = d.syms["main"] - elf["main"].0;
    let (hot, size) = elf["hot"];
    let cells: std::collections::BTreeSet<usize> = (0..size)
        .filter_map(|o| {
            match svr4(
                (hot + bias + o) as usize,
                lpc as usize,
                scale,
                m.hist.len() * 2,
            ) {
                Tick::Cell(i) => Some(i),
                _ => None,
            }
        })
        .collect();
    let total: u64 = m.hist.iter().map(|&c| u64::from(c)).sum();
    let in_hot: u64 = cells.iter().map(|&i| u64::from(m.hist[i])).sum();
    eprintln!("mon.out: {total} counts, {in_hot} in hot");
    assert!(total >= 30);
    // 500 ms in hot, 50 in cold: hot.c's split.
    profdev_testkit::assert_share_at_least(
        "hot()",
        in_hot as f64 / total as f64,
        total,
        HOT_C_SHARE,
    );
}

#[test]
fn monitor_follows_profdir() {
    let dir = tempdir();
    let exe = compile("monitor", Link::Static, dir.path());
    let pdir = dir.path().join("profdir");
    std::fs::create_dir(&pdir).unwrap();
    let d = run_ok(
        &exe,
        &["10", "50", "0"],
        dir.path(),
        &[("PROFDIR", pdir.to_str().unwrap())],
    );
    let want = pdir.join(format!(
        "{}.{}",
        d.value("pid"),
        exe.file_name().unwrap().to_string_lossy()
    ));
    assert!(want.exists(), "{} missing", want.display());
    assert!(!dir.path().join("mon.out").exists());
    // PROFDIR set and empty: no profiling, no file anywhere.
    let empty = tempdir();
    run_ok(&exe, &["10", "50", "0"], empty.path(), &[("PROFDIR", "")]);
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}

/// A `-pg` program linked with this library still gets glibc's gmon.out
/// (with call arcs): our _mcleanup hands over to glibc's when our
/// monstartup was not called.
#[test]
fn pg_program_keeps_glibc_gmon_out() {
    let dir = tempdir();
    let exe = common::compile_with("pg", Link::Static, dir.path(), &["-pg"]);
    let out = run(&exe, &["200"], dir.path(), &[]);
    let gmon = dir.path().join("gmon.out");
    assert!(
        out.status.success() && gmon.exists(),
        "no gmon.out from glibc's _mcleanup: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, name, text) = common::gprof_top(&exe, &gmon);
    assert_eq!(name, "hot", "{text}");
    // glibc's mcount counted the calls: 10 from caller plus burn's.
    let row = text.lines().find(|l| l.ends_with(" hot")).unwrap();
    let calls: u64 = row.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(calls > 10, "{row}");
}

/// The header is clean C11 and C++ next to glibc's own declarations of the
/// same functions (<unistd.h> profil, <sys/gmon.h> monstartup/_mcleanup).
#[test]
fn header_compiles_as_c_and_cxx_with_glibc_headers() {
    let dir = tempdir();
    let src = dir.path().join("h.c");
    std::fs::write(
        &src,
        "#include \"profdev_profil.h\"\n#include <unistd.h>\n#include <sys/gmon.h>\n\
         int main(void) { moncontrol(0); return profdev_profil(0, 0, 0, 0); }\n",
    )
    .unwrap();
    let include = std::path::Path::new(common::MANIFEST_DIR).join("include");
    for (compiler, flags) in [
        (
            "cc",
            &["-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror"][..],
        ),
        (
            "c++",
            &["-x", "c++", "-std=c++11", "-Wall", "-Wextra", "-Werror"][..],
        ),
        ("c++", &["-x", "c++", "-std=c++98", "-Wall", "-Werror"][..]),
    ] {
        let out = std::process::Command::new(compiler)
            .args(flags)
            .arg("-I")
            .arg(&include)
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(dir.path().join("h.o"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {compiler} ({e}): install gcc and g++"));
        assert!(
            out.status.success(),
            "{compiler} {flags:?}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
