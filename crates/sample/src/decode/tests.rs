//! Records built byte by byte the way the kernel lays them out, decoded.

use super::*;
use crate::sys::context;
use profdev_core::{Target, UserRegs};

/// Builds a record the way the kernel lays it out.
struct B(Vec<u8>);

impl B {
    fn new(ty: u32, misc: u16) -> B {
        let mut v = Vec::new();
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&misc.to_ne_bytes());
        v.extend_from_slice(&0u16.to_ne_bytes()); // size, patched in done()
        B(v)
    }
    fn u64(mut self, x: u64) -> B {
        self.0.extend_from_slice(&x.to_ne_bytes());
        self
    }
    fn u32(mut self, x: u32) -> B {
        self.0.extend_from_slice(&x.to_ne_bytes());
        self
    }
    fn u8s(mut self, x: &[u8]) -> B {
        self.0.extend_from_slice(x);
        self
    }
    /// NUL-terminated, padded to 8 bytes.
    fn str(mut self, s: &str) -> B {
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
        while self.0.len() % 8 != 0 {
            self.0.push(0);
        }
        self
    }
    /// The sample_id trailer for TID|TIME|CPU.
    fn id(self, pid: u32, tid: u32, time: u64, cpu: u32) -> B {
        self.u32(pid).u32(tid).u64(time).u32(cpu).u32(0)
    }
    fn done(mut self) -> Vec<u8> {
        assert_eq!(self.0.len() % 8, 0);
        let n = self.0.len() as u16;
        self.0[6..8].copy_from_slice(&n.to_ne_bytes());
        self.0
    }
}

fn layout(callchain: bool, stack: u32) -> RecordLayout {
    RecordLayout::for_config(&SessionConfig {
        target: Target::System,
        frequency_hz: 1000,
        kernel: true,
        user: true,
        callchain,
        user_stack_bytes: stack,
        track_tasks: true,
        off_cpu: false,
    })
}

fn decode(bytes: &[u8], l: &RecordLayout) -> Record {
    decode_record(bytes, l, 99).unwrap().unwrap()
}

#[test]
fn layout_bits() {
    let l = layout(true, 0);
    assert_eq!(l.sample_type, 0x1a7); // IP|TID|TIME|CALLCHAIN|CPU|PERIOD
    assert_eq!(l.trailer_len(), 24);
    let l = layout(false, 8192);
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(l.sample_type, 0x3187);
        assert_eq!(l.regs_user_mask, 0x1c0);
    }
    let _ = l;
}

#[test]
fn sample_with_callchain() {
    let k = context::KERNEL;
    let u = context::USER;
    let bytes = B::new(record::SAMPLE, misc::KERNEL)
        .u64(0xffff_ffff_8100_1234) // ip
        .u32(42)
        .u32(43) // pid, tid
        .u64(1_000_000) // time
        .u32(1)
        .u32(0) // cpu
        .u64(1_000_000) // period
        .u64(6) // nr
        .u64(k)
        .u64(0xffff_ffff_8100_1234)
        .u64(0xffff_ffff_8100_5678)
        .u64(u)
        .u64(0x5555_0000_1000)
        .u64(0x5555_0000_2000)
        .done();
    let r = decode(&bytes, &layout(true, 0));
    let Record::Sample(s) = r else {
        panic!("{r:?}")
    };
    assert_eq!(s.ip, 0xffff_ffff_8100_1234);
    assert_eq!(
        (s.pid, s.tid, s.cpu, s.time, s.period),
        (42, 43, 1, 1_000_000, 1_000_000)
    );
    assert_eq!(s.mode, CpuMode::Kernel);
    assert_eq!(
        s.kernel_chain,
        vec![0xffff_ffff_8100_1234, 0xffff_ffff_8100_5678]
    );
    assert_eq!(s.user_chain, vec![0x5555_0000_1000, 0x5555_0000_2000]);
    assert_eq!(s.user_regs, None);
    assert!(s.user_stack.is_empty());
}

#[test]
fn user_sample_mode_and_chain_without_leading_marker() {
    let bytes = B::new(record::SAMPLE, misc::USER)
        .u64(0x401000)
        .u32(7)
        .u32(7)
        .u64(5)
        .u32(0)
        .u32(0)
        .u64(250_000)
        .u64(2)
        .u64(0x401000)
        .u64(0x402000)
        .done();
    let Record::Sample(s) = decode(&bytes, &layout(true, 0)) else {
        panic!()
    };
    assert_eq!(s.mode, CpuMode::User);
    assert!(s.kernel_chain.is_empty());
    assert_eq!(s.user_chain, vec![0x401000, 0x402000]);
}

