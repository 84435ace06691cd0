//! What every clap-parsed subcommand does at its edges: parse (help and
//! usage errors printed by clap, exit 0 or 2), and turn an error into one
//! line `NAME: sentence` with exit status 1.

use std::ffi::OsString;
use std::process::ExitCode;

/// Parse `args` (those after the subcommand's name) as `A`, or the exit
/// status to return after clap has printed help or a usage error.
pub fn parse<A: clap::Parser>(name: &str, args: Vec<OsString>) -> Result<A, ExitCode> {
    A::try_parse_from(std::iter::once(OsString::from(name)).chain(args)).map_err(|e| {
        let _ = e.print();
        ExitCode::from(if e.use_stderr() { 2 } else { 0 })
    })
}

/// The exit status of a run: its own, or 1 after printing the error as
/// `NAME: sentence`.
pub fn finish(name: &str, result: anyhow::Result<ExitCode>) -> ExitCode {
    result.unwrap_or_else(|e| {
        eprintln!("{name}: {e:#}");
        ExitCode::from(1)
    })
}
