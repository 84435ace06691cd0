//! Golden tests for gmon.out: spec §3.8 TV-G1..TV-G5, byte for byte, with
//! the real GNU gprof as the oracle. Recipes: tests/golden/gmon/README.md.

use profdev_formats::gmon::{self, Arc, Format, GmonOut, Histogram, Target};
use std::path::{Path, PathBuf};
use std::process::Command;

const LO: u64 = 0x401000;
const HI: u64 = 0x401300;

/// The spec's expected `gprof -b fake FILE` output for TV-G1, G2 and G3.
const SPEC_TV_G1: &str = "Flat profile:

Each sample counts as 0.01 seconds.
  %   cumulative   self              self     total           
 time   seconds   seconds    calls  ms/call  ms/call  name    
 80.00      0.80     0.80     2001     0.40     0.40  leaf
 15.00      0.95     0.15      200     0.75     4.75  mid
  5.00      1.00     0.05                             main
\x0c
\t\t\tCall graph


granularity: each sample hit covers 2 byte(s) for 1.00% of 1.00 seconds

index % time    self  children    called     name
                                                 <spontaneous>
[1]    100.0    0.05    0.95                 main [1]
                0.15    0.80     200/200         mid [2]
                0.00    0.00       1/2001        leaf [3]
-----------------------------------------------
                0.15    0.80     200/200         main [1]
[2]     95.0    0.15    0.80     200         mid [2]
                0.80    0.00    2000/2001        leaf [3]
-----------------------------------------------
                0.00    0.00       1/2001        main [1]
                0.80    0.00    2000/2001        mid [2]
[3]     80.0    0.80    0.00    2001         leaf [3]
-----------------------------------------------
\x0c
Index by function name

   [3] leaf                    [1] main                    [2] mid
";

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/gmon")
}

/// Compare `got` with the golden file `name`, or rewrite it when blessing.
fn check_golden(name: &str, got: &[u8]) {
    profdev_testkit::golden(&golden_dir().join(name), got);
}

/// The common payload of TV-G1..G3: 384 2-byte bins, 3 arcs, 100 Hz.
fn common_payload() -> GmonOut {
    let mut h = Histogram::new(LO, HI, ((HI - LO) / 2) as usize, 100);
    for (addr, n) in [
        (0x4011b0, 60),
        (0x4011c0, 20),
        (0x4011e0, 15),
        (0x401210, 5),
    ] {
        h.bins[((addr - LO) / 2) as usize] += n;
    }
    GmonOut {
        histograms: vec![h],
        arcs: vec![
            Arc {
                from_pc: 0x4011f0,
                self_pc: 0x4011a6,
                count: 2000,
            },
            Arc {
                from_pc: 0x401210,
                self_pc: 0x4011da,
                count: 200,
            },
            Arc {
                from_pc: 0x401220,
                self_pc: 0x4011a6,
                count: 1,
            },
        ],
        bb_counts: vec![],
    }
}

/// TV-G4: 192 4-byte bins at 1000 Hz, +30 at 0x4011b0, +10 in the bin
/// straddling leaf/mid, no arcs.
fn tv_g4_payload() -> GmonOut {
    let mut h = Histogram::new(LO, HI, ((HI - LO) / 4) as usize, 1000);
    for (addr, n) in [(0x4011b0, 30), (0x4011d8, 10)] {
        let i = h.bin_of(addr).unwrap();
        h.bins[i] += n;
    }
    GmonOut {
        histograms: vec![h],
        ..GmonOut::default()
    }
}

fn vectors() -> Vec<(&'static str, Format, GmonOut, usize)> {
    vec![
        ("tv-g1.gnu.gmon", Format::Gnu, common_payload(), 892),
        ("tv-g2.bsd.gmon", Format::Bsd, common_payload(), 880),
        ("tv-g3.oldbsd.gmon", Format::OldBsd, common_payload(), 860),
        ("tv-g4.bsd.gmon", Format::Bsd, tv_g4_payload(), 424),
    ]
}

#[test]
fn writer_matches_the_vectors_byte_for_byte() {
    for (name, format, payload, len) in vectors() {
        let bytes = gmon::write(&payload, format, Target::X86_64).unwrap();
        assert_eq!(bytes.len(), len, "{name}: length");
        check_golden(name, &bytes);
    }
}

