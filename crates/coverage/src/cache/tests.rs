//! The cache's tests: the format read back, damaged files refused, the
//! cache kept within its bounds.

use super::stamp::SETTLED;
use super::*;
use crate::encode::{Patch, PATCH_JMP, PATCH_ONCE};

/// An encoding read back, its patches listed (as it was written).
fn listed(e: &Encoded) -> Encoded {
    Encoded {
        patches: e.patch_list().into_owned(),
        records: None,
        ..e.clone()
    }
}

fn sample() -> (Plan, Encoded) {
    let plan = Plan {
        blocks: vec![
            PlannedBlock {
                start: 0x1000,
                end: 0x1008,
                insns: vec![0x1000, 0x1004].into(),
                how: How::Jmp {
                    from: 0x1000,
                    to: 0x1008,
                    overwrite: 5,
                },
                flags_live: true,
                branch: Some(0),
            },
            PlannedBlock {
                start: 0x1008,
                end: 0x100a,
                insns: vec![0x1008].into(),
                how: How::Fell { branch: 0 },
                flags_live: false,
                branch: None,
            },
        ],
        branches: vec![(0x1006, true)],
        fell_from: vec![None],
        build_id: Some(vec![1, 2, 3]),
        tables: vec![0x1004],
        mode: Mode::Counts,
        sections: vec![(0x1000, vec![0x90; 16].into())],
        copied: vec![(0x1008, 0x1010)],
        derived: vec![],
        edges: vec![],
    };
    let enc = Encoded {
        code: vec![0xcc; 64],
        patches: vec![Patch {
            addr: 0x1000,
            entry: 0x7000,
            kind: 1,
            len: 5,
        }],
        records: None,
        failed: 0,
        trapped: 0,
        failed_blocks: vec![],
        counter_fixups: vec![3, 20],
        far_fixups: vec![9, 40],
        movable: true,
        first_counter: 7,
    };
    (plan, enc)
}

#[test]
fn an_entry_reads_back_as_written() {
    let (plan, enc) = sample();
    let key = Key::of(b"module bytes", Mode::Counts);
    let bytes = write(&key, &plan, Some((0x6000, &enc)));
    let e = read(&bytes, &key).unwrap();
    assert_eq!(format!("{:?}", e.plan), format!("{plan:?}"));
    let (off, back) = e.encoded.unwrap();
    assert_eq!(off, 0x6000);
    assert_eq!(format!("{:?}", listed(&back)), format!("{enc:?}"));
    // Its patches are the records a load is sent, as they were kept.
    let r = back.records.as_ref().expect("kept as records");
    assert_eq!((r.bias0, r.area0, back.patches.len()), (0, 0x6000, 0));
    assert_eq!(back.wire(0, 0x6000), enc.wire(0, 0x6000));
    assert!(matches!(
        back.wire(0, 0x6000),
        Some(std::borrow::Cow::Borrowed(_))
    ));
}

#[test]
fn an_encoding_no_load_could_be_sent_is_not_kept() {
    // A patch past 4 GiB of its module fits no record: the plan is kept,
    // the encoding not (a load would find it refused).
    let (plan, mut enc) = sample();
    enc.patches[0].addr = 1 << 32;
    let key = Key::of(b"module bytes", Mode::Counts);
    let e = read(&write(&key, &plan, Some((0x6000, &enc))), &key).unwrap();
    assert_eq!(format!("{:?}", e.plan), format!("{plan:?}"));
    assert!(e.encoded.is_none());
}

#[test]
fn the_fuzz_seed_is_the_sample() {
    // fuzz/seeds.py writes the format by hand: it must stay readable.
    let seed = include_bytes!("../../../../fuzz/corpus/coverage_cache/valid");
    let key = Key(std::array::from_fn(|i| i as u8));
    let e = read(seed, &key).expect("the seed reads");
    let (plan, enc) = sample();
    assert_eq!(format!("{:?}", e.plan), format!("{plan:?}"));
    assert_eq!(
        format!("{:?}", e.encoded.as_ref().map(|(o, x)| (o, listed(x)))),
        format!("{:?}", Some((0x6000u64, enc)))
    );
    assert_eq!(
        write(&key, &e.plan, e.encoded.as_ref().map(|(o, x)| (*o, x))),
        seed
    );
}