#[test]
fn guest_and_hv_parts_are_dropped() {
    let ips = [
        context::HV,
        1,
        context::KERNEL,
        2,
        context::GUEST,
        context::GUEST_USER,
        3,
        context::USER,
        4,
    ];
    assert_eq!(split_callchain(&ips, CpuMode::Other), (vec![2], vec![4]));
}

#[cfg(target_arch = "x86_64")]
#[test]
fn sample_with_user_regs_and_stack() {
    let stack: Vec<u8> = (0..16u8).collect();
    let bytes = B::new(record::SAMPLE, misc::USER)
        .u64(0x401000)
        .u32(7)
        .u32(8)
        .u64(5)
        .u32(1)
        .u32(0)
        .u64(1_000_000)
        .u64(2) // abi = PERF_SAMPLE_REGS_ABI_64
        .u64(0x7ffc_0000_0100) // BP (bit 6)
        .u64(0x7ffc_0000_00f0) // SP (bit 7)
        .u64(0x401000) // IP (bit 8)
        .u64(16) // stack size
        .u8s(&stack)
        .u64(12) // dyn_size: only 12 valid bytes
        .done();
    let Record::Sample(s) = decode(&bytes, &layout(false, 16)) else {
        panic!()
    };
    assert_eq!(
        s.user_regs,
        Some(UserRegs {
            ip: 0x401000,
            sp: 0x7ffc_0000_00f0,
            bp: 0x7ffc_0000_0100
        })
    );
    assert_eq!(s.user_stack, stack[..12].to_vec());
    assert_eq!((s.pid, s.tid, s.cpu), (7, 8, 1));
}

#[test]
fn kernel_thread_sample_has_no_user_regs_or_stack() {
    let bytes = B::new(record::SAMPLE, misc::KERNEL)
        .u64(0xffff_ffff_8100_0000)
        .u32(0)
        .u32(0)
        .u64(5)
        .u32(0)
        .u32(0)
        .u64(1_000_000)
        .u64(0) // abi NONE: no regs follow
        .u64(0) // stack size 0: no data, no dyn_size
        .done();
    let Record::Sample(s) = decode(&bytes, &layout(false, 8192)) else {
        panic!()
    };
    assert_eq!(s.user_regs, None);
    assert!(s.user_stack.is_empty());
    assert!(s.is_idle());
}

#[test]
fn mmap2_with_inode() {
    let bytes = B::new(record::MMAP2, misc::USER)
        .u32(100)
        .u32(101)
        .u64(0x5555_5555_4000)
        .u64(0x1000)
        .u64(0x2000)
        .u32(8)
        .u32(1) // maj, min
        .u64(123456) // ino
        .u64(7) // ino_generation
        .u32(5) // prot r-x
        .u32(2) // flags MAP_PRIVATE
        .str("/usr/bin/dd")
        .id(100, 101, 555, 1)
        .done();
    assert_eq!(
        decode(&bytes, &layout(false, 0)),
        Record::Mmap {
            pid: 100,
            tid: 101,
            addr: 0x5555_5555_4000,
            len: 0x1000,
            pgoff: 0x2000,
            path: "/usr/bin/dd".into(),
            file: Some(FileId {
                major: 8,
                minor: 1,
                ino: 123456,
                ino_generation: 7
            }),
            build_id: None,
            time: 555,
        }
    );
}

