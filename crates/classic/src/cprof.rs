//! cprof's work between the counts and the listing: which counted modules
//! the `-m` list selects ([`counted_lines`]), each one's counts placed on
//! its source lines through its ELF file ([`lines_of`]), its `.prf`
//! records (`-r`, and [`read_records`] without a command), and the
//! listings with their source text ([`listings`]); and the runs that
//! count: CMD under the coverage runtime ([`run_under_coverage`]) or,
//! statically linked, through uprobes ([`run_static`]), and a running
//! process attached to ([`run_attached`]). What is said on the way is
//! gathered by kind ([`notes::Notes`]), one line each.

use crate::args::cprof::Args;
use anyhow::{bail, Context as _, Result};
use profdev_attach::CovAttached;
use profdev_coverage::counts::{Branch, ModuleCoverage};
use profdev_coverage::lines::{instruction_counts, map_lines, LineTable, ModuleLines};
use profdev_coverage::listing::{self, Listing};
use profdev_coverage::prf::{self, Prf};
use profdev_sample::job::{Catcher, Job};
use profdev_symbolize::ElfObject;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::Path;
use std::process::ExitCode;

pub mod notes;

pub use notes::Notes;

/// A module's name: its path's basename.
pub fn module_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map_or_else(|| path.to_string(), |b| b.to_string_lossy().into_owned())
}

/// True if `path` is one of `wanted` (by basename, path or canonical path).
pub fn wanted(wanted: &[String], path: &Path) -> bool {
    let canon = std::fs::canonicalize(path).ok();
    wanted.iter().any(|w| {
        if w.contains('/') {
            Path::new(w) == path || (canon.is_some() && std::fs::canonicalize(w).ok() == canon)
        } else {
            *w == module_name(&path.to_string_lossy())
        }
    })
}

/// A module's counts on its lines, through its file's line table: the
/// file `file` the counting engine opened when it planned the module,
/// when there is one (the process that mapped it may be gone, and `path`
/// may be a link: `libz.so.1`), else the file at `path` (no final
/// symbolic link followed); `notes` gets what is said about a module
/// without lines.
pub fn lines_of(
    path: &str,
    file: Option<&File>,
    insns: &[(u64, u64)],
    branches: &[Branch],
    notes: &mut Notes,
) -> ModuleLines {
    let name = module_name(path);
    let opened = match file {
        Some(f) => ElfObject::from_file(f, Path::new(path)),
        None => ElfObject::open(Path::new(path)),
    };
    match opened {
        Ok(obj) => {
            let obj = obj.with_separate_debug_info();
            if !obj.has_debug_info() {
                notes.no_debug_info(path);
            }
            map_lines(&name, path, insns, branches, &obj)
        }
        Err(e) => {
            notes.unreadable(path, &e.to_string());
            map_lines(&name, path, insns, branches, &NoLines)
        }
    }
}

/// A module whose file cannot be read: no lines, no functions.
struct NoLines;

impl LineTable for NoLines {
    fn rows(&self, _: u64, _: u64) -> Vec<profdev_symbolize::LineRow> {
        Vec::new()
    }
    fn functions(&self) -> Vec<(u64, String)> {
        Vec::new()
    }
}

/// The records of `-m MODULE` in the current directory, checked against
/// the module file their header names.
pub fn read_records(module: &str) -> Result<Prf> {
    let file = prf::file_name(Path::new(module));
    let record = prf::read(Path::new(&file))?
        .with_context(|| format!("no records for {module}: {file} is not in the current directory (cprof -r CMD makes it)"))?;
    let now = ElfObject::open(Path::new(&record.path))
        .with_context(|| format!("{file} records {}, which cannot be read", record.path))?;
    if now.build_id() != record.build_id.as_deref() {
        bail!(
            "{file} records build {} of {}, but that file is now build {}: its lines cannot be \
             placed (move {file} away to start anew)",
            record
                .build_id
                .as_deref()
                .map_or_else(|| "-".into(), prf::hex),
            record.path,
            now.build_id().map_or_else(|| "-".into(), prf::hex)
        );
    }
    Ok(record)
}

