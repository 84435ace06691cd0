//! The classic commands' command lines: each one's table
//! ([`crate::cmdline::Spec`]); for prof, cprof and mprof also the
//! arguments it parses into, with the checks between options the table
//! cannot state (`-e needs a command`).

pub mod cprof;
pub mod kprof;
pub mod mprof;
pub mod prf;
pub mod prof;

use crate::cmdline::Spec;

/// Every classic command's table (kgmon's command line is clap's).
pub const ALL: &[&Spec] = &[
    &prof::SPEC,
    &cprof::SPEC,
    &mprof::SPEC,
    &kprof::SPEC,
    &prf::PRFLD,
    &prf::PRFSTAT,
    &prf::PRFDC,
    &prf::PRFSNAP,
    &prf::PRFPR,
];
