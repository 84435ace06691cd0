//! `profdev export`: every format read back by its real consumer where one
//! is installed (go tool pprof, GNU gprof, profdev kprof, a JSON parser),
//! torn input, modes, and bad input as one sentence.

use profdev_formats::recording::{
    self, Encoder, Frame, Function, Header, ObjectInfo, ObjectKind, SampleInfo, Task,
};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn profdev() -> Command {
    Command::new(env!("CARGO_BIN_EXE_profdev"))
}

/// The synthetic recording of crates/formats/tests/export_golden.rs:
/// main;a;b;c 10, main;d 4, main;d;do_syscall_64;ksys_write 2, and two
/// unknowns; kernel text 0xffffffff81000000..+0x2000.
fn synthetic() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../formats/tests/golden/export/synthetic.pdrec")
}

const SYSTEM_MAP: &str = "ffffffff81000000 T _stext\nffffffff81001000 T do_syscall_64\nffffffff81001100 T ksys_write\nffffffff81001200 T vfs_write\nffffffff81002000 T _etext\n";

fn export(args: &[&str]) -> Output {
    profdev().arg("export").args(args).output().unwrap()
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

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn folded_to_stdout_and_files_with_their_modes() {
    let input = synthetic();
    let text = ok(&export(&["folded", "-i", input.to_str().unwrap()]));
    assert!(text.contains("main;a;b;c 10\n"), "{text}");
    let d = tempfile::tempdir().unwrap();
    let folded = d.path().join("out.folded");
    ok(&export(&[
        "folded",
        "-i",
        input.to_str().unwrap(),
        "-o",
        folded.to_str().unwrap(),
    ]));
    assert_eq!(std::fs::read_to_string(&folded).unwrap(), text);
    assert_eq!(mode(&folded), 0o644);
    let kp = d.path().join("kpdata");
    ok(&export(&[
        "kpdata",
        "-i",
        input.to_str().unwrap(),
        "-o",
        kp.to_str().unwrap(),
    ]));
    assert_eq!(mode(&kp), 0o600, "kernel addresses");
    let script = d.path().join("script");
    ok(&export(&[
        "perf-script",
        "-i",
        input.to_str().unwrap(),
        "-o",
        script.to_str().unwrap(),
    ]));
    assert_eq!(mode(&script), 0o600, "kernel addresses");
    // Streamed to a file and to standard output alike.
    let streamed = ok(&export(&["perf-script", "-i", input.to_str().unwrap()]));
    assert!(streamed.starts_with("prog 100/100 [000] "), "{streamed}");
    assert_eq!(std::fs::read_to_string(&script).unwrap(), streamed);
    let otlp = d.path().join("otlp.pb");
    ok(&export(&[
        "otlp",
        "-i",
        input.to_str().unwrap(),
        "-o",
        otlp.to_str().unwrap(),
    ]));
    assert_eq!(mode(&otlp), 0o600, "kernel addresses");
    let pb = std::fs::read(&otlp).unwrap();
    // ProfilesData: resource_profiles (field 1) first, the dictionary
    // (field 2) holding every name (decoded field by field in
    // profdev-formats' export_labels test with opentelemetry-proto's types).
    assert_eq!(pb[0], 0x0a, "{pb:?}");
    assert!(pb.windows(4).any(|w| w == b"ksys"), "{pb:?}");
    let svg = d.path().join("f.svg");
    ok(&export(&[
        "svg",
        "-i",
        input.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
        "--title",
        "t<1>",
    ]));
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.contains(">t&lt;1&gt;</text>") && s.contains("<title>c (10 samples"));
}

/// kprof reads the kpdata export: ksys_write has both kernel ticks.
#[test]
fn kprof_reads_the_kpdata_export() {
    let d = tempfile::tempdir().unwrap();
    let kp = d.path().join("kpdata");
    ok(&export(&[
        "kpdata",
        "-i",
        synthetic().to_str().unwrap(),
        "-o",
        kp.to_str().unwrap(),
    ]));
    let map = d.path().join("System.map");
    std::fs::write(&map, SYSTEM_MAP).unwrap();
    let out = ok(&profdev().arg("kprof").arg(&map).arg(&kp).output().unwrap());
    assert!(
        out.starts_with("total: 18\tin kernel text: 2\toutside kernel text: 16\n"),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.ends_with("\tksys_write"))
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(row, "2\t100.0\tksys_write", "{out}");
}