#[test]
fn a_damaged_file_is_refused_not_trusted() {
    let (plan, enc) = sample();
    let key = Key::of(b"module bytes", Mode::Counts);
    let bytes = write(&key, &plan, Some((0x6000, &enc)));
    // Every truncation is refused.
    for n in 0..bytes.len() {
        assert!(read(&bytes[..n], &key).is_err(), "cut at {n}");
    }
    // Another key, another engine or module.
    assert!(read(&bytes, &Key::of(b"other", Mode::Counts)).is_err());
    // An index out of range.
    let mut bad = plan.clone();
    bad.blocks[1].how = How::Fell { branch: 5 };
    let b = write(&key, &bad, None);
    assert_eq!(
        read(&b, &key).err().unwrap(),
        "a branch index is out of range"
    );
    // A huge length (the plan's count of blocks) does not allocate.
    let huge = with_plan(&bytes, |p| {
        p.splice(0..1, [0xff; 9].into_iter().chain([0x01]));
    });
    assert_eq!(
        read(&huge, &key).err().unwrap(),
        "a length runs past its end"
    );
    // A number past 64 bits.
    let long = with_plan(&bytes, |p| {
        p.splice(0..1, [0xff; 9].into_iter().chain([0x02]));
    });
    assert_eq!(
        read(&long, &key).err().unwrap(),
        "a number runs past 64 bits"
    );
    // A header that does not match its plan.
    let mut b = bytes.clone();
    b[MAGIC.len() + 32] += 1;
    assert_eq!(
        read(&b, &key).err().unwrap(),
        "its header does not match its plan"
    );
    // The encoding is read before the plan: a load is served from it.
    let s = split(bytes.clone(), &key).unwrap();
    assert_eq!(
        (s.blocks, s.counters),
        (plan.blocks.len() as u64, plan.counters())
    );
    assert_eq!(s.size, crate::encode::area_size(&plan));
    assert_eq!(
        format!("{:?}", listed(&s.encoded.as_ref().unwrap().1)),
        format!("{enc:?}")
    );
    // Any byte changed: refused or read as another entry, never a
    // panic; what reads writes back to the same entry.
    for i in MAGIC.len() + 32..bytes.len() {
        for x in [0x00, 0x01, 0x7f, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] = x;
            if let Ok(e) = read(&b, &key) {
                let again = write(&key, &e.plan, e.encoded.as_ref().map(|(o, x)| (*o, x)));
                let back = read(&again, &key).unwrap();
                assert_eq!(format!("{:?}", back.plan), format!("{:?}", e.plan));
            }
        }
    }
}

