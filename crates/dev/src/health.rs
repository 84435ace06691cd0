//! Health: what a sampling device says about itself while it runs.
//!
//! Every device built on the kit's [`Session`](crate::kit::Session) keeps
//! one [`Health`]: counters kept with atomics by whoever feeds the device
//! (the engine's thread), read at any time by anyone, never behind the
//! device's lock, so a reader never makes the sampler wait. The file server
//! shows each device's health as `stat/NAME` at the mount root
//! ([`crate::stat`]); private runs (`profdev sample`, `gmon`, `prof`) show
//! the same numbers as their progress line and totals.
//!
//! # The keys
//!
//! One `name value` line each, in this order (the text of
//! [`HealthSnapshot::text`]):
//!
//! | key | meaning |
//! |---|---|
//! | `state` | `on`, `off`, or `error` (kgmon's arc table overflowed) |
//! | `rate_asked` | samples per second per CPU the device asks for (its `-F`, prof's `interval`) |
//! | `rate_achieved` | samples delivered per second of the CPU time sampled. For a run on a process tree whose CPU time is known (`profdev prof` and `gmon` with CMD: [`Health::set_cpu_time`]), `samples / cpu_seconds`, the CPU time the tree spent in the modes sampled (user time for prof and gmon), so one busy thread and two read the same; otherwise `samples / (uptime_ms / 1000) / cpus`, where `cpus` is the online CPUs for a system-wide device and 1 for a single process tree. Below `rate_asked` when the kernel lost or throttled samples, or, system wide, when the device samples one mode only (kgmon: kernel, prof: user) |
//! | `samples` | samples delivered to the device |
//! | `lost` | records the kernel dropped because a ring buffer was full |
//! | `throttled` | times the kernel throttled sampling on a CPU |
//! | `unwind_ok` | stacks walked to their root |
//! | `unwind_failed_no_stack` | samples that came without a stack to walk (no callchain beyond the sampled pc, no user stack copy) |
//! | `unwind_failed_truncated` | stacks cut short: the kernel's depth limit (`kernel.perf_event_max_stack`), or a user unwind that stopped before the root |
//! | `unwind_failed_unresolved` | stacks with a frame in no known function (below the first kernel symbol, or outside kernel text) |
//! | `symbol_misses` | samples the device could not place: kprof and kgmon, kernel-mode pcs outside kernel text; prf, kernel-mode pcs outside the loaded table; prof, user pcs in no file-backed ELF module |
//! | `sessions` | sampling sessions started |
//! | `memory_bytes` | bytes of the device's tables (histograms, arcs, counters) |
//! | `uptime_ms` | milliseconds of sampling (the device on) |
//!
//! Only kgmon takes stacks among the mounted devices (kernel callchains);
//! kprof, prf and prof sample pcs only, so their `unwind_*` keys stay 0.
//! `profdev gmon` unwinds user stacks: there the `unwind_*` keys are its
//! unwinder's.
//!
//! Every counter starts at 0 and only grows, until a reset: kprof's
//! `startclr`, kgmon's `reset`, prof's `end`, prf's table load. `state`,
//! `rate_asked`, `memory_bytes` are gauges; `rate_achieved` is computed.
//!
//! ```
//! use profdev_dev::health::{Health, State, UnwindFailure};
//! use profdev_core::{Record, Sample, SessionConfig};
//!
//! let h = Health::new();
//! h.started(&SessionConfig::system(100));
//! h.count(&[Record::Sample(Sample::default()), Record::Lost { cpu: 0, count: 3, time: 0 }]);
//! h.unwind_failed(UnwindFailure::Truncated);
//! let s = h.snapshot();
//! assert_eq!((s.state, s.samples, s.lost, s.sessions), (State::On, 1, 3, 1));
//! assert!(s.text().contains("unwind_failed_truncated 1\n"));
//! h.reset();
//! assert_eq!(h.snapshot().samples, 0);
//! ```

