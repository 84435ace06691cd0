//! `profdev kgmon [-bhpr] [-N system]`: NetBSD's kgmon(8) over the kgmon
//! device's files.
//!
//! It drives `gmon/` in the mounted device tree (`$PROFDEV_MOUNT`, default
//! `/run/profdev`), starting a server there in the background, as
//! `profdev mount -b` does (and saying so), when none is mounted. The order of operations and the
//! messages are NetBSD's (kgmon.c v1.22): read the state; the wanted state
//! is `off` with `-h`, `on` with `-b`, else unchanged; `-p` halts
//! profiling if it runs, dumps `./gmon.out`; `-r` zeroes the profile;
//! then the wanted state is set, and `kgmon: kernel profiling is running.`
//! (or `off.`) is printed.
//!
//! Without `-N`, `-p` also writes `./vmlinux.syms`: an ELF carrying the
//! running kernel's text symbols from /proc/kallsyms, so that
//! `gprof -b vmlinux.syms gmon.out` works without a vmlinux. It holds the
//! functions this gmon.out needs (each with the symbol that ends it), not
//! all 100,000-odd: gprof searches the symbol table linearly for every
//! symbol, which takes it minutes with the whole table. gprof drops a
//! local function whose name holds a `$` or a `.` suffix other than `.N`,
//! `.clone.N` and `.constprop.N` (the kernel's `.isra.0`, `.part.0`,
//! `.cold`, `.lto_priv.0` clones) and prints its time under the function
//! before it; in vmlinux.syms every local function whose name holds `.` or
//! `$` is a global symbol under its own name (no name is changed: the
//! reverse mapping is the identity, only the binding differs from
//! kallsyms' `t`), so `finish_task_switch.isra.0` keeps its time, and one
//! line on stderr names the ones gprof would have dropped and prints
//! `gprof -b vmlinux.syms gmon.out`. With
//! `-N system` (a vmlinux or System.map of the running kernel), the
//! addresses in gmon.out are moved by the KASLR offset to that image's
//! link-time addresses, for `gprof -b system gmon.out`.
//!
//! gmon.out and vmlinux.syms hold kernel addresses: they are written 0600
//! through `profdev_safefile` (a unique temporary in the directory,
//! renamed over the name; a symbolic link there is replaced, never
//! followed). If either cannot be written (a full disk) it is left
//! complete or as it was, the error names it, `-r` does not zero the
//! profile, and the exit status is 1.

use crate::output;
use anyhow::{anyhow, bail, Result};
use clap::Parser;
use profdev_formats::gmon;
use profdev_gprof::kgmon::{run, Files, Options};
use profdev_symbolize::KernelSymbols;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Where the device tree is mounted unless `$PROFDEV_MOUNT` says otherwise.
pub const DEFAULT_MOUNT: &str = crate::mount::DEFAULT_DIR;

/// Control kernel profiling (NetBSD kgmon): begin, halt, dump to
/// ./gmon.out, reset.
#[derive(Parser, Debug)]
#[command(
    name = "profdev kgmon",
    version,
    disable_help_flag = true,
    after_help = format!(
        "Reads and writes the kgmon device under $PROFDEV_MOUNT/gmon (default {DEFAULT_MOUNT}/gmon); \
         starts a server with `profdev mount -b` if none is mounted.\n\n\
         Note: {}", profdev_gprof::CALLED_NOTE)
)]
pub(crate) struct Args {
    /// Resume (begin) profiling.
    #[arg(short = 'b')]
    begin: bool,
    /// Halt profiling (wins over -b).
    #[arg(short = 'h')]
    halt: bool,
    /// Dump the profile to ./gmon.out (halting profiling while doing so);
    /// without -N also write ./vmlinux.syms.
    #[arg(short = 'p')]
    dump: bool,
    /// Zero the profile (after -p).
    #[arg(short = 'r')]
    reset: bool,
    /// The running kernel's image (vmlinux or System.map): gmon.out gets its
    /// link-time addresses, and no vmlinux.syms is written.
    #[arg(short = 'N', value_name = "system")]
    system: Option<PathBuf>,
}

