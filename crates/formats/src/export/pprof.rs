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

use super::Names;
use crate::pprof::{value_type, Function, Line, Location, Mapping, Profile, Sample, Strings};
use crate::recording::{Frame, ObjectKind, Recording};
use rustc_hash::FxHashMap as HashMap;
use std::io::Write;

/// The uncompressed profile.proto bytes of `rec`.
pub fn encode(rec: &Recording) -> Vec<u8> {
    let names = Names::new(rec);
    let mut st = Strings::new();
    let mut out = Profile {
        sample_type: vec![
            value_type(&mut st, "samples", "count"),
            value_type(&mut st, "cpu", "nanoseconds"),
        ],
        ..Profile::default()
    };

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
    // Samples: one per distinct stack, its values summed, in the order
    // each stack first came.
    for (u, &(count, weight)) in names.stack_counts.iter().enumerate() {
        out.sample.push(Sample {
            location_id: names.stack_frames(u).map(|f| loc_of[f]).collect(),
            value: vec![count as i64, weight as i64],
            label: Vec::new(),
        });
    }
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
    out.time_nanos = rec.header.start_ns as i64;
    out.duration_nanos = last.saturating_sub(first) as i64;
    out.period = rec.header.period_ns as i64;
    // The string table last: every string is known now.
    out.string_table = st.list;
    out.encode()
}

/// The gzipped profile of `rec`, as pprof files are (at gzip's fastest
/// level, as Go's runtime/pprof writes them).
pub fn write(rec: &Recording) -> Vec<u8> {
    let raw = encode(rec);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&raw).expect("writing to memory");
    gz.finish().expect("writing to memory")
}
