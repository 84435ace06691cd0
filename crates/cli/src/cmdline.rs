//! What every clap-parsed subcommand does at its edges: parse (help printed
//! by clap, exit 0; a usage error as `NAME: sentence` followed by clap's
//! usage lines, exit 2), and turn an error into one line `NAME: sentence`
//! with exit status 1. NAME is `profdev CMD` for profdev's own commands
//! (sample, gmon, mount, unmount); the classic commands keep their own
//! names and spec'd messages (see `classic`).

use std::ffi::OsString;
use std::process::ExitCode;

/// Parse `args` (those after the subcommand's name) as `A`, or the exit
/// status to return after clap has printed help or a usage error.
pub fn parse<A: clap::Parser>(name: &str, args: Vec<OsString>) -> Result<A, ExitCode> {
    A::try_parse_from(std::iter::once(OsString::from(name)).chain(args)).map_err(|e| {
        if !e.use_stderr() {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        eprint!("{}", usage_error(name, &e.render().to_string()));
        ExitCode::from(2)
    })
}

/// clap's rendering of a usage error (`error: MESSAGE`, then usage lines)
/// in the form of every other error: `NAME: MESSAGE`, then the same lines.
fn usage_error(name: &str, rendered: &str) -> String {
    format!(
        "{name}: {}",
        rendered.strip_prefix("error: ").unwrap_or(rendered)
    )
}

/// An error and its causes as one sentence, `outer: inner: …`, leaving out
/// a cause whose text the message before it already ends with (an error
/// that prints its source, as `cannot read X: ENOENT` over ENOENT does).
pub fn sentence(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

/// The exit status of a run: its own, or 1 after printing the error as
/// `NAME: sentence`.
pub fn finish(name: &str, result: anyhow::Result<ExitCode>) -> ExitCode {
    result.unwrap_or_else(|e| {
        eprintln!("{name}: {}", sentence(&e));
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn a_cause_the_message_already_shows_is_not_repeated() {
        // As thiserror's `#[error("cannot read /missing: {source}")]`
        // with `#[source]` prints it.
        #[derive(Debug)]
        struct Read {
            source: std::io::Error,
        }
        impl std::fmt::Display for Read {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "cannot read /missing: {}", self.source)
            }
        }
        impl std::error::Error for Read {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.source)
            }
        }
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        let e = anyhow::Error::new(Read { source: io });
        assert_eq!(
            sentence(&e),
            "cannot read /missing: No such file or directory (os error 2)"
        );
        let e = Err::<(), _>(std::io::Error::from_raw_os_error(libc::ENOENT))
            .context("cannot open x")
            .unwrap_err();
        assert_eq!(
            sentence(&e),
            "cannot open x: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn usage_errors_take_the_command_name() {
        assert_eq!(
            usage_error(
                "profdev sample",
                "error: unexpected argument '-x' found\n\nUsage: profdev sample\n"
            ),
            "profdev sample: unexpected argument '-x' found\n\nUsage: profdev sample\n"
        );
    }
}