#[test]
fn tv_g1_header_bytes() {
    let bytes = gmon::write(&common_payload(), Format::Gnu, Target::X86_64).unwrap();
    let mut want = Vec::new();
    want.extend_from_slice(b"gmon\x01\x00\x00\x00");
    want.extend_from_slice(&[0; 12]);
    want.push(0);
    want.extend_from_slice(&[0x00, 0x10, 0x40, 0, 0, 0, 0, 0]);
    want.extend_from_slice(&[0x00, 0x13, 0x40, 0, 0, 0, 0, 0]);
    want.extend_from_slice(&[0x80, 0x01, 0, 0, 0x64, 0, 0, 0]);
    want.extend_from_slice(b"seconds\0\0\0\0\0\0\0\0s");
    assert_eq!(want.len(), 61);
    assert_eq!(&bytes[..61], &want[..]);
    // TV-G2's header: ncnt 808, GMONVERSION, profrate 100.
    let bsd = gmon::write(&common_payload(), Format::Bsd, Target::X86_64).unwrap();
    assert_eq!(
        &bsd[16..28],
        &[0x28, 3, 0, 0, 0x79, 0x18, 5, 0, 100, 0, 0, 0]
    );
}

#[test]
fn parser_reads_the_golden_files() {
    for (name, format, payload, _) in vectors() {
        let bytes = std::fs::read(golden_dir().join(name)).unwrap();
        let d = gmon::parse(&bytes, Target::X86_64).unwrap();
        assert_eq!(d.format, format, "{name}");
        let mut want = payload;
        if format == Format::OldBsd {
            want.histograms[0].prof_rate = 0;
        }
        assert_eq!(d.gmon, want, "{name}");
        assert_eq!(
            d.gnu_version,
            (format == Format::Gnu).then_some(1),
            "{name}"
        );
    }
}

/// The fixture executable, assembled and linked in a temporary directory;
/// `None` (after saying why) when the tools are missing.
struct Tools {
    dir: tempfile::TempDir,
}

impl Tools {
    fn get() -> Option<Tools> {
        if !profdev_testkit::tools(
            "gprof on the fixture (GNU binutils)",
            &["gprof", "as", "ld"],
        ) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let run = |cmd: &mut Command| {
            let out = cmd.current_dir(dir.path()).output().unwrap();
            assert!(out.status.success(), "{cmd:?}: {out:?}");
        };
        run(Command::new("as")
            .arg(golden_dir().join("fake.s"))
            .args(["-o", "fake.o"]));
        run(Command::new("ld").args(["-Ttext=0x401000", "-e", "_start", "-o", "fake", "fake.o"]));
        Some(Tools { dir })
    }

    /// Run gprof on `fake` and the gmon file at `file`, returning exit
    /// status, stdout and stderr.
    fn gprof(&self, args: &[&str], file: &Path) -> (i32, String, String) {
        let out = Command::new("gprof")
            .args(args)
            .arg("fake")
            .arg(file)
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    }

    /// Write `bytes` as `name` beside `fake`; returns the relative name
    /// gprof quotes in its messages.
    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        std::fs::write(self.dir.path().join(name), bytes).unwrap();
        PathBuf::from(name)
    }
}

#[test]
fn gprof_prints_the_spec_text_for_tv_g1_g2_g3() {
    let Some(tools) = Tools::get() else { return };
    for (name, format, payload, _) in &vectors()[..3] {
        let bytes = gmon::write(payload, *format, Target::X86_64).unwrap();
        let file = tools.write(name, &bytes);
        let (code, out, err) = tools.gprof(&["-b"], &file);
        assert_eq!(code, 0, "{name}: {err}");
        assert_eq!(err, "", "{name}");
        if *name == "tv-g1.gnu.gmon" {
            check_golden("tv-g1.gprof.txt", out.as_bytes());
        }
        assert_eq!(
            out, SPEC_TV_G1,
            "{name}: gprof output differs from the spec"
        );
    }
}

#[test]
fn gprof_prorates_tv_g4() {
    let Some(tools) = Tools::get() else { return };
    let (_, format, payload, _) = &vectors()[3];
    let bytes = gmon::write(payload, *format, Target::X86_64).unwrap();
    let file = tools.write("tv-g4.bsd.gmon", &bytes);
    let (code, out, err) = tools.gprof(&["-b"], &file);
    assert_eq!(code, 0, "{err}");
    check_golden("tv-g4.gprof.txt", out.as_bytes());
    for line in [
        "Each sample counts as 0.001 seconds.",
        " time   seconds   seconds    calls  Ts/call  Ts/call  name    ",
        " 87.50      0.04     0.04                             leaf",
        " 12.50      0.04     0.01                             mid",
        "granularity: each sample hit covers 4 byte(s) for 2.50% of 0.04 seconds",
    ] {
        assert!(
            out.lines().any(|l| l == line),
            "missing line {line:?} in:\n{out}"
        );
    }
    assert_eq!(out.matches("<spontaneous>").count(), 2, "{out}");
}