use crate::kit::lock;
use profdev_core::{Record, SessionConfig, Target};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The bits of `Health::modes`.
const MODE_USER: u8 = 1;
const MODE_KERNEL: u8 = 2;

/// The device's state, as its health shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Not sampling.
    Off,
    /// Sampling.
    On,
    /// Stopped counting by itself (kgmon's `error`).
    Error,
}

impl State {
    /// The word `state` shows.
    pub fn word(self) -> &'static str {
        match self {
            State::Off => "off",
            State::On => "on",
            State::Error => "error",
        }
    }

    fn from_u8(v: u8) -> State {
        match v {
            1 => State::On,
            2 => State::Error,
            _ => State::Off,
        }
    }
}

/// Why a stack was not walked to its root: one `unwind_failed_<key>` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnwindFailure {
    /// No stack came with the sample.
    NoStack,
    /// The walk stopped before the root.
    Truncated,
    /// A frame lies in no known function.
    Unresolved,
}

impl UnwindFailure {
    /// Every reason, in the order the keys are shown.
    pub const ALL: [UnwindFailure; 3] = [
        UnwindFailure::NoStack,
        UnwindFailure::Truncated,
        UnwindFailure::Unresolved,
    ];

    /// The key's suffix.
    pub fn key(self) -> &'static str {
        match self {
            UnwindFailure::NoStack => "no_stack",
            UnwindFailure::Truncated => "truncated",
            UnwindFailure::Unresolved => "unresolved",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Sampling time: the ended sessions' and the running one's.
#[derive(Default)]
struct Clock {
    past: Duration,
    since: Option<Instant>,
}

impl Clock {
    fn now(&self) -> Duration {
        self.past + self.since.map_or(Duration::ZERO, |t| t.elapsed())
    }
}

/// One device's health counters. See the [module](self) for the keys.
pub struct Health {
    /// What `last_batch` counts from.
    epoch: Instant,
    /// When the last batch was counted, in ns since `epoch`.
    last_batch: AtomicU64,
    state: AtomicU8,
    rate_asked: AtomicU64,
    cpus: AtomicU64,
    /// The modes sampled: bit 0 user, bit 1 kernel.
    modes: AtomicU8,
    /// CPU time the sampled tasks spent in the sampled modes, in ns; 0 when
    /// not known.
    cpu_ns: AtomicU64,
    samples: AtomicU64,
    lost: AtomicU64,
    throttled: AtomicU64,
    unwind_ok: AtomicU64,
    unwind_failed: [AtomicU64; 3],
    symbol_misses: AtomicU64,
    sessions: AtomicU64,
    memory_bytes: AtomicU64,
    /// Taken by start, stop, reset and readers, never by the sampler.
    clock: Mutex<Clock>,
}

impl Health {
    /// All zero, off.
    pub fn new() -> Self {
        Health {
            epoch: Instant::now(),
            last_batch: AtomicU64::new(0),
            state: AtomicU8::new(0),
            rate_asked: AtomicU64::new(0),
            cpus: AtomicU64::new(0),
            modes: AtomicU8::new(MODE_USER | MODE_KERNEL),
            cpu_ns: AtomicU64::new(0),
            samples: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            unwind_ok: AtomicU64::new(0),
            unwind_failed: Default::default(),
            symbol_misses: AtomicU64::new(0),
            sessions: AtomicU64::new(0),
            memory_bytes: AtomicU64::new(0),
            clock: Mutex::new(Clock::default()),
        }
    }

    /// Count a batch of records: samples, lost records, throttling.
    pub fn count(&self, batch: &[Record]) {
        if batch.is_empty() {
            return;
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        self.last_batch.store(now, Relaxed);
        let (mut samples, mut lost, mut throttled) = (0, 0, 0);
        for r in batch {
            match r {
                // A switch's sample is no tick of the clock.
                Record::Sample(s) if !s.switch_out => samples += 1,
                Record::Lost { count, .. } => lost += count,
                Record::Throttle {
                    throttled: true, ..
                } => throttled += 1,
                _ => {}
            }
        }
        for (counter, n) in [
            (&self.samples, samples),
            (&self.lost, lost),
            (&self.throttled, throttled),
        ] {
            if n > 0 {
                counter.fetch_add(n, Relaxed);
            }
        }
    }

    /// A session of `config` started: one more session, the rate it asks,
    /// the CPUs it samples, and the state on.
    pub fn started(&self, config: &SessionConfig) {
        let cpus = match config.target {
            Target::System => online_cpus(),
            Target::Process { .. } => 1,
        };
        self.rate_asked
            .store(u64::from(config.frequency_hz), Relaxed);
        self.cpus.store(cpus, Relaxed);
        let user = if config.user { MODE_USER } else { 0 };
        let kernel = if config.kernel { MODE_KERNEL } else { 0 };
        let modes = user | kernel;
        self.modes.store(modes, Relaxed);
        self.sessions.fetch_add(1, Relaxed);
        let mut c = lock(&self.clock);
        if c.since.is_none() {
            c.since = Some(Instant::now());
        }
        self.set_state(State::On);
    }

    /// The session stopped: its time is kept, the state goes off.
    pub fn stopped(&self) {
        let mut c = lock(&self.clock);
        if let Some(t) = c.since.take() {
            c.past += t.elapsed();
        }
        self.set_state(State::Off);
    }

    /// The session stopped after its source had ended by itself (a process
    /// tree that exited): its time is kept up to its last batch, so that
    /// the wait for the stop does not count as sampling.
    pub fn stopped_after_end(&self) {
        let mut c = lock(&self.clock);
        if let Some(t) = c.since.take() {
            let last = self.epoch + Duration::from_nanos(self.last_batch.load(Relaxed));
            c.past += last.saturating_duration_since(t);
        }
        self.set_state(State::Off);
    }

    /// Start every counter again (kprof's `startclr`, kgmon's `reset`,
    /// prof's `end`, prf's table load). A running session counts as one
    /// session from now on.
    pub fn reset(&self) {
        let mut c = lock(&self.clock);
        let running = c.since.is_some();
        for a in [
            &self.samples,
            &self.lost,
            &self.throttled,
            &self.unwind_ok,
            &self.symbol_misses,
        ]
        .into_iter()
        .chain(&self.unwind_failed)
        {
            a.store(0, Relaxed);
        }
        self.sessions.store(u64::from(running), Relaxed);
        self.cpu_ns.store(0, Relaxed);
        c.past = Duration::ZERO;
        if running {
            c.since = Some(Instant::now());
        }
    }

    /// Set the state shown (a device whose state is not its session's:
    /// kgmon's `error`, kprof's in-kernel counter).
    pub fn set_state(&self, state: State) {
        self.state.store(state as u8, Relaxed);
    }

    /// Set the rate the next session will ask for, before it starts.
    pub fn set_rate_asked(&self, hz: u32) {
        self.rate_asked.store(u64::from(hz), Relaxed);
    }

    /// The CPU time the sampled tasks (a process tree) have spent so far,
    /// by mode: `rate_achieved` is then samples per second of the time in
    /// the modes the session samples, instead of per second of sampling.
    pub fn set_cpu_time(&self, user: Duration, system: Duration) {
        let modes = self.modes.load(Relaxed);
        let mut t = Duration::ZERO;
        if modes & MODE_USER != 0 {
            t += user;
        }
        if modes & MODE_KERNEL != 0 {
            t += system;
        }
        self.cpu_ns.store(t.as_nanos() as u64, Relaxed);
    }

    /// Set the bytes the device's tables take.
    pub fn set_memory(&self, bytes: u64) {
        self.memory_bytes.store(bytes, Relaxed);
    }

    /// One stack walked to its root.
    pub fn unwind_ok(&self) {
        self.unwind_ok.fetch_add(1, Relaxed);
    }

    /// One stack that was not.
    pub fn unwind_failed(&self, why: UnwindFailure) {
        self.unwind_failed[why.index()].fetch_add(1, Relaxed);
    }

    /// Publish an unwinder's own running totals (`ok`, and the failures in
    /// [`UnwindFailure::ALL`]'s order) in place of counting here.
    pub fn set_unwind(&self, ok: u64, failed: [u64; 3]) {
        self.unwind_ok.store(ok, Relaxed);
        for (a, v) in self.unwind_failed.iter().zip(failed) {
            a.store(v, Relaxed);
        }
    }

    /// One sample the device could not place.
    pub fn symbol_miss(&self) {
        self.symbol_misses.fetch_add(1, Relaxed);
    }

    /// The numbers now.
    pub fn snapshot(&self) -> HealthSnapshot {
        let uptime = lock(&self.clock).now();
        let samples = self.samples.load(Relaxed);
        let cpus = self.cpus.load(Relaxed).max(1);
        let ms = uptime.as_millis() as u64;
        let cpu_ns = self.cpu_ns.load(Relaxed);
        let rate_achieved = if cpu_ns > 0 {
            (u128::from(samples) * 1_000_000_000 / u128::from(cpu_ns)) as u64
        } else if ms == 0 {
            0
        } else {
            (u128::from(samples) * 1000 / u128::from(ms) / u128::from(cpus)) as u64
        };
        HealthSnapshot {
            state: State::from_u8(self.state.load(Relaxed)),
            rate_asked: self.rate_asked.load(Relaxed),
            rate_achieved,
            samples,
            lost: self.lost.load(Relaxed),
            throttled: self.throttled.load(Relaxed),
            unwind_ok: self.unwind_ok.load(Relaxed),
            unwind_failed: std::array::from_fn(|i| self.unwind_failed[i].load(Relaxed)),
            symbol_misses: self.symbol_misses.load(Relaxed),
            sessions: self.sessions.load(Relaxed),
            memory_bytes: self.memory_bytes.load(Relaxed),
            uptime_ms: ms,
        }
    }
}

impl Default for Health {
    fn default() -> Self {
        Health::new()
    }
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot().fmt(f)
    }
}

/// The numbers of a [`Health`] at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthSnapshot {
    /// `state`.
    pub state: State,
    /// `rate_asked`, Hz per CPU.
    pub rate_asked: u64,
    /// `rate_achieved`: Hz of the sampled tasks' CPU time when known, else
    /// Hz per CPU.
    pub rate_achieved: u64,
    /// `samples`.
    pub samples: u64,
    /// `lost`.
    pub lost: u64,
    /// `throttled`.
    pub throttled: u64,
    /// `unwind_ok`.
    pub unwind_ok: u64,
    /// `unwind_failed_<reason>`, in [`UnwindFailure::ALL`]'s order.
    pub unwind_failed: [u64; 3],
    /// `symbol_misses`.
    pub symbol_misses: u64,
    /// `sessions`.
    pub sessions: u64,
    /// `memory_bytes`.
    pub memory_bytes: u64,
    /// `uptime_ms`.
    pub uptime_ms: u64,
}

impl HealthSnapshot {
    /// The live line of a private run's progress (`profdev sample`,
    /// `gmon`, `prof` on a terminal): `NAME: 3.2s, 998 Hz, N samples, L lost`,
    /// throttling and unwind failures when there were any.
    pub fn live_line(&self, name: &str, elapsed: Duration) -> String {
        let h = self;
        let mut s = format!(
            "{name}: {:.1}s, {} Hz, {} samples, {} lost",
            elapsed.as_secs_f64(),
            h.rate_achieved,
            h.samples,
            h.lost
        );
        if h.throttled > 0 {
            let _ = write!(s, ", {} throttled", h.throttled);
        }
        if h.unwind_ok + h.unwind_failures() > 0 {
            let _ = write!(s, ", {} unwind failures", h.unwind_failures());
        }
        s
    }

