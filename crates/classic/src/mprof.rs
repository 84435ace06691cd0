//! mprof's work between the counts and the output: the modules read back
//! from a prof device in memory mode ([`read_dev`], [`read_mounted`]),
//! completed from the library's reports ([`complete`]); their sites
//! attributed to lines and functions through each module's ELF file into
//! the tables, the leaks, and pprof's and DHAT's sites ([`output`]); what
//! a program's own allocator leaves out of mprof's reach
//! ([`own_allocator`], [`check_counted`]); a run's private device
//! ([`private_device`], [`through_device`]) and `-p PID`'s attach
//! ([`run_attached`]).

use crate::args::mprof::Args;
use crate::prof::{ctl, module_opened, read_file, source_lines, ElfMap};
use anyhow::{anyhow, bail, Context as _, Result};
use profdev_dev::engine::ReplayFactory;
use profdev_dev::prof::{MemoryModule, Prof};
use profdev_dev::{Dev, DirEntry, Engine, Qid};
use profdev_formats::dhat::{DhatCounts, DhatRun, DhatSite};
use profdev_formats::pprof::heap::{self, HeapFrame, HeapSite, HeapStack};
use profdev_mprof::{merge, Module, Report, Stack};
use profdev_report::mprof::{
    attribute, format, format_estimates, format_leaks, format_temporary, Estimate, Leak,
    ModuleReport, Options, Temporary,
};
use profdev_report::prof::SourceMap;
use profdev_sample::job::signal_name;
use profdev_symbolize::ElfObject;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::Arc;

mod attach;
pub mod objects;
pub mod show;
pub mod system;

pub use attach::{run_attached, AttachRun};

/// Allocators that, linked into a program, take its allocations away from
/// the C library's malloc.
pub const OWN_ALLOCATORS: &[&str] = &[
    "_rjem_malloc",
    "_rjem_mallocx",
    "je_malloc",
    "je_mallocx",
    "mi_malloc",
    "tc_malloc",
    "rpmalloc",
    "snmalloc_malloc",
];

/// How [`own_allocator`] names a Rust `#[global_allocator]`.
pub const RUST_GLOBAL_ALLOCATOR: &str = "a Rust #[global_allocator]";

/// The allocator program `obj` carries, if any: a symbol of
/// [`OWN_ALLOCATORS`], its own `malloc`, or a Rust `#[global_allocator]`
/// ([`RUST_GLOBAL_ALLOCATOR`]); for [`check_counted`] after the run.
pub fn own_allocator(obj: &ElfObject) -> Option<String> {
    // The tables' symbols, by address (those `.eh_frame` adds are never
    // the table's: not built).
    let syms: Vec<_> = obj
        .symbols()
        .iter()
        .filter(|s| s.origin == profdev_symbolize::SymOrigin::Table)
        .collect();
    if let Some(s) = syms
        .iter()
        .find(|s| OWN_ALLOCATORS.contains(&s.mangled.as_str()) || s.mangled == "malloc")
    {
        return Some(s.mangled.clone());
    }
    // Rust: the allocator shim `__rust_alloc` (plain, or v0-mangled as
    // `__rustc::__rust_alloc`) calls std's `__rdl_alloc` (malloc) unless a
    // `#[global_allocator]` replaces it.
    let has = |suffix: &str| syms.iter().any(|s| s.mangled.ends_with(suffix));
    if has("__rust_alloc") && !has("__rdl_alloc") {
        return Some(RUST_GLOBAL_ALLOCATOR.into());
    }
    None
}

/// After the run: the reports merged, with a warning through `note` for
/// allocations not charged to a site and for a module replaced while CMD
/// ran, and [`check_counted`] when the program carries its own allocator.
pub fn merge_checked(
    reports: &[Report],
    program: &Path,
    own_allocator: Option<&str>,
    note: &mut dyn FnMut(String),
) -> Result<Vec<Module>> {
    let untracked: u64 = reports.iter().map(|r| r.untracked + r.table_failures).sum();
    if untracked > 0 {
        note(format!(
            "mprof: warning: {untracked} allocations could not be charged to a site"
        ));
    }
    let merged = merge(reports);
    if let Some(own) = own_allocator {
        check_counted(program, own, &merged, note)?;
    }
    for warning in replaced(&merged) {
        note(warning);
    }
    Ok(merged)
}

