//! `profdev record [-g] [-F HZ] [-a | -p PID[,PID] | -t TID] [-o FILE] [-- CMD [ARGS]]`:
//! sample with stacks into one recording that `profdev export` turns into
//! every format.
//!
//! # Synopsis
//!
//! ```text
//! profdev record [-g] [-F HZ] [--no-symbols] [--stack-bytes N] [-o FILE] -- CMD [ARGS]
//! profdev record [-g] [-F HZ] (-a | -p PID[,PID] | -t TID) [-o FILE] [-- CMD [ARGS]]
//! ```
//!
//! # Description
//!
//! Samples kernel and user mode at `-F` Hz (software cpu-clock, default
//! 1000): CMD and the processes it starts; or, as with perf, with `-a`
//! every CPU, with `-p` processes (comma separated) with every thread they
//! have and start (one session per thread, read as one by
//! `profdev_sample::several`), with `-t` one thread,
//! where a CMD only sets the duration and without one recording runs until
//! SIGINT, SIGTERM or SIGHUP (or, with `-p`/`-t`, until the target
//! exits). With `-g` each sample carries its stack: the kernel's callchain
//! and the user stack unwound while recording (`.eh_frame` CFI, frame
//! pointers where better: `profdev_symbolize::unwind`), so no stack copy
//! reaches the disk. A stack the unwinder could not take to its root ends
//! in the frame `[unwind failed: REASON]` (no stack copy, an address in
//! anonymous memory or outside any mapping, a stack deeper than the copy,
//! or no caller found from an object), which every export shows; the
//! counts by reason are printed at the end.
//!
//! The recording (`crates/formats/src/recording/`) holds the Task entry of
//! every sampled thread and the Object entry of every sampled file
//! (device, inode, build id), each written before the first sample using
//! it, the samples as (object, offset) frames, losses, and the symbols of
//! every function sampled with the source line of each sampled address
//! (kernel functions from `/proc/kallsyms`), so exports work after the
//! binaries change (`--no-symbols` leaves them out). User functions and
//! lines are made once a second for the addresses first sampled in it, by a
//! thread of their own (reading ELF and DWARF files must not keep the ring
//! reader waiting: a full ring drops samples), each object's ELF opened
//! once for them (through the descriptor the objects table kept when it was
//! mapped) and closed, so memory stays bounded however many objects a
//! system-wide recording meets; they are written as they are done.
//!
//! FILE (default `profdev.data`) is written progressively as
//! `FILE.partial` (created 0600, never through a link; an existing
//! `.partial` is refused rather than overwritten), then renamed to FILE
//! when recording ends, an existing FILE first renamed `FILE.old`, as perf
//! does. A crash or SIGKILL leaves the `.partial`, which `profdev export`
//! reads up to its last whole record.
//!
//! # Example
//!
//! ```text
//! profdev record -g -- ./prog && profdev export folded | sort -k2 -n | tail
//! ```
//!
//! # Bugs
//!
//! `-p` takes one process. Offsets of objects whose ELF cannot be read are
//! file offsets, without symbols; kernel modules' functions are not named
//! (`[unknown] in [kernel.kallsyms]`). A `.partial` left by a crash lacks
//! the functions of its last second's new addresses. System-wide with
//! `-g` on a busy machine, the 16 KB stack copies can overflow the rings
//! (the loss count is printed).

use crate::child::{find_program, Job};
use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use profdev_core::{
    CpuMode, ProcessVa, Record, Sample, SampleSource, SessionConfig, SourceError, Target,
};
use profdev_formats::recording::{
    unwind_failed_label, Encoder, Frame, Function, Header, Line, Loss, ObjectInfo, ObjectKind,
    SampleInfo, Task, FLAG_STACKS,
};
use profdev_symbolize::{ElfLayout, ElfObject, KernelSymbols};
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

const NAME: &str = "profdev record";

/// How often the functions and lines of newly sampled addresses are
/// written (a `.partial` left by a crash has those of its samples up to
/// the last time).
const SYMBOLS_EVERY: Duration = Duration::from_secs(1);

