//! pprof's `profile.proto` (github.com/google/pprof, `proto/profile.proto`),
//! what `go tool pprof`, Pyroscope and Parca read: the one protobuf encoder
//! of every pprof file profdev writes.
//!
//! Two writers build profiles with it: [`crate::export::pprof`] (a
//! recording's CPU profile, gzipped) and [`heap`] (`mprof --pprof`'s heap
//! profile). [`crate::export::otlp`] uses the same wire encoder. The
//! encoding is written here (a few wire types, no generated code):
//! varints, length-delimited bytes and packed repeated varints; an
//! integer field that is zero is left out, as proto3 does.

pub mod heap;

/// Protobuf wire encoding of the few things profile.proto needs.
#[derive(Default)]
pub(crate) struct Pb(pub(crate) Vec<u8>);

impl Pb {
    pub(crate) fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    pub(crate) fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }
    /// An int64/uint64/bool field (omitted when zero, as proto3 does).
    pub(crate) fn int(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, 0);
            self.varint(v);
        }
    }
    pub(crate) fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    /// A packed repeated varint field (omitted when empty).
    pub(crate) fn packed(&mut self, field: u32, vs: impl Iterator<Item = u64>) {
        let mut inner = Pb::default();
        for v in vs {
            inner.varint(v);
        }
        if !inner.0.is_empty() {
            self.bytes(field, &inner.0);
        }
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
}

/// A `ValueType` message: type and unit, as string ids.
pub(crate) fn value_type(s: &mut Strings, ty: &str, unit: &str) -> Vec<u8> {
    let mut p = Pb::default();
    p.int(1, s.id(ty));
    p.int(2, s.id(unit));
    p.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fields() {
        let mut p = Pb::default();
        p.varint(300);
        assert_eq!(p.0, [0xac, 0x02]);
        let mut p = Pb::default();
        p.int(1, 0);
        p.packed(2, [].into_iter());
        assert!(p.0.is_empty());
        p.packed(2, [0, 1].into_iter());
        assert_eq!(p.0, [0x12, 0x02, 0x00, 0x01]);
    }
}
