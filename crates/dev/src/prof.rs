//! prof — per-module profiling device (Inferno prof(3)).
//!
//! # Synopsis
//!
//! ```text
//! prof/ctl                    0222  write: module [name ...] | start | stop | end | interval MS
//! prof/NNNNNNNN/              0555  one directory per profiled module, newest first
//! prof/NNNNNNNN/name          0444  the module's name (its file's basename)
//! prof/NNNNNNNN/path          0444  the module's file path
//! prof/NNNNNNNN/histogram     0444  "0x<pc> <count>\n", one pair per read
//! prof/NNNNNNNN/pctl          0222  reserved: every write is refused
//! ```
//!
//! # Description
//!
//! prof profiles *modules*, not the kernel (that is kprof's job). On Linux
//! a module is an ELF object executed by some process: an executable, a
//! shared library, the dynamic linker. While profiling is on, each tick of
//! the sampling clock that finds a CPU running user code is charged to the
//! module mapped at the interrupted instruction, at that instruction's
//! address in the module's own ELF address space (the load bias removed:
//! the address `nm` and `addr2line -e PATH` speak). Ticks that find the CPU
//! in the kernel are not taken at all (the session samples user mode
//! only), and ticks in anonymous memory (JIT code), the vDSO, or a file
//! that is not ELF are dropped.
//!
//! ## ctl
//!
//! `ctl` opens write-only. A write is one message, split into words at
//! blanks (the trailing newline dropped); its first word is looked up
//! exactly in the command table and its argument count checked. A bad
//! message fails with EINVAL, quotes the message back
//! (`unknown control message "bogus"`), and changes nothing. A good one
//! returns the whole byte count (the original truncated writes to 127
//! bytes; profdev takes messages up to 4096 bytes whole).
//!
//! | message | effect |
//! |---|---|
//! | `module [name ...]` | **replaces** the list of wanted modules; `module` alone empties it. A name is a basename (`libc.so.6`) or a file path; a path is also matched in its canonical form (`/lib/…` and `/usr/lib/…` agree when one is a link to the other). Relative paths are resolved in the file server's directory: use absolute ones. |
//! | `start` | start sampling, unless a profiler is already running (then ignored, as in Inferno). Counts continue accumulating into existing records. |
//! | `stop` | stop; every tick taken before is counted. Records are kept. |
//! | `end` | stop, free every record, empty the module list, restart record ids at 1, and reset the interval to 100 ms. |
//! | `interval MS` | the sampling interval in milliseconds, as C's `strtoul(MS, 0, 0)` reads it (`10`, `0x10`, `012`); at least 1. Default 100. Takes effect at the next `start`. |
//!
//! With an empty list every module that runs anywhere on the system is
//! profiled; otherwise only modules whose basename or path is in the list.
//! As in Inferno, the list is consulted when a module's record is created:
//! a module that already has a record keeps counting after the list
//! changes.
//!
//! **Interval and frequency.** The sampling engine is shared by every
//! device; it samples each CPU's software cpu-clock at a fixed frequency.
//! `interval MS` asks for `round(1000 / MS)` samples per second of CPU
//! time, at least 1: 1 ms is 1000 Hz, 3 ms is 333 Hz, the default 100 ms
//! is 10 Hz, and anything from 1500 ms up is 1 Hz. Ticks are of CPU time,
//! not wall time: a CPU that runs no user code takes none.
//!
//! ## Module directories
//!
//! A module's directory appears the first time one of its instructions is
//! sampled, named with its record id as 8 lowercase hex digits (`00000001`,
//! `00000002`, …). The root lists `ctl` first, then the records, newest
//! first. Unlike Inferno's, a module directory can be listed.
//!
//! A module is identified by its **file**, not its path: by the device and
//! inode the kernel reported for the mapping, and by the GNU build id (from
//! the mapping record, else read from the file), or the file's modification
//! time and size when it has no build id. So a binary rebuilt at the same
//! path gets a new record the next time it runs, and the old record keeps
//! the old counts. To read a file's load layout profdev opens
//! `/proc/PID/map_files/START-END` while the process lives (exactly the
//! mapped file, even if the path has been replaced since), else the path.
//!
//! `name` and `path` hold one line each (the text and a newline; Inferno's
//! had no newline). `pctl` opens write-only and refuses every write (EPERM,
//! "not used at present", as the seed says).
//!
//! ## histogram
//!
//! `histogram` opens read-only and returns **one pair per read**:
//!
//! ```text
//! 0x<pc> <count>\n
//! ```
//!
//! `pc` is the instruction's address in the module's ELF address space, in
//! hex with `0x` (so `addr2line -e PATH 0x1139` takes it as it stands);
//! `count` is the number of ticks, in decimal, never zero. Pairs come in
//! increasing pc; after the last one a read returns 0 bytes (end of file).
//! Each pair ends in a newline, so `cat` prints clean lines (the original
//! printed none). The file offset is ignored: the open file remembers the
//! next pair. A read too small for the next pair fails with EINVAL ("read
//! or write too small") and does **not** lose the pair: the next, larger,
//! read returns it (the original lost it: a quirk fixed on purpose). Each
//! open sees the counts as they were at open. `stat` reports length 0.
//!
//! Sampled pcs are the interrupted instruction itself (the next one to
//! execute), so, unlike Inferno's Dis pcs, consumers do not subtract 1.
//!
//! ## Two users at once
//!
//! The seed's Bugs said the device "profiles on a global basis and does not
//! distinguish between multiple profilers running at once". profdev keeps
//! users apart **per device instance**: each file server (`profdev mount
//! DIR`) builds its own device table and so its own prof device, with its
//! own module list, interval, session and records, the way a Plan 9 attach
//! gives a fresh instance. Two users who drive `ctl` by hand each mount
//! their own. `profdev prof CMD` never touches a shared mount: it drives a
//! private instance of this same device in its own process, fed by a
//! session on CMD's process tree only, so any number of `profdev prof CMD`
//! runs coexist with each other and with a mount's session.
//!
//! ## Modes
//!
//! Inferno's device had three profilers: sampling (`start`), coverage
//! (`startcp PID`) and memory (`startmp…`). This device implements sampling;
//! the others plug in as further [`Mode`]s: a verb in the command table, the
//! session a mode needs, and how a mode turns a batch of records into
//! counts. The records, the directory tree and the histogram protocol are
//! the same for every mode (only what a pair's count means differs), so a
//! mode adds no file.
//!
//! # Example
//!
//! ```text
//! % echo interval 1 >/run/profdev/prof/ctl
//! % echo module libc.so.6 dd >/run/profdev/prof/ctl
//! % echo start >/run/profdev/prof/ctl
//! % dd if=/dev/zero of=/dev/null bs=1 count=10000000
//! % echo stop >/run/profdev/prof/ctl
//! % ls /run/profdev/prof
//! ctl  00000002  00000001
//! % cat /run/profdev/prof/00000001/path
//! /usr/bin/dd
//! % sed 3q /run/profdev/prof/00000001/histogram
//! 0x3a10 12
//! 0x3a14 40
//! 0x3a20 7
//! % addr2line -f -e /usr/bin/dd 0x3a14
//! % profdev prof -f        # the report, from the mounted device
//! % echo end >/run/profdev/prof/ctl
//! ```
//!
//! # Bugs
//!
//! * Within one mount the device is shared, as Inferno's was: whoever
//!   writes `ctl` changes the session for every reader of that mount.
//! * Paths are the kernel's, in the sampled process's mount namespace; a
//!   module in another namespace (a container) resolves only while its
//!   process lives (through `/proc/PID/map_files`).
//! * The kernel reports a mapping's device and inode, which on overlayfs and
//!   btrfs subvolumes differ from what `stat` says; profdev compares the two
//!   only for block devices (major number not 0).
//! * Counts are 64-bit. Record ids are 32-bit and never reused before
//!   `end` (Inferno's wrapped at 255).
//! * Ticks in kernel mode are not taken, so a module's share is of user
//!   time only; `kprof` shows the kernel side.