/// After the run: a program carrying its own allocator of which nothing
/// was counted in the malloc family (pool 1) is out of reach, said in a
/// sentence instead of an empty profile; one that was counted too (its
/// allocator also calls malloc, or a Rust global allocator wraps it) gets a
/// note, except for Rust's, which is how every Rust global allocator is
/// reached.
pub fn check_counted(
    program: &Path,
    own: &str,
    merged: &[Module],
    note: &mut dyn FnMut(String),
) -> Result<()> {
    let exe = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    let counted = merged.iter().any(|m| {
        std::fs::canonicalize(&m.path).is_ok_and(|p| p == exe)
            && m.sites.values().any(|s| s.pools & 1 != 0)
    });
    if !counted {
        bail!(
            "{} carries its own allocator ({own}): its allocations bypass the C library's \
             malloc and are out of reach of mprof (nothing it allocated through malloc was \
             counted)",
            program.display()
        );
    }
    if own != RUST_GLOBAL_ALLOCATOR {
        note(format!(
            "mprof: {} carries its own allocator ({own}): its allocations bypass the C \
             library's malloc and are out of reach of mprof; only allocations made through \
             malloc are shown",
            program.display()
        ));
    }
    Ok(())
}

/// Refuse a program the library cannot reach; name the allocator a
/// program carries ([`own_allocator`]), for
/// [`check_counted`] after the run.
pub fn check_reachable(program: &Path) -> Result<Option<String>> {
    // Its head for the program headers, then its symbols from the file
    // mapped (a system file) or read once; not readable (or larger than
    // an object may be): the exec says why.
    let Ok(real) = std::fs::canonicalize(program) else {
        return Ok(None);
    };
    if std::fs::metadata(&real).map_or(true, |m| m.len() > profdev_symbolize::open::MAX_OBJECT) {
        return Ok(None);
    }
    if crate::program::is_static_program(&real) {
        bail!(
            "{} is statically linked: its allocations are out of reach of mprof (it preloads \
             a library into dynamically linked programs)",
            program.display()
        );
    }
    // A script is no ELF file: its interpreter is what runs.
    Ok(ElfObject::open(&real)
        .ok()
        .and_then(|obj| own_allocator(&obj)))
}

/// Before CMD's run: start loading, on a thread of its own, the debug
/// information nearly every run needs ([`objects::prefetch`]), and
/// [`check_reachable`].
pub fn prepare(program: &Path) -> Result<Option<String>> {
    objects::prefetch();
    check_reachable(program)
}

/// A module's name: its path's basename.
pub fn module_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string())
}

/// The merged modules as the prof device's memory mode takes them.
pub fn memory_modules(merged: &[Module]) -> Vec<MemoryModule> {
    merged
        .iter()
        .map(|m| MemoryModule {
            name: module_name(&m.path),
            path: m.path.clone(),
            pairs: profdev_mprof::histogram_pairs(m),
        })
        .collect()
}

/// A memory-mode module from its record's pairs.
pub fn module_of(path: String, pairs: &[(u64, u64)]) -> Module {
    let ((current, high_water), sites) = profdev_mprof::decode_pairs(pairs);
    let mut m = Module {
        path,
        current,
        high_water,
        ..Default::default()
    };
    for (p, (c, h)) in sites {
        m.sites.insert(
            p,
            profdev_mprof::Site {
                current: c,
                high_water: h,
                ..Default::default()
            },
        );
    }
    m
}

/// Every record of a (private) device, read through its files (`path`,
/// and `histogram` one pair per read), oldest first.
pub fn read_dev(dev: &dyn Dev) -> Result<Vec<Module>> {
    let mut dirs: Vec<DirEntry> = dev
        .gen(Qid::ROOT)?
        .into_iter()
        .filter(|e| e.qid.is_dir())
        .collect();
    dirs.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Vec::new();
    for dir in dirs {
        let path = String::from_utf8_lossy(&read_file(dev, &dir, "path", 4096)?.concat())
            .trim_end_matches('\n')
            .to_string();
        let mut pairs = Vec::new();
        for pair in read_file(dev, &dir, "histogram", 4096)? {
            pairs.push(
                profdev_formats::prof_histogram::parse_pair(&pair)
                    .with_context(|| format!("{}/histogram", dir.name))?,
            );
        }
        out.push(module_of(path, &pairs));
    }
    Ok(out)
}

