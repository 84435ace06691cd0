#![no_main]
use libfuzzer_sys::fuzz_target;
use profdev_formats::gmon::{self, AddrWidth, ByteOrder, Target};

fuzz_target!(|data: &[u8]| {
    let be32 = Target { order: ByteOrder::Big, addr_width: AddrWidth::W32 };
    for target in [Target::X86_64, be32] {
        if let Ok(d) = gmon::parse(data, target) {
            // What parses must encode again in its own layout.
            let _ = gmon::write(&d.gmon, d.format, target);
        }
    }
});