/// The lines of the counted `modules` that `words` selects (empty: all),
/// recorded into `MODULE.prf` in the current directory if `record`; each
/// module's uncounted blocks noted. Err: the classic `no profile
/// information` when none is left, naming the modules of `asked` (the -m
/// list) that are no ELF files.
pub fn counted_lines(
    mut modules: Vec<ModuleCoverage>,
    words: &[String],
    asked: &[String],
    record: bool,
    notes: &mut Notes,
) -> Result<Vec<ModuleLines>> {
    if !words.is_empty() {
        modules.retain(|m| wanted(words, &m.path));
    }
    if modules.is_empty() {
        return Err(crate::prof::no_profile(
            "cprof",
            "no profile information (no module asked for ran)",
            asked,
        ));
    }
    for m in &modules {
        if m.uncounted > 0 {
            notes.uncounted(&m.path.to_string_lossy(), &m.uncounted.to_string());
        }
    }
    if record {
        for m in &modules {
            prf::record(Path::new("."), m)?;
        }
    }
    Ok(modules
        .iter()
        .map(|m| {
            let mut branches = m.branches.clone();
            branches.sort_by_key(|b| b.addr);
            lines_of(
                &m.path.to_string_lossy(),
                m.file.as_ref().map(|f| f.file()),
                &instruction_counts(m),
                &branches,
                notes,
            )
        })
        .collect())
}

/// Each module's lines with their source text; the files not found noted
/// (unless `quiet`: `-r` lists nothing).
pub fn listings(lines: Vec<ModuleLines>, quiet: bool, notes: &mut Notes) -> Vec<Listing> {
    lines
        .into_iter()
        .map(|lines| {
            let (sources, missing) = listing::read_sources(&lines);
            if !quiet {
                for f in &missing {
                    notes.source_missing(f);
                }
            }
            Listing { lines, sources }
        })
        .collect()
}

/// The files `--lcov FILE` and `--cobertura FILE` ask for, made from
/// `listings`: each file's name and bytes (the cli writes them); the
/// source files left out of them noted.
pub fn exports(listings: &[Listing], args: &Args, notes: &mut Notes) -> Vec<(OsString, Vec<u8>)> {
    let mut out = Vec::new();
    if args.lcov.is_none() && args.cobertura.is_none() {
        return out;
    }
    let mut records = profdev_coverage::lcov::source_records(listings);
    if args.hits {
        // Ran or not (a statically linked CMD's uprobes count).
        for r in records.by_module.values_mut() {
            r.lines.values_mut().for_each(|c| *c = (*c).min(1));
            r.functions.values_mut().for_each(|f| f.1 = f.1.min(1));
            for j in r.jumps.values_mut().flatten().flatten() {
                *j = (j.0.min(1), j.1.min(1));
            }
        }
    }
    for f in &records.left_out {
        notes.left_out(f);
    }
    if let Some(file) = &args.lcov {
        let text = if args.hits {
            profdev_formats::lcov::lcov_marks(&records)
        } else {
            profdev_formats::lcov::lcov(&records)
        };
        out.push((file.clone(), text.into_bytes()));
    }
    if let Some(file) = &args.cobertura {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let xml = profdev_formats::cobertura::cobertura(&records, now);
        out.push((file.clone(), xml.into_bytes()));
    }
    out
}

/// [`check_output`] for `--lcov` and `--cobertura`.
pub fn check_outputs(args: &Args) -> Result<()> {
    for (file, option) in [(&args.lcov, "--lcov"), (&args.cobertura, "--cobertura")] {
        if let Some(f) = file {
            check_output(f, option)?;
        }
    }
    Ok(())
}

