//! Golden tests of every export on one small synthetic recording
//! (`PROFDEV_BLESS=1` rewrites tests/golden/export/), with the real
//! consumers where they are installed: readprofile reads the proc-profile
//! export, and every export reads the same from a torn copy up to its cut.

use profdev_formats::export::{
    self, firefox, folded, gmon, kpdata, perf_script, pprof, proc_profile, svg,
};
use profdev_formats::recording::{
    self, Encoder, Frame, Function, Header, Line, ObjectInfo, ObjectKind, Recording, SampleInfo,
    Task, FLAG_STACKS,
};
use std::path::{Path, PathBuf};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/export")
}

fn golden(name: &str, bytes: &[u8]) {
    if profdev_testkit::blessing() {
        std::fs::create_dir_all(golden_dir()).unwrap();
    }
    profdev_testkit::golden(&golden_dir().join(name), bytes);
}

// The synthetic program: main -> a -> b -> c (hot), main -> d (warm), in
// /opt/t/prog; two threads; some samples in the kernel under a syscall.
const STEXT: u64 = 0xffff_ffff_8100_0000;
const MAIN: u64 = 0x1100;
const A: u64 = 0x1200;
const B: u64 = 0x1300;
const C: u64 = 0x1400;
const D: u64 = 0x1500;

fn func(name: &str, start: u64, len: u64, line: u32) -> Function {
    Function {
        start,
        len,
        name: name.into(),
        lines: vec![
            Line {
                addr: start,
                file: 0,
                line,
            },
            Line {
                addr: start + 0x10,
                file: 0,
                line: line + 1,
            },
        ],
    }
}

/// The recording's bytes: 10 × main;a;b;c, 4 × main;d, 2 kernel samples
/// under d (write -> do_syscall_64 -> ksys_write), 1 user sample outside
/// any symbol, one in [unknown].
fn synthetic() -> Vec<u8> {
    let mut e = Encoder::new(&Header {
        flags: FLAG_STACKS,
        start_ns: 1_700_000_000_000_000_000,
        period_ns: 1_000_000,
    });
    for tid in [100, 101] {
        e.task(&Task {
            pid: 100,
            tid,
            generation: 0,
            time: 5,
            comm: "prog".into(),
        });
    }
    let prog = e.object(&ObjectInfo {
        kind: ObjectKind::User,
        dev: 0x801,
        inode: 77,
        build_id: vec![0xde, 0xad, 0xbe, 0xef],
        path: "/opt/t/prog".into(),
    });
    let kernel = e.object(&ObjectInfo {
        kind: ObjectKind::Kernel,
        path: "[kernel.kallsyms]".into(),
        ..ObjectInfo::default()
    });
    e.symbols(
        prog,
        &["prog.c".into()],
        &[
            func("main", MAIN, 0x80, 20),
            func("a", A, 0x80, 10),
            func("b", B, 0x80, 12),
            func("c", C, 0x80, 14),
            func("d", D, 0x80, 16),
        ],
    )
    .unwrap();
    let k = |name: &str, start: u64, len: u64| Function {
        start,
        len,
        name: name.into(),
        lines: vec![],
    };
    e.symbols(
        kernel,
        &[],
        &[
            k("_stext", STEXT, 0),
            k("do_syscall_64", STEXT + 0x1000, 0x100),
            k("ksys_write", STEXT + 0x1100, 0x100),
            k("vfs_write", STEXT + 0x1200, 0x100),
            k("_etext", STEXT + 0x2000, 0),
        ],
    )
    .unwrap();
    let u = |o: u64| Frame {
        object: prog,
        offset: o,
    };
    let kf = |o: u64| Frame {
        object: kernel,
        offset: STEXT + o,
    };
    let mut t = 1_000_000u64;
    let mut sample = |e: &mut Encoder, tid: u32, kernel: bool, frames: &[Frame]| {
        t += 1_000_000;
        let s = SampleInfo {
            time: t,
            cpu: tid - 100,
            pid: 100,
            tid,
            weight: 1_000_000,
            kernel,
            off_cpu: None,
        };
        e.sample(&s, frames).unwrap();
    };
    for i in 0..10 {
        let tid = if i % 2 == 0 { 100 } else { 101 };
        sample(
            &mut e,
            tid,
            false,
            &[u(C + 0x14), u(B + 0x12), u(A + 0x12), u(MAIN + 0x22)],
        );
    }
    for _ in 0..4 {
        sample(&mut e, 100, false, &[u(D + 0x4), u(MAIN + 0x42)]);
    }
    for _ in 0..2 {
        sample(
            &mut e,
            100,
            true,
            &[kf(0x1110), kf(0x1024), u(D + 0x30), u(MAIN + 0x42)],
        );
    }
    sample(&mut e, 101, false, &[u(0x3000), u(MAIN + 0x42)]);
    sample(
        &mut e,
        101,
        false,
        &[Frame {
            object: 0,
            offset: 0x7f00_0000_1234,
        }],
    );
    e.end();
    e.take()
}

