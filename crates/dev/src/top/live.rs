//! `profdev top` running: the sampling thread and the display side's
//! [`Live`], which names what the thread sends and counts it into the
//! [`Window`]. The command keeps its arguments, its screen and its batch
//! loop; it opens the session ([`session`]) and hands the source here.
//!
//! The sampling thread only reads the rings, keeps a [`Tasks`] table and
//! (with `-g`) unwinds; it places each frame in its object (the mapping's
//! [`Object`](profdev_symbolize::Object) and file offset) and names
//! nothing. Naming happens on the display side through the
//! [`Symbolizer`], once per kernel pc and per (object, offset).

use super::{Frame, Snapshot, Symbolizer, View, Window};
use crate::health::{Health, HealthSnapshot};
use profdev_core::waits::Waits;
use profdev_core::{
    CpuMode, ProcessVa, Record, Sample, SampleSource, SessionConfig, SourceError, Target,
};
use profdev_symbolize::unwind::UserUnwinder;
use profdev_symbolize::{KernelSymbols, Objects, Tasks};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// The factor every count is multiplied by at each refresh (perf top's).
pub const DECAY: f64 = 7.0 / 8.0;

/// Bytes of user stack copied with each sample under `-g`.
pub const STACK_BYTES: u32 = 8192;

/// The kernel's callchain markers (`PERF_CONTEXT_*`) are above this.
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

/// The session top samples with: every CPU at `frequency` Hz, kernel and
/// user mode, tasks tracked; with `callgraph`, callchains and a copy of
/// the user stack.
pub fn session(frequency: u32, callgraph: bool) -> SessionConfig {
    SessionConfig {
        target: Target::System,
        frequency_hz: frequency,
        kernel: true,
        user: true,
        callchain: callgraph,
        user_stack_bytes: if callgraph { STACK_BYTES } else { 0 },
        track_tasks: true,
        off_cpu: false,
    }
}

/// The session of top's wall view (`--wall`): [`session`] with stacks,
/// and every switch of every thread, so that time off the CPU is counted
/// beside the samples.
pub fn wall_session(frequency: u32) -> SessionConfig {
    SessionConfig {
        off_cpu: true,
        ..session(frequency, true)
    }
}

/// Is `pid` a running process (a thread group leader)? One sentence if not.
pub fn check_process(pid: u32) -> Result<(), String> {
    let status = match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(s) if pid != 0 => s,
        _ => {
            return Err(format!(
                "process {pid} does not exist; give the pid of a running process, or -a"
            ))
        }
    };
    let tgid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|t| t.trim().parse::<u32>().ok());
    match tgid {
        Some(tgid) if tgid != pid => Err(format!(
            "{pid} is a thread of process {tgid}: give -p {tgid} (its threads are shown together)"
        )),
        _ => Ok(()),
    }
}

/// One sample, as the sampling thread hands it over: placed, not named.
struct Event {
    pid: u32,
    comm: Arc<str>,
    frames: Vec<Frame>,
    /// In sampling periods: 1 for a sample, an interval off the CPU its
    /// length over the period.
    weight: f64,
}

/// What the sampling thread sends: samples (with when it read them from
/// the rings, as the health counts them), or why it stopped.
enum Batch {
    Events(Instant, Vec<Event>),
    Failed(String),
}

/// When the sampling thread last read the rings, once that read's samples
/// were sent (None before its first read). See [`Live::catch_up`].
#[derive(Default)]
struct Handed(std::sync::Mutex<Option<Instant>>);

impl Handed {
    fn set(&self, read_at: Instant) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(read_at);
    }

    /// Has a read after `t` been handed over (so every one before it)?
    fn past(&self, t: Instant) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|r| r > t)
    }
}

/// How long [`Live::catch_up`] waits for the sampling thread at most.
const CATCH_UP: Duration = Duration::from_secs(10);

