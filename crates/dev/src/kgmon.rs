//! kgmon — kernel call-graph profiling device (NetBSD gmon/kgmon).
//!
//! # Synopsis
//!
//! ```text
//! gmon/ctl        0600  write: begin | halt | reset
//! gmon/state      0444  read: on | off | error
//! gmon/gmonparam  0400  read: the profile's parameters and counters, "name value" lines
//! gmon/gmon.out   0400  read: the current profile, 4.4BSD gmon.out (x86_64 LP64, little-endian)
//! stat/gmon       0400  read: the device's health (crate::stat), reset by `reset`; its
//!                       unwind_* keys tell each kernel callchain's walk
//! ```
//!
//! `gmonparam` and `gmon.out` hold kernel addresses, which defeat KASLR:
//! like kprof's files they are for the mounting user only.
//!
//! # Description
//!
//! NetBSD profiles its kernel with two data sets: a histogram of the PC at
//! each profiling-clock tick (`kcount`) and call-graph arcs recorded by
//! `_mcount` at every function entry of a kernel built with `-pg`. This
//! device gives Linux the same two data sets with no kernel rebuild, both
//! taken from one stream of samples: each tick of the sampling clock (the
//! software cpu-clock, system wide, kernel mode only, `profhz` Hz per CPU,
//! 1000 by default) that interrupts the kernel
//!
//! * adds one to the histogram cell of its PC. Cells are u16 counters, one
//!   per 4 bytes of kernel text (`HISTFRACTION` 2) over `[lowpc, highpc)` =
//!   `[_stext, _etext)` rounded out to 4 bytes, exactly as `kmstartup` sizes
//!   them. A full cell stays at 65535 instead of wrapping (the original
//!   wrapped silently); each lost count is counted in `saturated`. A PC
//!   outside kernel text (a module, BPF code) is counted in `outside`.
//! * records one arc per adjacent pair of frames of its kernel callchain,
//!   as `_mcount(frompc, selfpc)` would: `selfpc` is the entry of the
//!   function holding the callee frame (from the kernel's sorted symbol
//!   table), `frompc` the call site in the caller. Arcs go into NetBSD's
//!   froms/tos table (see [`profdev_formats::gmon::mcount`]): call sites
//!   quantised to 4 bytes, at most `tolimit` arcs (2 % of text bytes,
//!   clamped to 50..65534). When the table is full the state becomes
//!   `error` and nothing more is recorded, histogram included, until
//!   `begin`, as on NetBSD.
//!
//! Both sets come from the same callchains, so unlike mcount's they are
//! correlated; but an arc's count is the number of *samples whose stack
//! held that arc*, not a number of calls.
//!
//! `ctl` takes exactly these messages (a trailing newline is ignored;
//! anything else fails with EINVAL and the message quoted back):
//!
//! | message | kgmon flag | effect |
//! |---|---|---|
//! | `begin` | `-b` | state `on`; sampling starts if it was not running |
//! | `halt` | `-h` | sampling stops after counting every tick taken; state `off` |
//! | `reset` | `-r` | zero the histogram, the arcs and every counter; state unchanged |
//!
//! `state` reads `on`, `off` or `error` and a newline (sysctl
//! `kern.profiling.state`; NetBSD's transient `busy` never shows).
//! Reading `ctl` returns no bytes.
//!
//! `gmonparam` is NetBSD's `struct gmonparam` plus profdev's counters, one
//! `name value` pair per line, in this order: `state`, `profrate` (Hz),
//! `lowpc`, `highpc` (hex), `textsize`, `kcountsize`, `fromssize`,
//! `tolimit`, `tossize`, then the counters `arcs` (tos entries in use),
//! `ticks` (kernel-mode ticks counted in the histogram), `outside`,
//! `saturated`, `arcs_outside` (call site or callee outside kernel text),
//! `unresolved` (callee below the first kernel symbol), `overflow` (arcs
//! refused by a full table), `ignored` (kernel ticks that arrived while the
//! state was `error`), `lost` (records the kernel dropped) and `throttled`.
//!
//! `gmon.out` is what NetBSD's `kgmon -p` writes, byte for byte in layout:
//! the 40-byte 4.4BSD header (`lpc` = lowpc, `hpc` = highpc, `ncnt` =
//! 40 + kcount bytes, version `0x00051879`, `profrate` = profhz), the u16
//! cells, then a 24-byte raw arc (frompc, selfpc, count) per tos entry, by
//! increasing call site, most recently found first (see
//! [`profdev_formats::gmon`]). Fields are explicit little-endian, 8-byte
//! addresses, whatever the host. Each open sees one consistent snapshot,
//! taken at open; `stat` gives its current length.
//!
//! **Access.** Only root, the mounting user and the users and groups the
//! mount names (`--allow-user`, `--allow-group`) may open, read or write
//! these files: the file server checks every request's uid
//! (`profdev_dev::access`), whatever the modes say; others get EACCES.
//! Every file ends at the length `stat` gives (a snapshot taken at open).
//!
//! # Example
//!
//! ```text
//! % echo reset >/run/profdev/gmon/ctl
//! % echo begin >/run/profdev/gmon/ctl
//! % dd if=/dev/zero of=/dev/null bs=1M count=20000
//! % echo halt >/run/profdev/gmon/ctl
//! % cat /run/profdev/gmon/state
//! off
//! % cp /run/profdev/gmon/gmon.out .
//! % gprof -b vmlinux.syms gmon.out      # profdev kgmon -p writes both files
//! ```
//!
//! # Bugs
//!
//! Arc counts are sampled traversals, not calls: a function called a
//! million times in a tight loop that takes little time shows few arcs.
//! Callchains from the kernel's unwinder include the frames of interrupt
//! entry code; arcs through them are recorded like any other. There is
//! one profile per device server, shared by every user, as on NetBSD.