    /// The totals line: `NAME: totals: N samples, R Hz (asked A), L lost, T
    /// throttled`, and the unwinding when stacks were walked.
    pub fn totals_line(&self, name: &str) -> String {
        let h = self;
        let mut s = format!(
            "{name}: totals: {} samples, {} Hz (asked {}), {} lost, {} throttled",
            h.samples, h.rate_achieved, h.rate_asked, h.lost, h.throttled
        );
        if h.unwind_ok + h.unwind_failures() > 0 {
            let reasons: Vec<String> = UnwindFailure::ALL
                .iter()
                .zip(h.unwind_failed)
                .map(|(why, n)| format!("{} {n}", why.key()))
                .collect();
            let _ = write!(
                s,
                ", {} stacks unwound, {} unwind failures ({})",
                h.unwind_ok,
                h.unwind_failures(),
                reasons.join(", ")
            );
        }
        s
    }

    /// Every unwind failure, whatever the reason.
    pub fn unwind_failures(&self) -> u64 {
        self.unwind_failed.iter().sum()
    }

    /// `(key, value)` for every key, in the file's order.
    pub fn pairs(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = vec![("state".into(), self.state.word().into())];
        let mut n = |k: &str, x: u64| v.push((k.to_string(), x.to_string()));
        n("rate_asked", self.rate_asked);
        n("rate_achieved", self.rate_achieved);
        n("samples", self.samples);
        n("lost", self.lost);
        n("throttled", self.throttled);
        n("unwind_ok", self.unwind_ok);
        for (why, x) in UnwindFailure::ALL.iter().zip(self.unwind_failed) {
            n(&format!("unwind_failed_{}", why.key()), x);
        }
        n("symbol_misses", self.symbol_misses);
        n("sessions", self.sessions);
        n("memory_bytes", self.memory_bytes);
        n("uptime_ms", self.uptime_ms);
        v
    }