/// The modules to count for CMD, whose program is `program`: the `-m`
/// ones, and with `-e` the program itself.
pub fn selection(args: &Args, program: &Path) -> Vec<String> {
    let mut words = args.modules.clone();
    if args.exec {
        words.push(
            std::fs::canonicalize(program)
                .unwrap_or(program.to_path_buf())
                .to_string_lossy()
                .into_owned(),
        );
    }
    words
}

/// Check, before anything runs, that the file an option names (`--lcov
/// FILE`) can be written where it is named: its directory exists and may
/// be written, and it is not a directory itself. Err: one sentence.
pub fn check_output(file: &OsStr, option: &str) -> Result<()> {
    let path = Path::new(file);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let shown = path.display();
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!(
            "cannot write {shown} ({option}): {} is not a directory",
            dir.display()
        ),
        Err(e) => bail!(
            "cannot write {shown} ({option}): directory {}: {e}",
            dir.display()
        ),
    }
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        bail!("cannot write {shown} ({option}): it is a directory");
    }
    use rustix::fs::{accessat, Access, AtFlags, CWD};
    if let Err(e) = accessat(CWD, dir, Access::WRITE_OK, AtFlags::EACCESS) {
        bail!(
            "cannot write {shown} ({option}): directory {}: {}",
            dir.display(),
            std::io::Error::from(e)
        );
    }
    Ok(())
}

/// What a run of CMD under the coverage engine gives: each module's
/// counts, summed over CMD's processes, and the exit status cprof ends
/// with (CMD's own if it failed, as `profdev prof` and `mprof` do).
pub struct Launched {
    /// The counts of each module.
    pub modules: Vec<ModuleCoverage>,
    /// The exit status cprof ends with.
    pub exit: ExitCode,
    /// CMD failed or a signal ended it: its status, not 1, is cprof's
    /// when nothing was counted.
    pub failed: bool,
    /// The sentence to say after the listing when a signal ended CMD
    /// (`cprof: interrupted by SIGTERM; …`), as prof, mprof and gmon say.
    pub interrupted: Option<String>,
}

impl Launched {
    /// What `job` ending with `status` gives, with the counts `modules`.
    fn new(modules: Vec<ModuleCoverage>, job: &Job, status: std::process::ExitStatus) -> Self {
        let interrupted = job
            .interrupted()
            .map(|i| i.sentence("cprof", "the listing shows what was counted until then"));
        Launched {
            modules,
            exit: job.exit_code(status),
            failed: !status.success() || interrupted.is_some(),
            interrupted,
        }
    }
}

/// Run `cmd` under prof's coverage mode, counting the modules `modules`
/// names (basenames or absolute paths; empty: the executable and every
/// library it maps): the engine's runtime is preloaded into CMD and every
/// process it starts, which ask the engine's server to plan each module
/// they map and report their counts when they end. CMD runs as a job
/// (`profdev_sample::job`): SIGINT, SIGTERM and SIGHUP are passed on to it,
/// and the runtime writes the counts of a process those end. In
/// [`Mode::Hits`](profdev_coverage::plan::Mode::Hits) (the marks alone,
/// [`Args::mode`]) each block's count is 1 if it ran, else 0.
pub fn run_under_coverage(
    cmd: &[OsString],
    modules: &[String],
    mode: profdev_coverage::plan::Mode,
    notes: &mut Notes,
) -> Result<Launched> {
    let server = profdev_coverage::launch::Server::new(modules)
        .context("cannot prepare coverage (the runtime's private directory)")?;
    server.set_mode(mode);
    let mut job = Job::new().context("cannot catch signals")?;
    let mut child = std::process::Command::new(&cmd[0]);
    child.args(&cmd[1..]);
    for (k, v) in server.env(std::env::var_os("LD_PRELOAD")) {
        child.env(k, v);
    }
    job.prepare(&mut child);
    let spawned = child
        .spawn()
        .with_context(|| format!("cannot run {}", cmd[0].to_string_lossy()))?;
    job.started(&spawned);
    let status = job.wait();
    let (modules, said) = server.into_collected();
    for n in &said {
        notes.engine(n);
    }
    Ok(Launched::new(modules, &job, status))
}

