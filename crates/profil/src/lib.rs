//! profil(2) and monitor(3C) for Rust and C programs: an exact in-process PC
//! histogram.
//!
//! # Synopsis
//!
//! Rust:
//!
//! ```no_run
//! use profdev_profil::Profil;
//! # fn work() {}
//! let mut cells = vec![0u16; 1 << 16];
//! let offset = work as usize & !0xffff;
//! Profil::scope(&mut cells, offset, 0xFFFF, |_| work()).unwrap();
//! ```
//!
//! C (`#include "profdev_profil.h"`, link `libprofdev_profil.a` or
//! `-lprofdev_profil` before libc):
//!
//! ```c
//! int  profil(unsigned short *buf, size_t bufsiz, size_t offset, unsigned int scale);
//! void monitor(int (*lowpc)(), int (*highpc)(), unsigned short *buffer, size_t bufsize, size_t nfunc);
//! void monstartup(unsigned long lowpc, unsigned long highpc);
//! void moncontrol(int mode);
//! void _mcleanup(void);
//! ```
//!
//! # Description
//!
//! [`profil`](mod@profil) keeps the NEWS-os/SVR4 semantics: every tick of
//! process CPU time, the interrupted PC `pc` adds one to the `u16` cell
//! `((pc - offset) * (scale & 0xFFFE)) >> 17` of the buffer (16-bit wrap);
//! PCs below `offset` or past `bufsiz / 2` cells are ignored; scale 0 or 1
//! turns profiling off; bufsiz 0 makes it ineffective; a later call
//! replaces the earlier one. Profiling stays on in both parent and child
//! after fork (each counts into its own copy of the buffer), is off after
//! exec (the new image never receives a stray SIGPROF), and turns itself off
//! when the buffer stops being writable. [`index`] holds the formula next to
//! the BSD and glibc ones; [`clock`] explains the timer; [`cell`] the
//! fault-free write.
//!
//! [`monitor`](mod@monitor) is SVR4's monitor(3C) writing `mon.out`
//! ([`mon_out`], re-exported from `profdev_formats`, documents the 64-bit
//! layout). [`gmon`] is BSD/glibc's monstartup/moncontrol/_mcleanup writing
//! a GNU `gmon.out` with `profdev_formats::gmon`, the writer every profdev
//! command uses, which `gprof -b prog gmon.out` reads.
//!
//! Of profdev's crates this one depends only on `profdev-formats` (pure
//! writers, no I/O) and `profdev-safefile` (the one way profdev writes a
//! file), so the library linked into programs stays small.
//!
//! **Where `unsafe` lives, and why.** This is a library inside someone
//! else's process, driven by a signal: [`clock`] installs the SIGPROF
//! handler and the per-thread CPU timer (timer_create, sigaction) and reads
//! the interrupted PC from the signal frame; [`cell`] adds one to a cell of
//! a buffer the program owns (and may unmap) without faulting, through
//! process_vm_readv/writev; [`profil`](mod@profil) keeps its state in a
//! lock the signal handler and fork handlers (pthread_atfork) share;
//! [`text`] and [`gmon`] find the program's text (dl_iterate_phdr,
//! getauxval); [`monitor`](mod@monitor) works on the caller's raw buffer;
//! and [`capi`] is the C ABI (`profil`, `monitor`, `monstartup`, …), whose
//! pointer arguments are the caller's promise. Each block carries a
//! `SAFETY:` comment.
//!
//! The sampling rate is 100 Hz of CPU time (the `HZ` of SVR4 and of
//! glibc's profil); the environment variable `PROFDEV_PROFIL_HZ` (1 to
//! 10000) changes it when profiling first starts.
//!
//! # Example
//!
//! ```sh
//! $ cargo build --release -p profdev-profil
//! $ cc -O1 prog.c target/release/libprofdev_profil.a -lpthread -ldl -lm -o prog
//! $ ./prog && gprof -b prog gmon.out | head
//! ```
//!
//! # Bugs
//!
//! * Linux only, 64-bit x86_64 and aarch64 (the signal frame layout).
//! * Ticks are attributed to the thread that consumed the CPU on Linux 6.4
//!   and later; older kernels deliver the timer signal to any thread that
//!   does not block it (usually the main thread). A thread that blocks
//!   SIGPROF has its ticks counted at another thread's PC.
//! * A SIGPROF queued in the instant before execve is discarded together
//!   with the timer on Linux 6.13 and later (measured on 6.18); older
//!   kernels may deliver it to the new image.
//! * fork via `clone(2)` without glibc's fork handlers (a raw system call)
//!   leaves the child without a timer: it stops counting.
//! * The library owns SIGPROF while profiling: a SIGPROF handler installed
//!   later by the program replaces ours and profiling stops counting;
//!   foreign SIGPROFs arriving at ours are passed to the handler that was
//!   installed before ours.
//! * Where seccomp forbids `process_vm_readv`/`process_vm_writev`, cells
//!   are incremented directly and an unmapped buffer faults (see [`cell`]).
//! * No call counts: `_mcount` is not provided, so mon.out's counters stay
//!   zero and gmon.out has no arcs.

#[cfg(not(all(
    target_os = "linux",
    target_pointer_width = "64",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
compile_error!("profdev-profil supports 64-bit Linux on x86_64 and aarch64 only");

pub mod capi;
pub mod cell;
pub mod clock;
pub mod error;
pub mod gmon;
pub mod index;
pub mod monitor;
pub mod profil;
pub mod text;

pub use error::Error;
pub use monitor::Monitor;
/// The mon.out layout monitor(3C) writes, with its parser.
pub use profdev_formats::mon_out;
pub use profil::Profil;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