use crate::ctl::{self, Cmd};
use crate::dev::Dev;
use crate::engine::Engine;
use crate::error::DevError;
use crate::health::{Health, State, UnwindFailure};
use crate::kit::{self, lock, File, Session, Snapshot};
use crate::tree::{Chan, DirEntry, OpenMode, Qid};
use profdev_core::{CpuMode, KernelText, Record, Sample, SessionConfig, Target};
use profdev_formats::gmon::build::{self, CallGraph};
use profdev_formats::gmon::mcount::{self, ArcTable, SLOT_BYTES};
use profdev_formats::gmon::{self, Format};
use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

const DIR: &str = "gmon";
const CTL: Qid = Qid::file(1);
const STATE: Qid = Qid::file(2);
const GMONPARAM: Qid = Qid::file(3);
const GMON_OUT: Qid = Qid::file(4);
const FILES: &[File] = &[
    File::new("ctl", CTL, 0o600),
    File::new("state", STATE, 0o444),
    File::new("gmonparam", GMONPARAM, 0o400),
    File::new("gmon.out", GMON_OUT, 0o400),
];

/// Text bytes per histogram cell: `HISTFRACTION * sizeof(HISTCOUNTER)`
/// (the one definition is the shared builder's).
pub use profdev_formats::gmon::build::CELL_BYTES;

/// The 4.4BSD header size on x86_64.
const HEADER: u64 = 40;
/// A raw arc on x86_64.
const RAWARC: u64 = 24;

/// What a kgmon device profiles and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KgmonConfig {
    /// Kernel text, `[_stext, _etext)`.
    pub text: KernelText,
    /// Entry addresses of the kernel's functions, ascending: `selfpc` is the
    /// greatest entry at or below a callee frame's address.
    pub functions: Arc<[u64]>,
    /// Profiling clock, samples per second per CPU.
    pub profhz: u32,
}

impl KgmonConfig {
    /// The default clock (1000 Hz) over `text`, with function entries
    /// `functions` (sorted here; duplicates removed).
    pub fn new(text: KernelText, functions: &[u64]) -> Self {
        let mut f = functions.to_vec();
        f.sort_unstable();
        f.dedup();
        KgmonConfig {
            text,
            functions: f.into(),
            profhz: 1000,
        }
    }

    /// `lowpc`: `_stext` rounded down to 4 bytes.
    pub fn lowpc(&self) -> u64 {
        build::text_bounds(self.text.start.0, self.text.end.0).0
    }

    /// `highpc`: `_etext` rounded up to 4 bytes.
    pub fn highpc(&self) -> u64 {
        build::text_bounds(self.text.start.0, self.text.end.0).1
    }

    /// `textsize = highpc - lowpc`.
    pub fn textsize(&self) -> u64 {
        self.highpc().saturating_sub(self.lowpc())
    }