/// Run the statically linked `program` (`cmd[0]`): patched at its first
/// stop before `_start`, through ptrace, by profdev itself
/// ([`profdev_coverage::traced`]: the loader route's plans and
/// trampolines, no runtime in the process); where ptrace is refused,
/// counted through the uprobe fallback ([`run_uprobes`]), as it is with
/// `PROFDEV_COV_UPROBES=1` in the environment. In `mode` on the ptrace
/// route (the uprobes count): [`Mode::Hits`](profdev_coverage::plan::Mode)
/// stores a mark per block that ran, without saving flags. `note` gets
/// the sentence saying which route ran; `notes` the engine's.
///
/// CMD runs in its own process group, the terminal's foreground group
/// when cprof's is, as on the other routes: ^C and ^Z reach CMD alone;
/// CMD stopped from the terminal stops cprof too, so that the shell sees
/// the job stopped, and `fg` continues both, CMD holding the terminal
/// ([`profdev_sample::job::Foreground`], told of CMD's stops by the
/// tracer). A SIGINT, SIGTERM or SIGHUP cprof gets is passed on to CMD's
/// processes, but one from the terminal (^C, a hangup: the kernel's) not
/// to those in cprof's own group (none but what joined it), which got it
/// already.
pub fn run_static(
    cmd: &[OsString],
    program: &Path,
    mode: profdev_coverage::plan::Mode,
    note: &mut dyn FnMut(String),
    notes: &mut Notes,
) -> Result<Launched> {
    use profdev_coverage::traced::{run_traced, Live};
    use profdev_sample::job::{Ended, Interrupted, GRACE};
    if std::env::var_os("PROFDEV_COV_UPROBES").is_some_and(|v| v == "1") {
        return run_uprobes(cmd, program, note);
    }
    let server = profdev_coverage::launch::Server::new(&[])
        .context("cannot prepare coverage (the runtime's private directory)")?;
    server.set_mode(mode);
    let caught = Catcher::new().context("cannot catch signals")?;
    let live = Live::default();
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut child = std::process::Command::new(&cmd[0]);
    child.args(&cmd[1..]);
    let mut fg = profdev_sample::job::Foreground::new();
    fg.prepare(&mut child);
    // CMD's processes get the signals cprof receives; after the grace
    // period what still runs has its counts read and is killed.
    let watch = || -> Option<Interrupted> {
        use std::sync::atomic::Ordering::SeqCst;
        loop {
            if let Some(signal) = caught.caught() {
                // A signal from the terminal reached cprof's group, not
                // CMD's (its own): passed on to all but cprof's group.
                live.signal_outside(signal, caught.from_terminal(signal));
                let end = std::time::Instant::now() + GRACE;
                while live.running() && std::time::Instant::now() < end {
                    caught.sleep(std::time::Duration::from_millis(20), None);
                }
                let ended = if live.kill() {
                    Ended::Killed
                } else {
                    Ended::InTime
                };
                return Some(Interrupted { signal, ended });
            }
            if done.load(SeqCst) {
                return None;
            }
            caught.sleep(std::time::Duration::from_millis(50), None);
            caught.drain();
        }
    };
    let (run, interrupted) = std::thread::scope(|s| {
        let w = s.spawn(watch);
        let run = run_traced(&mut child, server, &live, &mut fg);
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        (run, w.join().ok().flatten())
    });
    let run = match run {
        Ok(r) => r,
        Err(why) => {
            // The fallback's own Job handles the terminal and SIGTTOU.
            drop((caught, fg));
            note(format!(
                "cprof: {} is statically linked and could not be patched under ptrace ({why}): \
                 counted through uprobes instead",
                program.display()
            ));
            return run_uprobes(cmd, program, note);
        }
    };
    note(format!(
        "cprof: {} is statically linked: patched by cprof through ptrace before its first \
         instruction (no runtime in it)",
        program.display()
    ));
    for n in &run.notes {
        notes.engine(n);
    }
    Ok(Launched {
        modules: run.modules,
        exit: match &interrupted {
            Some(i) => ExitCode::from(128u8.wrapping_add(i.signal as u8)),
            None => profdev_sample::job::exit_code(run.status),
        },
        failed: !run.status.success() || interrupted.is_some(),
        interrupted: interrupted
            .map(|i| i.sentence("cprof", "the listing shows what was counted until then")),
    })
}

