//! Round trips in every layout and byte order, refusals, and the mcount
//! arc table.

use super::mcount::{ArcTable, Recorded, ToStruct};
use super::*;

fn sample() -> GmonOut {
    let mut h = Histogram::new(0x1000, 0x1010, 4, 250);
    h.bins = vec![1, 0, 0xffff, 7];
    GmonOut {
        histograms: vec![h],
        arcs: vec![
            Arc {
                from_pc: 0x1004,
                self_pc: 0x1008,
                count: 3,
            },
            Arc {
                from_pc: 0x100c,
                self_pc: 0x1000,
                count: 1,
            },
        ],
        bb_counts: vec![],
    }
}

#[test]
fn round_trip_every_layout_and_target() {
    let targets = [
        Target::X86_64,
        Target {
            order: ByteOrder::Big,
            addr_width: AddrWidth::W32,
        },
        Target {
            order: ByteOrder::Big,
            addr_width: AddrWidth::W64,
        },
    ];
    for target in targets {
        for format in [Format::Gnu, Format::Bsd, Format::OldBsd] {
            let bytes = write(&sample(), format, target).unwrap();
            let d = parse(&bytes, target).unwrap();
            assert_eq!(d.format, format, "{format} {target:?}");
            let mut want = sample();
            if format == Format::OldBsd {
                want.histograms[0].prof_rate = 0;
            }
            assert_eq!(d.gmon, want, "{format} {target:?}");
        }
    }
}

#[test]
fn gnu_basic_blocks_round_trip() {
    let mut g = sample();
    g.bb_counts = vec![BbCount {
        addr: 0x1002,
        count: 9,
    }];
    let bytes = write(&g, Format::Gnu, Target::X86_64).unwrap();
    assert_eq!(parse(&bytes, Target::X86_64).unwrap().gmon, g);
    assert_eq!(
        write(&g, Format::Bsd, Target::X86_64),
        Err(WriteError::BbCounts {
            format: Format::Bsd,
            count: 1
        })
    );
}

#[test]
fn writer_refuses_what_the_layout_cannot_hold() {
    let mut g = sample();
    g.arcs[1].count = u64::from(u32::MAX) + 1;
    let e = write(&g, Format::Gnu, Target::X86_64).unwrap_err();
    assert_eq!(
        e.to_string(),
        "arc 1: count 0x100000000 does not fit in 4 bytes"
    );
    assert!(write(&g, Format::Bsd, Target::X86_64).is_ok());
    let two = GmonOut {
        histograms: vec![sample().histograms[0].clone(); 2],
        ..GmonOut::default()
    };
    assert_eq!(
        write(&two, Format::Bsd, Target::X86_64)
            .unwrap_err()
            .to_string(),
        "a bsd gmon.out holds exactly one histogram, not 2"
    );
    let mut wide = sample();
    wide.histograms[0].high_pc = 1 << 40;
    let t32 = Target {
        order: ByteOrder::Little,
        addr_width: AddrWidth::W32,
    };
    assert_eq!(
        write(&wide, Format::Gnu, t32).unwrap_err().to_string(),
        "histogram 0: high_pc 0x10000000000 does not fit in 4 bytes"
    );
}

#[test]
fn parse_errors_name_field_and_offset() {
    let good = write(&sample(), Format::Gnu, Target::X86_64).unwrap();
    let e = |b: &[u8]| parse(b, Target::X86_64).unwrap_err().to_string();
    assert_eq!(
        e(&good[..10]),
        "gmon.out is 10 bytes long, too short to be a gmon file (at least 20)"
    );
    let mut v2 = good.clone();
    v2[4] = 2;
    assert_eq!(
        e(&v2),
        "gmon.out: version at byte 4 is 2; only versions 0 and 1 exist"
    );
    let mut tag7 = good.clone();
    tag7[20] = 7;
    assert_eq!(
        e(&tag7),
        "gmon.out: record tag at byte 20 is 7, not 0 (histogram), 1 (arc) or 2 (basic blocks)"
    );
    assert_eq!(
        e(&good[..20 + 1 + 40 + 3]),
        "gmon.out: histogram bins at byte 61 needs 8 bytes but the file ends after 3"
    );
    assert_eq!(
        e(&good[..good.len() - 2]),
        "gmon.out: arc count at byte 107 needs 4 bytes but the file ends after 2"
    );
    let bsd = write(&sample(), Format::Bsd, Target::X86_64).unwrap();
    assert_eq!(
        e(&bsd[..bsd.len() - 1]),
        "gmon.out: arc count at byte 88 needs 8 bytes but the file ends after 7"
    );
    let mut small = bsd.clone();
    small[16..20].copy_from_slice(&8u32.to_le_bytes());
    assert_eq!(
        e(&small),
        "gmon.out: ncnt at byte 16 is 0x8: it is smaller than the header"
    );
    let mut inverted = bsd.clone();
    inverted[0..8].copy_from_slice(&0x2000u64.to_le_bytes());
    assert_eq!(
        e(&inverted),
        "gmon.out: low_pc at byte 0 is 0x2000: it is above high_pc"
    );
}

