//! The Firefox Profiler's processed profile format (JSON), built with the
//! `fxprof-processed-profile` crate (samply's): one process per pid named
//! by its command, one thread per tid, every sample at its time (ms from
//! the first sample, the header's start time as the reference) with its
//! weight as CPU delta, frames as labels already symbolized, in two
//! categories, `User` (yellow) and `Kernel` (orange). Open it at
//! <https://profiler.firefox.com/> ("Load a profile from file").

use super::Names;
use crate::recording::Recording;
use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo, Profile,
    ReferenceTimestamp, SamplingInterval, Timestamp,
};
use std::collections::HashMap;

/// The processed profile of `rec`, as JSON bytes.
pub fn write(rec: &Recording) -> Vec<u8> {
    let names = Names::new(rec);
    let interval = if rec.header.period_ns > 0 {
        SamplingInterval::from_nanos(rec.header.period_ns)
    } else {
        SamplingInterval::from_millis(1)
    };
    let mut p = Profile::new(
        "profdev",
        ReferenceTimestamp::from_millis_since_unix_epoch(rec.header.start_ns as f64 / 1e6),
        interval,
    );
    p.set_symbolicated(true);
    let user = CategoryPairHandle::from(p.add_category("User", CategoryColor::Yellow));
    let kernel = CategoryPairHandle::from(p.add_category("Kernel", CategoryColor::Orange));
    let t0 = rec.samples.first().map_or(0, |s| s.time);
    let ts = |t: u64| Timestamp::from_nanos_since_reference(t.saturating_sub(t0));
    let mut processes = HashMap::new();
    let mut threads = HashMap::new();
    let mut labels: Vec<Option<fxprof_processed_profile::StringHandle>> =
        vec![None; names.funcs.len()];
    for (i, s) in rec.samples.iter().enumerate() {
        let comm = rec.task(s).comm.clone();
        let process = *processes
            .entry(s.pid)
            .or_insert_with(|| p.add_process(&comm, s.pid, ts(s.time)));
        let thread = *threads.entry(s.tid).or_insert_with(|| {
            let t = p.add_thread(process, s.tid, ts(s.time), s.tid == s.pid);
            p.set_thread_name(t, &comm);
            t
        });
        let funcs = names.stack(i);
        let mut frames = Vec::with_capacity(funcs.len());
        for &f in funcs.iter().rev() {
            let label = *labels[f as usize]
                .get_or_insert_with(|| p.intern_string(&names.funcs[f as usize].name));
            frames.push(FrameInfo {
                frame: Frame::Label(label),
                category_pair: if names.funcs[f as usize].kernel {
                    kernel
                } else {
                    user
                },
                flags: FrameFlags::empty(),
            });
        }
        let stack = p.intern_stack_frames(thread, frames.into_iter());
        p.add_sample(thread, ts(s.time), stack, CpuDelta::from_nanos(s.weight), 1);
    }
    serde_json::to_vec(&p).expect("a profile serializes")
}