#[test]
fn a_file_of_the_version_before_is_refused_not_misread() {
    // Version 2 (fixed u64 fields) of the sample's plan, as
    // fuzz/seeds.py wrote it before: the magic line refuses it.
    let key = Key(std::array::from_fn(|i| i as u8));
    let q = |v: &[u64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let mut v2 = b"profdev-coverage-cache 2\n".to_vec();
    v2.extend_from_slice(&key.0);
    v2.extend(q(&[2, 0x1000, 0x1008, 2, 0, 4]));
    v2.push(1);
    v2.extend(q(&[0x1000, 0x1008, 5]));
    v2.push(1);
    v2.extend(q(&[0]));
    assert_eq!(
        read(&v2, &key).err().unwrap(),
        "not a profdev coverage cache file of this version"
    );
    // Kept in the cache under its key, it is refused, then replaced.
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    std::fs::write(cache.path().join(key.name()), &v2).unwrap();
    let err = cache.load(&key).err().unwrap();
    assert!(
        err.ends_with("not a profdev coverage cache file of this version"),
        "{err}"
    );
    let (plan, enc) = sample();
    cache.store(&key, &plan, Some((0x6000, &enc))).unwrap();
    assert!(cache.load(&key).unwrap().is_some());
    // Version 4 (the patches as differences, not records), the sample as
    // fuzz/seeds.py wrote it before: refused too.
    let hex = concat!(
        "70726f666465762d636f7665726167652d636163686520340a00010203040506",
        "0708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f02038040390280",
        "40100200083100100500100401000600018c4001010301020301802010909090",
        "90909090909090909090909090018840000188201000000180c00140cccccccc",
        "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",
        "cccccccccccccccccccccccccccccccccccccccccccccccccccccccc01804080",
        "c0030105000000020622070102123e",
    );
    let mut v4: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    assert_eq!(v4.len(), 207);
    assert_eq!(
        read(&v4, &key).err().unwrap(),
        "not a profdev coverage cache file of this version"
    );
    // (Read as version 5, its patches would not be what was written.)
    v4[MAGIC.len() - 2] = b'5';
    assert!(read(&v4, &key).is_err());
}

#[test]
fn derived_blocks_and_the_fields_reaching_the_module_read_back() {
    let (mut plan, mut enc) = sample();
    plan.derived = vec![Derived {
        block: 1,
        from: vec![(0, Edge::Taken), (0, Edge::Fell), (0, Edge::Whole)],
    }];
    enc.far_fixups = vec![60, 0, 3];
    let key = Key::of(b"derived", Mode::Counts);
    let bytes = write(&key, &plan, Some((7, &enc)));
    let e = read(&bytes, &key).unwrap();
    assert_eq!(e.plan.derived, plan.derived);
    let (_, back) = e.encoded.unwrap();
    assert_eq!((back.far_fixups, back.movable), (vec![60, 0, 3], true));
    // A block derived from itself, or from no block, is refused.
    for from in [vec![(1, Edge::Whole)], vec![(9, Edge::Whole)]] {
        plan.derived = vec![Derived { block: 1, from }];
        let bytes = write(&key, &plan, None);
        assert!(read(&bytes, &key).is_err());
    }
    // And in a hit-mode plan.
    plan.derived = vec![Derived {
        block: 1,
        from: vec![(0, Edge::Whole)],
    }];
    plan.mode = Mode::Hits;
    assert!(read(&write(&key, &plan, None), &key).is_err());
}

#[test]
fn every_field_reads_back_at_its_extremes() {
    // Addresses that wrap, fields at their widths' ends, every kind of
    // block: the differences and numbers round-trip exactly.
    let (mut plan, mut enc) = sample();
    plan.mode = Mode::Hits;
    let b = |start: u64, end: u64, insns: Vec<u64>, how: How, branch: Option<u32>| PlannedBlock {
        start,
        end,
        insns: insns.into(),
        how,
        flags_live: branch.is_none(),
        branch,
    };
    plan.blocks = vec![
        b(0, 3, vec![0, 1, 2], How::Once, None),
        b(5, 9, vec![5], How::Int3 { to: 9 }, None),
        b(
            0x10,
            u64::MAX,
            vec![0x10, u64::MAX - 1],
            How::Hop {
                to: 0x12,
                slot: u64::MAX,
            },
            Some(0),
        ),
        b(
            0x20,
            0x28,
            vec![0x27, 0x21],
            How::Call { len: u32::MAX },
            None,
        ),
        b(0x30, 0x31, vec![], How::Covered, None),
        b(
            0x40,
            0x48,
            vec![0x40],
            How::Jmp {
                from: 0x44,
                to: 0x41,
                overwrite: u32::MAX,
            },
            Some(0),
        ),
        b(0x50, 0x51, vec![0x50], How::Implied { by: 1 }, None),
        b(
            0x60,
            0x61,
            vec![0x60],
            How::Branches { taken: 0, fell: 1 },
            None,
        ),
        b(u64::MAX - 1, u64::MAX, vec![u64::MAX - 1], How::None, None),
    ];
    plan.branches = vec![(u64::MAX, false)];
    plan.fell_from = vec![Some(8)];
    plan.tables = vec![u64::MAX, 0, 7];
    plan.copied = vec![(u64::MAX, 0)];
    plan.build_id = None;
    // The records' extremes: 32-bit addresses and entries, 16-bit lengths
    // (the area at the last offset: the trampoline's entry is its start).
    enc.patches = vec![
        Patch {
            addr: 0,
            entry: u64::MAX,
            kind: PATCH_JMP,
            len: u16::MAX.into(),
        },
        Patch {
            addr: u32::MAX.into(),
            entry: u32::MAX.into(),
            kind: PATCH_ONCE,
            len: 1,
        },
    ];
    enc.failed_blocks = vec![8, 0];
    enc.counter_fixups = vec![60, 0, 3];
    enc.first_counter = u64::MAX;
    enc.failed = u64::MAX;
    let key = Key::of(b"extremes", Mode::Hits);
    let bytes = write(&key, &plan, Some((u64::MAX, &enc)));
    let e = read(&bytes, &key).unwrap();
    assert_eq!(format!("{:?}", e.plan), format!("{plan:?}"));
    assert_eq!(
        format!("{:?}", e.encoded.as_ref().map(|(o, x)| (o, listed(x)))),
        format!("{:?}", Some((u64::MAX, enc)))
    );
}

#[test]
fn a_plan_takes_a_few_bytes_a_block() {
    // 10,000 blocks of four instructions, each counted by a jump: the
    // cache file holds them in under 20 bytes each (version 2: 85; 12
    // until version 5, which keeps each block's first address whole, as
    // the plan holds it in memory, so that it is read back as it is).
    let plan = Plan {
        blocks: (0..10_000u64)
            .map(|i| {
                let s = 0x40_0000 + 16 * i;
                PlannedBlock {
                    start: s,
                    end: s + 16,
                    insns: vec![s, s + 3, s + 7, s + 12].into(),
                    how: How::Jmp {
                        from: s,
                        to: s + 7,
                        overwrite: 7,
                    },
                    flags_live: false,
                    branch: None,
                }
            })
            .collect(),
        ..Plan::default()
    };
    let bytes = write(&Key([0; 32]), &plan, None);
    assert!(bytes.len() < 20 * 10_000, "{}", bytes.len());
}

#[test]
fn a_hit_mode_plan_is_never_found_under_a_counting_key() {
    let bytes = b"module bytes";
    let (counts, hits) = (Key::of(bytes, Mode::Counts), Key::of(bytes, Mode::Hits));
    assert_ne!(counts, hits);
    // The key of the engine before plans had modes: neither.
    let mut h = Sha256::new();
    h.update(ENGINE.as_bytes());
    h.update([0]);
    h.update(bytes);
    let before = Key(h.finalize().into());
    assert_ne!(before, counts);
    assert_ne!(before, hits);
    // A hit-mode plan kept under its key reads back as one, and is
    // refused under the counting key.
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    let (mut plan, _) = sample();
    plan.mode = Mode::Hits;
    plan.blocks.push(PlannedBlock {
        start: 0x1010,
        end: 0x1012,
        insns: vec![0x1010].into(),
        how: How::Implied { by: 0 },
        flags_live: false,
        branch: None,
    });
    cache.store(&hits, &plan, None).unwrap();
    assert!(cache.load(&counts).unwrap().is_none());
    let back = cache.load(&hits).unwrap().unwrap().plan;
    assert_eq!(
        (back.mode, back.blocks[2].how),
        (Mode::Hits, How::Implied { by: 0 })
    );
    // Under another key's name, the file is refused.
    std::fs::rename(
        cache.path().join(hits.name()),
        cache.path().join(counts.name()),
    )
    .unwrap();
    let err = cache.load(&counts).err().unwrap();
    assert!(err.ends_with("it holds another module's entry"), "{err}");
    // Hits read through derived blocks in turn, read back; a plan whose
    // reading would not end (a cycle), or reads more than dom::TREE
    // blocks for one, is refused.
    let refused = |plan: &Plan| {
        let b = write(&hits, plan, None);
        read(&b, &hits).err()
    };
    plan.blocks[2].how = How::Branches { taken: 0, fell: 1 };
    plan.blocks[1].how = How::Implied { by: 0 };
    assert_eq!(refused(&plan), None);
    plan.blocks[0].how = How::Implied { by: 2 };
    assert_eq!(
        refused(&plan).as_deref(),
        Some("an implied block derives from none")
    );
    let mut long = plan.clone();
    long.blocks = (0..=crate::plan::TREE as u64)
        .map(|i| PlannedBlock {
            start: 0x1000 + 2 * i,
            end: 0x1002 + 2 * i,
            insns: vec![0x1000 + 2 * i].into(),
            how: if i == crate::plan::TREE as u64 {
                How::Once
            } else {
                How::Implied { by: i as u32 + 1 }
            },
            flags_live: false,
            branch: None,
        })
        .collect();
    long.branches.clear();
    long.fell_from.clear();
    long.copied.clear();
    long.sections = vec![(0x1000, vec![0x90; 0x100].into())];
    assert_eq!(
        refused(&long).as_deref(),
        Some("an implied block derives from none")
    );
    long.blocks[0].how = How::Once;
    assert_eq!(refused(&long), None);
    // An implied block in a counting plan is refused.
    plan.blocks[0].how = How::Once;
    plan.mode = Mode::Counts;
    let b = write(&counts, &plan, None);
    assert_eq!(
        read(&b, &counts).err().unwrap(),
        "an implied block derives from none"
    );
}

#[test]
fn the_cache_keeps_an_entry_and_refuses_a_foreign_file() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(&dir.path().join("coverage")).unwrap();
    let (plan, enc) = sample();
    let key = Key::of(b"module bytes", Mode::Counts);
    assert!(cache.load(&key).unwrap().is_none());
    cache.store(&key, &plan, Some((0x6000, &enc))).unwrap();
    assert!(cache.load(&key).unwrap().is_some());
    // A file others may write is not read.
    let path = cache.path().join(key.name());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = cache.load(&key).err().unwrap();
    assert!(err.contains("writable by group or others"), "{err}");
}