/// The records of the mounted prof device (`DIR` is its `prof/`), read in
/// the memory-mode layout.
pub fn read_mounted(dir: &Path) -> Result<Vec<Module>> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let mut out = Vec::new();
    for e in entries {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(id) = u32::from_str_radix(&name, 16) else {
            continue;
        };
        let path = std::fs::read_to_string(e.path().join("path"))
            .with_context(|| format!("cannot read {}/path", e.path().display()))?
            .trim_end_matches('\n')
            .to_string();
        let hist = e.path().join("histogram");
        let text = std::fs::read_to_string(&hist)
            .with_context(|| format!("cannot read {}", hist.display()))?;
        let pairs = profdev_formats::prof_histogram::parse_text(&text)
            .with_context(|| hist.display().to_string())?;
        out.push((id, module_of(path, &pairs)));
    }
    out.sort_by_key(|(id, _)| *id);
    Ok(out.into_iter().map(|(_, m)| m).collect())
}

/// Complete the modules read back from the device with what its
/// histogram layout does not carry (blocks never freed, allocation
/// counts, DHAT's figures, pools), from the merged reports.
pub fn complete(modules: &mut [Module], merged: &[Module]) {
    for m in modules {
        if let Some(r) = merged.iter().find(|r| r.path == m.path) {
            for (p, s) in &mut m.sites {
                if let Some(rs) = r.sites.get(p) {
                    s.live = rs.live;
                    s.allocs = rs.allocs;
                    s.bytes = rs.bytes;
                    s.dhat = rs.dhat;
                    s.pools = rs.pools;
                    s.temporary = rs.temporary;
                    s.at_peak = rs.at_peak;
                }
            }
        }
    }
}

/// DHAT's run figures, from the first report of a process that ended
/// normally (the only ones that have them); `cmd` is the command line.
pub fn dhat_run(reports: &[Report], cmd: String) -> Option<DhatRun> {
    reports.iter().find_map(|r| {
        let (end_us, gmax_us) = r.dhat?;
        Some(DhatRun {
            cmd: cmd.clone(),
            pid: r.pid,
            end_us,
            gmax_us,
        })
    })
}

/// A private prof device in memory mode for a run: its module list
/// `words`, then `startmp` (the pools' message).
pub fn private_device(words: &[String], startmp: &str) -> Result<Prof> {
    let dev = Prof::new(Engine::new(Arc::new(ReplayFactory::new(Vec::new()))));
    ctl(&dev, format!("module {}", words.join(" ")).trim_end())?;
    ctl(&dev, startmp)?;
    Ok(dev)
}

/// Through a private prof device in memory mode, as `prof CMD` drives
/// one for sampling: its module list selects, its histograms carry the
/// seed's memory layout, and the tables are read back from them; blocks
/// never freed (not in the histogram layout) from the reports. The
/// modules with bytes, or all with `zeros` (`-v`).
pub fn through_device(dev: &Prof, merged: &[Module], zeros: bool) -> Result<Vec<Module>> {
    dev.memory_report(&memory_modules(merged))?;
    ctl(dev, "stop")?;
    let mut modules = read_dev(dev)?;
    ctl(dev, "end")?;
    complete(&mut modules, merged);
    modules.retain(|m| m.high_water != 0 || zeros);
    Ok(modules)
}

/// Why a run of `cmd` that ended with `status` left no report: none
/// could be read (`unreadable`: the warnings said why), or no process
/// loaded the library.
pub fn nothing_counted(cmd: &str, status: ExitStatus, unreadable: bool) -> anyhow::Error {
    if unreadable {
        return anyhow!(
            "the reports of {cmd} could not be read (the warnings above say why): nothing \
             was counted"
        );
    }
    anyhow!(
        "{cmd} never loaded the accounting library ({}): it is setuid or setgid (the \
         loader ignores LD_PRELOAD then), or clears LD_PRELOAD before running the \
         programs that allocate; nothing was counted",
        match (status.code(), status.signal()) {
            (_, Some(sig)) => format!("it was killed by {}", signal_name(sig)),
            (Some(c), _) => format!("it exited with status {c}"),
            _ => "it ended".to_string(),
        }
    )
}

