//! prof's tests: the device driven by records fed to it or replayed.

use super::ctl::parse_c_number;
use super::*;
use crate::engine::ReplayFactory;
use crate::tree;
use profdev_core::{CpuMode, FileId, Sample};
use profdev_symbolize::objects::split_dev;
use profdev_symbolize::tasks::EXIT_GRACE_NS;
use profdev_symbolize::ElfLayout;
use std::path::Path;

const BASE: u64 = 0x5555_0000_0000;

/// Every pair of record `dir`'s histogram, one read(2) of 64 bytes each.
pub(super) fn histogram(d: &Prof, dir: &str) -> Vec<String> {
    let dir = tree::walk(d, tree::Qid::ROOT, dir).unwrap();
    let h = tree::walk(d, dir.qid, "histogram").unwrap();
    let mut chan = d.open(h.qid, tree::OpenMode::Read).unwrap();
    let mut pairs = Vec::new();
    loop {
        let b = d.read(&mut chan, 0, 64).unwrap();
        if b.is_empty() {
            break;
        }
        pairs.push(String::from_utf8(b).unwrap());
    }
    pairs
}

/// One write of `msg` to ctl by a writer with credentials `cred` (the
/// modes' own tests: coverage.rs, memory.rs).
pub(super) fn write_as(
    dev: &Prof,
    msg: &str,
    cred: Option<crate::access::Cred>,
) -> Result<usize, DevError> {
    let e = tree::walk(dev, Qid::ROOT, "ctl").unwrap();
    let mut chan = dev.open(e.qid, OpenMode::Write).unwrap();
    chan.cred = cred;
    let r = dev.write(&mut chan, 0, msg.as_bytes());
    dev.close(chan);
    r
}

/// A device fed by nothing.
pub(super) fn idle() -> Prof {
    Prof::new(Engine::new(Arc::new(ReplayFactory::new(vec![]))))
}