/// The sampling thread: read the rings, keep the tasks, place each
/// sample's frames in their objects, hand them over. No naming here.
fn sample(
    mut source: Box<dyn SampleSource>,
    health: Arc<Health>,
    stop: Arc<AtomicBool>,
    filter: Option<u32>,
    config: SessionConfig,
    (tx, handed): (mpsc::Sender<Batch>, Arc<Handed>),
) {
    let (callgraph, wall, period) = (config.callchain, config.off_cpu, config.period_ns() as f64);
    let mut tasks = Tasks::with_objects(Objects::new());
    let mut unwinder = UserUnwinder::new();
    let mut comms: HashMap<u32, Arc<str>> = HashMap::new();
    // With --wall, the threads off the CPU: each its process and stack.
    let mut waits: Waits<Event> = Waits::new();
    let mut records = Vec::new();
    let mut user = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let r = source.read(&mut records, Duration::from_millis(100));
        let read_at = Instant::now();
        health.count(&records);
        let mut events = Vec::new();
        for rec in records.drain(..) {
            tasks.observe(&rec);
            if let Some(w) = waits.observe(&rec) {
                events.push(Event {
                    weight: (w.until - w.since) as f64 / period,
                    ..w.what
                });
            }
            match &rec {
                Record::Comm { pid, .. } | Record::Exit { pid, .. } => {
                    comms.remove(pid);
                }
                // The wall view is of threads: the idle task's time is
                // no thread's.
                Record::Sample(s)
                    if filter.is_none_or(|p| p == s.pid)
                        && (s.switch_out || !(wall && s.is_idle())) =>
                {
                    let comm = comms
                        .entry(s.pid)
                        .or_insert_with(|| Arc::from(comm_of(&tasks, s.pid)))
                        .clone();
                    let frames = place(&tasks, &mut unwinder, s, callgraph, &mut user);
                    let event = Event {
                        pid: s.pid,
                        comm,
                        frames,
                        weight: 1.0,
                    };
                    if s.switch_out {
                        waits.left(s, || event);
                    } else {
                        events.push(event);
                    }
                }
                _ => {}
            }
        }
        if callgraph {
            let u = unwinder.stats();
            health.set_unwind(u.samples - u.truncated, [0, u.truncated, 0]);
        }
        if !events.is_empty() && tx.send(Batch::Events(read_at, events)).is_err() {
            return;
        }
        handed.set(read_at);
        match r {
            Ok(()) => {}
            Err(SourceError::Ended) => return,
            Err(e) => {
                let _ = tx.send(Batch::Failed(e.to_string()));
                return;
            }
        }
    }
}

fn comm_of(tasks: &Tasks, pid: u32) -> String {
    match tasks.comm(pid) {
        Some(c) => c.to_string(),
        None if pid == 0 => "swapper".into(),
        None => format!("[{pid}]"),
    }
}

/// A sample's frames, leaf first: the sampled pc alone, or with `-g` the
/// kernel's callchain and the unwound user stack. Return addresses are
/// looked up one byte back, in their call instruction.
fn place(
    tasks: &Tasks,
    unwinder: &mut UserUnwinder,
    s: &Sample,
    callgraph: bool,
    user: &mut Vec<u64>,
) -> Vec<Frame> {
    let user_frame = |va: u64| match tasks.lookup(s.pid, ProcessVa(va)) {
        Some(m) => match &m.object {
            Some(object) => Frame::User {
                object: object.clone(),
                offset: m.file_offset(ProcessVa(va)),
            },
            None => Frame::Anonymous,
        },
        None => Frame::Anonymous,
    };
    if !callgraph {
        return vec![match s.mode {
            CpuMode::User => user_frame(s.ip),
            _ => Frame::Kernel(s.ip),
        }];
    }
    let mut frames = Vec::new();
    if s.mode != CpuMode::User {
        let chain = s
            .kernel_chain
            .iter()
            .copied()
            .filter(|&a| a < PERF_CONTEXT_MAX);
        for (i, pc) in chain.enumerate() {
            frames.push(Frame::Kernel(if i == 0 { pc } else { pc.wrapping_sub(1) }));
        }
        if frames.is_empty() {
            frames.push(Frame::Kernel(s.ip));
        }
    }
    if s.pid != 0 && (s.mode == CpuMode::User || s.user_regs.is_some() || !s.user_chain.is_empty())
    {
        unwinder.unwind_into(tasks, s, user);
        for (i, &va) in user.iter().enumerate() {
            frames.push(user_frame(if i == 0 { va } else { va.wrapping_sub(1) }));
        }
    }
    if frames.is_empty() {
        frames.push(user_frame(s.ip));
    }
    frames
}

