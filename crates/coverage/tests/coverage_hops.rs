//! The runtime's attach leaves out a hop whose bytes are live code for a
//! stopped thread (`c/hops.h`, `hold_hops`): a short block's `jmp rel8`
//! leads to a `jmp rel32` written in the dead bytes of a copied block
//! (its host), dead only once the host's own patch is taken. A thread
//! stopped in the host past that patch runs through those bytes: written,
//! they would send it into another block's trampoline (seen through the
//! static route: a static program attached while in such a host died
//! with SIGBUS at its exit, in 3 of 8 attaches). The C is compiled alone
//! with a driver that prints which patches are left out.

use std::path::Path;
use std::process::Command;

const DRIVER: &str = r#"
#include "hops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* argv[1]: the patch list, "addr:entry:kind:len,..." (hex); argv[2..]:
 * the stopped threads' pcs (hex). Prints each patch's kind after. */
int main(int argc, char **argv) {
    struct patch ps[16];
    uint64_t np = 0, pcs[16], n = 0;
    for (char *t = strtok(argv[1], ","); t && np < 16; t = strtok(NULL, ",")) {
        unsigned long a, e, k, l;
        if (sscanf(t, "%lx:%lx:%lx:%lx", &a, &e, &k, &l) != 4) return 2;
        ps[np++] = (struct patch){.addr = a, .entry = e, .kind = (uint32_t)k, .len = (uint32_t)l};
    }
    for (int i = 2; i < argc && n < 16; i++) pcs[n++] = strtoull(argv[i], NULL, 16);
    uint64_t held = n ? hold_hops(ps, np, pcs, n) : 0;
    printf("%lu", (unsigned long)held);
    for (uint64_t i = 0; i < np; i++) printf(" %u", ps[i].kind);
    printf("\n");
    return 0;
}
"#;

#[test]
fn a_hop_in_live_code_is_left_out_by_the_runtime() {
    if !profdev_testkit::tools("the runtime's hops", &["cc"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("driver.c");
    std::fs::write(&src, DRIVER).unwrap();
    let exe = dir.path().join("driver");
    let inc = Path::new(env!("CARGO_MANIFEST_DIR")).join("c");
    let st = Command::new("cc")
        .arg("-O1")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(&inc)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "the driver builds");
    let run = |patches: &str, pcs: &[&str]| {
        let out = Command::new(&exe).arg(patches).args(pcs).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    // A host at 0x100 (its jump), a hop's jump in its dead bytes at
    // 0x108, and the short block at 0x180 jumping there (listed next).
    let one = "100:9000:1:5,108:9100:1:5,180:108:5:2";
    assert_eq!(run(one, &[]), "0 1 1 5");
    // At the host's start (it takes its jump), or past the hop: kept.
    assert_eq!(run(one, &["100"]), "0 1 1 5");
    assert_eq!(run(one, &["110"]), "0 1 1 5");
    assert_eq!(run(one, &["181"]), "0 1 1 5");
    // In the host before the hop's end: the hop and its rel8 left out.
    for pc in ["103", "106", "10c", "10a"] {
        assert_eq!(run(one, &[pc]), "2 1 0 0", "pc {pc}");
    }
    // Two hops in one host: the one a thread has not passed yet is left
    // out, for each thread.
    let two = "100:9000:1:5,108:9100:1:5,180:108:5:2,110:9200:1:5,190:110:5:2";
    assert_eq!(run(two, &["104"]), "4 1 0 0 0 0");
    assert_eq!(run(two, &["10f"]), "2 1 1 5 0 0");
    assert_eq!(run(two, &["10f", "104"]), "4 1 0 0 0 0");
    // A patch of another block between the thread and the hop: the hop's
    // host is that block, not the thread's.
    let other = "100:9000:1:5,120:9300:1:5,128:9100:1:5,180:128:5:2";
    assert_eq!(run(other, &["104"]), "0 1 1 1 5");
    assert_eq!(run(other, &["124"]), "2 1 1 0 0");
}