/// Record samples (with -g, stacks) into one file for profdev export.
#[derive(Parser, Debug)]
#[command(
    name = "profdev record",
    version,
    after_help = format!("Without -a, -p or -t, CMD is recorded with the processes it starts. With them, \
        a CMD only sets the duration; without one, recording runs until SIGINT, SIGTERM or SIGHUP. \
        FILE is written as FILE.partial and renamed at the end (an existing FILE becomes FILE.old); \
        'profdev export FORMAT' turns it into folded, svg, pprof, firefox, perf-script, gmon, kpdata, \
        proc-profile or otlp (see profdev-export(1)).\n\n{}", crate::child::SIGNALS_HELP)
)]
pub(crate) struct Args {
    /// Record stacks: the kernel callchain and the user stack, unwound while recording.
    #[arg(short = 'g')]
    stacks: bool,
    /// Samples per second per CPU (software cpu-clock), at most 10000.
    #[arg(short = 'F', value_name = "HZ", default_value_t = 1000)]
    frequency: u32,
    /// Every CPU, every task.
    #[arg(short = 'a', conflicts_with_all = ["pid", "tid"])]
    all: bool,
    /// Existing processes, comma separated (each with all its threads).
    #[arg(
        short = 'p',
        value_name = "PID[,PID]",
        value_delimiter = ',',
        conflicts_with = "tid"
    )]
    pid: Vec<u32>,
    /// An existing thread.
    #[arg(short = 't', value_name = "TID")]
    tid: Option<u32>,
    /// The recording.
    #[arg(short = 'o', value_name = "FILE", default_value = "profdev.data")]
    output: PathBuf,
    /// Leave the symbol and line tables out (exports then name objects only).
    #[arg(long)]
    no_symbols: bool,
    /// With -g: bytes of user stack copied with each sample for unwinding.
    #[arg(long, value_name = "BYTES", default_value_t = 16384)]
    stack_bytes: u32,
    /// The command to record (or, with -a/-p/-t, whose run sets the duration).
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::cmdline::parse::<Args>(NAME, args) {
        Ok(args) => crate::cmdline::finish(NAME, run(&args)),
        Err(code) => code,
    }
}

/// The task and mapping model and the unwinder, behind the few calls the
/// recorder makes: the one place that knows `profdev_symbolize::Tasks` and
/// `UserUnwinder`.
struct Model {
    tasks: profdev_symbolize::Tasks,
    unwinder: Option<profdev_symbolize::unwind::UserUnwinder>,
}

/// A mapping as the recorder needs it.
struct Mapped {
    path: String,
    dev: u64,
    inode: u64,
    build_id: Vec<u8>,
    is_file: bool,
    file_offset: u64,
    /// The file that was mapped, opened when its mapping was reported.
    object: Option<std::sync::Arc<profdev_symbolize::Object>>,
}

