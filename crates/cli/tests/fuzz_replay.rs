//! Every committed fuzz input, replayed under `cargo test`.
//!
//! `fuzz/` (cargo fuzz, nightly) is not part of the workspace. Each of its
//! targets calls one `fuzzing::NAME` function of the crate that owns the
//! parser, and this test calls the same function on every file of
//! `fuzz/corpus/NAME/` (the seeds) and `fuzz/artifacts/NAME/` (inputs that
//! once crashed, kept as regressions), so a parser change that breaks a
//! committed input fails here on stable, without a fuzzer.

use std::path::{Path, PathBuf};

type Entry = fn(&[u8]);

const TARGETS: &[(&str, Entry)] = &[
    ("agent_cut", profdev_agent::fuzzing::agent_cut),
    ("coverage_cache", profdev_coverage::fuzzing::coverage_cache),
    ("ctl", profdev_dev::fuzzing::ctl),
    ("elf", profdev_symbolize::fuzzing::elf),
    ("gmon", profdev_formats::fuzzing::gmon),
    ("heap_profile", profdev_formats::fuzzing::heap_profile),
    ("heap_scan", profdev_mprof::fuzzing::heap_scan),
    ("jit", profdev_symbolize::fuzzing::jit),
    ("kallsyms", profdev_symbolize::fuzzing::kallsyms),
    ("kpdata", profdev_formats::fuzzing::kpdata),
    ("maps", profdev_symbolize::fuzzing::maps),
    ("mon_out", profdev_formats::fuzzing::mon_out),
    ("perf_ring", profdev_sample::fuzzing::perf_ring),
    ("prf", profdev_coverage::fuzzing::prf),
    ("prflog", profdev_formats::fuzzing::prflog),
    ("prof_histogram", profdev_formats::fuzzing::prof_histogram),
    ("recording", profdev_formats::fuzzing::recording),
    ("unwind", profdev_symbolize::fuzzing::unwind),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir`, sorted; none if it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .map(|e| e.expect("reading a corpus directory").path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

fn replay(name: &str, entry: Entry) {
    let corpus = files(&fuzz_dir().join("corpus").join(name));
    assert!(
        !corpus.is_empty(),
        "fuzz/corpus/{name} has no seeds (see fuzz/README.md)"
    );
    let artifacts = files(&fuzz_dir().join("artifacts").join(name));
    for path in corpus.iter().chain(&artifacts) {
        let data = std::fs::read(path).expect("reading a corpus file");
        if std::panic::catch_unwind(|| entry(&data)).is_err() {
            panic!("fuzz target {name} panics on {}", path.display());
        }
    }
}

#[test]
fn every_target_has_a_fuzz_target_file() {
    let dir = fuzz_dir().join("fuzz_targets");
    let mut on_disk: Vec<String> = files(&dir)
        .iter()
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
        .collect();
    on_disk.sort();
    let replayed: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        on_disk, replayed,
        "fuzz/fuzz_targets and this test's table differ"
    );
    for (name, _) in TARGETS {
        let text = std::fs::read_to_string(dir.join(format!("{name}.rs"))).unwrap();
        assert!(
            text.contains(&format!("::fuzzing::{name}(data)")),
            "fuzz/fuzz_targets/{name}.rs does not call fuzzing::{name}"
        );
    }
}

#[test]
fn agent_cut() {
    replay("agent_cut", profdev_agent::fuzzing::agent_cut);
}

#[test]
fn coverage_cache() {
    replay("coverage_cache", profdev_coverage::fuzzing::coverage_cache);
}

#[test]
fn ctl() {
    replay("ctl", profdev_dev::fuzzing::ctl);
}

#[test]
fn elf() {
    replay("elf", profdev_symbolize::fuzzing::elf);
}

#[test]
fn gmon() {
    replay("gmon", profdev_formats::fuzzing::gmon);
}

#[test]
fn kallsyms() {
    replay("kallsyms", profdev_symbolize::fuzzing::kallsyms);
}

#[test]
fn kpdata() {
    replay("kpdata", profdev_formats::fuzzing::kpdata);
}

#[test]
fn maps() {
    replay("maps", profdev_symbolize::fuzzing::maps);
}

#[test]
fn mon_out() {
    replay("mon_out", profdev_formats::fuzzing::mon_out);
}

#[test]
fn perf_ring() {
    replay("perf_ring", profdev_sample::fuzzing::perf_ring);
}

#[test]
fn prflog() {
    replay("prflog", profdev_formats::fuzzing::prflog);
}

#[test]
fn heap_profile() {
    replay("heap_profile", profdev_formats::fuzzing::heap_profile);
}

#[test]
fn prof_histogram() {
    replay("prof_histogram", profdev_formats::fuzzing::prof_histogram);
}

#[test]
fn recording() {
    replay("recording", profdev_formats::fuzzing::recording);
}

#[test]
fn unwind() {
    replay("unwind", profdev_symbolize::fuzzing::unwind);
}

/// The unwind seeds are real stacks of the fixture (copied by gdb): CFI
/// takes each to `_start`, through every caller.
#[test]
fn unwind_seeds_are_complete_stacks() {
    use profdev_symbolize::unwind::UnwindMethod;
    // Return addresses in the fixture (fuzz-fixture/fx.c, objdump -d).
    const IN_START: u64 = 0x40100e;
    const IN_OUTER: u64 = 0x4010e0;
    const IN_MIDDLE: u64 = 0x40109f;
    const IN_ENTRY: u64 = 0x401123;
    let dir = fuzz_dir().join("corpus/unwind");
    for (seed, want) in [
        ("start", vec![0x401009]),
        ("outer", vec![0x4010d0, IN_ENTRY, IN_START]),
        ("middle", vec![0x401080, IN_OUTER, IN_ENTRY, IN_START]),
        (
            "leaf",
            vec![0x401030, IN_MIDDLE, IN_OUTER, IN_ENTRY, IN_START],
        ),
    ] {
        let data = std::fs::read(dir.join(seed)).unwrap();
        let [with_copy, _] = profdev_symbolize::fuzzing::unwind_input(&data).unwrap();
        let got: Vec<u64> = with_copy.frames.iter().map(|f| f.0).collect();
        assert_eq!(got, want, "{seed}");
        assert_eq!(with_copy.method, UnwindMethod::Cfi, "{seed}");
    }
}

#[test]
fn heap_scan() {
    replay("heap_scan", profdev_mprof::fuzzing::heap_scan);
}
