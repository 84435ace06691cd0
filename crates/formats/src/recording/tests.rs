use super::*;

/// A small recording: two threads of one process, an exec, an object with
/// symbols and lines, the kernel, a loss, and the End.
pub(crate) fn sample_bytes() -> Vec<u8> {
    let mut e = Encoder::new(&Header {
        flags: FLAG_STACKS,
        start_ns: 1_700_000_000_000_000_000,
        period_ns: 1_000_000,
    });
    e.task(&Task {
        pid: 10,
        tid: 10,
        generation: 0,
        time: 100,
        comm: "sh".into(),
    });
    e.task(&Task {
        pid: 10,
        tid: 10,
        generation: 1,
        time: 200,
        comm: "prog".into(),
    });
    e.task(&Task {
        pid: 10,
        tid: 11,
        generation: 0,
        time: 210,
        comm: "prog".into(),
    });
    let prog = e.object(&ObjectInfo {
        kind: ObjectKind::User,
        dev: 0x803,
        inode: 1234,
        build_id: vec![1, 2, 3, 4],
        path: "/usr/bin/prog".into(),
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
            Function {
                start: 0x1100,
                len: 0x40,
                name: "main".into(),
                lines: vec![
                    Line {
                        addr: 0x1100,
                        file: 0,
                        line: 10,
                    },
                    Line {
                        addr: 0x1120,
                        file: 0,
                        line: 12,
                    },
                ],
            },
            Function {
                start: 0x1000,
                len: 0x20,
                name: "leaf".into(),
                lines: vec![],
            },
        ],
    )
    .unwrap();
    e.symbols(
        kernel,
        &[],
        &[Function {
            start: 0xffff_ffff_8100_0000,
            len: 0x100,
            name: "do_syscall_64".into(),
            lines: vec![],
        }],
    )
    .unwrap();
    let s = |time, tid, kernel| SampleInfo {
        time,
        cpu: 1,
        pid: 10,
        tid,
        weight: 1_000_000,
        kernel,
        off_cpu: None,
    };
    e.sample(
        &s(1000, 10, false),
        &[
            Frame {
                object: prog,
                offset: 0x1010,
            },
            Frame {
                object: prog,
                offset: 0x1125,
            },
        ],
    )
    .unwrap();
    e.loss(&Loss {
        time: 1500,
        cpu: 1,
        lost: 3,
    });
    e.sample(
        &s(2000, 11, true),
        &[
            Frame {
                object: kernel,
                offset: 0xffff_ffff_8100_0010,
            },
            Frame {
                object: 0,
                offset: 0x7fff_0000,
            },
        ],
    )
    .unwrap();
    e.end();
    e.take()
}

#[test]
fn round_trip() {
    let b = sample_bytes();
    let r = read(&b).unwrap();
    assert!(r.complete);
    assert_eq!(r.torn, None);
    assert_eq!(r.header.period_ns, 1_000_000);
    assert_eq!(r.tasks.len(), 3);
    assert_eq!(r.objects.len(), 2);
    assert_eq!(r.samples.len(), 2);
    assert_eq!(
        r.end,
        Some(End {
            samples: 2,
            lost: 3
        })
    );
    assert_eq!(r.lost(), 3);
    let s0 = r.samples[0];
    assert_eq!((s0.time, s0.tid, s0.kernel), (1000, 10, false));
    assert_eq!(r.task(&s0).comm, "prog", "the exec's entry supersedes");
    let st = r.stack(&s0);
    assert_eq!(st.len(), 2);
    let prog = r.object(st[0].object).unwrap();
    assert_eq!(prog.info.build_id, [1, 2, 3, 4]);
    assert_eq!(prog.function_at(st[0].offset).unwrap().name, "leaf");
    let main = prog.function_at(st[1].offset).unwrap();
    assert_eq!(main.name, "main");
    assert_eq!(prog.line_at(main, 0x1125), Some(("prog.c", 12)));
    assert_eq!(prog.line_at(main, 0x1100), Some(("prog.c", 10)));
    assert!(prog.function_at(0x1020).is_none(), "past leaf's end");
    let s1 = r.samples[1];
    assert!(s1.kernel);
    let st = r.stack(&s1);
    assert_eq!(
        r.object(st[0].object)
            .unwrap()
            .function_at(st[0].offset)
            .unwrap()
            .name,
        "do_syscall_64"
    );
    assert_eq!(
        st[1],
        Frame {
            object: 0,
            offset: 0x7fff_0000
        }
    );
}

