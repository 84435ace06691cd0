//! Decoding perf records (bytes as the kernel wrote them) into
//! [`profdev_core::Record`].
//!
//! Pure: a record's bytes and the [`RecordLayout`] of the session that
//! produced them in, a value out. Records are in host byte order. The live
//! ring reader and any replay of raw perf records share this code.
//!
//! Layouts, from `<linux/perf_event.h>` (only the fields profdev asks for):
//!
//! ```text
//! SAMPLE   ip, pid/tid, time, cpu/res, period, [nr, ips[nr]],
//!          [abi, regs[weight(mask)] if abi != 0], [size, data[size], dyn_size if size != 0]
//! MMAP     pid, tid, addr, len, pgoff, filename, sample_id
//! MMAP2    pid, tid, addr, len, pgoff, {maj, min, ino, ino_generation | bid_size, _, _, build_id[20]},
//!          prot, flags, filename, sample_id
//! COMM     pid, tid, comm, sample_id          (misc COMM_EXEC: by exec)
//! FORK/EXIT pid, ppid, tid, ptid, time, sample_id
//! LOST     id, lost, sample_id
//! LOST_SAMPLES lost, sample_id
//! (UN)THROTTLE time, id, stream_id, sample_id
//! SWITCH   sample_id                          (misc SWITCH_OUT: leaving; SWITCH_OUT_PREEMPT: runnable)
//! SWITCH_CPU_WIDE next_prev_pid, next_prev_tid, sample_id
//! sample_id = pid/tid, time, cpu/res          (sample_id_all, the fields of sample_type)
//! ```

use crate::sys::{self, misc, record, sample};
use profdev_core::{CpuMode, FileId, Record, SessionConfig};

/// What a session's records contain: its `sample_type`, whether non-sample
/// records carry the `sample_id` trailer, and the user-register mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordLayout {
    /// `perf_event_attr.sample_type`.
    pub sample_type: u64,
    /// `perf_event_attr.sample_id_all`.
    pub sample_id_all: bool,
    /// `perf_event_attr.sample_regs_user`.
    pub regs_user_mask: u64,
}

impl RecordLayout {
    /// The layout profdev asks the kernel for under `config`:
    /// IP|TID|TIME|CPU|PERIOD, CALLCHAIN if asked, REGS_USER (frame pointer,
    /// stack pointer, instruction pointer) and STACK_USER when user stack
    /// bytes are asked; always `sample_id_all`.
    pub fn for_config(config: &SessionConfig) -> RecordLayout {
        let mut sample_type =
            sample::IP | sample::TID | sample::TIME | sample::CPU | sample::PERIOD;
        if config.callchain {
            sample_type |= sample::CALLCHAIN;
        }
        let mut regs_user_mask = 0;
        if config.user_stack_bytes > 0 {
            if let Some((bp, sp, ip)) = sys::USER_REG_BITS {
                sample_type |= sample::REGS_USER | sample::STACK_USER;
                regs_user_mask = (1 << bp) | (1 << sp) | (1 << ip);
            }
        }
        RecordLayout {
            sample_type,
            sample_id_all: true,
            regs_user_mask,
        }
    }

    fn has(&self, bit: u64) -> bool {
        self.sample_type & bit != 0
    }

    /// Bytes of the `sample_id` trailer on non-sample records.
    pub fn trailer_len(&self) -> usize {
        if !self.sample_id_all {
            return 0;
        }
        [
            sample::TID,
            sample::TIME,
            sample::ID,
            sample::STREAM_ID,
            sample::CPU,
            sample::IDENTIFIER,
        ]
        .iter()
        .filter(|b| self.has(**b))
        .count()
            * 8
    }
}

/// A record whose bytes do not match its layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The record ends before a field.
    #[error(
        "perf record of type {record_type} ({len} bytes) is too short for field `{field}` at byte {offset}"
    )]
    Short {
        record_type: u32,
        len: usize,
        field: &'static str,
        offset: usize,
    },
    /// The session's sample_type has a field this decoder does not know.
    #[error("sample_type {sample_type:#x} asks for fields this decoder cannot read (READ, RAW or BRANCH_STACK)")]
    UnsupportedSampleType { sample_type: u64 },
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Where the fixed fields end (start of the sample_id trailer).
    end: usize,
    ty: u32,
}