use crate::ctl::{self, Cmd};
use crate::engine::{Engine, Sink, Subscription};
use crate::pc_counts::PcCounts;
use crate::tree::{read_slice, Chan, DirEntry, OpenMode, Qid};
use crate::{Dev, DevError};
use profdev_core::{CpuMode, FileId, ProcessVa, Record, Sample, SessionConfig, Target};
use profdev_formats::prof_histogram::encode_pair;
use profdev_symbolize::{ElfLayout, Mapping, Tasks};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The default sampling interval, in milliseconds (Inferno's).
pub const DEFAULT_INTERVAL_MS: u32 = 100;

const CTL: Qid = Qid::file(5);
const NAME: u64 = 1;
const PATH: u64 = 2;
const HISTOGRAM: u64 = 3;
const PCTL: u64 = 4;

/// The sampling frequency, in Hz per CPU, that `interval MS` asks for:
/// `round(1000 / MS)`, at least 1 (and `interval 0` is refused).
///
/// ```
/// use profdev_dev::prof::frequency_hz;
/// assert_eq!(frequency_hz(1), 1000);
/// assert_eq!(frequency_hz(3), 333);
/// assert_eq!(frequency_hz(100), 10);
/// assert_eq!(frequency_hz(5000), 1);
/// ```
pub fn frequency_hz(interval_ms: u32) -> u32 {
    let ms = interval_ms.max(1);
    (1000u32.saturating_add(ms / 2) / ms).max(1)
}

/// The session the sampling mode runs: system wide, user mode only, with
/// task records so that user addresses resolve to modules.
pub fn session_config(interval_ms: u32) -> SessionConfig {
    SessionConfig {
        target: Target::System,
        kernel: false,
        user: true,
        track_tasks: true,
        ..SessionConfig::system(frequency_hz(interval_ms))
    }
}

/// A profiler of the device: what `start…` switched on.
///
/// Only sampling exists; coverage (`startcp PID`) and memory (`startmp…`)
/// are to come, each a variant here with its own verb, its own session and
/// its own meaning of a histogram pair's count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Periodic sampling: a pair's count is a number of ticks at that pc.
    Sampling,
}

impl Mode {
    fn session(self, interval_ms: u32) -> SessionConfig {
        match self {
            Mode::Sampling => session_config(interval_ms),
        }
    }
}

/// A module's identity: its file, not its path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModuleKey {
    /// Device and inode (generation ignored), as the kernel reported them,
    /// else from `stat`.
    pub file: Option<(u32, u32, u64)>,
    /// The GNU build id, from the mapping record or the file.
    pub build_id: Option<Vec<u8>>,
    /// Modification time (ns since the epoch) and size, only when there is
    /// no build id to tell versions apart.
    pub version: Option<(i128, u64)>,
}

/// One profiled module.
#[derive(Clone, Debug)]
struct ModRecord {
    id: u32,
    name: String,
    path: String,
    /// pc (file address) → count, never 0.
    counts: PcCounts,
}

