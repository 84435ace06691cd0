//! Linux sampling engine: perf_event_open, the mmap ring reader, task
//! tracking.
//!
//! # Synopsis
//!
//! ```no_run
//! use profdev_core::{Record, SessionConfig, SourceFactory, SourceError};
//! use profdev_sample::PerfFactory;
//! use std::time::Duration;
//!
//! let config = SessionConfig { callchain: true, track_tasks: true, ..SessionConfig::system(1000) };
//! let mut source = PerfFactory::new().open(&config)?;
//! let mut records = Vec::new();
//! for _ in 0..10 {
//!     source.read(&mut records, Duration::from_millis(100))?;
//! }
//! let stats = source.stats(); // samples, lost, throttled
//! # Ok::<(), SourceError>(())
//! ```
//!
//! Or, for one command and its children: [`spawn_profiled`].
//!
//! # Description
//!
//! This crate is the only one in profdev that talks to the kernel's
//! perf_event subsystem.
//!
//! **Where `unsafe` lives, and why.** Only at the system-call boundary,
//! each block with a `SAFETY:` comment: [`sys`] for perf_event_open(2),
//! its ioctls and poll (no safe wrapper covers them); [`ring`] for mmap of
//! the shared ring and its head/tail words, which the kernel writes
//! concurrently; [`bpf`] for bpf(2) and the mapping of the in-kernel
//! histogram; the `pre_exec` hooks of [`spawn_profiled`] (a pipe that
//! holds the child until its events exist, async-signal-safe calls only);
//! and [`job`] for the profiled command's process group, terminal and
//! signal dispositions (setpgid, tcsetpgrp, sigaction, wait4, whose
//! resource usage gives CMD's CPU time); [`cputime`] for sysconf's clock
//! tick. Decoding
//! ([`decode`]) and everything above it is safe code.
//!
//! **What it asks the kernel for, and why.** One software `cpu-clock` event
//! (`PERF_TYPE_SOFTWARE`, `PERF_COUNT_SW_CPU_CLOCK`) per online CPU:
//! software, because the VMs profdev runs on have no hardware PMU, and the
//! hrtimer behind cpu-clock fires in kernel and user mode alike, the way
//! the classic clock-interrupt profilers sampled. The period is fixed,
//! `1e9 / frequency_hz` nanoseconds of CPU time (not frequency mode), so
//! every sample stands for the same time and a tick count is a time;
//! [`SessionConfig::validate`] refuses 0 Hz and more than 10 kHz. For
//! `Target::System` the events are per CPU with pid -1 (every task); for
//! `Target::Process` they are per CPU on one pid, with `inherit` so that
//! children are followed.
//!
//! Each sample carries IP, PID/TID, TIME, CPU and PERIOD, plus the
//! CALLCHAIN when asked (split at the kernel/user context markers into
//! `kernel_chain` and `user_chain`), plus REGS_USER (frame pointer, stack
//! pointer, instruction pointer) and STACK_USER when
//! `user_stack_bytes > 0`, for unwinding code without frame pointers. The
//! sample's mode comes from `PERF_RECORD_MISC_CPUMODE`. Timestamps are
//! `CLOCK_MONOTONIC` nanoseconds (`use_clockid`), the clock of
//! `std::time::Instant`, so they can be compared with the caller's own
//! time. Every non-sample record carries the same pid/tid, time and CPU
//! (`sample_id_all`).
//!
//! With `track_tasks`, the events also deliver MMAP2 (executable mappings
//! only; device and inode, or the build id when the kernel sends one), COMM
//! (with `exec` set when the name changed by exec) and FORK/EXIT records,
//! so that samples of processes that exit before the end still symbolize.
//! Tasks running before the session starts are described from /proc
//! ([`synthesize_tasks`], through `profdev_symbolize::maps`) at time 0, at
//! the head of the first batch. A factory given a mapping hook
//! ([`PerfFactory::with_mapping_hook`], e.g. an objects table's) hands it
//! each MMAP record the moment it is decoded or synthesized, before the
//! merge holds it back, so the file is opened while its process runs.
//!
//! **The ring.** Each event has its own ring of 1 + 2^n pages, mapped
//! read-write so the kernel never overwrites unread data: when a ring is
//! full it drops records and later writes a PERF_RECORD_LOST, which becomes
//! a [`Record::Lost`] and is added to
//! `stats().lost`. THROTTLE/UNTHROTTLE records (the kernel slowing a CPU's
//! sampling because interrupts took too long) become
//! [`Record::Throttle`], and each THROTTLE
//! is counted in `stats().throttled`. Nothing is dropped silently. The ring
//! size is chosen by [`auto_ring_pages`] (at 1000 Hz: 32 KiB per CPU
//! without callchains, 256 KiB with them, 2 MiB with an 8 KiB user-stack
//! copy, each enough for a reader that comes every 100 ms with a factor 2
//! to spare), or set with [`PerfFactory::ring_pages_log2`].
//!
//! **Reading.** [`SampleSource::read`] polls every event's descriptor until
//! a ring is a quarter full, a target exits, or the timeout passes; then it
//! reads every ring's `data_head` (Acquire), decodes the records between
//! tail and head ([`ring::for_each_record_in`], [`decode::decode_record`]),
//! stores `data_tail` (Release), and queues each ring's records in its
//! own queue of a [`merge::Merge`]; a k-way merge over the queue heads
//! then appends, in time order, every record no later read can precede.
//!
//! **Ordering guarantee.** Across reads, records come in nondecreasing
//! time order (an EXIT is delivered after every earlier sample of any
//! CPU), by perf's finished-round rule: a read releases the records at or
//! below the highest time seen by the reads before it and at least 10 ms
//! before the read began, which holds as long as the kernel writes a
//! record within one read interval or 10 ms of taking its time, whichever
//! is longer (see [`merge`]). The price is latency: a record is delivered
//! by the read that drains it or by the next one, and not before it is
//! 10 ms old. Synthesized records (time
//! 0) come first, in the first read. [`SampleSource::flush`] (the engine
//! calls it when a session stops) drains and releases everything held.
//! The counts of [`SampleSource::stats`] are of records delivered.
//!
//! **End of a session.** A `Target::Process` session ends (`read` returns
//! `Err(SourceError::Ended)`) when every event has hung up (the whole
//! process tree exited) and the rings are drained; the read that finds
//! them all hung up releases every record the merge held. A system-wide session
//! runs until dropped. Dropping disables every event, then unmaps the rings
//! and closes the descriptors.
//!
//! # Errors
//!
//! Each is one sentence: EACCES/EPERM from perf_event_open is
//! [`SourceError::Permission`],
//! naming the CPU, the current value of /proc/sys/kernel/perf_event_paranoid,
//! the sysctl `kernel.perf_event_paranoid` and CAP_PERFMON (or root);
//! ENOENT/ENODEV/EOPNOTSUPP say the kernel offers no such event; EMFILE says
//! there are too many open files; an mmap refused for locked memory names
//! `kernel.perf_event_mlock_kb`.
//!
//! # Bugs
//!
//! * The cpu-clock is a software hrtimer: it cannot sample code that runs
//!   with interrupts disabled, so such code is charged to the instruction
//!   that re-enables them (the classic profilers had the same blind spot).
//! * A record that cannot be decoded, or a ring whose counters make no
//!   sense (neither has been seen), is skipped, counted in `stats().lost`
//!   and reported as a `Record::Lost` of 1; [`PerfSource::malformed`]
//!   counts them apart.
//! * Hypervisor and guest parts of callchains are dropped.
//! * User registers are only decoded on x86_64 and aarch64; elsewhere a
//!   session with `user_stack_bytes > 0` is refused.
//! * The cross-batch ordering above is not a total order (see there).
//! * Synthesized tasks are read from /proc after the events are enabled: a
//!   task created in between may be described twice (once synthesized,
//!   once by the kernel); one that exits in between is described with time
//!   0 even though it is gone.
//! * Ring sizing assumes the default `kernel.perf_event_max_stack` of 127.
//!   Without root or CAP_IPC_LOCK, `kernel.perf_event_mlock_kb` (516 KiB by
//!   default) limits rings across all CPUs; use a smaller ring then.

pub mod bpf;
pub mod cputime;
pub mod decode;
pub mod job;
pub mod merge;
pub mod procfs;
pub mod ring;
pub mod several;
mod source;
mod spawn;
pub mod sys;

#[doc(hidden)]
pub mod fuzzing;

pub use procfs::{online_cpus, synthesize_tasks};
pub use source::{auto_ring_pages, PerfFactory, PerfSource, MAX_USER_STACK_BYTES};
pub use spawn::{spawn_profiled, SpawnError};

#[doc(no_inline)]
pub use profdev_core::{Record, SampleSource, SessionConfig, SourceError, SourceFactory};
