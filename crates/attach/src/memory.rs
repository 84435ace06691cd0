//! Memory accounting of a running process: the accounting library of
//! `profdev_mprof` loaded with ptrace. What prof's `startmp… PID` does
//! and `profdev mprof -p PID` calls; the device's side (the control
//! message, the records, the man page) is `profdev_dev::prof`'s memory
//! mode.

use profdev_dev::access::Permit;
use profdev_dev::prof::{ModuleCounts, POOL_FILE, POOL_MALLOC, POOL_MAP};
use profdev_dev::DevError;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A running process the accounting library was loaded into
/// ([`attach_process`]): its private directory (the library, and `out/`
/// where its reports go), removed when dropped.
pub struct MemAttached {
    pid: u32,
    /// The process's start time (/proc/PID/stat field 22): a reused pid
    /// is another process.
    start: u64,
    dir: tempfile::TempDir,
    /// With stacks: the service of unwind tables on request, for the
    /// modules the process loads after the attach (`dlopen`), stopped
    /// when this is dropped.
    _tables: Option<profdev_mprof::unwind::Server>,
}

/// The sentence for a process no library can be loaded into.
fn out_of_reach(pid: u32) -> DevError {
    DevError::NoDevice(format!(
        "process {pid} is out of reach: statically linked, start it under profdev mprof instead"
    ))
}

pub(crate) fn inject_error(pid: u32, e: profdev_inject::InjectError) -> DevError {
    use profdev_inject::InjectError as E;
    match e {
        E::NoProcess(_) | E::Exited { .. } => DevError::NoProcess(pid),
        E::NotPermitted { .. } => DevError::NotPermitted(e.to_string()),
        E::AlreadyTraced { .. } => DevError::Busy(e.to_string()),
        E::Static(_) => out_of_reach(pid),
        e => DevError::NoDevice(format!("cannot attach to process {pid}: {e}")),
    }
}

/// Check `permit` again on the stopped process `pid` (every thread
/// stopped by the caller: nothing changes its ids until it is let go);
/// the refusal as the injector's, so that the `Target` is dropped (the
/// process let go untouched) on the way out.
pub(crate) fn recheck(
    permit: Option<&Permit>,
    pid: u32,
) -> Result<(), profdev_inject::InjectError> {
    let Some(p) = permit else { return Ok(()) };
    debug_assert_eq!(p.pid(), pid);
    p.check_again().map_err(|e| match e {
        DevError::NoProcess(_) => profdev_inject::InjectError::NoProcess(pid),
        DevError::NotPermitted(why) => profdev_inject::InjectError::NotPermitted {
            pid,
            hint: format!(
                ": {}",
                why.strip_prefix(&format!("process {pid}: "))
                    .unwrap_or(&why)
            ),
        },
        e => profdev_inject::InjectError::NotPermitted {
            pid,
            hint: format!(": {e}"),
        },
    })
}

/// (state, start time) of /proc/PID/stat, if it exists.
pub(crate) fn stat_of(pid: u32) -> Option<(char, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 3, starttime field 22.
    Some((f.first()?.chars().next()?, f.get(19)?.parse().ok()?))
}

/// The fs user and group ids of PID (who its files will belong to).
pub(crate) fn fs_ids(pid: u32) -> Option<(u32, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let fourth = |key: &str| -> Option<u32> {
        s.lines()
            .find_map(|l| l.strip_prefix(key))?
            .split_whitespace()
            .nth(3)?
            .parse()
            .ok()
    };
    Some((fourth("Uid:")?, fourth("Gid:")?))
}

pub(crate) fn io_dev(what: &str, e: impl std::fmt::Display) -> DevError {
    DevError::NoDevice(format!("{what}: {e}"))
}

