#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(k) = profdev_symbolize::KernelSymbols::from_text(data, "fuzz") {
        let _ = k.text_symbols();
        let _ = k.lookup(0xffffffff81000000);
    }
});