/// A warning for each merged module whose file was replaced while the
/// command ran (another device or inode at its path).
pub fn replaced(merged: &[Module]) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    merged
        .iter()
        .filter(|m| {
            std::fs::metadata(&m.path).is_ok_and(|md| (md.dev(), md.ino()) != (m.dev, m.ino))
        })
        .map(|m| {
            format!(
                "mprof: warning: {} was replaced while the command ran: its lines may be wrong",
                m.path
            )
        })
        .collect()
}

/// What [`output`] makes besides the tables.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extras {
    /// `--leaks`: the blocks never freed.
    pub leaks: bool,
    /// `--pprof`: pprof's heap sites.
    pub pprof: bool,
    /// `--dhat`: DHAT's sites.
    pub dhat: bool,
    /// `--sample-bytes N`: the counts are estimates; a line after the
    /// tables says so, with their error.
    pub sample_bytes: Option<u64>,
    /// `--temporary`: the temporary blocks per site.
    pub temporary: bool,
    /// `--peak --no-stacks`: what each site held at the global peak.
    pub peak_sites: bool,
}

/// The environment of CMD's run: the session's (the library preloaded,
/// its directory, `--wrapper`s, `--dhat`), the pools counted (startmp's
/// digits), whole stacks, sampling, `--peak`, `--temporary`, and the file of system code
/// ([`system`]) of `program` and of the modules `-m` names by path.
pub fn launch_env(
    args: &Args,
    startmp: &str,
    session: &profdev_mprof::Session,
    program: &Path,
) -> Result<Vec<(String, std::ffi::OsString)>> {
    let mut env = session.env(
        std::env::var_os("LD_PRELOAD"),
        &args.wrappers,
        args.dhat.is_some(),
    );
    let mut push = |k: &str, v: String| env.push((k.to_string(), v.into()));
    push(
        profdev_mprof::POOLS_ENV,
        startmp.trim_start_matches("startmp").to_string(),
    );
    if args.stacks() {
        push(profdev_mprof::STACKS_ENV, "1".into());
    }
    if let Some(n) = args.sample_bytes {
        push(profdev_mprof::sample::SAMPLE_BYTES_ENV, n.to_string());
    }
    if args.peak {
        push(profdev_mprof::PEAK_ENV, "1".into());
    }
    if args.temporary {
        push(profdev_mprof::TEMPORARY_ENV, "1".into());
    }
    // Unwind tables: with stacks, those of the program and its libraries
    // made before the run; the others on request (a program CMD runs, a
    // library it loads), and without stacks all of them, for a wrapper's
    // caller (a compiler's xmalloc, C++'s operator new) is found by them.
    let dir = session.path().join("unwind");
    let modules = match args.stacks() {
        true => profdev_mprof::unwind::modules(program),
        false => Vec::new(),
    };
    let (k, v) = profdev_mprof::unwind::write_tables(&dir, &modules)
        .context("cannot write the unwind tables")?;
    session
        .serve_unwind(&dir)
        .context("cannot serve unwind tables")?;
    env.push((k.to_string(), v));
    let mut paths = vec![program.to_path_buf()];
    paths.extend(
        args.modules
            .iter()
            .filter(|m| m.contains('/'))
            .map(std::path::PathBuf::from),
    );
    let system = system::system_modules(&paths);
    if system.iter().any(|m| !m.ranges.is_empty()) {
        let (k, v) = session
            .system_env(&system)
            .context("cannot write the file of system code")?;
        env.push((k.to_string(), v));
    }
    Ok(env)
}