/// What the accounting library counts in an attached process: the
/// settings a launched one gets through its environment (`mprof`'s
/// options), given to the library as its config lines. The default:
/// pool 1 alone, exact, single sites (prof's `startmp1 PID`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttachOptions {
    /// The pools counted ([`POOL_MALLOC`]...; none: pool 1).
    pub pools: u8,
    /// More allocation wrappers (`mprof --wrapper`).
    pub wrappers: Vec<String>,
    /// Whole stacks ([`profdev_mprof::STACKS_ENV`]).
    pub stacks: bool,
    /// Sample every N bytes on average
    /// ([`profdev_mprof::sample::SAMPLE_BYTES_ENV`]).
    pub sample_bytes: Option<u64>,
    /// The seed of each thread's first countdown
    /// ([`profdev_mprof::sample::SAMPLE_SEED_ENV`]; else the clock's).
    pub sample_seed: Option<u64>,
    /// Temporary blocks per site ([`profdev_mprof::TEMPORARY_ENV`]).
    pub temporary: bool,
    /// What was live at the global peak ([`profdev_mprof::PEAK_ENV`]).
    pub peak: bool,
}

impl AttachOptions {
    /// The library's config: one `NAME=VALUE` line per setting, the
    /// names of the launched run's environment, reports going to `out`.
    /// A wrapper with a newline (which would end its line) is left out.
    pub fn config(&self, out: &Path) -> String {
        use profdev_mprof::sample::{SAMPLE_BYTES_ENV, SAMPLE_SEED_ENV};
        let digits: String = [(POOL_MALLOC, '1'), (POOL_MAP, '2'), (POOL_FILE, '3')]
            .iter()
            .filter(|(b, _)| self.pools.max(POOL_MALLOC) & b != 0)
            .map(|&(_, c)| c)
            .collect();
        let mut lines = vec![
            format!("PROFDEV_MPROF_DIR={}", out.display()),
            format!("{}={digits}", profdev_mprof::POOLS_ENV),
        ];
        let wrappers: Vec<&str> = self
            .wrappers
            .iter()
            .map(String::as_str)
            .filter(|w| !w.contains('\n'))
            .collect();
        if !wrappers.is_empty() {
            lines.push(format!("PROFDEV_MPROF_WRAPPERS={}", wrappers.join(",")));
        }
        let flags = [
            (self.stacks, profdev_mprof::STACKS_ENV),
            (self.temporary, profdev_mprof::TEMPORARY_ENV),
            (self.peak, profdev_mprof::PEAK_ENV),
        ];
        lines.extend(flags.iter().filter(|f| f.0).map(|f| format!("{}=1", f.1)));
        lines.extend(self.sample_bytes.map(|n| format!("{SAMPLE_BYTES_ENV}={n}")));
        lines.extend(self.sample_seed.map(|n| format!("{SAMPLE_SEED_ENV}={n}")));
        lines.iter().map(|l| format!("{l}\n")).collect()
    }
}

