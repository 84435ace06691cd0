//! Load a shared library into a running process and call functions in
//! it, with ptrace: what `heaptrack -p` does through gdb, done directly.
//!
//! ```no_run
//! use profdev_inject::{on_tracer_thread, InjectError, Target};
//! let r = on_tracer_thread(|| {
//!     let mut t = Target::attach(1234)?; // every thread stopped
//!     let h = t.dlopen("/path/to/lib.so")?; // its constructors run
//!     let f = t.dlsym(h, "entry")?;
//!     let s = t.write_string(t.main_thread(), "argument")?;
//!     t.call(t.main_thread(), f, &[s])
//!     // dropped: registers restored, detached, the process runs on
//! });
//! # let _: Result<u64, InjectError> = r;
//! ```
//!
//! * [`Target::attach`] seizes (`PTRACE_SEIZE`) and interrupts
//!   (`PTRACE_INTERRUPT`) every thread of the process, re-reading
//!   `/proc/PID/task` until no new thread appears, and waits for each stop
//!   with a bound. Dropping the `Target` puts back every register set it
//!   changed (general registers and the whole FPU/SSE/AVX state) and
//!   detaches: the process goes on as before, also after an error. A
//!   signal that arrived while it was held is delivered at the detach.
//! * [`Target::call`] runs one function in one stopped thread, SysV ABI:
//!   up to 6 integer arguments, a 16-byte aligned stack below the red zone
//!   (and below any data [`Target::write_bytes`] put there), a return
//!   address of 0 whose fault (`SIGSEGV` at pc 0) ends the call and is
//!   never delivered. A thread stopped inside a system call has
//!   `orig_rax` set to -1 for the call, so the kernel does not "restart"
//!   the call's code as a system call; its saved registers are put back
//!   after the call, and the interrupted system call restarts at the
//!   detach as it would have (`-ERESTART*` semantics, done by the kernel).
//! * Remote memory: [`Target::read_bytes`] and [`Target::write_bytes`] go
//!   through `/proc/PID/mem`; [`Target::write_bytes`] and
//!   [`Target::write_string`] place data on the thread's stack, below the
//!   red zone, for the calls that follow (it is gone after the detach).
//! * [`Target::registers`]: a stopped thread's general registers, stack
//!   pointer and `fs` base, read at the stop (a leak scan's roots).
//! * [`Target::dlopen`], [`Target::dlsym`]: `dlopen`/`dlsym`/`dlerror`
//!   found in the process's C library (glibc >= 2.34 exports them from
//!   libc.so.6; older ones from libdl.so.2 when it is loaded, else
//!   `__libc_dlopen_mode`/`__libc_dlsym`), by reading `/proc/PID/maps`
//!   and the library file's dynamic symbols. A failing `dlopen` is
//!   reported with the text of a remote `dlerror()`.
//!
//! Every thread is held during a call: a function that waits for a lock
//! another (stopped) thread holds cannot finish, and the call gives up
//! after its bound ([`CALL_TIMEOUT`]), restoring the thread's registers.
//!
//! A `Target` must be used, and dropped, by the thread that attached
//! (ptrace's tracer is a thread): it is neither `Send` nor `Sync`. Use it
//! inside [`on_tracer_thread`]: a thread that never stopped (one blocked in
//! a request only the caller can answer, such as a FUSE write to the
//! caller's own file system) cannot be detached, but when the tracer
//! thread ends the kernel detaches it. x86-64 only.
//!
//! The crate's parts: `ptrace` (the [`Target`]: seizing and stopping the
//! threads, their registers and FPU state, remote memory, the detach),
//! `call` (a function call in a stopped thread and the stack data for
//! it), `loader` (`dlopen`/`dlsym` in the target's C library), `maps`
//! (`/proc/PID/maps`) and `error` ([`InjectError`]).

mod call;
mod error;
mod loader;
mod maps;
mod ptrace;

use std::time::Duration;

pub use error::InjectError;
pub use loader::Module;
pub use maps::{maps, Mapping};
pub use ptrace::{Registers, Target};

/// How long a thread may take to stop after `PTRACE_INTERRUPT`.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a remote call may run.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// Run `f` on a fresh thread and wait for it: the thread to create and
/// use [`Target`]s on. When it ends, the kernel detaches whatever it still
/// traces (a thread that did not stop within the bounds is left traced by
/// a tracer that no longer waits, until that tracer exits), so nothing is
/// left stopped behind.
pub fn on_tracer_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("profdev-tracer".into())
            .spawn_scoped(s, f)
            .expect("a thread for ptrace")
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}