#[test]
fn version_zero_reads_like_one() {
    let mut b = write(&sample(), Format::Gnu, Target::X86_64).unwrap();
    b[4] = 0;
    let d = parse(&b, Target::X86_64).unwrap();
    assert_eq!(d.gnu_version, Some(0));
    assert_eq!(d.gmon, sample());
}

#[test]
fn bin_of_uses_the_exact_width() {
    let h = Histogram::new(0x401000, 0x401300, 192, 1000);
    assert_eq!(h.bin_of(0x401000), Some(0));
    assert_eq!(h.bin_of(0x4011d8), Some((0x1d8) / 4));
    assert_eq!(h.bin_of(0x4012ff), Some(191));
    assert_eq!(h.bin_of(0x401300), None);
    assert_eq!(h.bin_of(0xfff), None);
}

/// TV-G6: tolimit 5, lowpc 0, calls (0x10→A), (0x10→A), (0x10→B), (0x10→A).
#[test]
fn tv_g6_mcount_model() {
    const A: u64 = 0xa000;
    const B: u64 = 0xb000;
    let mut t = ArcTable::with_limit(0, 1 << 20, 5);
    for callee in [A, A, B] {
        assert_eq!(t.record(0x10, callee), Recorded::Counted);
    }
    // After call 3 the chain of froms[4] is B(tos[2]) -> A(tos[1]).
    assert_eq!(t.froms(4), 2);
    assert_eq!(t.tos(2).link, 1);
    assert_eq!(t.record(0x10, A), Recorded::Counted);
    assert_eq!(t.froms(4), 1);
    assert_eq!(t.tos(0).link, 2);
    assert_eq!(
        t.tos(1),
        ToStruct {
            selfpc: A,
            count: 3,
            link: 2
        }
    );
    assert_eq!(
        t.tos(2),
        ToStruct {
            selfpc: B,
            count: 1,
            link: 0
        }
    );
    assert_eq!(
        t.arcs(),
        vec![
            Arc {
                from_pc: 0x10,
                self_pc: A,
                count: 3
            },
            Arc {
                from_pc: 0x10,
                self_pc: B,
                count: 1
            },
        ]
    );
    // Two more new arcs use tos[3] and tos[4]; the next overflows.
    assert_eq!(t.record(0x20, A), Recorded::Counted);
    assert_eq!(t.record(0x24, B), Recorded::Counted);
    assert_eq!(t.froms(8), 3);
    assert_eq!(t.froms(9), 4);
    assert_eq!(t.used(), 4);
    assert_eq!(t.record(0x28, A), Recorded::Overflow);
    assert_eq!(t.froms(10), 0);
    // Existing arcs still count (what happens after kgmon -b resumes).
    assert_eq!(t.record(0x10, B), Recorded::Counted);
    assert_eq!(t.record(0x30, B), Recorded::Overflow);
    t.reset();
    assert_eq!(t.used(), 0);
    assert!(t.arcs().is_empty());
}

#[test]
fn mcount_rejects_call_sites_outside_text() {
    let mut t = ArcTable::with_limit(0x1000, 0x100, 50);
    assert_eq!(t.record(0xfff, 1), Recorded::OutsideText);
    // mcount's `>` would accept frompc == lowpc + textsize; we do not.
    assert_eq!(t.record(0x1100, 1), Recorded::OutsideText);
    assert_eq!(t.record(0x10ff, 1), Recorded::Counted);
    assert_eq!(t.arcs()[0].from_pc, 0x10fc);
}

#[test]
fn netbsd_sizing() {
    // Spec §3.2 example: textsize 8463176, tolimit clamped to 65534.
    let t = ArcTable::for_text(0xffffffff80200000, 0xffffffff80a12345);
    assert_eq!(t.tolimit(), 65534);
    let small = ArcTable::for_text(0x1000, 0x1100);
    assert_eq!(small.tolimit(), 50);
}
