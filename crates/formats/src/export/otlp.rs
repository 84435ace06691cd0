//! OpenTelemetry profiles: a `ProfilesData` message (protobuf, not
//! compressed), what an OTLP file exporter writes and a collector's
//! profiles receiver takes.
//!
//! **Pinned to opentelemetry-proto v1.10.0**
//! (`opentelemetry/proto/profiles/v1development/profiles.proto`), the
//! release the `opentelemetry-proto` crate 0.33.1 generates its types
//! from. The profiles signal is still in development and its releases
//! change it incompatibly (v1.8.0 moved the tables into a shared
//! dictionary, v1.9.0 added the stack table and removed the location
//! index range): a consumer built for another release may misread this
//! file. The encoder is written here (a few wire types), so the exporter
//! links none of that crate's code; the crate's own types are the test
//! oracle (`cargo test -p profdev-formats otlp`), and moving to a later
//! release is moving that pin and this encoder together. (pprof's
//! messages, which do not change, are prost structs: [`crate::pprof`].)
//!
//! Layout: one `ResourceProfiles` per process (resource attributes
//! `process.pid` and `process.executable.name`), one `ScopeProfiles`
//! (scope `profdev`) with one `Profile`: sample type and period type
//! `cpu`/`nanoseconds`, the recording's start time and duration. One
//! `Sample` per distinct (stack, thread), with attributes `thread.id` and
//! `thread.name`, the weight (ns) of each of its samples in `values` and
//! their times (Unix ns: the recording's start plus the time since its
//! first sample) in `timestamps_unix_nano`. The dictionary holds the
//! tables, each starting with its zero entry as the format requires: one
//! `Mapping` per object (its file name, the span of its sampled offsets,
//! attribute `process.executable.build_id.gnu` with the build id in hex),
//! one `Location` per distinct frame (address the frame's offset in its
//! object, one `Line` with the function and source line), one `Function`
//! per distinct function (named as every export names them: labels such as
//! `[idle]` and `[unwind failed: REASON]` are functions of locations
//! without a mapping), one `Stack` per distinct stack (location indices
//! innermost first).
//!
//! [`write_with`] adds what a sender knows beyond the recording (`profdev
//! agent`): attributes of every resource (the host, static labels), of
//! each process's resource (executable path, cgroup, container...), and
//! the profile's time span on the Unix clock, its samples' times moved
//! onto that clock. `ProfilesData` and the collector's
//! `ExportProfilesServiceRequest` have the same fields (1: resource
//! profiles, 2: dictionary), so these bytes are that request too.
//!
//! Of an `off-cpu` view ([`Recording::view`]) the sample type is
//! `off_cpu`/`nanoseconds`, each value an interval's time off the CPU; of
//! a `wall` view `wall`/`nanoseconds`, on-CPU samples' periods and
//! off-CPU intervals alike (a v1.10 profile has one sample type; export
//! `--type off-cpu` beside `--type cpu` to tell them apart). The period
//! type stays `cpu`/`nanoseconds`. The off-CPU state is not carried.

use super::{Names, IDLE};
use crate::pprof::Strings;
use crate::recording::{Frame, ObjectKind, Recording, SampleType};
use rustc_hash::FxHashMap as HashMap;

/// The opentelemetry-proto release this module writes.
pub const PROTO_VERSION: &str = "1.10.0";

/// The scope name written.
pub const SCOPE: &str = "profdev";

/// Protobuf wire encoding of the few things profiles.proto needs.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }
    /// An int64/uint64/bool field (omitted when zero, as proto3 does).
    fn int(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, 0);
            self.varint(v);
        }
    }
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    /// A packed repeated varint field (omitted when empty).
    fn packed(&mut self, field: u32, vs: impl Iterator<Item = u64>) {
        let mut inner = Pb::default();
        for v in vs {
            inner.varint(v);
        }
        if !inner.0.is_empty() {
            self.bytes(field, &inner.0);
        }
    }
    /// An int64 field written even when zero (a oneof member).
    fn int_always(&mut self, field: u32, v: u64) {
        self.key(field, 0);
        self.varint(v);
    }
    fn fixed64(&mut self, field: u32, v: u64) {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A message field, its bytes made by `f`.
    fn message(&mut self, field: u32, f: impl FnOnce(&mut Pb)) {
        let mut inner = Pb::default();
        f(&mut inner);
        self.bytes(field, &inner.0);
    }
}

/// An attribute value.
enum Value<'s> {
    Int(u64),
    Str(&'s str),
}

fn any_value(p: &mut Pb, v: &Value) {
    match v {
        Value::Str(s) => p.bytes(1, s.as_bytes()),
        Value::Int(i) => p.int_always(3, *i),
    }
}

/// The dictionary's attribute table: index 0 is the zero entry.
struct Attributes {
    /// Encoded KeyValueAndUnit entries after the zero one.
    entries: Vec<Vec<u8>>,
    index: HashMap<(u64, String), u64>,
}