/// What a mapping resolved to.
#[derive(Clone, Debug)]
struct Module {
    key: ModuleKey,
    layout: Arc<ElfLayout>,
    /// (mtime ns, size) of the path when resolved, to notice in-place
    /// rewrites at the next mapping.
    stat: Option<(i128, u64)>,
}

/// Memo key: a mapping's file as the record described it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct MapKey {
    path: String,
    file: Option<FileId>,
    build_id: Option<Vec<u8>>,
}

#[derive(Clone, Debug)]
struct Wanted {
    raw: String,
    canonical: Option<String>,
}

/// Counts the device keeps about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfStats {
    /// User-mode samples seen while on.
    pub samples: u64,
    /// Samples charged to a module record.
    pub counted: u64,
    /// Samples in no file-backed ELF mapping (anonymous memory, vDSO, an
    /// unknown process, a file that could not be read).
    pub unresolved: u64,
    /// Records the kernel dropped (ring full), over the sessions so far.
    pub lost: u64,
    /// Times the kernel throttled sampling, over the sessions so far.
    pub throttled: u64,
}

struct State {
    mode: Option<Mode>,
    wanted: Vec<Wanted>,
    interval_ms: u32,
    records: Vec<ModRecord>,
    by_key: HashMap<ModuleKey, usize>,
    next_id: u32,
    tasks: Tasks,
    memo: HashMap<MapKey, Result<Module, String>>,
    exited: Vec<u32>,
    exiting: Vec<u32>,
    stats: ProfStats,
}

impl State {
    fn new() -> Self {
        State {
            mode: None,
            wanted: Vec::new(),
            interval_ms: DEFAULT_INTERVAL_MS,
            records: Vec::new(),
            by_key: HashMap::new(),
            next_id: 1,
            tasks: Tasks::new(),
            memo: HashMap::new(),
            exited: Vec::new(),
            exiting: Vec::new(),
            stats: ProfStats::default(),
        }
    }

    fn wants(&self, m: &Mapping) -> bool {
        self.wanted.is_empty()
            || self.wanted.iter().any(|w| {
                w.raw == m.path || w.raw == m.basename() || w.canonical.as_deref() == Some(&m.path)
            })
    }

    fn accumulate(&mut self, records: &[Record]) {
        for r in records {
            match r {
                Record::Sample(s) => self.sample(s),
                Record::Mmap { path, .. } => {
                    self.revalidate(path);
                    self.tasks.observe(r);
                }
                Record::Exit { pid, tid, .. } if pid == tid => {
                    self.tasks.observe(r);
                    self.exiting.push(*pid);
                }
                _ => self.tasks.observe(r),
            }
        }
        // Forget processes that exited a whole batch ago: a sample of theirs
        // can trail their exit by a little across batches, not by a batch.
        for pid in std::mem::take(&mut self.exited) {
            if self.tasks.has_exited(pid) {
                self.tasks.forget(pid);
            }
        }
        self.exited = std::mem::take(&mut self.exiting);
    }

    /// A new mapping of `path`: forget what we resolved for it if the file
    /// was rewritten in place since.
    fn revalidate(&mut self, path: &str) {
        if !self.memo.keys().any(|k| k.path == path) {
            return;
        }
        let now = stat_version(Path::new(path));
        self.memo.retain(|k, v| {
            k.path != path || matches!(v, Ok(m) if m.stat == now) || v.is_err() && now.is_none()
        });
    }

    fn sample(&mut self, s: &Sample) {
        if s.mode == CpuMode::Kernel || s.is_idle() {
            return;
        }
        self.stats.samples += 1;
        let va = ProcessVa(s.ip);
        let Some(m) = self.tasks.lookup(s.pid, va).filter(|m| m.is_file()) else {
            self.stats.unresolved += 1;
            return;
        };
        let key = MapKey {
            path: m.path.clone(),
            file: m.file,
            build_id: m.build_id.clone(),
        };
        let offset = m.file_offset(va);
        let module = match self.memo.get(&key) {
            Some(resolved) => resolved.clone(),
            None => {
                if !self.wants(m) {
                    return;
                }
                let resolved = resolve(s.pid, m);
                self.memo.insert(key, resolved.clone());
                resolved
            }
        };
        let Ok(module) = module else {
            self.stats.unresolved += 1;
            return;
        };
        let Some(pc) = module.layout.file_addr_of_offset(offset) else {
            self.stats.unresolved += 1;
            return;
        };
        let index = match self.by_key.get(&module.key) {
            Some(&i) => i,
            None => {
                let Some(m) = self.tasks.lookup(s.pid, va) else {
                    return;
                };
                if !self.wants(m) {
                    return;
                }
                let record = ModRecord {
                    id: self.next_id,
                    name: m.basename().to_string(),
                    path: m.path.clone(),
                    counts: PcCounts::default(),
                };
                self.next_id = self.next_id.saturating_add(1);
                self.records.push(record);
                self.by_key
                    .insert(module.key.clone(), self.records.len() - 1);
                self.records.len() - 1
            }
        };
        self.records[index].counts.add(pc.0);
        self.stats.counted += 1;
    }

    fn record(&self, id: u32) -> Option<&ModRecord> {
        self.records
            .binary_search_by_key(&id, |r| r.id)
            .ok()
            .map(|i| &self.records[i])
    }
}