/// The file mapped at `p` in this process (/proc/self/maps), if any.
fn mapped_from(p: *const u8) -> Option<PathBuf> {
    let at = p as u64;
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (lo, hi) = f.next()?.split_once('-')?;
            let (lo, hi) = (
                u64::from_str_radix(lo, 16).ok()?,
                u64::from_str_radix(hi, 16).ok()?,
            );
            let path = f.nth(4)?;
            (lo <= at && at < hi && path.starts_with('/')).then(|| PathBuf::from(path))
        })
}

#[test]
fn a_plan_left_in_its_file_is_read_whole_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(&dir.path().join("coverage")).unwrap();
    let (plan, enc) = sample();
    let key = Key::of(b"module bytes", Mode::Counts);
    cache.store(&key, &plan, Some((0x6000, &enc))).unwrap();
    let path = cache.path().join(key.name());
    // Mapped when only root can write the file (run as root), read
    // otherwise: the same plan either way.
    let meta = std::fs::metadata(&path).unwrap();
    let root = profdev_symbolize::elf::only_root_writes(&meta);
    let file = std::fs::File::open(&path).unwrap();
    assert_eq!(super::split::map(&file).is_some(), root);
    let split = cache.load_split(&key).unwrap().unwrap();
    let read = split.plan().unwrap();
    assert_eq!(format!("{read:?}"), format!("{plan:?}"));
    // Mapped, its sections' bytes are the file's (not copied); read, a
    // copy of their own.
    let canon = std::fs::canonicalize(&path).unwrap();
    assert_eq!(
        mapped_from(read.sections[0].1.as_ptr()) == Some(canon.clone()),
        root
    );
    if root {
        // Another owner now: read, not mapped, the same plan.
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        assert!(super::split::map(&file).is_none());
        let read = split.plan().unwrap();
        assert_eq!(format!("{read:?}"), format!("{plan:?}"));
        assert_ne!(mapped_from(read.sections[0].1.as_ptr()), Some(canon));
    }
    // A file cut short after its header was read: an error, not a
    // signal (its mapping is shorter than the plan it should hold).
    let head = MAGIC.len() as u64 + 32;
    assert!(meta.len() > head);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(head)
        .unwrap();
    let err = split.plan().err().unwrap();
    assert!(err.contains("its plan cannot be read"), "{err}");
}

