//! The recorder of `profdev record`: a sampling session (system wide, on
//! processes or a thread, or on a command it starts) read into one
//! recording, `profdev.data` (`profdev_formats::recording`), written as
//! `FILE.partial` and renamed when recording ends. The command's man page
//! (`crates/cli/src/record.rs`) says what is recorded; this crate is how.
//!
//! * [`record`]: the session's setup (`profdev_sample`'s `PerfFactory`,
//!   `several` for `-p`, `spawn_profiled` for CMD, CMD run as a
//!   [`Job`]), the loop that reads the rings and hands each record to the
//!   recorder, the end (what the rings still hold, the symbols still being
//!   made, the rename). It returns an [`Outcome`] for the command to print.
//! * `recorder`: records in, the recording's entries out — tasks,
//!   objects, (object, offset) frames through the task model and, with
//!   `-g`, the unwinder; a stack that stops short of its root ends in an
//!   `[unwind failed: REASON]` frame, counted by reason.
//! * `symbols`: the thread that names the addresses first sampled in each
//!   second through the one `profdev_symbolize::Symbolizer` (the one `top`
//!   uses), so the ring reader never waits for ELF and DWARF.
//! * `jit`: frames in code a runtime generated, named from its perf map
//!   or jitdump (`profdev_symbolize::jit`) as they are sampled.
//! * `partial`: `FILE.partial`, its sync and rename.
//! * [`intervals`]: the same recorder cut into one recording per interval,
//!   for a sampler that runs for days (`profdev agent`).
//!
//! The recorder and the symbol thread take records and addresses, not a
//! live session: their unit tests feed them synthetic samples.

#![forbid(unsafe_code)]

pub mod intervals;
mod jit;
mod partial;
mod recorder;
mod symbols;

pub use partial::partial_path;
pub use profdev_sample::job::Job;

use partial::Partial;
use profdev_core::{SampleSource, SessionConfig, SourceError, SourceStats, Target};
use profdev_formats::recording::{Encoder, Header, FLAG_OFF_CPU, FLAG_STACKS};
use recorder::{Recorder, Setup};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// How often the functions and lines of newly sampled addresses are
/// written (a `.partial` left by a crash has those of its samples up to
/// the last time).
pub const SYMBOLS_EVERY: Duration = Duration::from_secs(1);

/// Why recording could not be done: one sentence.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Error(pub String);

/// What to record, as `profdev record`'s options say.
#[derive(Clone, Debug)]
pub struct Options {
    /// `-g`: stacks (the kernel's callchain, the user stack unwound).
    pub stacks: bool,
    /// `-F`: samples per second per CPU.
    pub frequency: u32,
    /// `-a`: every CPU.
    pub all: bool,
    /// `-p`: existing processes.
    pub pids: Vec<u32>,
    /// `-t`: an existing thread.
    pub tid: Option<u32>,
    /// `-o`: the recording.
    pub output: PathBuf,
    /// Write symbol and line tables (not `--no-symbols`).
    pub symbols: bool,
    /// `--stack-bytes`: with `-g`, user stack copied per sample.
    pub stack_bytes: u32,
    /// CMD and its arguments (with -a, -p or -t only the duration).
    pub command: Vec<OsString>,
    /// `--off-cpu`: also the time each thread spends off the CPU, with
    /// the stack it blocked in (needs `stacks`).
    pub off_cpu: bool,
}

/// How a recording ended, for the command to report.
pub struct Outcome {
    /// The recording.
    pub output: PathBuf,
    /// The rename of `FILE.partial` to FILE; an error leaves the
    /// `.partial`.
    pub written: Result<(), Error>,
    /// Samples written.
    pub samples: u64,
    /// Bytes written.
    pub bytes: u64,
    /// The session's loss and throttle counts.
    pub stats: SourceStats,
    /// With -g, the unwinder's counts as a sentence.
    pub unwind: Option<String>,
    /// Stacks ending in `[unwind failed: REASON]`: each reason and its
    /// count, most frequent first.
    pub failures: Vec<(String, u64)>,
    /// Why sampling stopped before its end, if it did.
    pub stopped: Option<SourceError>,
    /// CMD's job (its signals and exit status).
    pub job: Job,
    /// CMD's status, when there was a CMD.
    pub child: Option<ExitStatus>,
}

impl Outcome {
    /// `wrote FILE`, or `left FILE.partial` when it could not be renamed.
    pub fn wrote(&self) -> String {
        match &self.written {
            Ok(()) => format!("wrote {}", self.output.display()),
            Err(_) => format!("left {}", partial_path(&self.output).display()),
        }
    }
}