/// The line after the tables of a sampled run: the counts are estimates,
/// and the error of one (profdev_mprof::sample's bound), with the total
/// of bytes allocated in `modules` and its error.
pub fn sampling_note(modules: &[Module], n: u64) -> String {
    let bytes: u64 = modules
        .iter()
        .flat_map(|m| m.sites.values())
        .map(|s| s.bytes)
        .sum();
    let allocs: u64 = modules
        .iter()
        .flat_map(|m| m.sites.values())
        .map(|s| s.allocs)
        .sum();
    let se = profdev_mprof::sample::std_error(bytes, n);
    format!(
        "mprof: estimates from sampling every {n} bytes on average (each sampled allocation \
         of s bytes stands for s/(1-e^(-s/{n})) bytes); the standard error of an estimate of \
         B bytes is at most sqrt({n}*B) (variance: the sum of w(w-s) over its samples, each \
         w-s at most {n}); allocated in all: {bytes} bytes +- {se:.0}, {allocs} blocks\n"
    )
}

/// The most sites a sampled run's estimates list (the rest on one line).
pub const MAX_ESTIMATES: usize = 50;

/// mprof's output for a set of modules.
#[derive(Clone, Debug, Default)]
pub struct Output {
    /// The tables, as printed.
    pub tables: String,
    /// With `--leaks`: the leak list, as printed after the tables.
    pub leaks: Option<String>,
    /// With `--pprof`: the heap sites.
    pub pprof: Vec<HeapSite>,
    /// With `--dhat`: DHAT's sites.
    pub dhat: Vec<DhatSite>,
    /// With `--temporary`: its section, as printed after the leaks.
    pub temporary: Option<String>,
    /// With `--peak --no-stacks`: each site's bytes and blocks at the
    /// global peak, and its `site\tfunction`.
    pub peak_sites: Vec<(u64, u64, String)>,
}

/// The classic line when the modules shown allocated nothing.
pub const NOTHING_ALLOCATED: &str =
    "no profile information (no allocation was made in the modules shown)";

/// A run of CMD counted, and nothing was allocated in the modules shown:
/// a result, not a failure (`mprof -- /bin/true` exits with CMD's status,
/// 0), said with the classic line. None when there is something to show,
/// or when a module asked for by path (`-m PATH`) is no ELF file: then
/// [`output`]'s error names it.
pub fn nothing_allocated(modules: &[Module], asked: &[String]) -> Option<&'static str> {
    let bad = crate::prof::not_profilable(crate::prof::asked_by_path(asked));
    (modules.is_empty() && bad.is_empty()).then_some(NOTHING_ALLOCATED)
}

/// Attribute each module's sites through its ELF file, read the sources,
/// and lay out the tables (`options`) and the `extras`. `note` gets each
/// sentence for standard error. Err: the classic `no profile information`
/// when there is no module, naming the modules of `asked` (the -m list)
/// that are no ELF files.
pub fn output(
    modules: &[Module],
    options: &Options,
    extras: Extras,
    asked: &[String],
    note: &mut dyn FnMut(String),
) -> Result<Output> {
    if modules.is_empty() {
        return Err(crate::prof::no_profile("mprof", NOTHING_ALLOCATED, asked));
    }
    let mut out = Output::default();
    let mut reports = Vec::new();
    let mut leaks = Vec::new();
    let mut temporary = Vec::new();
    let mut estimates = Vec::new();
    // The dynamic linker's name may be a link (/lib64/ld-linux…).
    let real = |path: &str| std::fs::canonicalize(path).unwrap_or_else(|_| path.into());
    let warm: Vec<_> = modules
        .iter()
        .map(|m| (real(&m.path), m.sites.keys().copied().collect()))
        .collect();
    objects::warm(&warm);
    for (m, (real, _)) in modules.iter().zip(&warm) {
        let opened = module_opened("mprof", &m.path, objects::open(real), note);
        let map = ElfMap::shared(opened, false, false);
        let sites: Vec<(u64, u64, u64)> = m
            .sites
            .iter()
            .map(|(&p, s)| (p, s.current, s.high_water))
            .collect();
        let a = attribute(&sites, &map);
        let mut r = ModuleReport::new(
            &module_name(&m.path),
            &m.path,
            &a,
            (m.current, m.high_water),
        );
        for f in &mut r.files {
            f.text = source_lines("mprof", &f.path, &m.path, note);
        }
        reports.push(r);
        if extras.dhat {
            out.dhat.extend(dhat_sites(m, &map));
        }
        if extras.pprof {
            out.pprof.extend(heap_sites(m, &map));
        }
        if extras.leaks {
            leaks.extend(leaks_of(m, &map));
        }
        for (&p, s) in &m.sites {
            if extras.temporary && s.pools & 1 != 0 {
                let (location, function) = place(m, &map, p);
                temporary.push(Temporary {
                    temporary: s.temporary,
                    blocks: s.allocs,
                    location,
                    function,
                });
            }
            if extras.sample_bytes.is_some() && s.bytes > 0 {
                let (location, function) = place(m, &map, p);
                estimates.push(Estimate {
                    allocated: s.bytes,
                    current: s.current,
                    location,
                    function,
                });
            }
            if extras.peak_sites && s.at_peak != (0, 0) {
                let (location, function) = place(m, &map, p);
                let what = format!("{location}\t{function}()");
                out.peak_sites.push((s.at_peak.0, s.at_peak.1, what));
            }
        }
    }
    if extras.temporary {
        out.temporary = Some(format_temporary(&temporary));
    }
    out.tables = format(&reports, options);
    if let Some(n) = extras.sample_bytes {
        let se = profdev_mprof::sample::std_error;
        out.tables
            .push_str(&format_estimates(&estimates, n, MAX_ESTIMATES, &se));
        out.tables.push_str(&sampling_note(modules, n));
    }
    if extras.leaks {
        let mut text = String::new();
        if !out.tables.ends_with("\n\n") {
            text.push('\n');
        }
        text.push_str(&format_leaks(&leaks));
        out.leaks = Some(text);
    }
    Ok(out)
}

