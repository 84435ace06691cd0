//! Encodings reused across loads, and short blocks derived from the
//! fall-through of the conditional jump before them: a program that runs
//! a loop of known trip counts, then execs itself (a second process image
//! at another load address, served a copy of the first image's encoding),
//! has exactly the counts its structure implies, summed over both; and
//! the same counts when its plan and encoding come from the on-disk cache.

use profdev_coverage::cache::Cache;
use profdev_coverage::counts::ModuleCoverage;
use profdev_coverage::launch::Server;
use profdev_coverage::plan::{How, Plan};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn build(dir: &Path) -> PathBuf {
    let out = dir.join("fell");
    let st = Command::new("cc")
        .args(["-O1", "-g", "-o"])
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fell.c"))
        .status()
        .expect("cc runs");
    assert!(st.success());
    out
}

fn fellfn(path: &Path) -> u64 {
    let elf = profdev_symbolize::ElfObject::open(path).expect("parses");
    elf.symbols()
        .iter()
        .find(|s| s.mangled == "fellfn")
        .expect("fellfn's symbol")
        .addr
}

fn count_at(m: &ModuleCoverage, addr: u64) -> u64 {
    m.blocks
        .iter()
        .find(|b| b.start == addr)
        .unwrap_or_else(|| panic!("no block at {addr:#x}"))
        .count
}

#[test]
fn short_fall_through_blocks_are_derived() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build(tmp.path());
    let f = fellfn(&prog);
    let plan = Plan::of_file(&prog).expect("plans");
    for off in [9, 20] {
        let b = &plan.blocks[plan.block_at(f + off).expect("a block")];
        assert_eq!(b.start, f + off);
        assert!(
            matches!(b.how, How::Fell { .. }),
            "block at fellfn+{off}: {:?}",
            b.how
        );
    }
}

#[test]
fn an_encoding_reused_in_an_execd_image_counts_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build(tmp.path());
    let f = fellfn(&prog);
    let name = prog.file_name().unwrap().to_string_lossy().into_owned();
    // No on-disk cache: the first image encodes.
    let server = Server::with_cache(&[name], None).expect("server");
    let out = tmp.path().join("stdout");
    let mut cmd = Command::new(&prog);
    cmd.arg("again")
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .envs(server.env(None));
    let st = cmd.status().expect("runs");
    assert!(st.success(), "{st:?}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "21\n21\n");
    let (made, reused) = server.encodings();
    assert_eq!(
        (made, reused),
        (1, 1),
        "the second image is served the first's encoding"
    );
    // Collected again once the run is over, the instructions moved out
    // of the plans: the same counts.
    let (mods, notes) = server.collect();
    assert_eq!(server.into_collected(), (mods.clone(), notes.clone()));
    for n in &notes {
        eprintln!("note: {n}");
    }
    assert_eq!(mods.len(), 1);
    let m = &mods[0];
    // 2 images x 7 calls of fellfn(10, 3).
    assert_eq!(count_at(m, f), 14, "entry");
    assert_eq!(count_at(m, f + 4), 140, "loop head");
    assert_eq!(count_at(m, f + 9), 42, "the short block after jge");
    assert_eq!(count_at(m, f + 12), 140, "loop tail");
    assert_eq!(count_at(m, f + 20), 14, "the ret after jl");
    let br = |a: u64| {
        m.branches
            .iter()
            .find(|b| b.addr == a)
            .map(|b| (b.taken, b.not_taken))
    };
    assert_eq!(br(f + 7), Some((98, 42)), "jge");
    assert_eq!(br(f + 18), Some((126, 14)), "jl");
}

/// One run of `prog` (not execing itself) with the cache at `cache`,
/// address-space randomization off (so the area the first run's encoding
/// was made for is free in the next): the module's counts, the loads
/// served from the cache, the encodings made, the notes, and the areas
/// (`Server::areas`, as text).
fn cached_run(prog: &Path, cache: &Path) -> (ModuleCoverage, u64, u64, Vec<String>, String) {
    let name = prog.file_name().unwrap().to_string_lossy().into_owned();
    let server = Server::with_cache(&[name], Some(Cache::open(cache).expect("cache"))).unwrap();
    let mut cmd = Command::new(prog);
    cmd.stdout(Stdio::null()).envs(server.env(None));
    // SAFETY: personality(2) only changes the child's own flags, between
    // fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            if libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let st = cmd.status().expect("runs");
    assert!(st.success(), "{st:?}");
    server.wait_for_cache(std::time::Duration::from_secs(60));
    let (made, _) = server.encodings();
    let from_cache = server.encodings_from_cache();
    let areas = format!("{:?}", server.areas());
    let (mut mods, notes) = server.collect();
    assert_eq!(mods.len(), 1, "{notes:?}");
    (mods.remove(0), from_cache, made, notes, areas)
}

#[test]
fn a_plan_from_the_cache_counts_as_a_fresh_one() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build(tmp.path());
    let f = fellfn(&prog);
    let cache = tmp.path().join("cache");
    let (first, from_cache, made, _, areas) = cached_run(&prog, &cache);
    assert_eq!((from_cache, made), (0, 1), "an empty cache: encoded");
    // 7 calls of fellfn(10, 3).
    assert_eq!(count_at(&first, f), 7);
    assert_eq!(count_at(&first, f + 4), 70);
    let files: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
    assert_eq!(files.len(), 1, "one file kept: {files:?}");
    let (second, from_cache, made, _, areas2) = cached_run(&prog, &cache);
    assert_eq!((from_cache, made), (1, 0), "planned and encoded once only");
    assert_eq!(second, first, "the same counts from the cache");
    // The area served from the cache: at the same place, its patches in
    // run-time addresses as the fresh one's (not the cache's bias 0).
    assert!(areas.contains("patches: [Patch"), "{areas}");
    assert_eq!(areas2, areas, "the same area from the cache");
    // A damaged file is said so and replaced; the counts stay exact.
    let file = files[0].as_ref().unwrap().path();
    let len = std::fs::metadata(&file).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (third, from_cache, made, notes, _) = cached_run(&prog, &cache);
    assert_eq!((from_cache, made), (0, 1));
    assert!(
        notes.iter().any(|n| n.ends_with("; planned afresh")),
        "{notes:?}"
    );
    assert_eq!(third, first);
    assert_eq!(std::fs::metadata(&file).unwrap().len(), len, "replaced");
}
