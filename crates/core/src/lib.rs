//! Pure data shared by every profdev crate.
//!
//! Nothing here does I/O or touches libc. The types fall in three groups:
//!
//! * [`addr`]: address spaces as types (kernel PC, process virtual address,
//!   file-relative address), so a PIE load bias or a relocated module cannot
//!   be mixed up silently.
//! * [`record`]: what a sampling source delivers — samples and the task
//!   events (comm, mmap, fork, exit, lost, throttle) needed to symbolize them.
//! * [`source`]: the [`SampleSource`](source::SampleSource) trait behind which
//!   the live perf_event engine, a replayed stream and a synthetic stream in
//!   tests are interchangeable.
//! * [`waits`]: the intervals threads spend off the CPU, paired from a
//!   session's switch samples and records.

#![forbid(unsafe_code)]

pub mod addr;
pub mod record;
pub mod source;
pub mod waits;

pub use addr::{FileAddr, KernelPc, KernelText, ProcessVa};
pub use record::{CpuMode, FileId, Record, Sample, UserRegs};
pub use source::{
    MappingHook, SampleSource, SessionConfig, SourceError, SourceFactory, SourceStats, Target,
};