/// Open the mapped file: exactly the mapped one through /proc while the
/// process lives, else the path.
fn resolve(pid: u32, m: &Mapping) -> Result<Module, String> {
    let map_file = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end));
    let path = Path::new(&m.path);
    let (layout, stat) = match ElfLayout::open(&map_file) {
        Ok(layout) => (layout, stat_version(path)),
        Err(_) => {
            let layout = ElfLayout::open(path).map_err(|e| e.to_string())?;
            let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", m.path))?;
            if let Some(f) = m.file {
                let (major, minor) = split_dev(std::os::unix::fs::MetadataExt::dev(&meta));
                let ino = std::os::unix::fs::MetadataExt::ino(&meta);
                if major != 0 && (major, minor, ino) != (f.major, f.minor, f.ino) {
                    return Err(format!("{} was replaced after it was mapped", m.path));
                }
            }
            if let (Some(want), Some(have)) = (&m.build_id, layout.build_id()) {
                if want.as_slice() != have {
                    return Err(format!("{} was replaced after it was mapped", m.path));
                }
            }
            (layout, stat_version(path))
        }
    };
    let file = match m.file {
        Some(f) => Some((f.major, f.minor, f.ino)),
        None => std::fs::metadata(path).ok().map(|meta| {
            let (major, minor) = split_dev(std::os::unix::fs::MetadataExt::dev(&meta));
            (major, minor, std::os::unix::fs::MetadataExt::ino(&meta))
        }),
    };
    let build_id = m
        .build_id
        .clone()
        .or_else(|| layout.build_id().map(<[u8]>::to_vec));
    let version = if build_id.is_none() { stat } else { None };
    Ok(Module {
        key: ModuleKey {
            file,
            build_id,
            version,
        },
        layout: Arc::new(layout),
        stat,
    })
}

