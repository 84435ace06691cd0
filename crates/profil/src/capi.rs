//! The C ABI: the classic names and `profdev_`-prefixed aliases.
//!
//! Declared in `include/profdev_profil.h`. Linking `libprofdev_profil.a` (or
//! `-lprofdev_profil`) in front of libc makes the classic names replace
//! glibc's; the prefixed names are always ours, for programs that want to
//! call both implementations.
//!
//! | C | Rust |
//! |---|---|
//! | `int profil(unsigned short *buf, size_t bufsiz, size_t offset, unsigned int scale)` | [`crate::profil::set`] |
//! | `void monitor(int (*lowpc)(), int (*highpc)(), unsigned short *buffer, size_t bufsize, size_t nfunc)` | [`crate::monitor::register`], [`crate::monitor::finish`] |
//! | `void monstartup(unsigned long lowpc, unsigned long highpc)` | [`crate::gmon::monstartup`] |
//! | `void moncontrol(int mode)` | [`crate::gmon::moncontrol`] |
//! | `void _mcleanup(void)` | [`crate::gmon::mcleanup`] |
//! | `unsigned int profdev_profil_hz(void)` | [`crate::clock::rate_hz`] |
//!
//! profil returns 0, or -1 with `errno` set when the timer or the signal
//! handler cannot be set up (SVR4's profil never failed; glibc's can). The
//! others report failures on stderr as their ancestors did, or not at all.

use libc::{c_int, c_uint, c_ulong, c_ushort, c_void, size_t};

use crate::error::Error;
use crate::profil::Config;
use crate::{clock, gmon, monitor, profil};

fn set_errno(e: &Error) {
    let code = match e {
        Error::TimerCreate(io) | Error::TimerArm(io) | Error::Sigaction(io) => {
            io.raw_os_error().unwrap_or(libc::EINVAL)
        }
        _ => libc::EINVAL,
    };
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = code };
}

/// # Safety
/// As profil(2): `buf` valid for `bufsiz` bytes while profiling into it.
unsafe fn do_profil(buf: *mut c_ushort, bufsiz: size_t, offset: size_t, scale: c_uint) -> c_int {
    let cfg = Config {
        buf: buf as usize,
        bufsiz,
        offset,
        scale,
    };
    // SAFETY: the C caller's contract.
    match unsafe { profil::set(cfg) } {
        Ok(_) => 0,
        Err(e) => {
            set_errno(&e);
            -1
        }
    }
}

/// # Safety
/// As monitor(3C): `buffer` valid for `bufsize` WORDs until monitor(NULL).
unsafe fn do_monitor(
    lowpc: *const c_void,
    highpc: *const c_void,
    buffer: *mut c_ushort,
    bufsize: size_t,
    nfunc: size_t,
) {
    if lowpc.is_null() {
        if let Err(e) = monitor::finish() {
            eprintln!("{e}");
        }
        return;
    }
    // SAFETY: the C caller's contract. Refusals are silent, as in SVR4.
    let _ = unsafe { monitor::register(lowpc as usize, highpc as usize, buffer, bufsize, nfunc) };
}

fn do_monstartup(lowpc: c_ulong, highpc: c_ulong) {
    if let Err(e @ Error::OutOfMemory { .. }) = gmon::monstartup(lowpc as usize, highpc as usize) {
        let _ = e;
        eprintln!("monstartup: out of memory");
    }
}

fn do_moncontrol(mode: c_int) {
    let _ = gmon::moncontrol(mode != 0);
}

fn do_mcleanup() {
    match gmon::mcleanup() {
        Ok(_) | Err(Error::NotStarted) => {}
        Err(Error::Write { source, .. }) => eprintln!("_mcleanup: gmon.out: {source}"),
        Err(e) => eprintln!("{e}"),
    }
}