/// Load the accounting library into the running process `pid` and start
/// it counting as `options` say (the pools, `mprof --wrapper`s, stacks,
/// sampling, temporary blocks, the peak). Refused: ESRCH no such
/// process, EPERM not allowed to ptrace it (profdev's own credentials: a
/// device checks its writer's first), EBUSY another tracer holds it or it
/// is counted already, ENXIO a static program ("process N is out of reach:
/// statically linked, start it under profdev mprof instead") or a load
/// that failed (the sentence says why).
///
/// `permit`, when a requester's right was checked
/// ([`profdev_dev::access::ptrace_may_attach`],
/// for `pid`), is checked again once every thread is stopped, before the
/// library is loaded: a process that exec'd a set-id program since is let
/// go untouched (EPERM), so the library never runs with more privilege
/// than the requester.
pub fn attach_process(
    pid: u32,
    options: &AttachOptions,
    permit: Option<Permit>,
) -> Result<MemAttached, DevError> {
    let maps = profdev_inject::maps(pid).map_err(|e| inject_error(pid, e))?;
    let has_libc = maps.iter().any(|m| {
        Path::new(&m.path)
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("libc.so") || n.starts_with("libc-"))
    });
    if !has_libc {
        return Err(out_of_reach(pid));
    }
    if maps
        .iter()
        .any(|m| m.path.ends_with("/libprofdev_mprof.so"))
    {
        return Err(DevError::Busy(format!(
            "process {pid} has profdev's accounting library loaded already (it is counted by \
             profdev mprof or a startmp, or was detached: a process is attached once)"
        )));
    }
    let (_, start) = stat_of(pid).ok_or(DevError::NoProcess(pid))?;
    let (uid, gid) = fs_ids(pid).ok_or(DevError::NoProcess(pid))?;
    // A private directory the process can traverse but not list: the
    // library (readable by anyone: it is no secret) and out/, the
    // process's own, for its reports.
    let dir = tempfile::Builder::new()
        .prefix("profdev-attach.")
        .tempdir()
        .map_err(|e| io_dev("cannot make a directory for the accounting library", e))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
        .map_err(|e| io_dev("cannot make a directory for the accounting library", e))?;
    let lib = dir.path().join("libprofdev_mprof.so");
    profdev_safefile::write_file(&lib, profdev_mprof::LIBRARY, 0o555)
        .map_err(|e| io_dev("cannot write the accounting library", e))?;
    let out = dir.path().join("out");
    profdev_safefile::create_dir(&out, 0o700)
        .map_err(|e| io_dev("cannot make the report directory", e))?;
    std::os::unix::fs::chown(&out, Some(uid), Some(gid))
        .map_err(|e| io_dev("cannot give the report directory to the process's user", e))?;
    let mut config = options.config(&out);
    let mut tables = None;
    if options.stacks {
        let (line, server) = unwind_tables(pid, dir.path(), &maps, uid, gid)?;
        config.push_str(&line);
        tables = server;
    }
    let lib_s = lib.to_string_lossy().into_owned();
    // On a thread of its own: when it ends, the kernel releases any thread
    // of PID the injector could not detach.
    let r = profdev_inject::on_tracer_thread(|| {
        let mut t = profdev_inject::Target::attach(pid)?;
        // Stopped: the requester's right, again, on this very process.
        recheck(permit.as_ref(), pid)?;
        let handle = t.dlopen(&lib_s)?;
        let entry = t.dlsym(handle, "profdev_mprof_attach")?;
        let tid = t.main_thread();
        let cfg = t.write_string(tid, &config)?;
        Ok::<_, profdev_inject::InjectError>(t.call(tid, entry, &[cfg])? as u32 as i32)
    })
    .map_err(|e| inject_error(pid, e))?;
    match r {
        n if n > 0 => Ok(MemAttached {
            pid,
            start,
            dir,
            _tables: tables,
        }),
        0 => Err(DevError::NoDevice(format!(
            "process {pid} calls no malloc through a module's GOT: nothing to count"
        ))),
        -2 => Err(DevError::Busy(format!(
            "process {pid} is already being counted by an earlier startmp"
        ))),
        _ => Err(DevError::NoDevice(format!(
            "the accounting library could not start in process {pid} (no memory, or it \
             cannot use {})",
            out.display()
        ))),
    }
}