impl<'a> Cursor<'a> {
    fn short(&self, field: &'static str) -> DecodeError {
        DecodeError::Short {
            record_type: self.ty,
            len: self.bytes.len(),
            field,
            offset: self.pos,
        }
    }

    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        match self.pos.checked_add(n) {
            Some(e) if e <= self.end => {
                let s = &self.bytes[self.pos..e];
                self.pos = e;
                Ok(s)
            }
            _ => Err(self.short(field)),
        }
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        let b = self.take(8, field)?;
        Ok(u64::from_ne_bytes(b.try_into().expect("8 bytes")))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        let b = self.take(4, field)?;
        Ok(u32::from_ne_bytes(b.try_into().expect("4 bytes")))
    }

    /// Two u32 in one u64 slot (pid/tid, cpu/res).
    fn pair(&mut self, field: &'static str) -> Result<(u32, u32), DecodeError> {
        Ok((self.u32(field)?, self.u32(field)?))
    }

    /// A NUL-terminated, 8-byte padded string filling the rest up to `end`.
    fn string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let rest = self.take(self.end - self.pos, field)?;
        let n = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
        Ok(String::from_utf8_lossy(&rest[..n]).into_owned())
    }
}

/// The `sample_id` trailer of a non-sample record.
#[derive(Default)]
struct SampleId {
    pid: u32,
    tid: u32,
    time: u64,
    cpu: Option<u32>,
}

fn trailer(bytes: &[u8], ty: u32, layout: &RecordLayout) -> Result<(SampleId, usize), DecodeError> {
    if !layout.sample_id_all {
        return Ok((SampleId::default(), bytes.len()));
    }
    let tl = layout.trailer_len();
    let start = bytes
        .len()
        .checked_sub(tl)
        .filter(|s| *s >= 8)
        .ok_or(DecodeError::Short {
            record_type: ty,
            len: bytes.len(),
            field: "sample_id",
            offset: 8,
        })?;
    let mut c = Cursor {
        bytes,
        pos: start,
        end: bytes.len(),
        ty,
    };
    let mut id = SampleId::default();
    if layout.has(sample::TID) {
        (id.pid, id.tid) = c.pair("sample_id.pid/tid")?;
    }
    if layout.has(sample::TIME) {
        id.time = c.u64("sample_id.time")?;
    }
    if layout.has(sample::ID) {
        c.u64("sample_id.id")?;
    }
    if layout.has(sample::STREAM_ID) {
        c.u64("sample_id.stream_id")?;
    }
    if layout.has(sample::CPU) {
        id.cpu = Some(c.pair("sample_id.cpu")?.0);
    }
    Ok((id, start))
}

mod sample_record;

use sample_record::decode_sample;
pub use sample_record::split_callchain;

fn cpu_mode(misc_bits: u16) -> CpuMode {
    match misc_bits & misc::CPUMODE_MASK {
        misc::KERNEL => CpuMode::Kernel,
        misc::USER => CpuMode::User,
        _ => CpuMode::Other,
    }
}

