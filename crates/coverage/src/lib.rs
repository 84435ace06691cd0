//! prof's coverage mode (`startcp`, `cprof`): exact execution counts of a
//! module's code, measured without a rebuild, and the views that read them.
//!
//! [`counts`] is the one model every part shares: the engine that plans
//! and counts fills a [`counts::ModuleCoverage`] per module; the device's
//! histogram, cprof's listing, the `.prf` records and the lcov and
//! Cobertura exports read it.
//!
//! The engine: [`plan`] cuts a module into blocks and decides how each is
//! counted, [`encode`] makes the trampolines for one load of it, and
//! [`launch`] runs a command with the runtime preloaded and collects the
//! counts.

pub mod counts;
pub mod encode;
pub mod launch;
pub mod plan;
