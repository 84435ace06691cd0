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
use crate::pprof::{value_type, Pb, Strings};
use crate::recording::{Frame, ObjectKind, Recording};
use rustc_hash::FxHashMap as HashMap;
use std::io::Write;

/// The uncompressed profile.proto bytes of `rec`.
pub fn encode(rec: &Recording) -> Vec<u8> {
    let names = Names::new(rec);
    let mut st = Strings::new();
    let mut out = Pb::default();
    // sample_type (1), period_type (11), period (12).
    let samples_ty = value_type(&mut st, "samples", "count");
    let cpu_ty = value_type(&mut st, "cpu", "nanoseconds");
    out.bytes(1, &samples_ty);
    out.bytes(1, &cpu_ty);

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
    // Samples (2): one per distinct stack, its values summed, in the
    // order each stack first came.
    let mut p = Pb::default();
    for (u, &(count, weight)) in names.stack_counts.iter().enumerate() {
        p.0.clear();
        p.packed(1, names.stack_frames(u).map(|f| loc_of[f]));
        p.packed(2, [count, weight].into_iter());
        out.bytes(2, &p.0);
    }
    // Mappings (3): one per object (id = object id); object 0 is mapping 0 (none).
    for o in rec
        .objects
        .iter()
        .filter(|o| o.info.kind != ObjectKind::Label)
    {
        let (lo, hi) = span.get(&o.id).copied().unwrap_or((0, 0));
        let mut p = Pb::default();
        p.int(1, o.id.into());
        p.int(2, lo);
        p.int(3, hi.saturating_add(1));
        p.int(5, st.id(&o.info.path));
        let hex: String = o.info.build_id.iter().map(|b| format!("{b:02x}")).collect();
        p.int(6, st.id(&hex));
        let has_funcs = !o.functions.is_empty();
        let has_lines = o.functions.iter().any(|f| !f.lines.is_empty());
        p.int(7, has_funcs.into());
        p.int(8, has_lines.into());
        p.int(9, has_lines.into());
        out.bytes(3, &p.0);
    }
    // Locations (4).
    for (i, (f, func)) in locs.iter().enumerate() {
        let mut p = Pb::default();
        p.int(1, i as u64 + 1);
        p.int(2, names.mapping_of(f).into());
        p.int(3, f.offset);
        let line = rec
            .object(f.object)
            .and_then(|o| {
                o.function_at(f.offset)
                    .and_then(|fun| o.line_at(fun, f.offset))
            })
            .map_or(0, |(_, l)| l);
        let mut l = Pb::default();
        l.int(1, u64::from(*func) + 1);
        l.int(2, line.into());
        p.bytes(4, &l.0);
        out.bytes(4, &p.0);
    }
    // Functions (5).
    for (i, f) in names.funcs.iter().enumerate() {
        let mut p = Pb::default();
        p.int(1, i as u64 + 1);
        p.int(2, st.id(&f.name));
        p.int(3, st.id(&f.name));
        p.int(4, f.file.as_deref().map_or(0, |file| st.id(file)));
        out.bytes(5, &p.0);
    }
    // time_nanos (9), duration_nanos (10), period_type (11), period (12).
    let first = rec.samples.first().map_or(0, |s| s.time);
    let last = rec.samples.last().map_or(0, |s| s.time);
    let period_ty = value_type(&mut st, "cpu", "nanoseconds");
    // String table (6) last: every string is known now.
    for s in &st.list {
        out.bytes(6, s.as_bytes());
    }
    out.int(9, rec.header.start_ns);
    out.int(10, last.saturating_sub(first));
    out.bytes(11, &period_ty);
    out.int(12, rec.header.period_ns);
    out.0
}

/// The gzipped profile of `rec`, as pprof files are (at gzip's fastest
/// level, as Go's runtime/pprof writes them).
pub fn write(rec: &Recording) -> Vec<u8> {
    let raw = encode(rec);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&raw).expect("writing to memory");
    gz.finish().expect("writing to memory")
}