fn exe() -> String {
    std::env::current_exe()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// A mapping of `path` at BASE with offset 0 in process `pid`. This
/// test binary is a PIE whose first load segment has vaddr 0 and offset
/// 0, so BASE + k is file address k.
fn mmap(pid: u32, path: &str, file: Option<FileId>, build_id: Option<Vec<u8>>) -> Record {
    Record::Mmap {
        pid,
        tid: pid,
        addr: BASE,
        len: 0x10_0000,
        pgoff: 0,
        path: path.into(),
        file,
        build_id,
        time: 0,
    }
}

fn sample(pid: u32, ip: u64) -> Record {
    Record::Sample(Sample {
        ip,
        pid,
        tid: pid,
        mode: CpuMode::User,
        ..Default::default()
    })
}

fn write(p: &Prof, msg: &[u8]) -> Result<usize, DevError> {
    let mut c = p.open(CTL, OpenMode::Write)?;
    p.write(&mut c, 0, msg)
}

fn dirs(p: &Prof) -> Vec<String> {
    p.gen(Qid::ROOT)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect()
}

fn read_all(p: &Prof, dir: &str, file: &str) -> String {
    String::from_utf8(read_bytes(p, dir, file, 64)).unwrap()
}

fn read_bytes(p: &Prof, dir: &str, file: &str, chunk: u32) -> Vec<u8> {
    let d = tree::walk(p, Qid::ROOT, dir).unwrap();
    let f = tree::walk(p, d.qid, file).unwrap();
    let mut c = p.open(f.qid, OpenMode::Read).unwrap();
    let mut out = Vec::new();
    loop {
        let b = p.read(&mut c, out.len() as u64, chunk).unwrap();
        if b.is_empty() {
            return out;
        }
        out.extend(b);
    }
}

/// The TV-P2 buckets [0,5,0,0,7] as five ticks at pc 1, seven at pc 4.
fn tv_p2() -> Prof {
    let p = idle();
    p.lock().mode = Some(Mode::Sampling);
    let mut recs = vec![mmap(7, &exe(), None, None)];
    recs.extend((0..5).map(|_| sample(7, BASE + 1)));
    recs.extend((0..7).map(|_| sample(7, BASE + 4)));
    p.feed(&recs);
    p
}

#[test]
fn tv_p1_ctl() {
    let p = idle();
    assert_eq!(write(&p, b"interval 10").unwrap(), 11);
    assert_eq!(p.interval_ms(), 10);
    write(&p, b"interval 0x10").unwrap();
    assert_eq!(p.interval_ms(), 16);
    write(&p, b"interval 012\n").unwrap();
    assert_eq!(p.interval_ms(), 10);
    write(&p, b"module  Foo\t/dis/bar.dis\n").unwrap();
    assert_eq!(p.wanted(), ["Foo", "/dis/bar.dis"]);
    write(&p, b"module").unwrap();
    assert!(p.wanted().is_empty());
    for bad in [
        &b"startcp"[..],
        b"start now",
        b"bogus",
        b"interval",
        b"interval x",
    ] {
        let e = write(&p, bad).unwrap_err();
        assert!(
            matches!(e, DevError::BadCtl(_) | DevError::BadCtlArg { .. }),
            "{bad:?}: {e:?}"
        );
    }
    assert_eq!(
        write(&p, b"bogus\n").unwrap_err().to_string(),
        "unknown control message \"bogus\""
    );
    assert_eq!(
        write(&p, b"interval 0").unwrap_err().to_string(),
        "bad control message \"interval 0\": the interval must be at least 1 ms"
    );
    // Adapted: a 200-byte message is taken whole, not truncated to 127.
    let mut long = b"module".to_vec();
    while long.len() < 200 {
        long.extend_from_slice(b" a");
    }
    assert_eq!(write(&p, &long).unwrap(), 200);
    assert_eq!(p.wanted().len(), 97);
    // Bad messages changed nothing.
    assert_eq!(p.interval_ms(), 10);
    assert_eq!(p.mode(), None);
}

#[test]
fn tv_p2_histogram_reads() {
    let p = tv_p2();
    assert_eq!(dirs(&p), ["ctl", "00000001"]);
    let d = tree::walk(&p, Qid::ROOT, "00000001").unwrap();
    let h = tree::walk(&p, d.qid, "histogram").unwrap();
    let mut c = p.open(h.qid, OpenMode::Read).unwrap();
    assert_eq!(p.read(&mut c, 0, 64).unwrap(), b"0x1 5\n");
    assert_eq!(p.read(&mut c, 6, 64).unwrap(), b"0x4 7\n");
    assert_eq!(p.read(&mut c, 12, 64).unwrap(), b"");
    assert_eq!(p.read(&mut c, 12, 64).unwrap(), b"");

    // Adapted: a read too small for the pair fails and keeps the pair.
    let mut c = p.open(h.qid, OpenMode::Read).unwrap();
    let e = p.read(&mut c, 0, 5).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid argument: read or write too small: the next pair needs 6 bytes"
    );
    assert_eq!(p.read(&mut c, 0, 6).unwrap(), b"0x1 5\n");
    assert_eq!(p.read(&mut c, 0, 64).unwrap(), b"0x4 7\n");
    assert_eq!(p.read(&mut c, 0, 64).unwrap(), b"");
}

