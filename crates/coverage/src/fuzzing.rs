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