/// The session `opts` asks for.
fn session_config(opts: &Options) -> Result<SessionConfig, Error> {
    let attach = opts.all || !opts.pids.is_empty() || opts.tid.is_some();
    if !attach && opts.command.is_empty() {
        return Err(Error(
            "nothing to record: give a command (profdev record -- CMD) or -a, -p PID or -t TID"
                .into(),
        ));
    }
    let target = if opts.all {
        Target::System
    } else if let Some(&pid) = opts.pids.first().or(opts.tid.as_ref()) {
        Target::Process {
            pid,
            inherit: false,
        }
    } else {
        Target::Process {
            pid: 0,
            inherit: true,
        }
    };
    let config = SessionConfig {
        target,
        frequency_hz: opts.frequency,
        kernel: true,
        user: true,
        callchain: opts.stacks,
        user_stack_bytes: if opts.stacks { opts.stack_bytes } else { 0 },
        track_tasks: true,
        off_cpu: opts.off_cpu,
    };
    if opts.off_cpu && !opts.stacks {
        return Err(Error(
            "--off-cpu records where each thread blocked: add -g (profdev record -g --off-cpu)"
                .into(),
        ));
    }
    config.validate().map_err(|e| Error(e.to_string()))?;
    Ok(config)
}

/// The threads of process `pid`, from `/proc/PID/task`.
fn threads_of(pid: u32) -> Result<Vec<u32>, Error> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|_| {
        Error(format!(
            "no process {pid}: give the id of a running process (-p PID[,PID])"
        ))
    })?;
    let mut tids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    if tids.is_empty() {
        return Err(Error(format!(
            "process {pid} has no threads left: it is exiting"
        )));
    }
    Ok(tids)
}

/// Resolves CMD's name to the program to run, or says why not.
pub type FindProgram<'a> = &'a dyn Fn(&OsString) -> Result<PathBuf, String>;

/// Start CMD (`command`, not empty) as `job`, with no session of its own.
fn start(job: &mut Job, command: &[OsString], find: FindProgram<'_>) -> Result<(), Error> {
    let program = find(&command[0]).map_err(Error)?;
    let mut cmd = std::process::Command::new(&program);
    cmd.args(&command[1..]);
    job.prepare(&mut cmd);
    let child = cmd
        .spawn()
        .map_err(|e| Error(format!("cannot run {}: {e}", program.display())))?;
    job.started(&child);
    Ok(())
}

/// The sampling session: attached (system wide, or one session per thread
/// of each `-p` process, read as one), with CMD, if any, started beside
/// it; or on CMD, started by the session. Also whether there is a CMD.
fn open_session(
    opts: &Options,
    factory: &profdev_sample::PerfFactory,
    config: &SessionConfig,
    job: &mut Job,
    find: FindProgram<'_>,
) -> Result<(Box<dyn SampleSource>, bool), Error> {
    let attach = opts.all || !opts.pids.is_empty() || opts.tid.is_some();
    if !attach {
        let program = find(&opts.command[0]).map_err(Error)?;
        let mut cmd = std::process::Command::new(&program);
        cmd.args(&opts.command[1..]);
        job.prepare(&mut cmd);
        let (child, source) = factory
            .spawn_profiled(&mut cmd, config)
            .map_err(|e| Error(e.to_string()))?;
        job.started(&child);
        return Ok((source, true));
    }
    let source: Box<dyn SampleSource> = if opts.pids.is_empty() {
        Box::new(
            factory
                .open_perf(config)
                .map_err(|e| Error(e.to_string()))?,
        )
    } else {
        // One session per thread of each process (an event follows
        // one task and what it starts later, not its present
        // siblings), read as one.
        let mut sources: Vec<Box<dyn SampleSource>> = Vec::new();
        for &pid in &opts.pids {
            for tid in threads_of(pid)? {
                let config = SessionConfig {
                    target: Target::Process {
                        pid: tid,
                        inherit: true,
                    },
                    ..config.clone()
                };
                match factory.open_perf(&config) {
                    Ok(s) => sources.push(Box::new(s)),
                    // A thread that ended since it was listed.
                    Err(_) if !Path::new(&format!("/proc/{pid}/task/{tid}")).exists() => {}
                    Err(e) => return Err(Error(e.to_string())),
                }
            }
        }
        Box::new(profdev_sample::several::Several::new(sources))
    };
    if opts.command.is_empty() {
        return Ok((source, false));
    }
    start(job, &opts.command, find)?;
    Ok((source, true))
}

