//! `profdev kgmon [-bhpr] [-N system]`: NetBSD's kgmon(8) over the kgmon
//! device's files.
//!
//! It drives `gmon/` in the mounted device tree (`$PROFDEV_MOUNT`, default
//! `/run/profdev`), starting a server there with `profdev mount -b` (and
//! saying so) when none is mounted. The order of operations and the
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
//! symbol, which takes it minutes with the whole table. With
//! `-N system` (a vmlinux or System.map of the running kernel), the
//! addresses in gmon.out are moved by the KASLR offset to that image's
//! link-time addresses, for `gprof -b system gmon.out`.

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use profdev_formats::gmon::{self, Format};
use profdev_formats::symelf;
use profdev_symbolize::KernelSymbols;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Where the device tree is mounted unless `$PROFDEV_MOUNT` says otherwise.
pub const DEFAULT_MOUNT: &str = "/run/profdev";

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
         Note: {}", crate::gmon::CALLED_NOTE)
)]
struct Args {
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
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kgmon: {e:#}");
            ExitCode::from(1)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    On,
    Off,
    Error,
}

/// The kgmon device's directory in a mounted tree.
struct Device {
    dir: PathBuf,
}

impl Device {
    fn state(&self) -> Result<State> {
        let path = self.dir.join("state");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot get gmonparam: {}", path.display()))?;
        match text.trim() {
            "on" => Ok(State::On),
            "off" => Ok(State::Off),
            "error" => Ok(State::Error),
            other => bail!("{} holds {other:?}, not on, off or error", path.display()),
        }
    }

    /// Can we write the control file (NetBSD tested writing the state back)?
    fn writable(&self) -> bool {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("ctl"))
            .is_ok()
    }

    fn ctl(&self, verb: &str) -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("ctl"))?;
        f.write_all(format!("{verb}\n").as_bytes())
    }

    fn set(&self, want: State) -> Result<()> {
        let (verb, what) = match want {
            State::On => ("begin", "on"),
            _ => ("halt", "off"),
        };
        self.ctl(verb)
            .map_err(|e| anyhow!("cannot turn profiling {what}: {e}"))
    }

    fn param(&self, name: &str) -> Option<u64> {
        let text = std::fs::read_to_string(self.dir.join("gmonparam")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }
}

fn mount_dir() -> PathBuf {
    std::env::var_os("PROFDEV_MOUNT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_MOUNT))
}

/// The kgmon device of the mounted tree, mounting one if needed.
fn device() -> Result<Device> {
    let root = mount_dir();
    let dir = root.join("gmon");
    if dir.join("state").exists() {
        return Ok(Device { dir });
    }
    let exe = std::env::current_exe().context("cannot find the profdev binary")?;
    let out = std::process::Command::new(&exe)
        .arg("mount")
        .arg("-b")
        .arg(&root)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            anyhow!(
                "no device server is mounted on {} and none could be started: {e}",
                root.display()
            )
        })?;
    if !out.status.success() || !dir.join("state").exists() {
        let why = String::from_utf8_lossy(&out.stderr);
        let why = why.trim();
        bail!(
            "no device server is mounted on {} and none could be started{}",
            root.display(),
            if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            }
        );
    }
    eprintln!(
        "kgmon: no device server was mounted on {}; started one in the background (profdev mount -b {})",
        root.display(),
        root.display()
    );
    Ok(Device { dir })
}

