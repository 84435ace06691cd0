//! Reading a pprof heap profile back ([`heap_stacks`]): what `profdev
//! mprof --pprof` writes (raw protobuf), or any heap profile with Go's
//! sample types (`go tool pprof`'s, gzipped), as [`HeapStack`]s, so that
//! `profdev export svg` can draw it.
//!
//! The bytes are untrusted: a gzipped profile is inflated to at most
//! [`MAX_PROFILE`] bytes, every index into the string, location and
//! function tables is checked (a missing one names the frame by its
//! address, or `[unknown]`), and a sample's values are read only where
//! they exist. Memory stays proportional to the inflated bytes.

use super::heap::{HeapFrame, HeapStack};
use super::{Location, Profile};
use std::collections::HashMap;

/// The most bytes a gzipped profile is inflated to (1 GiB): a larger one
/// is refused rather than read.
pub const MAX_PROFILE: u64 = 1 << 30;

/// Why a file is not read as a heap profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Neither a protobuf pprof profile nor a gzipped one.
    #[error("not a pprof profile ({0})")]
    NotPprof(String),
    /// The file could not be read.
    #[error("cannot read it: {0}")]
    Read(String),
    /// Inflated, it would be larger than [`MAX_PROFILE`].
    #[error("the profile is larger than {MAX_PROFILE} bytes (inflated)")]
    TooLarge,
    /// A pprof profile without Go's heap sample types.
    #[error("a pprof profile without the sample types alloc_space or inuse_space: not a heap profile (its types: {0})")]
    NotHeap(String),
}