impl Attributes {
    fn id(&mut self, st: &mut Strings, key: &str, v: Value) -> u64 {
        let k = st.id(key);
        let ident = match &v {
            Value::Int(i) => format!("i{i}"),
            Value::Str(s) => format!("s{s}"),
        };
        if let Some(&i) = self.index.get(&(k, ident.clone())) {
            return i;
        }
        let mut p = Pb::default();
        p.int(1, k);
        p.message(2, |m| any_value(m, &v));
        self.entries.push(p.0);
        let i = self.entries.len() as u64;
        self.index.insert((k, ident), i);
        i
    }
}

/// One Sample: the samples of one thread with one stack.
struct Group {
    stack: u32,
    pid: u32,
    tid: u32,
    /// The thread's Task entry at its first sample.
    task: u32,
    values: Vec<u64>,
    times: Vec<u64>,
}

pub use super::{Resource, Span};

/// The `ProfilesData` bytes of `rec`.
pub fn write(rec: &Recording) -> Vec<u8> {
    write_with(rec, &Resource::default())
}

/// The `ProfilesData` (and `ExportProfilesServiceRequest`) bytes of `rec`,
/// with what `resource` adds.
pub fn write_with(rec: &Recording, resource: &Resource) -> Vec<u8> {
    let names = Names::new(rec);
    let mut st = Strings::new();
    let mut attrs = Attributes {
        entries: Vec::new(),
        index: HashMap::default(),
    };
    let t0 = rec.samples.first().map_or(0, |s| s.time);
    let t1 = rec.samples.last().map_or(0, |s| s.time);
    let unix = |t: u64| match resource.span {
        Some(span) => t.wrapping_add(span.to_unix),
        None => rec.header.start_ns.wrapping_add(t.wrapping_sub(t0)),
    };
    let (start_ns, duration) = match resource.span {
        Some(span) => (span.start_ns, span.end_ns.saturating_sub(span.start_ns)),
        None => (rec.header.start_ns, t1.saturating_sub(t0)),
    };

    // Samples by (stack, thread), in the order they first came; processes
    // in the order of their first sample.
    let mut group_of: HashMap<(u32, u32), usize> = HashMap::default();
    let mut groups: Vec<Group> = Vec::new();
    let mut pids: Vec<u32> = Vec::new();
    for (s, &u) in rec.samples.iter().zip(&names.sample_stack) {
        let g = *group_of.entry((u, s.tid)).or_insert_with(|| {
            if !pids.contains(&s.pid) {
                pids.push(s.pid);
            }
            groups.push(Group {
                stack: u,
                pid: s.pid,
                tid: s.tid,
                task: s.task,
                values: Vec::new(),
                times: Vec::new(),
            });
            groups.len() - 1
        });
        groups[g].values.push(s.weight);
        groups[g].times.push(unix(s.time));
    }

    // Dictionary tables. Mappings: one per object but labels, from 1.
    let mut mapping_index: HashMap<u32, u64> = HashMap::default();
    let mut span: HashMap<u32, (u64, u64)> = HashMap::default();
    let mut loc_of: HashMap<Frame, u64> = HashMap::default();
    let mut locs: Vec<Frame> = Vec::new();
    for u in 0..names.stacks.len() {
        for f in names.stack_frames(u) {
            loc_of.entry(*f).or_insert_with(|| {
                locs.push(*f);
                if names.mapping_of(f) != 0 {
                    let e = span.entry(f.object).or_insert((f.offset, f.offset));
                    e.0 = e.0.min(f.offset);
                    e.1 = e.1.max(f.offset);
                }
                locs.len() as u64
            });
        }
    }
    let mut dict = Pb::default();
    dict.bytes(1, &[]); // mapping_table[0]
    for o in rec
        .objects
        .iter()
        .filter(|o| o.info.kind != ObjectKind::Label)
    {
        let (lo, hi) = span.get(&o.id).copied().unwrap_or((0, 0));
        let hex: String = o.info.build_id.iter().map(|b| format!("{b:02x}")).collect();
        let build_id = (!hex.is_empty())
            .then(|| attrs.id(&mut st, "process.executable.build_id.gnu", Value::Str(&hex)));
        let name = st.id(&o.info.path);
        dict.message(1, |p| {
            p.int(1, lo);
            p.int(2, hi.saturating_add(1));
            p.int(4, name);
            p.packed(5, build_id.into_iter());
        });
        mapping_index.insert(o.id, mapping_index.len() as u64 + 1);
    }
    dict.bytes(2, &[]); // location_table[0]
    for f in &locs {
        let func = u64::from(names.func_of(f)) + 1;
        let line = rec
            .object(f.object)
            .and_then(|o| {
                o.function_at(f.offset)
                    .and_then(|fun| o.line_at(fun, f.offset))
            })
            .map_or(0, |(_, l)| l);
        let mapping = match names.mapping_of(f) {
            0 => 0,
            id => mapping_index[&id],
        };
        dict.message(2, |p| {
            p.int(1, mapping);
            p.int(2, f.offset);
            p.message(3, |l| {
                l.int(1, func);
                l.int(2, line.into());
            });
        });
    }
    dict.bytes(3, &[]); // function_table[0]
    for f in &names.funcs {
        let name = st.id(&f.name);
        let file = f.file.as_deref().map_or(0, |file| st.id(file));
        dict.message(3, |p| {
            p.int(1, name);
            p.int(2, name);
            p.int(3, file);
        });
    }
    dict.bytes(4, &[]); // link_table[0]

    // The profiles, one resource per process.
    let mut out = Pb::default();
    let cpu = st.id("cpu");
    let ns = st.id("nanoseconds");
    // The sample type of a time view: off_cpu or wall (period type: cpu).
    let ty = match rec.view {
        SampleType::Cpu => cpu,
        SampleType::OffCpu => st.id("off_cpu"),
        SampleType::Wall => st.id("wall"),
    };
    let mut by_pid: HashMap<u32, Vec<usize>> = HashMap::default();
    for (i, g) in groups.iter().enumerate() {
        by_pid.entry(g.pid).or_default().push(i);
    }
    for &pid in &pids {
        let mine = &by_pid[&pid];
        let comm = if pid == 0 {
            IDLE.to_string()
        } else {
            rec.tasks
                .iter()
                .rev()
                .find(|t| t.tid == pid)
                .or_else(|| rec.tasks.get(groups[mine[0]].task as usize))
                .map_or_else(String::new, |t| t.comm.clone())
        };
        let mut profile = Pb::default();
        profile.message(1, |p| {
            p.int(1, ty);
            p.int(2, ns);
        });
        let mut sample = Pb::default();
        for &g in mine {
            let g = &groups[g];
            let name = if g.tid == 0 && g.pid == 0 {
                IDLE.to_string()
            } else {
                rec.tasks
                    .get(g.task as usize)
                    .map_or_else(String::new, |t| t.comm.clone())
            };
            let a = attrs.id(&mut st, "thread.id", Value::Int(g.tid.into()));
            let b = attrs.id(&mut st, "thread.name", Value::Str(&name));
            sample.0.clear();
            sample.int(1, u64::from(g.stack) + 1);
            sample.packed(2, [a, b].into_iter());
            sample.packed(4, g.values.iter().copied());
            let mut times = Vec::with_capacity(g.times.len() * 8);
            for t in &g.times {
                times.extend_from_slice(&t.to_le_bytes());
            }
            sample.bytes(5, &times);
            profile.bytes(2, &sample.0);
        }
        profile.fixed64(3, start_ns);
        profile.int(4, duration);
        profile.message(5, |p| {
            p.int(1, cpu);
            p.int(2, ns);
        });
        profile.int(6, rec.header.period_ns);
        profile.bytes(7, &profile_id(start_ns, pid));
        out.message(1, |rp| {
            rp.message(1, |res| write_resource(res, pid, &comm, resource));
            rp.message(2, |sp| {
                sp.message(1, |s| {
                    s.bytes(1, SCOPE.as_bytes());
                    s.bytes(2, env!("CARGO_PKG_VERSION").as_bytes());
                });
                sp.bytes(2, &profile.0);
            });
        });
    }

    // The rest of the dictionary: strings (all known now), attributes,
    // stacks.
    for s in &st.list {
        dict.bytes(5, s.as_bytes());
    }
    dict.bytes(6, &[]); // attribute_table[0]
    for a in &attrs.entries {
        dict.bytes(6, a);
    }
    dict.bytes(7, &[]); // stack_table[0]
    let mut stack = Pb::default();
    for u in 0..names.stacks.len() {
        stack.0.clear();
        stack.packed(1, names.stack_frames(u).map(|f| loc_of[f]));
        dict.bytes(7, &stack.0);
    }
    out.bytes(2, &dict.0);
    out.0
}