fn run(args: &Args) -> Result<()> {
    let dev = device()?;
    let state = dev.state()?;
    let (mut begin, mut halt, mut reset) = (args.begin, args.halt, args.reset);
    let writable = dev.writable();
    if !writable {
        let ro = |what: &str| eprintln!("kgmon: kernel read-only: {what}");
        if args.dump && state == State::On {
            ro("data may be inconsistent");
        }
        if reset {
            ro("-r supressed");
            reset = false;
        }
        if begin {
            ro("-b supressed");
            begin = false;
        }
        if halt {
            ro("-h supressed");
            halt = false;
        }
    }
    let want = if halt {
        State::Off
    } else if begin {
        State::On
    } else {
        state
    };
    if args.dump {
        if writable && state == State::On {
            dev.set(State::Off)?;
        }
        dump(&dev, args.system.as_deref())?;
    }
    if reset {
        dev.ctl("reset")
            .map_err(|e| anyhow!("cannot zero the profile: {e}"))?;
    }
    if writable && want != dev.state()? {
        dev.set(want)?;
    }
    let now = dev.state()?;
    println!(
        "kgmon: kernel profiling is {}.",
        if now == State::Off { "off" } else { "running" }
    );
    Ok(())
}

/// `-p`: copy gmon.out, write or relocate symbols, report what was lost.
fn dump(dev: &Device, system: Option<&Path>) -> Result<()> {
    let src = dev.dir.join("gmon.out");
    let mut bytes =
        std::fs::read(&src).with_context(|| format!("cannot read {}", src.display()))?;
    let decoded = gmon::parse(&bytes, gmon::Target::X86_64)
        .with_context(|| format!("{} is malformed", src.display()))?;
    if decoded.gmon.histograms.len() != 1 {
        bail!("{} does not hold one histogram", src.display());
    }
    let running = KernelSymbols::running()?;
    match system {
        Some(image) => {
            let syms = KernelSymbols::load(image)?;
            let name = image.display().to_string();
            let theirs = syms.require_text(&name)?.start.0;
            let ours = running.require_text("/proc/kallsyms")?.start.0;
            let offset = ours.wrapping_sub(theirs);
            if offset != 0 {
                let mut g = decoded.gmon.clone();
                for h in &mut g.histograms {
                    h.low_pc = h.low_pc.wrapping_sub(offset);
                    h.high_pc = h.high_pc.wrapping_sub(offset);
                }
                for a in &mut g.arcs {
                    a.from_pc = a.from_pc.wrapping_sub(offset);
                    a.self_pc = a.self_pc.wrapping_sub(offset);
                }
                bytes = gmon::write(&g, Format::Bsd, gmon::Target::X86_64)
                    .map_err(|e| anyhow!("cannot relocate the profile: {e}"))?;
                eprintln!(
                    "kgmon: addresses moved by -{offset:#x} (KASLR) to {name}'s link-time addresses"
                );
            }
        }
        None => {
            let elf = vmlinux_syms(&running, &decoded.gmon);
            std::fs::write("vmlinux.syms", elf)
                .map_err(|e| anyhow!("cannot open `vmlinux.syms': {e}"))?;
        }
    }
    std::fs::write("gmon.out", &bytes).map_err(|e| anyhow!("cannot open `gmon.out': {e}"))?;
    if let Some(n) = dev.param("saturated").filter(|&n| n > 0) {
        eprintln!("kgmon: {n} histogram counts were lost: cells stop at 65535");
    }
    if dev.param("overflow").is_some_and(|n| n > 0) {
        eprintln!(
            "kgmon: the arc table filled up (tolimit {}): profiling stopped in the error state, \
             and nothing after that was recorded",
            dev.param("tolimit").unwrap_or(0)
        );
    }
    eprintln!("kgmon: note: {}", crate::gmon::CALLED_NOTE);
    Ok(())
}

/// `vmlinux.syms` for `profile`: the running kernel's text symbols that
/// the profile needs (see `symelf::used_by`), as an ELF whose `.text`
/// covers the histogram.
pub fn vmlinux_syms(running: &KernelSymbols, profile: &gmon::GmonOut) -> Vec<u8> {
    let list: Vec<(u64, char, &str)> = running
        .text_symbols()
        .iter()
        .map(|s| (s.addr, s.kind, s.name.as_str()))
        .collect();
    let text = profile
        .histograms
        .first()
        .map_or(0..0, |h| h.low_pc..h.high_pc);
    symelf::from_nm(text, &symelf::used_by(&list, profile))
}
