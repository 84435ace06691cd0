//! The crate's error type: one sentence per failure, never a panic.

use std::io;
use std::path::PathBuf;

/// Why a profiling call or an output file failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `timer_create(CLOCK_PROCESS_CPUTIME_ID)` failed (e.g. `EAGAIN` when
    /// the process hit its limit of POSIX timers or queued signals).
    #[error("profil: cannot create the process CPU-time timer: {0}")]
    TimerCreate(#[source] io::Error),
    /// `timer_settime` failed.
    #[error("profil: cannot arm the process CPU-time timer: {0}")]
    TimerArm(#[source] io::Error),
    /// `sigaction(SIGPROF)` failed.
    #[error("profil: cannot install the SIGPROF handler: {0}")]
    Sigaction(#[source] io::Error),
    /// monitor(3C): the buffer is too small for region 1 and 2 (SVR4 returns silently).
    #[error(
        "monitor: a buffer of {bufsize} words cannot hold the header and {nfunc} call counters \
         and still leave a histogram"
    )]
    MonitorBufferTooSmall {
        /// Buffer size in 16-bit words.
        bufsize: usize,
        /// Number of call counters requested.
        nfunc: usize,
    },
    /// monitor(3C) or monstartup: the text range is empty or reversed.
    #[error("{call}: lowpc {lowpc:#x} is not below highpc {highpc:#x}")]
    EmptyTextRange {
        /// Which entry point refused the range.
        call: &'static str,
        /// First text address.
        lowpc: usize,
        /// One past the last text address.
        highpc: usize,
    },
    /// monstartup was called twice without `_mcleanup` in between.
    #[error("monstartup: profiling was already started")]
    AlreadyStarted,
    /// `_mcleanup` (or moncontrol) without a preceding monstartup.
    #[error("_mcleanup: monstartup was not called")]
    NotStarted,
    /// monstartup could not allocate the histogram.
    #[error("monstartup: out of memory for a histogram of {bins} bins")]
    OutOfMemory {
        /// Requested number of 16-bit bins.
        bins: usize,
    },
    /// The dynamic linker reported no executable segment for the main program.
    #[error("monstartup: cannot find the main program's executable segment")]
    NoText,
    /// gmon.out's `hist_size` field is 32 bits wide.
    #[error("gmon.out: a histogram of {bins} bins does not fit the 32-bit hist_size field")]
    TooManyBins {
        /// Number of bins that were asked for.
        bins: usize,
    },
    /// Writing an output file failed.
    #[error("{}: {source}", path.display())]
    Write {
        /// The file being written.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// The gmon.out writer refused the histogram.
    #[error(transparent)]
    Gmon(#[from] profdev_formats::gmon::WriteError),
    /// The mon.out writer refused the counters.
    #[error(transparent)]
    MonOut(#[from] profdev_formats::mon_out::WriteError),
}