    /// Number of histogram cells (`kcountsize / 2`).
    pub fn cells(&self) -> usize {
        (self.textsize() / CELL_BYTES) as usize
    }

    /// The entry of the function holding `pc`, if `pc` is in kernel text at
    /// or above the first function.
    fn entry(&self, pc: u64) -> Option<u64> {
        if pc < self.lowpc() || pc >= self.highpc() {
            return None;
        }
        let i = self.functions.partition_point(|&f| f <= pc);
        i.checked_sub(1).map(|i| self.functions[i])
    }
}

/// The profiling state (`kern.profiling.state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GmonState {
    /// Counting (`GMON_PROF_ON`).
    On,
    /// Not counting (`GMON_PROF_OFF`).
    Off,
    /// The arc table overflowed; not counting (`GMON_PROF_ERROR`).
    Error,
}

impl GmonState {
    /// The word `state` shows.
    pub fn word(self) -> &'static str {
        match self {
            GmonState::On => "on",
            GmonState::Off => "off",
            GmonState::Error => "error",
        }
    }
}

/// Counters kept beside the profile, so nothing is lost silently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Kernel-mode ticks counted in the histogram.
    pub ticks: u64,
    /// Kernel-mode ticks outside kernel text.
    pub outside: u64,
    /// Counts lost to cells stuck at 65535.
    pub saturated: u64,
    /// Arcs whose call site or callee lies outside kernel text.
    pub arcs_outside: u64,
    /// Callee frames below the first kernel symbol.
    pub unresolved: u64,
    /// Arcs refused because the table was full.
    pub overflow: u64,
    /// Kernel-mode ticks that arrived while the state was `error`.
    pub ignored: u64,
}

/// The histogram, the arc table and the state, behind one lock.
struct Profile {
    config: KgmonConfig,
    state: GmonState,
    /// The histogram and the froms/tos table (the shared builder,
    /// `profdev_formats::gmon::build`); `None` until the first `begin`: a
    /// device nobody uses costs nothing.
    graph: Option<CallGraph<ArcTable>>,
    /// The counters the builder does not keep: `unresolved`, `ignored`,
    /// and callee frames outside the text (in `arcs_outside`).
    own: Counters,
    /// Where each tick's callchain walk and misses are told.
    health: Arc<Health>,
}

impl Profile {
    fn new(config: KgmonConfig, health: Arc<Health>) -> Self {
        Profile {
            config,
            state: GmonState::Off,
            graph: None,
            own: Counters::default(),
            health,
        }
    }

    fn allocate(&mut self) {
        if self.graph.is_none() {
            let (lowpc, highpc) = (self.config.lowpc(), self.config.highpc());
            self.graph = Some(CallGraph::new(
                lowpc,
                highpc,
                ArcTable::for_text(lowpc, highpc),
            ));
            self.health.set_memory(self.memory_bytes());
        }
    }

    /// Bytes of the histogram and the arc table (0 before the first
    /// `begin`).
    fn memory_bytes(&self) -> u64 {
        let Some(graph) = &self.graph else { return 0 };
        let froms = 2 * self.config.textsize().div_ceil(SLOT_BYTES);
        let tos = graph.arcs().tolimit() * std::mem::size_of::<mcount::ToStruct>() as u64;
        graph.bins().len() as u64 * 2 + froms + tos
    }

    fn reset(&mut self) {
        // Fresh zeroed tables rather than filling the old ones: untouched
        // pages of a fresh allocation are not resident, and the tables
        // are 2 bytes per 4 bytes of kernel text each.
        if self.graph.is_some() {
            self.graph = None;
            self.allocate();
        }
        self.own = Counters::default();
    }

    fn arcs_in_use(&self) -> u64 {
        self.graph.as_ref().map_or(0, |g| g.arcs().used())
    }

    fn counters(&self) -> Counters {
        let g = self
            .graph
            .as_ref()
            .map(CallGraph::counts)
            .unwrap_or_default();
        Counters {
            ticks: g.ticks,
            outside: g.outside,
            saturated: g.saturated,
            arcs_outside: g.arcs_outside + self.own.arcs_outside,
            unresolved: self.own.unresolved,
            overflow: g.overflow,
            ignored: self.own.ignored,
        }
    }