#[test]
fn mmap2_with_build_id() {
    let bid: Vec<u8> = (1..=20).collect();
    let bytes = B::new(record::MMAP2, misc::USER | misc::MMAP_BUILD_ID)
        .u32(100)
        .u32(100)
        .u64(0x7f00_0000_0000)
        .u64(0x20000)
        .u64(0)
        .u8s(&[20, 0, 0, 0])
        .u8s(&bid)
        .u32(5)
        .u32(2)
        .str("/usr/lib/x86_64-linux-gnu/libc.so.6")
        .id(100, 100, 9, 0)
        .done();
    let Record::Mmap {
        file,
        build_id,
        path,
        ..
    } = decode(&bytes, &layout(false, 0))
    else {
        panic!()
    };
    assert_eq!(file, None);
    assert_eq!(build_id, Some(bid));
    assert_eq!(path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
}

#[test]
fn old_mmap_and_data_mmap() {
    let bytes = B::new(record::MMAP, misc::KERNEL)
        .u32(u32::MAX)
        .u32(0)
        .u64(0xffff_ffff_8100_0000)
        .u64(0x100_0000)
        .u64(0)
        .str("[kernel.kallsyms]_text")
        .id(0, 0, 1, 0)
        .done();
    let Record::Mmap { path, file, .. } = decode(&bytes, &layout(false, 0)) else {
        panic!()
    };
    assert_eq!((path.as_str(), file), ("[kernel.kallsyms]_text", None));
    let data = B::new(record::MMAP, misc::USER | misc::MMAP_DATA)
        .u32(1)
        .u32(1)
        .u64(0)
        .u64(0)
        .u64(0)
        .str("/tmp/x")
        .id(1, 1, 1, 0)
        .done();
    assert_eq!(decode_record(&data, &layout(false, 0), 0), Ok(None));
}

#[test]
fn comm_exec_and_rename() {
    let exec = B::new(record::COMM, misc::USER | misc::COMM_EXEC)
        .u32(300)
        .u32(300)
        .str("dd")
        .id(300, 300, 77, 1)
        .done();
    assert_eq!(
        decode(&exec, &layout(false, 0)),
        Record::Comm {
            pid: 300,
            tid: 300,
            comm: "dd".into(),
            exec: true,
            time: 77
        }
    );
    // exactly 16 bytes of name: the NUL lands in the padding word
    let rename = B::new(record::COMM, misc::USER)
        .u32(300)
        .u32(301)
        .str("worker-thread-15")
        .id(300, 301, 78, 0)
        .done();
    let Record::Comm { comm, exec, .. } = decode(&rename, &layout(false, 0)) else {
        panic!()
    };
    assert_eq!((comm.as_str(), exec), ("worker-thread-15", false));
}

#[test]
fn fork_and_exit() {
    let fork = B::new(record::FORK, 0)
        .u32(400)
        .u32(300)
        .u32(400)
        .u32(300)
        .u64(1000)
        .id(400, 400, 1000, 0)
        .done();
    assert_eq!(
        decode(&fork, &layout(false, 0)),
        Record::Fork {
            pid: 400,
            ppid: 300,
            tid: 400,
            ptid: 300,
            time: 1000
        }
    );
    let exit = B::new(record::EXIT, 0)
        .u32(400)
        .u32(300)
        .u32(401)
        .u32(400)
        .u64(2000)
        .id(400, 401, 2000, 1)
        .done();
    assert_eq!(
        decode(&exit, &layout(false, 0)),
        Record::Exit {
            pid: 400,
            ppid: 300,
            tid: 401,
            ptid: 400,
            time: 2000
        }
    );
}

#[test]
fn lost_and_lost_samples() {
    let lost = B::new(record::LOST, 0)
        .u64(12) // id
        .u64(345) // lost
        .id(0, 0, 3000, 1)
        .done();
    assert_eq!(
        decode(&lost, &layout(true, 0)),
        Record::Lost {
            cpu: 1,
            count: 345,
            time: 3000
        }
    );
    let ls = B::new(record::LOST_SAMPLES, 0)
        .u64(6)
        .id(0, 0, 3001, 0)
        .done();
    assert_eq!(
        decode(&ls, &layout(true, 0)),
        Record::Lost {
            cpu: 0,
            count: 6,
            time: 3001
        }
    );
    // Without a sample_id trailer the ring's CPU is used.
    let l = RecordLayout {
        sample_id_all: false,
        ..layout(false, 0)
    };
    let bare = B::new(record::LOST, 0).u64(1).u64(2).done();
    assert_eq!(
        decode(&bare, &l),
        Record::Lost {
            cpu: 99,
            count: 2,
            time: 0
        }
    );
}

#[test]
fn throttle_and_unthrottle() {
    for (ty, throttled) in [(record::THROTTLE, true), (record::UNTHROTTLE, false)] {
        let b = B::new(ty, 0)
            .u64(4000)
            .u64(1)
            .u64(1)
            .id(0, 0, 4000, 1)
            .done();
        assert_eq!(
            decode(&b, &layout(false, 0)),
            Record::Throttle {
                cpu: 1,
                throttled,
                time: 4000
            }
        );
    }
}

/// Every prefix of every well-formed record, and records with garbage
/// bodies, give a value or an error, never a panic (a deterministic
/// stand-in for a fuzz target).
#[test]
fn truncated_and_garbage_records_never_panic() {
    let valid = [
        B::new(record::SAMPLE, misc::KERNEL)
            .u64(1)
            .u32(1)
            .u32(1)
            .u64(1)
            .u32(0)
            .u32(0)
            .u64(1)
            .u64(3)
            .u64(context::KERNEL)
            .u64(1)
            .u64(context::USER)
            .u64(2) // abi
            .u64(1)
            .u64(2)
            .u64(3)
            .u64(8)
            .u64(0xdead)
            .u64(8)
            .done(),
        B::new(record::MMAP2, misc::USER)
            .u32(1)
            .u32(1)
            .u64(1)
            .u64(1)
            .u64(0)
            .u64(0)
            .u64(0)
            .u64(0)
            .u32(5)
            .u32(2)
            .str("/bin/x")
            .id(1, 1, 1, 0)
            .done(),
        B::new(record::COMM, misc::COMM_EXEC)
            .u32(1)
            .u32(1)
            .str("sh")
            .id(1, 1, 1, 0)
            .done(),
        B::new(record::THROTTLE, 0)
            .u64(1)
            .u64(1)
            .u64(1)
            .id(0, 0, 1, 0)
            .done(),
    ];
    let layouts = [layout(true, 8), layout(false, 0), layout(true, 0)];
    for l in &layouts {
        for r in &valid {
            for n in 0..=r.len() {
                let mut t = r[..n].to_vec();
                if t.len() >= 8 {
                    let len = t.len() as u16;
                    t[6..8].copy_from_slice(&len.to_ne_bytes());
                }
                let _ = decode_record(&t, l, 0);
            }
        }
    }
    // xorshift garbage, every record type
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..20_000u32 {
        let len = 8 + (i as usize % 40) * 4;
        let mut g = Vec::with_capacity(len);
        while g.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            g.extend_from_slice(&x.to_ne_bytes());
        }
        g.truncate(len);
        g[0..4].copy_from_slice(&(i % 22).to_ne_bytes());
        let _ = decode_record(&g, &layouts[i as usize % 3], 0);
        let _ = crate::ring::for_each_record(
            &g[..(len & !7).next_power_of_two() / 2],
            0,
            x % 64,
            &mut Vec::new(),
            |_| {},
        );
    }
}

