//! prof — per-module profiling device (Inferno prof(3)).
//!
//! # Synopsis
//!
//! ```text
//! prof/ctl                    0222  write: module [name ...] | start | startmp[123] [PID] | startcp PID | stop | end | interval MS
//! prof/NNNNNNNN/              0555  one directory per profiled module, newest first
//! prof/NNNNNNNN/name          0444  the module's name (its file's basename)
//! prof/NNNNNNNN/path          0444  the module's file path
//! prof/NNNNNNNN/histogram     0444  "0x<pc> <count>\n", one pair per read
//! prof/NNNNNNNN/pctl          0222  reserved: every write is refused
//! prof/NNNNNNNN/object        0444  the module's file as it was mapped (ELF bytes)
//! stat/prof                   0444  the device's health (crate::stat), reset by `end`
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
//! | `startmp[digits] [PID]` | memory mode (see Modes): the digits, a non-empty combination of 1, 2 and 3 in any order, each once, name the pools, or none; anything else is EINVAL. EBUSY while sampling is on. Without PID, memory mode with nothing hooked. With PID, attach to that running process (memory mode may already be on): EPERM unless the writer may ptrace PID, ESRCH for no such process, EBUSY while sampling or while another tracer holds it, ENXIO for a static program ("out of reach") or a failed load; its histograms fill when it exits or at `stop` (see `memory`). |
//! | `startcp PID` | coverage mode (see Modes) for process PID, its threads and the processes it spawns, counting the modules of the `module` list (empty: the executable and every library it maps). Exactly one argument, a decimal process id (`startcp` alone is EINVAL). EBUSY while any mode is on (the seed ignored the request silently: a documented change) or when PID is counted already. ESRCH for no such process; EPERM unless the writer may ptrace PID; EINVAL for the writer's own process; ENXIO for a failed load. The coverage runtime is injected into PID, which counts from then on; its histograms fill when it exits or at `stop` (see `coverage`). A statically linked PID is counted through uprobes instead (one multi-uprobe BPF link on its threads, not its children): EPERM without CAP_BPF and CAP_PERFMON, ENXIO on a kernel without multi-uprobe links (before Linux 6.6). |
//! | `stop` | stop; every tick taken before is counted. Records are kept. In memory and coverage modes, every attached process still running is asked for a report first; in memory mode it is then detached (its allocation calls go straight to the C library again, as before `startmp`; it runs on). |
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
//! Files are opened and read outside the device's lock: listing the
//! directories and reading their files never waits for that I/O.
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
//! ## object
//!
//! Inferno's prof(1) found a module's symbols in the `.sbl` file beside its
//! source and refused them when the source was newer than the module.
//! On Linux the symbols are in the module's ELF file, and a program rebuilt
//! at the same path between two runs would give the first run's record
//! the second build's symbols. So each module directory also serves
//! `object`: the bytes of the very file that was mapped, read through the
//! descriptor the objects table opened when the mapping was reported
//! (`profdev_symbolize::objects`), even after the path was replaced or the
//! file unlinked. `stat` gives its length.
//!
//! **Who may read `object`.** Root. Anyone else only if `open(2)` would
//! let them read the file now: at a requester's first read of an open
//! `object`, the recorded path is opened from a thread that holds the
//! requester's user, group and supplementary groups and no capability,
//! so the kernel applies every rule (search permission on each directory
//! of the path, ACLs, groups, LSMs), and the file that opens must be the
//! kept one (same device and inode). Otherwise EACCES: a program root ran
//! from a 0700 directory, a file whose ACL denies the reader, a file
//! deleted or replaced since it was mapped (only root reads those). A
//! mount served by a user other than root cannot act as another user and
//! serves `object` to its owner only. `profdev prof` symbolizes each
//! record from its `object`, falling back to `path`. The classic library
//! opens module files by name and never lists a module directory, so the
//! fifth file changes nothing for it.
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
//! (`startcp PID`) and memory (`startmp…`). This device implements all
//! three, each a [`Mode`]: a verb in the command table, the session (if
//! any) it needs, and what a histogram pair's count means. The records, the directory tree and the histogram protocol are
//! the same for every mode (only what a pair's count means differs), so a
//! mode adds no file.
//!
//! **Memory mode** (`startmp…`) counts nothing itself: the allocations are
//! counted inside the profiled processes by `profdev mprof`'s preloaded
//! library, whose reports fill the records (`Prof::memory_report`). A
//! record's `histogram` then holds bytes in the seed's layout, served by
//! the same protocol: `0x0 <bytes>` the module's current bytes, `0x1` its
//! high water, index `2*(p+1)` and `2*(p+1)+1` the current and high-water
//! bytes charged to p, the allocating call's return address in the
//! module's ELF address space (subtract 1 to reach the call). `profdev
//! mprof CMD` drives a private instance this way, as `profdev prof CMD`
//! does for sampling; on a mount, `startmp` switches memory mode on with
//! nothing hooked.
//!
//! **Coverage mode** (`startcp PID`) counts nothing itself either: every
//! instruction of the selected modules is counted inside the profiled
//! processes by the coverage engine (`profdev_coverage`), whose counts fill
//! the records (`Prof::coverage_report`), each report replacing the
//! module's pairs. A record's `histogram` then holds one pair per
//! **executed instruction**, as the seed's: `0x<address> <count>`, the
//! address in the module's link-time address space (what `addr2line -e
//! PATH` reads), the count exact (every instruction of a basic block
//! carries its block's count); instructions that never ran have no pair.
//! A program started under the engine by its caller needs no attach:
//! `Prof::coverage_launched` puts the device in coverage mode for it.
//!
//! **The plan cache.** Planning a module (finding its blocks, encoding
//! its counting code) is most of what counting a short run costs, so the
//! engine keeps each plan on disk, named by a digest of the module's
//! bytes and of the engine, and reuses it while both are unchanged:
//! `$PROFDEV_CACHE_DIR/coverage` when `PROFDEV_CACHE_DIR` is set (`off`:
//! no cache), else `/var/cache/profdev/coverage` for root (the mount's
//! server usually runs as root) and `$XDG_CACHE_HOME/profdev/coverage`
//! (or `~/.cache/profdev/coverage`) for other users; directories 0700,
//! files 0600. It is kept under 2 GiB by removing the files used least
//! recently; the plans of another user's processes (`startcp` by root)
//! are kept apart in `coverage/UID/`, under 256 MiB each. One run of a big
//! program (python3) adds tens of megabytes. Removing the directory at any
//! time is safe: the next run plans again (`profdev_coverage::cache`).
//!
//! **Access.** Only root, the mounting user and the users and groups the
//! mount names (`--allow-user`, `--allow-group`) may write `ctl`, list the
//! module directories or read their files (other users' programs are
//! named there): the file server checks every request's uid
//! (`profdev_dev::access`); others get EACCES. A control message that
//! names a process must also pass `access::ptrace_may_attach` for the
//! requester (EPERM): the kernel's ptrace rule, asked from a thread that
//! holds the requester's ids (so a non-dumpable process is refused, as
//! `strace -p` refuses it), and all four uids and gids the requester's.
//! The process is held by a pidfd from that check, and checked again once
//! every thread is stopped, before anything is loaded into it: a process
//! that exec'd a set-user-id program meanwhile is let go untouched (EPERM). `histogram` has length 0 but ends: after the last
//! pair a read returns 0.
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
//! % echo module known >/run/profdev/prof/ctl
//! % echo startcp 4242 >/run/profdev/prof/ctl     # coverage of a running process
//! % echo startcp 4242 >/run/profdev/prof/ctl     # while another mode is on
//! echo: write error: Device or resource busy
//! % echo stop >/run/profdev/prof/ctl             # 4242 reports; it runs on
//! % cat /run/profdev/prof/00000001/histogram     # one pair per executed instruction
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
//! * `startcp PID` leaves the process's code patched after `stop` and
//!   `end`; see `coverage`'s Bugs for what attach mode does not reach.
//! * Records are kept across modes until `end`: a module's record made in
//!   memory mode takes coverage counts if the device is switched to
//!   coverage mode without an `end` between, and the other way round.
//! * Ticks in kernel mode are not taken, so a module's share is of user
//!   time only; `kprof` shows the kernel side.

