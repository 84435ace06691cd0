#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(o) = profdev_symbolize::ElfObject::parse(data, std::path::Path::new("fuzz")) {
        let _ = o.frames(profdev_core::FileAddr(0x1000));
        let _ = o.file_addr_of_offset(0x1000);
    }
    let _ = profdev_symbolize::KernelSymbols::from_vmlinux(data, "fuzz");
});