impl Model {
    fn new(stacks: bool, objects: profdev_symbolize::Objects) -> Model {
        Model {
            tasks: profdev_symbolize::Tasks::with_objects(objects),
            unwinder: stacks.then(profdev_symbolize::unwind::UserUnwinder::new),
        }
    }
    fn observe(&mut self, r: &Record) {
        self.tasks.observe(r);
    }
    /// The user frames of `s` to symbolize, innermost first (return
    /// addresses less one); with `-g`, why the stack stops short of its
    /// root when the unwinder could not reach it.
    fn user_frames(&mut self, s: &Sample, out: &mut Vec<u64>, stack_bytes: u32) -> Option<String> {
        // A kernel thread or the idle task has no user context: no user
        // frames (not one "[unknown]" frame holding a kernel address).
        let no_user = s.is_idle()
            || (s.mode != CpuMode::User && s.user_regs.is_none() && s.user_chain.is_empty());
        match &mut self.unwinder {
            _ if no_user => None,
            Some(u) => {
                let st = u.unwind(&self.tasks, s);
                out.extend((0..st.frames.len()).map(|i| st.lookup_address(i).0));
                use profdev_symbolize::unwind::UnwindMethod;
                if !matches!(st.method, UnwindMethod::Truncated | UnwindMethod::IpOnly) {
                    return None;
                }
                Some(self.unwind_failure(s, out.last().copied(), stack_bytes))
            }
            None if s.mode == CpuMode::User => {
                out.push(s.ip);
                None
            }
            None => None,
        }
    }
    /// Why a stack that ends at `last` was not unwound further.
    fn unwind_failure(&self, s: &Sample, last: Option<u64>, stack_bytes: u32) -> String {
        if s.user_regs.is_none() || s.user_stack.is_empty() {
            return "no stack copy".into();
        }
        let Some(last) = last else {
            return "no frame".into();
        };
        match self.tasks.lookup(s.pid, ProcessVa(last)) {
            None => "address outside any mapping".into(),
            Some(m) if !m.is_file() => "anonymous memory (JIT?)".into(),
            Some(_) if s.user_stack.len() >= stack_bytes as usize => {
                format!("stack deeper than the {stack_bytes}-byte copy")
            }
            Some(m) => format!(
                "no caller found from {}",
                m.path.rsplit('/').next().unwrap_or(&m.path)
            ),
        }
    }
    fn lookup(&self, pid: u32, va: u64) -> Option<Mapped> {
        let m = self.tasks.lookup(pid, ProcessVa(va))?;
        Some(Mapped {
            path: m.path.clone(),
            dev: m.file.map_or(0, |f| libc::makedev(f.major, f.minor) as u64),
            inode: m.file.map_or(0, |f| f.ino),
            build_id: m.build_id.clone().unwrap_or_default(),
            is_file: m.is_file(),
            file_offset: m.file_offset(ProcessVa(va)),
            object: m.object.clone(),
        })
    }
    fn comm(&self, pid: u32, tid: u32) -> String {
        self.tasks
            .thread_comm(tid)
            .or_else(|| self.tasks.comm(pid))
            .unwrap_or("?")
            .to_string()
    }
    fn unwind_stats(&self) -> Option<String> {
        self.unwinder.as_ref().map(|u| u.stats().to_string())
    }
}

/// An object of the recording: its load layout (small, kept while
/// recording) turns file offsets into link-time addresses. Its symbols and
/// DWARF are opened only by the [`Symbolizer`], once per flush for
/// all its new addresses, and closed again: a system-wide recording meets
/// thousands of objects, too many to keep open.
struct Obj {
    id: u32,
    path: String,
    layout: Option<ElfLayout>,
    /// The mapped file (kept open by the objects table), read at each
    /// flush instead of whatever is at `path` by then.
    object: Option<std::sync::Arc<profdev_symbolize::Object>>,
}

/// The kernel object: id, text symbols (address, name) sorted.
struct Kernel {
    id: u32,
    syms: Vec<(u64, String)>,
}

struct Recorder {
    enc: Encoder,
    model: Model,
    symbols: bool,
    /// tid -> (pid, generation, comm) as last written.
    tasks: HashMap<u32, (u32, u32, String)>,
    objects: HashMap<(String, u64, u64, Vec<u8>), Obj>,
    /// New addresses to symbolize, by object.
    pending: HashMap<(String, u64, u64, Vec<u8>), Vec<u64>>,
    kernel: Option<Kernel>,
    /// (object, offset) already symbolized; kernel function starts written.
    seen: HashSet<(u32, u64)>,
    frames: Vec<Frame>,
    addrs: Vec<u64>,
    only_tid: Option<u32>,
    /// Names addresses off the reader's path; gone after
    /// `finish_symbols`.
    symbolizer: Option<Symbolizer>,
    /// Unwind failures by reason: the label object's id and the count.
    failures: HashMap<String, (u32, u64)>,
    /// With -g, the bytes of user stack each sample copies.
    stack_bytes: u32,
}

impl Recorder {
    fn record(&mut self, r: &Record) -> Result<()> {
        self.model.observe(r);
        match r {
            Record::Comm {
                pid,
                tid,
                comm,
                exec,
                time,
            } => {
                // A thread already written gets a new entry at an exec (the
                // next generation) or a rename; others get theirs at
                // their first sample.
                if let Some((_, generation, old)) = self.tasks.get(tid).cloned() {
                    if *exec || old != *comm {
                        self.task(*pid, *tid, generation + u32::from(*exec), comm, *time);
                    }
                }
            }
            Record::Lost { cpu, count, time } => self.enc.loss(&Loss {
                time: *time,
                cpu: *cpu,
                lost: *count,
            }),
            Record::Sample(s) => self.sample(s)?,
            _ => {}
        }
        Ok(())
    }