/// The unwind tables of the modules `maps` (process `pid`'s) holds (all
/// it has loaded, dlopen'd ones too), in `dir/unwind`, which becomes the
/// process's user's (`uid`, `gid`), with its files: the config line that
/// names it, and the service that builds the table of a module loaded
/// later on request ([`profdev_mprof::unwind::serve`]; none if it cannot
/// start: such a module's frames are then walked by frame pointer).
fn unwind_tables(
    pid: u32,
    dir: &Path,
    maps: &[profdev_inject::Mapping],
    uid: u32,
    gid: u32,
) -> Result<(String, Option<profdev_mprof::unwind::Server>), DevError> {
    // Each executable file mapping once, opened through map_files: the
    // very file mapped, whatever its path names now.
    let mut seen = std::collections::BTreeSet::new();
    let paths: Vec<std::path::PathBuf> = maps
        .iter()
        .filter(|m| m.path.starts_with('/') && m.perms.exec() && m.inode != 0)
        .filter(|m| seen.insert((m.major, m.minor, m.inode)))
        .map(|m| format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end).into())
        .collect();
    let udir = dir.join("unwind");
    let (k, v) = profdev_mprof::unwind::write_tables(&udir, &paths)
        .map_err(|e| io_dev("cannot write the unwind tables", e))?;
    // The socket bound while the directory is still root's (0700: nobody
    // else can put anything in it or swap what is there), 0600, and given
    // to the process's user below with the tables. Tables it builds later
    // are root's, 0444: the user reads them and cannot change them (the
    // directory is the user's: it can remove them, its own loss).
    let server = profdev_mprof::unwind::serve(&udir, 0o444).ok();
    if server.is_some() {
        use std::os::unix::fs::PermissionsExt;
        let socket = udir.join(profdev_mprof::unwind::SOCKET);
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io_dev("cannot give the unwind tables' socket its mode", e))?;
    }
    // The files first, while the directory is still root's, never
    // following a link; the directory last, after which root only adds
    // tables inside it (unique names, O_EXCL|O_NOFOLLOW, renamed: through
    // profdev-safefile), in a parent the user cannot change (root's).
    let chown = |p: &Path| std::os::unix::fs::lchown(p, Some(uid), Some(gid));
    let given = |e| io_dev("cannot give the unwind tables to the process's user", e);
    for e in std::fs::read_dir(&udir)
        .map_err(|e| io_dev("cannot list the unwind tables", e))?
        .flatten()
    {
        chown(&e.path()).map_err(given)?;
    }
    chown(&udir).map_err(given)?;
    Ok((format!("{k}={}\n", v.to_string_lossy()), server))
}

/// At most this many entries of an attached process's report directory
/// are looked at when waiting for a report on demand.
const MAX_REPORTS: usize = 4096;

/// The reports in `dir`, a directory the profiled process owns: for each
/// process its table of counts (`live.PID.K`, which outlives `_exit`,
/// signals and SIGKILL) unless its exit report is complete, else its
/// latest report; opened without following links, regular files only,
/// each refused by its size before it is read (a report at most what the
/// library can write, `profdev_mprof::MAX_REPORT`; a table the size its
/// header names), and at most `profdev_mprof::Limits::ATTACHED` in all
/// (256 files, 64 MiB).
fn read_reports(dir: &Path) -> Vec<profdev_mprof::Report> {
    profdev_mprof::read_dir_reports(dir, &profdev_mprof::Limits::ATTACHED).0
}

/// The reports at `paths` that open (no links), are regular files, fit
/// `profdev_mprof::MAX_REPORT` (checked before reading) and parse.
fn read_reports_at(paths: &[PathBuf]) -> Vec<profdev_mprof::Report> {
    paths
        .iter()
        .filter_map(|p| profdev_mprof::read_report(p).ok())
        .collect()
}

/// The pid and number of a report's file name, `mprof.PID.K`.
fn report_name(name: &str) -> Option<(u32, u64)> {
    let (pid, k) = name.strip_prefix("mprof.")?.split_once('.')?;
    Some((pid.parse().ok()?, k.parse().ok()?))
}

impl MemAttached {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The directory its reports and its table of counts go to.
    pub fn reports_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// Lock its directory against the sweep of other runs
    /// (`profdev_mprof::sweep`) while the returned file is open.
    pub fn hold(&self) -> Option<std::fs::File> {
        profdev_mprof::hold(self.dir.path()).ok()
    }

    /// Does the process still run (not a zombie, not a reused pid)?
    pub fn running(&self) -> bool {
        matches!(stat_of(self.pid), Some((s, start)) if start == self.start && s != 'Z' && s != 'X')
    }

    /// The latest report of each process (the attached one, and children
    /// it forked) written so far: at exit, or on request.
    pub fn reports(&self) -> Vec<profdev_mprof::Report> {
        read_reports(&self.dir.path().join("out"))
    }

