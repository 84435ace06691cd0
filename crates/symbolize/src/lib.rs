//! Symbolization, in process: never by spawning addr2line or nm.
//!
//! * [`kernel`]: the running kernel's symbols from `/proc/kallsyms`, a
//!   `System.map`, or a `vmlinux` ELF; kernel text bounds; module symbols.
//! * [`elf`]: user-space ELF objects: symbol tables, load bias, and DWARF
//!   line tables with inlined frames (through `addr2line`/`gimli`).
//! * [`tasks`] and [`objects`]: the one model of a stream — which process
//!   maps which object where, rebuilt from the comm/mmap/fork/exit records,
//!   and every mapped ELF file opened once when its mapping is reported
//!   and kept open, so that samples of processes that have already exited,
//!   or of binaries replaced since, still symbolize and unwind.
//! * [`unwind`]: user stacks from `.eh_frame` over the tasks table.
//! * [`symbolizer`]: the one [`Symbolizer`] that names kernel pcs and
//!   (object, offset) places for `top` and `record`, cached.
//! * [`maps`]: `/proc/PID/maps`, read (bounded) and parsed here for every
//!   crate of profdev.
//!
//! **Where `unsafe` lives, and why.** Three blocks: [`elf`] maps an object
//! file read-only (memmap2) rather than copying large debug files;
//! [`open`] clears O_NONBLOCK with fcntl after opening an object without
//! blocking on a FIFO; [`objects`] reads this process's own vDSO image from
//! the range the kernel maps it at and raises the open-files limit. Each carries a `SAFETY:` comment.

pub mod elf;
pub mod jit;
pub mod kernel;
pub mod maps;
pub mod objects;
pub mod open;
pub mod symbolizer;
pub mod tasks;
pub mod unwind;

#[doc(hidden)]
pub mod fuzzing;

pub use elf::{ElfError, ElfLayout, ElfObject, FnSym, Frame, LineRow, SymOrigin};
pub use kernel::{KSym, KernelSymbols, SymbolError};
pub use objects::{Object, ObjectKey, Objects};
pub use symbolizer::Symbolizer;
pub use tasks::{Mapping, Tasks};
