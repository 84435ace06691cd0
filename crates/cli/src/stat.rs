//! `profdev stat [--json] [DIR] [--agent [STATE]]`: every device's health,
//! from the mount's `stat/` files, and the agent's.
//!
//! Reads each file of DIR/stat (DIR: `$PROFDEV_MOUNT`, else /run/profdev)
//! and prints one row per key and one column per device; with `--json`,
//! one object keyed by device, each holding its keys in the file's order,
//! numbers as JSON numbers. The keys are the device kit's
//! (`profdev_dev::health`). It never starts a device server: with none
//! mounted at DIR it says so and how to start one: `profdev mount -b DIR`
//! when that would work (a missing DIR is created), else why not and what
//! will (never a mount that would hide a directory's files).
//!
//! Without DIR (and without `$PROFDEV_MOUNT`), the health of `profdev
//! agent` (/var/lib/profdev-agent/health) is added as columns `agent` and
//! `agent.DESTINATION` when present; `--agent [STATE]` shows only it, from
//! the state directory STATE.

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use profdev_fuse::MountState;
use profdev_report::stat::{json, parse, table, Device};
use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Print the health of every device of a mounted device server: state,
/// rates, samples, lost and throttled records, unwind failures, symbol
/// misses, sessions, memory and time sampled.
#[derive(Parser, Debug)]
#[command(name = "profdev stat", version)]
pub(crate) struct Args {
    /// One JSON object keyed by device instead of a table.
    #[arg(long)]
    json: bool,
    /// The mount (default $PROFDEV_MOUNT, else /run/profdev).
    #[arg(value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Only the agent's health, from its state directory (default /var/lib/profdev-agent).
    #[arg(long, value_name = "STATE", num_args = 0..=1, default_missing_value = profdev_agent::health::DEFAULT_STATE_DIR)]
    agent: Option<PathBuf>,
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::cmdline::parse::<Args>("profdev stat", args) {
        Ok(args) => crate::cmdline::finish("profdev stat", run(&args)),
        Err(code) => code,
    }
}

fn run(args: &Args) -> Result<ExitCode> {
    let default = args.dir.is_none() && std::env::var_os(profdev_fuse::MOUNT_VAR).is_none();
    let agent =
        profdev_agent::health::for_stat(args.agent.as_deref(), default).map_err(|e| anyhow!(e))?;
    let dir = args.dir.clone().unwrap_or_else(profdev_fuse::mount_dir);
    let mounted =
        args.agent.is_none() && profdev_fuse::state(&dir)? == MountState::Profdev { alive: true };
    if !mounted && agent.is_none() {
        bail!(
            "no device server is mounted at {} ({})",
            dir.display(),
            profdev_fuse::how_to_mount(&dir)
        );
    }
    let mut devices = if mounted {
        read_all(&dir.join("stat"))?
    } else {
        Vec::new()
    };
    devices.extend(agent.unwrap_or_default());
    let text = if args.json {
        json(&devices)
    } else {
        table(&devices)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Every file of the `stat` directory, in listing order.
fn read_all(stat: &Path) -> Result<Vec<Device>> {
    let refused = |e: &std::io::Error| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            " (the mount lets root, its owner and the users it names read it)"
        } else {
            ""
        }
    };
    let entries = std::fs::read_dir(stat)
        .map_err(|e| anyhow::anyhow!("cannot list {}: {e}{}", stat.display(), refused(&e)))?;
    let mut names = Vec::new();
    for e in entries {
        let e = e.with_context(|| format!("cannot list {}", stat.display()))?;
        names.push(e.file_name().to_string_lossy().into_owned());
    }
    let mut devices = Vec::new();
    for name in names {
        let path = stat.join(&name);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}{}", path.display(), refused(&e)))?;
        devices.push((name, parse(&text)));
    }
    Ok(devices)
}
