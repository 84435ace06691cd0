#![no_main]
// The body is shared with the workspace's replay test
// (crates/cli/tests/fuzz_replay.rs): see profdev_mprof::fuzzing::heap_scan.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    profdev_mprof::fuzzing::heap_scan(data);
});
