//! The live source: one perf event and one ring per online CPU.

use crate::decode::{decode_record, RecordLayout};
use crate::merge::{self, Merge};
use crate::procfs::{online_cpus, perf_event_paranoid, synthesize_tasks};
use crate::ring::MappedRing;
use crate::sys::{self, flag, PerfEventAttr};
use profdev_core::{
    MappingHook, Record, SampleSource, SessionConfig, SourceError, SourceFactory, SourceStats,
    Target,
};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

/// Largest user-stack copy a sample can carry: a record's size is a u16.
pub const MAX_USER_STACK_BYTES: u32 = 65528 - 512;

/// The ring size, in data pages per CPU (a power of two), that `config`
/// gets unless the factory is told otherwise.
///
/// Sized so that a reader calling [`SampleSource::read`] every 100 ms keeps
/// up with twice the worst case: every sample carrying a full-depth
/// callchain (127 frames, the default `kernel.perf_event_max_stack`) and
/// the whole user-stack copy, plus 16 KiB of task records. Clamped to
/// 8..=2048 pages. At 1000 Hz: 8 pages (32 KiB) without callchains, 64
/// pages (256 KiB) with callchains, 512 pages (2 MiB) with an 8 KiB stack
/// copy.
pub fn auto_ring_pages(config: &SessionConfig) -> usize {
    let mut per_sample: u64 = 8 + 5 * 8; // header, ip, pid/tid, time, cpu, period
    if config.callchain {
        per_sample += 8 + 8 * (127 + 4); // nr, frames, context markers
    }
    if config.user_stack_bytes > 0 {
        per_sample += 8 + 3 * 8 + 8 + u64::from(config.user_stack_bytes) + 8;
    }
    let per_read = per_sample * u64::from(config.frequency_hz.max(1)) / 10;
    let bytes = 2 * per_read + 16 * 1024;
    let page = sys::page_size() as u64;
    let pages = bytes.div_ceil(page).next_power_of_two();
    pages.clamp(8, 2048) as usize
}

/// Opens [`PerfSource`]s: the live implementation of [`SourceFactory`].
///
/// ```no_run
/// use profdev_core::{SessionConfig, SourceFactory};
/// use profdev_sample::PerfFactory;
/// use std::time::Duration;
///
/// let mut source = PerfFactory::new().open(&SessionConfig::system(1000))?;
/// let mut records = Vec::new();
/// source.read(&mut records, Duration::from_millis(100))?;
/// # Ok::<(), profdev_core::SourceError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct PerfFactory {
    ring_pages_log2: Option<u32>,
    pub(crate) mappings: Option<MappingHook>,
}

impl PerfFactory {
    /// A factory with the automatic ring size ([`auto_ring_pages`]).
    pub fn new() -> Self {
        PerfFactory::default()
    }

    /// Use 2^`log2` data pages per CPU (at most 2^16) instead of the
    /// automatic size.
    pub fn ring_pages_log2(mut self, log2: u32) -> Self {
        self.ring_pages_log2 = Some(log2.min(16));
        self
    }

    /// Hand every MMAP record to `hook` the moment a session of this
    /// factory decodes it (the synthesized ones of running tasks too),
    /// before the merge holds it back: see [`MappingHook`].
    pub fn with_mapping_hook(mut self, hook: MappingHook) -> Self {
        self.mappings = Some(hook);
        self
    }

    /// Data pages per CPU a session with `config` gets.
    pub fn ring_pages(&self, config: &SessionConfig) -> usize {
        match self.ring_pages_log2 {
            Some(n) => 1 << n,
            None => auto_ring_pages(config),
        }
    }

    /// Open a session, as [`SourceFactory::open`] does, unboxed.
    pub fn open_perf(&self, config: &SessionConfig) -> Result<PerfSource, SourceError> {
        PerfSource::open(
            config,
            self.ring_pages(config),
            Start::Now,
            self.mappings.clone(),
        )
    }
}

impl SourceFactory for PerfFactory {
    fn open(&self, config: &SessionConfig) -> Result<Box<dyn SampleSource>, SourceError> {
        Ok(Box::new(self.open_perf(config)?))
    }
}

/// When the events start counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// Enable them once all are open and mapped; synthesize running tasks.
    Now,
    /// Let the target's next exec enable them (`enable_on_exec`); its
    /// pre-exec image is not worth synthesizing.
    OnExec,
}

