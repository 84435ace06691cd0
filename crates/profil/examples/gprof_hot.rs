//! A Rust program profiled for gprof with two calls: `gmon::start()`
//! (monstartup over the program's text) and `gmon::mcleanup()` (_mcleanup:
//! writes ./gmon.out).
//!
//! ```sh
//! cargo build --release -p profdev-profil --example gprof_hot
//! target/release/examples/gprof_hot            # writes ./gmon.out
//! gprof -b target/release/examples/gprof_hot gmon.out | head
//! ```
//!
//! Arguments: milliseconds of CPU time to spend in `hot_loop` and in
//! `cold_loop` (default 500 and 50).

use std::hint::black_box;

/// The work: an xorshift loop with no calls, so its ticks stay inside it.
#[inline(never)]
fn hot_loop(n: u64) -> u64 {
    let mut x = n | 1;
    let mut i = 0;
    while i < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        i += 1;
    }
    x
}

/// Same work, given a tenth of the time.
#[inline(never)]
fn cold_loop(n: u64) -> u64 {
    let mut x = n | 1;
    let mut i = 0;
    while i < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        i += 1;
    }
    x
}

/// Process CPU time in milliseconds.
fn cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

fn burn(f: fn(u64) -> u64, ms: f64) {
    let end = cpu_ms() + ms;
    while cpu_ms() < end {
        black_box(f(black_box(20_000)));
    }
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<f64>());
    let hot_ms = args.next().and_then(Result::ok).unwrap_or(500.0);
    let cold_ms = args.next().and_then(Result::ok).unwrap_or(50.0);

    if let Err(e) = profdev_profil::gmon::start() {
        eprintln!("gprof_hot: {e}");
        std::process::exit(1);
    }
    burn(hot_loop, hot_ms);
    burn(cold_loop, cold_ms);
    match profdev_profil::gmon::mcleanup() {
        Ok(path) => eprintln!("gprof_hot: wrote {}", path.display()),
        Err(e) => {
            eprintln!("gprof_hot: {e}");
            std::process::exit(1);
        }
    }
}
