//! Compile c/covrt.c into the shared object that coverage mode preloads
//! into the programs it runs (and that attach mode injects); src/launch.rs
//! embeds it (`include_bytes!`). The C compiler is `$CC`, else `cc`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=c/covrt.c");
    engine_id();
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let so = out.join("libprofdev_cov.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&cc)
        .args([
            "-O2",
            "-g",
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            "-ftls-model=initial-exec",
            "-Wall",
            "-Wextra",
            "-o",
        ])
        .arg(&so)
        .arg("c/covrt.c")
        .args(["-ldl", "-lpthread"])
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run the C compiler {cc:?} to build the coverage runtime: {e}; install cc (Debian: build-essential) or set CC")
        });
    assert!(
        status.success(),
        "the C compiler {cc:?} failed to build crates/coverage/c/covrt.c"
    );
}

/// `PROFDEV_COV_ENGINE`: a digest of the engine's sources (src/ and c/),
/// part of every on-disk cache key (src/cache.rs), so a plan or encoding
/// made by another version of the planner, encoder or runtime is never
/// reused.
fn engine_id() {
    use std::hash::Hasher;
    println!("cargo:rerun-if-changed=src");
    let mut files = Vec::new();
    for dir in ["src", "c"] {
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
    // DefaultHasher::new() has fixed keys: the same sources give the same id.
    let mut h = std::hash::DefaultHasher::new();
    for f in &files {
        h.write(f.to_string_lossy().as_bytes());
        h.write(&std::fs::read(f).expect("a source file is readable"));
    }
    println!(
        "cargo:rustc-env=PROFDEV_COV_ENGINE={}-{:016x}",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
        h.finish()
    );
}