/// TV-G5: gprof's own errors on damaged files, and the same damage seen by
/// our parser (one sentence naming field and offset).
#[test]
fn tv_g5_errors() {
    let good = gmon::write(&common_payload(), Format::Gnu, Target::X86_64).unwrap();
    let mut v2 = good.clone();
    v2[4] = 2;
    let mut tag7 = good.clone();
    tag7[20] = 7;
    let cut = good[..20 + 1 + 40 + 10].to_vec();
    let mut v0 = good.clone();
    v0[4] = 0;
    let cases: [(&str, &[u8], &str, &str); 4] = [
        (
            "short",
            &good[..10],
            "short: file too short to be a gmon file\n",
            "gmon.out is 10 bytes long, too short to be a gmon file (at least 20)",
        ),
        (
            "v2",
            &v2,
            "gprof: file `v2' has unsupported version 2\n",
            "gmon.out: version at byte 4 is 2; only versions 0 and 1 exist",
        ),
        (
            "tag7",
            &tag7,
            "gprof: tag7: found bad tag 7 (file corrupted?)\n",
            "gmon.out: record tag at byte 20 is 7, not 0 (histogram), 1 (arc) or 2 (basic blocks)",
        ),
        (
            "cut",
            &cut,
            "gprof: cut: unexpected EOF after reading 5 of 384 samples\n",
            "gmon.out: histogram bins at byte 61 needs 768 bytes but the file ends after 10",
        ),
    ];
    for (_, bytes, _, ours) in &cases {
        assert_eq!(
            gmon::parse(bytes, Target::X86_64).unwrap_err().to_string(),
            *ours
        );
    }
    assert_eq!(
        gmon::parse(&v0, Target::X86_64).unwrap().gmon,
        common_payload()
    );

    let Some(tools) = Tools::get() else { return };
    for (name, bytes, theirs, _) in &cases {
        let file = tools.write(name, bytes);
        let (code, _, err) = tools.gprof(&["-b"], &file);
        assert_eq!(code, 1, "{name}");
        assert_eq!(err, *theirs, "{name}");
    }
    let file = tools.write("v0", &v0);
    let (code, out, _) = tools.gprof(&["-b"], &file);
    assert_eq!(code, 0);
    assert_eq!(out, SPEC_TV_G1);

    let file = tools.write("v_gnu.out", &good);
    let (_, out, _) = tools.gprof(&["-i"], &file);
    assert_eq!(
        out,
        "File `v_gnu.out' (version 1) contains:\n\t1 histogram record\n\t3 call-graph records\n\t0 basic-block count records\n"
    );
    let bsd = gmon::write(&common_payload(), Format::Bsd, Target::X86_64).unwrap();
    let file = tools.write("v_bsd.out", &bsd);
    let (_, out, _) = tools.gprof(&["-i"], &file);
    assert!(
        out.starts_with("File `v_bsd.out' (version 0) contains:\n"),
        "{out}"
    );
}

/// A symbols-only ELF (what `profdev kgmon -p` writes as vmlinux.syms) with
/// the fixture's four functions makes gprof print exactly what the real
/// fixture executable does.
#[test]
fn gprof_reads_a_symbols_only_elf() {
    use profdev_formats::symelf::{self, Binding, Symbol};
    let Some(tools) = Tools::get() else { return };
    let entries = [
        (0x401000, "_start"),
        (0x4011a6, "leaf"),
        (0x4011da, "mid"),
        (0x401201, "main"),
        (HI, "_etext"),
    ];
    let syms: Vec<Symbol> = entries
        .iter()
        .enumerate()
        .map(|(i, &(addr, name))| Symbol {
            addr,
            size: entries.get(i + 1).map_or(HI, |e| e.0) - addr,
            name: name.into(),
            binding: Binding::Global,
        })
        .collect();
    let elf = symelf::write(LO..HI, &syms);
    tools.write("fake", &elf);
    let bytes = gmon::write(&common_payload(), Format::Gnu, Target::X86_64).unwrap();
    let file = tools.write("tv-g1.gnu.gmon", &bytes);
    let (code, out, err) = tools.gprof(&["-b"], &file);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, SPEC_TV_G1);
}
