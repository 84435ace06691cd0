//! What every clap-parsed subcommand does at its edges: parse (help printed
//! by clap, exit 0; a usage error as `NAME: sentence` followed by clap's
//! usage lines, exit 2), and turn an error into one line `NAME: sentence`
//! with exit status 1. NAME is `profdev CMD` for profdev's own commands
//! (sample, gmon, mount, unmount); the classic commands keep their own
//! names and spec'd messages.

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

/// The `--help` of a classic command, which parses its arguments itself
/// to keep the classic messages: the classic usage line (`usage: …`, the
/// command's overridden usage), its text, and its options, all from the
/// command's description as a `clap::Command` — the same description its
/// man page and its completions are generated from, so none can drift.
pub fn classic_help(cmd: clap::Command) -> String {
    cmd.help_template("usage: {usage}\n\n{about-with-newline}\n{all-args}{after-help}")
        .render_long_help()
        .to_string()
}

/// The entry point of an Inferno-style command (`prof`, `mprof`): `-h` or
/// `--help` prints [`classic_help`]; a bad command line prints
/// `NAME: why` and the usage line; an error of the run one sentence; exit
/// status 1 for either.
pub fn classic_main<A>(
    name: &str,
    usage: &str,
    args: Vec<OsString>,
    command: fn() -> clap::Command,
    parse: fn(Vec<OsString>) -> Result<A, String>,
    run: fn(&A) -> anyhow::Result<ExitCode>,
) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{}", classic_help(command()));
        return ExitCode::SUCCESS;
    }
    let args = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{name}: {e}\n{usage}");
            return ExitCode::from(1);
        }
    };
    run(&args).unwrap_or_else(|e| {
        eprintln!("{name}: {}", sentence(&e));
        ExitCode::from(1)
    })
}

/// The short options of `cmd` that take a value (`-f DEVICE`), for a
/// classic command's getopt: the parser accepts exactly what the help and
/// the page list.
pub fn value_shorts(cmd: &clap::Command) -> Vec<char> {
    cmd.get_arguments()
        .filter(|a| !a.is_positional() && a.get_action().takes_values())
        .filter_map(|a| a.get_short())
        .collect()
}

/// For the classic commands' tests: the parser `parse` and the clap
/// description `cmd` (whence help, page and completions) take the same
/// options: each documented one parses (a value option given `5`, then
/// `./cmd`, except the options in `no_command`, which take the command's
/// place), and every other letter or digit is `unknown option -C`.
#[cfg(test)]
pub fn assert_parser_takes_the_documented_options<T, F>(
    cmd: clap::Command,
    no_command: &[char],
    parse: F,
) where
    F: Fn(&[&str]) -> Result<T, String>,
{
    let name = cmd.get_name().to_string();
    let documented: Vec<(char, bool)> = cmd
        .get_arguments()
        .filter(|a| a.get_id() != "help")
        .filter_map(|a| Some((a.get_short()?, a.get_action().takes_values())))
        .collect();
    for &(c, value) in &documented {
        let mut args = vec![format!("-{c}")];
        if value {
            args.push("5".into());
        }
        if !no_command.contains(&c) {
            args.push("./cmd".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert!(
            parse(&args).is_ok(),
            "{name} --help lists -{c}, the parser refuses it"
        );
    }
    for c in ('a'..='z').chain('A'..='Z').chain('0'..='9') {
        if c != 'h' && !documented.iter().any(|&(d, _)| d == c) {
            assert_eq!(
                parse(&[&format!("-{c}"), "./cmd"]).err(),
                Some(format!("unknown option -{c}")),
                "{name} -{c}"
            );
        }
    }
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
