//! A heap profile in pprof's format (`profile.proto`, written uncompressed:
//! pprof reads raw and gzipped protobuf alike), for `mprof --pprof FILE`.
//!
//! Sample types, in Go's heap-profile order: `alloc_objects/count`,
//! `alloc_space/bytes`, `inuse_objects/count`, `inuse_space/bytes` (the
//! default). One sample per allocating site, whose one location is the
//! site's return address in its module, already symbolized (function,
//! file, line), so `go tool pprof -top FILE` needs no binary.

use super::{Pb, Strings};

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
    let mut out = Pb::default();
    for (t, u) in [
        ("alloc_objects", "count"),
        ("alloc_space", "bytes"),
        ("inuse_objects", "count"),
        ("inuse_space", "bytes"),
    ] {
        out.bytes(1, &super::value_type(&mut s, t, u));
    }
    let mut mappings: Vec<String> = Vec::new();
    let mut functions: Vec<(String, String)> = Vec::new();
    for (i, site) in sites.iter().enumerate() {
        let loc_id = i as u64 + 1;
        let mut sample = Pb::default();
        sample.packed(1, [loc_id].into_iter());
        sample.packed(
            2,
            [
                site.alloc_objects,
                site.alloc_space,
                site.inuse_objects,
                site.inuse_space,
            ]
            .into_iter(),
        );
        out.bytes(2, &sample.0);
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
        let mut loc = Pb::default();
        loc.int(1, loc_id);
        loc.int(2, mapping_id);
        loc.int(3, site.address);
        let mut line = Pb::default();
        line.int(1, function_id);
        line.int(2, u64::from(site.line));
        loc.bytes(4, &line.0);
        out.bytes(4, &loc.0);
    }
    for (i, m) in mappings.iter().enumerate() {
        let mut mp = Pb::default();
        mp.int(1, i as u64 + 1);
        mp.int(5, s.id(m));
        for field in 7..=9 {
            mp.int(field, 1); // has_functions, filenames, line numbers
        }
        out.bytes(3, &mp.0);
    }
    for (i, (name, file)) in functions.iter().enumerate() {
        let mut f = Pb::default();
        f.int(1, i as u64 + 1);
        f.int(2, s.id(name));
        f.int(3, s.id(name));
        f.int(4, s.id(file));
        out.bytes(5, &f.0);
    }
    let default = s.id("inuse_space");
    for st in &s.list {
        out.bytes(6, st.as_bytes());
    }
    out.int(14, default);
    out.0
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
