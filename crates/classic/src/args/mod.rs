//! The command lines of prof, cprof and mprof: each one's table
//! ([`crate::cmdline::Spec`]) and the arguments it parses into, with the
//! checks between options the table cannot state (`-e needs a command`).

pub mod cprof;
pub mod mprof;
pub mod prof;