    /// Count `r` if it is a sample.
    fn count(&mut self, r: &Record) {
        if let Record::Sample(s) = r {
            self.tick(s);
        }
    }

    /// One tick: the statclock's histogram update, then mcount's arcs.
    fn tick(&mut self, s: &Sample) {
        if s.mode != CpuMode::Kernel {
            return;
        }
        match self.state {
            GmonState::On => {}
            GmonState::Error => {
                self.own.ignored += 1;
                return;
            }
            GmonState::Off => return,
        }
        self.allocate();
        let Profile {
            config,
            graph,
            own,
            health,
            ..
        } = self;
        let Some(graph) = graph.as_mut() else {
            return;
        };
        // The chain normally starts with the ip; make sure it does. Then
        // the lookup addresses: the ip itself, and each return address
        // minus one, inside its call instruction, so the call site stays
        // the caller's even after rounding down to the 4-byte froms slot,
        // and a noreturn call ending a function (its return address
        // starting the next) is looked up in the caller.
        let mut chain = s
            .kernel_chain
            .iter()
            .copied()
            .filter(|&a| a < PERF_CONTEXT_MAX)
            .peekable();
        if chain.peek() == Some(&s.ip) {
            chain.next();
        }
        let mut depth = 1usize;
        let frames = std::iter::once(Some(s.ip)).chain(chain.map(|ret| {
            depth += 1;
            Some(ret.wrapping_sub(1))
        }));
        let (lowpc, highpc) = (config.lowpc(), config.highpc());
        let mut unresolved = false;
        let entry = |callee: u64| {
            let e = config.entry(callee);
            if e.is_none() {
                unresolved = true;
                if callee >= lowpc && callee < highpc {
                    own.unresolved += 1;
                } else {
                    own.arcs_outside += 1;
                }
            }
            e
        };
        let before = graph.counts();
        let result = graph.sample(frames, entry);
        let after = graph.counts();
        if after.outside > before.outside {
            health.symbol_miss();
        }
        if result.is_err() {
            self.state = GmonState::Error;
            health.set_state(State::Error);
            return;
        }
        // The walk's health: nothing beyond the pc, cut at the kernel's
        // depth limit, or a frame in no kernel function.
        if depth < 2 {
            health.unwind_failed(UnwindFailure::NoStack);
        } else if s.kernel_chain.len() >= MAX_STACK {
            health.unwind_failed(UnwindFailure::Truncated);
        } else if unresolved || after.arcs_outside > before.arcs_outside {
            health.unwind_failed(UnwindFailure::Unresolved);
        } else {
            health.unwind_ok();
        }
    }

    /// The gmon.out bytes.
    fn gmon_out(&mut self) -> Vec<u8> {
        // One histogram, 8-byte counts (`long`) and x86_64 addresses: the
        // writer has nothing to refuse.
        let write = |profile: &gmon::GmonOut| {
            gmon::write(profile, Format::Bsd, gmon::Target::X86_64)
                .expect("a kgmon profile always fits the 4.4BSD layout")
        };
        let hz = self.config.profhz;
        match self.graph.as_mut() {
            // The histogram is lent to the writer, not copied (it is
            // megabytes; the lock is held throughout, so no tick sees it
            // missing).
            Some(g) => g.with_gmon_out(hz, write),
            None => {
                let (lowpc, highpc) = (self.config.lowpc(), self.config.highpc());
                write(&CallGraph::new(lowpc, highpc, build::ArcCounts::default()).gmon_out(hz))
            }
        }
    }

    fn gmon_out_len(&self) -> u64 {
        HEADER + 2 * self.config.cells() as u64 + RAWARC * self.arcs_in_use()
    }
}

/// perf marks context switches in callchains with values at or above
/// `PERF_CONTEXT_MAX` (-4095 as u64).
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

/// The kernel's default `kernel.perf_event_max_stack`: a chain this long
/// (context markers included) was cut short.
const MAX_STACK: usize = 127;

