//! pprof's `profile.proto` (github.com/google/pprof, `proto/profile.proto`),
//! what `go tool pprof`, Pyroscope and Parca read: the one protobuf encoder
//! of every pprof file profdev writes.
//!
//! The messages are written out here as prost structs (no protoc at build
//! time), field for field as profile.proto has them; prost encodes them
//! (fields in tag order, zeros left out, repeated numbers packed, as
//! proto3 does). Two writers fill them: [`crate::export::pprof`] (a
//! recording's CPU profile, gzipped) and [`heap`] (`mprof --pprof`'s heap
//! profile, not compressed). `Strings` builds a string table (OTLP's
//! dictionary uses it too).

pub mod decode;
pub mod heap;

/// A whole profile (`Profile`). The string table's entry 0 must be "".
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    /// What each sample's values measure.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// The mapped objects (ids from 1).
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// The locations (ids from 1).
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// The functions (ids from 1).
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string the profile names, by index.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Frames to drop (a regular expression's string index).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Frames to keep (a regular expression's string index).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// When the profile was taken, Unix ns.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long it covers, ns.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What `period` counts.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The sampling period.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type shown by default (a string index).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// A value's type and unit (`ValueType`), string indices.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct ValueType {
    /// `cpu`, `alloc_space`, ...
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// `nanoseconds`, `bytes`, `count`, ...
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// One sample (`Sample`).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Sample {
    /// Its stack's location ids, innermost first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Its labels.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A sample's label (`Label`).
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Label {
    /// Its key (a string index).
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// A string value (a string index), or
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// a number,
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// with its unit (a string index).
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// A mapped object (`Mapping`).
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Mapping {
    /// Its id, from 1.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its start address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// Its end address (exclusive).
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// The file offset mapped at `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// Its file's name (a string index).
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// Its build id (a string index).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Its locations name their functions,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// their files,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// their lines,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// and their inlined frames.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// A place in the code (`Location`).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Location {
    /// Its id, from 1.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its mapping's id, 0 for none.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Its address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Its source lines, innermost (inlined) first.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Whether frames were folded into it.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// A location's function and line (`Line`).
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// The line, 0 if unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// The column, 0 if unknown.
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// A function (`Function`).
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Function {
    /// Its id, from 1.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its name (a string index),
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// as the system knows it (a string index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Its source file (a string index).
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// Its first line.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

impl Profile {
    /// The encoded (uncompressed) profile.
    pub fn encode(&self) -> Vec<u8> {
        prost::Message::encode_to_vec(self)
    }
}

/// A profile's string table: index 0 is "", each string once.
#[derive(Default)]
pub(crate) struct Strings {
    /// The strings, by index (0 is "").
    pub(crate) list: Vec<String>,
    index: std::collections::HashMap<String, u64>,
}

impl Strings {
    pub(crate) fn new() -> Strings {
        let mut s = Strings::default();
        s.id("");
        s
    }
    pub(crate) fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u64;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
    /// `id` as profile.proto's string index (an int64).
    pub(crate) fn ix(&mut self, s: &str) -> i64 {
        self.id(s) as i64
    }
}

/// A `ValueType` of two strings.
pub(crate) fn value_type(s: &mut Strings, ty: &str, unit: &str) -> ValueType {
    ValueType {
        r#type: s.ix(ty),
        unit: s.ix(unit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_in_order_zeros_left_out() {
        let p = Profile {
            sample_type: vec![ValueType { r#type: 1, unit: 0 }],
            sample: vec![Sample {
                location_id: vec![300],
                value: vec![0, 1],
                label: vec![],
            }],
            string_table: vec![String::new(), "a".into()],
            ..Profile::default()
        };
        assert_eq!(
            p.encode(),
            [
                0x0a, 0x02, 0x08, 0x01, // sample_type {type 1}
                0x12, 0x08, 0x0a, 0x02, 0xac, 0x02, 0x12, 0x02, 0x00, 0x01, // packed
                0x32, 0x00, 0x32, 0x01, b'a', // the string table
            ]
        );
    }
}
