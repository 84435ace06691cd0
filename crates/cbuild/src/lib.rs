//! The build scripts' C helper, shared by profdev-coverage (its runtime,
//! `c/covrt.c`) and profdev-mprof (its interposer, `c/mprof.c` and
//! `c/attach.c`): both compile C sources into one shared object that the
//! crate embeds with `include_bytes!` and writes out at run time.
//!
//! A build-dependency only: it runs inside `build.rs`, prints cargo's
//! `rerun-if-*` lines, and panics (failing the build) with one sentence
//! naming the compiler and the sources.
//!
//! # Synopsis
//!
//! ```no_run
//! // build.rs
//! let so = profdev_cbuild::SharedObject {
//!     file: "libprofdev_cov.so",
//!     sources: &["c/covrt.c"],
//!     libs: &["-ldl", "-lpthread"],
//!     what: "the coverage runtime",
//!     sources_named: "crates/coverage/c/covrt.c",
//! }
//! .build();
//! assert!(so.ends_with("libprofdev_cov.so"));
//! ```
//!
//! # Description
//!
//! The C compiler is `$CC`, else `cc`, run once as `cc -O2 -g -fPIC
//! -shared -fvisibility=hidden -ftls-model=initial-exec -Wall -Wextra -I
//! $OUT_DIR/include -o $OUT_DIR/FILE SOURCES LIBS` (no `CFLAGS`: the
//! object is the same whatever the environment sets, only `CC` changes
//! it).
//!
//! The include directory holds the headers the runtimes share, written
//! there from this crate's `c/`: `sigsafe_out.h`, the one
//! async-signal-safe output buffer (write(2) of strings and of decimal
//! and hexadecimal numbers) through which both write their reports.
//!
//! [`source_digest`] hashes a crate's source trees (paths and contents,
//! in path order) into a stable 64-bit id for on-disk cache keys.
//!
//! A maintained crate was considered: `cc` builds static archives and
//! adds its own flags and `CFLAGS`, so the shared objects would no longer
//! be the ones these two crates have always embedded.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;

/// The flags every shared object is compiled with, before `-o`.
const FLAGS: [&str; 8] = [
    "-O2",
    "-g",
    "-fPIC",
    "-shared",
    "-fvisibility=hidden",
    "-ftls-model=initial-exec",
    "-Wall",
    "-Wextra",
];

/// The headers every shared object may include (`#include
/// "sigsafe_out.h"`): name and contents.
const HEADERS: [(&str, &str); 1] = [("sigsafe_out.h", include_str!("../c/sigsafe_out.h"))];

/// A digest of the shared headers every runtime built here includes: a
/// build script that keys a cache by its runtime's sources adds this, so
/// a change of a header is a change of the runtime.
pub fn headers_digest() -> u64 {
    use std::hash::Hasher;
    let mut h = std::hash::DefaultHasher::new();
    for (name, text) in HEADERS {
        h.write(name.as_bytes());
        h.write(text.as_bytes());
    }
    h.finish()
}

/// One shared object compiled from C sources into `$OUT_DIR`.
#[derive(Debug, Clone, Copy)]
pub struct SharedObject<'a> {
    /// The file name in `$OUT_DIR` (`libprofdev_cov.so`).
    pub file: &'a str,
    /// The C sources, relative to the crate (cargo runs `build.rs` there).
    pub sources: &'a [&'a str],
    /// Linker arguments after the sources (`-ldl`, `-lpthread`).
    pub libs: &'a [&'a str],
    /// What is built, for the message when the compiler cannot run ("the
    /// coverage runtime").
    pub what: &'a str,
    /// The sources as the message names them when the compiler fails
    /// ("crates/coverage/c/covrt.c").
    pub sources_named: &'a str,
}

impl SharedObject<'_> {
    /// Compile: print the `rerun-if-changed` of every source and the
    /// `rerun-if-env-changed` of `CC`, write the shared headers into
    /// `$OUT_DIR/include`, run the compiler, and return the object's
    /// path. Panics when the compiler cannot run or fails.
    pub fn build(&self) -> PathBuf {
        for src in self.sources {
            println!("cargo:rerun-if-changed={src}");
        }
        println!("cargo:rerun-if-env-changed=CC");
        let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
        let so = out.join(self.file);
        let include = out.join("include");
        std::fs::create_dir_all(&include).expect("OUT_DIR is writable");
        for (name, text) in HEADERS {
            std::fs::write(include.join(name), text).expect("OUT_DIR is writable");
        }
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
        let status = Command::new(&cc)
            .args(FLAGS)
            .arg("-I")
            .arg(&include)
            .arg("-o")
            .arg(&so)
            .args(self.sources)
            .args(self.libs)
            .status()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run the C compiler {cc:?} to build {}: {e}; install cc (Debian: \
                     build-essential) or set CC",
                    self.what
                )
            });
        assert!(
            status.success(),
            "the C compiler {cc:?} failed to build {}",
            self.sources_named
        );
        so
    }
}

/// A digest of every file under the directories `dirs` (relative to the
/// crate): their paths and contents, in sorted path order, through
/// `DefaultHasher::new()`, whose keys are fixed, so the same sources give
/// the same digest. Panics when a directory or file cannot be read.
pub fn source_digest(dirs: &[&str]) -> u64 {
    use std::hash::Hasher;
    let mut files = Vec::new();
    for dir in dirs {
        let mut stack = vec![PathBuf::from(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("the crate's sources are readable") {
                let p = e.expect("a directory entry").path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    files.push(p);
                }
            }
        }
    }
    files.sort();
    let mut h = std::hash::DefaultHasher::new();
    for f in &files {
        h.write(f.to_string_lossy().as_bytes());
        h.write(&std::fs::read(f).expect("a source file is readable"));
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_stable_and_sees_contents() {
        // cargo runs unit tests in the crate's directory, like build.rs.
        assert_eq!(source_digest(&["src"]), source_digest(&["src"]));
        assert_ne!(source_digest(&["src"]), source_digest(&["src", "src"]));
    }
}
