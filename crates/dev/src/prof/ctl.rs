//! prof's control messages: the command table, the interval and the
//! session each mode runs.

use super::{Prof, State};
use crate::ctl::{self, Cmd};
use crate::kit::lock;
use crate::DevError;
use profdev_core::{SessionConfig, Target};

/// The default sampling interval, in milliseconds (Inferno's).
pub const DEFAULT_INTERVAL_MS: u32 = 100;

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

/// A profiler of the device: what `start…` switched on. Each has its own
/// verb and its own meaning of a histogram pair's count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Periodic sampling: a pair's count is a number of ticks at that pc.
    Sampling,
    /// Memory (`startmp…`, see `memory`): pairs are bytes in the memory
    /// layout; `pools` is the bit set of the digits (1, 2, 4 for 1, 2, 3).
    /// It runs no sampling session.
    Memory { pools: u8 },
    /// Coverage (`startcp PID`, see `coverage`): a pair's count is the
    /// exact number of times that instruction ran in `pid` and the
    /// processes it spawned. It runs no sampling session.
    Coverage { pid: u32 },
}

impl Mode {
    /// The mode's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sampling => "sampling",
            Mode::Memory { .. } => "memory",
            Mode::Coverage { .. } => "coverage",
        }
    }

    pub(super) fn session(self, interval_ms: u32) -> SessionConfig {
        // Memory mode starts no session (see `memory`); only `start`
        // reaches here.
        session_config(interval_ms)
    }
}

/// One name of the `module` list, and its canonical path if it is a path.
#[derive(Clone, Debug)]
pub(super) struct Wanted {
    pub(super) raw: String,
    pub(super) canonical: Option<String>,
}

impl Wanted {
    fn new(raw: String) -> Self {
        let canonical = raw
            .contains('/')
            .then(|| std::fs::canonicalize(&raw).ok())
            .flatten()
            .map(|p| p.to_string_lossy().into_owned());
        Wanted { raw, canonical }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CtlOp {
    Module,
    Start,
    Stop,
    End,
    Interval,
    Startcp,
}

const CTL_TABLE: &[Cmd<CtlOp>] = &[
    Cmd::with_args("module", 0, usize::MAX, CtlOp::Module),
    Cmd::verb("start", CtlOp::Start),
    Cmd::verb("stop", CtlOp::Stop),
    Cmd::verb("end", CtlOp::End),
    Cmd::with_args("interval", 1, 1, CtlOp::Interval),
    Cmd::with_args("startcp", 1, 1, CtlOp::Startcp),
];

/// C's `strtoul(s, 0, 0)` on a whole word: decimal, `0x` hex, `0` octal.
pub(super) fn parse_c_number(s: &str) -> Option<u32> {
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

impl Prof {
    /// Carry out one control message.
    pub(super) fn ctl(
        &self,
        data: &[u8],
        cred: Option<crate::access::Cred>,
    ) -> Result<(), DevError> {
        // `startmp[digits] [PID]`: a verb with a suffix, checked by `memory`.
        if data.len() <= ctl::MAX_MESSAGE
            && std::str::from_utf8(data).is_ok_and(|t| {
                t.split_whitespace()
                    .next()
                    .is_some_and(|w| w.starts_with("startmp"))
            })
        {
            return self.startmp(data, cred);
        }
        let (op, args) = ctl::parse(data, CTL_TABLE)?;
        match op {
            CtlOp::Module => {
                // Canonical paths are looked up before the lock is taken.
                let wanted: Vec<Wanted> = args.into_iter().map(Wanted::new).collect();
                self.lock().wanted = wanted.into();
                Ok(())
            }
            CtlOp::Start => self.start(Mode::Sampling),
            CtlOp::Stop => {
                // Attached processes still running report first (memory,
                // coverage).
                self.memory_snapshot();
                self.coverage_snapshot();
                self.stop();
                Ok(())
            }
            CtlOp::End => {
                self.stop();
                self.session.reset(|| {
                    lock(&self.resolver).clear();
                    *self.lock() = State::new();
                });
                let health = self.session.health();
                health.set_memory(0);
                health.set_rate_asked(frequency_hz(DEFAULT_INTERVAL_MS));
                Ok(())
            }
            CtlOp::Startcp => self.startcp(&args[0], data, cred),
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
                self.session.health().set_rate_asked(frequency_hz(ms));
                Ok(())
            }
        }
    }
}
