//! `profdev export --type` and `profdev report --type`: off-CPU and wall
//! views of synthetic recordings (built with the Encoder), weighed by
//! time, read back by their consumers (go tool pprof where installed, a
//! JSON parser), and the refusals as one sentence.

use profdev_formats::recording::{
    Encoder, Frame, Function, Header, ObjectInfo, ObjectKind, OffCpu, SampleInfo, Task,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The functions of the synthetic executable, each 0x100 bytes from 0x1000.
const FUNCS: &[&str] = &[
    "main", "napper", "burner", "waiter", "hot", "warm", "steady",
];

fn offset(name: &str) -> u64 {
    0x1000 + 0x100 * FUNCS.iter().position(|f| *f == name).unwrap() as u64 + 0x10
}

/// A recording of `samples` (innermost function, ns, off-CPU state; each
/// called from main), period 1 ms, written to `dir/name`.
fn recording(dir: &Path, name: &str, samples: &[(&str, u64, Option<OffCpu>)]) -> PathBuf {
    let mut e = Encoder::new(&Header {
        flags: 1,
        start_ns: 0,
        period_ns: 1_000_000,
    });
    e.task(&Task {
        pid: 5,
        tid: 5,
        generation: 0,
        time: 0,
        comm: "prog".into(),
    });
    let id = e.object(&ObjectInfo {
        kind: ObjectKind::User,
        dev: 1,
        inode: 2,
        build_id: vec![0xde, 0xad],
        path: "/bin/prog".into(),
    });
    let funcs: Vec<Function> = FUNCS
        .iter()
        .map(|n| Function {
            start: offset(n) - 0x10,
            len: 0x100,
            name: n.to_string(),
            lines: Vec::new(),
        })
        .collect();
    e.symbols(id, &[], &funcs).unwrap();
    let mut time = 0;
    for &(func, weight, off_cpu) in samples {
        time += 1_000;
        let s = SampleInfo {
            time,
            cpu: 0,
            pid: 5,
            tid: 5,
            weight,
            kernel: false,
            off_cpu,
        };
        let frames = [
            Frame {
                object: id,
                offset: offset(func),
            },
            Frame {
                object: id,
                offset: offset("main"),
            },
        ];
        e.sample(&s, &frames).unwrap();
    }
    e.end();
    let p = dir.join(name);
    std::fs::write(&p, e.take()).unwrap();
    p
}

fn profdev(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "status {:?}\nstdout {}\nstderr {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fails(o: &Output) -> String {
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const SLEEP: Option<OffCpu> = Some(OffCpu::Sleep);
const IO: Option<OffCpu> = Some(OffCpu::Io);

/// One on-CPU sample in burner, napper off the CPU 2_000_400 ns asleep
/// and 1 ms in I/O, waiter preempted (runnable) 1_499 ns.
fn mixed(dir: &Path) -> PathBuf {
    recording(
        dir,
        "mixed.data",
        &[
            ("burner", 1_000_000, None),
            ("napper", 2_000_400, SLEEP),
            ("napper", 1_000_000, IO),
            ("waiter", 1_499, Some(OffCpu::Other)),
        ],
    )
}

#[test]
fn folded_weighs_off_cpu_and_wall_time_in_microseconds() {
    let d = tempfile::tempdir().unwrap();
    let p = mixed(d.path());
    let p = p.to_str().unwrap();
    let cpu = ok(&profdev(&["export", "folded", "-i", p]));
    assert_eq!(cpu, "main;burner 1\n");
    let same = ok(&profdev(&["export", "folded", "--type", "cpu", "-i", p]));
    assert_eq!(same, cpu);
    let off = ok(&profdev(&[
        "export", "folded", "--type", "off-cpu", "-i", p,
    ]));
    // 2_000_400 + 1_000_000 ns = 3000.4 µs; the preempted waiter was
    // not waiting: in wall, 1_499 ns = 1.499 µs, not in off-cpu.
    assert_eq!(off, "main;napper 3000\n");
    let wall = ok(&profdev(&["export", "folded", "--type", "wall", "-i", p]));
    assert_eq!(wall, "main;burner 1000\nmain;napper 3000\nmain;waiter 1\n");
}

#[test]
fn wall_view_of_one_ms_on_cpu_and_three_asleep_is_25_and_75() {
    let d = tempfile::tempdir().unwrap();
    let p = recording(
        d.path(),
        "w.data",
        &[("burner", 1_000_000, None), ("napper", 3_000_000, SLEEP)],
    );
    let p = p.to_str().unwrap();
    let t = ok(&profdev(&[
        "report", "--type", "wall", "--sort", "sym", "-i", p,
    ]));
    let rows: Vec<&str> = t.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        rows,
        ["   75.00%    0.003s  napper", "   25.00%    0.001s  burner"],
        "{t}"
    );
    assert!(t.starts_with("# 2 samples, 0.004 s; shares of time"), "{t}");
    let f = ok(&profdev(&["export", "folded", "--type", "wall", "-i", p]));
    assert_eq!(f, "main;burner 1000\nmain;napper 3000\n");
}

#[test]
fn report_off_cpu_shares_time_not_samples_with_seconds() {
    let d = tempfile::tempdir().unwrap();
    // napper: 3 intervals of 670 ms (2.01 s); waiter: 20 of 2.5 ms (0.05 s).
    let mut s = vec![("napper", 670_000_000, SLEEP); 3];
    s.extend(vec![("waiter", 2_500_000, IO); 20]);
    s.push(("burner", 1_000_000, None));
    let p = recording(d.path(), "off.data", &s);
    let p = p.to_str().unwrap();
    let t = ok(&profdev(&[
        "report",
        "--type",
        "off-cpu",
        "--sort",
        "sym",
        "--children",
        "--ci",
        "-i",
        p,
    ]));
    let rows: Vec<&str> = t.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), 3, "{t}");
    assert!(rows[0].starts_with("  100.00%    2.060s"), "{t}");
    assert!(rows[0].ends_with("  main"), "{t}");
    // By weight 2.01 / 2.06 = 97.57%; by count it would be 3 of 23.
    assert!(rows[1].contains("   97.57%    2.010s"), "{t}");
    assert!(rows[1].ends_with("  napper"), "{t}");
    assert!(rows[2].contains("    2.43%    0.050s"), "{t}");
    assert!(t.contains("Kish's effective sample size"), "{t}");
    assert!(!t.contains("burner"), "{t}");
    // The cpu view is the one on-CPU sample, as before.
    let cpu = ok(&profdev(&["report", "--sort", "sym", "-i", p]));
    assert!(cpu.starts_with("# 1 samples\n"), "{cpu}");
}

