//! Compile c/covrt.c into the shared object that coverage mode preloads
//! into the programs it runs (and that attach mode injects); src/launch.rs
//! embeds it (`include_bytes!`). The C compiler is `$CC`, else `cc`
//! (profdev-cbuild).

fn main() {
    profdev_cbuild::SharedObject {
        file: "libprofdev_cov.so",
        sources: &["c/covrt.c"],
        libs: &["-ldl", "-lpthread"],
        what: "the coverage runtime",
        sources_named: "crates/coverage/c/covrt.c",
    }
    .build();
    engine_id();
}

/// `PROFDEV_COV_ENGINE`: a digest of the engine's sources (src/ and c/,
/// the shared headers of profdev-cbuild the runtime includes, and
/// profdev-symbolize's, whose symbols and landing pads the plan reads),
/// part of every on-disk cache key (src/cache.rs), so a plan or encoding
/// made by another version of the planner, encoder or runtime is never
/// reused.
fn engine_id() {
    println!("cargo:rerun-if-changed=src");
    // covrt.c's own headers (hops.h) too.
    println!("cargo:rerun-if-changed=c");
    println!("cargo:rerun-if-changed=../symbolize/src");
    println!(
        "cargo:rustc-env=PROFDEV_COV_ENGINE={}-{:016x}",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
        profdev_cbuild::source_digest(&["src", "c", "../symbolize/src"])
            ^ profdev_cbuild::headers_digest()
    );
}
