//! A heap profile in pprof's format (`profile.proto`, written uncompressed:
//! pprof reads raw and gzipped protobuf alike), for `mprof --pprof FILE`.
//!
//! Sample types, in Go's heap-profile order: `alloc_objects/count`,
//! `alloc_space/bytes`, `inuse_objects/count`, `inuse_space/bytes` (the
//! default). One sample per allocating site ([`encode`]), whose one
//! location is the site's return address in its module, or per whole
//! stack ([`encode_stacks`]), its locations the site then its callers;
//! each already symbolized (function, file, line), so `go tool pprof
//! -top FILE` needs no binary. The same stacks as folded lines for flame
//! graphs: [`folded`].

use super::{value_type, Function, Line, Location, Mapping, Profile, Sample, Strings};

/// One site, symbolized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapSite {
    /// Its module's path.
    pub module: String,
    /// Its return address in the module's ELF address space.
    pub address: u64,
    /// Its function's name.
    pub function: String,
    /// Its source file, if known.
    pub file: String,
    /// Its line, 0 if unknown.
    pub line: u32,
    /// Blocks and bytes allocated there.
    pub alloc_objects: u64,
    /// See `alloc_objects`.
    pub alloc_space: u64,
    /// Blocks and bytes still allocated at the end.
    pub inuse_objects: u64,
    /// See `inuse_objects`.
    pub inuse_space: u64,
}

/// A frame of a stack, symbolized.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeapFrame {
    /// Its module's path.
    pub module: String,
    /// Its address in the module's ELF address space (a return address
    /// minus one: the call).
    pub address: u64,
    /// Its function's name.
    pub function: String,
    /// Its source file, if known.
    pub file: String,
    /// Its line, 0 if unknown.
    pub line: u32,
}

/// One allocation stack, symbolized, with its counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeapStack {
    /// Its frames, the allocating site first, then its callers.
    pub frames: Vec<HeapFrame>,
    /// Blocks and bytes allocated with this stack.
    pub alloc_objects: u64,
    /// See `alloc_objects`.
    pub alloc_space: u64,
    /// Blocks and bytes still allocated at the end.
    pub inuse_objects: u64,
    /// See `inuse_objects`.
    pub inuse_space: u64,
}

/// The stacks as folded lines, `root;…;caller;site BYTES` (bytes
/// allocated, or with `inuse` bytes live at the end), one per distinct
/// line of function names, sorted; stacks of 0 bytes left out.
pub fn folded(stacks: &[HeapStack], inuse: bool) -> String {
    let mut lines: std::collections::BTreeMap<String, u64> = Default::default();
    for st in stacks {
        let v = if inuse {
            st.inuse_space
        } else {
            st.alloc_space
        };
        if v == 0 {
            continue;
        }
        let names: Vec<&str> = st
            .frames
            .iter()
            .rev()
            .map(|f| f.function.as_str())
            .collect();
        // `;` separates frames and a space the count: neither in a name.
        let key = names.join(";").replace(' ', "_");
        *lines.entry(key).or_default() += v;
    }
    lines.iter().map(|(k, v)| format!("{k} {v}\n")).collect()
}

/// The encoded profile, one sample per site.
pub fn encode(sites: &[HeapSite]) -> Vec<u8> {
    let stacks: Vec<HeapStack> = sites
        .iter()
        .map(|s| HeapStack {
            frames: vec![HeapFrame {
                module: s.module.clone(),
                address: s.address,
                function: s.function.clone(),
                file: s.file.clone(),
                line: s.line,
            }],
            alloc_objects: s.alloc_objects,
            alloc_space: s.alloc_space,
            inuse_objects: s.inuse_objects,
            inuse_space: s.inuse_space,
        })
        .collect();
    encode_stacks(&stacks)
}