/// Why [`Live::wait`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// The deadline came.
    Deadline,
    /// The sampling thread stopped (see [`Live::finish`]).
    Stopped,
    /// A signal was caught (its number).
    Signal(usize),
}

/// The display side: what arrives from the sampler, named and counted.
pub struct Live {
    rx: mpsc::Receiver<Batch>,
    symbolizer: Symbolizer,
    window: Window,
    health: Arc<Health>,
    failed: Option<String>,
    stop: Arc<AtomicBool>,
    sampler: Option<std::thread::JoinHandle<()>>,
    handed: Arc<Handed>,
    catch_up_limit: Duration,
}

impl Live {
    /// Start the sampling thread on `source`, opened with `config`
    /// ([`session`]); keep the samples of process `filter` alone, if
    /// given. `kernel` names kernel pcs (none: `[unknown]`).
    pub fn start(
        source: Box<dyn SampleSource>,
        config: &SessionConfig,
        kernel: Option<KernelSymbols>,
        filter: Option<u32>,
    ) -> Live {
        let health = Arc::new(Health::new());
        health.started(config);
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let handed = Arc::new(Handed::default());
        let sampler = {
            let (health, stop, config) = (health.clone(), stop.clone(), config.clone());
            let to = (tx, handed.clone());
            std::thread::spawn(move || sample(source, health, stop, filter, config, to))
        };
        Live {
            rx,
            symbolizer: Symbolizer::new(kernel),
            window: Window::new(),
            health,
            failed: None,
            stop,
            sampler: Some(sampler),
            handed,
            catch_up_limit: CATCH_UP,
        }
    }