/// A process's `Resource`: `process.pid`, `process.executable.name`, then
/// what `resource` adds to every process and to this one.
fn write_resource(res: &mut Pb, pid: u32, comm: &str, resource: &Resource) {
    res.message(1, |kv| {
        kv.bytes(1, b"process.pid");
        kv.message(2, |v| any_value(v, &Value::Int(pid.into())));
    });
    res.message(1, |kv| {
        kv.bytes(1, b"process.executable.name");
        kv.message(2, |v| any_value(v, &Value::Str(comm)));
    });
    let own = resource.processes.get(&pid).into_iter().flatten();
    for (k, v) in resource.common.iter().chain(own) {
        res.message(1, |kv| {
            kv.bytes(1, k.as_bytes());
            kv.message(2, |m| any_value(m, &Value::Str(v)));
        });
    }
}

/// A 16-byte id, not all zero, from the recording's start and the process.
fn profile_id(start_ns: u64, pid: u32) -> [u8; 16] {
    // FNV-1a over both, twice with different seeds.
    let h = |seed: u64| {
        let mut h = seed;
        for b in start_ns.to_le_bytes().iter().chain(&pid.to_le_bytes()) {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        h | 1
    };
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&h(0xcbf2_9ce4_8422_2325).to_le_bytes());
    id[8..].copy_from_slice(&h(0x8422_2325_cbf2_9ce4).to_le_bytes());
    id
}