/// Every cut of the file reads up to its last whole record: the samples
/// before the cut, never an error, never a sample the cut broke.
#[test]
fn truncation_sweep() {
    let b = sample_bytes();
    let whole = read(&b).unwrap();
    let mut seen_partial = false;
    for cut in 0..b.len() {
        let r = read(&b[..cut]);
        if cut < HEADER_LEN {
            assert!(matches!(r, Err(ReadError::TooShort { .. })), "cut {cut}");
            continue;
        }
        let r = r.unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert!(!r.complete, "cut {cut}");
        assert!(r.samples.len() <= whole.samples.len());
        for (a, b) in r.samples.iter().zip(&whole.samples) {
            assert_eq!(a, b, "cut {cut}");
        }
        assert_eq!(r.frames[..], whole.frames[..r.frames.len()], "cut {cut}");
        if let Some(t) = r.torn {
            assert!(t < cut as u64 && t >= HEADER_LEN as u64);
            seen_partial = true;
        }
    }
    assert!(seen_partial);
    // The cut just before the End record holds both samples.
    let r = read(&b[..b.len() - 3]).unwrap();
    assert_eq!(r.samples.len(), 2);
}

#[test]
fn encoder_refuses_entries_used_before_written() {
    let mut e = Encoder::new(&Header::default());
    let s = SampleInfo {
        pid: 1,
        tid: 2,
        ..SampleInfo::default()
    };
    assert_eq!(
        e.sample(&s, &[]),
        Err(EncodeError::UnknownTask { pid: 1, tid: 2 })
    );
    e.task(&Task {
        pid: 1,
        tid: 2,
        ..Task::default()
    });
    assert_eq!(
        e.sample(
            &s,
            &[Frame {
                object: 1,
                offset: 0
            }]
        ),
        Err(EncodeError::UnknownObject { id: 1 })
    );
    assert_eq!(
        e.symbols(1, &[], &[]),
        Err(EncodeError::UnknownObject { id: 1 })
    );
    assert_eq!(
        e.sample(
            &s,
            &[Frame {
                object: 0,
                offset: 9
            }]
        ),
        Ok(())
    );
    assert_eq!(read(&e.take()).unwrap().samples.len(), 1);
}

/// A hand-made sample naming a thread with no Task record is refused.
#[test]
fn reader_checks_order() {
    let mut b = Encoder::new(&Header::default()).take();
    // kind 4, length 7: time 0, cpu 0, pid 1, tid 1, weight 0, flags 0, 0 frames
    b.extend_from_slice(&[4, 7, 0, 0, 1, 1, 0, 0, 0]);
    let e = read(&b).unwrap_err();
    assert!(e.to_string().contains("before its Task record"), "{e}");
    let mut b = Encoder::new(&Header::default()).take();
    b.extend_from_slice(&[2, 6, 2, 0, 0, 0, 0, 0]);
    let e = read(&b).unwrap_err();
    assert!(e.to_string().contains("out of order"), "{e}");
}

