//! Symbolization, in process: never by spawning addr2line or nm.
//!
//! * [`kernel`]: the running kernel's symbols from `/proc/kallsyms`, a
//!   `System.map`, or a `vmlinux` ELF; kernel text bounds; module symbols.
//! * [`elf`]: user-space ELF objects: symbol tables, load bias, and DWARF
//!   line tables with inlined frames (through `addr2line`/`gimli`).
//! * [`tasks`]: which file is mapped where in which process, rebuilt from
//!   the comm/mmap/fork/exit records of a sample stream, so that samples of
//!   processes that have already exited still symbolize.
//!
//! **Where `unsafe` lives, and why.** Three blocks: [`elf`] maps an object
//! file read-only (memmap2) rather than copying large debug files;
//! [`open`] clears O_NONBLOCK with fcntl after opening an object without
//! blocking on a FIFO; [`unwind`] reads this process's own vDSO image from
//! the range the kernel maps it at. Each carries a `SAFETY:` comment.

pub mod elf;
pub mod kernel;
pub mod open;
pub mod tasks;
pub mod unwind;

#[doc(hidden)]
pub mod fuzzing;

pub use elf::{ElfError, ElfLayout, ElfObject, FnSym, Frame, SymOrigin};
pub use kernel::{KSym, KernelSymbols, SymbolError};
pub use tasks::{Mapping, Tasks};