/// Record as `opts` asks, until CMD ends (or, attached without one, a
/// signal, or the session's end); the tasks' files are kept in `objects`
/// (the table the live source reports mappings to); `find` resolves CMD's
/// name. An error
/// before or while recording is returned as one sentence (a `.partial`
/// begun stays); otherwise the [`Outcome`], even when the final rename
/// failed or sampling stopped early.
pub fn record(
    opts: &Options,
    objects: profdev_symbolize::Objects,
    find: FindProgram<'_>,
) -> Result<Outcome, Error> {
    let config = session_config(opts)?;
    let attach = opts.all || !opts.pids.is_empty() || opts.tid.is_some();
    let mut job = Job::new().map_err(|e| Error(e.to_string()))?;
    let mut out = Partial::create(&opts.output)?;
    let start_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let enc = Encoder::new(&Header {
        flags: if opts.stacks { FLAG_STACKS } else { 0 }
            | if opts.off_cpu { FLAG_OFF_CPU } else { 0 },
        start_ns,
        period_ns: 1_000_000_000 / u64::from(opts.frequency.max(1)),
    });
    let setup = Setup {
        stacks: opts.stacks,
        stack_bytes: opts.stack_bytes,
        symbols: opts.symbols,
        only_tid: opts.tid,
    };
    let thread = symbols::SymbolThread::start();
    // The live source opens each mapped file into `objects` the moment it
    // decodes the mapping, while the process most likely still runs.
    let factory = profdev_sample::PerfFactory::new().with_mapping_hook(objects.mapping_hook());
    let mut rec = Recorder::new(enc, &setup, objects, Some(thread));
    out.write(&mut rec.enc)?;

    let (mut source, has_child) = open_session(opts, &factory, &config, &mut job, find)?;
    let stopped = read_all(
        &mut *source,
        &mut rec,
        &mut out,
        &mut job,
        attach,
        has_child,
    )?;
    let stats = source.stats();
    drop(source);
    let child = has_child.then(|| job.wait());
    // Threads still waiting (attached) waited until now.
    rec.close_off_cpu(profdev_sample::sys::monotonic_ns())?;
    rec.finish_symbols();
    rec.enc.end();
    out.write(&mut rec.enc)?;
    let samples = rec.enc.samples();
    let bytes = out.bytes;
    let written = out.finish(&opts.output);
    Ok(Outcome {
        output: opts.output.clone(),
        written,
        samples,
        bytes,
        stats,
        unwind: rec.unwind_stats(),
        failures: rec.failures(),
        stopped,
        job,
        child,
    })
}

/// Read the session until CMD ends (attached: CMD, or a signal without
/// one) or the session does, writing as it goes and handing new addresses
/// to the symbol thread once a second; then what the rings and the merge
/// still hold. Returns why sampling stopped early, if it did.
fn read_all(
    source: &mut dyn SampleSource,
    rec: &mut Recorder,
    out: &mut Partial,
    job: &mut Job,
    attach: bool,
    has_child: bool,
) -> Result<Option<SourceError>, Error> {
    let mut batch = Vec::new();
    let mut flushed = Instant::now();
    let failed = loop {
        let r = source.read(&mut batch, Duration::from_millis(100));
        for record in batch.drain(..) {
            rec.record(&record)?;
        }
        if flushed.elapsed() >= SYMBOLS_EVERY {
            rec.flush_symbols();
            flushed = Instant::now();
        }
        rec.drain_symbols();
        out.write(&mut rec.enc)?;
        job.poll();
        if attach {
            if has_child && job.finished() {
                break None;
            }
            if !has_child && job.signalled() {
                break None;
            }
        }
        match r {
            Ok(()) => {}
            Err(SourceError::Ended) => break None,
            Err(e) => break Some(e),
        }
    };
    // What is still in the rings, and what the source held back for its
    // time-order merge.
    if failed.is_none() {
        let _ = source.read(&mut batch, Duration::from_millis(0));
        source.flush(&mut batch);
        for record in batch.drain(..) {
            rec.record(&record)?;
        }
    }
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options {
            stacks: false,
            frequency: 1000,
            all: false,
            pids: vec![],
            tid: None,
            output: "profdev.data".into(),
            symbols: true,
            stack_bytes: 16384,
            command: vec![],
            off_cpu: false,
        }
    }

    #[test]
    fn the_session_follows_the_options() {
        let e = session_config(&options()).unwrap_err().to_string();
        assert_eq!(
            e,
            "nothing to record: give a command (profdev record -- CMD) or -a, -p PID or -t TID"
        );
        let cmd = Options {
            command: vec!["true".into()],
            stacks: true,
            ..options()
        };
        let c = session_config(&cmd).unwrap();
        assert_eq!(
            c.target,
            Target::Process {
                pid: 0,
                inherit: true
            }
        );
        assert_eq!((c.callchain, c.user_stack_bytes), (true, 16384));
        let pids = Options {
            pids: vec![42, 43],
            ..options()
        };
        let c = session_config(&pids).unwrap();
        assert_eq!(
            c.target,
            Target::Process {
                pid: 42,
                inherit: false
            }
        );
        assert_eq!(c.user_stack_bytes, 0);
        let all = Options {
            all: true,
            ..options()
        };
        assert_eq!(session_config(&all).unwrap().target, Target::System);
        let zero = Options {
            frequency: 0,
            ..all
        };
        assert!(session_config(&zero).is_err());
    }

    #[test]
    fn threads_of_lists_a_process_or_says_it_is_none() {
        let me = std::process::id();
        assert!(threads_of(me).unwrap().contains(&me));
        assert_eq!(
            threads_of(u32::MAX).unwrap_err().to_string(),
            format!(
                "no process {}: give the id of a running process (-p PID[,PID])",
                u32::MAX
            )
        );
    }
}
