#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(k) = profdev_formats::kpdata::Kpdata::parse(data) {
        let _ = (k.total(), k.outside(), k.bucket_size(), k.microseconds_per_tick());
    }
});
