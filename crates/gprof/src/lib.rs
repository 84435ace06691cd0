//! gprof profiles without `-pg`: what `profdev gmon` and `profdev kgmon`
//! compute, apart from parsing their command lines and printing.
//!
//! * [`program`]: CMD's executable as gmon.out describes it (its text,
//!   refused when the file does not hold it; its identity and symbols).
//! * [`builder`]: a record stream (samples with user stacks) unwound into
//!   frames of the executable, and the histogram and arcs built from them
//!   on `profdev_formats::gmon::build::CallGraph`; the run's summary.
//! * [`exact`]: `--exact`, the arcs from prof's coverage engine
//!   (`profdev_coverage`): exact call counts, PLT and GOT calls, samples
//!   taken in trampolines charged back to the blocks they copy.
//! * [`symbols`]: the one writer of the symbols files gprof reads in place
//!   of a binary (a stripped CMD's `CMD.syms`, kgmon's `vmlinux.syms`).
//! * [`kgmon`]: NetBSD kgmon(8)'s main line over the kgmon device's files.
//!
//! The errors are sentences for the user (`anyhow`), as the commands print
//! them.

#![forbid(unsafe_code)]

pub mod builder;
pub mod exact;
pub mod kgmon;
pub mod program;
pub mod symbols;

pub use builder::{Builder, Finished, Written};
pub use exact::Counter;
pub use program::Program;

use profdev_core::{SessionConfig, Target};

/// The honesty note, on stderr after writing and in `--help`.
pub const CALLED_NOTE: &str =
    "gprof's \"called\" column shows sampled arc traversals (the number of \
samples whose stack held the call), not numbers of calls: read it as a relative weight.";

/// The note with `--exact`.
pub const EXACT_NOTE: &str = "gprof's \"called\" column shows exact numbers of calls, counted at \
every call site (direct, through a pointer, through the PLT) and tail-call jump in the executable; \
calls from shared libraries and counts above 4294967295 (GNU gmon.out's 32 bits) are not in it, \
nor what is said above to be left out.";

/// Bytes of user stack copied with each sample for unwinding, unless told.
pub const DEFAULT_STACK_BYTES: u32 = 16384;

/// The sampling session of `profdev gmon`: CMD and what it forks, user
/// mode, at `hz`; with stacks (`stack_bytes` of each copied) unless
/// `exact`, which takes the arcs from the counts. Refused with the reason
/// when the session could not run (`SessionConfig::validate`).
pub fn session_config(hz: u32, stack_bytes: u32, exact: bool) -> anyhow::Result<SessionConfig> {
    let config = SessionConfig {
        target: Target::Process {
            pid: 0,
            inherit: true,
        },
        frequency_hz: hz,
        kernel: false,
        user: true,
        callchain: !exact,
        user_stack_bytes: if exact { 0 } else { stack_bytes },
        track_tasks: true,
        off_cpu: false,
    };
    config.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(config)
}

/// `1 arc`, `2 arcs`.
pub(crate) fn plural(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_sessions_take_no_stacks() {
        let c = session_config(1000, 4096, false).unwrap();
        assert!(c.callchain && c.user && !c.kernel);
        assert_eq!((c.user_stack_bytes, c.frequency_hz), (4096, 1000));
        let c = session_config(500, 4096, true).unwrap();
        assert!(!c.callchain);
        assert_eq!(c.user_stack_bytes, 0);
        assert!(session_config(0, 4096, false).is_err());
    }

    #[test]
    fn plurals() {
        assert_eq!(plural(1, "arc"), "1 arc");
        assert_eq!(plural(2, "arc"), "2 arcs");
        assert_eq!(plural(0, "call site"), "0 call sites");
    }
}