#[test]
fn layout_and_open_rules() {
    let p = tv_p2();
    assert_eq!(
        read_all(&p, "00000001", "name"),
        format!("{}\n", exe().rsplit('/').next().unwrap())
    );
    assert_eq!(read_all(&p, "00000001", "path"), format!("{}\n", exe()));
    let d = tree::walk(&p, Qid::ROOT, "00000001").unwrap();
    let names: Vec<_> = p.gen(d.qid).unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, ["name", "path", "histogram", "pctl", "object"]);
    let pctl = tree::walk(&p, d.qid, "pctl").unwrap();
    assert_eq!(pctl.perm, 0o222);
    let mut c = p.open(pctl.qid, OpenMode::Write).unwrap();
    assert_eq!(p.write(&mut c, 0, b"x"), Err(DevError::Perm));
    assert_eq!(
        p.open(pctl.qid, OpenMode::Read).unwrap_err(),
        DevError::Perm
    );
    let h = tree::walk(&p, d.qid, "histogram").unwrap();
    assert_eq!(
        p.open(h.qid, OpenMode::ReadWrite).unwrap_err(),
        DevError::Perm
    );
    assert_eq!(p.open(CTL, OpenMode::Read).unwrap_err(), DevError::Perm);
    assert_eq!(
        p.open(CTL, OpenMode::ReadWrite).unwrap_err(),
        DevError::Perm
    );
    assert_eq!(
        p.open(Qid::ROOT, OpenMode::Write).unwrap_err(),
        DevError::Perm
    );
    assert_eq!(p.stat(h.qid).unwrap().name, "histogram");
    assert_eq!(p.stat(CTL).unwrap().perm, 0o222);
    // `end` frees the records: their files are gone, ids restart.
    write(&p, b"end\n").unwrap();
    assert_eq!(dirs(&p), ["ctl"]);
    assert_eq!(
        p.open(h.qid, OpenMode::Read).unwrap_err(),
        DevError::NotFound
    );
    assert_eq!(p.gen(d.qid).unwrap_err(), DevError::NotFound);
    assert_eq!(p.interval_ms(), 100);
}

#[test]
fn a_histogram_open_is_a_snapshot() {
    let p = tv_p2();
    let d = tree::walk(&p, Qid::ROOT, "00000001").unwrap();
    let h = tree::walk(&p, d.qid, "histogram").unwrap();
    let mut c = p.open(h.qid, OpenMode::Read).unwrap();
    p.feed(&[sample(7, BASE + 2), sample(7, BASE + 4)]);
    assert_eq!(p.read(&mut c, 0, 64).unwrap(), b"0x1 5\n");
    assert_eq!(p.read(&mut c, 0, 64).unwrap(), b"0x4 7\n");
    assert_eq!(
        read_all(&p, "00000001", "histogram"),
        "0x1 5\n0x2 1\n0x4 8\n"
    );
}

#[test]
fn selection_by_basename_and_path() {
    let p = idle();
    let me = exe();
    let base = me.rsplit('/').next().unwrap().to_string();
    p.lock().mode = Some(Mode::Sampling);
    write(&p, format!("module libc.so.6 {base}").as_bytes()).unwrap();
    p.feed(&[mmap(1, &me, None, None), sample(1, BASE + 0x10)]);
    assert_eq!(dirs(&p), ["ctl", "00000001"]);

    // Not wanted: no record, the file is not even opened.
    write(&p, b"module /no/such/module").unwrap();
    p.feed(&[
        mmap(2, "/usr/lib/other.so", None, None),
        sample(2, BASE + 0x10),
    ]);
    assert_eq!(dirs(&p), ["ctl", "00000001"]);
    // But a module with a record keeps counting after the list changed.
    p.feed(&[sample(1, BASE + 0x10)]);
    assert_eq!(read_all(&p, "00000001", "histogram"), "0x10 2\n");

    // By full path, and by a path that leads to it through a link.
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&me, &link).unwrap();
    write(&p, format!("module {}", link.display()).as_bytes()).unwrap();
    p.feed(&[mmap(3, &me, None, None), sample(3, BASE + 0x20)]);
    assert_eq!(dirs(&p), ["ctl", "00000001"]);
    assert_eq!(read_all(&p, "00000001", "histogram"), "0x10 2\n0x20 1\n");
    let copy = dir.path().join("copy");
    std::fs::copy(&me, &copy).unwrap();
    let copy = copy.to_string_lossy().into_owned();
    p.feed(&[mmap(4, &copy, None, None), sample(4, BASE + 0x20)]);
    assert_eq!(dirs(&p), ["ctl", "00000001"], "a copy is not wanted");
    write(&p, format!("module {copy}").as_bytes()).unwrap();
    p.feed(&[sample(4, BASE + 0x20)]);
    assert_eq!(dirs(&p), ["ctl", "00000002", "00000001"]);
    assert_eq!(read_all(&p, "00000002", "name"), "copy\n");
}