/// The kgmon device.
pub struct Kgmon {
    profile: Arc<Mutex<Profile>>,
    /// The session; its counts are those since the last reset.
    session: Session,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CtlOp {
    Begin,
    Halt,
    Reset,
}

const CTL_TABLE: &[Cmd<CtlOp>] = &[
    Cmd::verb("begin", CtlOp::Begin),
    Cmd::verb("halt", CtlOp::Halt),
    Cmd::verb("reset", CtlOp::Reset),
];

impl Kgmon {
    /// A device profiling `config.text`, sampling through `engine`.
    pub fn new(config: KgmonConfig, engine: Engine) -> Self {
        let session = Session::new(engine);
        session.health().set_rate_asked(config.profhz);
        Kgmon {
            profile: Arc::new(Mutex::new(Profile::new(config, session.health().clone()))),
            session,
        }
    }

    /// Show the profiling state as the health's.
    fn publish_state(&self) {
        let state = match self.state() {
            GmonState::On => State::On,
            GmonState::Off => State::Off,
            GmonState::Error => State::Error,
        };
        self.session.health().set_state(state);
    }

    /// The sampling configuration `begin` opens: system wide, kernel mode
    /// only, with kernel callchains.
    pub fn session_config(&self) -> SessionConfig {
        SessionConfig {
            target: Target::System,
            frequency_hz: self.lock().config.profhz,
            kernel: true,
            user: false,
            callchain: true,
            user_stack_bytes: 0,
            track_tasks: false,
            off_cpu: false,
        }
    }

    /// Count the samples among `records`, as the engine's sink does.
    pub fn feed(&self, records: &[Record]) {
        let mut p = self.lock();
        for r in records {
            p.count(r);
        }
    }

    /// The state.
    pub fn state(&self) -> GmonState {
        self.lock().state
    }

    /// The counters.
    pub fn counters(&self) -> Counters {
        self.lock().counters()
    }

    /// The current gmon.out.
    pub fn snapshot(&self) -> Vec<u8> {
        self.lock().gmon_out()
    }

    /// The `gmonparam` text.
    pub fn gmonparam(&self) -> String {
        let stats = self.session.stats();
        let p = self.lock();
        let c = &p.config;
        let tolimit = mcount::tolimit_for(c.textsize());
        let mut s = String::new();
        let mut line = |name: &str, value: String| {
            let _ = writeln!(s, "{name} {value}");
        };
        line("state", p.state.word().into());
        line("profrate", c.profhz.to_string());
        line("lowpc", format!("{:#x}", c.lowpc()));
        line("highpc", format!("{:#x}", c.highpc()));
        line("textsize", c.textsize().to_string());
        line("kcountsize", (2 * c.cells()).to_string());
        line(
            "fromssize",
            (2 * c.textsize().div_ceil(SLOT_BYTES)).to_string(),
        );
        line("tolimit", tolimit.to_string());
        line("tossize", (tolimit * 24).to_string());
        let n = p.counters();
        line("arcs", p.arcs_in_use().to_string());
        line("ticks", n.ticks.to_string());
        line("outside", n.outside.to_string());
        line("saturated", n.saturated.to_string());
        line("arcs_outside", n.arcs_outside.to_string());
        line("unresolved", n.unresolved.to_string());
        line("overflow", n.overflow.to_string());
        line("ignored", n.ignored.to_string());
        line("lost", stats.lost.to_string());
        line("throttled", stats.throttled.to_string());
        s
    }

    fn lock(&self) -> MutexGuard<'_, Profile> {
        lock(&self.profile)
    }

    fn begin(&self) -> Result<(), DevError> {
        let config = self.session_config();
        // On before the first sample can arrive (even if a session runs:
        // `begin` clears `error`); back as it was if sampling cannot start.
        let before = Cell::new(GmonState::Off);
        let started = self.session.start(
            |running| {
                let mut p = self.lock();
                p.allocate();
                before.set(std::mem::replace(&mut p.state, GmonState::On));
                (!running).then_some(config)
            },
            kit::feeder(&self.profile, Profile::count),
            || self.lock().state = before.get(),
        );
        self.publish_state();
        started?;
        Ok(())
    }

    fn halt(&self) {
        // Stopping drains the last samples (counted while the state is
        // still on), then the state goes off.
        self.session.stop(|| self.lock().state = GmonState::Off);
        self.publish_state();
    }

    fn reset(&self) {
        // Between two batches: the health restarts with the profile.
        self.session.reset(|| {
            let mut p = self.lock();
            p.reset();
            p.health.set_memory(p.memory_bytes());
        });
        self.session.forget();
    }

