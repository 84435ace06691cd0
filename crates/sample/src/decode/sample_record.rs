//! PERF_RECORD_SAMPLE: the sample's own fields in `sample_type` order,
//! and the callchain split at its context markers.

use super::{cpu_mode, Cursor, DecodeError, RecordLayout};
use crate::sys::{self, context, record, sample};
use profdev_core::{CpuMode, Record, Sample, UserRegs};

/// Split a kernel callchain at its context markers. Entries before the first
/// marker belong to the sample's own mode; hypervisor and guest parts are
/// dropped (profdev does not symbolize them).
pub fn split_callchain(ips: &[u64], mode: CpuMode) -> (Vec<u64>, Vec<u64>) {
    split_chain(ips.iter().copied(), mode)
}

/// Which part of a callchain an entry belongs to.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    Kernel,
    User,
    Other,
}

/// [`split_callchain`] over any re-iterable sequence of entries (the
/// record's bytes, in place): one pass counts each part, the second fills
/// two vectors allocated at their final size, so a sample costs exactly
/// its two chains' allocations.
fn split_chain<I>(ips: I, mode: CpuMode) -> (Vec<u64>, Vec<u64>)
where
    I: Iterator<Item = u64> + Clone,
{
    let parts = |ips: I| {
        let mut part = match mode {
            CpuMode::Kernel => Part::Kernel,
            CpuMode::User => Part::User,
            CpuMode::Other => Part::Other,
        };
        ips.filter_map(move |ip| {
            if ip >= context::MAX {
                part = match ip {
                    context::KERNEL => Part::Kernel,
                    context::USER => Part::User,
                    _ => Part::Other, // HV, GUEST, GUEST_KERNEL, GUEST_USER
                };
                return None;
            }
            Some((part, ip))
        })
    };
    let (mut nk, mut nu) = (0, 0);
    for (part, _) in parts(ips.clone()) {
        match part {
            Part::Kernel => nk += 1,
            Part::User => nu += 1,
            Part::Other => {}
        }
    }
    let (mut kernel, mut user) = (Vec::with_capacity(nk), Vec::with_capacity(nu));
    for (part, ip) in parts(ips) {
        match part {
            Part::Kernel => kernel.push(ip),
            Part::User => user.push(ip),
            Part::Other => {}
        }
    }
    (kernel, user)
}

pub(super) fn decode_sample(
    bytes: &[u8],
    misc_bits: u16,
    layout: &RecordLayout,
    ring_cpu: u32,
) -> Result<Record, DecodeError> {
    if layout.has(sample::READ | sample::RAW | sample::BRANCH_STACK) {
        return Err(DecodeError::UnsupportedSampleType {
            sample_type: layout.sample_type,
        });
    }
    let mut c = Cursor {
        bytes,
        pos: 8,
        end: bytes.len(),
        ty: record::SAMPLE,
    };
    let mode = cpu_mode(misc_bits);
    let mut s = Sample {
        mode,
        cpu: ring_cpu,
        ..Sample::default()
    };
    if layout.has(sample::IDENTIFIER) {
        c.u64("identifier")?;
    }
    if layout.has(sample::IP) {
        s.ip = c.u64("ip")?;
    }
    if layout.has(sample::TID) {
        (s.pid, s.tid) = c.pair("pid/tid")?;
    }
    if layout.has(sample::TIME) {
        s.time = c.u64("time")?;
    }
    if layout.has(sample::ADDR) {
        c.u64("addr")?;
    }
    if layout.has(sample::ID) {
        c.u64("id")?;
    }
    if layout.has(sample::STREAM_ID) {
        c.u64("stream_id")?;
    }
    if layout.has(sample::CPU) {
        s.cpu = c.pair("cpu/res")?.0;
    }
    if layout.has(sample::PERIOD) {
        s.period = c.u64("period")?;
    }
    if layout.has(sample::CALLCHAIN) {
        let nr = c.u64("callchain.nr")?;
        let n = usize::try_from(nr)
            .ok()
            .and_then(|n| n.checked_mul(8))
            .unwrap_or(usize::MAX);
        let raw = c.take(n, "callchain.ips")?;
        let ips = raw
            .chunks_exact(8)
            .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")));
        (s.kernel_chain, s.user_chain) = split_chain(ips, mode);
    }
    if layout.has(sample::REGS_USER) {
        let abi = c.u64("regs_user.abi")?;
        if abi != sys::REGS_ABI_NONE {
            let mut regs = UserRegs::default();
            let (bp, sp, ip) = sys::USER_REG_BITS.unwrap_or((u32::MAX, u32::MAX, u32::MAX));
            // The registers come in the order of the mask's set bits,
            // lowest first: visit those bits only.
            let mut mask = layout.regs_user_mask;
            while mask != 0 {
                let bit = mask.trailing_zeros();
                mask &= mask - 1;
                let v = c.u64("regs_user.regs")?;
                if bit == bp {
                    regs.bp = v;
                } else if bit == sp {
                    regs.sp = v;
                } else if bit == ip {
                    regs.ip = v;
                }
            }
            s.user_regs = Some(regs);
        }
    }
    if layout.has(sample::STACK_USER) {
        let size = c.u64("stack_user.size")?;
        if size != 0 {
            let data = c.take(
                usize::try_from(size).unwrap_or(usize::MAX),
                "stack_user.data",
            )?;
            let dyn_size = c.u64("stack_user.dyn_size")?;
            let n = usize::try_from(dyn_size.min(size)).unwrap_or(data.len());
            s.user_stack = data[..n].to_vec();
        }
    }
    Ok(Record::Sample(s))
}