/// Counts are checked against the bytes left before anything is
/// allocated; lengths against the header's limit.
#[test]
fn reader_bounds_memory() {
    let mut e = Encoder::new(&Header::default());
    e.task(&Task {
        pid: 1,
        tid: 1,
        ..Task::default()
    });
    let mut b = e.take();
    // A sample claiming 2^40 frames in a 17-byte payload.
    b.extend_from_slice(&[4, 12, 0, 0, 1, 1, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20]);
    let err = read(&b).unwrap_err().to_string();
    assert!(err.contains("cannot fit"), "{err}");
    let mut b = Encoder::new(&Header::default()).take();
    b.extend_from_slice(&[4, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(matches!(read(&b), Err(ReadError::TooLong { .. })));
    let mut b = Encoder::new(&Header::default()).take();
    b[0] = b'X';
    assert_eq!(read(&b), Err(ReadError::Magic));
    let mut b = Encoder::new(&Header::default()).take();
    b[8] = 3;
    assert_eq!(read(&b), Err(ReadError::Version { found: 3 }));
    b[8] = 0;
    assert_eq!(read(&b), Err(ReadError::Version { found: 0 }));
}

#[test]
fn unknown_kinds_are_skipped() {
    let mut b = Encoder::new(&Header::default()).take();
    b.extend_from_slice(&[99, 3, 1, 2, 3]);
    let mut e = Encoder::new(&Header::default());
    e.take();
    e.end();
    b.extend(e.take());
    assert!(read(&b).unwrap().complete);
}

#[test]
fn large_symbol_tables_split_into_records() {
    let mut e = Encoder::new(&Header::default());
    let id = e.object(&ObjectInfo::default());
    let funcs: Vec<Function> = (0..60_000u64)
        .map(|i| Function {
            start: i * 16,
            len: 16,
            name: format!("function_number_{i:08}"),
            lines: vec![],
        })
        .collect();
    e.symbols(id, &[], &funcs).unwrap();
    let b = e.take();
    let r = read(&b).unwrap();
    assert_eq!(r.objects[0].functions, funcs);
    assert_eq!(
        r.objects[0].function_at(59_999 * 16 + 3).unwrap().name,
        "function_number_00059999"
    );
}

/// The fuzz seeds (`fuzz/corpus/recording/`) are this module's sample
/// recording, whole and torn; `PROFDEV_BLESS=1` rewrites them.
#[test]
fn fuzz_seeds_are_the_sample_recording() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/recording");
    if profdev_testkit::blessing() {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let b = sample_bytes();
    profdev_testkit::golden(&dir.join("whole"), &b);
    profdev_testkit::golden(&dir.join("torn"), &b[..b.len() - 20]);
}

/// A function written in several Symbols records (one per address first
/// seen, as `profdev record` writes them) reads as one, with every line.
#[test]
fn functions_given_twice_merge() {
    let mut e = Encoder::new(&Header::default());
    let id = e.object(&ObjectInfo::default());
    let f = |len, addr, line| Function {
        start: 0x100,
        len,
        name: "f".into(),
        lines: vec![Line {
            addr,
            file: 0,
            line,
        }],
    };
    e.symbols(id, &["f.c".into()], &[f(0x10, 0x104, 3)])
        .unwrap();
    e.symbols(id, &["g.h".into()], &[f(0x20, 0x118, 9)])
        .unwrap();
    e.symbols(id, &["f.c".into()], &[f(0x10, 0x102, 2)])
        .unwrap();
    let r = read(&e.take()).unwrap();
    let o = &r.objects[0];
    assert_eq!(o.files, ["f.c", "g.h"]);
    assert_eq!(o.functions.len(), 1);
    let func = &o.functions[0];
    assert_eq!(func.len, 0x20);
    assert_eq!(o.line_at(func, 0x103), Some(("f.c", 2)));
    assert_eq!(o.line_at(func, 0x110), Some(("f.c", 3)));
    assert_eq!(o.line_at(func, 0x11f), Some(("g.h", 9)));
}

/// Off-CPU samples keep their state and weight; a view keeps the type it
/// asks for, weighted as the type says.
#[test]
fn off_cpu_samples_round_trip_and_views_select_them() {
    let mut e = Encoder::new(&Header {
        flags: FLAG_STACKS | FLAG_OFF_CPU,
        start_ns: 0,
        period_ns: 1_000_000,
    });
    e.task(&Task {
        pid: 5,
        tid: 5,
        generation: 0,
        time: 0,
        comm: "p".into(),
    });
    let s = |time, weight, off_cpu: Option<OffCpu>| SampleInfo {
        time,
        cpu: 0,
        pid: 5,
        tid: 5,
        weight,
        kernel: off_cpu.is_some(),
        off_cpu,
    };
    for (t, w, o) in [
        (10, 1_000_000, None),
        (20, 7_000_000_000, Some(OffCpu::Sleep)),
        (30, 5, Some(OffCpu::Io)),
        (40, 9, Some(OffCpu::Other)),
    ] {
        e.sample(&s(t, w, o), &[]).unwrap();
    }
    let rec = read(&e.take()).unwrap();
    let states: Vec<_> = rec.samples.iter().map(|s| (s.weight, s.off_cpu)).collect();
    assert_eq!(
        states,
        [
            (1_000_000, None),
            (7_000_000_000, Some(OffCpu::Sleep)),
            (5, Some(OffCpu::Io)),
            (9, Some(OffCpu::Other)),
        ]
    );
    assert!(rec.has_off_cpu());
    assert_eq!(rec.view, SampleType::Cpu);
    let cpu = rec.clone().view(SampleType::Cpu);
    assert_eq!(cpu.samples.len(), 1);
    assert!(!cpu.has_off_cpu());
    // Waiting, not the preempted interval (state other).
    let off = rec.clone().view(SampleType::OffCpu);
    assert_eq!(off.samples.len(), 2);
    assert_eq!(off.view, SampleType::OffCpu);
    assert_eq!(rec.view(SampleType::Wall).samples.len(), 4);
}

/// A version-1 recording (before off-CPU samples) reads as before; a
/// version newer than this reader's is refused with a sentence.
#[test]
fn version_one_reads_and_a_newer_version_is_refused() {
    let mut b = sample_bytes();
    let now = read(&b).unwrap();
    b[8..10].copy_from_slice(&1u16.to_le_bytes());
    let old = read(&b).unwrap();
    assert_eq!(old, now);
    b[8..10].copy_from_slice(&(VERSION + 1).to_le_bytes());
    let e = read(&b).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "recording version {} is newer than this profdev, which reads versions 1 to {VERSION}: read it with the profdev that recorded it, or a newer one",
            VERSION + 1
        )
    );
    let s = SampleType::parse("off-cpu").unwrap();
    assert_eq!((s.name(), SampleType::parse("idle")), ("off-cpu", None));
}

/// An off-CPU sample with a state this version does not define is
/// refused, not read as another state.
#[test]
fn an_unknown_off_cpu_state_is_refused() {
    let mut e = Encoder::new(&Header::default());
    e.task(&Task {
        pid: 1,
        tid: 1,
        ..Task::default()
    });
    e.sample(
        &SampleInfo {
            pid: 1,
            tid: 1,
            off_cpu: Some(OffCpu::Io),
            ..SampleInfo::default()
        },
        &[],
    )
    .unwrap();
    let mut b = e.take();
    // The flags byte: the last but one of the sample (frame count 0 last).
    let at = b.len() - 2;
    assert_eq!(b[at], 2 | (2 << 2));
    b[at] = 2 | (3 << 2);
    let e = read(&b).unwrap_err().to_string();
    assert!(e.contains("off-CPU sample with state 3"), "{e}");
}
