//! Entry points of the fuzz targets in `fuzz/` that read this crate's
//! formats, shared with the replay test (`crates/cli/tests/fuzz_replay.rs`).

use crate::prf::Prf;

/// `fuzz_targets/prf.rs`: a `.prf` record file. What parses encodes back
/// to the same bytes and parses the same.
pub fn prf(data: &[u8]) {
    let Ok(p) = Prf::parse(data, "fuzz") else {
        return;
    };
    let again = p.encode().expect("a parsed .prf encodes");
    assert_eq!(
        Prf::parse(&again, "again").as_ref(),
        Ok(&p),
        ".prf round trip"
    );
    let mut twice = p.clone();
    twice
        .merge(&p, "fuzz")
        .expect("a record merges with itself");
    assert_eq!(twice.insns.len(), p.insns.len());
}

/// `fuzz_targets/coverage_cache.rs`: a coverage cache file
/// ([`crate::cache`]), its key taken from its own header so that the
/// fuzzer reaches past the key check. What reads writes back to bytes
/// that read the same.
pub fn coverage_cache(data: &[u8]) {
    let magic = crate::cache::MAGIC.len();
    let Some(k) = data.get(magic..magic + 32) else {
        return;
    };
    let key = crate::cache::Key(k.try_into().expect("32 bytes"));
    let Ok(e) = crate::cache::read(data, &key) else {
        return;
    };
    let again = crate::cache::write(&key, &e.plan, e.encoded.as_ref().map(|(o, x)| (*o, x)));
    let back = crate::cache::read(&again, &key).expect("a written cache file reads");
    assert_eq!(format!("{:?}", back.plan), format!("{:?}", e.plan));
    assert_eq!(format!("{:?}", back.encoded), format!("{:?}", e.encoded));
}
