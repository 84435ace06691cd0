//! `profdev export svg|folded` of an allocation profile
//! (`profdev_formats::export::heap`), from the bytes `mprof --pprof`
//! writes, through the decoder, to the graph.

use profdev_formats::export::heap::{make, Space};
use profdev_formats::export::{wrote, ExportError, Written};
use profdev_formats::pprof::decode::heap_stacks;
use profdev_formats::pprof::heap::{encode_stacks, HeapFrame, HeapStack};

fn frame(f: &str) -> HeapFrame {
    HeapFrame {
        module: "/bin/prog".into(),
        // A location per function (pprof's are per address).
        address: 0x1000 + f.bytes().map(u64::from).sum::<u64>(),
        function: f.into(),
        file: "prog.c".into(),
        line: 1,
    }
}

/// main calls build and other, each calls leaf_alloc; build's stack
/// allocated 409,600 bytes (4,096 still live), other's 50,000 (none).
fn profile() -> Vec<u8> {
    encode_stacks(&[
        HeapStack {
            frames: vec![frame("leaf_alloc"), frame("build"), frame("main")],
            alloc_objects: 100,
            alloc_space: 409_600,
            inuse_objects: 1,
            inuse_space: 4096,
        },
        HeapStack {
            frames: vec![frame("leaf_alloc"), frame("other"), frame("main")],
            alloc_objects: 50,
            alloc_space: 50_000,
            inuse_objects: 0,
            inuse_space: 0,
        },
    ])
}

/// The `<title>`s of the graph's frames.
fn titles(svg: &str) -> Vec<&str> {
    svg.split("\"><title>")
        .skip(1)
        .filter_map(|t| t.split("</title>").next())
        .collect()
}

#[test]
fn an_allocation_flame_graph_weighs_bytes() {
    let stacks = heap_stacks(&profile()).unwrap();
    let m = make(&stacks, "svg", Space::Alloc, None, false).unwrap();
    let svg = String::from_utf8(m.bytes).unwrap();
    assert!(svg.contains(">Allocation Flame Graph</text>"), "the title");
    let t = titles(&svg);
    for want in [
        "main (459600 bytes, 100.00%)",
        "build (409600 bytes, 89.12%)",
        "other (50000 bytes, 10.88%)",
        "leaf_alloc (409600 bytes, 89.12%)",
        "leaf_alloc (50000 bytes, 10.88%)",
    ] {
        assert!(t.contains(&want), "{want:?} in {t:?}");
    }
    assert!(svg.contains(" bytes)\""), "the search counts bytes");
    let drawing = svg.split("<script").next().unwrap();
    assert!(!drawing.contains("samples"), "no frame says samples");
    let Written::Alloc {
        frames,
        stacks,
        bytes,
    } = m.what
    else {
        panic!("not an allocation graph");
    };
    assert_eq!((frames, stacks, bytes), (5, 2, 459_600));
    let line = wrote("svg", std::path::Path::new("a.svg"), 0, &m.what).unwrap();
    assert!(
        line.contains("allocation flame graph: 5 frames, 2 stacks, 459600 bytes"),
        "{line}"
    );
}

#[test]
fn the_inuse_graph_shows_only_what_was_live() {
    let stacks = heap_stacks(&profile()).unwrap();
    let m = make(&stacks, "svg", Space::Inuse, Some("live".into()), true).unwrap();
    let svg = String::from_utf8(m.bytes).unwrap();
    assert!(svg.contains(">live</text>"));
    let t = titles(&svg);
    assert!(t.contains(&"build (4096 bytes, 100.00%)"), "{t:?}");
    assert!(!t.iter().any(|t| t.starts_with("other")), "{t:?}");
}

#[test]
fn folded_lines_are_bytes_per_stack() {
    let stacks = heap_stacks(&profile()).unwrap();
    let m = make(&stacks, "folded", Space::Alloc, None, false).unwrap();
    assert_eq!(
        String::from_utf8(m.bytes).unwrap(),
        "main;build;leaf_alloc 409600\nmain;other;leaf_alloc 50000\n"
    );
    let m = make(&stacks, "folded", Space::Inuse, None, false).unwrap();
    assert_eq!(
        String::from_utf8(m.bytes).unwrap(),
        "main;build;leaf_alloc 4096\n"
    );
}

#[test]
fn formats_of_cpu_samples_are_refused_in_a_sentence() {
    let stacks = heap_stacks(&profile()).unwrap();
    for f in ["pprof", "gmon", "firefox", "otlp", "kpdata"] {
        let Err(e) = make(&stacks, f, Space::Alloc, None, false) else {
            panic!("{f} made");
        };
        assert_eq!(e, ExportError::HeapFormat(f.into()));
        assert!(
            e.to_string()
                .contains("svg (an allocation flame graph) or folded"),
            "{e}"
        );
    }
}

#[test]
fn a_recording_is_left_to_the_recording_reader() {
    use profdev_formats::export::heap::read;
    // Its first 8 bytes say so; nothing else is read.
    let mut rec = profdev_formats::recording::MAGIC.to_vec();
    rec.extend_from_slice(b"whatever follows");
    assert_eq!(read(std::io::Cursor::new(rec)).unwrap(), None);
    // Neither a recording nor protobuf: the recording reader says why.
    assert_eq!(read(&b"hello, world\n"[..]).unwrap(), None);
    let stacks = read(std::io::Cursor::new(profile())).unwrap().unwrap();
    assert_eq!(stacks.len(), 2);
}
