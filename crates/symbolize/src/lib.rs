//! Symbolization, in process: never by spawning addr2line or nm.
//!
//! * [`kernel`]: the running kernel's symbols from `/proc/kallsyms`, a
//!   `System.map`, or a `vmlinux` ELF; kernel text bounds; module symbols.
//! * [`elf`]: user-space ELF objects: symbol tables, load bias, and DWARF
//!   line tables with inlined frames (through `addr2line`/`gimli`).
//! * [`tasks`]: which file is mapped where in which process, rebuilt from
//!   the comm/mmap/fork/exit records of a sample stream, so that samples of
//!   processes that have already exited still symbolize.

pub mod elf;
pub mod kernel;
pub mod tasks;
pub mod unwind;

#[doc(hidden)]
pub mod fuzzing;

pub use elf::{ElfError, ElfLayout, ElfObject, Frame};
pub use kernel::{KSym, KernelSymbols, SymbolError};
pub use tasks::{Mapping, Tasks};
