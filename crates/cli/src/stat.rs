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
use std::ffi::OsString;
use std::fmt::Write as _;
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

/// One device's `name value` lines.
type Device = (String, Vec<(String, String)>);

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

/// `name value` lines; a line without a value keeps an empty one.
fn parse(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap_or((l, ""));
            (k.to_string(), v.trim().to_string())
        })
        .collect()
}

/// Keys down, devices across; keys in the first device's order, then any
/// another adds.
fn table(devices: &[Device]) -> String {
    let mut keys: Vec<&str> = Vec::new();
    for (_, pairs) in devices {
        for (k, _) in pairs {
            if !keys.contains(&k.as_str()) {
                keys.push(k);
            }
        }
    }
    let key_width = keys.iter().map(|k| k.len()).max().unwrap_or(0).max(3);
    let value = |d: &Device, k: &str| -> String {
        d.1.iter()
            .find(|(kk, _)| kk == k)
            .map_or_else(|| "-".to_string(), |(_, v)| v.clone())
    };
    let widths: Vec<usize> = devices
        .iter()
        .map(|d| {
            keys.iter()
                .map(|k| value(d, k).len())
                .chain([d.0.len()])
                .max()
                .unwrap_or(1)
        })
        .collect();
    let mut s = format!("{:<key_width$}", "key");
    for (d, w) in devices.iter().zip(&widths) {
        let _ = write!(s, "  {:>w$}", d.0);
    }
    s.push('\n');
    for k in &keys {
        let _ = write!(s, "{k:<key_width$}");
        for (d, w) in devices.iter().zip(&widths) {
            let _ = write!(s, "  {:>w$}", value(d, k));
        }
        s.push('\n');
    }
    s
}

/// `{"kprof": {"state": "on", "samples": 12, ...}, ...}`: values that are
/// decimal numbers are JSON numbers, the others strings.
fn json(devices: &[Device]) -> String {
    let mut s = String::from("{");
    for (i, (name, pairs)) in devices.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "\n  {}: {{", json_string(name));
        for (j, (k, v)) in pairs.iter().enumerate() {
            if j > 0 {
                s.push(',');
            }
            let value = if !v.is_empty() && v.len() < 20 && v.bytes().all(|b| b.is_ascii_digit()) {
                v.trim_start_matches('0').to_string()
            } else {
                json_string(v)
            };
            let value = if value.is_empty() { "0".into() } else { value };
            let _ = write!(s, "\n    {}: {value}", json_string(k));
        }
        s.push_str("\n  }");
    }
    s.push_str("\n}\n");
    s
}

/// A JSON string literal.
fn json_string(v: &str) -> String {
    let mut s = String::from("\"");
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices() -> Vec<Device> {
        vec![
            (
                "kprof".into(),
                parse("state on\nsamples 1200\nlost 0\nuptime_ms 007\n"),
            ),
            (
                "gmon".into(),
                parse("state error\nsamples 3\nnote a \"b\"\n"),
            ),
        ]
    }

    #[test]
    fn table_has_a_row_per_key_and_a_column_per_device() {
        let t = table(&devices());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["key", "kprof", "gmon"]
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["state", "on", "error"]
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["samples", "1200", "3"]
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            ["lost", "0", "-"]
        );
        assert_eq!(lines.len(), 6);
    }

    #[test]
    fn json_numbers_and_escaped_strings() {
        let j = json(&devices());
        assert!(j.contains("\"samples\": 1200"), "{j}");
        assert!(j.contains("\"uptime_ms\": 7"), "{j}");
        assert!(j.contains("\"lost\": 0"), "{j}");
        assert!(j.contains("\"state\": \"on\""), "{j}");
        assert!(j.contains("\"note\": \"a \\\"b\\\"\""), "{j}");
        assert_eq!(json_string("a\nb"), "\"a\\u000ab\"");
    }
}