/// The uprobe fallback (`profdev_coverage::uprobe`) for a statically
/// linked `program` that cannot be traced: its blocks are planned, CMD is
/// held between fork and exec until one multi-uprobe link with its pid is
/// in place, then runs as a job like any CMD; the counts are read when
/// it ends.
fn run_uprobes(cmd: &[OsString], program: &Path, note: &mut dyn FnMut(String)) -> Result<Launched> {
    use profdev_coverage::uprobe;
    let canon = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    let probes = uprobe::Probes::of_file(&canon, canon.clone())?;
    let mut job = Job::new().context("cannot catch signals")?;
    let mut child = std::process::Command::new(&cmd[0]);
    child.args(&cmd[1..]);
    job.prepare(&mut child);
    let (spawned, counter) = uprobe::spawn_counted(&mut child, probes, canon)?;
    note(format!(
        "cprof: {} is statically linked: counted through {} uprobes (slower: about 0.2-16 us \
         per block executed; uses {})",
        program.display(),
        counter.probes(),
        uprobe::FEATURE
    ));
    job.started(&spawned);
    let status = job.wait();
    counter.detach();
    Ok(Launched::new(vec![counter.coverage()], &job, status))
}

/// `-p PID`: the counts, the module words they were selected by, and
/// how the wait ended.
pub struct AttachRun {
    /// The counts of each module.
    pub modules: Vec<ModuleCoverage>,
    /// The module words they were selected by (`-m`, and `-e`'s file).
    pub words: Vec<String>,
    /// The signal that ended the wait, and the sentence to say after the
    /// listing.
    pub interrupted: Option<(i32, String)>,
}

/// A device error as cprof's one sentence.
fn attach_sentence(e: profdev_dev::DevError) -> anyhow::Error {
    use profdev_dev::DevError;
    anyhow::anyhow!(match e {
        DevError::NoDevice(s) | DevError::NotPermitted(s) | DevError::Busy(s) => s,
        DevError::NoProcess(p) => format!("no process {p}: -p needs the id of a running process"),
        e => e.to_string(),
    })
}

/// Wait until `a`'s process has exited (None) or one of the signals
/// `caught` catches came (Some). The process is watched through a pidfd
/// where the kernel has them (5.3), and its `/proc` entry (start time
/// checked) at every wake-up and at least every second.
fn wait_attached(caught: &Catcher, a: &CovAttached) -> Option<i32> {
    use rustix::process::{pidfd_open, Pid, PidfdFlags};
    use std::os::fd::AsFd;
    let pidfd =
        Pid::from_raw(a.pid() as i32).and_then(|pid| pidfd_open(pid, PidfdFlags::empty()).ok());
    loop {
        if let Some(s) = caught.caught() {
            return Some(s);
        }
        if !a.running() {
            return None;
        }
        let timeout = if pidfd.is_some() { 1000 } else { 50 };
        caught.sleep(
            std::time::Duration::from_millis(timeout),
            pidfd.as_ref().map(|p| p.as_fd()),
        );
        caught.drain();
    }
}