#[test]
fn a_key_is_known_by_its_files_stamp_alone() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    let module = dir.path().join("module");
    std::fs::write(&module, b"module bytes").unwrap();
    let st = Stamp::of(&std::fs::metadata(&module).unwrap());
    let key = Key::of(b"module bytes", Mode::Hits);
    assert_eq!(cache.known(&st, Mode::Hits).unwrap(), None);
    cache.remember(&st, Mode::Hits, &key).unwrap();
    assert_eq!(cache.known(&st, Mode::Hits).unwrap(), Some(key));
    // Not for another mode, nor for the file changed in any way the
    // kernel records (here its ctime, one nanosecond on).
    assert_eq!(cache.known(&st, Mode::Counts).unwrap(), None);
    let later = Stamp {
        ctime: st.ctime + 1,
        ..st
    };
    assert_eq!(cache.known(&later, Mode::Hits).unwrap(), None);
    // A stamp file put under another stamp's name is refused, not taken.
    cache.remember(&later, Mode::Hits, &key).unwrap();
    let name = |s: &Stamp| {
        let files = |d: &Path| -> Vec<std::ffi::OsString> {
            std::fs::read_dir(d)
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .collect()
        };
        let before = files(dir.path());
        let probe = tempfile::tempdir().unwrap();
        let c = Cache::open(probe.path()).unwrap();
        c.remember(s, Mode::Hits, &key).unwrap();
        let n = files(probe.path()).pop().unwrap();
        assert!(before.contains(&n));
        n
    };
    std::fs::rename(dir.path().join(name(&later)), dir.path().join(name(&st))).unwrap();
    let err = cache.known(&st, Mode::Hits).err().unwrap();
    assert!(err.contains("not a stamp of this file"), "{err}");
    // And one others may write is not read.
    cache.remember(&st, Mode::Hits, &key).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let p = dir.path().join(name(&st));
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o620)).unwrap();
    let err = cache.known(&st, Mode::Hits).err().unwrap();
    assert!(err.contains("writable by group or others"), "{err}");
}