/// A module's sites as DHAT's, each frame `PC: FUNCTION (FILE:LINE)`.
fn dhat_sites(m: &Module, map: &ElfMap) -> Vec<DhatSite> {
    m.sites
        .iter()
        .map(|(&p, s)| {
            let pc = p.saturating_sub(1);
            let function = map.function(pc).map_or_else(|| "???".into(), |f| f.name);
            let place = match map.lines(pc) {
                Some(l) => format!("{}:{}", l.file, l.first),
                None => m.path.clone(),
            };
            DhatSite {
                frame: format!("{pc:#x}: {function} ({place})"),
                counts: DhatCounts {
                    total_bytes: s.bytes,
                    total_blocks: s.allocs,
                    total_lifetime: s.dhat.total_lifetime,
                    max_bytes: s.high_water,
                    max_blocks: s.dhat.max_blocks,
                    gmax_bytes: s.dhat.gmax_bytes,
                    gmax_blocks: s.dhat.gmax_blocks,
                    end_bytes: s.current,
                    end_blocks: s.live,
                },
            }
        })
        .collect()
}

/// A module's sites as pprof's heap samples.
fn heap_sites(m: &Module, map: &ElfMap) -> Vec<HeapSite> {
    m.sites
        .iter()
        .map(|(&p, s)| {
            let pc = p.saturating_sub(1);
            let line = map.lines(pc);
            HeapSite {
                module: m.path.clone(),
                address: pc,
                function: map.function(pc).map_or_else(|| "??".into(), |f| f.name),
                file: line.as_ref().map_or_else(String::new, |l| l.file.clone()),
                line: line.map_or(0, |l| l.first),
                alloc_objects: s.allocs,
                alloc_space: s.bytes,
                inuse_objects: s.live,
                inuse_space: s.current,
            }
        })
        .collect()
}

/// The `--pprof` file's bytes and `--folded`'s text: with `stacks` (the
/// merged stacks of a run that captured them) a pprof sample per stack
/// and the folded lines (bytes allocated, or with `--folded-type inuse`
/// live at the end); without, `sites`' samples (one frame each) and no
/// line. Stacks asked for (`args.stacks()`) and none came back (no
/// process ended normally) is said through `note`.
pub fn stack_files(
    stacks: &[Stack],
    sites: &[HeapSite],
    args: &Args,
    note: &mut dyn FnMut(String),
) -> (Vec<u8>, String) {
    let inuse = args.folded_inuse;
    if stacks.is_empty() {
        if args.stacks() {
            note(
                "mprof: warning: no process left stacks: --pprof has one frame per site, \
                 --folded nothing"
                    .into(),
            );
        }
        return (heap::encode(sites), String::new());
    }
    let heap = heap_stacks(stacks);
    (heap::encode_stacks(&heap), heap::folded(&heap, inuse))
}