    fn task(&mut self, pid: u32, tid: u32, generation: u32, comm: &str, time: u64) {
        self.enc.task(&Task {
            pid,
            tid,
            generation,
            time,
            comm: comm.to_string(),
        });
        self.tasks.insert(tid, (pid, generation, comm.to_string()));
    }

    fn sample(&mut self, s: &Sample) -> Result<()> {
        if self.only_tid.is_some_and(|t| t != s.tid) {
            return Ok(());
        }
        if self.tasks.get(&s.tid).is_none_or(|t| t.0 != s.pid) {
            let comm = self.model.comm(s.pid, s.tid);
            self.task(s.pid, s.tid, 0, &comm, s.time);
        }
        self.frames.clear();
        if s.mode == CpuMode::Kernel {
            let chain: Vec<u64> = if s.kernel_chain.is_empty() {
                vec![s.ip]
            } else {
                s.kernel_chain.clone()
            };
            for (i, &a) in chain.iter().enumerate() {
                let f = self.kernel_frame(if i == 0 { a } else { a.wrapping_sub(1) });
                self.frames.push(f);
            }
        }
        let mut addrs = std::mem::take(&mut self.addrs);
        addrs.clear();
        let failed = self.model.user_frames(s, &mut addrs, self.stack_bytes);
        for &va in &addrs {
            let f = self.user_frame(s.pid, va);
            self.frames.push(f);
        }
        self.addrs = addrs;
        if let Some(reason) = failed {
            let f = self.label_frame(reason);
            self.frames.push(f);
        }
        let info = SampleInfo {
            time: s.time,
            cpu: s.cpu,
            pid: s.pid,
            tid: s.tid,
            weight: s.period,
            kernel: s.mode == CpuMode::Kernel,
        };
        let frames = std::mem::take(&mut self.frames);
        let r = self.enc.sample(&info, &frames);
        self.frames = frames;
        r.map_err(|e| anyhow!("internal error: {e}"))
    }

    /// The frame `[unwind failed: REASON]`, the outermost of a stack the
    /// unwinder could not take to its root (its label object written once).
    fn label_frame(&mut self, reason: String) -> Frame {
        let enc = &mut self.enc;
        let (id, n) = self.failures.entry(reason).or_insert_with_key(|reason| {
            let id = enc.object(&ObjectInfo {
                kind: ObjectKind::Label,
                path: unwind_failed_label(reason),
                ..ObjectInfo::default()
            });
            (id, 0)
        });
        *n += 1;
        Frame {
            object: *id,
            offset: 0,
        }
    }

    fn kernel_frame(&mut self, addr: u64) -> Frame {
        if self.kernel.is_none() {
            let id = self.enc.object(&ObjectInfo {
                kind: ObjectKind::Kernel,
                path: "[kernel.kallsyms]".into(),
                ..ObjectInfo::default()
            });
            let mut syms: Vec<(u64, String)> = Vec::new();
            // The text range, for the proc-profile and kpdata exports
            // (from every symbol: a text alias may hide them in the list).
            let mut edges: Vec<Function> = Vec::new();
            if self.symbols {
                if let Ok(k) = KernelSymbols::running() {
                    syms = k
                        .text_symbols()
                        .into_iter()
                        .filter(|s| s.addr != 0)
                        .map(|s| (s.addr, s.name.clone()))
                        .collect();
                    for name in ["_stext", "_etext"] {
                        if let Some(s) = k
                            .all()
                            .iter()
                            .find(|s| s.name == name && s.module.is_none() && s.addr != 0)
                        {
                            edges.push(Function {
                                start: s.addr,
                                len: 0,
                                name: name.into(),
                                lines: vec![],
                            });
                        }
                    }
                }
            }
            if !edges.is_empty() {
                let _ = self.enc.symbols(id, &[], &edges);
            }
            self.kernel = Some(Kernel { id, syms });
        }
        let k = self.kernel.as_ref().expect("made above");
        let id = k.id;
        let i = k.syms.partition_point(|(a, _)| *a <= addr);
        if let Some(j) = i.checked_sub(1) {
            let (start, name) = &k.syms[j];
            if self.seen.insert((id, *start)) {
                let end = k.syms.get(j + 1).map_or(start + 1, |(a, _)| *a);
                let f = Function {
                    start: *start,
                    len: end - start,
                    name: name.clone(),
                    lines: vec![],
                };
                let _ = self.enc.symbols(id, &[], &[f]);
            }
        }
        Frame {
            object: id,
            offset: addr,
        }
    }

