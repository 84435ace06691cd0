//! The sample-source trait: where records come from.
//!
//! The live engine (perf_event_open, in `profdev-sample`), a replay of
//! recorded records and a synthetic stream in tests all implement
//! [`SampleSource`]. Devices never know which one feeds them.

use crate::record::Record;
use std::time::Duration;

/// What to sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every CPU, every task: the way kprof, kgmon and prf see the machine.
    System,
    /// One process and (with `inherit`) the children it creates afterwards.
    Process { pid: u32, inherit: bool },
}

/// How to sample: one session of the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionConfig {
    /// Which tasks.
    pub target: Target,
    /// Samples per second per CPU (software cpu-clock).
    pub frequency_hz: u32,
    /// Sample while the CPU is in kernel mode.
    pub kernel: bool,
    /// Sample while the CPU is in user mode.
    pub user: bool,
    /// Ask for callchains (kernel and, frame-pointer based, user).
    pub callchain: bool,
    /// Bytes of user stack to copy with each sample (with the user
    /// registers), for unwinding without frame pointers; 0 for none.
    pub user_stack_bytes: u32,
    /// Deliver task events (comm, mmap, fork, exit) so user addresses can be
    /// symbolized, and synthesize them for tasks already running.
    pub track_tasks: bool,
    /// Also take a sample each time a thread leaves the CPU (its stack
    /// where it blocked, [`Sample::switch_out`](crate::Sample::switch_out))
    /// and report each switch ([`Record::Switch`](crate::Record::Switch)),
    /// so that the time off the CPU can be measured. Needs kernel
    /// samples.
    pub off_cpu: bool,
}

impl SessionConfig {
    /// Highest frequency accepted: on VMs whose only clock is the software
    /// cpu-clock, sampling livelocks the machine well before 100 kHz.
    pub const MAX_FREQUENCY_HZ: u32 = 10_000;

    /// A system-wide kernel-and-user session at `frequency_hz`, no callchains.
    pub fn system(frequency_hz: u32) -> Self {
        SessionConfig {
            target: Target::System,
            frequency_hz,
            kernel: true,
            user: true,
            callchain: false,
            user_stack_bytes: 0,
            track_tasks: false,
            off_cpu: false,
        }
    }

    /// The sampling period in nanoseconds of CPU time.
    pub fn period_ns(&self) -> u64 {
        1_000_000_000 / u64::from(self.frequency_hz.max(1))
    }

    /// Check the frequency bounds, with a sentence saying why.
    pub fn validate(&self) -> Result<(), SourceError> {
        if self.frequency_hz == 0 {
            return Err(SourceError::Frequency(
                "a sampling frequency of 0 Hz takes no samples".into(),
            ));
        }
        if self.frequency_hz > Self::MAX_FREQUENCY_HZ {
            return Err(SourceError::Frequency(format!(
                "{} Hz is above the limit of {} Hz per CPU: the only sampling clock here is the \
                 software cpu-clock, whose timer interrupts livelock the machine well before 100 kHz",
                self.frequency_hz,
                Self::MAX_FREQUENCY_HZ
            )));
        }
        Ok(())
    }
}

/// Counts a source keeps about itself, so nothing is lost silently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceStats {
    /// Samples delivered.
    pub samples: u64,
    /// Records the kernel reported lost (ring buffer full).
    pub lost: u64,
    /// Times a CPU's sampling was throttled by the kernel.
    pub throttled: u64,
}

/// Why a source could not be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The frequency is out of bounds; the message says why.
    #[error("{0}")]
    Frequency(String),
    /// The kernel refused for lack of privilege; the message names the
    /// capability or sysctl involved.
    #[error("{0}")]
    Permission(String),
    /// Anything else, with context.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The source ended (a replay ran out).
    #[error("the sample source has ended")]
    Ended,
}

/// A stream of records.
///
/// ```
/// use profdev_core::{Record, SampleSource, SourceError, SourceStats};
/// use std::time::Duration;
///
/// struct Once(Vec<Record>);
/// impl SampleSource for Once {
///     fn read(&mut self, out: &mut Vec<Record>, _t: Duration) -> Result<(), SourceError> {
///         if self.0.is_empty() { return Err(SourceError::Ended); }
///         out.append(&mut self.0);
///         Ok(())
///     }
///     fn stats(&self) -> SourceStats { SourceStats::default() }
/// }
/// ```
pub trait SampleSource: Send {
    /// Wait up to `timeout` for records and append those available to `out`,
    /// in timestamp order. Returns `Err(SourceError::Ended)` when no more
    /// records will ever come.
    fn read(&mut self, out: &mut Vec<Record>, timeout: Duration) -> Result<(), SourceError>;

    /// The session is being stopped: append every record the source still
    /// holds back (a live source keeps the newest records of each read
    /// until no other CPU can bring an earlier one), in timestamp order.
    /// The default holds nothing back.
    fn flush(&mut self, out: &mut Vec<Record>) {
        let _ = out;
    }

    /// Counts so far.
    fn stats(&self) -> SourceStats;
}

/// Opens sources: the engine asks it for one per session.
pub trait SourceFactory: Send + Sync {
    /// Open a session; sampling runs from here until the source is dropped.
    fn open(&self, config: &SessionConfig) -> Result<Box<dyn SampleSource>, SourceError>;
}

/// Called for every MMAP record the moment a live source decodes it,
/// before any merging delay, while the process that mapped the file most
/// likely still runs: an objects table (`profdev_symbolize::Objects`)
/// opens the mapped file here, through `/proc/PID/map_files`, so that a
/// program that runs for a millisecond and is deleted at once is still the
/// file its samples are charged to. It must be quick and must not block.
///
/// A value, not a process-wide setting: whoever builds a command or a
/// server makes one table, hands its hook to the live source factory
/// (`profdev_sample::PerfFactory::with_mapping_hook`) and the table to
/// whatever reads the records. Clones share the function.
///
/// ```
/// use profdev_core::source::MappingHook;
/// use profdev_core::Record;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
///
/// let seen = Arc::new(AtomicU32::new(0));
/// let counter = seen.clone();
/// let hook = MappingHook::new(move |_| {
///     counter.fetch_add(1, Ordering::Relaxed);
/// });
/// hook.reported(&Record::Exit { pid: 1, ppid: 1, tid: 1, ptid: 1, time: 0 }); // not an MMAP
/// assert_eq!(seen.load(Ordering::Relaxed), 0);
/// ```
#[derive(Clone)]
pub struct MappingHook(std::sync::Arc<dyn Fn(&crate::Record) + Send + Sync>);

impl MappingHook {
    /// A hook calling `f` with each MMAP record.
    pub fn new(f: impl Fn(&crate::Record) + Send + Sync + 'static) -> Self {
        MappingHook(std::sync::Arc::new(f))
    }

    /// Tell the hook of a freshly decoded record (live sources call this
    /// for each record as they read it; only MMAP records reach `f`).
    pub fn reported(&self, record: &crate::Record) {
        if let crate::Record::Mmap { .. } = record {
            (self.0)(record);
        }
    }
}

impl std::fmt::Debug for MappingHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MappingHook")
    }
}
