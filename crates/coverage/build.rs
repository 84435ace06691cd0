//! Compile c/covrt.c into the shared object that coverage mode preloads
//! into the programs it runs (and that attach mode injects); src/launch.rs
//! embeds it (`include_bytes!`). The C compiler is `$CC`, else `cc`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=c/covrt.c");
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