mod coverage;
mod ctl;
mod engines;
mod histogram;
mod memory;
mod modules;
#[cfg(test)]
mod tests;

pub use ctl::{frequency_hz, session_config, Mode, DEFAULT_INTERVAL_MS};
pub use engines::{
    merge as merge_counts, Attached, CoverageEngine, Engines, MemoryEngine, ModuleCounts,
};
pub use memory::{parse_pools, MemoryModule, POOL_FILE, POOL_MALLOC, POOL_MAP};
pub use modules::ModuleKey;

use crate::engine::{Engine, Sink};
use crate::health::Health;
use crate::kit::{check_mode, lock, Session, Snapshot};
use crate::pc_counts::PcCounts;
use crate::tree::{Chan, DirEntry, OpenMode, Qid};
use crate::{Dev, DevError};
use ctl::Wanted;
use histogram::{Cursor, ModRecord};
use modules::{Outcome, Resolver};
use profdev_core::Record;
use profdev_symbolize::Objects;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

const CTL: Qid = Qid::file(5);
const CTL_PERM: u16 = 0o222;
const DIR_PERM: u16 = 0o555;
const NAME: u64 = 1;
const PATH: u64 = 2;
const HISTOGRAM: u64 = 3;
const PCTL: u64 = 4;
const OBJECT: u64 = 5;
/// The files of a module directory: number, name, permission bits.
const RECORD_FILES: [(u64, &str, u16); 5] = [
    (NAME, "name", 0o444),
    (PATH, "path", 0o444),
    (HISTOGRAM, "histogram", 0o444),
    (PCTL, "pctl", 0o222),
    (OBJECT, "object", 0o444),
];

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