    /// Take in what the sampler sent until `deadline` (or until it
    /// stopped); false when it stopped.
    pub fn drain_until(&mut self, deadline: Instant) -> bool {
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(wait) {
                Ok(batch) => self.take(batch),
                Err(mpsc::RecvTimeoutError::Timeout) => return true,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // It stops only when told to, or after sending why.
                    self.failed
                        .get_or_insert_with(|| "the sampling thread ended unexpectedly".into());
                    return false;
                }
            }
            if self.failed.is_some() {
                return false;
            }
            if Instant::now() >= deadline {
                return true;
            }
        }
    }

    /// Take in every batch the sampler read from the rings by `deadline`
    /// (and the first read after it, then stop: bounded however fast
    /// samples come), waiting for those it is still placing until it has
    /// handed over a read after the deadline (at most [`CATCH_UP`]): a
    /// snapshot then holds the samples its health line counts, however far
    /// either side fell behind (a loaded machine, a large object named the
    /// first time). False when the sampler stopped.
    pub fn catch_up(&mut self, deadline: Instant) -> bool {
        let limit = Instant::now() + self.catch_up_limit;
        loop {
            let handed = self.handed.past(deadline) || Instant::now() >= limit;
            // Err(true): the sampler is gone; Err(false): nothing yet.
            let next = if handed {
                self.rx
                    .try_recv()
                    .map_err(|e| e == mpsc::TryRecvError::Disconnected)
            } else {
                self.rx
                    .recv_timeout(Duration::from_millis(10))
                    .map_err(|e| e == mpsc::RecvTimeoutError::Disconnected)
            };
            match next {
                Ok(Batch::Events(at, events)) => {
                    self.take(Batch::Events(at, events));
                    if at > deadline {
                        return true;
                    }
                }
                Ok(failed) => {
                    self.take(failed);
                    return false;
                }
                Err(false) if handed => return true,
                Err(false) => {}
                Err(true) => {
                    self.failed
                        .get_or_insert_with(|| "the sampling thread ended unexpectedly".into());
                    return false;
                }
            }
        }
    }

    /// Take in what the sampler sends until `deadline`, waking at least
    /// every 100 ms to see whether `signal` was set (non-zero); then
    /// everything it read by the deadline ([`Live::catch_up`]).
    pub fn wait(&mut self, deadline: Instant, signal: &AtomicUsize) -> Wake {
        while Instant::now() < deadline {
            let step = deadline.min(Instant::now() + Duration::from_millis(100));
            if !self.drain_until(step) {
                return Wake::Stopped;
            }
            let sig = signal.load(Ordering::Relaxed);
            if sig != 0 {
                return Wake::Signal(sig);
            }
        }
        if !self.catch_up(deadline) {
            return Wake::Stopped;
        }
        Wake::Deadline
    }

    fn take(&mut self, batch: Batch) {
        let events = match batch {
            Batch::Events(_, e) => e,
            Batch::Failed(why) => {
                self.failed = Some(why);
                return;
            }
        };
        let mut ids = Vec::new();
        for e in events {
            ids.clear();
            ids.extend(e.frames.iter().map(|f| self.symbolizer.resolve(f)));
            // A sample whose own function has no name: a symbol miss.
            if ids
                .first()
                .is_some_and(|&leaf| self.symbolizer.is_unknown(leaf))
            {
                self.health.symbol_miss();
            }
            self.window.add(e.pid, &e.comm, &ids, e.weight);
        }
    }

    /// The window's rows in `view`, named.
    pub fn snapshot(&self, view: &View) -> Snapshot {
        self.window.snapshot(view, |id| {
            let f = self.symbolizer.func(id);
            (f.name.clone(), f.module.clone())
        })
    }

    /// Fade every count by [`DECAY`].
    pub fn decay(&mut self) {
        self.window.decay(DECAY);
    }

    /// The health counts so far.
    pub fn health(&self) -> HealthSnapshot {
        self.health.snapshot()
    }

    /// Did the sampling thread stop?
    pub fn failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Stop the sampling thread and wait for it; why it stopped on its
    /// own, if it did.
    pub fn finish(mut self) -> Option<String> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.sampler.take() {
            let _ = t.join();
        }
        self.failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ReplayFactory;
    use profdev_core::SourceFactory as _;

    fn replay(records: Vec<Record>) -> Box<dyn SampleSource> {
        ReplayFactory::new(records)
            .open(&session(1000, false))
            .unwrap()
    }

    fn sample_of(pid: u32, ip: u64, mode: CpuMode) -> Record {
        Record::Sample(Sample {
            pid,
            tid: pid,
            ip,
            mode,
            period: 1,
            ..Sample::default()
        })
    }

    /// Replayed records go through the sampling thread and are named and
    /// counted on the display side: kernel pcs by the kernel's symbols,
    /// user pcs in no mapping as `[anon]`, the idle task as `swapper`, a
    /// process's name from its comm; `-p` keeps one process.
    #[test]
    fn replayed_samples_are_placed_named_and_counted() {
        let kernel = KernelSymbols::from_symbols(vec![profdev_symbolize::KSym {
            addr: 0xffff_ffff_8100_0000,
            kind: 'T',
            name: "idle_loop".into(),
            module: None,
        }]);
        let records = vec![
            Record::Comm {
                pid: 7,
                tid: 7,
                comm: "spin".into(),
                exec: true,
                time: 0,
            },
            sample_of(7, 0x40_1000, CpuMode::User),
            sample_of(7, 0x40_1000, CpuMode::User),
            sample_of(0, 0xffff_ffff_8100_0010, CpuMode::Kernel),
            sample_of(9, 0x40_2000, CpuMode::User),
        ];
        let config = session(1000, false);
        let mut live = Live::start(replay(records.clone()), &config, Some(kernel), None);
        // The replay ends after its records: the thread stops on its own.
        while live.drain_until(Instant::now() + Duration::from_secs(60)) {}
        let snap = live.snapshot(&View {
            sort: super::super::Sort::SelfShare,
            zoom: None,
        });
        let rows: Vec<(u32, &str, &str, &str, f64)> = snap
            .rows
            .iter()
            .map(|r| {
                (
                    r.pid,
                    r.comm.as_str(),
                    r.module.as_str(),
                    r.function.as_str(),
                    r.self_share,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                (7, "spin", "[anon]", "[unknown]", 0.5),
                // A tie goes by function name.
                (9, "[9]", "[anon]", "[unknown]", 0.25),
                (0, "swapper", "[kernel]", "idle_loop", 0.25),
            ]
        );
        assert_eq!(live.health().symbol_misses, 3);
        assert_eq!(
            live.finish(),
            Some("the sampling thread ended unexpectedly".into())
        );

        let mut one = Live::start(replay(records), &config, None, Some(7));
        while one.drain_until(Instant::now() + Duration::from_secs(60)) {}
        let snap = one.snapshot(&View {
            sort: super::super::Sort::SelfShare,
            zoom: None,
        });
        assert_eq!(snap.rows.len(), 1);
        assert_eq!(snap.rows[0].pid, 7);
    }

    /// A batch snapshot's catch-up takes every batch read by its deadline
    /// and the first read after it, then stops (the rest stays for the
    /// next snapshot); it waits for a read the sampler has not handed over
    /// yet; a stopped sampler ends it.
    #[test]
    fn catching_up_takes_what_was_read_by_the_deadline_and_one_more() {
        let (tx, rx) = mpsc::channel();
        let mut live = Live {
            rx,
            symbolizer: Symbolizer::new(None),
            window: Window::new(),
            health: Arc::new(Health::new()),
            failed: None,
            stop: Arc::new(AtomicBool::new(false)),
            sampler: None,
            handed: Arc::new(Handed::default()),
            catch_up_limit: Duration::from_secs(600),
        };
        let t0 = Instant::now();
        let one = |pid: u32| Event {
            pid,
            comm: Arc::from("w"),
            frames: vec![Frame::Anonymous],
            weight: 1.0,
        };
        // Read at t0, t0 + 1 s, t0 + 2 s and t0 + 3 s: two of pid 1, one
        // each of pids 2, 3 and 4.
        for (at, pids) in [(0, vec![1, 1]), (1, vec![2]), (2, vec![3]), (3, vec![4])] {
            let events = pids.into_iter().map(one).collect();
            tx.send(Batch::Events(t0 + Duration::from_secs(at), events))
                .unwrap();
        }
        live.handed.set(t0 + Duration::from_secs(3));
        let pids = |live: &Live| {
            let mut p: Vec<u32> = live
                .snapshot(&View {
                    sort: super::super::Sort::SelfShare,
                    zoom: None,
                })
                .rows
                .iter()
                .map(|r| r.pid)
                .collect();
            p.sort();
            p
        };
        assert!(live.catch_up(t0 + Duration::from_millis(500)));
        assert_eq!(pids(&live), [1, 2]);
        assert!(live.catch_up(t0 + Duration::from_secs(2)));
        assert_eq!(pids(&live), [1, 2, 3, 4]);
        // A read by the deadline not handed over yet: waited for, until
        // the sampler has handed over one after it.
        let handed = live.handed.clone();
        let late = std::thread::spawn(move || {
            tx.send(Batch::Events(t0 + Duration::from_secs(8), vec![one(5)]))
                .unwrap();
            handed.set(t0 + Duration::from_secs(10));
            tx
        });
        assert!(live.catch_up(t0 + Duration::from_secs(9)));
        assert_eq!(pids(&live), [1, 2, 3, 4, 5]);
        let tx = late.join().unwrap();
        // Nothing waiting, all handed over: back at once.
        assert!(live.catch_up(t0 + Duration::from_secs(9)));
        tx.send(Batch::Failed("gone".into())).unwrap();
        assert!(!live.catch_up(t0));
        assert_eq!(live.failed.as_deref(), Some("gone"));
    }

    /// The wall view counts a thread's time off the CPU, from its switch
    /// out to its switch back, in sampling periods beside the samples,
    /// and leaves the idle task out; a switch's sample is no clock tick
    /// in the health line.
    #[test]
    fn the_wall_view_weighs_time_off_the_cpu_beside_the_samples() {
        let out = Record::Sample(Sample {
            pid: 8,
            tid: 8,
            ip: 0x40_3000,
            mode: CpuMode::User,
            time: 1_000_000,
            switch_out: true,
            ..Sample::default()
        });
        let back = Record::Switch {
            pid: 8,
            tid: 8,
            cpu: 0,
            out: false,
            preempt: false,
            time: 4_000_000,
        };
        let records = vec![
            sample_of(7, 0x40_1000, CpuMode::User),
            out,
            sample_of(0, 0xffff_ffff_8100_0010, CpuMode::Kernel),
            back,
        ];
        // 1000 Hz: a period is 1 ms, the wait 3 ms.
        let config = wall_session(1000);
        assert!(config.off_cpu && config.callchain);
        let mut live = Live::start(replay(records), &config, None, None);
        while live.drain_until(Instant::now() + Duration::from_secs(60)) {}
        let snap = live.snapshot(&View {
            sort: super::super::Sort::SelfShare,
            zoom: None,
        });
        let rows: Vec<(u32, f64)> = snap.rows.iter().map(|r| (r.pid, r.self_share)).collect();
        assert_eq!(rows, vec![(8, 0.75), (7, 0.25)]);
        assert_eq!(snap.weight, 4.0);
        assert_eq!(live.health().samples, 2);
    }

    /// With -g a kernel sample's chain (markers dropped, callers one byte
    /// back) comes first, then the user stack; the idle task has none.
    #[test]
    fn a_callchain_is_placed_leaf_first() {
        let mut tasks = Tasks::with_objects(Objects::new());
        let mut unwinder = UserUnwinder::new();
        let s = Sample {
            pid: 0,
            ip: 0x1000,
            mode: CpuMode::Kernel,
            kernel_chain: vec![PERF_CONTEXT_MAX + 1, 0x1000, 0x2005],
            ..Sample::default()
        };
        tasks.observe(&Record::Sample(s.clone()));
        let frames = place(&tasks, &mut unwinder, &s, true, &mut Vec::new());
        let pcs: Vec<u64> = frames
            .iter()
            .map(|f| match f {
                Frame::Kernel(pc) => *pc,
                _ => panic!("{f:?}"),
            })
            .collect();
        assert_eq!(pcs, vec![0x1000, 0x2004]);
        let bare = Sample {
            kernel_chain: vec![PERF_CONTEXT_MAX + 1],
            ..s
        };
        let frames = place(&tasks, &mut unwinder, &bare, true, &mut Vec::new());
        assert!(matches!(frames[..], [Frame::Kernel(0x1000)]));
    }

    #[test]
    fn a_pid_must_be_a_running_process() {
        let me = std::process::id();
        assert!(check_process(me).is_ok());
        // A thread of this process (alive until told) is not a process.
        let (tx, rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // /proc/thread-self is PID/task/TID.
            let me = std::fs::read_link("/proc/thread-self").unwrap();
            let tid = me.file_name().unwrap().to_str().unwrap().parse::<u32>();
            tx.send(tid.unwrap()).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        let e = check_process(tid).unwrap_err();
        drop(done_tx);
        t.join().unwrap();
        assert_eq!(
            e,
            format!(
                "{tid} is a thread of process {me}: give -p {me} (its threads are shown together)"
            )
        );
        assert!(check_process(0)
            .unwrap_err()
            .starts_with("process 0 does not exist"));
    }
}
