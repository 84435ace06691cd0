//! Pure parsers and writers of the classic on-disk profile formats.
//!
//! Each module names its lineage and states every field's width and byte
//! order. Nothing here does I/O: functions take bytes and return values, or
//! take values and return bytes.
//!
//! The crate depends on nothing heavier than `thiserror` (and the pure data
//! of `profdev-core`): profdev-profil, a library linked into user programs,
//! writes its gmon.out and mon.out with it. Keep it that way; a format that
//! needs an ELF or DWARF reader belongs in `profdev-symbolize`. The one
//! exception is behind the `export` feature, which only the `profdev`
//! binary enables: the `export` module's writers of a recording use flate2 (pprof's
//! gzip), fxprof-processed-profile and serde_json (the Firefox Profiler's
//! format) and rustc-hash, and `pprof` (every pprof file's messages)
//! uses prost. The recording itself ([`recording`]) needs
//! nothing.
//!
//! The memory and coverage reports' files are written here too, as pure
//! writers over plain data: [`dhat`] (DHAT's JSON), `pprof::heap` (a heap
//! profile), [`lcov`] and [`cobertura`]. Every pprof file is encoded
//! through `pprof`'s messages.

#![forbid(unsafe_code)]

pub mod cobertura;
pub mod dhat;
#[cfg(feature = "export")]
pub mod export;
pub mod gmon;
pub mod kpdata;
pub mod lcov;
pub mod mon_out;
#[cfg(feature = "export")]
pub mod pprof;
pub mod prflog;
pub mod prof_histogram;
pub mod recording;
pub mod symelf;

#[doc(hidden)]
pub mod fuzzing;