/// The stacks symbolized through their modules' ELF files (each opened
/// once): a frame is its return address minus one (the call).
pub fn heap_stacks(stacks: &[Stack]) -> Vec<HeapStack> {
    let mut maps: std::collections::HashMap<&str, ElfMap> = Default::default();
    let real = |path: &str| std::fs::canonicalize(path).unwrap_or_else(|_| path.into());
    let mut pcs: std::collections::HashMap<&str, Vec<u64>> = Default::default();
    for (path, pc) in stacks.iter().flat_map(|st| &st.frames) {
        pcs.entry(path).or_default().push(*pc);
    }
    // Each address once: the frames of many stacks are the same.
    let warm: Vec<_> = pcs
        .into_iter()
        .filter(|(path, _)| !path.is_empty())
        .map(|(path, mut pcs)| {
            pcs.sort_unstable();
            pcs.dedup();
            (real(path), pcs)
        })
        .collect();
    objects::warm(&warm);
    // Stacks share most of their frames (a deep interpreter's outer ones
    // are in every stack): each (module, address) is symbolized once.
    let mut seen: std::collections::HashMap<(&str, u64), HeapFrame> = Default::default();
    let mut out = Vec::with_capacity(stacks.len());
    for st in stacks {
        let mut frames = Vec::with_capacity(st.frames.len().max(1));
        if st.overflow {
            frames.push(HeapFrame {
                function: "[mprof: stack table full]".into(),
                ..Default::default()
            });
        }
        for (path, pc) in &st.frames {
            let pc = pc.saturating_sub(1);
            if path.is_empty() {
                frames.push(HeapFrame {
                    address: pc,
                    function: format!("{pc:#x}"),
                    ..Default::default()
                });
                continue;
            }
            let frame = seen.entry((path, pc)).or_insert_with(|| {
                let map = maps.entry(path).or_insert_with(|| {
                    // What a module lacks was said with the tables.
                    let opened =
                        module_opened("mprof", path, objects::open(&real(path)), &mut |_| {});
                    ElfMap::shared(opened, false, false)
                });
                let line = map.lines(pc);
                HeapFrame {
                    module: path.clone(),
                    address: pc,
                    function: map
                        .function(pc)
                        .map_or_else(|| format!("{}+{pc:#x}", module_name(path)), |f| f.name),
                    file: line.as_ref().map_or_else(String::new, |l| l.file.clone()),
                    line: line.map_or(0, |l| l.first),
                }
            });
            frames.push(frame.clone());
        }
        out.push(HeapStack {
            frames,
            alloc_objects: st.allocs,
            alloc_space: st.bytes,
            inuse_objects: st.live,
            inuse_space: st.current,
        });
    }
    out
}

/// Where site `p` of `m` is: `file:line` (else the module and address),
/// and its function.
fn place(m: &Module, map: &ElfMap, p: u64) -> (String, String) {
    let pc = p.saturating_sub(1);
    let location = match map.lines(pc) {
        Some(r) => format!("{}:{}", r.file, r.first),
        None => format!("{}+{pc:#x}", module_name(&m.path)),
    };
    let function = map.function(pc).map_or_else(|| "??".into(), |f| f.name);
    (location, function)
}

