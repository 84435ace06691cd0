//! Exact execution counts of one module's code, in the module's link-time
//! address space (what `addr2line -e PATH` reads).
//!
//! A block is straight-line code: it is entered only at its start and,
//! once entered, runs to its end (blocks are split after calls), so every
//! instruction of a block was executed exactly [`Block::count`] times.

use std::path::PathBuf;

/// The counts of one module (an executable or a shared library).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleCoverage {
    /// The module's file as it was mapped.
    pub path: PathBuf,
    /// Its GNU build id, when the file has one.
    pub build_id: Option<Vec<u8>>,
    /// Basic blocks, sorted by start, disjoint.
    pub blocks: Vec<Block>,
    /// Conditional branches, sorted by address.
    pub branches: Vec<Branch>,
    /// Blocks that could not be counted (reported, never hidden).
    pub uncounted: u64,
}

/// One basic block and how often it ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Block {
    /// Address of its first instruction.
    pub start: u64,
    /// Address just past its last instruction.
    pub end: u64,
    /// Start addresses of its instructions, ascending; the first is `start`.
    pub insns: Vec<u64>,
    /// Times the block was entered.
    pub count: u64,
}

/// One conditional jump and how its executions went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Branch {
    /// Address of the conditional jump instruction.
    pub addr: u64,
    /// Times it jumped.
    pub taken: u64,
    /// Times it fell through.
    pub not_taken: u64,
}
