//! `profdev unmount [DIR]`: unmount the device server at DIR (default
//! `$PROFDEV_MOUNT`, else /run/profdev: the directory `profdev mount`
//! and the other commands use).
//!
//! The mount is detached lazily: files held open there keep working until
//! closed, and then the server exits. A dead mount, left by a server that
//! was killed, is cleared, with a message saying so. DIR with nothing
//! mounted, or with something other than profdev mounted, is an error.
//! A server started with `profdev mount -b` logged to `DIR.log`: unmount
//! leaves it (it may hold what went wrong) and says where it is. See
//! `profdev mount`.

use clap::Parser;
use profdev_fuse::Unmounted;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Unmount the profdev device server at DIR.
#[derive(Parser, Debug)]
#[command(name = "profdev unmount", version)]
pub(crate) struct Args {
    /// The mount point (default $PROFDEV_MOUNT, else /run/profdev).
    #[arg(value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    let args = match crate::cmdline::parse::<Args>("profdev unmount", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let dir = args.dir.unwrap_or_else(profdev_fuse::mount_dir);
    // Where a background server's log is, before the mount goes.
    let log = profdev_fuse::log_path(&profdev_fuse::resolve(&dir));
    match profdev_fuse::unmount(&dir) {
        Ok(done) => {
            if done == Unmounted::ClearedDead {
                eprintln!(
                    "profdev: cleared a dead mount at {} (its server had died)",
                    dir.display()
                );
            }
            say_log(&log);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("profdev unmount: {e}");
            ExitCode::from(1)
        }
    }
}

/// Say where the server's log stays, if there is one.
fn say_log(log: &Path) {
    if std::fs::symlink_metadata(log).is_ok_and(|m| m.is_file()) {
        eprintln!(
            "profdev: the server's log stays in {} (remove it when done)",
            log.display()
        );
    }
}
