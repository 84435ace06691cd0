//! profdev's manual, as pure formatting: what the program and its crates
//! already say turned into man pages and shell completions, so that none
//! can drift from the code. The `profdev` binary hands in its command
//! table ([`Command`]: each command's clap description and module source)
//! and writes what comes out.
//!
//! * [`mdroff`]: markdown, as the module docs are written, to man(7) roff.
//! * [`pages`]: every page. Section 1, `profdev(1)` (`man/profdev.1` with
//!   the list of commands) and one page per command, `profdev-NAME(1)`:
//!   NAME from the table, SYNOPSIS and OPTIONS from the command's
//!   `clap::Command`, DESCRIPTION and the sections after it from its
//!   module doc; a classic command also gets `NAME(1)`, a `.so` link.
//!   Section 3, `profdev_profil(3)` (roff, `man/profdev_profil.3`);
//!   sections 4 and 5, the devices and file formats ([`DOC_PAGES`]), from
//!   their modules' docs. Each page but a link gets a SEE ALSO of the
//!   pages it mentions.
//! * [`completions`]: clap_complete's scripts, with the classic names.

#![forbid(unsafe_code)]

pub mod completions;
pub mod mdroff;
mod pages;

pub use pages::{pages, Command, DocPage, Page, DOC_PAGES, ROFF_PAGES};