#[test]
fn report_diff_off_cpu_stars_a_moved_share_only() {
    let d = tempfile::tempdir().unwrap();
    // Intervals of 1 and 2 ms alternately: shares of time 70/20/10, then
    // 30/20/50.
    let side = |name: &str, counts: [(&'static str, usize); 3]| {
        let mut s = Vec::new();
        for (f, n) in counts {
            for i in 0..n {
                let w = if i % 2 == 0 { 1_000_000 } else { 2_000_000 };
                s.push((f, w, SLEEP));
            }
        }
        recording(d.path(), name, &s)
    };
    let base = side("base.data", [("hot", 700), ("steady", 200), ("warm", 100)]);
    let new = side("new.data", [("hot", 300), ("steady", 200), ("warm", 500)]);
    let t = ok(&profdev(&[
        "report",
        "--diff",
        base.to_str().unwrap(),
        new.to_str().unwrap(),
        "--type",
        "off-cpu",
        "--sort",
        "sym",
    ]));
    let row = |sym: &str| {
        t.lines()
            .find(|l| l.ends_with(&format!("  {sym}")))
            .unwrap_or_else(|| panic!("{sym}: {t}"))
            .to_string()
    };
    assert!(
        row("hot").contains("-40.00") && row("hot").ends_with("*  hot"),
        "{t}"
    );
    assert!(row("steady").ends_with("   steady"), "{t}");
    assert!(t.contains("share of time"), "{t}");
    // The differential flame graph of the same views: hot blue, steady grey.
    let svg = d.path().join("diff.svg");
    ok(&profdev(&[
        "export",
        "svg",
        "--type",
        "off-cpu",
        "--diff",
        base.to_str().unwrap(),
        new.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]));
    let svg = std::fs::read_to_string(&svg).unwrap();
    let title = |f: &str| {
        let at = svg
            .find(&format!("<title>{f} ("))
            .unwrap_or_else(|| panic!("{f}: {svg}"));
        svg[at..].split("</title>").next().unwrap().to_string()
    };
    assert_eq!(
        title("hot"),
        "<title>hot (450000 µs, 30.00%, -40.00 points)",
        "{svg}"
    );
    assert!(title("steady").ends_with(", not significant)"), "{svg}");
    // A cpu diff of recordings without on-CPU samples is no table.
    let e = fails(&profdev(&[
        "report",
        "--diff",
        base.to_str().unwrap(),
        new.to_str().unwrap(),
    ]));
    assert!(e.contains("holds no samples"), "{e}");
}

#[test]
fn cpu_only_formats_and_recordings_refuse_other_views() {
    let d = tempfile::tempdir().unwrap();
    let p = mixed(d.path());
    let p = p.to_str().unwrap();
    let out = d.path().join("gmon.out");
    let e = fails(&profdev(&[
        "export",
        "gmon",
        "--type",
        "off-cpu",
        "-i",
        p,
        "-o",
        out.to_str().unwrap(),
    ]));
    assert!(
        e.contains("gmon holds CPU samples only and takes no --type off-cpu: --type off-cpu and wall are for folded, svg, pprof, firefox, perf-script and otlp"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    let e = fails(&profdev(&[
        "export",
        "proc-profile",
        "--type",
        "wall",
        "-i",
        p,
    ]));
    assert!(e.contains("proc-profile holds CPU samples only"), "{e}");
    // A recording without off-CPU samples (version 1, the golden one).
    let v1 = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../formats/tests/golden/export/synthetic.pdrec");
    let v1 = v1.to_str().unwrap();
    let sentence =
        format!("{v1} holds no off-CPU samples: record them with 'profdev record -g --off-cpu'");
    for args in [
        vec!["export", "folded", "--type", "off-cpu", "-i", v1],
        vec!["report", "--type", "wall", "-i", v1],
    ] {
        let e = fails(&profdev(&args));
        assert!(e.contains(&sentence), "{args:?}: {e}");
    }
    // It still exports as it did.
    assert!(
        ok(&profdev(&["export", "folded", "--type", "cpu", "-i", v1])).contains("main;a;b;c 10\n")
    );
}

#[test]
fn firefox_marks_off_cpu_time() {
    let d = tempfile::tempdir().unwrap();
    let p = mixed(d.path());
    let p = p.to_str().unwrap();
    let cpu = ok(&profdev(&["export", "firefox", "-i", p]));
    assert!(!cpu.contains("Off-CPU"), "{cpu}");
    let out = ok(&profdev(&["export", "firefox", "--type", "wall", "-i", p]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let cats: Vec<&str> = v["meta"]["categories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(cats.contains(&"Off-CPU"), "{cats:?}");
    let strings = v["shared"]["stringArray"]
        .as_array()
        .or_else(|| v["threads"][0]["stringArray"].as_array())
        .unwrap();
    for label in ["[off-CPU: sleep]", "[off-CPU: io]", "[off-CPU: other]"] {
        assert!(strings.iter().any(|s| s == label), "{label}: {strings:?}");
    }
    let samples = &v["threads"][0]["samples"];
    // One sample per interval and per on-CPU sample; the intervals weigh
    // their periods (2, 1, and at least 1) and no CPU.
    let weights: Vec<i64> = samples["weight"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_i64().unwrap())
        .collect();
    assert_eq!(weights, [1, 2, 1, 1], "{samples}");
}

#[test]
fn go_pprof_reads_off_cpu_time() {
    if !profdev_testkit::tools(
        "go tool pprof reads profdev export pprof --type off-cpu",
        &["go"],
    ) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let p = mixed(d.path());
    let out = d.path().join("off.pb.gz");
    ok(&profdev(&[
        "export",
        "pprof",
        "--type",
        "wall",
        "-i",
        p.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]));
    let top = |args: &[&str]| {
        let o = Command::new("go")
            .args(["tool", "pprof"])
            .args(args)
            .arg(&out)
            .env("HOME", d.path())
            .env("PPROF_TMPDIR", d.path())
            .output()
            .unwrap();
        ok(&o)
    };
    let text = top(&["-sample_index=off_cpu", "-top"]);
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .collect();
    // napper 3.0004 ms of 3.0019 ms (waiter's 1.5 µs is dropped).
    assert!(
        rows[0].ends_with(" napper") && rows[0].contains("3ms"),
        "{text}"
    );
    assert!(!text.contains("burner"), "{text}");
    assert!(text.contains("Type: off_cpu"), "{text}");
    let text = top(&["-sample_index=off_cpu", "-tagfocus=state=io", "-top"]);
    assert!(text.contains("1ms") && text.contains(" napper"), "{text}");
    let text = top(&["-top"]);
    assert!(text.contains("Type: wall"), "{text}");
}
