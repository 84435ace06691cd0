//! Entry points of the fuzz targets in `fuzz/` (cargo fuzz), shared with
//! the replay test that runs the committed corpus under `cargo test`.

/// `fuzz_targets/agent_cut.rs`: a spool file (`--spool DIR`). What reads
/// writes back to bytes that read the same.
pub fn agent_cut(data: &[u8]) {
    if let Ok(cut) = crate::disk::decode(data) {
        let bytes = crate::disk::encode(&cut);
        let again = crate::disk::decode(&bytes).expect("what was written reads");
        assert_eq!(crate::disk::encode(&again), bytes);
    }
}