    fn user_frame(&mut self, pid: u32, va: u64) -> Frame {
        let Some(m) = self.model.lookup(pid, va) else {
            return Frame {
                object: 0,
                offset: va,
            };
        };
        let key = (m.path.clone(), m.dev, m.inode, m.build_id.clone());
        if !self.objects.contains_key(&key) {
            let kind = if m.is_file {
                ObjectKind::User
            } else {
                ObjectKind::Anon
            };
            let layout = m
                .is_file
                .then(|| match &m.object {
                    Some(o) => o.layout().ok().map(|l| (*l).clone()),
                    None => ElfLayout::open(Path::new(&m.path)).ok(),
                })
                .flatten()
                // A file replaced since it was mapped is not the object.
                .filter(|e| m.build_id.is_empty() || e.build_id() == Some(&m.build_id[..]));
            // The kernel reports a build id or a device and inode, not
            // both: the other from the file.
            let build_id = match (&layout, m.build_id.is_empty()) {
                (Some(e), true) => e.build_id().map(<[u8]>::to_vec).unwrap_or_default(),
                _ => m.build_id.clone(),
            };
            let (dev, inode) = match (m.inode, m.is_file) {
                (0, true) => {
                    use std::os::unix::fs::MetadataExt;
                    std::fs::metadata(&m.path).map_or((0, 0), |md| (md.dev(), md.ino()))
                }
                _ => (m.dev, m.inode),
            };
            let id = self.enc.object(&ObjectInfo {
                kind,
                dev,
                inode,
                build_id,
                path: m.path.clone(),
            });
            self.objects.insert(
                key.clone(),
                Obj {
                    id,
                    path: m.path.clone(),
                    layout,
                    object: m.object.clone(),
                },
            );
        }
        let obj = &self.objects[&key];
        let id = obj.id;
        let offset = match &obj.layout {
            Some(l) => l
                .file_addr_of_offset(m.file_offset)
                .map_or(m.file_offset, |a| a.0),
            None if m.is_file => m.file_offset,
            None => va,
        };
        if self.symbols && obj.layout.is_some() && self.seen.insert((id, offset)) {
            self.pending.entry(key).or_default().push(offset);
        }
        Frame { object: id, offset }
    }

    /// Hand the new addresses of each object to the symbolizer thread:
    /// reading ELF and DWARF files can take seconds, and the reader of the
    /// rings must not wait for it (the kernel drops what a full ring
    /// cannot take).
    fn flush_symbols(&mut self) {
        for (key, offsets) in std::mem::take(&mut self.pending) {
            let obj = &self.objects[&key];
            let Some(symbolizer) = &self.symbolizer else {
                return;
            };
            let _ = symbolizer.jobs.send(SymbolJob {
                id: obj.id,
                path: obj.path.clone(),
                object: obj.object.clone(),
                want: obj
                    .layout
                    .as_ref()
                    .and_then(|l| l.build_id().map(<[u8]>::to_vec)),
                offsets,
            });
        }
    }

    /// Write the symbol tables the symbolizer has finished.
    fn drain_symbols(&mut self) {
        let Some(symbolizer) = &self.symbolizer else {
            return;
        };
        while let Ok((id, files, funcs)) = symbolizer.done.try_recv() {
            let _ = self.enc.symbols(id, &files, &funcs);
        }
    }

    /// Wait for every table still being made and write it.
    fn finish_symbols(&mut self) {
        self.flush_symbols();
        let Some(Symbolizer { jobs, done, thread }) = self.symbolizer.take() else {
            return;
        };
        drop(jobs);
        for (id, files, funcs) in done.iter() {
            let _ = self.enc.symbols(id, &files, &funcs);
        }
        let _ = thread.join();
    }
}

