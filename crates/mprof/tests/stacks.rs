//! The library's stack table: with room for one stack
//! (`PROFDEV_MPROF_STACKS=1,1`) the second stack met is charged to the
//! overflow entry, which says so; with room for both, no overflow. Frees
//! credit the allocating stack.

use profdev_mprof::{merge_stacks, Session, STACKS_ENV};
use std::process::Command;

const PROGRAM: &str = r#"
#include <stdlib.h>
static void *b[4096];
__attribute__((noinline)) void leaf_alloc(void **s) { *s = malloc(100); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void build(void) { for (int i = 0; i < 4096; i++) leaf_alloc(&b[i]); }
__attribute__((noinline)) void other(void) { for (int i = 0; i < 500; i++) leaf_alloc(&b[i]); }
int main(void) {
    build();
    for (int i = 0; i < 4096; i++) free(b[i]);
    other();
    for (int i = 0; i < 100; i++) free(b[i]);
    return 0;
}
"#;

/// (allocs, bytes, live, current, overflow, depth) per stack, sorted.
fn run(stacks: &str) -> Vec<(u64, u64, u64, u64, bool, usize)> {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("two.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.path().join("two");
    let ok = Command::new("cc")
        .args(["-O0", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("cannot run cc")
        .success();
    assert!(ok, "cc failed");
    let session = Session::new().unwrap();
    let status = Command::new(&exe)
        .envs(session.env(None, &[], false))
        .env(STACKS_ENV, stacks)
        .status()
        .unwrap();
    assert!(status.success());
    let (reports, errors) = session.reports();
    assert!(errors.is_empty(), "{errors:?}");
    let mut v: Vec<_> = merge_stacks(&reports)
        .iter()
        .map(|s| {
            let n = (s.allocs, s.bytes, s.live, s.current);
            (n.0, n.1, n.2, n.3, s.overflow, s.frames.len())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_full_table_charges_the_overflow_entry() {
    let one = run("1,1");
    assert_eq!(one.len(), 2, "{one:?}");
    // build()'s stack, met first, has its place; other()'s has none.
    assert_eq!(one[0], (500, 50000, 400, 40000, true, 0), "{one:?}");
    let b = one[1];
    assert_eq!((b.0, b.1, b.2, b.3, b.4), (4096, 409600, 0, 0, false));
    assert!(b.5 >= 3, "site, build, main at least: {one:?}");
    let both = run("1,2");
    assert_eq!(both.len(), 2, "{both:?}");
    assert!(both.iter().all(|s| !s.4), "{both:?}");
    let o = both[0];
    assert_eq!((o.0, o.1, o.2, o.3), (500, 50000, 400, 40000));
    // Stacks off: none.
    assert!(run("0").is_empty());
}
