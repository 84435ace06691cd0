//! NetBSD kgmon(8)'s main line (kgmon.c v1.22) over the kgmon device's
//! files ([`Files`]: a mounted `gmon/` directory, or the device itself in
//! tests): read the state; the wanted state is `off` with `-h`, `on` with
//! `-b`, else unchanged; `-p` halts profiling if it runs and dumps
//! `gmon.out` (with `vmlinux.syms`, or moved to `-N`'s link-time
//! addresses); `-r` zeroes the profile; then the wanted state is set and
//! reported.

use crate::{symbols, CALLED_NOTE};
use anyhow::{anyhow, bail, Context, Result};
use profdev_formats::gmon::{self, Format, GmonOut};
use profdev_symbolize::KernelSymbols;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The kgmon device's files: a mounted `gmon/` directory, or (in tests)
/// the device itself.
pub trait Files {
    /// The contents of `name` (`state`, `gmonparam`, `gmon.out`).
    fn read(&self, name: &str) -> std::io::Result<Vec<u8>>;
    /// Write `verb` and a newline to `ctl`.
    fn ctl(&self, verb: &str) -> std::io::Result<()>;
    /// May we write `ctl`? (NetBSD tested writing the state back.)
    fn writable(&self) -> bool;
    /// Where the files are, for messages.
    fn describe(&self, name: &str) -> String;
}

/// What kgmon was asked to do (its flags).
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `-b`: resume (begin) profiling.
    pub begin: bool,
    /// `-h`: halt profiling (wins over `-b`).
    pub halt: bool,
    /// `-p`: dump the profile to `gmon.out`.
    pub dump: bool,
    /// `-r`: zero the profile (after `-p`).
    pub reset: bool,
    /// `-N system`: the running kernel's image (vmlinux or System.map).
    pub system: Option<PathBuf>,
    /// The mode of the files `-p` writes (they hold kernel addresses).
    pub mode: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    On,
    Off,
    Error,
}

fn read_state(dev: &dyn Files) -> Result<State> {
    let text = dev
        .read("state")
        .map_err(|e| anyhow!("cannot get gmonparam: {}: {e}", dev.describe("state")))?;
    match String::from_utf8_lossy(&text).trim() {
        "on" => Ok(State::On),
        "off" => Ok(State::Off),
        "error" => Ok(State::Error),
        other => bail!(
            "{} holds {other:?}, not on, off or error",
            dev.describe("state")
        ),
    }
}

fn set(dev: &dyn Files, want: State) -> Result<()> {
    let (verb, what) = match want {
        State::On => ("begin", "on"),
        _ => ("halt", "off"),
    };
    dev.ctl(verb)
        .map_err(|e| anyhow!("cannot turn profiling {what}: {e}"))
}