/// Whether `bytes` start as gzip does.
fn gzipped(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// The profile's bytes, inflated when gzipped (at most [`MAX_PROFILE`]).
fn inflate(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, DecodeError> {
    use std::io::Read;
    if !gzipped(bytes) {
        return Ok(std::borrow::Cow::Borrowed(bytes));
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes)
        .take(MAX_PROFILE + 1)
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::NotPprof(format!("gzip: {e}")))?;
    if out.len() as u64 > MAX_PROFILE {
        return Err(DecodeError::TooLarge);
    }
    Ok(std::borrow::Cow::Owned(out))
}

/// The stacks of a heap profile, each with its four counts (a type the
/// profile lacks counts 0; negative values count 0).
///
/// # Errors
///
/// Bytes that are no (gzipped) profile.proto, or a profile without
/// `alloc_space` or `inuse_space`.
pub fn heap_stacks(bytes: &[u8]) -> Result<Vec<HeapStack>, DecodeError> {
    use prost::Message;
    let bytes = inflate(bytes)?;
    let p = Profile::decode(&*bytes).map_err(|e| DecodeError::NotPprof(e.to_string()))?;
    let string = |i: i64| -> &str {
        usize::try_from(i)
            .ok()
            .and_then(|i| p.string_table.get(i))
            .map_or("", String::as_str)
    };
    let types: Vec<&str> = p.sample_type.iter().map(|t| string(t.r#type)).collect();
    let index = |name: &str| types.iter().position(|t| *t == name);
    let (alloc_space, inuse_space) = (index("alloc_space"), index("inuse_space"));
    if types.is_empty() {
        // Protobuf reads much as an empty message: a profile says what it measures.
        return Err(DecodeError::NotPprof("no sample types".into()));
    }
    if alloc_space.is_none() && inuse_space.is_none() {
        return Err(DecodeError::NotHeap(types.join(", ")));
    }
    let (alloc_objects, inuse_objects) = (index("alloc_objects"), index("inuse_objects"));
    let locations: HashMap<u64, &Location> = p.location.iter().map(|l| (l.id, l)).collect();
    let functions: HashMap<u64, &super::Function> = p.function.iter().map(|f| (f.id, f)).collect();
    let modules: HashMap<u64, &str> = p
        .mapping
        .iter()
        .map(|m| (m.id, string(m.filename)))
        .collect();
    let mut out = Vec::with_capacity(p.sample.len());
    for s in &p.sample {
        let value = |i: Option<usize>| {
            i.and_then(|i| s.value.get(i))
                .map_or(0, |&v| u64::try_from(v).unwrap_or(0))
        };
        let mut frames = Vec::new();
        for id in &s.location_id {
            let Some(l) = locations.get(id) else {
                frames.push(HeapFrame {
                    function: "[unknown]".into(),
                    ..HeapFrame::default()
                });
                continue;
            };
            let module = modules
                .get(&l.mapping_id)
                .copied()
                .unwrap_or("")
                .to_string();
            if l.line.is_empty() {
                frames.push(HeapFrame {
                    module: module.clone(),
                    address: l.address,
                    function: format!("0x{:x}", l.address),
                    ..HeapFrame::default()
                });
            }
            // pprof: the first line is the innermost (inlined) function,
            // the last the one it was inlined into.
            for line in &l.line {
                let f = functions.get(&line.function_id);
                let name = f.map_or("", |f| string(f.name));
                frames.push(HeapFrame {
                    module: module.clone(),
                    address: l.address,
                    function: if name.is_empty() {
                        format!("0x{:x}", l.address)
                    } else {
                        name.to_string()
                    },
                    file: f.map_or("", |f| string(f.filename)).to_string(),
                    line: u32::try_from(line.line).unwrap_or(0),
                });
            }
        }
        out.push(HeapStack {
            frames,
            alloc_objects: value(alloc_objects),
            alloc_space: value(alloc_space),
            inuse_objects: value(inuse_objects),
            inuse_space: value(inuse_space),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pprof::heap::{encode_stacks, HeapFrame, HeapStack};

    fn frame(f: &str, line: u32) -> HeapFrame {
        HeapFrame {
            module: "/bin/prog".into(),
            address: 0x1000 + u64::from(line),
            function: f.into(),
            file: "prog.c".into(),
            line,
        }
    }

    fn stacks() -> Vec<HeapStack> {
        vec![
            HeapStack {
                frames: vec![frame("leaf_alloc", 3), frame("build", 9), frame("main", 20)],
                alloc_objects: 100,
                alloc_space: 409_600,
                inuse_objects: 1,
                inuse_space: 4096,
            },
            HeapStack {
                frames: vec![
                    frame("leaf_alloc", 3),
                    frame("other", 14),
                    frame("main", 21),
                ],
                alloc_objects: 50,
                alloc_space: 50_000,
                inuse_objects: 0,
                inuse_space: 0,
            },
        ]
    }

    #[test]
    fn what_mprof_writes_reads_back() {
        let want = stacks();
        assert_eq!(heap_stacks(&encode_stacks(&want)).unwrap(), want);
    }

    #[test]
    fn a_gzipped_profile_reads_alike() {
        use std::io::Write;
        let raw = encode_stacks(&stacks());
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&raw).unwrap();
        let gz = z.finish().unwrap();
        assert_eq!(heap_stacks(&gz).unwrap(), stacks());
    }

    #[test]
    fn a_cpu_profile_or_garbage_is_refused_in_a_sentence() {
        let cpu = crate::pprof::Profile {
            sample_type: vec![crate::pprof::ValueType { r#type: 1, unit: 2 }],
            string_table: vec!["".into(), "samples".into(), "count".into()],
            ..Default::default()
        };
        let bytes = prost::Message::encode_to_vec(&cpu);
        let e = heap_stacks(&bytes).unwrap_err();
        assert_eq!(e, DecodeError::NotHeap("samples".into()));
        assert!(e.to_string().contains("not a heap profile"), "{e}");
        assert!(matches!(
            heap_stacks(b"\xff\xff\xff\xff not protobuf"),
            Err(DecodeError::NotPprof(_))
        ));
        assert!(matches!(
            heap_stacks(&[0x1f, 0x8b, 8, 0, 0]),
            Err(DecodeError::NotPprof(_))
        ));
        // An empty file decodes as an empty message: no profile either.
        assert!(matches!(heap_stacks(b""), Err(DecodeError::NotPprof(_))));
    }

    #[test]
    fn indices_out_of_range_name_frames_rather_than_fail() {
        let p = crate::pprof::Profile {
            sample_type: vec![crate::pprof::ValueType { r#type: 1, unit: 2 }],
            sample: vec![crate::pprof::Sample {
                location_id: vec![7, 99],
                value: vec![-5],
                label: vec![],
            }],
            location: vec![crate::pprof::Location {
                id: 7,
                mapping_id: 3,
                address: 0xabc,
                line: vec![crate::pprof::Line {
                    function_id: 42,
                    line: -1,
                    column: 0,
                }],
                is_folded: false,
            }],
            string_table: vec!["".into(), "alloc_space".into(), "bytes".into()],
            ..Default::default()
        };
        let got = heap_stacks(&prost::Message::encode_to_vec(&p)).unwrap();
        assert_eq!(got.len(), 1);
        let names: Vec<&str> = got[0].frames.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names, ["0xabc", "[unknown]"]);
        assert_eq!(got[0].alloc_space, 0, "a negative value counts 0");
    }
}
