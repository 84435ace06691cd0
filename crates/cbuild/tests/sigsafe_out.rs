//! `c/sigsafe_out.h` compiled into a small program: its numbers are
//! printf's (`%lu`, `%lx`, `%ld`), its buffer writes everything in order
//! across flushes, and a string longer than the buffer is cut to it.

use std::path::PathBuf;
use std::process::Command;

/// The program's source: what it writes through the header.
const PROGRAM: &str = r#"
#include <stdint.h>
#include "sigsafe_out.h"

int main(void)
{
    static const uint64_t u[] = {0, 1, 9, 10, 15, 16, 255, 1234567890, 18446744073709551615ull};
    static const int64_t s[] = {0, -1, 42, -9223372036854775807ll - 1, 9223372036854775807ll};
    static char buf[24]; /* small (a 20-digit number fits): many flushes */
    struct sigsafe_out o = SIGSAFE_OUT(1, buf);
    for (unsigned i = 0; i < sizeof u / sizeof u[0]; i++) {
        sigsafe_putu(&o, u[i], 10);
        sigsafe_puts(&o, " ");
        sigsafe_putu(&o, u[i], 16);
        sigsafe_put(&o, "\n", 1);
    }
    for (unsigned i = 0; i < sizeof s / sizeof s[0]; i++) {
        sigsafe_puti(&o, s[i]);
        sigsafe_puts(&o, "\n");
    }
    sigsafe_puts(&o, "a string longer than the buffer of 24\n");
    sigsafe_flush(&o);
    return 0;
}
"#;

#[test]
fn numbers_are_printfs_and_nothing_is_lost_across_flushes() {
    let dir = std::env::temp_dir().join(format!("profdev-sigsafe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let src = dir.join("t.c");
    let exe = dir.join("t");
    std::fs::write(&src, PROGRAM).expect("the source is written");
    let include = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&cc)
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("the C compiler runs");
    assert!(status.success(), "the program compiles");
    let out = Command::new(&exe).output().expect("the program runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success());
    let mut want = String::new();
    for u in [0u64, 1, 9, 10, 15, 16, 255, 1_234_567_890, u64::MAX] {
        want += &format!("{u} {u:x}\n");
    }
    for s in [0i64, -1, 42, i64::MIN, i64::MAX] {
        want += &format!("{s}\n");
    }
    // Cut to the buffer's 24 bytes.
    want += "a string longer than the";
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
}
