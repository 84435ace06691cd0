//! Compile c/mprof.c and c/attach.c into the shared object that `profdev mprof` preloads
//! into the programs it runs; src/lib.rs embeds it (`include_bytes!`).
//! The C compiler is `$CC`, else `cc` (profdev-cbuild).

fn main() {
    profdev_cbuild::SharedObject {
        file: "libprofdev_mprof.so",
        sources: &["c/mprof.c", "c/attach.c"],
        libs: &["-lgcc_s", "-ldl", "-lpthread", "-lm"],
        what: "mprof's library",
        sources_named: "crates/mprof/c/mprof.c and attach.c",
    }
    .build();
}
