//! Compile c/mprof.c, c/wrappers.c, c/attach.c and c/unwind.c (sharing c/mprof.h)
//! into the shared object that `profdev mprof` preloads into the programs
//! it runs; src/lib.rs embeds it (`include_bytes!`).
//! The C compiler is `$CC`, else `cc` (profdev-cbuild).

fn main() {
    println!("cargo:rerun-if-changed=c/mprof.h");
    profdev_cbuild::SharedObject {
        file: "libprofdev_mprof.so",
        sources: &["c/mprof.c", "c/wrappers.c", "c/attach.c", "c/unwind.c"],
        libs: &["-lgcc_s", "-ldl", "-lpthread", "-lm"],
        what: "mprof's library",
        sources_named: "crates/mprof/c/mprof.c, wrappers.c, attach.c and unwind.c",
    }
    .build();
}