/// Decode one record (header included). `ring_cpu` is the CPU of the ring
/// it came from, used when the record itself names none.
///
/// Returns `Ok(None)` for record types profdev does not ask for and for
/// data (non-executable) mappings.
pub fn decode_record(
    bytes: &[u8],
    layout: &RecordLayout,
    ring_cpu: u32,
) -> Result<Option<Record>, DecodeError> {
    if bytes.len() < 8 {
        return Err(DecodeError::Short {
            record_type: 0,
            len: bytes.len(),
            field: "header",
            offset: 0,
        });
    }
    let ty = u32::from_ne_bytes(bytes[0..4].try_into().expect("4 bytes"));
    let misc_bits = u16::from_ne_bytes([bytes[4], bytes[5]]);
    if ty == record::SAMPLE {
        return decode_sample(bytes, misc_bits, layout, ring_cpu).map(Some);
    }
    if !matches!(
        ty,
        record::MMAP
            | record::MMAP2
            | record::COMM
            | record::FORK
            | record::EXIT
            | record::LOST
            | record::LOST_SAMPLES
            | record::THROTTLE
            | record::UNTHROTTLE
            | record::SWITCH
            | record::SWITCH_CPU_WIDE
    ) {
        return Ok(None);
    }
    let (id, end) = trailer(bytes, ty, layout)?;
    let cpu = id.cpu.unwrap_or(ring_cpu);
    let mut c = Cursor {
        bytes,
        pos: 8,
        end,
        ty,
    };
    let rec = match ty {
        record::MMAP | record::MMAP2 => {
            let (pid, tid) = c.pair("pid/tid")?;
            let addr = c.u64("addr")?;
            let len = c.u64("len")?;
            let pgoff = c.u64("pgoff")?;
            let (mut file, mut build_id) = (None, None);
            if ty == record::MMAP2 {
                let ids = c.take(24, "maj/min/ino/ino_generation")?;
                if misc_bits & misc::MMAP_BUILD_ID != 0 {
                    let n = usize::from(ids[0]).min(20);
                    build_id = Some(ids[4..4 + n].to_vec());
                } else {
                    let u32_at = |o: usize| u32::from_ne_bytes(ids[o..o + 4].try_into().unwrap());
                    let u64_at = |o: usize| u64::from_ne_bytes(ids[o..o + 8].try_into().unwrap());
                    file = Some(FileId {
                        major: u32_at(0),
                        minor: u32_at(4),
                        ino: u64_at(8),
                        ino_generation: u64_at(16),
                    });
                }
                c.u32("prot")?;
                c.u32("flags")?;
            }
            let path = c.string("filename")?;
            if misc_bits & misc::MMAP_DATA != 0 {
                return Ok(None);
            }
            Record::Mmap {
                pid,
                tid,
                addr,
                len,
                pgoff,
                path,
                file,
                build_id,
                time: id.time,
            }
        }
        record::COMM => {
            let (pid, tid) = c.pair("pid/tid")?;
            let comm = c.string("comm")?;
            Record::Comm {
                pid,
                tid,
                comm,
                exec: misc_bits & misc::COMM_EXEC != 0,
                time: id.time,
            }
        }
        record::FORK | record::EXIT => {
            let (pid, ppid) = c.pair("pid/ppid")?;
            let (tid, ptid) = c.pair("tid/ptid")?;
            let time = c.u64("time")?;
            if ty == record::FORK {
                Record::Fork {
                    pid,
                    ppid,
                    tid,
                    ptid,
                    time,
                }
            } else {
                Record::Exit {
                    pid,
                    ppid,
                    tid,
                    ptid,
                    time,
                }
            }
        }
        record::LOST => {
            c.u64("id")?;
            let count = c.u64("lost")?;
            Record::Lost {
                cpu,
                count,
                time: id.time,
            }
        }
        record::LOST_SAMPLES => {
            let count = c.u64("lost")?;
            Record::Lost {
                cpu,
                count,
                time: id.time,
            }
        }
        record::SWITCH | record::SWITCH_CPU_WIDE => {
            // The sample id names the task leaving or coming; a CPU-wide
            // record also names the other task, which its own record
            // (on the same CPU) describes.
            if ty == record::SWITCH_CPU_WIDE {
                c.pair("next_prev_pid/tid")?;
            }
            Record::Switch {
                pid: id.pid,
                tid: id.tid,
                cpu,
                out: misc_bits & misc::SWITCH_OUT != 0,
                preempt: misc_bits & misc::SWITCH_OUT_PREEMPT != 0,
                time: id.time,
            }
        }
        _ => {
            // THROTTLE / UNTHROTTLE
            let time = c.u64("time")?;
            c.u64("id")?;
            c.u64("stream_id")?;
            Record::Throttle {
                cpu,
                throttled: ty == record::THROTTLE,
                time,
            }
        }
    };
    Ok(Some(rec))
}

#[cfg(test)]
mod tests;