/// The encoded profile, one sample per stack (a location per distinct
/// module and address).
pub fn encode_stacks(stacks: &[HeapStack]) -> Vec<u8> {
    let mut s = Strings::new();
    let mut out = Profile::default();
    for (t, u) in [
        ("alloc_objects", "count"),
        ("alloc_space", "bytes"),
        ("inuse_objects", "count"),
        ("inuse_space", "bytes"),
    ] {
        out.sample_type.push(value_type(&mut s, t, u));
    }
    let mut mappings: Vec<String> = Vec::new();
    let mut functions: Vec<(String, String)> = Vec::new();
    let mut locations: std::collections::HashMap<(String, u64), u64> = Default::default();
    for st in stacks {
        let mut location_id = Vec::with_capacity(st.frames.len());
        for site in &st.frames {
            let key = (site.module.clone(), site.address);
            if let Some(&id) = locations.get(&key) {
                location_id.push(id);
                continue;
            }
            let loc_id = out.location.len() as u64 + 1;
            locations.insert(key, loc_id);
            location_id.push(loc_id);
            add_location(&mut out, &mut mappings, &mut functions, site, loc_id);
        }
        out.sample.push(Sample {
            location_id,
            value: [
                st.alloc_objects,
                st.alloc_space,
                st.inuse_objects,
                st.inuse_space,
            ]
            .map(|v| v as i64)
            .to_vec(),
            label: Vec::new(),
        });
    }
    finish(out, s, &mappings, &functions)
}

/// A location for `site`, its mapping and function numbered as first met.
fn add_location(
    out: &mut Profile,
    mappings: &mut Vec<String>,
    functions: &mut Vec<(String, String)>,
    site: &HeapFrame,
    loc_id: u64,
) {
    let mapping_id = match mappings.iter().position(|m| *m == site.module) {
        Some(p) => p + 1,
        None => {
            mappings.push(site.module.clone());
            mappings.len()
        }
    } as u64;
    let f = (site.function.clone(), site.file.clone());
    let function_id = match functions.iter().position(|x| *x == f) {
        Some(p) => p + 1,
        None => {
            functions.push(f);
            functions.len()
        }
    } as u64;
    out.location.push(Location {
        id: loc_id,
        mapping_id,
        address: site.address,
        line: vec![Line {
            function_id,
            line: site.line.into(),
            column: 0,
        }],
        is_folded: false,
    });
}

/// The mappings, functions and strings, encoded.
fn finish(
    mut out: Profile,
    mut s: Strings,
    mappings: &[String],
    functions: &[(String, String)],
) -> Vec<u8> {
    for (i, m) in mappings.iter().enumerate() {
        out.mapping.push(Mapping {
            id: i as u64 + 1,
            filename: s.ix(m),
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            ..Mapping::default()
        });
    }
    for (i, (name, file)) in functions.iter().enumerate() {
        out.function.push(Function {
            id: i as u64 + 1,
            name: s.ix(name),
            system_name: s.ix(name),
            filename: s.ix(file),
            start_line: 0,
        });
    }
    out.default_sample_type = s.ix("inuse_space");
    out.string_table = s.list;
    out.encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_share_locations_and_fold_root_first() {
        let f = |function: &str, address| HeapFrame {
            module: "/x".into(),
            address,
            function: function.into(),
            ..Default::default()
        };
        let st = |frames: Vec<HeapFrame>, alloc_space, inuse_space| HeapStack {
            frames,
            alloc_space,
            inuse_space,
            ..Default::default()
        };
        let stacks = [
            st(
                vec![f("leaf_alloc", 0x10), f("build", 0x20), f("main", 0x30)],
                409600,
                0,
            ),
            st(
                vec![f("leaf_alloc", 0x10), f("other", 0x40), f("main", 0x31)],
                50000,
                50000,
            ),
            st(
                vec![f("leaf_alloc", 0x10), f("other", 0x41), f("main", 0x31)],
                1,
                0,
            ),
        ];
        assert_eq!(
            folded(&stacks, false),
            "main;build;leaf_alloc 409600\nmain;other;leaf_alloc 50001\n"
        );
        assert_eq!(folded(&stacks, true), "main;other;leaf_alloc 50000\n");
        let p = encode_stacks(&stacks);
        for s in ["leaf_alloc", "build", "other", "alloc_space", "inuse_space"] {
            assert!(p.windows(s.len()).any(|w| w == s.as_bytes()), "{s}");
        }
    }

    #[test]
    fn layout() {
        let p = encode(&[HeapSite {
            module: "/x".into(),
            address: 0x1139,
            function: "main".into(),
            file: "x.c".into(),
            line: 23,
            alloc_objects: 1000,
            alloc_space: 100000,
            inuse_objects: 400,
            inuse_space: 40000,
        }]);
        // The first sample type: field 1, length 4, type "alloc_objects"
        // (string 1), unit "count" (string 2).
        assert_eq!(&p[..6], &[0x0a, 0x04, 0x08, 0x01, 0x10, 0x02]);
        for s in ["alloc_objects", "inuse_space", "main", "x.c", "/x"] {
            assert!(p.windows(s.len()).any(|w| w == s.as_bytes()), "{s}");
        }
    }
}