/// What the device's files show, behind the device lock. No file is read
/// while it is held: samples are resolved to modules beforehand (see
/// [`modules`]), and only their outcomes are counted here.
struct State {
    mode: Option<Mode>,
    wanted: Arc<[Wanted]>,
    interval_ms: u32,
    /// Ascending ids.
    records: Vec<ModRecord>,
    /// Module number (from the resolver) → index in `records`.
    by_module: HashMap<u32, usize>,
    next_id: u32,
    stats: ProfStats,
}

impl State {
    fn new() -> Self {
        State {
            mode: None,
            wanted: Arc::new([]),
            interval_ms: DEFAULT_INTERVAL_MS,
            records: Vec::new(),
            by_module: HashMap::new(),
            next_id: 1,
            stats: ProfStats::default(),
        }
    }

    /// Count `outcomes`; unresolved samples are told to `health`.
    fn count(&mut self, outcomes: &[Outcome], health: &Health) {
        for o in outcomes {
            self.stats.samples += 1;
            let (module, pc, origin) = match o {
                Outcome::Unresolved => {
                    self.stats.unresolved += 1;
                    health.symbol_miss();
                    continue;
                }
                Outcome::NotWanted => continue,
                Outcome::Hit { module, pc, origin } => (*module, *pc, origin),
            };
            let index = match (self.by_module.get(&module), origin) {
                (Some(&i), _) => i,
                (None, Some(origin)) => {
                    let origin = (**origin).clone();
                    self.records.push(ModRecord {
                        id: self.next_id,
                        name: origin.name,
                        path: origin.path,
                        counts: PcCounts::default(),
                        object: Some(origin.object),
                        memory: None,
                    });
                    self.next_id = self.next_id.saturating_add(1);
                    self.by_module.insert(module, self.records.len() - 1);
                    self.records.len() - 1
                }
                (None, None) => continue,
            };
            self.records[index].counts.add(pc);
            self.stats.counted += 1;
        }
    }

    /// Bytes of the records' histograms and names.
    fn memory_bytes(&self) -> u64 {
        self.records
            .iter()
            .map(|r| r.counts.heap_bytes() + (r.name.len() + r.path.len()) as u64)
            .sum()
    }

    fn record(&self, id: u32) -> Option<&ModRecord> {
        self.records
            .binary_search_by_key(&id, |r| r.id)
            .ok()
            .map(|i| &self.records[i])
    }
}