/// The next definition of `name` after ours (glibc's), if any.
fn next_definition(name: &std::ffi::CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// profil(2), NEWS-os/SVR4 semantics, glibc's prototype.
///
/// # Safety
/// `buf` must be valid for `bufsiz` bytes until profiling is replaced or stopped.
#[no_mangle]
pub unsafe extern "C" fn profil(
    buf: *mut c_ushort,
    bufsiz: size_t,
    offset: size_t,
    scale: c_uint,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { do_profil(buf, bufsiz, offset, scale) }
}

/// Alias of [`profil()`].
///
/// # Safety
/// As [`profil()`].
#[no_mangle]
pub unsafe extern "C" fn profdev_profil(
    buf: *mut c_ushort,
    bufsiz: size_t,
    offset: size_t,
    scale: c_uint,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { do_profil(buf, bufsiz, offset, scale) }
}

/// monitor(3C), SVR4 semantics.
///
/// # Safety
/// `buffer` must be valid for `bufsize` WORDs until `monitor(NULL, ...)`.
#[no_mangle]
pub unsafe extern "C" fn monitor(
    lowpc: *const c_void,
    highpc: *const c_void,
    buffer: *mut c_ushort,
    bufsize: size_t,
    nfunc: size_t,
) {
    // SAFETY: forwarded contract.
    unsafe { do_monitor(lowpc, highpc, buffer, bufsize, nfunc) }
}

/// Alias of [`monitor()`].
///
/// # Safety
/// As [`monitor()`].
#[no_mangle]
pub unsafe extern "C" fn profdev_monitor(
    lowpc: *const c_void,
    highpc: *const c_void,
    buffer: *mut c_ushort,
    bufsize: size_t,
    nfunc: size_t,
) {
    // SAFETY: forwarded contract.
    unsafe { do_monitor(lowpc, highpc, buffer, bufsize, nfunc) }
}

/// monstartup(3): histogram over `lowpc..highpc`, profiling on.
#[no_mangle]
pub extern "C" fn monstartup(lowpc: c_ulong, highpc: c_ulong) {
    do_monstartup(lowpc, highpc)
}

/// Alias of [`monstartup`].
#[no_mangle]
pub extern "C" fn profdev_monstartup(lowpc: c_ulong, highpc: c_ulong) {
    do_monstartup(lowpc, highpc)
}

/// moncontrol(3): nonzero resumes, zero suspends. If this library's
/// monstartup was not called (a `-pg` program, whose startup code called
/// glibc's `__monstartup`), glibc's moncontrol is called instead.
#[no_mangle]
pub extern "C" fn moncontrol(mode: c_int) {
    if !gmon::is_started() {
        if let Some(f) = next_definition(c"moncontrol") {
            // SAFETY: glibc's `void moncontrol(int)`.
            let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(f) };
            return f(mode);
        }
    }
    do_moncontrol(mode)
}

/// Alias of [`moncontrol`].
#[no_mangle]
pub extern "C" fn profdev_moncontrol(mode: c_int) {
    do_moncontrol(mode)
}

/// _mcleanup(3): stop, write gmon.out, free. If this library's monstartup
/// was not called (a `-pg` program registers `_mcleanup` with atexit after
/// glibc's `__monstartup`), glibc's _mcleanup is called instead, so linking
/// this library does not cost a `-pg` program its gmon.out.
#[no_mangle]
pub extern "C" fn _mcleanup() {
    if !gmon::is_started() {
        if let Some(f) = next_definition(c"_mcleanup") {
            // SAFETY: glibc's `void _mcleanup(void)`.
            let f: extern "C" fn() = unsafe { std::mem::transmute(f) };
            return f();
        }
    }
    do_mcleanup()
}

/// Alias of [`_mcleanup`].
#[no_mangle]
pub extern "C" fn profdev_mcleanup() {
    do_mcleanup()
}

/// The profiling rate in Hz (ticks of process CPU time per second).
#[no_mangle]
pub extern "C" fn profdev_profil_hz() -> c_uint {
    clock::rate_hz()
}