/// glibc's `major()` and `minor()` of a `st_dev`.
fn split_dev(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

fn stat_version(path: &Path) -> Option<(i128, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((
        i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        meta.size(),
    ))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CtlOp {
    Module,
    Start,
    Stop,
    End,
    Interval,
}

const CTL_TABLE: &[Cmd<CtlOp>] = &[
    Cmd::with_args("module", 0, usize::MAX, CtlOp::Module),
    Cmd::verb("start", CtlOp::Start),
    Cmd::verb("stop", CtlOp::Stop),
    Cmd::verb("end", CtlOp::End),
    Cmd::with_args("interval", 1, 1, CtlOp::Interval),
];

/// C's `strtoul(s, 0, 0)` on a whole word: decimal, `0x` hex, `0` octal.
fn parse_c_number(s: &str) -> Option<u32> {
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
}

/// One open `histogram`: the pairs at open and the next one to return.
struct Cursor {
    pairs: Vec<(u64, u64)>,
    next: usize,
}

/// One open `name` or `path`: its text.
struct Text(Vec<u8>);

/// The prof device.
pub struct Prof {
    state: Arc<Mutex<State>>,
    session: Mutex<Option<Subscription>>,
    engine: Engine,
}

impl Prof {
    /// A device sampling through `engine`.
    pub fn new(engine: Engine) -> Self {
        Prof {
            state: Arc::new(Mutex::new(State::new())),
            session: Mutex::new(None),
            engine,
        }
    }

    /// Account `records` as the running mode would: the entry point of the
    /// engine's sink, used directly by tests. Counts only while a mode is
    /// on.
    pub fn feed(&self, records: &[Record]) {
        let mut st = self.lock();
        if st.mode.is_some() {
            st.accumulate(records);
        }
    }

    /// The running mode, if any.
    pub fn mode(&self) -> Option<Mode> {
        self.lock().mode
    }

    /// The current interval in milliseconds.
    pub fn interval_ms(&self) -> u32 {
        self.lock().interval_ms
    }

    /// The wanted-module list, as written.
    pub fn wanted(&self) -> Vec<String> {
        self.lock().wanted.iter().map(|w| w.raw.clone()).collect()
    }

    /// The device's own counts.
    pub fn stats(&self) -> ProfStats {
        self.lock().stats
    }

    /// True once the running session's source has ended (a process
    /// target's tree exited and was drained, or a replay ran out).
    pub fn session_ended(&self) -> bool {
        self.lock_session().as_ref().is_some_and(|s| s.ended())
    }

    /// The error that ended the running session early, if any.
    pub fn session_error(&self) -> Option<String> {
        self.lock_session().as_ref().and_then(|s| s.error())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_session(&self) -> MutexGuard<'_, Option<Subscription>> {
        self.session.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn start(&self, mode: Mode) -> Result<(), DevError> {
        let mut session = self.lock_session();
        let config = {
            let mut st = self.lock();
            if st.mode.is_some() {
                return Ok(());
            }
            st.mode = Some(mode);
            // The session describes every task afresh.
            st.tasks = Tasks::new();
            st.exited.clear();
            st.exiting.clear();
            mode.session(st.interval_ms)
        };
        let state = self.state.clone();
        let sink: Sink = Arc::new(move |batch: &[Record]| {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            if st.mode.is_some() {
                st.accumulate(batch);
            }
        });
        match self.engine.subscribe(&config, sink) {
            Ok(sub) => {
                *session = Some(sub);
                Ok(())
            }
            Err(e) => {
                self.lock().mode = None;
                Err(DevError::Sampling {
                    permission: matches!(e, profdev_core::SourceError::Permission(_)),
                    msg: e.to_string(),
                })
            }
        }
    }

    fn stop(&self) {
        let sub = self.lock_session().take();
        // Stopping drains the last records into the records; the sink takes
        // the state lock, so not while we hold it.
        let source = sub.map(Subscription::stop).unwrap_or_default();
        let mut st = self.lock();
        st.mode = None;
        st.stats.lost += source.lost;
        st.stats.throttled += source.throttled;
    }

    fn ctl(&self, data: &[u8]) -> Result<(), DevError> {
        let (op, args) = ctl::parse(data, CTL_TABLE)?;
        match op {
            CtlOp::Module => {
                let wanted = args
                    .into_iter()
                    .map(|raw| {
                        let canonical = raw
                            .contains('/')
                            .then(|| std::fs::canonicalize(&raw).ok())
                            .flatten()
                            .map(|p| p.to_string_lossy().into_owned());
                        Wanted { raw, canonical }
                    })
                    .collect();
                self.lock().wanted = wanted;
                Ok(())
            }
            CtlOp::Start => self.start(Mode::Sampling),
            CtlOp::Stop => {
                self.stop();
                Ok(())
            }
            CtlOp::End => {
                self.stop();
                *self.lock() = State::new();
                Ok(())
            }
            CtlOp::Interval => {
                let ms = parse_c_number(&args[0]).ok_or_else(|| DevError::BadCtlArg {
                    msg: ctl::quoted(data),
                    why: format!("{:?} is not a number of milliseconds", args[0]),
                })?;
                if ms == 0 {
                    return Err(DevError::BadCtlArg {
                        msg: ctl::quoted(data),
                        why: "the interval must be at least 1 ms".into(),
                    });
                }
                self.lock().interval_ms = ms;
                Ok(())
            }
        }
    }
}

/// The record id and file number of a qid below the root.
fn split_qid(qid: Qid) -> (u32, u64) {
    let n = qid.number();
    ((n >> 4) as u32, n & 0xf)
}

fn record_dir(id: u32) -> Qid {
    Qid::dir(u64::from(id) << 4)
}

fn record_file(id: u32, file: u64) -> Qid {
    Qid::file((u64::from(id) << 4) + file)
}

impl Dev for Prof {
    fn name(&self) -> &'static str {
        "prof"
    }

    fn dir_name(&self) -> &'static str {
        "prof"
    }

    fn gen(&self, dir: Qid) -> Result<Vec<DirEntry>, DevError> {
        if !dir.is_dir() {
            return Err(DevError::NotDir);
        }
        let st = self.lock();
        if dir == Qid::ROOT {
            let mut out = vec![DirEntry::file("ctl", CTL, 0o222, 0)];
            for r in st.records.iter().rev() {
                out.push(DirEntry::dir(
                    &format!("{:08x}", r.id),
                    record_dir(r.id),
                    0o555,
                ));
            }
            return Ok(out);
        }
        let (id, file) = split_qid(dir);
        let r = st
            .record(id)
            .filter(|_| file == 0)
            .ok_or(DevError::NotFound)?;
        Ok(vec![
            DirEntry::file(
                "name",
                record_file(id, NAME),
                0o444,
                r.name.len() as u64 + 1,
            ),
            DirEntry::file(
                "path",
                record_file(id, PATH),
                0o444,
                r.path.len() as u64 + 1,
            ),
            DirEntry::file("histogram", record_file(id, HISTOGRAM), 0o444, 0),
            DirEntry::file("pctl", record_file(id, PCTL), 0o222, 0),
        ])
    }

    fn open(&self, qid: Qid, mode: OpenMode) -> Result<Chan, DevError> {
        if qid == Qid::ROOT || qid == CTL {
            let ok = if qid == CTL {
                mode == OpenMode::Write
            } else {
                mode == OpenMode::Read
            };
            return if ok {
                Ok(Chan::new(qid, mode))
            } else {
                Err(DevError::Perm)
            };
        }
        let (id, file) = split_qid(qid);
        let st = self.lock();
        let r = st.record(id).ok_or(DevError::NotFound)?;
        let mut chan = Chan::new(qid, mode);
        match (qid.is_dir(), file) {
            (true, 0) if mode == OpenMode::Read => {}
            (false, NAME | PATH | HISTOGRAM) if mode == OpenMode::Read => {
                chan.aux = Some(match file {
                    NAME => Box::new(Text(format!("{}\n", r.name).into_bytes())),
                    PATH => Box::new(Text(format!("{}\n", r.path).into_bytes())),
                    _ => Box::new(Cursor {
                        pairs: r.counts.pairs(),
                        next: 0,
                    }),
                });
            }
            (false, PCTL) if mode == OpenMode::Write => {}
            (true, 0) | (false, NAME | PATH | HISTOGRAM | PCTL) => return Err(DevError::Perm),
            _ => return Err(DevError::NotFound),
        }
        Ok(chan)
    }

    fn read(&self, chan: &mut Chan, offset: u64, count: u32) -> Result<Vec<u8>, DevError> {
        if let Some(Text(text)) = chan.aux_mut::<Text>() {
            return Ok(read_slice(text, offset, count));
        }
        let Some(cursor) = chan.aux_mut::<Cursor>() else {
            return Err(DevError::Perm);
        };
        let Some(&(pc, n)) = cursor.pairs.get(cursor.next) else {
            return Ok(Vec::new());
        };
        let pair = encode_pair(pc, n);
        if (count as usize) < pair.len() {
            return Err(DevError::Invalid(format!(
                "read or write too small: the next pair needs {} bytes",
                pair.len()
            )));
        }
        cursor.next += 1;
        Ok(pair.into_bytes())
    }

    fn write(&self, chan: &mut Chan, _offset: u64, data: &[u8]) -> Result<usize, DevError> {
        if chan.qid == CTL {
            self.ctl(data)?;
            return Ok(data.len());
        }
        Err(DevError::Perm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ReplayFactory;
    use crate::tree;

    const BASE: u64 = 0x5555_0000_0000;

    fn idle() -> Prof {
        Prof::new(Engine::new(Arc::new(ReplayFactory::new(vec![]))))
    }

    fn exe() -> String {
        std::env::current_exe()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    /// A mapping of `path` at BASE with offset 0 in process `pid`. This
    /// test binary is a PIE whose first load segment has vaddr 0 and offset
    /// 0, so BASE + k is file address k.
    fn mmap(pid: u32, path: &str, file: Option<FileId>, build_id: Option<Vec<u8>>) -> Record {
        Record::Mmap {
            pid,
            tid: pid,
            addr: BASE,
            len: 0x10_0000,
            pgoff: 0,
            path: path.into(),
            file,
            build_id,
            time: 0,
        }
    }

    fn sample(pid: u32, ip: u64) -> Record {
        Record::Sample(Sample {
            ip,
            pid,
            tid: pid,
            mode: CpuMode::User,
            ..Default::default()
        })
    }

    fn write(p: &Prof, msg: &[u8]) -> Result<usize, DevError> {
        let mut c = p.open(CTL, OpenMode::Write)?;
        p.write(&mut c, 0, msg)
    }

    fn dirs(p: &Prof) -> Vec<String> {
        p.gen(Qid::ROOT)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect()
    }

    fn read_all(p: &Prof, dir: &str, file: &str) -> String {
        let d = tree::walk(p, Qid::ROOT, dir).unwrap();
        let f = tree::walk(p, d.qid, file).unwrap();
        let mut c = p.open(f.qid, OpenMode::Read).unwrap();
        let mut out = Vec::new();
        loop {
            let b = p.read(&mut c, out.len() as u64, 64).unwrap();
            if b.is_empty() {
                return String::from_utf8(out).unwrap();
            }
            out.extend(b);
        }
    }

    /// The TV-P2 buckets [0,5,0,0,7] as five ticks at pc 1, seven at pc 4.
    fn tv_p2() -> Prof {
        let p = idle();
        p.lock().mode = Some(Mode::Sampling);
        let mut recs = vec![mmap(7, &exe(), None, None)];
        recs.extend((0..5).map(|_| sample(7, BASE + 1)));
        recs.extend((0..7).map(|_| sample(7, BASE + 4)));
        p.feed(&recs);
        p
    }

    #[test]
    fn tv_p1_ctl() {
        let p = idle();
        assert_eq!(write(&p, b"interval 10").unwrap(), 11);
        assert_eq!(p.interval_ms(), 10);
        write(&p, b"interval 0x10").unwrap();
        assert_eq!(p.interval_ms(), 16);
        write(&p, b"interval 012\n").unwrap();
        assert_eq!(p.interval_ms(), 10);
        write(&p, b"module  Foo\t/dis/bar.dis\n").unwrap();
        assert_eq!(p.wanted(), ["Foo", "/dis/bar.dis"]);
        write(&p, b"module").unwrap();
        assert!(p.wanted().is_empty());
        for bad in [
            &b"startcp"[..],
            b"start now",
            b"bogus",
            b"interval",
            b"interval x",
        ] {
            let e = write(&p, bad).unwrap_err();
            assert!(
                matches!(e, DevError::BadCtl(_) | DevError::BadCtlArg { .. }),
                "{bad:?}: {e:?}"
            );
        }
        assert_eq!(
            write(&p, b"bogus\n").unwrap_err().to_string(),
            "unknown control message \"bogus\""
        );
        assert_eq!(
            write(&p, b"interval 0").unwrap_err().to_string(),
            "bad control message \"interval 0\": the interval must be at least 1 ms"
        );
        // Adapted: a 200-byte message is taken whole, not truncated to 127.
        let mut long = b"module".to_vec();
        while long.len() < 200 {
            long.extend_from_slice(b" a");
        }
        assert_eq!(write(&p, &long).unwrap(), 200);
        assert_eq!(p.wanted().len(), 97);
        // Bad messages changed nothing.
        assert_eq!(p.interval_ms(), 10);
        assert_eq!(p.mode(), None);
    }

    #[test]
    fn tv_p2_histogram_reads() {
        let p = tv_p2();
        assert_eq!(dirs(&p), ["ctl", "00000001"]);
        let d = tree::walk(&p, Qid::ROOT, "00000001").unwrap();
        let h = tree::walk(&p, d.qid, "histogram").unwrap();
        let mut c = p.open(h.qid, OpenMode::Read).unwrap();
        assert_eq!(p.read(&mut c, 0, 64).unwrap(), b"0x1 5\n");
        assert_eq!(p.read(&mut c, 6, 64).unwrap(), b"0x4 7\n");
        assert_eq!(p.read(&mut c, 12, 64).unwrap(), b"");
        assert_eq!(p.read(&mut c, 12, 64).unwrap(), b"");

        // Adapted: a read too small for the pair fails and keeps the pair.
        let mut c = p.open(h.qid, OpenMode::Read).unwrap();
        let e = p.read(&mut c, 0, 5).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: read or write too small: the next pair needs 6 bytes"
        );
        assert_eq!(p.read(&mut c, 0, 6).unwrap(), b"0x1 5\n");
        assert_eq!(p.read(&mut c, 0, 64).unwrap(), b"0x4 7\n");
        assert_eq!(p.read(&mut c, 0, 64).unwrap(), b"");
    }

    #[test]
    fn layout_and_open_rules() {
        let p = tv_p2();
        assert_eq!(
            read_all(&p, "00000001", "name"),
            format!("{}\n", exe().rsplit('/').next().unwrap())
        );
        assert_eq!(read_all(&p, "00000001", "path"), format!("{}\n", exe()));
        let d = tree::walk(&p, Qid::ROOT, "00000001").unwrap();
        let names: Vec<_> = p.gen(d.qid).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["name", "path", "histogram", "pctl"]);
        let pctl = tree::walk(&p, d.qid, "pctl").unwrap();
        assert_eq!(pctl.perm, 0o222);
        let mut c = p.open(pctl.qid, OpenMode::Write).unwrap();
        assert_eq!(p.write(&mut c, 0, b"x"), Err(DevError::Perm));
        assert_eq!(
            p.open(pctl.qid, OpenMode::Read).unwrap_err(),
            DevError::Perm
        );
        let h = tree::walk(&p, d.qid, "histogram").unwrap();
        assert_eq!(
            p.open(h.qid, OpenMode::ReadWrite).unwrap_err(),
            DevError::Perm
        );
        assert_eq!(p.open(CTL, OpenMode::Read).unwrap_err(), DevError::Perm);
        assert_eq!(
            p.open(CTL, OpenMode::ReadWrite).unwrap_err(),
            DevError::Perm
        );
        assert_eq!(
            p.open(Qid::ROOT, OpenMode::Write).unwrap_err(),
            DevError::Perm
        );
        assert_eq!(p.stat(h.qid).unwrap().name, "histogram");
        assert_eq!(p.stat(CTL).unwrap().perm, 0o222);
        // `end` frees the records: their files are gone, ids restart.
        write(&p, b"end\n").unwrap();
        assert_eq!(dirs(&p), ["ctl"]);
        assert_eq!(
            p.open(h.qid, OpenMode::Read).unwrap_err(),
            DevError::NotFound
        );
        assert_eq!(p.gen(d.qid).unwrap_err(), DevError::NotFound);
        assert_eq!(p.interval_ms(), 100);
    }

    #[test]
    fn a_histogram_open_is_a_snapshot() {
        let p = tv_p2();
        let d = tree::walk(&p, Qid::ROOT, "00000001").unwrap();
        let h = tree::walk(&p, d.qid, "histogram").unwrap();
        let mut c = p.open(h.qid, OpenMode::Read).unwrap();
        p.feed(&[sample(7, BASE + 2), sample(7, BASE + 4)]);
        assert_eq!(p.read(&mut c, 0, 64).unwrap(), b"0x1 5\n");
        assert_eq!(p.read(&mut c, 0, 64).unwrap(), b"0x4 7\n");
        assert_eq!(
            read_all(&p, "00000001", "histogram"),
            "0x1 5\n0x2 1\n0x4 8\n"
        );
    }

    #[test]
    fn selection_by_basename_and_path() {
        let p = idle();
        let me = exe();
        let base = me.rsplit('/').next().unwrap().to_string();
        p.lock().mode = Some(Mode::Sampling);
        write(&p, format!("module libc.so.6 {base}").as_bytes()).unwrap();
        p.feed(&[mmap(1, &me, None, None), sample(1, BASE + 0x10)]);
        assert_eq!(dirs(&p), ["ctl", "00000001"]);

        // Not wanted: no record, the file is not even opened.
        write(&p, b"module /no/such/module").unwrap();
        p.feed(&[
            mmap(2, "/usr/lib/other.so", None, None),
            sample(2, BASE + 0x10),
        ]);
        assert_eq!(dirs(&p), ["ctl", "00000001"]);
        // But a module with a record keeps counting after the list changed.
        p.feed(&[sample(1, BASE + 0x10)]);
        assert_eq!(read_all(&p, "00000001", "histogram"), "0x10 2\n");

        // By full path, and by a path that leads to it through a link.
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&me, &link).unwrap();
        write(&p, format!("module {}", link.display()).as_bytes()).unwrap();
        p.feed(&[mmap(3, &me, None, None), sample(3, BASE + 0x20)]);
        assert_eq!(dirs(&p), ["ctl", "00000001"]);
        assert_eq!(read_all(&p, "00000001", "histogram"), "0x10 2\n0x20 1\n");
        let copy = dir.path().join("copy");
        std::fs::copy(&me, &copy).unwrap();
        let copy = copy.to_string_lossy().into_owned();
        p.feed(&[mmap(4, &copy, None, None), sample(4, BASE + 0x20)]);
        assert_eq!(dirs(&p), ["ctl", "00000001"], "a copy is not wanted");
        write(&p, format!("module {copy}").as_bytes()).unwrap();
        p.feed(&[sample(4, BASE + 0x20)]);
        assert_eq!(dirs(&p), ["ctl", "00000002", "00000001"]);
        assert_eq!(read_all(&p, "00000002", "name"), "copy\n");
    }

    fn real_id(path: &Path) -> Option<FileId> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).unwrap();
        let (major, minor) = split_dev(m.dev());
        Some(FileId {
            major,
            minor,
            ino: m.ino(),
            ino_generation: 0,
        })
    }

    #[test]
    fn a_rebuilt_binary_gets_a_new_record() {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("prog");
        let original = std::fs::read(exe()).unwrap();
        let bid = ElfLayout::parse(&original, &prog)
            .unwrap()
            .build_id()
            .expect("test binaries carry a build id")
            .to_vec();
        let at = original.windows(bid.len()).position(|w| w == bid).unwrap();
        let mut rebuilt = original.clone();
        rebuilt[at] ^= 0xff;
        std::fs::write(&prog, &original).unwrap();
        let path = prog.to_string_lossy().into_owned();
        let id1 = real_id(&prog);

        let p = idle();
        p.lock().mode = Some(Mode::Sampling);
        p.feed(&[mmap(1, &path, id1, None), sample(1, BASE + 0x10)]);
        // A rebuild replaces the file: new inode, new build id.
        let tmp = dir.path().join("prog.new");
        std::fs::write(&tmp, &rebuilt).unwrap();
        std::fs::rename(&tmp, &prog).unwrap();
        let id2 = real_id(&prog);
        assert_ne!(id1, id2);
        p.feed(&[mmap(2, &path, id2, None), sample(2, BASE + 0x10)]);
        assert_eq!(dirs(&p), ["ctl", "00000002", "00000001"]);
        // A rewrite in place: same inode, the build id changes back.
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::write(&prog, &original).unwrap();
        assert_eq!(real_id(&prog), id2);
        p.feed(&[mmap(3, &path, id2, None), sample(3, BASE + 0x10)]);
        // The same file again: the same record.
        p.feed(&[mmap(4, &path, id2, None), sample(4, BASE + 0x10)]);
        assert_eq!(dirs(&p), ["ctl", "00000003", "00000002", "00000001"]);
        assert_eq!(read_all(&p, "00000003", "histogram"), "0x10 2\n");
        // A mapping of the first inode, whose process is gone: the file at
        // the path is not it any more, so nothing is charged.
        p.feed(&[mmap(5, &path, id1, None), sample(5, BASE + 0x10)]);
        assert_eq!(dirs(&p).len(), 4);
        assert_eq!(p.stats().unresolved, 1);
        // Build ids given by the kernel are checked the same way.
        p.feed(&[
            mmap(6, &path, None, Some(vec![7; 20])),
            sample(6, BASE + 0x10),
        ]);
        assert_eq!(p.stats().unresolved, 2);
        p.feed(&[mmap(7, &path, None, Some(bid)), sample(7, BASE + 0x10)]);
        assert_eq!(dirs(&p).len(), 4, "same build id, same inode: record 3");
        assert_eq!(read_all(&p, "00000003", "histogram"), "0x10 3\n");
    }

    #[test]
    fn unresolvable_samples_are_counted_apart() {
        let p = idle();
        p.lock().mode = Some(Mode::Sampling);
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let script = script.to_string_lossy().into_owned();
        p.feed(&[
            mmap(1, "[vdso]", None, None),
            mmap(2, &script, None, None),
            sample(1, BASE + 1),              // vDSO
            sample(2, BASE + 1),              // not ELF
            sample(3, BASE + 1),              // unknown process
            sample(0, 0xffff_ffff_8100_0000), // idle task
            Record::Sample(Sample {
                ip: 0xffff_ffff_8100_0000,
                pid: 2,
                tid: 2,
                mode: CpuMode::Kernel,
                ..Default::default()
            }),
        ]);
        assert_eq!(dirs(&p), ["ctl"]);
        assert_eq!(
            p.stats(),
            ProfStats {
                samples: 3,
                counted: 0,
                unresolved: 3,
                ..Default::default()
            }
        );
    }

    #[test]
    fn exited_processes_are_forgotten_a_batch_later() {
        let p = idle();
        p.lock().mode = Some(Mode::Sampling);
        let exit = Record::Exit {
            pid: 1,
            ppid: 0,
            tid: 1,
            ptid: 0,
            time: 1,
        };
        p.feed(&[mmap(1, &exe(), None, None), exit]);
        p.feed(&[sample(1, BASE + 8)]); // trailing sample, next batch
        p.feed(&[sample(1, BASE + 8)]); // two batches later: forgotten
        assert_eq!(read_all(&p, "00000001", "histogram"), "0x8 1\n");
        assert_eq!(p.stats().unresolved, 1);
    }

    #[test]
    fn samples_flow_through_the_engine() {
        let me = exe();
        let recs = vec![
            mmap(9, &me, None, None),
            sample(9, BASE + 0x30),
            sample(9, BASE + 0x30),
            sample(9, BASE + 0x18),
        ];
        let p = Prof::new(Engine::new(Arc::new(ReplayFactory::new(recs))));
        // Not on: fed records are ignored.
        p.feed(&[mmap(9, &me, None, None), sample(9, BASE)]);
        assert_eq!(dirs(&p), ["ctl"]);
        write(&p, b"interval 1\n").unwrap();
        write(&p, b"start\n").unwrap();
        assert_eq!(p.mode(), Some(Mode::Sampling));
        write(&p, b"start\n").unwrap(); // ignored while running
        while !p.session_ended() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        write(&p, b"stop\n").unwrap();
        assert_eq!(p.mode(), None);
        assert_eq!(read_all(&p, "00000001", "histogram"), "0x18 1\n0x30 2\n");
    }

    #[test]
    fn numbers_and_frequencies() {
        assert_eq!(parse_c_number("10"), Some(10));
        assert_eq!(parse_c_number("0x10"), Some(16));
        assert_eq!(parse_c_number("010"), Some(8));
        assert_eq!(parse_c_number("0"), Some(0));
        for bad in ["", "0x", "-1", "+1", "1e3", "09", "99999999999"] {
            assert_eq!(parse_c_number(bad), None, "{bad}");
        }
        assert_eq!(frequency_hz(1), 1000);
        assert_eq!(frequency_hz(1499), 1);
        assert_eq!(frequency_hz(u32::MAX), 1);
        let c = session_config(1);
        assert!(c.user && !c.kernel && c.track_tasks);
        assert_eq!(c.frequency_hz, 1000);
        assert_eq!(split_dev(0x0801), (8, 1));
        assert_eq!(split_dev(0xfd1a), (0xfd, 0x1a));
    }
}