/// The prof device.
pub struct Prof {
    state: Arc<Mutex<State>>,
    /// Tasks and modules: taken by whoever feeds records, never by a reader.
    resolver: Arc<Mutex<Resolver>>,
    session: Session,
    /// What `startcp PID` and `startmp… PID` attach with.
    engines: Engines,
    /// The processes attached so far, for reports at `stop`.
    attached: engines::Attachments,
}

/// Account `records` while a mode is on: resolve them to modules under the
/// resolver's lock (reading files as needed), then count the outcomes under
/// the device lock, briefly.
fn feed(state: &Mutex<State>, resolver: &Mutex<Resolver>, health: &Health, records: &[Record]) {
    let wanted = {
        let st = lock(state);
        if st.mode.is_none() {
            return;
        }
        st.wanted.clone()
    };
    let mut resolver = lock(resolver);
    let outcomes = resolver.batch(records, &wanted);
    // Counted even if the mode went off meanwhile: the resolver has noted
    // the records these outcomes create.
    let mut st = lock(state);
    st.count(&outcomes, health);
    health.set_memory(st.memory_bytes());
}

impl Prof {
    /// A device sampling through `engine`, attaching to no process
    /// (`startcp PID` and `startmp… PID` are ENXIO).
    pub fn new(engine: Engine) -> Self {
        Prof::with_engines(engine, Engines::default())
    }

    /// A device sampling through `engine` and attaching to processes
    /// with `engines` (the coverage and memory modes' `PID` forms).
    pub fn with_engines(engine: Engine, engines: Engines) -> Self {
        let session = Session::new(engine);
        session
            .health()
            .set_rate_asked(frequency_hz(DEFAULT_INTERVAL_MS));
        Prof {
            state: Arc::new(Mutex::new(State::new())),
            resolver: Arc::new(Mutex::new(Resolver::new(Objects::new()))),
            session,
            engines,
            attached: engines::Attachments::default(),
        }
    }

    /// The device with `objects` as its objects table: the one whose
    /// [`Objects::mapping_hook`] the engine's live source calls, so a
    /// file is opened when its MMAP record is decoded (a device made by
    /// [`Prof::new`] has a table of its own, which no source feeds).
    pub fn with_objects(self, objects: Objects) -> Self {
        *lock(&self.resolver) = Resolver::new(objects);
        self
    }

    /// Account `records` as the running mode would: the entry point of the
    /// engine's sink, used directly by tests. Counts only while a mode is
    /// on.
    pub fn feed(&self, records: &[Record]) {
        feed(&self.state, &self.resolver, self.session.health(), records);
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
        self.session.ended()
    }

