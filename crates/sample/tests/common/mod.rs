//! Shared helpers for the privileged tests.
#![allow(dead_code)] // each test file uses a different subset

use profdev_core::SourceError;

/// Unwrap an open result, or return None when the kernel refused
/// perf_event_open for lack of privilege or support, through
/// `profdev_testkit::privileged` (which prints why, or panics when
/// PROFDEV_REQUIRE_PRIVILEGED=1). Panics on any other error.
pub fn open_or_skip<T>(test: &str, result: Result<T, SourceError>) -> Option<T> {
    let err = match result {
        Ok(v) => return Some(v),
        Err(e) => e,
    };
    let skippable = match &err {
        SourceError::Permission(_) => true,
        SourceError::Io { source, .. } => matches!(
            source.raw_os_error(),
            Some(libc::ENOENT | libc::ENODEV | libc::ENOSYS | libc::EOPNOTSUPP)
        ),
        _ => false,
    };
    if !skippable {
        panic!("{test}: perf_event_open failed: {err}");
    }
    profdev_testkit::privileged(
        test,
        Err(format!("perf_event_open is not available here: {err}")),
    );
    None
}

/// `[_stext, _etext)` of the running kernel, from /proc/kallsyms.
pub fn kernel_text() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/kallsyms").expect("read /proc/kallsyms");
    let find = |name: &str| {
        text.lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                let addr = f.next()?;
                let _ty = f.next()?;
                (f.next()? == name).then(|| u64::from_str_radix(addr, 16).ok())?
            })
            .unwrap_or_else(|| panic!("{name} not in /proc/kallsyms"))
    };
    let (s, e) = (find("_stext"), find("_etext"));
    assert!(
        s != 0,
        "kallsyms addresses are hidden (kernel.kptr_restrict)"
    );
    (s, e)
}

/// CLOCK_MONOTONIC now, in nanoseconds (the clock samples are stamped with).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(r, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Open descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}