struct Event {
    cpu: u32,
    /// The context-switch event of `SessionConfig::off_cpu`: its samples
    /// are taken as a thread leaves the CPU.
    switches: bool,
    ring: MappedRing,
    fd: OwnedFd,
    hung_up: bool,
    /// The ring's head as read at the start of the drain under way.
    head: u64,
    /// The time of the ring's last good record: where a `Lost` for bytes
    /// that could not be decoded goes.
    last_time: u64,
}

/// A running perf_event session: software cpu-clock sampling on every
/// online CPU, read through one mmap ring per CPU.
///
/// Sampling stops when the value is dropped (events disabled, rings
/// unmapped, descriptors closed).
pub struct PerfSource {
    events: Vec<Event>,
    pollfds: Vec<libc::pollfd>,
    layout: RecordLayout,
    /// The layout of the switch events' samples (a shorter stack copy).
    switch_layout: RecordLayout,
    /// Queue 0: synthesized tasks; queue 1 + i: the ring of `events[i]`.
    merge: Merge,
    /// Reads so far: the first does not wait when tasks were synthesized.
    reads: u64,
    /// `CLOCK_MONOTONIC` when the last drain started (before its heads).
    drained_at: u64,
    stats: SourceStats,
    scratch: Vec<u8>,
    ends_on_hangup: bool,
    malformed: u64,
    /// Told of each MMAP record as it is decoded.
    mappings: Option<MappingHook>,
}

