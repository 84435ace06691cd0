//! prof's coverage mode (`startcp`, `cprof`): exact execution counts of a
//! module's code, measured without a rebuild, and the views that read them.
//!
//! [`counts`] is the one model every part shares: the engine that plans
//! and counts fills a [`counts::ModuleCoverage`] per module; the device's
//! histogram, cprof's listing, the `.prf` records and the lcov and
//! Cobertura exports read it.

pub mod cobertura;
pub mod counts;
pub mod fuzzing;
pub mod lcov;
pub mod lines;
pub mod listing;
pub mod prf;
