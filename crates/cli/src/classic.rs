//! The classic commands' entry point over their command-line tables
//! ([`profdev_classic::cmdline`]).

pub use profdev_classic::cmdline::*;
use std::ffi::OsString;
use std::process::ExitCode;

/// The entry point of an Inferno-style command (`prof`, `cprof`,
/// `mprof`): `-h` or `--help` prints [`help`]; a bad command line prints
/// `NAME: why` and the usage line; an error of the run one sentence; exit
/// status 1 for either.
pub fn main<A>(
    spec: &Spec,
    args: Vec<OsString>,
    parse: fn(Vec<OsString>) -> Result<A, String>,
    run: fn(&A) -> anyhow::Result<ExitCode>,
) -> ExitCode {
    if help_asked(&args) {
        print!("{}", help(spec));
        return ExitCode::SUCCESS;
    }
    let args = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{}: {e}\nusage: {}", spec.name, spec.synopsis);
            return ExitCode::from(1);
        }
    };
    crate::cmdline::finish(spec.name, run(&args))
}

#[cfg(test)]
mod tests {
    use profdev_classic::cmdline::{command, help, parse};
    use std::ffi::OsString;

    /// Every classic table: its clap command is well formed, lists each
    /// option, and the parser takes each one (a value given `5`) and
    /// refuses every other letter.
    #[test]
    fn the_parser_takes_exactly_the_documented_options() {
        for spec in crate::CLASSIC_SPECS.iter().copied() {
            let cmd = command(spec);
            cmd.clone().debug_assert();
            assert!(help(spec).starts_with(&format!("usage: {}\n", spec.synopsis)));
            for o in spec.opts {
                let arg = cmd.get_arguments().find(|a| a.get_id() == o.id).unwrap();
                assert_eq!((arg.get_short(), arg.get_long()), (o.short, o.long));
                let mut words = vec![o.written(o.short.is_none())];
                if o.value.is_some() {
                    words.push("5".into());
                }
                let mut given = Vec::new();
                let ops = parse(spec, words.iter().map(OsString::from).collect(), |g, v| {
                    given.push((g.id, v));
                    Ok(())
                })
                .unwrap();
                assert!(ops.is_empty(), "{} {words:?}", spec.name);
                assert_eq!(given.len(), 1, "{} {words:?}", spec.name);
            }
            for c in ('a'..='z').chain('A'..='Z').chain('0'..='9') {
                if !spec.opts.iter().any(|o| o.short == Some(c)) {
                    let e = parse(spec, vec![OsString::from(format!("-{c}"))], |_, _| Ok(()));
                    assert_eq!(e.unwrap_err(), format!("unknown option -{c}"));
                }
            }
        }
    }
}
