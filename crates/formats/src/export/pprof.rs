//! pprof: a gzipped `profile.proto` (github.com/google/pprof,
//! `proto/profile.proto`), what `go tool pprof`, Pyroscope and Parca read.
//!
//! Two sample values: `samples/count` and `cpu/nanoseconds` (the sample's
//! weight), period `cpu/nanoseconds` from the header. One Mapping per
//! object (file name, build id as hex, `has_functions` when the recording
//! holds its symbols), one Location per distinct frame (its address the
//! frame's offset in the object, one Line with the function and source
//! line), one Function per distinct function. Location ids of a sample are
//! innermost first, as the format wants. Labels (`[idle]`, `[unwind
//! failed: REASON]`) are functions of locations without a mapping. The
//! protobuf is encoded with [`crate::pprof`]'s encoder, the one every
//! pprof file profdev writes goes through.
//!
//! Of an `off-cpu` view ([`Recording::view`]) the values are
//! `samples/count` and `off_cpu/nanoseconds` (the intervals' time off the
//! CPU); of a `wall` view `samples/count`, `cpu/nanoseconds` (on-CPU
//! samples' periods), `off_cpu/nanoseconds` and `wall/nanoseconds` (both),
//! `wall` the default sample type. Off-CPU samples carry the string label
//! `state`: `sleep`, `io` or `other` (`go tool pprof -sample_index=off_cpu
//! -tagfocus state=io`).

use super::{Names, Resource};
use crate::pprof::{
    value_type, Function, Label, Line, Location, Mapping, Profile, Sample, Strings,
};
use crate::recording::{Frame, ObjectKind, OffCpu, Recording, SampleType};
use rustc_hash::FxHashMap as HashMap;
use std::io::Write;

/// The uncompressed profile.proto bytes of `rec`.
pub fn encode(rec: &Recording) -> Vec<u8> {
    encode_with(rec, &Resource::default())
}

/// The samples of `rec` labelled by process: one per distinct (stack,
/// process), its labels `resource`'s common ones and the process's own,
/// then `pid` and `comm` (its main thread's) (none at all when `resource` has neither).
fn labelled_samples(
    rec: &Recording,
    names: &Names,
    resource: &Resource,
    st: &mut Strings,
    loc_of: &HashMap<Frame, u64>,
) -> Vec<Sample> {
    let by_process = !resource.common.is_empty() || !resource.processes.is_empty();
    if !by_process && rec.view == SampleType::Cpu {
        // One per distinct stack, its values summed, in the order each
        // stack first came.
        return names
            .stack_counts
            .iter()
            .enumerate()
            .map(|(u, &(count, weight))| Sample {
                location_id: names.stack_frames(u).map(|f| loc_of[f]).collect(),
                value: vec![count as i64, weight as i64],
                label: Vec::new(),
            })
            .collect();
    }
    let mut index: HashMap<(u32, u32, Option<OffCpu>), usize> = HashMap::default();
    let mut out: Vec<Sample> = Vec::new();
    let width = value_types(rec.view).len();
    for (s, &u) in rec.samples.iter().zip(&names.sample_stack) {
        let pid = if by_process { s.pid } else { 0 };
        let i = *index.entry((u, pid, s.off_cpu)).or_insert_with(|| {
            let mut label: Vec<Label> = Vec::new();
            if let Some(state) = s.off_cpu {
                label.push(Label {
                    key: st.ix("state"),
                    str: st.ix(state.name()),
                    ..Label::default()
                });
            }
            if !by_process {
                out.push(Sample {
                    location_id: names.stack_frames(u as usize).map(|f| loc_of[f]).collect(),
                    value: vec![0; width],
                    label,
                });
                return out.len() - 1;
            }
            let own = resource.processes.get(&s.pid).into_iter().flatten();
            for (k, v) in resource.common.iter().chain(own) {
                label.push(Label {
                    key: st.ix(k),
                    str: st.ix(v),
                    ..Label::default()
                });
            }
            label.push(Label {
                key: st.ix("pid"),
                num: s.pid.into(),
                ..Label::default()
            });
            // The process's command: its main thread's, else this one's.
            let comm = match rec.tasks.iter().rev().find(|t| t.tid == s.pid) {
                Some(t) if !super::is_idle(s) => t.comm.as_str(),
                _ => super::comm(rec, s),
            };
            label.push(Label {
                key: st.ix("comm"),
                str: st.ix(comm),
                ..Label::default()
            });
            out.push(Sample {
                location_id: names.stack_frames(u as usize).map(|f| loc_of[f]).collect(),
                value: vec![0; width],
                label,
            });
            out.len() - 1
        });
        add(rec.view, s, &mut out[i].value);
    }
    out
}

/// The sample types of a view: (type, unit) of each value.
fn value_types(view: SampleType) -> &'static [(&'static str, &'static str)] {
    match view {
        SampleType::Cpu => &[("samples", "count"), ("cpu", "nanoseconds")],
        SampleType::OffCpu => &[("samples", "count"), ("off_cpu", "nanoseconds")],
        SampleType::Wall => &[
            ("samples", "count"),
            ("cpu", "nanoseconds"),
            ("off_cpu", "nanoseconds"),
            ("wall", "nanoseconds"),
        ],
    }
}

