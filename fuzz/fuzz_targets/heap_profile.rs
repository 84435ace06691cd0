#![no_main]
// The body is shared with the workspace's replay test
// (crates/cli/tests/fuzz_replay.rs): see profdev_formats::fuzzing::heap_profile.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    profdev_formats::fuzzing::heap_profile(data);
});
