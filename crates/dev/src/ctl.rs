//! Control messages, parsed through a table.
//!
//! A write to a control file is split into words (the trailing newline
//! dropped, runs of blanks separating words), the first word is looked up
//! in the device's command table *exactly*, and the argument count is
//! checked. Anything else is refused with the message quoted back:
//! `unknown control message "stopwatch"`. (Plan 9's devkprof matched
//! prefixes, so "stopwatch" stopped the profiler; profdev does not.)
//!
//! ```
//! use profdev_dev::ctl::{self, Cmd};
//!
//! #[derive(Clone, Copy, Debug, PartialEq)]
//! enum Op { Start, Interval }
//! const TABLE: &[Cmd<Op>] = &[
//!     Cmd { verb: "start", min_args: 0, max_args: 0, op: Op::Start },
//!     Cmd { verb: "interval", min_args: 1, max_args: 1, op: Op::Interval },
//! ];
//! let (op, words) = ctl::parse(b"interval 10\n", TABLE).unwrap();
//! assert_eq!(op, Op::Interval);
//! assert_eq!(words, ["10"]);
//! assert_eq!(
//!     ctl::parse(b"stopwatch\n", TABLE).unwrap_err().to_string(),
//!     "unknown control message \"stopwatch\""
//! );
//! ```

use crate::error::DevError;

/// One row of a command table.
#[derive(Clone, Copy, Debug)]
pub struct Cmd<T> {
    /// The verb, matched exactly.
    pub verb: &'static str,
    /// Fewest arguments after the verb.
    pub min_args: usize,
    /// Most arguments after the verb (`usize::MAX` for no limit).
    pub max_args: usize,
    /// What the device does for it.
    pub op: T,
}

impl<T> Cmd<T> {
    /// A verb that takes no arguments.
    pub const fn verb(verb: &'static str, op: T) -> Self {
        Cmd {
            verb,
            min_args: 0,
            max_args: 0,
            op,
        }
    }

    /// A verb taking from `min_args` to `max_args` arguments
    /// (`usize::MAX` for no limit).
    pub const fn with_args(verb: &'static str, min_args: usize, max_args: usize, op: T) -> Self {
        Cmd {
            verb,
            min_args,
            max_args,
            op,
        }
    }
}

/// Longest control message accepted, in bytes.
pub const MAX_MESSAGE: usize = 4096;

/// The message as the user wrote it, for quoting: one trailing newline
/// removed, invalid UTF-8 replaced.
pub fn quoted(data: &[u8]) -> String {
    let text = String::from_utf8_lossy(data);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    text.strip_suffix('\r').unwrap_or(text).to_string()
}

/// Parse `data` against `table`: the matched operation and the arguments.
pub fn parse<T: Copy>(data: &[u8], table: &[Cmd<T>]) -> Result<(T, Vec<String>), DevError> {
    let msg = quoted(data);
    if data.len() > MAX_MESSAGE {
        return Err(DevError::BadCtlArg {
            msg: msg.chars().take(40).collect::<String>() + "...",
            why: format!("longer than {MAX_MESSAGE} bytes"),
        });
    }
    if std::str::from_utf8(data).is_err() {
        return Err(DevError::BadCtl(msg));
    }
    let mut words = msg.split_whitespace().map(str::to_string);
    let Some(verb) = words.next() else {
        return Err(DevError::BadCtl(msg));
    };
    let args: Vec<String> = words.collect();
    let Some(cmd) = table.iter().find(|c| c.verb == verb) else {
        return Err(DevError::BadCtl(msg));
    };
    if args.len() < cmd.min_args || args.len() > cmd.max_args {
        let want = match (cmd.min_args, cmd.max_args) {
            (0, 0) => "no arguments".to_string(),
            (a, b) if a == b => format!("{a} argument{}", if a == 1 { "" } else { "s" }),
            (a, usize::MAX) => format!("at least {a} argument{}", if a == 1 { "" } else { "s" }),
            (a, b) => format!("{a} to {b} arguments"),
        };
        return Err(DevError::BadCtlArg {
            msg,
            why: format!("{verb} takes {want}"),
        });
    }
    Ok((cmd.op, args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Op {
        Start,
        Stop,
        Module,
    }
    const T: &[Cmd<Op>] = &[
        Cmd::verb("start", Op::Start),
        Cmd::verb("stop", Op::Stop),
        Cmd::with_args("module", 0, usize::MAX, Op::Module),
    ];

    #[test]
    fn exact_verbs_only() {
        assert_eq!(parse(b"stop\n", T).unwrap().0, Op::Stop);
        assert_eq!(parse(b"  stop  ", T).unwrap().0, Op::Stop);
        for bad in [&b"stopped"[..], b"stopwatch\n", b"st", b"", b"\n", b"STOP"] {
            let e = parse(bad, T).unwrap_err();
            assert!(matches!(e, DevError::BadCtl(_)), "{bad:?} gave {e:?}");
        }
        assert_eq!(
            parse(b"stopwatch\n", T).unwrap_err().to_string(),
            "unknown control message \"stopwatch\""
        );
    }

    #[test]
    fn argument_counts() {
        assert_eq!(
            parse(b"start now\n", T).unwrap_err().to_string(),
            "bad control message \"start now\": start takes no arguments"
        );
        let (op, args) = parse(b"module a b c\n", T).unwrap();
        assert_eq!(op, Op::Module);
        assert_eq!(args, ["a", "b", "c"]);
        assert!(parse(b"module\n", T).unwrap().1.is_empty());
    }

    #[test]
    fn invalid_utf8_and_huge_messages() {
        assert!(matches!(parse(b"st\xffop", T), Err(DevError::BadCtl(_))));
        let long = vec![b'a'; MAX_MESSAGE + 1];
        assert!(matches!(parse(&long, T), Err(DevError::BadCtlArg { .. })));
    }
}