/// Add sample `s` to the values of its pprof sample ([`value_types`]).
fn add(view: SampleType, s: &crate::recording::Sample, v: &mut [i64]) {
    let w = s.weight as i64;
    v[0] += 1;
    match view {
        SampleType::Cpu | SampleType::OffCpu => v[1] += w,
        SampleType::Wall => {
            v[if s.off_cpu.is_some() { 2 } else { 1 }] += w;
            v[3] += w;
        }
    }
}

/// The uncompressed profile.proto bytes of `rec`, with what `resource`
/// adds: each sample labelled with the common attributes, its process's
/// (`pid`, `comm` and its own), and the time span.
pub fn encode_with(rec: &Recording, resource: &Resource) -> Vec<u8> {
    let names = Names::new(rec);
    let mut st = Strings::new();
    let mut out = Profile {
        sample_type: value_types(rec.view)
            .iter()
            .map(|(ty, unit)| value_type(&mut st, ty, unit))
            .collect(),
        ..Profile::default()
    };
    if rec.view == SampleType::Wall {
        out.default_sample_type = st.ix("wall");
    }

    // Locations: one per distinct frame; ids from 1.
    let mut loc_of: HashMap<Frame, u64> = HashMap::default();
    let mut locs: Vec<(Frame, u32)> = Vec::new();
    let mut span: HashMap<u32, (u64, u64)> = HashMap::default();
    for u in 0..names.stacks.len() {
        for f in names.stack_frames(u) {
            loc_of.entry(*f).or_insert_with(|| {
                locs.push((*f, names.func_of(f)));
                if names.mapping_of(f) != 0 {
                    let e = span.entry(f.object).or_insert((f.offset, f.offset));
                    e.0 = e.0.min(f.offset);
                    e.1 = e.1.max(f.offset);
                }
                locs.len() as u64
            });
        }
    }
    out.sample = labelled_samples(rec, &names, resource, &mut st, &loc_of);
    // Mappings: one per object (id = object id); object 0 is mapping 0 (none).
    for o in rec
        .objects
        .iter()
        .filter(|o| o.info.kind != ObjectKind::Label)
    {
        let (lo, hi) = span.get(&o.id).copied().unwrap_or((0, 0));
        let hex: String = o.info.build_id.iter().map(|b| format!("{b:02x}")).collect();
        let has_lines = o.functions.iter().any(|f| !f.lines.is_empty());
        out.mapping.push(Mapping {
            id: o.id.into(),
            memory_start: lo,
            memory_limit: hi.saturating_add(1),
            filename: st.ix(&o.info.path),
            build_id: st.ix(&hex),
            has_functions: !o.functions.is_empty(),
            has_filenames: has_lines,
            has_line_numbers: has_lines,
            ..Mapping::default()
        });
    }
    for (i, (f, func)) in locs.iter().enumerate() {
        let line = rec
            .object(f.object)
            .and_then(|o| {
                o.function_at(f.offset)
                    .and_then(|fun| o.line_at(fun, f.offset))
            })
            .map_or(0, |(_, l)| l);
        out.location.push(Location {
            id: i as u64 + 1,
            mapping_id: names.mapping_of(f).into(),
            address: f.offset,
            line: vec![Line {
                function_id: u64::from(*func) + 1,
                line: line.into(),
                column: 0,
            }],
            is_folded: false,
        });
    }
    for (i, f) in names.funcs.iter().enumerate() {
        out.function.push(Function {
            id: i as u64 + 1,
            name: st.ix(&f.name),
            system_name: st.ix(&f.name),
            filename: f.file.as_deref().map_or(0, |file| st.ix(file)),
            start_line: 0,
        });
    }
    let first = rec.samples.first().map_or(0, |s| s.time);
    let last = rec.samples.last().map_or(0, |s| s.time);
    out.period_type = Some(value_type(&mut st, "cpu", "nanoseconds"));
    match resource.span {
        Some(span) => {
            out.time_nanos = span.start_ns as i64;
            out.duration_nanos = span.end_ns.saturating_sub(span.start_ns) as i64;
        }
        None => {
            out.time_nanos = rec.header.start_ns as i64;
            out.duration_nanos = last.saturating_sub(first) as i64;
        }
    }
    out.period = rec.header.period_ns as i64;
    // The string table last: every string is known now.
    out.string_table = st.list;
    out.encode()
}

/// The gzipped profile of `rec`, as pprof files are (at gzip's fastest
/// level, as Go's runtime/pprof writes them).
pub fn write(rec: &Recording) -> Vec<u8> {
    gzip(&encode(rec))
}

/// The gzipped profile of `rec` with what `resource` adds
/// ([`encode_with`]).
pub fn write_with(rec: &Recording, resource: &Resource) -> Vec<u8> {
    gzip(&encode_with(rec, resource))
}

fn gzip(raw: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(raw).expect("writing to memory");
    gz.finish().expect("writing to memory")
}
