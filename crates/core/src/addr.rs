//! Address spaces as types.
//!
//! A number that is an address always says which space it lives in:
//!
//! | type | space |
//! |---|---|
//! | [`KernelPc`] | a virtual address in the running kernel |
//! | [`ProcessVa`] | a virtual address in one process |
//! | [`FileAddr`] | an address in an ELF file's own (link-time) address space |
//!
//! Conversions are named: a [`ProcessVa`] becomes a [`FileAddr`] only through
//! a mapping's load bias ([`ProcessVa::to_file`]).

use std::fmt;
use std::ops::Range;

/// A program counter in the running kernel's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct KernelPc(pub u64);

/// A virtual address inside one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ProcessVa(pub u64);

/// An address in an ELF file's link-time address space (what `addr2line -e
/// FILE` and `nm FILE` speak).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FileAddr(pub u64);

impl ProcessVa {
    /// Remove a mapping's load bias (`process address - link address`).
    pub fn to_file(self, load_bias: u64) -> FileAddr {
        FileAddr(self.0.wrapping_sub(load_bias))
    }
}

impl FileAddr {
    /// Add a mapping's load bias back.
    pub fn to_process(self, load_bias: u64) -> ProcessVa {
        ProcessVa(self.0.wrapping_add(load_bias))
    }
}

impl fmt::LowerHex for KernelPc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

impl fmt::LowerHex for FileAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

impl fmt::LowerHex for ProcessVa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

/// The kernel's text segment, `[_stext, _etext)`: what kprof, kgmon and the
/// readprofile lineage call "kernel text".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelText {
    /// `_stext` (Inferno's KTZERO).
    pub start: KernelPc,
    /// `_etext`, exclusive.
    pub end: KernelPc,
}

impl KernelText {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end.0.saturating_sub(self.start.0)
    }

    /// True if the range holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if `pc` lies in `[start, end)`.
    pub fn contains(&self, pc: KernelPc) -> bool {
        pc >= self.start && pc < self.end
    }

    /// The range as plain numbers.
    pub fn range(&self) -> Range<u64> {
        self.start.0..self.end.0
    }
}
