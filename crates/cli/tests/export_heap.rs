//! `profdev export svg|folded -i HEAP` of an allocation profile, the one
//! `profdev mprof --pprof` writes, raw or gzipped: an allocation flame
//! graph whose frames weigh bytes, of tests/data/mprof/stacks.c (build()
//! and other() call one leaf_alloc(): 409,600 and 50,000 bytes), and the
//! sentences that refuse what an allocation profile cannot give.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn profdev(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(args)
        .output()
        .unwrap()
}

/// stacks.c built with frame pointers, run under `mprof --pprof`; the
/// profile's path.
fn heap_profile(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mprof/stacks.c");
    let exe = dir.join("stacks");
    let cc = Command::new("cc")
        .args(["-g", "-O2", "-fno-omit-frame-pointer", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("cannot run cc");
    assert!(cc.success(), "cc failed on stacks.c");
    let heap = dir.join("heap.pb");
    let o = profdev(&[
        "mprof".as_ref(),
        "-o".as_ref(),
        "-".as_ref(),
        "--pprof".as_ref(),
        heap.as_os_str(),
        exe.as_os_str(),
        "keep".as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    heap
}

/// The `<title>`s of a graph's frames.
fn titles(svg: &str) -> Vec<String> {
    svg.split("\"><title>")
        .skip(1)
        .filter_map(|t| t.split("</title>").next())
        .map(String::from)
        .collect()
}

#[test]
fn an_allocation_profile_exports_as_a_flame_graph_of_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let heap = heap_profile(dir.path());
    let svg = dir.path().join("heap.svg");
    let o = profdev(&[
        "export".as_ref(),
        "svg".as_ref(),
        "-i".as_ref(),
        heap.as_os_str(),
        "-o".as_ref(),
        svg.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("(allocation flame graph: "), "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains(">Allocation Flame Graph</text>"));
    let t = titles(&text);
    let has = |prefix: &str| t.iter().any(|t| t.starts_with(prefix));
    assert!(has("build (409600 bytes, "), "{t:?}");
    assert!(has("other (50000 bytes, "), "{t:?}");
    // The same profile gzipped (as go tool pprof keeps them), live bytes:
    // other()'s 50,000 were never freed, build()'s were.
    let gz = dir.path().join("heap.pb.gz");
    let z = Command::new("sh")
        .arg("-c")
        .arg("gzip -c \"$0\" > \"$1\"")
        .arg(&heap)
        .arg(&gz)
        .status()
        .unwrap();
    assert!(z.success());
    let o = profdev(&[
        "export".as_ref(),
        "svg".as_ref(),
        "--type".as_ref(),
        "inuse".as_ref(),
        "-i".as_ref(),
        gz.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = titles(&String::from_utf8(o.stdout).unwrap());
    assert!(
        t.iter()
            .any(|t| t.starts_with("other (50000 bytes, 100.00%")),
        "{t:?}"
    );
    assert!(!t.iter().any(|t| t.starts_with("build")), "{t:?}");
}

#[test]
fn folded_and_the_refusals_of_an_allocation_profile() {
    let dir = tempfile::tempdir().unwrap();
    let heap = heap_profile(dir.path());
    let o = profdev(&[
        "export".as_ref(),
        "folded".as_ref(),
        "-i".as_ref(),
        heap.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    for want in [
        ";main;build;leaf_alloc 409600",
        ";main;other;leaf_alloc 50000",
    ] {
        assert!(
            text.lines()
                .any(|l| l.ends_with(&want[1..]) && l.contains(want)),
            "{want} in {text}"
        );
    }
    let refused = |args: &[&str], says: &str| {
        let mut a: Vec<&std::ffi::OsStr> = vec!["export".as_ref()];
        a.extend(args.iter().map(std::ffi::OsStr::new));
        a.extend(["-i".as_ref(), heap.as_os_str()]);
        let o = profdev(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one sentence: {err}");
    };
    refused(
        &["pprof"],
        "exports as svg (an allocation flame graph) or folded, not pprof",
    );
    refused(&["svg", "--type", "off-cpu"], "not --type off-cpu");
    // A recording is not an allocation profile.
    let rec = dir.path().join("profdev.data");
    std::fs::write(&rec, b"PDRECORD and the rest of a header").unwrap();
    let o = profdev(&[
        "export".as_ref(),
        "svg".as_ref(),
        "--type".as_ref(),
        "alloc".as_ref(),
        "-i".as_ref(),
        rec.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--type alloc is for an allocation profile"),
        "{err}"
    );
}