impl PerfSource {
    pub(crate) fn open(
        config: &SessionConfig,
        data_pages: usize,
        start: Start,
        mappings: Option<MappingHook>,
    ) -> Result<PerfSource, SourceError> {
        config.validate()?;
        let invalid = |msg: String| SourceError::Io {
            context: msg,
            source: io::Error::from(io::ErrorKind::InvalidInput),
        };
        if !config.kernel && !config.user {
            return Err(invalid(
                "a session that excludes both kernel and user mode takes no samples".into(),
            ));
        }
        if config.user_stack_bytes > MAX_USER_STACK_BYTES {
            return Err(invalid(format!(
                "a user stack copy of {} bytes is more than the {MAX_USER_STACK_BYTES} bytes a perf sample can carry",
                config.user_stack_bytes
            )));
        }
        if config.user_stack_bytes > 0 && sys::USER_REG_BITS.is_none() {
            return Err(invalid(
                "user stack copies need user registers, which profdev only knows on x86_64 and aarch64".into(),
            ));
        }
        let cpus = online_cpus().map_err(|e| SourceError::Io {
            context: "cannot list the online CPUs".into(),
            source: e,
        })?;
        let layout = RecordLayout::for_config(config);
        let attr = attr_for(config, &layout, data_pages, start);
        let pid = match config.target {
            Target::System => -1,
            Target::Process { pid, .. } => i32::try_from(pid)
                .map_err(|_| invalid(format!("process id {pid} is out of range")))?,
        };
        if config.off_cpu && !config.kernel {
            return Err(invalid(
                "off-CPU samples are taken in the kernel's scheduler: a session that excludes kernel mode cannot take them".into(),
            ));
        }
        // A switch's stack copy is at most SWITCH_STACK_BYTES: switches
        // come at up to tens of thousands a second, and a thread blocked
        // in a system call is usually shallow there.
        let switch_config = SessionConfig {
            user_stack_bytes: config.user_stack_bytes.min(SWITCH_STACK_BYTES),
            ..config.clone()
        };
        let switch_layout = RecordLayout::for_config(&switch_config);
        let switches = config.off_cpu.then(|| {
            attr_for_switches(&attr_for(&switch_config, &switch_layout, data_pages, start))
        });
        let mut events = Vec::with_capacity(cpus.len() * (1 + usize::from(config.off_cpu)));
        // Switches come faster than the clock's samples (10,000 a second
        // on a busy server, each with its stack copy): their rings are
        // sized for the highest clock rate.
        let switch_pages = auto_ring_pages(&SessionConfig {
            frequency_hz: SessionConfig::MAX_FREQUENCY_HZ,
            ..switch_config
        })
        .max(data_pages);
        for (attr, is_switches) in
            std::iter::once((&attr, false)).chain(switches.iter().map(|a| (a, true)))
        {
            let data_pages = if is_switches {
                switch_pages
            } else {
                data_pages
            };
            for &cpu in &cpus {
                let fd = sys::perf_event_open(attr, pid, cpu as i32)
                    .map_err(|e| open_error(e, cpu, cpus.len(), config))?;
                let ring =
                    MappedRing::map(&fd, data_pages).map_err(|e| map_error(e, cpu, data_pages))?;
                events.push(Event {
                    cpu,
                    switches: is_switches,
                    ring,
                    fd,
                    hung_up: false,
                    head: 0,
                    last_time: 0,
                });
            }
        }
        if start == Start::Now {
            for ev in &events {
                sys::enable(&ev.fd).map_err(|e| SourceError::Io {
                    context: format!("cannot enable sampling on CPU {}", ev.cpu),
                    source: e,
                })?;
            }
        }
        // Synthesize after enabling, so a task started in between is seen
        // at least once (perhaps twice; consumers keep the latest). They
        // are at time 0: the first read releases them, before anything.
        let mut merge = Merge::new(1 + events.len());
        if config.track_tasks && start == Start::Now {
            let tasks = match config.target {
                Target::System => synthesize_tasks(None),
                Target::Process { pid, .. } => synthesize_tasks(Some(pid)),
            };
            for r in tasks {
                if let Some(hook) = &mappings {
                    hook.reported(&r);
                }
                merge.push(0, r);
            }
        }
        let pollfds = events
            .iter()
            .map(|ev| libc::pollfd {
                fd: ev.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        Ok(PerfSource {
            events,
            pollfds,
            layout,
            switch_layout,
            merge,
            reads: 0,
            drained_at: 0,
            stats: SourceStats::default(),
            scratch: Vec::new(),
            ends_on_hangup: matches!(config.target, Target::Process { .. }),
            malformed: 0,
            mappings,
        })
    }

    /// The CPUs sampled, one event and ring each.
    pub fn cpus(&self) -> Vec<u32> {
        self.events.iter().map(|e| e.cpu).collect()
    }

    /// Bytes in each CPU's ring data area.
    pub fn ring_data_bytes(&self) -> usize {
        self.events.first().map_or(0, |e| e.ring.data_size())
    }

    /// Records or ring states that could not be decoded (each also counted
    /// in `stats().lost` and reported as a [`Record::Lost`] of 1).
    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    /// Drain every ring into the merge: heads are read for all CPUs
    /// first, so the drain is a snapshot of one instant across CPUs (what
    /// the merge's watermark relies on).
    fn drain(&mut self) {
        self.drained_at = sys::monotonic_ns();
        for ev in &mut self.events {
            ev.head = ev.ring.head();
        }
        let (clock_layout, switch_layout) = (self.layout, self.switch_layout);
        let merge = &mut self.merge;
        let malformed = &mut self.malformed;
        let mappings = self.mappings.as_ref();
        for (i, ev) in self.events.iter_mut().enumerate() {
            let (cpu, head, switches) = (ev.cpu, ev.head, ev.switches);
            let layout = if switches {
                switch_layout
            } else {
                clock_layout
            };
            let queue = 1 + i;
            let mut bad = 0u64;
            let mut last_time = ev.last_time;
            let result = ev.ring.consume(head, &mut self.scratch, |bytes| {
                match decode_record(bytes, &layout, cpu) {
                    Ok(Some(mut rec)) => {
                        if let (true, Record::Sample(s)) = (switches, &mut rec) {
                            s.switch_out = true;
                        }
                        last_time = rec.time();
                        // Now, not after the merge's delay: the mapping
                        // process may be gone by then.
                        if let Some(hook) = mappings {
                            hook.reported(&rec);
                        }
                        merge.push(queue, rec);
                    }
                    Ok(None) => {}
                    Err(_) => bad += 1,
                }
            });
            if result.is_err() {
                bad += 1;
            }
            ev.last_time = last_time;
            if bad > 0 {
                *malformed += bad;
                merge.push(
                    queue,
                    Record::Lost {
                        cpu,
                        count: bad,
                        time: last_time,
                    },
                );
            }
        }
    }

    /// Count the records the merge released into `released`: the stats
    /// describe what was delivered.
    fn count(&mut self, released: &[Record]) {
        for rec in released {
            match rec {
                Record::Sample(_) => self.stats.samples += 1,
                Record::Lost { count, .. } => self.stats.lost += count,
                Record::Throttle {
                    throttled: true, ..
                } => self.stats.throttled += 1,
                _ => {}
            }
        }
    }
}

impl SampleSource for PerfSource {
    /// Wait (poll(2)) up to `timeout` for a ring to pass its wakeup mark (a
    /// quarter full) or a target to exit, then drain every ring into the
    /// per-CPU merge ([`crate::merge`]) and append what it releases: every
    /// record no later read can precede, in time order. A record is
    /// delivered by the read that drains it or, at the latest, by the next
    /// one that begins 10 ms or more after its time. A Process session flushes everything once every event has hung
    /// up (the whole task tree exited) and ends (`Err(SourceError::Ended)`)
    /// at the next read that finds nothing more; a System session never
    /// ends by itself ([`SampleSource::flush`] releases the rest).
    fn read(&mut self, out: &mut Vec<Record>, timeout: Duration) -> Result<(), SourceError> {
        let ms = if self.reads == 0 && self.merge.held() > 0 {
            0
        } else {
            i32::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
        };
        self.reads += 1;
        sys::poll(&mut self.pollfds, ms).map_err(|e| SourceError::Io {
            context: "cannot wait for perf events".into(),
            source: e,
        })?;
        for (ev, p) in self.events.iter_mut().zip(&self.pollfds) {
            if p.revents & libc::POLLHUP != 0 {
                ev.hung_up = true;
            }
        }
        self.drain();
        let start = out.len();
        if self.ends_on_hangup && self.events.iter().all(|e| e.hung_up) {
            // Nothing can be written any more: no later read can bring an
            // earlier record.
            if self.merge.flush(out) == 0 {
                return Err(SourceError::Ended);
            }
        } else {
            // perf's rule, capped by our clock (see crate::merge).
            let not_after = self.drained_at.saturating_sub(merge::GUARD_NS);
            self.merge.end_drain(not_after, out);
        }
        self.count(&out[start..]);
        Ok(())
    }

    /// Drain every ring once more and release everything the merge holds.
    fn flush(&mut self, out: &mut Vec<Record>) {
        self.drain();
        let start = out.len();
        self.merge.flush(out);
        self.count(&out[start..]);
    }

    fn stats(&self) -> SourceStats {
        self.stats
    }
}

impl Drop for PerfSource {
    fn drop(&mut self) {
        // Stop every CPU first, then unmap and close (Event's fields drop
        // in order: ring, then fd).
        for ev in &self.events {
            let _ = sys::disable(&ev.fd);
        }
    }
}

/// The perf_event_attr a session asks for.
pub(crate) fn attr_for(
    config: &SessionConfig,
    layout: &RecordLayout,
    data_pages: usize,
    start: Start,
) -> PerfEventAttr {
    let mut flags = flag::DISABLED | flag::SAMPLE_ID_ALL | flag::USE_CLOCKID | flag::WATERMARK;
    if let Target::Process { inherit: true, .. } = config.target {
        flags |= flag::INHERIT;
    }
    if start == Start::OnExec {
        flags |= flag::ENABLE_ON_EXEC;
    }
    if !config.kernel {
        flags |= flag::EXCLUDE_KERNEL;
    }
    if !config.user {
        flags |= flag::EXCLUDE_USER;
    }
    if config.track_tasks {
        flags |= flag::MMAP | flag::MMAP2 | flag::COMM | flag::COMM_EXEC | flag::TASK;
    }
    let data_bytes = data_pages * sys::page_size();
    PerfEventAttr {
        type_: sys::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: sys::PERF_COUNT_SW_CPU_CLOCK,
        sample_period: config.period_ns(),
        sample_type: layout.sample_type,
        flags,
        wakeup_watermark: u32::try_from(data_bytes / 4).unwrap_or(u32::MAX).max(1),
        sample_regs_user: layout.regs_user_mask,
        sample_stack_user: if layout.regs_user_mask != 0 {
            config.user_stack_bytes.next_multiple_of(8)
        } else {
            0
        },
        clockid: libc::CLOCK_MONOTONIC,
        ..PerfEventAttr::default()
    }
}

/// The most user stack a switch's sample copies (`SessionConfig::off_cpu`).
pub const SWITCH_STACK_BYTES: u32 = 8192;

/// The attr of the context-switch event beside the clock's `clock` (same
/// samples, so one decoder reads both rings): a sample at every switch
/// out (`PERF_COUNT_SW_CONTEXT_SWITCHES`, period 1, counted in the
/// scheduler with the leaving task's registers, so its callchain is where
/// it blocked), and a SWITCH record at every switch out and in
/// (`context_switch`). The clock's event tracks the tasks.
pub(crate) fn attr_for_switches(clock: &PerfEventAttr) -> PerfEventAttr {
    let tasks = flag::MMAP | flag::MMAP2 | flag::COMM | flag::COMM_EXEC | flag::TASK;
    // With a stack copy the user stack is unwound from it: the kernel's
    // walk of the user frame pointers would be paid for at every switch.
    let user_chain = if clock.sample_stack_user > 0 {
        flag::EXCLUDE_CALLCHAIN_USER
    } else {
        0
    };
    PerfEventAttr {
        config: sys::PERF_COUNT_SW_CONTEXT_SWITCHES,
        sample_period: 1,
        flags: (clock.flags & !tasks) | flag::CONTEXT_SWITCH | user_chain,
        ..*clock
    }
}

fn open_error(e: io::Error, cpu: u32, ncpus: usize, config: &SessionConfig) -> SourceError {
    let what = match config.target {
        Target::System => format!("system-wide sampling on CPU {cpu}"),
        Target::Process { pid, .. } => format!("sampling process {pid} on CPU {cpu}"),
    };
    let io = |context: String| SourceError::Io {
        context,
        source: io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
    };
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => SourceError::Permission(format!(
            "the kernel refused {what}: /proc/sys/kernel/perf_event_paranoid is {}, so this needs \
             root or CAP_PERFMON, or a lower `kernel.perf_event_paranoid` (sysctl kernel.perf_event_paranoid=-1)",
            perf_event_paranoid()
        )),
        Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::EOPNOTSUPP) => io(format!(
            "this kernel offers no software cpu-clock event for {what} (perf events not built in, or the CPU went offline)"
        )),
        Some(libc::ENOSYS) => io(
            "this kernel has no perf_event_open system call (built without CONFIG_PERF_EVENTS)"
                .into(),
        ),
        Some(libc::EMFILE) | Some(libc::ENFILE) => io(format!(
            "too many open files: {what} needs one descriptor per CPU ({ncpus} here); raise `ulimit -n`"
        )),
        Some(libc::ESRCH) => match config.target {
            Target::Process { pid, .. } => io(format!("process {pid} does not exist")),
            Target::System => io(format!("cannot open {what}")),
        },
        Some(libc::EINVAL) => io(format!(
            "the kernel rejected the event attributes for {what} (an option this kernel does not support)"
        )),
        Some(libc::EBUSY) => io(format!(
            "{what} is impossible while another user holds the event exclusively"
        )),
        _ => SourceError::Io {
            context: format!("cannot open the cpu-clock event for {what}"),
            source: e,
        },
    }
}