    fn ctl(&self, data: &[u8]) -> Result<(), DevError> {
        let (op, _) = ctl::parse(data, CTL_TABLE)?;
        match op {
            CtlOp::Begin => self.begin(),
            CtlOp::Halt => {
                self.halt();
                Ok(())
            }
            CtlOp::Reset => {
                self.reset();
                Ok(())
            }
        }
    }
}

impl Kgmon {
    /// A file's current length, without taking a snapshot.
    fn length(&self, qid: Qid) -> u64 {
        match qid {
            STATE => self.state().word().len() as u64 + 1,
            GMONPARAM => self.gmonparam().len() as u64,
            GMON_OUT => self.lock().gmon_out_len(),
            _ => 0,
        }
    }
}

impl Dev for Kgmon {
    fn name(&self) -> &'static str {
        "kgmon"
    }

    fn health(&self) -> Option<Arc<Health>> {
        Some(self.session.health().clone())
    }

    fn dir_name(&self) -> &'static str {
        DIR
    }

    fn gen(&self, dir: Qid) -> Result<Vec<DirEntry>, DevError> {
        kit::gen(FILES, dir, |q| self.length(q))
    }

    fn stat(&self, qid: Qid) -> Result<DirEntry, DevError> {
        kit::stat(FILES, qid, |q| self.length(q))
    }

    fn open(&self, qid: Qid, mode: OpenMode) -> Result<Chan, DevError> {
        let mut chan = kit::open(FILES, qid, mode)?;
        let snapshot = match qid {
            STATE => format!("{}\n", self.state().word()).into_bytes(),
            GMONPARAM => self.gmonparam().into_bytes(),
            GMON_OUT => self.snapshot(),
            _ => return Ok(chan),
        };
        Snapshot::attach(&mut chan, snapshot);
        Ok(chan)
    }

    fn read(&self, chan: &mut Chan, offset: u64, count: u32) -> Result<Vec<u8>, DevError> {
        if chan.qid == CTL {
            return Ok(Vec::new());
        }
        Snapshot::read(chan, offset, count)
    }

    fn write(&self, chan: &mut Chan, _offset: u64, data: &[u8]) -> Result<usize, DevError> {
        match chan.qid {
            CTL => {
                self.ctl(data)?;
                Ok(data.len())
            }
            _ => Err(DevError::Perm),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ReplayFactory;
    use profdev_core::KernelPc;
    use profdev_formats::gmon::{parse, Arc as GArc};

    const LO: u64 = 0xffff_ffff_8100_0000;
    // Functions: f0 at LO, f1 at LO+0x100, f2 at LO+0x200; text ends at LO+0x402.
    const F0: u64 = LO;
    const F1: u64 = LO + 0x100;
    const F2: u64 = LO + 0x200;

    fn config() -> KgmonConfig {
        KgmonConfig::new(
            KernelText {
                start: KernelPc(LO),
                end: KernelPc(LO + 0x402),
            },
            &[F2, F0, F1, F1],
        )
    }

    fn device(records: Vec<Record>) -> Kgmon {
        Kgmon::new(config(), Engine::new(Arc::new(ReplayFactory::new(records))))
    }

    fn ksample(ip: u64, chain: &[u64]) -> Record {
        Record::Sample(Sample {
            ip,
            mode: CpuMode::Kernel,
            kernel_chain: chain.to_vec(),
            ..Sample::default()
        })
    }

    fn write(k: &Kgmon, msg: &str) -> Result<usize, DevError> {
        let mut c = k.open(CTL, OpenMode::Write).unwrap();
        k.write(&mut c, 0, msg.as_bytes())
    }

    fn read_all(k: &Kgmon, q: Qid) -> Vec<u8> {
        let mut c = k.open(q, OpenMode::Read).unwrap();
        k.read(&mut c, 0, u32::MAX).unwrap()
    }

    #[test]
    fn geometry_follows_kmstartup() {
        let c = config();
        assert_eq!(
            (c.lowpc(), c.highpc(), c.textsize()),
            (LO, LO + 0x404, 0x404)
        );
        assert_eq!(c.cells(), 0x101);
        assert_eq!(&*c.functions, &[F0, F1, F2]);
        assert_eq!(c.entry(F1 + 0x7f), Some(F1));
        assert_eq!(c.entry(LO + 0x404), None);
    }

    #[test]
    fn ticks_and_arcs_from_callchains() {
        let k = device(vec![]);
        write(&k, "begin").unwrap();
        // Sampled in f2, called from f1 (return address F1+0x15), called
        // from f0 (return address F0+0x21).
        let s = ksample(F2 + 0x10, &[F2 + 0x10, F1 + 0x15, F0 + 0x21]);
        k.feed(&[s.clone(), s]);
        k.feed(&[ksample(F1 + 0x3, &[F1 + 0x3, F0 + 0x31])]);
        // User-mode samples do not count.
        k.feed(&[Record::Sample(Sample {
            ip: F2,
            mode: CpuMode::User,
            ..Sample::default()
        })]);
        let d = parse(&k.snapshot(), gmon::Target::X86_64).unwrap();
        assert_eq!(d.format, Format::Bsd);
        let h = &d.gmon.histograms[0];
        assert_eq!((h.low_pc, h.high_pc, h.prof_rate), (LO, LO + 0x404, 1000));
        assert_eq!(h.bins.len(), 0x101);
        assert_eq!(h.bins[0x210 / 4], 2);
        assert_eq!(h.bins[0x100 / 4], 1);
        assert_eq!(h.bins.iter().map(|&b| u64::from(b)).sum::<u64>(), 3);
        // Call sites are ret - 1 rounded down to 4 bytes, in slot order.
        assert_eq!(
            d.gmon.arcs,
            vec![
                GArc {
                    from_pc: F0 + 0x20,
                    self_pc: F1,
                    count: 2
                },
                GArc {
                    from_pc: F0 + 0x30,
                    self_pc: F1,
                    count: 1
                },
                GArc {
                    from_pc: F1 + 0x14,
                    self_pc: F2,
                    count: 2
                },
            ]
        );
        assert_eq!(k.counters().ticks, 3);
        assert_eq!(k.stat(GMON_OUT).unwrap().length, k.snapshot().len() as u64);
    }

    #[test]
    fn noreturn_call_at_function_end_belongs_to_the_caller() {
        let k = device(vec![]);
        write(&k, "begin").unwrap();
        // f0 ends with a call whose return address is f1's first byte; the
        // callee (sampled) is f2.
        k.feed(&[ksample(F2 + 8, &[F2 + 8, F1])]);
        let d = parse(&k.snapshot(), gmon::Target::X86_64).unwrap();
        assert_eq!(
            d.gmon.arcs,
            vec![GArc {
                from_pc: F1 - 4,
                self_pc: F2,
                count: 1
            }]
        );
        // Deeper frames: the callee of the next arc is looked up at
        // return address - 1, i.e. in f0.
        k.feed(&[ksample(F2 + 8, &[F2 + 8, F1, F2 + 0x40])]);
        let d = parse(&k.snapshot(), gmon::Target::X86_64).unwrap();
        assert!(d.gmon.arcs.contains(&GArc {
            from_pc: F2 + 0x3c,
            self_pc: F0,
            count: 1
        }));
    }

    #[test]
    fn cells_saturate_and_say_so() {
        let k = device(vec![]);
        write(&k, "begin").unwrap();
        let batch: Vec<Record> = (0..65_540).map(|_| ksample(F1, &[])).collect();
        k.feed(&batch);
        let d = parse(&k.snapshot(), gmon::Target::X86_64).unwrap();
        assert_eq!(d.gmon.histograms[0].bins[0x40], u16::MAX);
        assert_eq!(k.counters().saturated, 5);
        assert!(k.gmonparam().contains("\nsaturated 5\n"));
    }

    #[test]
    fn outside_text_is_counted_not_binned() {
        let k = device(vec![]);
        write(&k, "begin").unwrap();
        k.feed(&[
            ksample(LO + 0x404, &[]),
            ksample(0xffff_ffff_c000_0000, &[0xffff_ffff_c000_0000, F1 + 9]),
            ksample(LO - 1, &[]),
        ]);
        let c = k.counters();
        assert_eq!((c.ticks, c.outside, c.arcs_outside), (0, 3, 1));
    }

    #[test]
    fn overflow_enters_error_until_begin() {
        let k = device(vec![]);
        write(&k, "begin").unwrap();
        // tolimit is MINARCS (50) for this small text: 49 distinct arcs fit.
        let sample = |i: u64| ksample(F2, &[F2, F0 + 4 * i + 1]);
        k.feed(&(0..49).map(sample).collect::<Vec<_>>());
        assert_eq!(k.state(), GmonState::On);
        k.feed(&[sample(49), sample(0)]);
        assert_eq!(k.state(), GmonState::Error);
        assert_eq!(read_all(&k, STATE), b"error\n");
        let c = k.counters();
        assert_eq!((c.overflow, c.ignored), (1, 1));
        // An existing arc counts again after begin; reset clears all.
        write(&k, "begin").unwrap();
        k.feed(&[sample(0)]);
        assert_eq!(k.state(), GmonState::On);
        let d = parse(&k.snapshot(), gmon::Target::X86_64).unwrap();
        assert_eq!(d.gmon.arcs.len(), 49);
        assert_eq!(d.gmon.arcs[0].count, 2);
        write(&k, "reset\n").unwrap();
        assert_eq!(k.state(), GmonState::On);
        let d = parse(&k.snapshot(), gmon::Target::X86_64).unwrap();
        assert!(d.gmon.arcs.is_empty());
        assert!(d.gmon.histograms[0].bins.iter().all(|&b| b == 0));
        // Counting goes on in the fresh tables, and a snapshot leaves the
        // histogram in place.
        k.feed(&[sample(3)]);
        let first = k.snapshot();
        assert_eq!(k.snapshot(), first);
        let d = parse(&first, gmon::Target::X86_64).unwrap();
        assert_eq!(d.gmon.arcs.len(), 1);
        assert_eq!(
            d.gmon.histograms[0]
                .bins
                .iter()
                .map(|&b| u64::from(b))
                .sum::<u64>(),
            1
        );
    }

    #[test]
    fn ctl_verbs_are_exact() {
        let k = device(vec![]);
        assert_eq!(read_all(&k, STATE), b"off\n");
        assert_eq!(
            write(&k, "beginning").unwrap_err().to_string(),
            "unknown control message \"beginning\""
        );
        assert_eq!(k.state(), GmonState::Off);
        assert!(write(&k, "halt now").is_err());
        write(&k, "begin\n").unwrap();
        assert_eq!(read_all(&k, STATE), b"on\n");
        write(&k, "halt\n").unwrap();
        assert_eq!(read_all(&k, STATE), b"off\n");
        let mut c = k.open(GMON_OUT, OpenMode::Read).unwrap();
        assert_eq!(k.write(&mut c, 0, b"x"), Err(DevError::Perm));
        assert_eq!(k.open(STATE, OpenMode::Write).unwrap_err(), DevError::Perm);
        assert_eq!(
            k.read(&mut k.open(CTL, OpenMode::Read).unwrap(), 0, 9)
                .unwrap(),
            b""
        );
    }

    #[test]
    fn unused_device_reads_an_empty_profile() {
        let k = device(vec![]);
        let bytes = read_all(&k, GMON_OUT);
        assert_eq!(bytes.len() as u64, 40 + 2 * 0x101);
        assert_eq!(k.stat(GMON_OUT).unwrap().length, bytes.len() as u64);
        let param = String::from_utf8(read_all(&k, GMONPARAM)).unwrap();
        assert!(
            param.starts_with("state off\nprofrate 1000\nlowpc 0xffffffff81000000\n"),
            "{param}"
        );
        assert!(param.contains("\ntolimit 50\n"), "{param}");
    }

    #[test]
    fn snapshot_is_taken_at_open_and_session_drains() {
        let recs = vec![
            ksample(F2 + 0x10, &[F2 + 0x10, F1 + 0x15]),
            ksample(F2 + 0x10, &[F2 + 0x10, F1 + 0x15]),
        ];
        let k = device(recs);
        let mut before = k.open(GMON_OUT, OpenMode::Read).unwrap();
        write(&k, "begin").unwrap();
        write(&k, "halt").unwrap();
        assert_eq!(k.counters().ticks, 2);
        let old = k.read(&mut before, 0, u32::MAX).unwrap();
        assert_eq!(old.len(), 40 + 2 * 0x101);
        let d = parse(&read_all(&k, GMON_OUT), gmon::Target::X86_64).unwrap();
        assert_eq!(d.gmon.arcs.len(), 1);
        assert!(k.gmonparam().contains("\narcs 1\nticks 2\n"));
    }
}
