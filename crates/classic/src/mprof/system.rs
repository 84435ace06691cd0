//! Which functions of a module are system code (`profdev_mprof::system`'s
//! rule: declared in a file under one of its `SYSTEM_DIRS`), read from the
//! module's DWARF before the run, for the library to walk past.

use profdev_core::FileAddr;
use profdev_mprof::system::{is_system_file, SystemModule};
use profdev_symbolize::{ElfObject, SymOrigin};

/// The link-time ranges `[start, end)` of `obj`'s functions declared in a
/// system file, merged where they touch; empty without DWARF.
pub fn system_ranges(obj: &ElfObject) -> Vec<(u64, u64)> {
    if !obj.has_debug_info() {
        return Vec::new();
    }
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut last = None;
    for s in obj.symbols() {
        if s.origin != SymOrigin::Table || s.size == 0 || last == Some(s.addr) {
            continue;
        }
        last = Some(s.addr);
        let file = obj
            .function_decl(FileAddr(s.addr))
            .map(|d| d.0)
            .or_else(|| obj.frames(FileAddr(s.addr)).pop().and_then(|f| f.file));
        if !file.is_some_and(|f| is_system_file(&f)) {
            continue;
        }
        let (lo, hi) = (s.addr, s.addr + s.size);
        match out.last_mut() {
            Some(l) if lo <= l.1 => l.1 = l.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// The system code of each file of `paths` that is an ELF object (others
/// are left out), for [`encode`].
pub fn system_modules(paths: &[std::path::PathBuf]) -> Vec<SystemModule> {
    use std::os::unix::fs::MetadataExt;
    let mut out: Vec<SystemModule> = Vec::new();
    for p in paths {
        // As `ElfObject::open`, which follows no link at the path's end,
        // through the objects the report shares ([`super::objects`]).
        let opened = std::fs::symlink_metadata(p)
            .ok()
            .filter(|m| !m.file_type().is_symlink())
            .and_then(|_| std::fs::canonicalize(p).ok())
            .and_then(|real| super::objects::open(&real).ok());
        let (Ok(md), Some(obj)) = (std::fs::metadata(p), opened) else {
            continue;
        };
        if out.iter().any(|m| (m.dev, m.ino) == (md.dev(), md.ino())) {
            continue;
        }
        out.push(SystemModule {
            dev: md.dev(),
            ino: md.ino(),
            ranges: system_ranges(&obj),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_program_has_system_code_from_rusts_sources_only_if_it_has_dwarf() {
        let exe = std::env::current_exe().unwrap();
        let obj = ElfObject::open(&exe).unwrap();
        let r = system_ranges(&obj);
        assert!(r.windows(2).all(|w| w[0].1 < w[1].0), "sorted and disjoint");
        if !obj.has_debug_info() {
            assert!(r.is_empty());
        }
    }
}