fn real_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap();
    let (major, minor) = split_dev(m.dev());
    Some(FileId {
        major,
        minor,
        ino: m.ino(),
        ino_generation: 0,
    })
}

/// A device resolves through the objects table it was given: a file its
/// table opened when the mapping was reported (the source's mapping
/// hook) and that was deleted since is still its module; a device with a
/// table of its own, fed the same records, has nothing to open. No table
/// is process-wide.
#[test]
fn a_device_uses_the_objects_table_it_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("prog");
    std::fs::copy(exe(), &prog).unwrap();
    let record = mmap(u32::MAX, &prog.to_string_lossy(), real_id(&prog), None);
    let objects = profdev_symbolize::Objects::new();
    objects.mapping_hook().reported(&record);
    std::fs::remove_file(&prog).unwrap();
    let given = idle().with_objects(objects);
    let own = idle();
    for p in [&given, &own] {
        p.lock().mode = Some(Mode::Sampling);
        p.feed(&[record.clone(), sample(u32::MAX, BASE + 0x10)]);
    }
    assert_eq!(dirs(&given), ["ctl", "00000001"]);
    assert_eq!(read_all(&given, "00000001", "histogram"), "0x10 1\n");
    assert_eq!(dirs(&own), ["ctl"]);
    assert_eq!((own.stats().unresolved, given.stats().unresolved), (1, 0));
}

#[test]
fn a_rebuilt_binary_gets_a_new_record() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("prog");
    let original = std::fs::read(exe()).unwrap();
    let bid = ElfLayout::parse(&original, &prog)
        .unwrap()
        .build_id()
        .expect("test binaries carry a build id")
        .to_vec();
    let at = original.windows(bid.len()).position(|w| w == bid).unwrap();
    let mut rebuilt = original.clone();
    rebuilt[at] ^= 0xff;
    std::fs::write(&prog, &original).unwrap();
    let path = prog.to_string_lossy().into_owned();
    let id1 = real_id(&prog);

    let p = idle();
    p.lock().mode = Some(Mode::Sampling);
    p.feed(&[mmap(1, &path, id1, None), sample(1, BASE + 0x10)]);
    // A rebuild replaces the file: new inode, new build id.
    let tmp = dir.path().join("prog.new");
    std::fs::write(&tmp, &rebuilt).unwrap();
    std::fs::rename(&tmp, &prog).unwrap();
    let id2 = real_id(&prog);
    assert_ne!(id1, id2);
    p.feed(&[mmap(2, &path, id2, None), sample(2, BASE + 0x10)]);
    assert_eq!(dirs(&p), ["ctl", "00000002", "00000001"]);
    // Each record serves the file that was mapped: record 1 the first
    // build (no longer at any path), record 2 the rebuild.
    assert!(read_bytes(&p, "00000001", "object", 1 << 20) == original);
    assert!(read_bytes(&p, "00000002", "object", 1 << 20) == rebuilt);
    let d = tree::walk(&p, Qid::ROOT, "00000001").unwrap();
    let o = tree::walk(&p, d.qid, "object").unwrap();
    assert_eq!(o.length, original.len() as u64);
    // A rewrite in place: same inode, the build id changes back, and a
    // later mtime (set, not waited for: a coarse clock could give the
    // rewrite the same mtime as the rename).
    let renamed = std::fs::metadata(&prog).unwrap().modified().unwrap();
    std::fs::write(&prog, &original).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&prog)
        .unwrap()
        .set_modified(renamed + std::time::Duration::from_secs(1))
        .unwrap();
    assert_eq!(real_id(&prog), id2);
    p.feed(&[mmap(3, &path, id2, None), sample(3, BASE + 0x10)]);
    // The same file again: the same record.
    p.feed(&[mmap(4, &path, id2, None), sample(4, BASE + 0x10)]);
    assert_eq!(dirs(&p), ["ctl", "00000003", "00000002", "00000001"]);
    assert_eq!(read_all(&p, "00000003", "histogram"), "0x10 2\n");
    // A mapping of the first inode, reported after the path was replaced:
    // the objects table kept that file open, so it is charged to record 1
    // (its object), not to the file now at the path.
    p.feed(&[mmap(5, &path, id1, None), sample(5, BASE + 0x10)]);
    assert_eq!(dirs(&p).len(), 4);
    assert_eq!(read_all(&p, "00000001", "histogram"), "0x10 2\n");
    assert_eq!(p.stats().unresolved, 0);
    // Build ids given by the kernel are checked the same way.
    p.feed(&[
        mmap(6, &path, None, Some(vec![7; 20])),
        sample(6, BASE + 0x10),
    ]);
    assert_eq!(p.stats().unresolved, 1);
    p.feed(&[mmap(7, &path, None, Some(bid)), sample(7, BASE + 0x10)]);
    assert_eq!(dirs(&p).len(), 4, "same build id, same inode: record 3");
    assert_eq!(read_all(&p, "00000003", "histogram"), "0x10 3\n");
}