fn rec() -> Recording {
    recording::read(&synthetic()).unwrap()
}

#[test]
fn recording_golden() {
    golden("synthetic.pdrec", &synthetic());
}

#[test]
fn folded_golden() {
    let text = folded::write(&rec());
    assert!(text.contains("main;a;b;c 10\n"), "{text}");
    assert!(text.contains("main;d 4\n"));
    assert!(text.contains("main;d;do_syscall_64;ksys_write 2\n"));
    assert!(text.contains("main;[unknown] in prog 1\n"));
    assert!(text.contains("[unknown] 1\n"));
    golden("folded.txt", text.as_bytes());
}

#[test]
fn svg_golden() {
    let r = rec();
    let s = svg::write(&r, &svg::Options::default());
    for name in ["main", "a", "b", "c", "d", "do_syscall_64"] {
        assert!(s.contains(&format!("<title>{name} (")), "{name}");
    }
    assert!(s.contains("<title>c (10 samples, 55.56%)</title>"));
    golden("flame.svg", s.as_bytes());
    let inverted = svg::write(
        &r,
        &svg::Options {
            inverted: true,
            ..svg::Options::default()
        },
    );
    assert_ne!(inverted, s);
    golden("icicle.svg", inverted.as_bytes());
}

#[test]
fn pprof_golden() {
    let r = rec();
    golden("profile.pb", &pprof::encode(&r));
    // The gzip member holds the same bytes.
    use std::io::Read;
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&pprof::write(&r)[..])
        .read_to_end(&mut raw)
        .unwrap();
    assert_eq!(raw, pprof::encode(&r));
}