fn map_error(e: io::Error, cpu: u32, data_pages: usize) -> SourceError {
    let kib = (1 + data_pages) * sys::page_size() / 1024;
    if e.raw_os_error() == Some(libc::EPERM) {
        let limit = std::fs::read_to_string("/proc/sys/kernel/perf_event_mlock_kb")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        return SourceError::Permission(format!(
            "the kernel refused to lock a {kib} KiB ring buffer for CPU {cpu}: \
             `kernel.perf_event_mlock_kb` allows {limit} KiB per user without CAP_IPC_LOCK (or root)"
        ));
    }
    SourceError::Io {
        context: format!("cannot map the {kib} KiB ring buffer of CPU {cpu}"),
        source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SessionConfig {
        SessionConfig {
            callchain: true,
            track_tasks: true,
            ..SessionConfig::system(1000)
        }
    }

    #[test]
    fn attr_for_system_session() {
        let c = config();
        let a = attr_for(&c, &RecordLayout::for_config(&c), 64, Start::Now);
        assert_eq!(a.size, 136);
        assert_eq!((a.type_, a.config), (1, 0));
        assert_eq!(a.sample_period, 1_000_000);
        assert_eq!(a.flags & flag::FREQ, 0);
        assert_eq!(a.flags & flag::INHERIT, 0);
        assert_eq!(a.flags & flag::MMAP_DATA, 0);
        for f in [
            flag::DISABLED,
            flag::SAMPLE_ID_ALL,
            flag::MMAP,
            flag::MMAP2,
            flag::COMM,
            flag::COMM_EXEC,
            flag::TASK,
            flag::USE_CLOCKID,
        ] {
            assert_ne!(a.flags & f, 0, "flag {f:#x}");
        }
        assert_eq!(a.flags & (flag::EXCLUDE_KERNEL | flag::EXCLUDE_USER), 0);
        assert_eq!(a.sample_stack_user, 0);
        assert_eq!(a.wakeup_watermark as usize, 64 * sys::page_size() / 4);
    }

    #[test]
    fn the_switch_event_samples_every_switch_out_and_reports_switches() {
        let c = SessionConfig {
            off_cpu: true,
            ..config()
        };
        let clock = attr_for(&c, &RecordLayout::for_config(&c), 64, Start::OnExec);
        let a = attr_for_switches(&clock);
        assert_eq!((a.type_, a.config, a.sample_period), (1, 3, 1));
        assert_eq!(a.sample_type, clock.sample_type);
        assert_ne!(a.flags & flag::CONTEXT_SWITCH, 0);
        assert_ne!(a.flags & flag::ENABLE_ON_EXEC, 0);
        assert_eq!(a.flags & (flag::MMAP | flag::COMM | flag::TASK), 0);
        assert_eq!(clock.flags & flag::CONTEXT_SWITCH, 0);
        // No stack copy: the kernel's walk of the user frame pointers is
        // the user stack; with one, the copy is unwound instead.
        assert_eq!(a.flags & flag::EXCLUDE_CALLCHAIN_USER, 0);
        let c = SessionConfig {
            user_stack_bytes: 8192,
            ..c
        };
        let clock = attr_for(&c, &RecordLayout::for_config(&c), 64, Start::OnExec);
        assert_ne!(
            attr_for_switches(&clock).flags & flag::EXCLUDE_CALLCHAIN_USER,
            0
        );
    }

    #[test]
    fn attr_for_spawned_process() {
        let c = SessionConfig {
            target: Target::Process {
                pid: 1,
                inherit: true,
            },
            kernel: false,
            user_stack_bytes: 8190,
            ..config()
        };
        let a = attr_for(&c, &RecordLayout::for_config(&c), 8, Start::OnExec);
        assert_ne!(a.flags & flag::INHERIT, 0);
        assert_ne!(a.flags & flag::ENABLE_ON_EXEC, 0);
        assert_ne!(a.flags & flag::EXCLUDE_KERNEL, 0);
        assert_eq!(a.flags & flag::EXCLUDE_USER, 0);
        if sys::USER_REG_BITS.is_some() {
            assert_eq!(a.sample_stack_user, 8192);
            assert_ne!(a.sample_regs_user, 0);
        }
    }

    #[test]
    fn ring_sizes() {
        let page = sys::page_size();
        if page != 4096 {
            return;
        }
        let c = SessionConfig::system(1000);
        assert_eq!(auto_ring_pages(&c), 8);
        assert_eq!(auto_ring_pages(&config()), 64);
        let stack = SessionConfig {
            user_stack_bytes: 8192,
            ..config()
        };
        assert_eq!(auto_ring_pages(&stack), 512);
        let fast = SessionConfig {
            frequency_hz: 10_000,
            ..stack
        };
        assert_eq!(auto_ring_pages(&fast), 2048);
        assert_eq!(PerfFactory::new().ring_pages_log2(0).ring_pages(&c), 1);
    }

    #[test]
    fn frequency_is_checked_before_anything() {
        for hz in [0, 20_000] {
            let c = SessionConfig::system(hz);
            let err = PerfFactory::new().open(&c).err().expect("refused");
            assert!(matches!(err, SourceError::Frequency(_)), "{err}");
        }
    }

    #[test]
    fn permission_sentence_names_the_knobs() {
        let e = open_error(
            io::Error::from_raw_os_error(libc::EACCES),
            3,
            4,
            &SessionConfig::system(1000),
        );
        let s = e.to_string();
        assert!(matches!(e, SourceError::Permission(_)));
        for needle in [
            "CPU 3",
            "kernel.perf_event_paranoid",
            "CAP_PERFMON",
            "root",
            "/proc/sys/kernel/perf_event_paranoid is ",
        ] {
            assert!(s.contains(needle), "{needle:?} missing in {s:?}");
        }
        let s = open_error(
            io::Error::from_raw_os_error(libc::EMFILE),
            0,
            4,
            &SessionConfig::system(1000),
        )
        .to_string();
        assert!(s.starts_with("too many open files"), "{s}");
    }
}
