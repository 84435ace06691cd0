//! A GNU gmon.out for one executable of a recording, what GNU gprof reads
//! with that executable: a histogram of the samples whose innermost frame
//! is in its text (one u16 cell per 4 bytes, glibc's layout, saturating at
//! 65535), and call arcs from the stacks: each caller frame in the
//! executable, with the frame it called also there, counts one arc from
//! the call site to the callee's function start, per sample.
//!
//! The executable is chosen by [`Select`]: the samples of `pid` or of
//! threads named `comm` (all when neither); among the user objects in
//! their stacks, the one whose file name begins with the sampled thread's
//! command, with most samples (an executable, not a library it calls);
//! failing that, the object with most samples. Its addresses are the
//! recording's offsets, the executable's link-time addresses, as gprof
//! reads them.

use super::ExportError;
use crate::gmon::{self, Arc, Format, GmonOut, Histogram, Target};
use crate::recording::{Object, ObjectKind, Recording, Sample};

use std::collections::HashMap;

/// Which samples and which executable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Select {
    /// Only this process's samples.
    pub pid: Option<u32>,
    /// Only samples of threads with this command name.
    pub comm: Option<String>,
    /// The gmon.out layout.
    pub format: Format,
}

const CELL: u64 = 4;

fn selected(rec: &Recording, s: &Sample, sel: &Select) -> bool {
    sel.pid.is_none_or(|p| p == s.pid) && sel.comm.as_deref().is_none_or(|c| rec.task(s).comm == c)
}

/// How many selected samples have each (stack, Task entry).
fn selected_stacks(rec: &Recording, sel: &Select) -> Vec<((u32, u32), u64)> {
    let mut counts: rustc_hash::FxHashMap<(u32, u32), u64> = Default::default();
    for s in rec.samples.iter().filter(|s| selected(rec, s, sel)) {
        *counts.entry((s.stack, s.task)).or_default() += 1;
    }
    let mut v: Vec<_> = counts.into_iter().collect();
    v.sort_unstable();
    v
}

fn stack_frames(rec: &Recording, stack: u32) -> &[crate::recording::Frame] {
    let (first, depth) = rec.stacks[stack as usize];
    &rec.frames[first..first + depth as usize]
}

/// The executable [`write`] would profile.
pub fn choose<'r>(rec: &'r Recording, sel: &Select) -> Result<&'r Object, ExportError> {
    choose_among(rec, sel, &selected_stacks(rec, sel))
}

fn choose_among<'r>(
    rec: &'r Recording,
    sel: &Select,
    stacks: &[((u32, u32), u64)],
) -> Result<&'r Object, ExportError> {
    let mut named: HashMap<u32, u64> = HashMap::new();
    let mut any: HashMap<u32, u64> = HashMap::new();
    for &((stack, task), n) in stacks {
        let comm = &rec.tasks[task as usize].comm;
        let mut seen: Vec<u32> = Vec::new();
        for f in stack_frames(rec, stack) {
            if seen.contains(&f.object) {
                continue;
            }
            seen.push(f.object);
            let Some(o) = rec.object(f.object) else {
                continue;
            };
            if o.info.kind != ObjectKind::User {
                continue;
            }
            *any.entry(o.id).or_default() += n;
            if !comm.is_empty() && o.short_name().starts_with(comm.as_str()) {
                *named.entry(o.id).or_default() += n;
            }
        }
    }
    let best = |m: &HashMap<u32, u64>| {
        m.iter()
            .max_by_key(|(&id, &n)| (n, std::cmp::Reverse(id)))
            .map(|(&id, _)| id)
    };
    let id = best(&named).or_else(|| best(&any)).ok_or_else(|| {
        ExportError::NoExecutable(match (&sel.pid, &sel.comm) {
            (None, None) => "no sample of the recording is in a user program; gmon needs one".into(),
            _ => "no sample of the selected --pid/--comm is in a user program; choose another with --pid or --comm".into(),
        })
    })?;
    Ok(rec.object(id).expect("an id from the stacks"))
}

/// The gmon.out contents for the chosen executable.
pub fn profile<'r>(rec: &'r Recording, sel: &Select) -> Result<(GmonOut, &'r Object), ExportError> {
    let stacks = selected_stacks(rec, sel);
    let exe = choose_among(rec, sel, &stacks)?;
    let in_exe: Vec<u64> = rec
        .frames
        .iter()
        .filter(|f| f.object == exe.id)
        .map(|f| f.offset)
        .collect();
    let lo = exe
        .functions
        .iter()
        .map(|f| f.start)
        .chain(in_exe.iter().copied())
        .min()
        .unwrap_or(0);
    let hi = exe
        .functions
        .iter()
        .map(|f| f.start.saturating_add(f.len.max(1)))
        .chain(in_exe.iter().map(|&o| o.saturating_add(1)))
        .max()
        .unwrap_or(lo + CELL);
    let low = lo & !(CELL - 1);
    let high = hi.div_ceil(CELL).saturating_mul(CELL);
    let cells = (high - low) / CELL;
    if cells > super::MAX_TABLE_WORDS {
        return Err(ExportError::TooLarge {
            format: "gmon",
            what: "the executable's text",
            words: cells,
        });
    }
    let cells = cells as usize;
    let hz = (1_000_000_000u64.checked_div(rec.header.period_ns)).unwrap_or(100) as u32;
    let mut hist = Histogram::new(low, high, cells, hz);
    let mut arcs: HashMap<(u64, u64), u64> = HashMap::new();
    for s in rec.samples.iter().filter(|s| selected(rec, s, sel)) {
        if let Some(f) = rec
            .stack(s)
            .first()
            .filter(|f| f.object == exe.id && !s.kernel)
        {
            let c = &mut hist.bins[((f.offset - low) / CELL) as usize];
            *c = c.saturating_add(1);
        }
    }
    // Arcs per distinct stack, times its samples.
    for &((stack, _), n) in &stacks {
        for w in stack_frames(rec, stack).windows(2) {
            let (callee, site) = (w[0], w[1]);
            if callee.object != exe.id || site.object != exe.id {
                continue;
            }
            if let Some(func) = exe.function_at(callee.offset) {
                *arcs.entry((site.offset, func.start)).or_default() += n;
            }
        }
    }
    let mut arcs: Vec<Arc> = arcs
        .into_iter()
        .map(|((from_pc, self_pc), count)| Arc {
            from_pc,
            self_pc,
            count: count.min(u64::from(u32::MAX)),
        })
        .collect();
    arcs.sort();
    Ok((
        GmonOut {
            histograms: vec![hist],
            arcs,
            bb_counts: Vec::new(),
        },
        exe,
    ))
}

/// The gmon.out bytes (x86_64 layout) and the executable's path.
pub fn write(rec: &Recording, sel: &Select) -> Result<(Vec<u8>, String), ExportError> {
    let (g, exe) = profile(rec, sel)?;
    let bytes = gmon::write(&g, sel.format, Target::X86_64)
        .map_err(|e| ExportError::Write(e.to_string()))?;
    Ok((bytes, exe.info.path.clone()))
}