#[test]
fn firefox_golden() {
    let json = firefox::write(&rec());
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let threads = v["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2);
    let tids: Vec<String> = threads
        .iter()
        .map(|t| t["tid"].to_string().trim_matches('"').to_string())
        .collect();
    assert!(
        tids.contains(&"100".to_string()) && tids.contains(&"101".to_string()),
        "{tids:?}"
    );
    assert_eq!(threads[0]["name"], "prog");
    let cats: Vec<&str> = v["meta"]["categories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(
        cats.contains(&"User") && cats.contains(&"Kernel"),
        "{cats:?}"
    );
    // Every frame name is in the shared string table.
    let strings = v["shared"]["stringArray"]
        .as_array()
        .or_else(|| threads[0]["stringArray"].as_array())
        .unwrap();
    for n in ["main", "a", "b", "c", "d", "ksys_write"] {
        assert!(strings.iter().any(|s| s == n), "{n}");
    }
    let samples: usize = threads
        .iter()
        .map(|t| t["samples"]["length"].as_u64().unwrap() as usize)
        .sum();
    assert_eq!(samples, 18);
    golden("firefox.json", &json);
}

#[test]
fn perf_script_golden() {
    let text = perf_script::write(&rec());
    assert!(text.starts_with("prog 100/100 [000] 0.002000: 1000000 cpu-clock: \n"));
    assert!(text.contains("\t            1414 c+0x14 (/opt/t/prog)\n"));
    assert!(text.contains("\tffffffff81001110 ksys_write+0x10 ([kernel.kallsyms])\n"));
    golden("perf-script.txt", text.as_bytes());
}

#[test]
fn proc_profile_golden_and_readprofile() {
    let r = rec();
    let w = proc_profile::words(&r, 2).unwrap();
    assert_eq!(w[0], 4);
    assert_eq!(w.len(), 1 + 0x2000 / 4);
    assert_eq!(w[1 + 0x1110 / 4], 2, "ksys_write's counter");
    assert_eq!(
        w.iter().skip(1).map(|&x| x as u64).sum::<u64>(),
        2,
        "kernel mode only"
    );
    let bytes = proc_profile::write(&r, 2).unwrap();
    golden("proc-profile.bin", &bytes);
    if !profdev_testkit::tools(
        "readprofile reads the proc-profile export",
        &["readprofile"],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("profile"), &bytes).unwrap();
    let map = "ffffffff81000000 T _stext\nffffffff81001000 T do_syscall_64\nffffffff81001100 T ksys_write\nffffffff81001200 T vfs_write\nffffffff81002000 T _etext\n";
    std::fs::write(dir.path().join("System.map"), map).unwrap();
    let out = std::process::Command::new("readprofile")
        .arg("-p")
        .arg(dir.path().join("profile"))
        .arg("-m")
        .arg(dir.path().join("System.map"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .map(|l| l.split_whitespace().next().unwrap().parse::<u64>().unwrap())
    };
    assert_eq!(line("ksys_write"), Some(2), "{text}");
    assert_eq!(line("do_syscall_64"), None, "{text}");
    assert_eq!(line("total"), Some(2), "{text}");
}

#[test]
fn kpdata_golden() {
    let r = rec();
    let w = kpdata::words(&r, 3).unwrap();
    assert_eq!((w[0], w[1], w[2], w[4], w[5]), (18, 16, 1000, 4, 3));
    assert_eq!(w[0x1110 >> 3], 2);
    golden("kpdata.bin", &kpdata::write(&r, 3).unwrap());
}

#[test]
fn gmon_golden() {
    let r = rec();
    let (g, exe) = gmon::profile(&r, &gmon::Select::default()).unwrap();
    assert_eq!(exe.info.path, "/opt/t/prog");
    let h = &g.histograms[0];
    assert_eq!((h.low_pc, h.high_pc, h.prof_rate), (MAIN, 0x3004, 1000));
    assert_eq!(h.bins[h.bin_of(C + 0x14).unwrap()], 10);
    let arc = |from, to| {
        g.arcs
            .iter()
            .find(|a| a.from_pc == from && a.self_pc == to)
            .map(|a| a.count)
    };
    assert_eq!(arc(MAIN + 0x22, A), Some(10));
    assert_eq!(arc(B + 0x12, C), Some(10));
    assert_eq!(arc(MAIN + 0x42, D), Some(6));
    golden(
        "gmon.out",
        &gmon::write(&r, &gmon::Select::default()).unwrap().0,
    );
    let none = gmon::Select {
        comm: Some("other".into()),
        ..gmon::Select::default()
    };
    assert!(matches!(
        gmon::choose(&r, &none),
        Err(export::ExportError::NoExecutable(_))
    ));
}

/// A recording cut anywhere exports the samples before the cut: the folded
/// counts of every cut are at most the whole's, and grow with the cut.
#[test]
fn torn_recording_exports_what_it_holds() {
    let bytes = synthetic();
    let mut last = 0usize;
    for cut in recording::HEADER_LEN..bytes.len() {
        let r = recording::read(&bytes[..cut]).unwrap();
        let text = folded::write(&r);
        let n: usize = text
            .lines()
            .map(|l| l.rsplit(' ').next().unwrap().parse::<usize>().unwrap())
            .sum();
        assert_eq!(n, r.samples.iter().filter(|s| s.depth > 0).count());
        assert!(n >= last, "cut {cut}");
        last = n;
        let _ = pprof::encode(&r);
        let _ = perf_script::write(&r);
    }
    assert_eq!(last, 18);
}

/// Thousands of deterministic mutants of the synthetic recording (bytes
/// changed, cut, duplicated) go through the fuzz target's body: every one
/// reads or is refused, and every export of what reads writes or refuses,
/// without a panic or an allocation its bytes do not justify.
#[test]
fn mutants_read_and_export_without_panics() {
    let base = synthetic();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut exported = 0;
    for _ in 0..1500 {
        let mut m = base.clone();
        for _ in 0..1 + next() % 4 {
            let at = recording::HEADER_LEN + (next() as usize % (m.len() - recording::HEADER_LEN));
            match next() % 4 {
                0 => m[at] = next() as u8,
                1 => m[at] ^= 1 << (next() % 8),
                2 => m[at] = [0, 0x7f, 0x80, 0xff][next() as usize % 4],
                _ => {
                    let n = (next() as usize % 16).min(m.len() - at);
                    let chunk = m[at..at + n].to_vec();
                    m.splice(at..at, chunk);
                }
            }
        }
        if recording::read(&m).is_ok() {
            exported += 1;
        }
        profdev_formats::fuzzing::recording(&m);
    }
    assert!(exported > 50, "only {exported} mutants read");
}