#[test]
fn unknown_types_are_skipped() {
    let b = B::new(16 /* NAMESPACES */, 0).id(1, 1, 1, 0).done();
    assert_eq!(decode_record(&b, &layout(false, 0), 0), Ok(None));
}

#[test]
fn switches_name_the_task_direction_and_preemption() {
    let out = B::new(record::SWITCH, misc::SWITCH_OUT | misc::SWITCH_OUT_PREEMPT)
        .id(7, 8, 900, 1)
        .done();
    assert_eq!(
        decode_record(&out, &layout(false, 0), 0),
        Ok(Some(Record::Switch {
            pid: 7,
            tid: 8,
            cpu: 1,
            out: true,
            preempt: true,
            time: 900,
        }))
    );
    // CPU wide: the other task's pid/tid come first; the sample id names
    // the task coming in.
    let back = B::new(record::SWITCH_CPU_WIDE, 0)
        .u32(3)
        .u32(3)
        .id(7, 8, 950, 0)
        .done();
    assert_eq!(
        decode_record(&back, &layout(false, 0), 0),
        Ok(Some(Record::Switch {
            pid: 7,
            tid: 8,
            cpu: 0,
            out: false,
            preempt: false,
            time: 950,
        }))
    );
}

#[test]
fn short_records_name_field_and_offset() {
    // callchain nr claims 100 entries in a short record
    let bytes = B::new(record::SAMPLE, misc::KERNEL)
        .u64(1)
        .u32(1)
        .u32(1)
        .u64(1)
        .u32(0)
        .u32(0)
        .u64(1)
        .u64(100)
        .u64(2)
        .done();
    let err = decode_record(&bytes, &layout(true, 0), 0).unwrap_err();
    assert_eq!(
        err,
        DecodeError::Short {
            record_type: 9,
            len: 64,
            field: "callchain.ips",
            offset: 56
        }
    );
    assert_eq!(
        err.to_string(),
        "perf record of type 9 (64 bytes) is too short for field `callchain.ips` at byte 56"
    );
    // an absurd nr must not overflow
    let bytes = B::new(record::SAMPLE, 0)
        .u64(1)
        .u32(1)
        .u32(1)
        .u64(1)
        .u32(0)
        .u32(0)
        .u64(1)
        .u64(u64::MAX)
        .done();
    assert!(decode_record(&bytes, &layout(true, 0), 0).is_err());
    // an EXIT without its time
    let exit = B::new(record::EXIT, 0)
        .u32(1)
        .u32(1)
        .u32(1)
        .u32(1)
        .id(1, 1, 1, 0)
        .done();
    let err = decode_record(&exit, &layout(false, 0), 0).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::Short {
                field: "time",
                offset: 24,
                ..
            }
        ),
        "{err:?}"
    );
    // a record shorter than its trailer
    let tiny = B::new(record::COMM, 0).u64(0).done();
    assert!(decode_record(&tiny, &layout(false, 0), 0).is_err());
    assert!(decode_record(&[1, 2, 3], &layout(false, 0), 0).is_err());
}