#[test]
fn unresolvable_samples_are_counted_apart() {
    let p = idle();
    p.lock().mode = Some(Mode::Sampling);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    let script = script.to_string_lossy().into_owned();
    p.feed(&[
        mmap(1, "[vdso]", None, None),
        mmap(2, &script, None, None),
        sample(1, BASE + 1),              // vDSO
        sample(2, BASE + 1),              // not ELF
        sample(3, BASE + 1),              // unknown process
        sample(0, 0xffff_ffff_8100_0000), // idle task
        Record::Sample(Sample {
            ip: 0xffff_ffff_8100_0000,
            pid: 2,
            tid: 2,
            mode: CpuMode::Kernel,
            ..Default::default()
        }),
    ]);
    assert_eq!(dirs(&p), ["ctl"]);
    assert_eq!(
        p.stats(),
        ProfStats {
            samples: 3,
            counted: 0,
            unresolved: 3,
            ..Default::default()
        }
    );
}

#[test]
fn exited_processes_are_kept_for_their_grace_then_forgotten() {
    let p = idle();
    p.lock().mode = Some(Mode::Sampling);
    let exit = Record::Exit {
        pid: 1,
        ppid: 0,
        tid: 1,
        ptid: 0,
        time: 1,
    };
    let at = |time: u64| match sample(1, BASE + 8) {
        Record::Sample(s) => Record::Sample(Sample { time, ..s }),
        _ => unreachable!(),
    };
    p.feed(&[mmap(1, &exe(), None, None), exit]);
    // Samples taken while it left the kernel arrive after its EXIT.
    p.feed(&[at(1)]);
    p.feed(&[at(1 + EXIT_GRACE_NS)]);
    // Once the stream is past its grace, it is gone.
    p.feed(&[at(2 + EXIT_GRACE_NS)]);
    assert_eq!(read_all(&p, "00000001", "histogram"), "0x8 2\n");
    assert_eq!(p.stats().unresolved, 1);
}