    /// The error that ended the running session early, if any.
    pub fn session_error(&self) -> Option<String> {
        self.session.error()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn start(&self, mode: Mode) -> Result<(), DevError> {
        let (state, resolver) = (self.state.clone(), self.resolver.clone());
        let health = self.session.health().clone();
        let sink: Sink = Arc::new(move |batch: &[Record]| feed(&state, &resolver, &health, batch));
        self.session.start(
            |_| {
                let config = {
                    let mut st = self.lock();
                    if st.mode.is_some() {
                        return None;
                    }
                    st.mode = Some(mode);
                    mode.session(st.interval_ms)
                };
                lock(&self.resolver).new_session();
                Some(config)
            },
            sink,
            || self.lock().mode = None,
        )?;
        Ok(())
    }

    fn stop(&self) {
        // Stopping drains the last records into the records first.
        let source = self.session.stop(|| {}).unwrap_or_default();
        let mut st = self.lock();
        st.mode = None;
        st.stats.lost += source.lost;
        st.stats.throttled += source.throttled;
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

fn ctl_entry() -> DirEntry {
    DirEntry::file("ctl", CTL, CTL_PERM, 0)
}

fn dir_entry(r: &ModRecord) -> DirEntry {
    DirEntry::dir(&format!("{:08x}", r.id), record_dir(r.id), DIR_PERM)
}

/// The entry of file `file` of record `r`.
fn file_entry(r: &ModRecord, file: u64) -> Option<DirEntry> {
    let &(_, name, perm) = RECORD_FILES.iter().find(|f| f.0 == file)?;
    let length = match file {
        NAME => r.name.len() as u64 + 1,
        PATH => r.path.len() as u64 + 1,
        OBJECT => r.object.as_ref()?.key().version.map_or(0, |v| v.1),
        _ => 0,
    };
    Some(DirEntry::file(name, record_file(r.id, file), perm, length))
}

/// The record id a module directory's name gives: exactly 8 lowercase hex
/// digits, as the listing writes them.
fn parse_dir_name(name: &str) -> Option<u32> {
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    (name.len() == 8 && name.bytes().all(hex))
        .then(|| u32::from_str_radix(name, 16).ok())
        .flatten()
}

/// An open `object` file: the module's file as it was mapped, and the
/// last requester it was allowed to (whose reads need no new check).
struct ObjectFile(Arc<profdev_symbolize::Object>, Option<crate::access::Cred>);

/// May `cred` read the kept file of `object`? Root (and an in-process
/// driver, no requester) may. Anyone else only if `open(2)` would let
/// them: the recorded path is opened now from a thread holding the
/// requester's ids and no capability (`profdev_asuser::open_as`: the
/// directories on the path, ACLs, supplementary groups, all as the kernel
/// decides), and what opens must be the kept file itself (same device and
/// inode). A file deleted or replaced since the mapping, or one behind a
/// directory the requester cannot search, is EACCES.
fn may_read_object(
    object: &profdev_symbolize::Object,
    cred: Option<crate::access::Cred>,
) -> Result<(), DevError> {
    use std::os::unix::fs::MetadataExt;
    let Some(c) = cred.filter(|c| c.uid != 0) else {
        return Ok(());
    };
    let file = object.file().ok_or(DevError::NotFound)?;
    let io = |e: std::io::Error| DevError::NoDevice(format!("{}: {e}", object.path()));
    let kept = file.metadata().map_err(io)?;
    let user = profdev_asuser::User::of_request(c.uid, c.gid, c.pid);
    match profdev_asuser::open_as(&user, std::path::Path::new(object.path())) {
        Ok(Ok(f)) => {
            let now = f.metadata().map_err(io)?;
            if (now.dev(), now.ino()) == (kept.dev(), kept.ino()) {
                Ok(())
            } else {
                Err(DevError::Perm)
            }
        }
        // The kernel said no, or profdev cannot act as the requester
        // (not root): refused either way.
        Ok(Err(_)) | Err(_) => Err(DevError::Perm),
    }
}

/// Read the kept file of a module for `cred`, who must be allowed to read
/// it ([`may_read_object`]): serving it is no way around the file
/// system's rules.
#[cfg(test)]
fn read_object(
    object: &profdev_symbolize::Object,
    cred: Option<crate::access::Cred>,
    offset: u64,
    count: u32,
) -> Result<Vec<u8>, DevError> {
    may_read_object(object, cred)?;
    read_object_unchecked(object, offset, count)
}

/// The bytes at `offset` of the kept file: no check.
fn read_object_unchecked(
    object: &profdev_symbolize::Object,
    offset: u64,
    count: u32,
) -> Result<Vec<u8>, DevError> {
    use std::os::unix::fs::FileExt;
    let file = object.file().ok_or(DevError::NotFound)?;
    let io = |e: std::io::Error| DevError::NoDevice(format!("{}: {e}", object.path()));
    let mut buf = vec![0; count.min(1 << 20) as usize];
    let n = file.read_at(&mut buf, offset).map_err(io)?;
    buf.truncate(n);
    Ok(buf)
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
            let mut out = Vec::with_capacity(st.records.len() + 1);
            out.push(ctl_entry());
            out.extend(st.records.iter().rev().map(dir_entry));
            return Ok(out);
        }
        let (id, file) = split_qid(dir);
        let r = st
            .record(id)
            .filter(|_| file == 0)
            .ok_or(DevError::NotFound)?;
        Ok(RECORD_FILES
            .iter()
            .filter_map(|&(f, _, _)| file_entry(r, f))
            .collect())
    }

    /// A lookup by name, in O(log records): a module directory's name is
    /// its record id.
    fn walk(&self, dir: Qid, name: &str) -> Result<DirEntry, DevError> {
        if !dir.is_dir() {
            return Err(DevError::NotDir);
        }
        let st = self.lock();
        if dir == Qid::ROOT {
            if name == "ctl" {
                return Ok(ctl_entry());
            }
            let id = parse_dir_name(name).ok_or(DevError::NotFound)?;
            return st.record(id).map(dir_entry).ok_or(DevError::NotFound);
        }
        let (id, file) = split_qid(dir);
        let r = st
            .record(id)
            .filter(|_| file == 0)
            .ok_or(DevError::NotFound)?;
        let &(f, _, _) = RECORD_FILES
            .iter()
            .find(|f| f.1 == name)
            .ok_or(DevError::NotFound)?;
        file_entry(r, f).ok_or(DevError::NotFound)
    }

    /// The entry of `qid`, in O(log records).
    fn stat(&self, qid: Qid) -> Result<DirEntry, DevError> {
        match qid {
            Qid::ROOT => return Ok(DirEntry::dir(".", Qid::ROOT, 0o500)),
            CTL => return Ok(ctl_entry()),
            _ => {}
        }
        let (id, file) = split_qid(qid);
        let st = self.lock();
        let r = st.record(id).ok_or(DevError::NotFound)?;
        match (qid.is_dir(), file) {
            (true, 0) => Ok(dir_entry(r)),
            (false, f) => file_entry(r, f).ok_or(DevError::NotFound),
            _ => Err(DevError::NotFound),
        }
    }

    fn open(&self, qid: Qid, mode: OpenMode) -> Result<Chan, DevError> {
        match qid {
            Qid::ROOT => check_mode(qid, 0o500, mode)?,
            CTL => check_mode(qid, CTL_PERM, mode)?,
            _ => {}
        }
        let mut chan = Chan::new(qid, mode);
        if qid == Qid::ROOT || qid == CTL {
            return Ok(chan);
        }
        let (id, file) = split_qid(qid);
        let st = self.lock();
        let r = st.record(id).ok_or(DevError::NotFound)?;
        let perm = match (qid.is_dir(), file) {
            (true, 0) => DIR_PERM,
            (false, f) => file_entry(r, f).ok_or(DevError::NotFound)?.perm,
            _ => return Err(DevError::NotFound),
        };
        check_mode(qid, perm, mode)?;
        match (qid.is_dir(), file) {
            (false, NAME) => Snapshot::attach(&mut chan, format!("{}\n", r.name).into_bytes()),
            (false, PATH) => Snapshot::attach(&mut chan, format!("{}\n", r.path).into_bytes()),
            (false, HISTOGRAM) => chan.aux = Some(Box::new(Cursor::of(r))),
            (false, OBJECT) => {
                let object = r.object.clone().ok_or(DevError::NotFound)?;
                chan.aux = Some(Box::new(ObjectFile(object, None)));
            }
            _ => {}
        }
        Ok(chan)
    }

    fn read(&self, chan: &mut Chan, offset: u64, count: u32) -> Result<Vec<u8>, DevError> {
        if Snapshot::of(chan).is_some() {
            return Snapshot::read(chan, offset, count);
        }
        let cred = chan.cred;
        if let Some(ObjectFile(object, allowed)) = chan.aux.as_mut().and_then(|a| a.downcast_mut())
        {
            // No device lock is held: this is file I/O. Checked once per
            // requester of the open file, as open(2) checks once.
            if cred.is_some() && *allowed != cred {
                may_read_object(object, cred)?;
                *allowed = cred;
            }
            return read_object_unchecked(object, offset, count);
        }
        Cursor::read(chan, count)
    }

    fn health(&self) -> Option<Arc<Health>> {
        Some(self.session.health().clone())
    }

    fn write(&self, chan: &mut Chan, _offset: u64, data: &[u8]) -> Result<usize, DevError> {
        if chan.qid == CTL {
            self.ctl(data, chan.cred)?;
            return Ok(data.len());
        }
        Err(DevError::Perm)
    }
}
