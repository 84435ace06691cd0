//! The classic commands' entry point over their command-line tables
//! ([`profdev_classic::cmdline`]).

pub use profdev_classic::cmdline::*;
use std::ffi::OsString;
use std::process::ExitCode;

/// The entry point of an Inferno-style command (`prof`, `cprof`,
/// `mprof`): `-h` or `--help` prints [`help`]; a bad command line prints
/// `NAME: why` and the usage lines (the classic one, then what profdev
/// adds) and exits 2, as profdev's own commands do; an error of the run
/// is one sentence, exit status 1 (the run's own status otherwise).
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
            eprintln!("{}: {e}\n{}", spec.name, usage(spec));
            return ExitCode::from(2);
        }
    };
    crate::cmdline::finish(spec.name, run(&args))
}

#[cfg(test)]
mod tests {
    use profdev_classic::args::ALL;

    /// Each classic command of the command table but kgmon (whose command
    /// line is clap's) describes itself to clap, for its help, page and
    /// completions, by its table, as it parses by it.
    #[test]
    fn every_classic_command_is_described_by_its_table() {
        let mut tables: Vec<&str> = ALL.iter().map(|s| s.name).collect();
        let mut classic = Vec::new();
        for c in crate::COMMANDS
            .iter()
            .filter(|c| c.classic && c.name != "kgmon")
        {
            classic.push(c.name);
            let spec = ALL.iter().find(|s| s.name == c.name).unwrap();
            assert_eq!(
                (c.cli)().render_long_help().to_string(),
                super::command(spec).render_long_help().to_string(),
                "{}",
                c.name
            );
        }
        tables.sort_unstable();
        classic.sort_unstable();
        assert_eq!(tables, classic);
    }
}