#[test]
fn samples_flow_through_the_engine() {
    let me = exe();
    let recs = vec![
        mmap(9, &me, None, None),
        sample(9, BASE + 0x30),
        sample(9, BASE + 0x30),
        sample(9, BASE + 0x18),
    ];
    let p = Prof::new(Engine::new(Arc::new(ReplayFactory::new(recs))));
    // Not on: fed records are ignored.
    p.feed(&[mmap(9, &me, None, None), sample(9, BASE)]);
    assert_eq!(dirs(&p), ["ctl"]);
    write(&p, b"interval 1\n").unwrap();
    write(&p, b"start\n").unwrap();
    assert_eq!(p.mode(), Some(Mode::Sampling));
    write(&p, b"start\n").unwrap(); // ignored while running
    profdev_testkit::wait_until(
        "the replay to end",
        std::time::Duration::from_secs(30),
        || p.session_ended(),
    );
    write(&p, b"stop\n").unwrap();
    assert_eq!(p.mode(), None);
    assert_eq!(read_all(&p, "00000001", "histogram"), "0x18 1\n0x30 2\n");
}

#[test]
fn numbers_and_frequencies() {
    assert_eq!(parse_c_number("10"), Some(10));
    assert_eq!(parse_c_number("0x10"), Some(16));
    assert_eq!(parse_c_number("010"), Some(8));
    assert_eq!(parse_c_number("0"), Some(0));
    for bad in ["", "0x", "-1", "+1", "1e3", "09", "99999999999"] {
        assert_eq!(parse_c_number(bad), None, "{bad}");
    }
    assert_eq!(frequency_hz(1), 1000);
    assert_eq!(frequency_hz(1499), 1);
    assert_eq!(frequency_hz(u32::MAX), 1);
    let c = session_config(1);
    assert!(c.user && !c.kernel && c.track_tasks);
    assert_eq!(c.frequency_hz, 1000);
    assert_eq!(split_dev(0x0801), (8, 1));
    assert_eq!(split_dev(0xfd1a), (0xfd, 0x1a));
}

/// Three modules: this test binary through three paths (a copy each).
fn three_records() -> (Prof, tempfile::TempDir) {
    let p = idle();
    p.lock().mode = Some(Mode::Sampling);
    let dir = tempfile::tempdir().unwrap();
    for pid in 1..=3u32 {
        let copy = dir.path().join(format!("copy{pid}"));
        let mut bytes = std::fs::read(exe()).unwrap();
        // A different build id for each copy, so each is its own module.
        let bid = ElfLayout::parse(&bytes, &copy)
            .unwrap()
            .build_id()
            .unwrap()
            .to_vec();
        let at = bytes.windows(bid.len()).position(|w| w == bid).unwrap();
        bytes[at] ^= pid as u8;
        std::fs::write(&copy, &bytes).unwrap();
        let path = copy.to_string_lossy().into_owned();
        p.feed(&[mmap(pid, &path, None, None), sample(pid, BASE + 0x10)]);
    }
    (p, dir)
}

#[test]
fn walk_and_stat_agree_with_the_listing() {
    let (p, _dir) = three_records();
    assert_eq!(dirs(&p), ["ctl", "00000003", "00000002", "00000001"]);
    for e in p.gen(Qid::ROOT).unwrap() {
        assert_eq!(p.walk(Qid::ROOT, &e.name).unwrap(), e);
        assert_eq!(p.stat(e.qid).unwrap(), e);
        assert_eq!(tree::find(&p, Qid::ROOT, e.qid).unwrap(), e);
        if e.qid.is_dir() {
            for f in p.gen(e.qid).unwrap() {
                assert_eq!(p.walk(e.qid, &f.name).unwrap(), f);
                assert_eq!(p.stat(f.qid).unwrap(), f);
                assert_eq!(tree::find(&p, Qid::ROOT, f.qid).unwrap(), f);
            }
            assert_eq!(p.walk(e.qid, "nope"), Err(DevError::NotFound));
        }
    }
    assert_eq!(p.stat(Qid::ROOT), tree::find(&p, Qid::ROOT, Qid::ROOT));
    // Only the names the listing writes lead anywhere.
    for bad in [
        "1",
        "000000001",
        "0000000A",
        "+0000001",
        "00000004",
        "",
        "ctl2",
    ] {
        assert_eq!(p.walk(Qid::ROOT, bad), Err(DevError::NotFound), "{bad:?}");
    }
    assert_eq!(p.walk(CTL, "x"), Err(DevError::NotDir));
    assert_eq!(p.stat(Qid::file(0xfff5)), Err(DevError::NotFound));
    assert_eq!(p.stat(Qid::dir((1 << 4) + 1)), Err(DevError::NotFound));
}

