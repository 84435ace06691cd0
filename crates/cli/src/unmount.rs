//! `profdev unmount [DIR]`: unmount the device server at DIR (default
//! /run/profdev).
//!
//! The mount is detached lazily: files held open there keep working until
//! closed, and then the server exits. A dead mount, left by a server that
//! was killed, is cleared, with a message saying so. DIR with nothing
//! mounted, or with something other than profdev mounted, is an error.
//! See `profdev mount`.

use crate::mount::DEFAULT_DIR;
use clap::Parser;
use profdev_fuse::Unmounted;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

/// Unmount the profdev device server at DIR.
#[derive(Parser, Debug)]
#[command(name = "profdev unmount", version)]
pub(crate) struct Args {
    /// The mount point.
    #[arg(value_name = "DIR", default_value = DEFAULT_DIR)]
    dir: PathBuf,
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    let args = match crate::cmdline::parse::<Args>("profdev unmount", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match profdev_fuse::unmount(&args.dir) {
        Ok(Unmounted::Detached) => ExitCode::SUCCESS,
        Ok(Unmounted::ClearedDead) => {
            eprintln!(
                "profdev: cleared a dead mount at {} (its server had died)",
                args.dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("profdev unmount: {e}");
            ExitCode::from(1)
        }
    }
}
