//! System code: the functions of a module whose source is not the
//! user's own (found by `profdev_classic::mprof::system_ranges`), which the library walks past to find
//! an allocation's site, as it walks past the allocator wrappers; and the
//! file that hands their ranges to the library ([`encode`], [`SYSTEM_ENV`]).
//!
//! **The rule.** A function is system code when the file it is declared
//! in (its DWARF `DW_AT_decl_file`, else the file of its first line) lies
//! under one of [`SYSTEM_DIRS`]: the C and C++ compilers' system include
//! directories (where `<vector>`'s templates live, instantiated in the
//! user's program) and Rust's standard library sources (`/rustc/…`).
//! Every other file is the user's own: a function of the program's, or of
//! a library's, own sources. A module without DWARF has no system code
//! (it cannot be told): its sites stay where the call was made.
//!
//! **The file** (the library reads it once, at its start; it is named by
//! [`SYSTEM_ENV`]): little-endian 64-bit words, the 16 bytes
//! `profdev-msys 1\0\0`, the number of modules, then per module its
//! device, inode, number of ranges, and its ranges as (start, end)
//! link-time address pairs, sorted and disjoint.

/// The environment variable naming the file of system code (see the module doc).
pub const SYSTEM_ENV: &str = "PROFDEV_MPROF_SYSTEM";

/// The file's first 16 bytes.
pub const MAGIC: &[u8; 16] = b"profdev-msys 1\0\0";

/// Where system code is declared: a file whose path starts with one of
/// these is not the user's own.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr/include/",
    "/usr/local/include/",
    "/usr/lib/gcc/",
    "/usr/lib64/gcc/",
    "/usr/lib/llvm-",
    "/usr/lib/clang/",
    "/rustc/",
];

/// Whether source file `path` is system code's (see [`SYSTEM_DIRS`]).
pub fn is_system_file(path: &str) -> bool {
    SYSTEM_DIRS.iter().any(|d| path.starts_with(d))
}

/// A module's system code for the file: its device, inode and ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SystemModule {
    /// The module file's device (`st_dev`).
    pub dev: u64,
    /// Its inode.
    pub ino: u64,
    /// Its ranges: link-time `[start, end)`, sorted and disjoint.
    pub ranges: Vec<(u64, u64)>,
}

/// The file's bytes for `modules` (those with ranges).
pub fn encode(modules: &[SystemModule]) -> Vec<u8> {
    let with: Vec<&SystemModule> = modules.iter().filter(|m| !m.ranges.is_empty()).collect();
    let mut words = vec![with.len() as u64];
    for m in with {
        words.extend([m.dev, m.ino, m.ranges.len() as u64]);
        words.extend(m.ranges.iter().flat_map(|&(lo, hi)| [lo, hi]));
    }
    let mut b = MAGIC.to_vec();
    b.extend(words.iter().flat_map(|w| w.to_le_bytes()));
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_files_and_the_encoding() {
        assert!(is_system_file("/usr/include/c++/12/bits/new_allocator.h"));
        assert!(is_system_file(
            "/usr/lib/gcc/x86_64-linux-gnu/12/include/stddef.h"
        ));
        assert!(!is_system_file("/home/u/src/include/util.h"));
        assert!(!is_system_file("/usr/src/app/main.c"));
        let m = SystemModule {
            dev: 1,
            ino: 2,
            ranges: vec![(0x10, 0x20)],
        };
        let b = encode(&[m, SystemModule::default()]);
        assert_eq!(&b[..16], MAGIC);
        let w: Vec<u64> = b[16..]
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(w, [1, 1, 2, 1, 0x10, 0x20]);
    }
}