/// Addresses of one object to name.
struct SymbolJob {
    id: u32,
    path: String,
    object: Option<std::sync::Arc<profdev_symbolize::Object>>,
    /// The build id its layout had.
    want: Option<Vec<u8>>,
    offsets: Vec<u64>,
}

type SymbolTable = (u32, Vec<String>, Vec<Function>);

/// The thread that names sampled addresses, off the ring reader's path:
/// each object opened once per job (through the descriptor the objects
/// table kept, else by path), verified against the build id its layout
/// had, and closed, so memory stays bounded in a long recording.
struct Symbolizer {
    jobs: std::sync::mpsc::Sender<SymbolJob>,
    done: std::sync::mpsc::Receiver<SymbolTable>,
    thread: std::thread::JoinHandle<()>,
}

impl Symbolizer {
    fn start() -> Symbolizer {
        let (jobs, todo) = std::sync::mpsc::channel::<SymbolJob>();
        let (tx, done) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            for job in todo {
                if let Some(table) = symbolize(job) {
                    if tx.send(table).is_err() {
                        return;
                    }
                }
            }
        });
        Symbolizer { jobs, done, thread }
    }
}

fn symbolize(job: SymbolJob) -> Option<SymbolTable> {
    let opened = match job.object.as_ref().and_then(|o| o.file()) {
        Some(f) => ElfObject::from_file(f, Path::new(&job.path)),
        None => ElfObject::open(Path::new(&job.path)),
    };
    let elf = opened
        .ok()
        .filter(|e| e.build_id().map(<[u8]>::to_vec) == job.want)?;
    let mut files: Vec<String> = Vec::new();
    let mut funcs: Vec<Function> = Vec::new();
    for offset in job.offsets {
        let addr = profdev_core::FileAddr(offset);
        let Some((sym, _)) = elf.symbol(addr) else {
            continue;
        };
        let line = elf
            .frames(addr)
            .last()
            .and_then(|f| Some((f.file.clone()?, f.line?)))
            .map(|(file, line)| {
                let i = files.iter().position(|f| *f == file).unwrap_or_else(|| {
                    files.push(file);
                    files.len() - 1
                });
                Line {
                    addr: offset,
                    file: i as u32,
                    line,
                }
            });
        funcs.push(Function {
            start: sym.addr,
            len: sym.size.max(offset - sym.addr + 1),
            name: sym.name(),
            lines: line.into_iter().collect(),
        });
    }
    Some((job.id, files, funcs))
}

/// FILE.partial, appended to as records are made.
struct Partial {
    file: profdev_safefile::AppendFile,
    path: PathBuf,
    bytes: u64,
}

fn partial_path(output: &Path) -> PathBuf {
    let mut p = output.as_os_str().to_owned();
    p.push(".partial");
    PathBuf::from(p)
}

impl Partial {
    fn create(output: &Path) -> Result<Partial> {
        let path = partial_path(output);
        let file = profdev_safefile::create_append(&path, crate::output::KERNEL_MODE).map_err(
            |e| {
                if e.already_exists() {
                    anyhow!(
                        "{} exists (a recording that did not finish?): export it with 'profdev export FORMAT -i {}', or remove it",
                        path.display(),
                        path.display()
                    )
                } else {
                    anyhow!("{e}")
                }
            },
        )?;
        Ok(Partial {
            file,
            path,
            bytes: 0,
        })
    }
    fn write(&mut self, enc: &mut Encoder) -> Result<()> {
        let b = enc.take();
        if b.is_empty() {
            return Ok(());
        }
        self.file.append(&b).map_err(|e| anyhow!("{e}"))?;
        self.bytes += b.len() as u64;
        Ok(())
    }
    /// Sync, keep an existing FILE as FILE.old, rename into place.
    fn finish(self, output: &Path) -> Result<()> {
        self.file
            .file()
            .sync_all()
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        if output.symlink_metadata().is_ok() {
            let mut old = output.as_os_str().to_owned();
            old.push(".old");
            std::fs::rename(output, &old)
                .with_context(|| format!("cannot rename {} to .old", output.display()))?;
        }
        std::fs::rename(&self.path, output).with_context(|| {
            format!(
                "cannot rename {} to {}",
                self.path.display(),
                output.display()
            )
        })
    }
}