#[test]
fn a_stamp_is_settled_only_well_after_its_last_change() {
    let st = Stamp {
        dev: 1,
        ino: 2,
        size: 3,
        mtime: 0,
        ctime: 10_000_000_000,
    };
    assert!(!st.settled_at(st.ctime));
    assert!(!st.settled_at(st.ctime + SETTLED - 1));
    assert!(st.settled_at(st.ctime + SETTLED));
    // A file written just now is not.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let now = Stamp::of(&std::fs::metadata(&f).unwrap());
    assert!(!now.settled_at(super::now()));
}

#[test]
fn stamps_past_their_bound_go_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    let key = Key::of(b"m", Mode::Hits);
    let stamp = |i: u64| Stamp {
        dev: 1,
        ino: i,
        size: 0,
        mtime: 0,
        ctime: 0,
    };
    for i in 0..4u64 {
        cache.remember(&stamp(i), Mode::Hits, &key).unwrap();
    }
    // Stamp 2 used longest ago, then 0 (used when known: touched).
    for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
        let f = std::fs::File::options().write(true).open(e.path()).unwrap();
        f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(9000))
            .unwrap();
    }
    assert!(cache.known(&stamp(0), Mode::Hits).unwrap().is_some());
    assert!(cache.known(&stamp(1), Mode::Hits).unwrap().is_some());
    assert!(cache.known(&stamp(3), Mode::Hits).unwrap().is_some());
    cache.prune_stamps(3);
    assert_eq!(cache.known(&stamp(2), Mode::Hits).unwrap(), None);
    for i in [0, 1, 3] {
        assert_eq!(cache.known(&stamp(i), Mode::Hits).unwrap(), Some(key));
    }
    // Entries are not stamps: pruning stamps leaves them.
    let (plan, _) = sample();
    cache.store(&key, &plan, None).unwrap();
    cache.prune_stamps(0);
    assert!(cache.load(&key).unwrap().is_some());
    assert_eq!(cache.known(&stamp(0), Mode::Hits).unwrap(), None);
}