#[test]
fn readers_never_wait_for_symbolization() {
    let (p, _dir) = three_records();
    let p = Arc::new(p);
    // The resolver is busy (as while it reads an ELF file for a new
    // mapping): every reader of the device's files still gets its answer.
    let busy = p.resolver.lock().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = {
        let p = p.clone();
        std::thread::spawn(move || {
            let listing = dirs(&p);
            let d = p.walk(Qid::ROOT, "00000002").unwrap();
            let h = p.walk(d.qid, "histogram").unwrap();
            let _ = p.stat(h.qid).unwrap();
            let text = read_all(&p, "00000002", "histogram");
            let _ = (p.stats(), p.mode(), p.wanted(), p.interval_ms());
            tx.send((listing, text)).unwrap();
        })
    };
    let (listing, text) = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a reader waited for the resolver");
    assert_eq!(listing.len(), 4);
    assert_eq!(text, "0x10 1\n");
    drop(busy);
    reader.join().unwrap();
}

/// `object` is read for the requester as the file system would allow it.
#[test]
fn object_reads_follow_the_files_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("secret");
    std::fs::write(&f, b"\x7fELF not really").unwrap();
    let object = profdev_symbolize::Objects::new()
        .open_path(f.to_str().unwrap())
        .unwrap();
    let cred = |uid, gid| Some(crate::access::Cred { uid, gid, pid: 0 });
    let me = || {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&f).unwrap();
        (m.uid(), m.gid())
    };
    let (uid, gid) = me();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o700)).unwrap();
    let other = uid.wrapping_add(12345);
    assert_eq!(
        super::read_object(&object, cred(other, gid.wrapping_add(1)), 0, 64),
        Err(DevError::Perm)
    );
    assert_eq!(
        super::read_object(&object, cred(uid, gid), 0, 64).unwrap(),
        b"\x7fELF not really"
    );
    // Root, and a driver in process (no requester), read it.
    assert!(super::read_object(&object, cred(0, 0), 4, 3).unwrap() == b" no");
    assert!(super::read_object(&object, None, 0, 4).is_ok());
    // Acting as another user takes root.
    if !profdev_testkit::privileged("object read as another user", {
        if uid == 0 {
            Ok(())
        } else {
            Err("needs root".into())
        }
    }) {
        return;
    }
    // Readable by others, in a directory they cannot search: no.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(
        super::read_object(&object, cred(other, gid.wrapping_add(1)), 0, 64),
        Err(DevError::Perm),
        "the directory's mode applies"
    );
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o704)).unwrap();
    assert!(super::read_object(&object, cred(other, gid.wrapping_add(1)), 0, 64).is_ok());
    assert_eq!(
        super::read_object(&object, cred(other, gid), 0, 64),
        Err(DevError::Perm),
        "the group bit applies to the group, not the other bit"
    );
    // Replaced at its path, then deleted: the kept file is root's alone.
    std::fs::rename(&f, dir.path().join("moved")).unwrap();
    std::fs::write(&f, b"another file").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        super::read_object(&object, cred(other, gid.wrapping_add(1)), 0, 64),
        Err(DevError::Perm),
        "a file replaced since"
    );
    std::fs::remove_file(&f).unwrap();
    std::fs::remove_file(dir.path().join("moved")).unwrap();
    assert_eq!(
        super::read_object(&object, cred(other, gid.wrapping_add(1)), 0, 64),
        Err(DevError::Perm),
        "a file deleted since"
    );
    assert_eq!(
        super::read_object(&object, cred(0, 0), 0, 4).unwrap(),
        b"\x7fELF"
    );
}
