//! The Firefox Profiler's processed profile format (JSON), built with the
//! `fxprof-processed-profile` crate (samply's): one process per pid named
//! by its command, one thread per tid named by its last name, every sample at its time (ms from
//! the first sample, the header's start time as the reference; the idle
//! task, pid 0, is the process and thread `[idle]`) with its
//! weight as CPU delta, frames as labels already symbolized, in two
//! categories, `User` (yellow) and `Kernel` (orange). Open it at
//! <https://profiler.firefox.com/> ("Load a profile from file").
//!
//! Of an `off-cpu` or `wall` view ([`Recording::view`]) off-CPU time is
//! marked as such: a third category, `Off-CPU` (blue), holds an innermost
//! label frame `[off-CPU: STATE]` (`sleep`, `io`, `other`) under each
//! interval's stack; an interval is one sample at the time its thread left
//! the CPU, with a CPU delta of 0 and a weight of its time in sampling
//! periods (rounded, at least 1; a period of 1 ms when the header has
//! none), so the profiler's sample counts are proportional to time, an
//! on-CPU sample weighing 1 as before.

use super::{Names, Tree};
use crate::recording::Recording;
use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameHandle, FrameInfo,
    Profile, ReferenceTimestamp, SamplingInterval, StackHandle, StringHandle, ThreadHandle,
    Timestamp,
};
use rustc_hash::FxHashMap as HashMap;

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
    // Only a time view has the third category: a cpu view is as before.
    let off_cpu = names
        .timed()
        .then(|| CategoryPairHandle::from(p.add_category("Off-CPU", CategoryColor::Blue)));
    let period = match rec.header.period_ns {
        0 => 1_000_000,
        n => n,
    };
    // (thread index, state) -> its label frame; (tid, node, state) -> stack.
    let mut state_frames: HashMap<(usize, u8), FrameHandle> = HashMap::default();
    let mut state_stacks: HashMap<(u32, u32, u8), StackHandle> = HashMap::default();
    let t0 = rec.samples.first().map_or(0, |s| s.time);
    let ts = |t: u64| Timestamp::from_nanos_since_reference(t.saturating_sub(t0));
    let tree = Tree::new(&names);
    let mut last_comm: HashMap<u32, &str> = HashMap::default();
    for t in &rec.tasks {
        last_comm.insert(t.tid, &t.comm);
    }
    // The idle task (pid 0, tid 0), named as every export names it.
    last_comm.insert(0, super::IDLE);
    let mut processes = HashMap::default();
    // tid -> (thread, its index in `frames`).
    let mut threads: HashMap<u32, (ThreadHandle, usize)> = HashMap::default();
    // Per thread, the frame of each function once interned there (the
    // profile's own interning hashes the whole frame each time).
    let mut frames: Vec<Vec<Option<FrameHandle>>> = Vec::new();
    let mut labels: Vec<Option<StringHandle>> = vec![None; names.funcs.len()];
    // (tid, tree node) -> its stack in that thread.
    let mut stacks: HashMap<(u32, u32), StackHandle> = HashMap::default();
    let mut path = Vec::new();
    for (i, s) in rec.samples.iter().enumerate() {
        let (thread, ti) = match threads.get(&s.tid) {
            Some(&t) => t,
            None => {
                // A thread is named by its last name (a thread names
                // itself after it starts; a process by its exec).
                let comm = last_comm.get(&s.tid).copied().unwrap_or("").to_string();
                let process = *processes.entry(s.pid).or_insert_with(|| {
                    let name = last_comm.get(&s.pid).copied().unwrap_or(&comm);
                    p.add_process(name, s.pid, ts(s.time))
                });
                let t = p.add_thread(process, s.tid, ts(s.time), s.tid == s.pid);
                p.set_thread_name(t, &comm);
                frames.push(vec![None; names.funcs.len()]);
                threads.insert(s.tid, (t, frames.len() - 1));
                (t, frames.len() - 1)
            }
        };
        // The nodes from the leaf up to one whose stack is known.
        let mut node = tree.leaf[i];
        path.clear();
        let mut parent = None;
        while node != 0 {
            if let Some(&h) = stacks.get(&(s.tid, node)) {
                parent = Some(h);
                break;
            }
            path.push(node);
            node = tree.nodes[node as usize].parent;
        }
        for &n in path.iter().rev() {
            let f = tree.nodes[n as usize].func as usize;
            let frame = match frames[ti][f] {
                Some(h) => h,
                None => {
                    let label =
                        *labels[f].get_or_insert_with(|| p.intern_string(&names.funcs[f].name));
                    let h = p.intern_frame(
                        thread,
                        FrameInfo {
                            frame: Frame::Label(label),
                            category_pair: if names.funcs[f].kernel { kernel } else { user },
                            flags: FrameFlags::empty(),
                        },
                    );
                    frames[ti][f] = Some(h);
                    h
                }
            };
            let h = p.intern_stack(thread, parent, frame);
            stacks.insert((s.tid, n), h);
            parent = Some(h);
        }
        let (Some(state), Some(cat)) = (s.off_cpu, off_cpu) else {
            p.add_sample(
                thread,
                ts(s.time),
                parent,
                CpuDelta::from_nanos(s.weight),
                1,
            );
            continue;
        };
        let code = state as u8;
        let key = (s.tid, tree.leaf[i], code);
        let stack = match state_stacks.get(&key) {
            Some(&h) => h,
            None => {
                let frame = *state_frames.entry((ti, code)).or_insert_with(|| {
                    let label = p.intern_string(&format!("[off-CPU: {}]", state.name()));
                    p.intern_frame(
                        thread,
                        FrameInfo {
                            frame: Frame::Label(label),
                            category_pair: cat,
                            flags: FrameFlags::empty(),
                        },
                    )
                });
                let h = p.intern_stack(thread, parent, frame);
                state_stacks.insert(key, h);
                h
            }
        };
        let weight = (s.weight as f64 / period as f64)
            .round()
            .clamp(1.0, i32::MAX as f64);
        p.add_sample(
            thread,
            ts(s.time),
            Some(stack),
            CpuDelta::from_nanos(0),
            weight as i32,
        );
    }
    serde_json::to_vec(&p).expect("a profile serializes")
}