/// `cprof -p PID`: attach coverage to the running process (prof's
/// `startcp` machinery, [`profdev_attach::attach_coverage`]), wait for
/// it to exit or for a signal, and take its counts. `note` gets what is
/// said at once (the attach), `notes` the rest.
pub fn run_attached(
    pid: u32,
    args: &Args,
    note: &mut dyn FnMut(String),
    notes: &mut Notes,
) -> Result<AttachRun> {
    // Caught from here on: a signal during the attach (which holds PID's
    // threads) ends the wait right after it, never the attach half way.
    let caught = Catcher::new().context("cannot catch signals")?;
    // The kernel's ptrace rule for cprof itself, first: a process cprof may
    // not trace is refused in its terms (kernel.yama.ptrace_scope, the
    // credentials), not as an unreadable /proc/PID/maps.
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    let me = profdev_dev::access::Cred {
        uid,
        gid,
        pid: std::process::id(),
    };
    let may = || {
        profdev_dev::access::ptrace_may_attach(&me, pid).map_err(|e| match e {
            profdev_dev::DevError::NotPermitted(why) => {
                anyhow::anyhow!("not permitted to ptrace {why}")
            }
            e => attach_sentence(e),
        })
    };
    let mut permit = Some(may()?);
    // The static case (no C library to load the runtime with): patched
    // and followed through ptrace, as `cprof CMD` does for a static
    // program; else through uprobes by the same attach as startcp's.
    let is_static = profdev_attach::statically_linked(pid).map_err(attach_sentence)?;
    let traced = if is_static && std::env::var_os("PROFDEV_COV_UPROBES").is_none() {
        match profdev_attach::attach_static_traced(pid, permit.take(), args.mode()) {
            Ok(a) => {
                note(format!(
                    "cprof: process {pid} is statically linked: patched by cprof through ptrace, \
                     which follows it (its threads and forks) until it exits or cprof is \
                     interrupted"
                ));
                Some(a)
            }
            Err(e) => {
                note(format!(
                    "cprof: process {pid} is statically linked and could not be patched through \
                     ptrace ({}): counted through uprobes instead",
                    attach_sentence(e)
                ));
                None
            }
        }
    } else {
        None
    };
    if is_static && traced.is_none() {
        note(format!(
            "cprof: process {pid} is statically linked: counted through uprobes (one multi-uprobe \
             BPF link, Linux 6.6 or later), about 0.2 to 16 us per block executed; its children \
             are not counted"
        ));
    }
    let mut words = args.modules.clone();
    if args.exec {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .with_context(|| format!("cannot read process {pid}'s executable (-e)"))?;
        words.push(
            std::fs::canonicalize(&exe)
                .unwrap_or(exe)
                .to_string_lossy()
                .into_owned(),
        );
    }
    let attached = match traced {
        Some(a) => a,
        None => {
            // Checked again if the ptrace route's attempt took the first.
            let permit = permit.map_or_else(may, Ok)?;
            profdev_attach::attach_coverage_in(pid, &words, Some(permit), args.mode())
                .map_err(attach_sentence)?
        }
    };
    note(format!(
        "cprof: counting process {pid} from now; its lines are listed when it exits (or on \
         SIGINT, SIGTERM, SIGHUP)"
    ));
    if let Some(sig) = wait_attached(&caught, &attached) {
        // Its counts so far: a report now. A process gone meanwhile wrote
        // its exit report instead.
        let flushed = attached.flush();
        let (modules, said) = attached.collect();
        for n in &said {
            notes.engine(n);
        }
        let name = profdev_sample::job::signal_name(sig);
        let what = if attached.running() {
            if let Err(e) = flushed {
                notes.other(format!(
                    "process {pid} could not write its counts so far: {e}"
                ));
            }
            match attached.leave_running() {
                Some(dir) => format!(
                    "cprof: interrupted by {name}; process {pid} runs on, still counted, with \
                     nobody to read its later counts (in {}: remove it once process {pid} has \
                     exited); listed: its counts up to now",
                    dir.display()
                ),
                None => format!(
                    "cprof: interrupted by {name}; process {pid} runs on, no longer counted \
                     (let go by cprof); listed: its counts up to now"
                ),
            }
        } else {
            format!(
                "cprof: interrupted by {name}; process {pid} had exited; listed: all its counts"
            )
        };
        return Ok(AttachRun {
            modules,
            words,
            interrupted: Some((sig, what)),
        });
    }
    let (modules, said) = attached.collect();
    for n in &said {
        notes.engine(n);
    }
    let total: u64 = modules
        .iter()
        .flat_map(|m| &m.blocks)
        .map(|b| b.count)
        .fold(0, u64::saturating_add);
    if total == 0 {
        bail!(
            "process {pid} reported no counts: it ended with _exit or a signal that killed it, \
             or ran none of the counted code after the attach"
        );
    }
    Ok(AttachRun {
        modules,
        words,
        interrupted: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_are_wanted_by_basename_or_path() {
        let exe = std::env::current_exe().unwrap();
        let base = module_name(&exe.to_string_lossy());
        assert!(wanted(std::slice::from_ref(&base), &exe));
        assert!(wanted(&[exe.display().to_string()], &exe));
        assert!(!wanted(&["libc.so.6".into()], &exe));
        assert!(!wanted(&[format!("/no/such/{base}")], &exe));
        assert_eq!(module_name("/a/b/libc.so.6"), "libc.so.6");
        assert_eq!(module_name("/"), "/");
    }

    #[test]
    fn a_module_that_cannot_be_read_has_no_lines() {
        let mut notes = Notes::default();
        let m = lines_of("/no/such/module", None, &[(1, 2)], &[], &mut notes);
        assert!(m.files.is_empty());
        let said = notes.lines();
        assert_eq!(said.len(), 1);
        assert!(said[0].starts_with("cprof: cannot read module /no/such/module: "));
        assert!(said[0].ends_with(": no lines to mark"));
    }

    #[test]
    fn a_module_reached_through_a_link_is_read_through_its_open_file() {
        let dir = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let link = dir.path().join("libsq.so.1");
        std::os::unix::fs::symlink(&exe, &link).unwrap();
        let link = link.to_str().unwrap();
        let mut notes = Notes::default();
        lines_of(link, None, &[(1, 2)], &[], &mut notes);
        let said = notes.lines().join("\n");
        assert!(said.contains("a symbolic link"), "by path: {said}");
        let file = File::open(&exe).unwrap();
        let mut notes = Notes::default();
        let m = lines_of(link, Some(&file), &[(1, 2)], &[], &mut notes);
        assert!(
            !notes.lines().iter().any(|l| l.contains("cannot read")),
            "{:?}",
            notes.lines()
        );
        assert_eq!((m.name.as_str(), m.path.as_str()), ("libsq.so.1", link));
    }

    #[test]
    fn an_output_in_no_directory_is_refused_at_once() {
        let e = check_output(OsStr::new("/nonexistent/x"), "--lcov").unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot write /nonexistent/x (--lcov): directory /nonexistent: No such file or \
             directory (os error 2)"
        );
        let dir = tempfile::tempdir().unwrap();
        let e = check_output(dir.path().as_os_str(), "--cobertura").unwrap_err();
        assert!(e.to_string().ends_with("it is a directory"), "{e}");
        check_output(dir.path().join("x.info").as_os_str(), "--lcov").unwrap();
        check_output(OsStr::new("x.info"), "--lcov").unwrap();
    }

    #[test]
    fn nothing_selected_is_no_profile() {
        let e = counted_lines(Vec::new(), &[], &[], false, &mut Notes::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no profile information (no module asked for ran)"
        );
    }

    #[test]
    fn records_of_a_module_never_recorded() {
        let e = read_records("libnosuch-module.so").unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "no records for libnosuch-module.so: libnosuch-module.so.prf is not in the current \
             directory (cprof -r CMD makes it)"
        );
    }
}
