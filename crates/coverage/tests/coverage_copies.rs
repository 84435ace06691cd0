//! Instructions copied into trampolines keep their meaning: a RIP-relative
//! operand that reads the address of an instruction copied with it (a
//! function taking its own address, as CPython's `subtype_traverse` does)
//! still gives the original address (tests/fixtures/selfref.c). Before the
//! fix, CPython built with `-O3` (pyenv's) looped for ever in its garbage
//! collector under coverage. And code the module itself copies at run
//! time (V8's embedded builtins, in node) is never patched: the copy of
//! a patch jumps nowhere (tests/fixtures/copiedblob.c).

use profdev_coverage::launch::launch;
use std::path::Path;
use std::process::{Command, Stdio};

#[test]
fn an_operand_reading_the_code_it_is_copied_with_keeps_its_address() {
    let tmp = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O1", "-O2"] {
        let prog = tmp.path().join(format!("selfref{opt}"));
        let st = Command::new("cc")
            .args([opt, "-g", "-o"])
            .arg(&prog)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/selfref.c"))
            .status()
            .expect("cc runs");
        assert!(st.success());
        let native = Command::new(&prog).output().expect("runs");
        assert_eq!(String::from_utf8_lossy(&native.stdout), "1 1 1\n");
        let out = tmp.path().join(format!("stdout{opt}"));
        let mut cmd = Command::new(&prog);
        cmd.stdout(Stdio::from(std::fs::File::create(&out).unwrap()));
        let name = prog.file_name().unwrap().to_string_lossy().into_owned();
        let run = launch(cmd, &[name]).expect("launches");
        assert!(run.status.success(), "{:?}", run.status);
        assert_eq!(run.modules.len(), 1, "{:?}", run.notes);
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "1 1 1\n",
            "{opt}: under coverage each function reads its own address"
        );
    }
}

/// Code the module copies at run time and runs there, as V8 does with
/// its embedded builtins (node, issue 28 item 4), is left unpatched: a
/// patched blob, copied, jumped nowhere (tests/fixtures/copiedblob.c).
/// The copy computes the right sum, the blob's blocks are uncounted and
/// said so, main's own are counted.
#[test]
fn code_the_module_copies_at_run_time_is_not_patched() {
    let tmp = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O2"] {
        let prog = tmp.path().join(format!("copiedblob{opt}"));
        let st = Command::new("cc")
            .args([opt, "-g", "-o"])
            .arg(&prog)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/copiedblob.c"))
            .status()
            .expect("cc runs");
        assert!(st.success());
        let out = tmp.path().join(format!("stdout{opt}"));
        let mut cmd = Command::new(&prog);
        cmd.stdout(Stdio::from(std::fs::File::create(&out).unwrap()));
        let name = prog.file_name().unwrap().to_string_lossy().into_owned();
        let run = launch(cmd, &[name]).expect("launches");
        assert!(
            run.status.success(),
            "{opt}: {:?} {:?}",
            run.status,
            run.notes
        );
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "4950 4950\n");
        assert_eq!(run.modules.len(), 1, "{:?}", run.notes);
        let m = &run.modules[0];
        // The blob's three blocks (entry, loop, ret).
        assert_eq!(m.uncounted, 3, "{opt}: {:?}", run.notes);
        assert!(
            run.notes
                .iter()
                .any(|n| n.contains(": 3 blocks of V8's embedded builtins are not counted")),
            "{:?}",
            run.notes
        );
        assert!(
            m.blocks.iter().any(|b| b.count == 100),
            "{opt}: main's loop"
        );
    }
}