    /// Ask the running process for a report now (the library's reporter
    /// thread writes one, as at exit) and wait for it, at most `timeout`;
    /// true when it came.
    pub fn request_report(&self, timeout: Duration) -> bool {
        use std::io::Write;
        use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
        let out = self.dir.path().join("out");
        let last = |dir: &Path| -> Option<u64> {
            std::fs::read_dir(dir)
                .ok()?
                .take(MAX_REPORTS)
                .filter_map(|e| report_name(&e.ok()?.file_name().to_string_lossy()))
                .filter(|&(p, _)| p == self.pid)
                .map(|(_, k)| k)
                .max()
        };
        let before = last(&out);
        let deadline = std::time::Instant::now() + timeout;
        // The reporter thread is not always waiting in open(2) (it may be
        // starting, or writing the last report): ENXIO until it is.
        let mut fifo = loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
                .open(out.join("request"))
            {
                Ok(f) => break f,
                Err(e)
                    if e.raw_os_error() == Some(libc::ENXIO)
                        && std::time::Instant::now() < deadline
                        && self.running() =>
                {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(_) => return false,
            }
        };
        // The process's own FIFO, in its own directory: a FIFO of anyone
        // else's (a hard link to another program's) is not written.
        let owner = std::fs::symlink_metadata(&out).map(|m| m.uid()).ok();
        if !fifo
            .metadata()
            .is_ok_and(|m| m.file_type().is_fifo() && Some(m.uid()) == owner && m.nlink() == 1)
            || fifo.write_all(b"r").is_err()
        {
            return false;
        }
        drop(fifo);
        loop {
            // A new report, complete (it parses only once "end" is there).
            if let Some(k) = last(&out).filter(|&k| Some(k) > before) {
                let path = out.join(format!("mprof.{}.{k}", self.pid));
                if read_reports_at(&[path]).len() == 1 {
                    return true;
                }
            }
            if std::time::Instant::now() >= deadline || !self.running() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl MemAttached {
    /// Whether the process maps the library still (it has not exec'd
    /// another program since the attach).
    pub fn maps_library(&self) -> bool {
        let lib = self.dir.path().join("libprofdev_mprof.so");
        profdev_inject::maps(self.pid)
            .is_ok_and(|maps| maps.iter().any(|m| Path::new(&m.path) == lib))
    }

    /// The latest complete report the process itself wrote (the last
    /// [`MemAttached::request_report`]'s, or its exit's), if any: unlike
    /// its table of counts, which [`MemAttached::reports`] prefers while it
    /// runs, it has the temporary blocks and the peak.
    pub fn latest_report(&self) -> Option<profdev_mprof::Report> {
        let out = self.dir.path().join("out");
        let k = std::fs::read_dir(&out)
            .ok()?
            .take(MAX_REPORTS)
            .filter_map(|e| report_name(&e.ok()?.file_name().to_string_lossy()))
            .filter(|&(p, _)| p == self.pid)
            .map(|(_, k)| k)
            .max()?;
        let path = out.join(format!("mprof.{}.{k}", self.pid));
        read_reports_at(&[path]).pop()
    }
}

impl MemAttached {
    /// Let the process go on uncounted: its GOT slots get back what they
    /// held before the attach (the library's `profdev_mprof_detach`,
    /// called with every thread stopped), then its reporter thread is
    /// woken to end. Ask for a report first ([`MemAttached::request_report`]):
    /// what was counted since is not reported. The library stays mapped
    /// (a thread may be inside it), so the directory stays until the
    /// process exits; the next sweep removes it. The number of slots
    /// restored (0 for a process that exec'd since: its new image was
    /// never counted, and nothing is done to it).
    ///
    /// # Errors
    ///
    /// The process is gone, cannot be stopped (another tracer holds it),
    /// or was patching a module just then (a second try works).
    pub fn detach(&self) -> Result<u32, DevError> {
        use std::os::unix::fs::OpenOptionsExt;
        if !self.running() {
            return Err(DevError::NoProcess(self.pid));
        }
        let lib = self.dir.path().join("libprofdev_mprof.so");
        let lib_s = lib.to_string_lossy().into_owned();
        let pid = self.pid;
        let r = profdev_inject::on_tracer_thread(|| {
            let mut t = profdev_inject::Target::attach(pid)?;
            // Stopped. A process that exec'd since (a set-id program,
            // perhaps) maps no library of ours: nothing to give back, and
            // nothing is loaded into it (RTLD_NOLOAD).
            let maps = profdev_inject::maps(pid)?;
            if !maps.iter().any(|m| Path::new(&m.path) == lib) {
                return Ok(0);
            }
            let handle = t.dlopen_loaded(&lib_s)?;
            let entry = t.dlsym(handle, "profdev_mprof_detach")?;
            let tid = t.main_thread();
            Ok::<_, profdev_inject::InjectError>(t.call(tid, entry, &[])? as u32 as i32)
        })
        .map_err(|e| inject_error(pid, e))?;
        // Its reporter thread waits on the FIFO: one more open wakes it
        // to see the detach and end (ENXIO while it is not in open(2) yet,
        // for at most a second; then it sleeps on, harmless).
        for _ in 0..200 {
            let woke = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
                .open(self.reports_dir().join("request"));
            match woke {
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) && self.running() => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => break,
            }
        }
        match r {
            n if n >= 0 => Ok(n as u32),
            -2 => Err(DevError::Busy(format!(
                "process {pid} was loading a library just then: detach again"
            ))),
            _ => Err(DevError::NoDevice(format!(
                "process {pid} was not counted (detached already?)"
            ))),
        }
    }
}

/// Dropped while its process still runs (the device went, or `mprof -p`
/// was interrupted), the directory stays: the process counts into it and
/// maps the library from it. The next sweep (`profdev_mprof::sweep`, at
/// the next attach or mprof run) removes it once no process maps it.
impl Drop for MemAttached {
    fn drop(&mut self) {
        if self.running() {
            self.dir.disable_cleanup(true);
        }
    }
}

/// The modules of `reports`, merged, as the device takes them (each
/// with its file's device and inode, so that the device merges the
/// reports of several processes as `profdev_mprof::merge` does).
pub(crate) fn modules_of(reports: &[profdev_mprof::Report]) -> Vec<ModuleCounts> {
    profdev_mprof::merge(reports)
        .iter()
        .map(|m| ModuleCounts {
            name: Path::new(&m.path)
                .file_name()
                .map(|b| b.to_string_lossy().into_owned())
                .unwrap_or_else(|| m.path.clone()),
            path: m.path.clone(),
            file: Some((m.dev, m.ino)),
            pairs: profdev_mprof::histogram_pairs(m),
        })
        .collect()
}

/// How long `stop` waits for an attached process's report.
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// This process's filesystem user id (whom its directories belong to).
pub(crate) fn fs_uid() -> u32 {
    fs_ids(std::process::id()).map_or(0, |(u, _)| u)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_names_the_launched_runs_settings() {
        let out = Path::new("/t/out");
        assert_eq!(
            AttachOptions::default().config(out),
            "PROFDEV_MPROF_DIR=/t/out\nPROFDEV_MPROF_POOLS=1\n"
        );
        let all = AttachOptions {
            pools: POOL_MALLOC | POOL_FILE,
            wrappers: vec!["my_alloc".into(), "bad\nPROFDEV_MPROF_DIR=/x".into()],
            stacks: true,
            sample_bytes: Some(524288),
            sample_seed: Some(7),
            temporary: true,
            peak: true,
        };
        assert_eq!(
            all.config(out),
            "PROFDEV_MPROF_DIR=/t/out\nPROFDEV_MPROF_POOLS=13\n\
             PROFDEV_MPROF_WRAPPERS=my_alloc\nPROFDEV_MPROF_STACKS=1\n\
             PROFDEV_MPROF_TEMPORARY=1\nPROFDEV_MPROF_PEAK=1\n\
             PROFDEV_MPROF_SAMPLE_BYTES=524288\nPROFDEV_MPROF_SAMPLE_SEED=7\n"
        );
    }
}