/// readprofile reads the proc-profile export through the command too.
#[test]
fn readprofile_reads_the_proc_profile_export() {
    if !profdev_testkit::tools(
        "readprofile reads profdev export proc-profile",
        &["readprofile"],
    ) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("profile");
    ok(&export(&[
        "proc-profile",
        "-i",
        synthetic().to_str().unwrap(),
        "-o",
        p.to_str().unwrap(),
    ]));
    assert_eq!(mode(&p), 0o600);
    let map = d.path().join("System.map");
    std::fs::write(&map, SYSTEM_MAP).unwrap();
    let out = Command::new("readprofile")
        .arg("-p")
        .arg(&p)
        .arg("-m")
        .arg(&map)
        .output()
        .unwrap();
    let text = ok(&out);
    let first = text.lines().next().unwrap_or("");
    assert_eq!(
        first.split_whitespace().take(2).collect::<Vec<_>>(),
        ["2", "ksys_write"],
        "{text}"
    );
}

/// go tool pprof reads the pprof export and names c first.
#[test]
fn go_pprof_reads_the_pprof_export() {
    if !profdev_testkit::tools("go tool pprof reads profdev export pprof", &["go"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("profile.pb.gz");
    ok(&export(&[
        "pprof",
        "-i",
        synthetic().to_str().unwrap(),
        "-o",
        p.to_str().unwrap(),
    ]));
    let out = Command::new("go")
        .args(["tool", "pprof", "-top"])
        .arg(&p)
        .env("HOME", d.path())
        .env("PPROF_TMPDIR", d.path())
        .output()
        .unwrap();
    let text = ok(&out);
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .collect();
    assert!(rows[0].ends_with(" c"), "{text}");
    assert!(rows[0].contains("55.56%"), "{text}");
    assert!(text.contains("Build ID: deadbeef"), "{text}");
    assert!(
        rows.iter()
            .any(|r| r.ends_with(" main") && r.contains("94.44%")),
        "{text}"
    );
}

#[test]
fn firefox_export_is_json_with_threads() {
    let out = ok(&export(&["firefox", "-i", synthetic().to_str().unwrap()]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["meta"]["product"], "profdev");
    assert_eq!(v["threads"].as_array().unwrap().len(), 2);
}

/// A recording cut in its middle exports the samples before the cut, with
/// a note; a file that is no recording is one sentence and status 1.
#[test]
fn torn_and_bad_input() {
    let whole = std::fs::read(synthetic()).unwrap();
    let d = tempfile::tempdir().unwrap();
    let cut = d.path().join("profdev.data.partial");
    std::fs::write(&cut, &whole[..whole.len() - 90]).unwrap();
    let o = export(&["folded", "-i", cut.to_str().unwrap()]);
    let text = ok(&o);
    let n: u64 = text
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    let r = recording::read(&whole[..whole.len() - 90]).unwrap();
    assert!(n > 0 && n < 18 && n == r.samples.len() as u64, "{text}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("exporting the"), "{err}");

    let bad = d.path().join("bad");
    std::fs::write(
        &bad,
        b"not a recording at all, but long enough for a header",
    )
    .unwrap();
    let o = export(&[
        "pprof",
        "-i",
        bad.to_str().unwrap(),
        "-o",
        d.path().join("x").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("profdev export: ")
            && err.contains("not a profdev recording")
            && err.lines().count() == 1,
        "{err}"
    );
    let o = export(&["folded", "-i", d.path().join("missing").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    // A recording without kernel symbols cannot make a kpdata.
    let mut e = Encoder::new(&Header::default());
    e.end();
    let empty = d.path().join("empty");
    std::fs::write(&empty, e.take()).unwrap();
    let o = export(&[
        "kpdata",
        "-i",
        empty.to_str().unwrap(),
        "-o",
        d.path().join("k").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("kernel symbol table"));
}

/// `report` on a torn recording says so in its own name, not export's.
#[test]
fn report_warns_in_its_own_name() {
    let whole = std::fs::read(synthetic()).unwrap();
    let d = tempfile::tempdir().unwrap();
    let cut = d.path().join("profdev.data.partial");
    std::fs::write(&cut, &whole[..whole.len() - 90]).unwrap();
    let o = profdev().args(["report", "-i"]).arg(&cut).output().unwrap();
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with(&format!(
            "profdev report: {}: the recording ends inside a record at byte ",
            cut.display()
        )) && err.contains("; reporting the "),
        "{err}"
    );
    assert!(!err.contains("export"), "{err}");
}

/// gprof reads the gmon export against the real executable: a recording
/// of calltree.c's functions at their link-time addresses (from nm), 30
/// samples main;a;b;c and 10 main;d.
#[test]
fn gprof_reads_the_gmon_export() {
    if !profdev_testkit::tools("gprof reads profdev export gmon", &["gcc", "gprof", "nm"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let exe = d.path().join("calltree");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/calltree.c");
    let o = Command::new("gcc")
        .args(["-O1", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    ok(&o);
    let nm = ok(&Command::new("nm")
        .args(["-S", "--defined-only"])
        .arg(&exe)
        .output()
        .unwrap());
    let mut funcs: Vec<Function> = nm
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [addr, size, "T" | "t", name] => Some(Function {
                    start: u64::from_str_radix(addr, 16).ok()?,
                    len: u64::from_str_radix(size, 16).ok()?,
                    name: name.into(),
                    lines: vec![],
                }),
                _ => None,
            }
        })
        .collect();
    funcs.sort_by_key(|f| f.start);
    let at = |n: &str, off: u64| funcs.iter().find(|f| f.name == n).unwrap().start + off;
    let mut e = Encoder::new(&Header {
        flags: 1,
        start_ns: 0,
        period_ns: 10_000_000,
    });
    e.task(&Task {
        pid: 5,
        tid: 5,
        generation: 0,
        time: 0,
        comm: "calltree".into(),
    });
    let id = e.object(&ObjectInfo {
        kind: ObjectKind::User,
        path: exe.to_string_lossy().into_owned(),
        ..ObjectInfo::default()
    });
    e.symbols(id, &[], &funcs).unwrap();
    let f = |n: &str, off: u64| Frame {
        object: id,
        offset: at(n, off),
    };
    for i in 0..40u64 {
        let s = SampleInfo {
            time: i * 10_000_000,
            cpu: 0,
            pid: 5,
            tid: 5,
            weight: 10_000_000,
            kernel: false,
            off_cpu: None,
        };
        let stack = if i % 4 == 3 {
            vec![f("d", 4), f("main", 1)]
        } else {
            vec![f("c", 4), f("b", 1), f("a", 1), f("main", 1)]
        };
        e.sample(&s, &stack).unwrap();
    }
    e.end();
    let rec = d.path().join("profdev.data");
    std::fs::write(&rec, e.take()).unwrap();
    let gm = d.path().join("gmon.out");
    let o = export(&[
        "gmon",
        "-i",
        rec.to_str().unwrap(),
        "-o",
        gm.to_str().unwrap(),
    ]);
    ok(&o);
    let out = ok(&Command::new("gprof")
        .arg("-b")
        .arg(&exe)
        .arg(&gm)
        .output()
        .unwrap());
    let flat: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.contains("time   seconds"))
        .skip(1)
        .collect();
    let row = |i: usize| flat[i].split_whitespace().collect::<Vec<_>>();
    assert_eq!(row(0).last(), Some(&"c"), "{out}");
    assert_eq!(row(0)[0], "75.00", "{out}");
    assert_eq!(row(1).last(), Some(&"d"), "{out}");
    // The call graph: c's entry names b as its caller, 30 of 30 calls;
    // main's names a (30) and d (10) as its callees.
    let entry = |name: &str| {
        out.split("-----------------------------------------------")
            .find(|b| {
                b.lines()
                    .any(|l| l.starts_with('[') && l.contains(&format!(" {name} [")))
            })
            .unwrap_or_else(|| panic!("no entry for {name}:\n{out}"))
            .to_string()
    };
    let arc = |block: &str, calls: &str, other: &str| {
        block
            .lines()
            .any(|l| !l.starts_with('[') && l.contains(calls) && l.contains(&format!(" {other} [")))
    };
    assert!(arc(&entry("c"), "30/30", "b"), "{out}");
    assert!(arc(&entry("main"), "30/30", "a"), "{out}");
    assert!(arc(&entry("main"), "10/10", "d"), "{out}");
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// An export to a file says so in one line on stderr: for svg the frames
/// and samples drawn and how to explore it, for others the format and
/// size; one to standard output says nothing.
#[test]
fn export_names_the_file_it_wrote() {
    let input = synthetic();
    let input = input.to_str().unwrap();
    let d = tempfile::tempdir().unwrap();
    let svg = d.path().join("f.svg");
    let o = export(&["svg", "-i", input, "-o", svg.to_str().unwrap()]);
    ok(&o);
    assert_eq!(
        stderr(&o),
        format!(
            "profdev export: wrote {} (flame graph: 9 frames, 18 samples; in a web browser, click to zoom, Ctrl-F to search)\n",
            svg.display()
        )
    );
    let graph = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(
        graph
            .lines()
            .filter(|l| l.starts_with("<g data-s="))
            .count(),
        9
    );
    assert!(graph.contains("<script type=\"text/ecmascript\"><![CDATA["));
    let pb = d.path().join("p.pb.gz");
    let o = export(&["pprof", "-i", input, "-o", pb.to_str().unwrap()]);
    ok(&o);
    let size = std::fs::metadata(&pb).unwrap().len();
    assert_eq!(
        stderr(&o),
        format!(
            "profdev export: wrote {} (pprof, {size} bytes)\n",
            pb.display()
        )
    );
    let o = export(&["svg", "-i", input]);
    assert!(ok(&o).starts_with("<?xml"));
    assert_eq!(stderr(&o), "");
}

/// gmon's line names the file gprof is to read, not a placeholder.
#[test]
fn gmon_export_names_its_file_in_the_gprof_line() {
    let input = synthetic();
    let d = tempfile::tempdir().unwrap();
    let gm = d.path().join("run.gmon");
    let o = export(&[
        "gmon",
        "-i",
        input.to_str().unwrap(),
        "-o",
        gm.to_str().unwrap(),
    ]);
    ok(&o);
    let err = stderr(&o);
    let want = format!(
        "profdev export: wrote {g} (gmon.out of /opt/t/prog): read it with 'gprof /opt/t/prog {g}'\n",
        g = gm.display()
    );
    assert_eq!(err, want);
    // The default file, named as the user would type it.
    let o = profdev()
        .current_dir(d.path())
        .args(["export", "gmon", "-i"])
        .arg(&input)
        .output()
        .unwrap();
    ok(&o);
    assert!(
        stderr(&o).ends_with(" read it with 'gprof /opt/t/prog gmon.out'\n"),
        "{}",
        stderr(&o)
    );
    assert!(d.path().join("gmon.out").is_file());
}

/// `--open` without a display: the file is written, one sentence says why
/// it was not opened and where it is, exit status 0. Without xdg-open
/// likewise; with both, xdg-open gets the file. `--open` needs `-o FILE`.
#[test]
fn open_hands_the_file_to_xdg_open_or_says_why_not() {
    let input = synthetic();
    let d = tempfile::tempdir().unwrap();
    let svg = d.path().join("open.svg");
    let args = [
        "export",
        "svg",
        "-i",
        input.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
        "--open",
    ];
    let o = profdev()
        .args(args)
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .unwrap();
    ok(&o);
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].starts_with("profdev export: wrote "), "{err}");
    assert_eq!(
        lines[1],
        format!(
            "profdev export: --open: there is no display to open it on ($DISPLAY and $WAYLAND_DISPLAY are unset); the file is {}",
            svg.display()
        )
    );
    assert!(std::fs::read_to_string(&svg).unwrap().ends_with("</svg>\n"));

    // A display, but no xdg-open on PATH.
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = profdev()
        .args(args)
        .env("DISPLAY", ":99")
        .env("PATH", &empty)
        .output()
        .unwrap();
    ok(&o);
    assert!(
        stderr(&o).ends_with(&format!(
            "profdev export: --open: xdg-open is not installed to open it; the file is {}\n",
            svg.display()
        )),
        "{}",
        stderr(&o)
    );

    // A display and an xdg-open (a script that notes what it was given),
    // first on PATH.
    let bin = d.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let opened = d.path().join("opened");
    let script = bin.join("xdg-open");
    profdev_testkit::write_executable(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$1\" > {o}.tmp && mv {o}.tmp {o}\n",
            o = opened.display()
        )
        .as_bytes(),
        0o755,
    );
    let o = profdev()
        .args(args)
        .env_remove("DISPLAY")
        .env("WAYLAND_DISPLAY", "wayland-0")
        .env(
            "PATH",
            std::env::join_paths(
                std::iter::once(bin.clone())
                    .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
            )
            .unwrap(),
        )
        .output()
        .unwrap();
    ok(&o);
    assert!(
        stderr(&o).ends_with(&format!(
            "profdev export: opening {} with {}\n",
            svg.display(),
            script.display()
        )),
        "{}",
        stderr(&o)
    );
    // xdg-open is not waited for: wait for what it wrote.
    profdev_testkit::wait_until(
        "the fake xdg-open to run",
        std::time::Duration::from_secs(30),
        || opened.exists(),
    );
    assert_eq!(
        std::fs::read_to_string(&opened).unwrap(),
        format!("{}\n", svg.display())
    );

    // --open needs a file to open: a usage error, status 2.
    let o = export(&["svg", "-i", input.to_str().unwrap(), "--open"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = export(&["svg", "-i", input.to_str().unwrap(), "-o", "-", "--open"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "profdev export: --open needs -o FILE, not standard output\n"
    );
    assert!(o.stdout.is_empty());
}