#[test]
fn pruning_removes_the_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    let (plan, _) = sample();
    let keys: Vec<Key> = (0..3u8).map(|i| Key::of(&[i], Mode::Counts)).collect();
    for (i, k) in keys.iter().enumerate() {
        cache.store(k, &plan, None).unwrap();
        let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000 + i as u64);
        std::fs::File::options()
            .write(true)
            .open(cache.path().join(k.name()))
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    let one = std::fs::metadata(cache.path().join(keys[0].name()))
        .unwrap()
        .len();
    cache.prune(2 * one);
    assert!(cache.load(&keys[0]).unwrap().is_none());
    assert!(cache.load(&keys[1]).unwrap().is_some());
    assert!(cache.load(&keys[2]).unwrap().is_some());
}

#[test]
fn a_plan_read_back_holds_every_blocks_instructions_in_one_buffer() {
    // A real module's plan, in both modes: read back, its blocks equal
    // the planner's, and each block's instructions are a view of one
    // buffer the whole plan shares (no allocation a block), in block
    // order; the planner's own plan is shared the same way.
    let bytes = std::fs::read("/usr/bin/true").unwrap();
    for mode in [Mode::Counts, Mode::Hits] {
        let plan = Plan::of_bytes_in(&bytes, Path::new("/usr/bin/true"), mode).unwrap();
        assert!(plan.blocks.len() > 100, "{}", plan.blocks.len());
        let key = Key::of(&bytes, mode);
        let back = read(&write(&key, &plan, None), &key).unwrap().plan;
        assert_eq!(format!("{back:?}"), format!("{plan:?}"));
        for p in [&plan, &back] {
            let first = &p.blocks[0].insns;
            assert!(p.blocks.iter().all(|b| b.insns.same_buffer(first)));
            let all: Vec<u64> = p.blocks.iter().flat_map(|b| b.insns.iter()).collect();
            assert!(all.windows(2).all(|w| w[0] < w[1]));
        }
    }
}

#[test]
fn an_instruction_list_past_its_file_is_refused() {
    // A block whose instructions lie past their buffer, or cut its
    // first address, is refused before anything that size is allocated.
    let (plan, _) = sample();
    let key = Key::of(b"module bytes", Mode::Counts);
    let bytes = write(&key, &plan, None);
    // The first block's length in the buffer comes after the plan's
    // count of blocks, the buffer's kind and length (a byte each), and
    // the buffer's 17 bytes (0x1000 whole, a byte to 0x1004, 0x1008
    // whole).
    let at = 1 + 1 + 1 + 17;
    with_plan(&bytes, |p| {
        assert_eq!(
            (p[2], p[at]),
            (17, 9),
            "the buffer's and the first list's lengths"
        )
    });
    for n in [0x7f, 100, 18, 7, 1] {
        let bad = with_plan(&bytes, |p| p[at] = n);
        assert!(read(&bad, &key).is_err(), "a list of {n} bytes");
    }
    // An empty list is one (the next block's list then the first's).
    let ok = with_plan(&bytes, |p| {
        p[at] = 0;
        p[at + 1] = 9;
    });
    let back = read(&ok, &key).unwrap().plan;
    assert!(back.blocks[0].insns.is_empty());
    assert_eq!(back.blocks[1].insns, [0x1000, 0x1004]);
}

/// The cache file `bytes` with its plan's bytes changed by `f` (its
/// length prefix made to match).
fn with_plan(bytes: &[u8], f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut r = R(&bytes[MAGIC.len() + 32..]);
    for _ in 0..3 {
        r.v().unwrap();
    }
    let head = bytes.len() - r.0.len();
    let n = r.v().unwrap() as usize;
    let at = bytes.len() - r.0.len();
    let mut plan = bytes[at..at + n].to_vec();
    f(&mut plan);
    let mut w = W(bytes[..head].to_vec());
    w.bytes(&plan);
    w.0.extend_from_slice(&bytes[at + n..]);
    w.0
}