/// The threads of process `pid`, from `/proc/PID/task`.
fn threads_of(pid: u32) -> Result<Vec<u32>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|_| {
        anyhow!("no process {pid}: give the id of a running process (-p PID[,PID])")
    })?;
    let mut tids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    if tids.is_empty() {
        bail!("process {pid} has no threads left: it is exiting");
    }
    Ok(tids)
}

fn run(args: &Args) -> Result<ExitCode> {
    let attach = args.all || !args.pid.is_empty() || args.tid.is_some();
    if !attach && args.command.is_empty() {
        bail!("nothing to record: give a command (profdev record -- CMD) or -a, -p PID or -t TID");
    }
    let target = if args.all {
        Target::System
    } else if let Some(&pid) = args.pid.first().or(args.tid.as_ref()) {
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
        frequency_hz: args.frequency,
        kernel: true,
        user: true,
        callchain: args.stacks,
        user_stack_bytes: if args.stacks { args.stack_bytes } else { 0 },
        track_tasks: true,
    };
    config.validate().map_err(|e| anyhow!("{e}"))?;
    let objects = profdev_symbolize::Objects::new();
    let factory = profdev_sample::PerfFactory::new().with_mapping_hook(objects.mapping_hook());
    let mut job = Job::new()?;
    let mut out = Partial::create(&args.output)?;
    let start_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut rec = Recorder {
        enc: Encoder::new(&Header {
            flags: if args.stacks { FLAG_STACKS } else { 0 },
            start_ns,
            period_ns: 1_000_000_000 / u64::from(args.frequency.max(1)),
        }),
        model: Model::new(args.stacks, objects),
        symbols: !args.no_symbols,
        tasks: HashMap::new(),
        objects: HashMap::new(),
        pending: HashMap::new(),
        kernel: None,
        seen: HashSet::new(),
        frames: Vec::new(),
        addrs: Vec::new(),
        only_tid: args.tid,
        symbolizer: Some(Symbolizer::start()),
        failures: HashMap::new(),
        stack_bytes: args.stack_bytes,
    };
    out.write(&mut rec.enc)?;

    let mut child_status = None;
    let (mut source, has_child): (Box<dyn SampleSource>, bool) = if attach {
        let source: Box<dyn SampleSource> = if args.pid.is_empty() {
            Box::new(factory.open_perf(&config).map_err(|e| anyhow!("{e}"))?)
        } else {
            // One session per thread of each process (an event follows
            // one task and what it starts later, not its present
            // siblings), read as one.
            let mut sources: Vec<Box<dyn SampleSource>> = Vec::new();
            for &pid in &args.pid {
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
                        Err(_)
                            if !std::path::Path::new(&format!("/proc/{pid}/task/{tid}"))
                                .exists() => {}
                        Err(e) => bail!("{e}"),
                    }
                }
            }
            Box::new(profdev_sample::several::Several::new(sources))
        };
        if let Some(cmd0) = args.command.first() {
            let program = find_program(cmd0)?;
            let mut cmd = std::process::Command::new(&program);
            cmd.args(&args.command[1..]);
            job.prepare(&mut cmd);
            let child = cmd
                .spawn()
                .with_context(|| format!("cannot run {}", program.display()))?;
            job.started(&child);
            (source, true)
        } else {
            (source, false)
        }
    } else {
        let program = find_program(&args.command[0])?;
        let mut cmd = std::process::Command::new(&program);
        cmd.args(&args.command[1..]);
        job.prepare(&mut cmd);
        let (child, source) = factory
            .spawn_profiled(&mut cmd, &config)
            .map_err(|e| anyhow!("{e}"))?;
        job.started(&child);
        (source, true)
    };
    let mut batch = Vec::new();
    let mut flushed = std::time::Instant::now();
    let failed = loop {
        let r = source.read(&mut batch, Duration::from_millis(100));
        for record in batch.drain(..) {
            rec.record(&record)?;
        }
        if flushed.elapsed() >= SYMBOLS_EVERY {
            rec.flush_symbols();
            flushed = std::time::Instant::now();
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
    let stats = source.stats();
    drop(source);
    if has_child {
        child_status = Some(job.wait());
    }
    rec.finish_symbols();
    rec.enc.end();
    out.write(&mut rec.enc)?;
    let samples = rec.enc.samples();
    let bytes = out.bytes;
    let written = out.finish(&args.output);
    let wrote = match &written {
        Ok(()) => format!("wrote {}", args.output.display()),
        Err(_) => format!("left {}", partial_path(&args.output).display()),
    };
    eprintln!(
        "{NAME}: {wrote}: {samples} samples, {bytes} bytes ({:.1} bytes per sample); {} lost, {} throttled",
        bytes as f64 / samples.max(1) as f64,
        stats.lost,
        stats.throttled
    );
    if let Some(s) = rec.model.unwind_stats() {
        eprintln!("{NAME}: {s}");
    }
    if !rec.failures.is_empty() {
        let mut f: Vec<(&String, u64)> = rec.failures.iter().map(|(r, &(_, n))| (r, n)).collect();
        f.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let list: Vec<String> = f.iter().map(|(r, n)| format!("{n} {r}")).collect();
        eprintln!(
            "{NAME}: stacks ending in [unwind failed: REASON]: {}",
            list.join(", ")
        );
    }
    if let Some(e) = failed {
        bail!("sampling stopped early: {e}");
    }
    if let Some(i) = job.interrupted() {
        if has_child {
            eprintln!("{}", i.sentence(NAME, &wrote));
        }
    }
    written?;
    Ok(match child_status {
        Some(status) => job.exit_code(status),
        None => ExitCode::SUCCESS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_formats::export::folded;
    use profdev_formats::recording::read;

    fn recorder() -> Recorder {
        Recorder {
            enc: Encoder::new(&Header::default()),
            model: Model::new(true, profdev_symbolize::Objects::new()),
            symbols: false,
            tasks: HashMap::new(),
            objects: HashMap::new(),
            pending: HashMap::new(),
            kernel: None,
            seen: HashSet::new(),
            frames: Vec::new(),
            addrs: Vec::new(),
            only_tid: None,
            symbolizer: None,
            failures: HashMap::new(),
            stack_bytes: 16384,
        }
    }

    /// A user sample with -g whose stack copy is missing cannot be unwound
    /// past its instruction: its stack ends in one label frame naming why,
    /// the label written once for every such stack; the idle task's
    /// kernel-only sample gets none.
    #[test]
    fn a_stack_the_unwinder_cannot_walk_ends_in_unwind_failed() {
        let mut r = recorder();
        let user = Sample {
            ip: 0x40_1000,
            pid: 7,
            tid: 7,
            time: 10,
            period: 1_000_000,
            mode: CpuMode::User,
            user_chain: vec![0x40_1000],
            ..Sample::default()
        };
        let idle = Sample {
            ip: 0xffff_ffff_8100_0010,
            time: 20,
            period: 1_000_000,
            mode: CpuMode::Kernel,
            kernel_chain: vec![0xffff_ffff_8100_0010],
            ..Sample::default()
        };
        for s in [&user, &idle, &user] {
            r.record(&Record::Sample(s.clone())).unwrap();
        }
        r.enc.end();
        let rec = read(&r.enc.take()).unwrap();
        assert_eq!(rec.samples.len(), 3);
        let labels: Vec<_> = rec
            .objects
            .iter()
            .filter(|o| o.info.kind == ObjectKind::Label)
            .collect();
        assert_eq!(labels.len(), 1, "{:?}", rec.objects);
        assert_eq!(labels[0].info.path, "[unwind failed: no stack copy]");
        let last = |i: usize| rec.stack(&rec.samples[i]).last().copied().unwrap();
        assert_eq!(last(0).object, labels[0].id);
        assert_eq!(last(2).object, labels[0].id);
        assert_ne!(last(1).object, labels[0].id);
        assert_eq!(r.failures["no stack copy"].1, 2);
        let text = folded::write(&rec);
        assert!(
            text.contains("[unwind failed: no stack copy];[unknown] 2\n"),
            "{text}"
        );
        assert!(text.contains("[idle];"), "{text}");
    }
}
