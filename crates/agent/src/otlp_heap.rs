//! The heap profiles of a cut (`--heap`) as an OTLP
//! `ExportProfilesServiceRequest` of opentelemetry-proto v1.10.0 of their
//! own, sent after the CPU one: a request's tables live in its one
//! dictionary, which formats' CPU encoder writes whole.
//!
//! One `ResourceProfiles` per process (`process.pid`,
//! `process.executable.name`, then the attributes of every profile: the
//! host, the `--label`s), one `ScopeProfiles` (scope `profdev`) holding
//! four `Profile`s, one per sample type (a v1.10 profile has one): Go's
//! `alloc_objects`/`count`, `alloc_space`/`bytes` (the interval's),
//! `inuse_objects`/`count`, `inuse_space`/`bytes` (at its end); period
//! type `space`/`bytes`, the sampling's mean as the period; the
//! interval's start and duration. One `Sample` per stack whose value is
//! not 0. The dictionary: a `Mapping` per module, a `Location` per
//! (module, address) with one `Line`, a `Function` per (name, file), a
//! `Stack` per allocation stack (the allocating frame first), each table
//! from its zero entry.
//!
//! The messages are those of `opentelemetry/proto/profiles/v1development/
//! profiles.proto` at v1.10.0 (field names, numbers and types; the fields
//! left out are not written); the tests decode them with the
//! opentelemetry-proto crate.

use crate::heap::HeapProfile;
use crate::Cut;
use prost::Message;
use std::collections::HashMap;

#[derive(Clone, PartialEq, Message)]
struct Request {
    #[prost(message, repeated, tag = "1")]
    resource_profiles: Vec<ResourceProfiles>,
    #[prost(message, optional, tag = "2")]
    dictionary: Option<Dictionary>,
}

#[derive(Clone, PartialEq, Message)]
struct ResourceProfiles {
    #[prost(message, optional, tag = "1")]
    resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    scope_profiles: Vec<ScopeProfiles>,
}

#[derive(Clone, PartialEq, Message)]
struct Resource {
    #[prost(message, repeated, tag = "1")]
    attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, Message)]
struct KeyValue {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(message, optional, tag = "2")]
    value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, Message)]