fn param(dev: &dyn Files, name: &str) -> Option<u64> {
    let text = dev.read("gmonparam").ok()?;
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// kgmon's main line (kgmon.c v1.22): `out` gets the state line, `err`
/// the warnings; `-p` writes into `outdir`. `running` gives the running
/// kernel's symbols when `-p` needs them.
pub fn run(
    opts: &Options,
    dev: &dyn Files,
    running: &dyn Fn() -> Result<KernelSymbols>,
    outdir: &Path,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<()> {
    let state = read_state(dev)?;
    let (mut begin, mut halt, mut reset) = (opts.begin, opts.halt, opts.reset);
    let writable = dev.writable();
    if !writable {
        let mut ro = |what: &str| writeln!(err, "kgmon: kernel read-only: {what}");
        if opts.dump && state == State::On {
            ro("data may be inconsistent")?;
        }
        if reset {
            ro("-r supressed")?;
            reset = false;
        }
        if begin {
            ro("-b supressed")?;
            begin = false;
        }
        if halt {
            ro("-h supressed")?;
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
    let mut dumped = Ok(());
    if opts.dump {
        if writable && state == State::On {
            set(dev, State::Off)?;
        }
        dumped = dump(dev, opts, running, outdir, err);
        // A profile that could not be saved is not zeroed.
        reset &= dumped.is_ok();
    }
    if reset {
        dev.ctl("reset")
            .map_err(|e| anyhow!("cannot zero the profile: {e}"))?;
    }
    if writable && want != read_state(dev)? {
        set(dev, want)?;
    }
    let now = read_state(dev)?;
    writeln!(
        out,
        "kgmon: kernel profiling is {}.",
        if now == State::Off { "off" } else { "running" }
    )?;
    dumped
}

/// `profile` with every address moved down by `offset`.
fn relocate(profile: &GmonOut, offset: u64) -> GmonOut {
    let mut g = profile.clone();
    for h in &mut g.histograms {
        h.low_pc = h.low_pc.wrapping_sub(offset);
        h.high_pc = h.high_pc.wrapping_sub(offset);
    }
    for a in &mut g.arcs {
        a.from_pc = a.from_pc.wrapping_sub(offset);
        a.self_pc = a.self_pc.wrapping_sub(offset);
    }
    g
}

/// `-p`: copy gmon.out, write or relocate symbols, report what was lost.
fn dump(
    dev: &dyn Files,
    opts: &Options,
    running: &dyn Fn() -> Result<KernelSymbols>,
    outdir: &Path,
    err: &mut dyn Write,
) -> Result<()> {
    let src = dev.describe("gmon.out");
    let mut bytes = dev
        .read("gmon.out")
        .map_err(|e| anyhow!("cannot read {src}: {e}"))?;
    let decoded =
        gmon::parse(&bytes, gmon::Target::X86_64).with_context(|| format!("{src} is malformed"))?;
    if decoded.gmon.histograms.len() != 1 {
        bail!("{src} does not hold one histogram");
    }
    let running = running()?;
    let dir = profdev_safefile::Dir::open(outdir)?;
    let mut syms = Ok(());
    // The names gprof would drop, written as global symbols.
    let mut renamed = Vec::new();
    match opts.system.as_deref() {
        Some(image) => {
            let syms = KernelSymbols::load(image)?;
            let name = image.display().to_string();
            let theirs = syms.require_text(&name)?.start.0;
            let ours = running.require_text("/proc/kallsyms")?.start.0;
            let offset = ours.wrapping_sub(theirs);
            if offset != 0 {
                let g = relocate(&decoded.gmon, offset);
                bytes = gmon::write(&g, Format::Bsd, gmon::Target::X86_64)
                    .map_err(|e| anyhow!("cannot relocate the profile: {e}"))?;
                writeln!(
                    err,
                    "kgmon: addresses moved by -{offset:#x} (KASLR) to {name}'s link-time addresses"
                )?;
            }
        }
        None => {
            let (elf, names) = symbols::vmlinux_syms_named(&running, &decoded.gmon);
            syms = dir.write_file("vmlinux.syms", &elf, opts.mode);
            renamed = names;
        }
    }
    // Both files hold kernel addresses: written `opts.mode` (0600),
    // through the safe path; each is complete or as it was. gmon.out is
    // tried even if the symbols fail.
    let profile = dir.write_file("gmon.out", &bytes, opts.mode);
    if let Some(n) = param(dev, "saturated").filter(|&n| n > 0) {
        writeln!(
            err,
            "kgmon: {n} histogram counts were lost: cells stop at 65535"
        )?;
    }
    if param(dev, "overflow").is_some_and(|n| n > 0) {
        writeln!(
            err,
            "kgmon: the arc table filled up (tolimit {}): profiling stopped in the error state, \
             and nothing after that was recorded",
            param(dev, "tolimit").unwrap_or(0)
        )?;
    }
    writeln!(err, "kgmon: note: {CALLED_NOTE}")?;
    if let (Ok(()), Ok(()), false) = (&profile, &syms, renamed.is_empty()) {
        writeln!(err, "kgmon: {}", renamed_line(&renamed))?;
    }
    match (profile, syms) {
        (Err(e), Err(s)) => bail!("{e}; {s}"),
        (Err(e), _) | (_, Err(e)) => Err(e.into()),
        _ => Ok(()),
    }
}

/// The line saying that `vmlinux.syms` holds `names` (which gprof drops
/// as local symbols) as global symbols, and the gprof command that reads
/// the profile.
fn renamed_line(names: &[String]) -> String {
    let shown = symbols::examples(names);
    format!(
        "vmlinux.syms holds {} that gprof drops as local symbols ({shown}) as global symbols \
         under the same names, so their time is not charged to the function before; read the \
         profile with: gprof -b vmlinux.syms gmon.out",
        crate::plural(names.len() as u64, "function name")
    )
}

/// kgmon's logic against the real device, in process, fed a replayed
/// sample stream over a small synthetic kernel (below).
///
/// Golden file `tests/golden/kgmon_synthetic.gprof.txt`: what
/// `gprof -b vmlinux.syms gmon.out` prints for the dump that
/// `begin_halt_dump_reset` makes from `KERNEL` and `records()`;
/// `PROFDEV_BLESS=1` rewrites it.
#[cfg(test)]
mod tests {
    use super::*;
    use profdev_core::{CpuMode, KernelPc, KernelText, Record, Sample};
    use profdev_dev::engine::ReplayFactory;
    use profdev_dev::kgmon::{Kgmon, KgmonConfig};
    use profdev_dev::tree::walk;
    use profdev_dev::{Dev, Engine, OpenMode, Qid};
    use profdev_symbolize::KSym;
    use std::process::Command;
    use std::sync::Arc;

    const LO: u64 = 0xffff_ffff_8100_0000;
    /// A small kernel: (offset, type, name).
    const KERNEL: &[(u64, char, &str)] = &[
        (0x000, 'T', "_stext"),
        (0x100, 'T', "entry_SYSCALL_64"),
        (0x200, 'T', "do_syscall_64"),
        (0x300, 'T', "ksys_read"),
        (0x380, 't', "vfs_read"),
        (0x400, 'T', "read_zero"),
        (0x500, 'T', "idle"),
        (0x1000, 'T', "_etext"),
    ];

    fn ksyms(shift: u64) -> KernelSymbols {
        KernelSymbols::from_symbols(
            KERNEL
                .iter()
                .map(|&(off, kind, name)| KSym {
                    addr: LO + off - shift,
                    kind,
                    name: name.into(),
                    module: None,
                })
                .collect(),
        )
    }

    /// `dd if=/dev/zero`-like samples: 30 in read_zero under the syscall
    /// path, 6 in vfs_read, 4 in idle.
    fn records() -> Vec<Record> {
        let s = |ip: u64, chain: &[u64]| {
            Record::Sample(Sample {
                ip: LO + ip,
                mode: CpuMode::Kernel,
                kernel_chain: chain.iter().map(|o| LO + o).collect(),
                ..Sample::default()
            })
        };
        let mut v = Vec::new();
        for i in 0..30 {
            let ip = 0x410 + 4 * (i % 3);
            v.push(s(ip, &[ip, 0x3a5, 0x321, 0x237, 0x141]));
        }
        for _ in 0..6 {
            v.push(s(0x390, &[0x390, 0x321, 0x237, 0x141]));
        }
        for _ in 0..4 {
            v.push(s(0x520, &[0x520]));
        }
        v
    }

    /// The device itself, driven through its files.
    struct DevFiles {
        dev: Kgmon,
        writable: bool,
    }

    impl DevFiles {
        fn new() -> Self {
            let k = ksyms(0);
            let text = k.text().unwrap();
            let functions: Vec<u64> = k.text_symbols().iter().map(|s| s.addr).collect();
            let text = KernelText {
                start: KernelPc(text.start.0),
                end: text.end,
            };
            DevFiles {
                dev: Kgmon::new(
                    KgmonConfig::new(text, &functions),
                    Engine::new(Arc::new(ReplayFactory::new(records()))),
                ),
                writable: true,
            }
        }
    }

    impl Files for DevFiles {
        fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
            let e = walk(&self.dev, Qid::ROOT, name).map_err(std::io::Error::other)?;
            let mut c = self
                .dev
                .open(e.qid, OpenMode::Read)
                .map_err(std::io::Error::other)?;
            let mut out = Vec::new();
            loop {
                let chunk = self
                    .dev
                    .read(&mut c, out.len() as u64, 4096)
                    .map_err(std::io::Error::other)?;
                if chunk.is_empty() {
                    return Ok(out);
                }
                out.extend_from_slice(&chunk);
            }
        }

        fn ctl(&self, verb: &str) -> std::io::Result<()> {
            let e = walk(&self.dev, Qid::ROOT, "ctl").map_err(std::io::Error::other)?;
            let mut c = self
                .dev
                .open(e.qid, OpenMode::Write)
                .map_err(std::io::Error::other)?;
            self.dev
                .write(&mut c, 0, format!("{verb}\n").as_bytes())
                .map(|_| ())
                .map_err(std::io::Error::other)
        }

        fn writable(&self) -> bool {
            self.writable
        }

        fn describe(&self, name: &str) -> String {
            format!("gmon/{name}")
        }
    }

    /// kgmon's flags (`-hrp`, `-N` and its operand) as [`Options`].
    fn opts(flags: &[&str]) -> Options {
        let mut o = Options {
            mode: 0o600,
            ..Options::default()
        };
        let mut flags = flags.iter();
        while let Some(f) = flags.next() {
            for c in f.trim_start_matches('-').chars() {
                match c {
                    'b' => o.begin = true,
                    'h' => o.halt = true,
                    'p' => o.dump = true,
                    'r' => o.reset = true,
                    'N' => o.system = flags.next().map(PathBuf::from),
                    _ => panic!("kgmon has no -{c}"),
                }
            }
        }
        o
    }

    /// The reason once, as `profdev kgmon` prints it (`cmdline::sentence`).
    fn sentence(e: &anyhow::Error) -> String {
        let mut out = String::new();
        for cause in e.chain() {
            let text = cause.to_string();
            if out.is_empty() {
                out = text;
            } else if !out.ends_with(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
        }
        out
    }

    fn kgmon(flags: &[&str], dev: &DevFiles, dir: &Path) -> (String, String) {
        let args = opts(flags);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        run(&args, dev, &|| Ok(ksyms(0)), dir, &mut out, &mut err).unwrap();
        (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    const NOTE: &str = "kgmon: note: gprof's \"called\" column shows sampled arc traversals (the \
        number of samples whose stack held the call), not numbers of calls: read it as a relative \
        weight.\n";

    /// The running kernel of `KERNEL` with its local `vfs_read` a
    /// `.isra.0` clone: gprof drops that name as a local symbol and would
    /// print its 6 samples under `ksys_read`.
    fn cloned_ksyms() -> KernelSymbols {
        KernelSymbols::from_symbols(
            KERNEL
                .iter()
                .map(|&(off, kind, name)| KSym {
                    addr: LO + off,
                    kind,
                    name: if name == "vfs_read" {
                        "vfs_read.isra.0".into()
                    } else {
                        name.into()
                    },
                    module: None,
                })
                .collect(),
        )
    }

    #[test]
    fn clones_keep_their_names_in_vmlinux_syms() {
        let d = tempfile::tempdir().unwrap();
        let dev = DevFiles::new();
        kgmon(&["-b"], &dev, d.path());
        let (mut out, mut err) = (Vec::new(), Vec::new());
        run(
            &opts(&["-hp"]),
            &dev,
            &|| Ok(cloned_ksyms()),
            d.path(),
            &mut out,
            &mut err,
        )
        .unwrap();
        let err = String::from_utf8(err).unwrap();
        assert_eq!(
            err,
            format!(
                "{NOTE}kgmon: vmlinux.syms holds 1 function name that gprof drops as local \
                 symbols (vfs_read.isra.0) as global symbols under the same names, so their time \
                 is not charged to the function before; read the profile with: gprof -b \
                 vmlinux.syms gmon.out\n"
            )
        );
        if profdev_testkit::tools("kgmon's clones read by gprof", &["gprof"]) {
            let g = Command::new("gprof")
                .args(["-b", "-p", "vmlinux.syms", "gmon.out"])
                .current_dir(d.path())
                .output()
                .unwrap();
            assert!(g.status.success(), "{g:?}");
            let flat = String::from_utf8_lossy(&g.stdout);
            // 6 of the 40 samples: 15%.
            let line = flat
                .lines()
                .find(|l| l.ends_with(" vfs_read.isra.0"))
                .unwrap_or_else(|| panic!("{flat}"));
            assert!(line.trim_start().starts_with("15.00 "), "{flat}");
            // None of it under the function before.
            assert!(
                flat.lines()
                    .filter(|l| l.ends_with(" ksys_read"))
                    .all(|l| l.trim_start().starts_with("0.00 ")),
                "{flat}"
            );
        }
    }

    #[test]
    fn begin_halt_dump_reset() {
        let d = tempfile::tempdir().unwrap();
        let dev = DevFiles::new();
        assert_eq!(
            kgmon(&[], &dev, d.path()).0,
            "kgmon: kernel profiling is off.\n"
        );
        assert_eq!(
            kgmon(&["-b"], &dev, d.path()).0,
            "kgmon: kernel profiling is running.\n"
        );
        assert_eq!(
            kgmon(&["-h"], &dev, d.path()).0,
            "kgmon: kernel profiling is off.\n"
        );
        let (out, err) = kgmon(&["-p"], &dev, d.path());
        assert_eq!(out, "kgmon: kernel profiling is off.\n");
        assert_eq!(err, NOTE);
        let bytes = std::fs::read(d.path().join("gmon.out")).unwrap();
        let g = gmon::parse(&bytes, gmon::Target::X86_64).unwrap().gmon;
        let ticks: u64 = g.histograms[0].bins.iter().map(|&b| u64::from(b)).sum();
        assert_eq!(ticks, 40);
        // read_zero <- vfs_read <- ksys_read <- do_syscall_64 <-
        // entry_SYSCALL_64, and vfs_read <- ksys_read <- ...
        let arc = |from: u64, to: u64, count: u64| gmon::Arc {
            from_pc: LO + from,
            self_pc: LO + to,
            count,
        };
        assert_eq!(
            g.arcs,
            vec![
                arc(0x140, 0x200, 36),
                arc(0x234, 0x300, 36),
                arc(0x320, 0x380, 36),
                arc(0x3a4, 0x400, 30),
            ]
        );
        // vmlinux.syms names what gprof needs, and gprof reads the pair.
        if profdev_testkit::tools("kgmon's dump read by gprof", &["gprof"]) {
            let g = Command::new("gprof")
                .args(["-b", "vmlinux.syms", "gmon.out"])
                .current_dir(d.path())
                .output()
                .unwrap();
            assert!(g.status.success(), "{g:?}");
            let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/golden/kgmon_synthetic.gprof.txt");
            profdev_testkit::golden(&golden, &g.stdout);
        }
        // -r zeroes; the state is unchanged.
        let (out, _) = kgmon(&["-rp"], &dev, d.path());
        assert_eq!(out, "kgmon: kernel profiling is off.\n");
        let g = gmon::parse(
            &std::fs::read(d.path().join("gmon.out")).unwrap(),
            gmon::Target::X86_64,
        )
        .unwrap()
        .gmon;
        assert_eq!(g.arcs.len(), 4, "-p comes before -r");
        let (_, _) = kgmon(&["-p"], &dev, d.path());
        let g = gmon::parse(
            &std::fs::read(d.path().join("gmon.out")).unwrap(),
            gmon::Target::X86_64,
        )
        .unwrap()
        .gmon;
        assert!(g.arcs.is_empty());
    }

    #[test]
    fn dump_while_running_halts_then_resumes_and_h_wins() {
        let d = tempfile::tempdir().unwrap();
        let dev = DevFiles::new();
        kgmon(&["-b"], &dev, d.path());
        let (out, _) = kgmon(&["-p"], &dev, d.path());
        assert_eq!(out, "kgmon: kernel profiling is running.\n");
        // The dump saw every sample of the first session: it was halted.
        let g = gmon::parse(
            &std::fs::read(d.path().join("gmon.out")).unwrap(),
            gmon::Target::X86_64,
        )
        .unwrap()
        .gmon;
        assert_eq!(g.arcs[0].count, 36);
        assert_eq!(
            kgmon(&["-bh"], &dev, d.path()).0,
            "kgmon: kernel profiling is off.\n"
        );
    }

    #[test]
    fn read_only_suppresses_changes() {
        let d = tempfile::tempdir().unwrap();
        let mut dev = DevFiles::new();
        kgmon(&["-b"], &dev, d.path());
        dev.writable = false;
        let (out, err) = kgmon(&["-hrp"], &dev, d.path());
        assert_eq!(out, "kgmon: kernel profiling is running.\n");
        assert_eq!(
            err,
            format!(
                "kgmon: kernel read-only: data may be inconsistent\n\
                 kgmon: kernel read-only: -r supressed\n\
                 kgmon: kernel read-only: -h supressed\n{NOTE}"
            )
        );
        assert!(d.path().join("gmon.out").exists());
    }

    #[test]
    fn n_moves_addresses_to_the_image() {
        let d = tempfile::tempdir().unwrap();
        let dev = DevFiles::new();
        kgmon(&["-b"], &dev, d.path());
        kgmon(&["-h"], &dev, d.path());
        // A System.map of the same kernel linked 2 MiB lower (KASLR).
        let shift = 0x20_0000;
        let map: String = KERNEL
            .iter()
            .map(|&(off, kind, name)| format!("{:016x} {kind} {name}\n", LO + off - shift))
            .collect();
        let map_path = d.path().join("System.map");
        std::fs::write(&map_path, map).unwrap();
        let args = opts(&["-p", "-N", map_path.to_str().unwrap()]);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        run(&args, &dev, &|| Ok(ksyms(0)), d.path(), &mut out, &mut err).unwrap();
        let err = String::from_utf8(err).unwrap();
        assert!(
            err.starts_with(&format!(
                "kgmon: addresses moved by -0x200000 (KASLR) to {}'s link-time addresses\n",
                map_path.display()
            )),
            "{err}"
        );
        assert!(!d.path().join("vmlinux.syms").exists());
        let g = gmon::parse(
            &std::fs::read(d.path().join("gmon.out")).unwrap(),
            gmon::Target::X86_64,
        )
        .unwrap()
        .gmon;
        assert_eq!(g.histograms[0].low_pc, LO - shift);
        assert_eq!(g.arcs[0].self_pc, LO + 0x200 - shift);
    }

    #[test]
    fn unwritable_output_is_a_sentence() {
        let dev = DevFiles::new();
        let args = opts(&["-p"]);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let e = run(
            &args,
            &dev,
            &|| Ok(ksyms(0)),
            Path::new("/nonexistent/dir"),
            &mut out,
            &mut err,
        )
        .unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "cannot open the directory /nonexistent/dir: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn a_missing_system_file_is_one_sentence() {
        let d = tempfile::tempdir().unwrap();
        let dev = DevFiles::new();
        kgmon(&["-b"], &dev, d.path());
        kgmon(&["-h"], &dev, d.path());
        let args = opts(&["-p", "-N", "/nonexistent/vmlinux"]);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let e = run(&args, &dev, &|| Ok(ksyms(0)), d.path(), &mut out, &mut err).unwrap_err();
        // The reason once, not once per link of the error chain.
        assert_eq!(
            sentence(&e),
            "cannot read /nonexistent/vmlinux: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn relocation_moves_every_address() {
        let g = GmonOut {
            histograms: vec![gmon::Histogram {
                low_pc: 0x5000,
                high_pc: 0x6000,
                prof_rate: 100,
                dimension: gmon::SECONDS,
                dimension_abbrev: b's',
                bins: vec![0; 4],
            }],
            arcs: vec![gmon::Arc {
                from_pc: 0x5010,
                self_pc: 0x5400,
                count: 2,
            }],
            ..GmonOut::default()
        };
        let r = relocate(&g, 0x1000);
        assert_eq!(
            (r.histograms[0].low_pc, r.histograms[0].high_pc),
            (0x4000, 0x5000)
        );
        assert_eq!(
            (r.arcs[0].from_pc, r.arcs[0].self_pc, r.arcs[0].count),
            (0x4010, 0x4400, 2)
        );
        assert_eq!(r.histograms[0].bins, g.histograms[0].bins);
    }
}
