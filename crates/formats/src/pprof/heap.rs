//! A heap profile in pprof's format (`profile.proto`, written uncompressed:
//! pprof reads raw and gzipped protobuf alike), for `mprof --pprof FILE`.
//!
//! Sample types, in Go's heap-profile order: `alloc_objects/count`,
//! `alloc_space/bytes`, `inuse_objects/count`, `inuse_space/bytes` (the
//! default). One sample per allocating site, whose one location is the
//! site's return address in its module, already symbolized (function,
//! file, line), so `go tool pprof -top FILE` needs no binary.

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

/// The encoded profile.
pub fn encode(sites: &[HeapSite]) -> Vec<u8> {
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
    for (i, site) in sites.iter().enumerate() {
        let loc_id = i as u64 + 1;
        out.sample.push(Sample {
            location_id: vec![loc_id],
            value: [
                site.alloc_objects,
                site.alloc_space,
                site.inuse_objects,
                site.inuse_space,
            ]
            .map(|v| v as i64)
            .to_vec(),
            label: Vec::new(),
        });
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
