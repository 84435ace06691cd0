//! A heap profile in pprof's format (`profile.proto`, written uncompressed:
//! pprof reads raw and gzipped protobuf alike), for `mprof --pprof FILE`.
//!
//! Sample types, in Go's heap-profile order: `alloc_objects/count`,
//! `alloc_space/bytes`, `inuse_objects/count`, `inuse_space/bytes` (the
//! default). One sample per allocating site, whose one location is the
//! site's return address in its module, already symbolized (function,
//! file, line), so `go tool pprof -top FILE` needs no binary.

use std::collections::HashMap;

/// One site, symbolized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PprofSite {
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

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        key(out, field, 0);
        varint(out, v);
    }
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn packed(out: &mut Vec<u8>, field: u32, vs: &[u64]) {
    let mut body = Vec::new();
    for &v in vs {
        varint(&mut body, v);
    }
    bytes(out, field, &body);
}

struct Strings {
    table: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as u64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The encoded profile.
pub fn encode(sites: &[PprofSite]) -> Vec<u8> {
    let mut s = Strings {
        table: vec![String::new()],
        index: HashMap::from([(String::new(), 0)]),
    };
    let mut out = Vec::new();
    for (t, u) in [
        ("alloc_objects", "count"),
        ("alloc_space", "bytes"),
        ("inuse_objects", "count"),
        ("inuse_space", "bytes"),
    ] {
        let mut vt = Vec::new();
        uint(&mut vt, 1, s.id(t));
        uint(&mut vt, 2, s.id(u));
        bytes(&mut out, 1, &vt);
    }
    let mut mappings: Vec<String> = Vec::new();
    let mut functions: Vec<(String, String)> = Vec::new();
    for (i, site) in sites.iter().enumerate() {
        let loc_id = i as u64 + 1;
        let mut sample = Vec::new();
        packed(&mut sample, 1, &[loc_id]);
        packed(
            &mut sample,
            2,
            &[
                site.alloc_objects,
                site.alloc_space,
                site.inuse_objects,
                site.inuse_space,
            ],
        );
        bytes(&mut out, 2, &sample);
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
        let mut loc = Vec::new();
        uint(&mut loc, 1, loc_id);
        uint(&mut loc, 2, mapping_id);
        uint(&mut loc, 3, site.address);
        let mut line = Vec::new();
        uint(&mut line, 1, function_id);
        uint(&mut line, 2, u64::from(site.line));
        bytes(&mut loc, 4, &line);
        bytes(&mut out, 4, &loc);
    }
    for (i, m) in mappings.iter().enumerate() {
        let mut mp = Vec::new();
        uint(&mut mp, 1, i as u64 + 1);
        uint(&mut mp, 5, s.id(m));
        for field in 7..=9 {
            uint(&mut mp, field, 1); // has_functions, filenames, line numbers
        }
        bytes(&mut out, 3, &mp);
    }
    for (i, (name, file)) in functions.iter().enumerate() {
        let mut f = Vec::new();
        uint(&mut f, 1, i as u64 + 1);
        uint(&mut f, 2, s.id(name));
        uint(&mut f, 3, s.id(name));
        uint(&mut f, 4, s.id(file));
        bytes(&mut out, 5, &f);
    }
    let default = s.id("inuse_space");
    for st in &s.table {
        bytes(&mut out, 6, st.as_bytes());
    }
    uint(&mut out, 14, default);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_layout() {
        let mut v = Vec::new();
        varint(&mut v, 300);
        assert_eq!(v, [0xac, 0x02]);
        let p = encode(&[PprofSite {
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
