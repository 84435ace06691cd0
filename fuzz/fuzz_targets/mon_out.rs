#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = profdev_formats::mon_out::MonOut::parse(data) {
        // What parses writes back to the same length (padding aside, the same bytes).
        assert_eq!(m.to_bytes().map(|b| b.len()), Ok(data.len()));
    }
});