impl Args {
    /// What the flags ask for; the files hold kernel addresses.
    fn options(&self) -> Options {
        Options {
            begin: self.begin,
            halt: self.halt,
            dump: self.dump,
            reset: self.reset,
            system: self.system.clone(),
            mode: output::KERNEL_MODE,
        }
    }
}

const USAGE: &str = "usage: profdev kgmon [-bhpr] [-N system]";

pub fn main(args: Vec<OsString>) -> ExitCode {
    if args.iter().any(|a| a == "--help") {
        let _ = <Args as clap::CommandFactory>::command().print_long_help();
        return ExitCode::SUCCESS;
    }
    let args =
        match Args::try_parse_from(std::iter::once(OsString::from("profdev kgmon")).chain(args)) {
            Ok(a) => a,
            Err(_) => {
                eprintln!("{USAGE}");
                return ExitCode::from(1);
            }
        };
    let result = mounted().and_then(|dev| {
        let mut out = std::io::stdout().lock();
        let mut err = std::io::stderr().lock();
        run(
            &args.options(),
            &dev,
            &|| Ok(KernelSymbols::running()?),
            Path::new("."),
            &mut out,
            &mut err,
        )
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kgmon: {}", crate::cmdline::sentence(&e));
            ExitCode::from(1)
        }
    }
}

/// The `gmon/` directory of a mounted device tree.
pub struct Mounted {
    dir: PathBuf,
}

impl Files for Mounted {
    /// A regular file only (a FIFO or device put in its place is refused
    /// without blocking), no longer than its header allows: gmon.out by
    /// `gmon::max_len`, the small text files by 1 MiB.
    fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
        use profdev_symbolize::open::{open_bounded, Follow};
        use std::io::Read;
        let path = self.dir.join(name);
        let (file, size) = open_bounded(&path, u64::MAX, Follow::Yes).map_err(|e| e.into_io())?;
        let mut file = file;
        let mut bytes = Vec::new();
        let target = gmon::Target::X86_64;
        (&mut file)
            .take(target.bsd_header_size() as u64)
            .read_to_end(&mut bytes)?;
        let limit = if name == "gmon.out" {
            gmon::max_len(&bytes, target)
        } else {
            1 << 20
        };
        let too_long = |len: u64| {
            std::io::Error::other(format!(
                "it is {len} bytes, more than its header allows ({limit})"
            ))
        };
        if size > limit {
            return Err(too_long(size));
        }
        file.take((limit + 1).saturating_sub(bytes.len() as u64))
            .read_to_end(&mut bytes)?;
        if bytes.len() as u64 > limit {
            return Err(too_long(bytes.len() as u64));
        }
        Ok(bytes)
    }

    fn ctl(&self, verb: &str) -> std::io::Result<()> {
        let mut f = output::open_ctl(&self.dir.join("ctl"))?;
        f.write_all(format!("{verb}\n").as_bytes())
    }

    fn writable(&self) -> bool {
        output::open_ctl(&self.dir.join("ctl")).is_ok()
    }

    fn describe(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// The kgmon device of the mounted tree, mounting one if needed (the
/// mount says so on stderr).
fn mounted() -> Result<Mounted> {
    let root = profdev_fuse::mount_dir();
    let dir = crate::mount::ensure_mounted().map_err(|e| {
        anyhow!(
            "no device server is mounted on {} and none could be started: {}",
            root.display(),
            crate::cmdline::sentence(&e)
        )
    })?;
    let gmon = dir.join("gmon");
    if !gmon.join("state").exists() {
        bail!(
            "the device server on {} has no gmon directory (an older profdev?)",
            dir.display()
        );
    }
    Ok(Mounted { dir: gmon })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_become_options() {
        let a = Args::try_parse_from(["kgmon", "-bp", "-N", "/boot/System.map"]).unwrap();
        let o = a.options();
        assert!(o.begin && o.dump && !o.halt && !o.reset);
        assert_eq!(o.system.as_deref(), Some(Path::new("/boot/System.map")));
        assert_eq!(o.mode, 0o600);
        assert!(Args::try_parse_from(["kgmon", "-x"]).is_err());
    }
}