    /// The `stat/NAME` text: one `name value` line per key.
    pub fn text(&self) -> String {
        self.pairs()
            .into_iter()
            .map(|(k, v)| format!("{k} {v}\n"))
            .collect()
    }
}

/// The online CPUs' count, from /sys/devices/system/cpu/online (`0-3,6`),
/// else the CPUs this process may run on.
fn online_cpus() -> u64 {
    let parsed = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| count_cpu_list(s.trim()));
    parsed.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
}

/// The number of CPUs in a kernel CPU list such as `0-3,6`.
fn count_cpu_list(s: &str) -> Option<u64> {
    let mut n = 0u64;
    for part in s.split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
                b.checked_sub(a)? + 1
            }
            None => {
                part.parse::<u64>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_core::Sample;

    fn sample() -> Record {
        Record::Sample(Sample::default())
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(count_cpu_list("0-3,6"), Some(5));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list(""), None);
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("x"), None);
    }

    #[test]
    fn counts_sessions_and_resets() {
        let h = Health::new();
        let s = h.snapshot();
        assert_eq!(
            (s.state, s.samples, s.sessions, s.uptime_ms),
            (State::Off, 0, 0, 0)
        );
        let mut config = SessionConfig::system(250);
        config.target = Target::Process {
            pid: 1,
            inherit: true,
        };
        h.started(&config);
        h.count(&[
            sample(),
            sample(),
            Record::Throttle {
                cpu: 0,
                throttled: true,
                time: 0,
            },
            Record::Throttle {
                cpu: 0,
                throttled: false,
                time: 0,
            },
            Record::Lost {
                cpu: 1,
                count: 5,
                time: 0,
            },
        ]);
        h.unwind_ok();
        h.unwind_failed(UnwindFailure::NoStack);
        h.unwind_failed(UnwindFailure::Unresolved);
        h.symbol_miss();
        h.set_memory(4096);
        let s = h.snapshot();
        assert_eq!(s.state, State::On);
        assert_eq!(s.rate_asked, 250);
        assert_eq!((s.samples, s.lost, s.throttled), (2, 5, 1));
        assert_eq!((s.unwind_ok, s.unwind_failed), (1, [1, 0, 1]));
        assert_eq!(s.unwind_failures(), 2);
        assert_eq!((s.symbol_misses, s.sessions, s.memory_bytes), (1, 1, 4096));
        h.stopped();
        assert_eq!(h.snapshot().state, State::Off);
        // A session whose source ended: timed to its last batch.
        lock(&h.clock).past = Duration::ZERO;
        h.started(&config);
        h.count(&[sample()]);
        let last = h.last_batch.load(Relaxed);
        lock(&h.clock).since =
            Some(h.epoch + Duration::from_nanos(last) - Duration::from_millis(40));
        h.stopped_after_end();
        assert_eq!(h.snapshot().uptime_ms, 40);
        let frozen = h.snapshot().uptime_ms;
        assert_eq!(h.snapshot().uptime_ms, frozen, "no time passes while off");
        h.started(&config);
        assert_eq!(h.snapshot().sessions, 3);
        h.reset();
        let s = h.snapshot();
        assert_eq!((s.samples, s.lost, s.throttled, s.unwind_ok), (0, 0, 0, 0));
        assert_eq!((s.unwind_failed, s.symbol_misses), ([0; 3], 0));
        assert_eq!(s.sessions, 1, "the running session");
        assert_eq!(s.memory_bytes, 4096, "a gauge, not a counter");
        h.stopped();
        h.reset();
        assert_eq!(h.snapshot().sessions, 0);
        assert_eq!(h.snapshot().uptime_ms, 0);
    }

    #[test]
    fn every_key_once_in_order() {
        let text = Health::new().snapshot().text();
        let keys: Vec<&str> = text.lines().map(|l| l.split_once(' ').unwrap().0).collect();
        assert_eq!(
            keys,
            [
                "state",
                "rate_asked",
                "rate_achieved",
                "samples",
                "lost",
                "throttled",
                "unwind_ok",
                "unwind_failed_no_stack",
                "unwind_failed_truncated",
                "unwind_failed_unresolved",
                "symbol_misses",
                "sessions",
                "memory_bytes",
                "uptime_ms"
            ]
        );
        assert!(text.starts_with("state off\n"));
    }

    #[test]
    fn rate_is_per_cpu_per_second_of_sampling() {
        let h = Health::new();
        h.cpus.store(2, Relaxed);
        h.samples.store(4000, Relaxed);
        lock(&h.clock).past = Duration::from_secs(2);
        assert_eq!(h.snapshot().rate_achieved, 1000);
    }

    #[test]
    fn rate_of_a_process_tree_is_per_second_of_its_cpu_time() {
        // Two threads busy for 1 s of wall time: 2000 samples of 2 s of
        // user time at 1000 Hz, whatever the wall clock or the CPUs say.
        let h = Health::new();
        h.started(&crate::prof::session_config(1));
        h.samples.store(2000, Relaxed);
        lock(&h.clock).past = Duration::from_secs(1);
        h.set_cpu_time(Duration::from_secs(2), Duration::from_secs(5));
        assert_eq!(h.snapshot().rate_achieved, 1000, "user time only");
        // A session of both modes counts both.
        let mut both = SessionConfig::system(1000);
        both.target = Target::Process {
            pid: 1,
            inherit: true,
        };
        h.started(&both);
        h.set_cpu_time(Duration::from_millis(1500), Duration::from_millis(500));
        assert_eq!(h.snapshot().rate_achieved, 1000);
        h.reset();
        h.samples.store(10, Relaxed);
        assert_ne!(h.snapshot().rate_achieved, 10_000_000, "reset forgets it");
    }
}
