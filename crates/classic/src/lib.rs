//! The Inferno-style commands' work between their command line and their
//! output, so that the `profdev` binary only parses, calls and prints:
//!
//! * [`cmdline`]: each classic command's command line as one table, whence
//!   its getopt-style parser (with the classic messages) and its clap
//!   command (help, man page, completions); [`args`]: prof's, cprof's and
//!   mprof's tables and the arguments they parse into;
//! * [`prof`]: the prof device's records, read through its files, and the
//!   listing of their histograms by function and line from each module's
//!   ELF file;
//! * [`mprof`]: mprof's tables, leaks, pprof and DHAT sites from the
//!   counted allocation sites, and what a program's allocator lets mprof
//!   reach;
//! * [`cprof`]: cprof's runs, its counted modules as lines, and its `.prf`
//!   records;
//! * [`program`]: whether the program a command runs is statically linked.
//!
//! Notes for the user (a module without debug information, a source file
//! not found) are handed to a callback, one sentence each, prefixed with
//! the command's name, as the command prints them.

#![forbid(unsafe_code)]

pub mod args;
pub mod cmdline;
pub mod cprof;
pub mod mprof;
pub mod mprof_scan;
pub mod prof;
pub mod program;
