//! Text reports in the classic tools' exact formats.
//!
//! Each module is a pure function from decoded data (and symbols, as plain
//! `(address, name)` pairs) to the text the original tool printed.

#![forbid(unsafe_code)]

pub mod diff;
pub mod kprof;
pub mod mprof;
pub mod outside;
pub mod prfpr;
pub mod prof;
pub mod samples;
pub mod source;
pub mod stat;
pub mod view;