/// A module's sites with blocks never freed.
fn leaks_of(m: &Module, map: &ElfMap) -> Vec<Leak> {
    m.sites
        .iter()
        .filter(|(_, s)| s.live != 0)
        .map(|(&p, s)| {
            let (location, function) = place(m, map, p);
            Leak {
                bytes: s.current,
                blocks: s.live,
                location,
                function,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_mprof::Site;

    fn module(path: &str) -> Module {
        let mut m = Module {
            path: path.into(),
            current: 48,
            high_water: 64,
            ..Default::default()
        };
        m.sites.insert(
            0x1001,
            Site {
                current: 48,
                high_water: 64,
                allocs: 3,
                bytes: 80,
                live: 2,
                pools: 1,
                ..Default::default()
            },
        );
        m
    }

    #[test]
    fn the_device_layout_round_trips_and_is_completed_from_the_reports() {
        let merged = [module("/no/such/libx.so")];
        let mm = memory_modules(&merged);
        assert_eq!(mm[0].name, "libx.so");
        let mut back = vec![module_of(mm[0].path.clone(), &mm[0].pairs)];
        assert_eq!((back[0].current, back[0].high_water), (48, 64));
        let s = back[0].sites[&0x1001];
        assert_eq!((s.current, s.high_water, s.live), (48, 64, 0));
        complete(&mut back, &merged);
        assert_eq!(back, merged);
    }

    #[test]
    fn output_of_a_module_that_cannot_be_read() {
        let mut notes = Vec::new();
        let extras = Extras {
            leaks: true,
            pprof: true,
            dhat: true,
            sample_bytes: None,
            ..Default::default()
        };
        let out = output(
            &[module("/no/such/libx.so")],
            &Options::default(),
            extras,
            &[],
            &mut |n| notes.push(n),
        )
        .unwrap();
        assert!(notes[0].starts_with("mprof: cannot read module /no/such/libx.so: "));
        let leaks = out.leaks.unwrap();
        assert!(leaks.contains("libx.so+0x1000"), "{leaks}");
        assert_eq!(out.pprof.len(), 1);
        assert_eq!(out.pprof[0].address, 0x1000);
        assert_eq!(out.pprof[0].function, "??");
        assert_eq!(out.pprof[0].inuse_objects, 2);
        assert_eq!(out.dhat.len(), 1);
        assert_eq!(out.dhat[0].frame, "0x1000: ??? (/no/such/libx.so)");
        assert_eq!(out.dhat[0].counts.total_blocks, 3);
        let none = output(&[], &Options::default(), extras, &[], &mut |_| {});
        assert_eq!(
            none.unwrap_err().to_string(),
            "no profile information (no allocation was made in the modules shown)"
        );
    }

    #[test]
    fn this_test_program_uses_the_c_librarys_malloc() {
        let exe = std::env::current_exe().unwrap();
        let obj = ElfObject::open(&exe).unwrap();
        // A Rust program without #[global_allocator]: std's __rdl_alloc.
        assert_eq!(own_allocator(&obj), None);
    }

    #[test]
    fn a_program_with_its_own_allocator_nothing_counted_is_out_of_reach() {
        let exe = std::env::current_exe().unwrap();
        let mut notes = Vec::new();
        let e = check_counted(&exe, "je_malloc", &[], &mut |n| notes.push(n)).unwrap_err();
        assert!(e
            .to_string()
            .contains("carries its own allocator (je_malloc)"));
        let mut counted = module(&exe.display().to_string());
        counted.sites.values_mut().for_each(|s| s.pools = 1);
        check_counted(&exe, "je_malloc", &[counted.clone()], &mut |n| {
            notes.push(n)
        })
        .unwrap();
        assert_eq!(notes.len(), 1);
        check_counted(&exe, RUST_GLOBAL_ALLOCATOR, &[counted], &mut |n| {
            notes.push(n)
        })
        .unwrap();
        assert_eq!(notes.len(), 1, "Rust's global allocator is not noted");
    }

    #[test]
    fn reads_a_mounted_device_in_memory_mode() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("ctl"), "").unwrap();
        let m = module("/x/libx.so");
        for (id, path) in [("00000003", "/x/liby.so"), ("00000001", "/x/libx.so")] {
            let r = d.path().join(id);
            std::fs::create_dir(&r).unwrap();
            std::fs::write(r.join("path"), format!("{path}\n")).unwrap();
            let text: String = profdev_mprof::histogram_pairs(&m)
                .iter()
                .map(|(i, v)| format!("{i} {v}\n"))
                .collect();
            std::fs::write(r.join("histogram"), text).unwrap();
        }
        let modules = read_mounted(d.path()).unwrap();
        let paths: Vec<&str> = modules.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(paths, ["/x/libx.so", "/x/liby.so"]);
        assert_eq!(modules[0].sites[&0x1001].high_water, 64);
        assert_eq!((modules[0].current, modules[0].high_water), (48, 64));
    }
}