struct AnyValue {
    #[prost(oneof = "Value", tags = "1, 3")]
    value: Option<Value>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum Value {
    #[prost(string, tag = "1")]
    Str(String),
    #[prost(int64, tag = "3")]
    Int(i64),
}

#[derive(Clone, PartialEq, Message)]
struct Scope {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    version: String,
}

#[derive(Clone, PartialEq, Message)]
struct ScopeProfiles {
    #[prost(message, optional, tag = "1")]
    scope: Option<Scope>,
    #[prost(message, repeated, tag = "2")]
    profiles: Vec<Profile>,
}

#[derive(Clone, Copy, PartialEq, Message)]
struct ValueType {
    #[prost(int32, tag = "1")]
    type_strindex: i32,
    #[prost(int32, tag = "2")]
    unit_strindex: i32,
}

#[derive(Clone, PartialEq, Message)]
struct Profile {
    #[prost(message, optional, tag = "1")]
    sample_type: Option<ValueType>,
    #[prost(message, repeated, tag = "2")]
    samples: Vec<Sample>,
    #[prost(fixed64, tag = "3")]
    time_unix_nano: u64,
    #[prost(uint64, tag = "4")]
    duration_nano: u64,
    #[prost(message, optional, tag = "5")]
    period_type: Option<ValueType>,
    #[prost(int64, tag = "6")]
    period: i64,
    #[prost(bytes = "vec", tag = "7")]
    profile_id: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct Sample {
    #[prost(int32, tag = "1")]
    stack_index: i32,
    #[prost(int64, repeated, tag = "4")]
    values: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct Dictionary {
    #[prost(message, repeated, tag = "1")]
    mapping_table: Vec<Mapping>,
    #[prost(message, repeated, tag = "2")]
    location_table: Vec<Location>,
    #[prost(message, repeated, tag = "3")]
    function_table: Vec<Function>,
    #[prost(message, repeated, tag = "4")]
    link_table: Vec<Link>,
    #[prost(string, repeated, tag = "5")]
    string_table: Vec<String>,
    #[prost(message, repeated, tag = "6")]
    attribute_table: Vec<Attribute>,
    #[prost(message, repeated, tag = "7")]
    stack_table: Vec<Stack>,
}

#[derive(Clone, PartialEq, Message)]
struct Mapping {
    #[prost(int32, tag = "4")]
    filename_strindex: i32,
}

#[derive(Clone, PartialEq, Message)]
struct Location {
    #[prost(int32, tag = "1")]
    mapping_index: i32,
    #[prost(uint64, tag = "2")]
    address: u64,
    #[prost(message, repeated, tag = "3")]
    lines: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
struct Line {
    #[prost(int32, tag = "1")]
    function_index: i32,
    #[prost(int64, tag = "2")]
    line: i64,
}

#[derive(Clone, PartialEq, Message)]
struct Function {
    #[prost(int32, tag = "1")]
    name_strindex: i32,
    #[prost(int32, tag = "2")]
    system_name_strindex: i32,
    #[prost(int32, tag = "3")]
    filename_strindex: i32,
}

#[derive(Clone, PartialEq, Message)]
struct Link {}

#[derive(Clone, PartialEq, Message)]
struct Attribute {}

#[derive(Clone, PartialEq, Message)]
struct Stack {
    #[prost(int32, repeated, tag = "1")]
    location_indices: Vec<i32>,
}

/// A table whose entries are numbered as first met, from 1 (0 is the
/// zero entry).
struct Table<K> {
    index: HashMap<K, i32>,
}

impl<K: std::hash::Hash + Eq> Table<K> {
    fn new() -> Table<K> {
        Table {
            index: HashMap::new(),
        }
    }

    /// The index of `k`, and whether it is new.
    fn id(&mut self, k: K) -> (i32, bool) {
        let n = self.index.len() as i32 + 1;
        match self.index.entry(k) {
            std::collections::hash_map::Entry::Occupied(e) => (*e.get(), false),
            std::collections::hash_map::Entry::Vacant(e) => (*e.insert(n), true),
        }
    }
}

/// The dictionary being built.
struct Dict {
    d: Dictionary,
    strings: HashMap<String, i32>,
    mappings: Table<String>,
    locations: Table<(String, u64)>,
    functions: Table<(String, String)>,
}

impl Dict {
    fn new() -> Dict {
        let mut d = Dictionary::default();
        d.mapping_table.push(Mapping::default());
        d.location_table.push(Location::default());
        d.function_table.push(Function::default());
        d.link_table.push(Link {});
        d.string_table.push(String::new());
        d.attribute_table.push(Attribute {});
        d.stack_table.push(Stack::default());
        Dict {
            d,
            strings: HashMap::from([(String::new(), 0)]),
            mappings: Table::new(),
            locations: Table::new(),
            functions: Table::new(),
        }
    }

    fn s(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    /// The stack of `frames`, its locations, functions and mappings added.
    fn stack(&mut self, frames: &[profdev_formats::pprof::heap::HeapFrame]) -> i32 {
        let mut st = Stack::default();
        for f in frames {
            let (loc, new) = self.locations.id((f.module.clone(), f.address));
            if new {
                let mapping_index = match f.module.as_str() {
                    "" => 0,
                    m => {
                        let (i, new) = self.mappings.id(m.to_string());
                        if new {
                            let filename_strindex = self.s(m);
                            self.d.mapping_table.push(Mapping { filename_strindex });
                        }
                        i
                    }
                };
                let (function_index, new) = self.functions.id((f.function.clone(), f.file.clone()));
                if new {
                    let name = self.s(&f.function);
                    let file = self.s(&f.file);
                    self.d.function_table.push(Function {
                        name_strindex: name,
                        system_name_strindex: name,
                        filename_strindex: file,
                    });
                }
                self.d.location_table.push(Location {
                    mapping_index,
                    address: f.address,
                    lines: vec![Line {
                        function_index,
                        line: f.line.into(),
                    }],
                });
            }
            st.location_indices.push(loc);
        }
        self.d.stack_table.push(st);
        self.d.stack_table.len() as i32 - 1
    }
}

fn attr(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
    }
}

/// A sample type's value of a stack.
type SampleValue = fn(&profdev_formats::pprof::heap::HeapStack) -> u64;

/// The four profiles of `h`, its stacks added to `dict`.
fn profiles(h: &HeapProfile, cut: &Cut, dict: &mut Dict) -> Vec<Profile> {
    let stacks: Vec<i32> = h.stacks.iter().map(|s| dict.stack(&s.frames)).collect();
    let period_type = Some(ValueType {
        type_strindex: dict.s("space"),
        unit_strindex: dict.s("bytes"),
    });
    let kinds: [(&str, &str, SampleValue); 4] = [
        ("alloc_objects", "count", |s| s.alloc_objects),
        ("alloc_space", "bytes", |s| s.alloc_space),
        ("inuse_objects", "count", |s| s.inuse_objects),
        ("inuse_space", "bytes", |s| s.inuse_space),
    ];
    kinds
        .iter()
        .enumerate()
        .map(|(k, (ty, unit, value))| Profile {
            sample_type: Some(ValueType {
                type_strindex: dict.s(ty),
                unit_strindex: dict.s(unit),
            }),
            samples: h
                .stacks
                .iter()
                .zip(&stacks)
                .filter(|(s, _)| value(s) != 0)
                .map(|(s, &stack_index)| Sample {
                    stack_index,
                    values: vec![value(s) as i64],
                })
                .collect(),
            time_unix_nano: cut.start_ns,
            duration_nano: cut.end_ns.saturating_sub(cut.start_ns),
            period_type,
            period: h.sample_bytes as i64,
            profile_id: profile_id(cut, h.pid, k as u8),
        })
        .collect()
}

/// A 16-byte id, not all zero, of a process's `k`-th heap profile of `cut`.
fn profile_id(cut: &Cut, pid: u32, k: u8) -> Vec<u8> {
    let mut id = Vec::with_capacity(16);
    id.extend_from_slice(&(cut.start_ns ^ 0x6865_6170).to_le_bytes());
    id.extend_from_slice(&(u64::from(pid) << 8 | u64::from(k) | 1 << 63).to_le_bytes());
    id
}

/// The request of `cut`'s heap profiles, if it has any; `common` are the
/// attributes of every resource (the host, `--label`s).
pub fn request(cut: &Cut, common: &[(String, String)]) -> Option<Vec<u8>> {
    if cut.heap.is_empty() {
        return None;
    }
    let mut dict = Dict::new();
    let mut req = Request::default();
    for h in &cut.heap {
        let mut attributes = vec![
            attr("process.pid", Value::Int(h.pid.into())),
            attr("process.executable.name", Value::Str(h.comm.clone())),
        ];
        attributes.extend(common.iter().map(|(k, v)| attr(k, Value::Str(v.clone()))));
        req.resource_profiles.push(ResourceProfiles {
            resource: Some(Resource { attributes }),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(Scope {
                    name: profdev_formats::export::otlp::SCOPE.into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                profiles: profiles(h, cut, &mut dict),
            }],
        });
    }
    req.dictionary = Some(dict.d);
    Some(req.encode_to_vec())
}
