//! The classic commands' command lines as data. Each command named after
//! a classic tool (prof, cprof, mprof, kprof and the prf commands) states
//! its command line once, as a [`Spec`]: its options (letter, long name,
//! whether each takes a value and may be repeated, help), its operands,
//! its synopsis and its text. From that one table come both
//!
//! * the classic parser, [`parse`]: getopt's rules (options in front of
//!   the operands, letters grouped as `-fl`, a value attached as `-mlibc`
//!   or in the next word, `--` ends the options, `-` is an operand) and the
//!   classic messages (`unknown option -q`, `option -m needs an argument`,
//!   or the option's own), which clap cannot give; and
//! * the [`clap::Command`], [`command`], whence `--help` ([`help`]), the man
//!   page's SYNOPSIS and OPTIONS and the completions.
//!
//! So the parser takes exactly the options the help, page and completions
//! list. kgmon, whose command line is NetBSD's and parsed by clap, is the
//! one classic command without a table. The commands' tables and their
//! entry point are in the `profdev` binary.

use clap::ValueHint;
use std::ffi::OsString;

/// The "Signals" paragraph of the `--help` of the commands that run CMD
/// as a job (`profdev_sample::job`): sample, gmon, record, prof, cprof,
/// mprof.
pub const SIGNALS_HELP: &str = "Signals: CMD runs in its own process group, made the terminal's \
foreground group while it runs, so ^C and ^Z reach CMD alone. SIGINT, SIGTERM and SIGHUP sent to \
profdev are passed to CMD's group; 2 s later whatever is left of it (and of processes it started \
that left the group) is killed with SIGKILL. profdev then writes what it gathered, says so in one \
sentence, and exits with 128 + the signal; otherwise its status is CMD's. A signal ignored when \
profdev starts (nohup) stays ignored. If profdev is killed with SIGKILL, CMD dies with it (CMD's \
own children do not).";

/// Most data pages per CPU `--mmap-pages` takes (the engine's limit, 2^16).
pub const MAX_PAGES: u32 = 1 << 16;

/// `--mmap-pages N`: data pages per CPU for the ring buffers, a power of
/// two as perf's `-m` takes; its log2, or the sentence saying what to give.
pub fn parse_mmap_pages(s: &str) -> Result<u32, String> {
    let n: u32 = s.trim().parse().map_err(|_| {
        format!(
            "--mmap-pages takes a number of pages, a power of two from 1 to {MAX_PAGES}, not {s:?}"
        )
    })?;
    if n == 0 || !n.is_power_of_two() || n > MAX_PAGES {
        return Err(format!(
            "--mmap-pages {n}: the ring must be a power of two of pages, from 1 to {MAX_PAGES} \
             (as perf's -m)"
        ));
    }
    Ok(n.trailing_zeros())
}

/// One option of a classic command line.
#[derive(Debug)]
pub struct Opt {
    /// Its name for the command's code and clap's argument id.
    pub id: &'static str,
    /// Its letter (`-f`).
    pub short: Option<char>,
    /// Its long name (`--lcov`), without the dashes.
    pub long: Option<&'static str>,
    /// The name of its value in the help (`modname`); none for a flag.
    pub value: Option<&'static str>,
    /// May be given more than once, each value kept (`-m`).
    pub repeat: bool,
    /// What completes its value.
    pub hint: Option<ValueHint>,
    /// Its line of help.
    pub help: &'static str,
    /// The message when its value is missing; `option -X needs an
    /// argument` unless given.
    pub missing: Option<&'static str>,
}

impl Opt {
    /// A flag `-c`.
    pub const fn flag(c: char, help: &'static str) -> Opt {
        Opt {
            id: char_id(c),
            short: Some(c),
            long: None,
            value: None,
            repeat: false,
            hint: None,
            help,
            missing: None,
        }
    }

    /// An option `-c VALUE`.
    pub const fn value(c: char, value: &'static str, help: &'static str) -> Opt {
        Opt {
            value: Some(value),
            ..Opt::flag(c, help)
        }
    }

    /// A flag `--name`.
    pub const fn long_flag(name: &'static str, help: &'static str) -> Opt {
        Opt {
            id: name,
            short: None,
            long: Some(name),
            value: None,
            repeat: false,
            hint: None,
            help,
            missing: None,
        }
    }

    /// An option `--name VALUE` (or `--name=VALUE`).
    pub const fn long(name: &'static str, value: &'static str, help: &'static str) -> Opt {
        Opt {
            value: Some(value),
            ..Opt::long_flag(name, help)
        }
    }

    /// The same, under another id.
    pub const fn id(self, id: &'static str) -> Opt {
        Opt { id, ..self }
    }

    /// The same, repeatable.
    pub const fn repeat(self) -> Opt {
        Opt {
            repeat: true,
            ..self
        }
    }

    /// The same, its value completed as `hint` says.
    pub const fn hint(self, hint: ValueHint) -> Opt {
        Opt {
            hint: Some(hint),
            ..self
        }
    }

    /// The same, saying `message` when its value is missing.
    pub const fn missing(self, message: &'static str) -> Opt {
        Opt {
            missing: Some(message),
            ..self
        }
    }

    /// How it is written: `-m`, or `--lcov` if `long` or it has no
    /// letter.
    pub fn written(&self, long: bool) -> String {
        match (self.short, self.long) {
            (Some(c), _) if !long => format!("-{c}"),
            (_, Some(l)) => format!("--{l}"),
            (Some(c), None) => format!("-{c}"),
            (None, None) => self.id.to_string(),
        }
    }
}

/// A letter's id: the letter as a string.
const fn char_id(c: char) -> &'static str {
    const LETTERS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut i = 0;
    while i < LETTERS.len() {
        if LETTERS[i] as u32 == c as u32 {
            let (one, _) = LETTERS.split_at(i).1.split_at(1);
            if let Ok(s) = std::str::from_utf8(one) {
                return s;
            }
        }
        i += 1;
    }
    panic!("an option letter is a digit or an ASCII letter")
}

/// One operand (or, with `many`, the rest of the words: a command and its
/// arguments).
#[derive(Debug)]
pub struct Operand {
    /// Its clap id.
    pub id: &'static str,
    /// Its name in the help, when not the id's.
    pub value: Option<&'static str>,
    /// Must be given.
    pub required: bool,
    /// Takes the rest of the words.
    pub many: bool,
    /// The words it may be, if only a few.
    pub choices: &'static [&'static str],
    /// What completes it.
    pub hint: Option<ValueHint>,
    /// Its line of help.
    pub help: &'static str,
}

impl Operand {
    /// An optional operand.
    pub const fn optional(id: &'static str, help: &'static str) -> Operand {
        Operand {
            id,
            value: None,
            required: false,
            many: false,
            choices: &[],
            hint: None,
            help,
        }
    }

    /// A required operand.
    pub const fn required(id: &'static str, help: &'static str) -> Operand {
        Operand {
            required: true,
            ..Operand::optional(id, help)
        }
    }

    /// `cmd arg ...`: a command to run and its arguments.
    pub const fn command(help: &'static str) -> Operand {
        Operand {
            value: Some("cmd"),
            many: true,
            hint: Some(ValueHint::CommandWithArguments),
            ..Operand::optional("cmd", help)
        }
    }

    /// The same, completed as a file name.
    pub const fn file(self) -> Operand {
        Operand {
            hint: Some(ValueHint::FilePath),
            ..self
        }
    }

    /// The same, one of `choices`.
    pub const fn choices(self, choices: &'static [&'static str]) -> Operand {
        Operand { choices, ..self }
    }
}

/// Which words starting with `--` are long options.
#[derive(Debug, PartialEq, Eq)]
pub enum Longs {
    /// Every one: a long name not in the table is `unknown option --x`.
    Any,
    /// Those starting with a long name of the table; any other is read as
    /// letters, as Inferno's prof read it (`--x` is `unknown option --`).
    Named,
}

/// A classic command line.
#[derive(Debug)]
pub struct Spec {
    /// The command's name.
    pub name: &'static str,
    /// The synopsis, without `usage: `: the classic command's own usage
    /// line byte for byte (`prof [-bflnv] ...`).
    pub synopsis: &'static str,
    /// What profdev adds to it (`[-eiH] [-F hz] ...`), printed on a second
    /// usage line after `profdev adds: `; empty: nothing.
    pub additions: &'static str,
    /// What the command does, for `--help`.
    pub about: &'static str,
    /// Which `--` words are long options.
    pub longs: Longs,
    /// The options, in the help's order.
    pub opts: &'static [Opt],
    /// The operands, in order.
    pub operands: &'static [Operand],
    /// Text after the options in `--help` (empty: none).
    pub after_help: &'static str,
}

/// Parse `args` by `spec`'s options, calling `apply` with each option and
/// its value as given, in order (so a bad value is reported where it
/// stands); the operands are what is left. Err: the classic message
/// (`unknown option -q`, the option's `missing` one, or `apply`'s).
pub fn parse<'a>(
    spec: &'a Spec,
    args: Vec<OsString>,
    mut apply: impl FnMut(&'a Opt, Option<OsString>) -> Result<(), String>,
) -> Result<Vec<OsString>, String> {
    let missing = |o: &Opt, long: bool| {
        o.missing.map_or_else(
            || format!("option {} needs an argument", o.written(long)),
            str::to_string,
        )
    };
    let mut it = args.into_iter().peekable();
    while let Some(arg) = it.peek() {
        let s = arg.to_string_lossy().into_owned();
        if s == "--" {
            it.next();
            break;
        }
        if !s.starts_with('-') || s == "-" {
            break;
        }
        it.next();
        if let Some(word) = s.strip_prefix("--") {
            let named = spec
                .opts
                .iter()
                .filter_map(|o| o.long)
                .any(|l| word.starts_with(l));
            if named || spec.longs == Longs::Any {
                let (name, inline) = match word.split_once('=') {
                    Some((n, v)) => (n, Some(OsString::from(v))),
                    None => (word, None),
                };
                let found = spec.opts.iter().find(|o| o.long == Some(name));
                match (found, inline) {
                    (Some(o), inline) if o.value.is_some() => {
                        let v = match inline {
                            Some(v) => v,
                            None => it.next().ok_or_else(|| missing(o, true))?,
                        };
                        apply(o, Some(v))?;
                    }
                    (Some(o), None) => apply(o, None)?,
                    _ => return Err(format!("unknown option {s}")),
                }
                continue;
            }
        }
        let letters: Vec<char> = s[1..].chars().collect();
        for (i, &c) in letters.iter().enumerate() {
            let Some(o) = spec.opts.iter().find(|o| o.short == Some(c)) else {
                return Err(format!("unknown option -{c}"));
            };
            if o.value.is_none() {
                apply(o, None)?;
                continue;
            }
            let rest: String = letters[i + 1..].iter().collect();
            let v = if rest.is_empty() {
                it.next().ok_or_else(|| missing(o, false))?
            } else {
                rest.into()
            };
            apply(o, Some(v))?;
            break;
        }
    }
    Ok(it.collect())
}

/// `spec` as a clap command: for `--help`, the man page and completions.
pub fn command(spec: &Spec) -> clap::Command {
    use clap::{Arg, ArgAction};
    let mut cmd = clap::Command::new(spec.name)
        .override_usage(usage_lines(spec))
        .about(spec.about);
    for o in spec.opts {
        let mut a = Arg::new(o.id).help(o.help);
        if let Some(c) = o.short {
            a = a.short(c);
        }
        if let Some(l) = o.long {
            a = a.long(l);
        }
        a = match (o.value, o.repeat) {
            (None, _) => a.action(ArgAction::SetTrue),
            (Some(v), false) => a.value_name(v),
            (Some(v), true) => a.value_name(v).action(ArgAction::Append),
        };
        if let Some(h) = o.hint {
            a = a.value_hint(h);
        }
        cmd = cmd.arg(a);
    }
    for p in spec.operands {
        let mut a = Arg::new(p.id).help(p.help);
        if p.required {
            a = a.required(true);
        }
        if p.many {
            a = a.num_args(1..).trailing_var_arg(true);
        }
        if let Some(v) = p.value {
            a = a.value_name(v);
        }
        if let Some(h) = p.hint {
            a = a.value_hint(h);
        }
        if !p.choices.is_empty() {
            a = a.value_parser(clap::builder::PossibleValuesParser::new(
                p.choices.iter().copied(),
            ));
        }
        cmd = cmd.arg(a);
    }
    if !spec.after_help.is_empty() {
        cmd = cmd.after_help(spec.after_help);
    }
    cmd
}

/// The prefix of the second usage line, under the first's synopsis.
pub const ADDS: &str = "       profdev adds: ";

/// The synopsis and, if profdev adds options, a second line listing them:
/// `prof [-bflnv] ...\n       profdev adds: [-eiH] ...`.
pub fn usage_lines(spec: &Spec) -> String {
    if spec.additions.is_empty() {
        spec.synopsis.to_string()
    } else {
        format!("{}\n{ADDS}{}", spec.synopsis, spec.additions)
    }
}

/// The usage a bad command line prints: `usage: ` and [`usage_lines`].
pub fn usage(spec: &Spec) -> String {
    format!("usage: {}", usage_lines(spec))
}

/// True if `args` asks for help: `-h` or `--help` anywhere.
pub fn help_asked(args: &[OsString]) -> bool {
    args.iter().any(|a| a == "--help" || a == "-h")
}

/// The `--help` of a classic command: the classic usage line (`usage:
/// SYNOPSIS`), its text and its options, all from its table.
pub fn help(spec: &Spec) -> String {
    command(spec)
        .help_template("usage: {usage}\n\n{about-with-newline}\n{all-args}{after-help}")
        .render_long_help()
        .to_string()
}

/// Options with values by letter, then the operands: the prf commands'
/// command line, whose options all take a value.
#[derive(Debug, Default)]
pub struct Opts {
    /// `(letter, value)` for each option given.
    pub values: Vec<(char, String)>,
    /// The operands after the options.
    pub operands: Vec<String>,
}

impl Opts {
    /// Parse `args` by `spec`; Err(why) on a bad command line.
    pub fn parse(spec: &Spec, args: Vec<OsString>) -> Result<Opts, String> {
        let mut values = Vec::new();
        let operands = parse(spec, args, |o, v| {
            if let (Some(c), Some(v)) = (o.short, v) {
                values.push((c, v.to_string_lossy().into_owned()));
            }
            Ok(())
        })?;
        Ok(Opts {
            values,
            operands: operands
                .into_iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        })
    }

    /// The value of option `letter`, if given (the last one wins).
    pub fn get(&self, letter: char) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(l, _)| *l == letter)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static SPEC: Spec = Spec {
        name: "t",
        synopsis: "t [-ab] [-m mod]... [--long v] [--flag] [cmd arg ...]",
        additions: "",
        about: "A test.",
        longs: Longs::Any,
        opts: &[
            Opt::flag('a', "A"),
            Opt::flag('b', "B"),
            Opt::value('m', "mod", "M").repeat(),
            Opt::value('p', "pid", "P").missing("missing process id after -p"),
            Opt::long("long", "v", "L"),
            Opt::long_flag("flag", "F"),
        ],
        operands: &[Operand::command("C")],
        after_help: "",
    };

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// The options given, as `id=value`, and the operands.
    fn run(spec: &Spec, v: &[&str]) -> Result<(Vec<String>, Vec<OsString>), String> {
        let mut seen = Vec::new();
        let operands = parse(spec, os(v), |o, v| {
            seen.push(match v {
                Some(v) => format!("{}={}", o.id, v.to_string_lossy()),
                None => o.id.to_string(),
            });
            Ok(())
        })?;
        Ok((seen, operands))
    }

    #[test]
    fn getopt_rules() {
        let (seen, ops) = run(
            &SPEC,
            &[
                "-ab", "-mx", "-am", "y", "--long=1", "--long", "2", "--flag", "c", "-a",
            ],
        )
        .unwrap();
        assert_eq!(
            seen,
            ["a", "b", "m=x", "a", "m=y", "long=1", "long=2", "flag"]
        );
        assert_eq!(ops, ["c", "-a"]);
        let (seen, ops) = run(&SPEC, &["-a", "--", "-b"]).unwrap();
        assert_eq!((seen, ops), (vec!["a".to_string()], os(&["-b"])));
        let (seen, ops) = run(&SPEC, &["-", "-a"]).unwrap();
        assert_eq!((seen.len(), ops), (0, os(&["-", "-a"])));
        assert_eq!(run(&SPEC, &["-aq"]).unwrap_err(), "unknown option -q");
        assert_eq!(
            run(&SPEC, &["-am"]).unwrap_err(),
            "option -m needs an argument"
        );
        assert_eq!(
            run(&SPEC, &["-p"]).unwrap_err(),
            "missing process id after -p"
        );
        assert_eq!(
            run(&SPEC, &["--long"]).unwrap_err(),
            "option --long needs an argument"
        );
        for bad in ["--longer", "--flag=1", "--bogus", "--=x"] {
            assert_eq!(
                run(&SPEC, &[bad]).unwrap_err(),
                format!("unknown option {bad}")
            );
        }
    }

    #[test]
    fn named_longs_leave_other_dashes_to_the_letters() {
        static NAMED: Spec = Spec {
            longs: Longs::Named,
            ..SPEC
        };
        assert_eq!(run(&NAMED, &["--bogus"]).unwrap_err(), "unknown option --");
        assert_eq!(
            run(&NAMED, &["--longer"]).unwrap_err(),
            "unknown option --longer"
        );
        assert_eq!(run(&NAMED, &["--long=3"]).unwrap().0, ["long=3"]);
    }

    #[test]
    fn a_value_refused_is_reported_where_it_stands() {
        let e = parse(&SPEC, os(&["-m", "bad", "-q"]), |o, _| {
            if o.id == "m" {
                Err("bad module".into())
            } else {
                Ok(())
            }
        });
        assert_eq!(e.unwrap_err(), "bad module");
    }

    #[test]
    fn the_prf_commands_options_all_take_values() {
        static PRF: Spec = Spec {
            name: "prf",
            synopsis: "",
            additions: "",
            about: "",
            longs: Longs::Any,
            opts: &[Opt::value('f', "dev", "D"), Opt::value('u', "s", "U")],
            operands: &[],
            after_help: "",
        };
        let o = Opts::parse(&PRF, os(&["-f", "/x/prf1", "-u1", "log", "-n"])).unwrap();
        assert_eq!(o.get('f'), Some("/x/prf1"));
        assert_eq!(o.get('u'), Some("1"));
        assert_eq!(o.operands, ["log", "-n"]);
        assert!(Opts::parse(&PRF, os(&["-x"])).is_err());
        assert!(Opts::parse(&PRF, os(&["-f"])).is_err());
        assert!(Opts::parse(&PRF, os(&["--bogus"])).is_err());
        let o = Opts::parse(&PRF, os(&["--", "-f"])).unwrap();
        assert_eq!(
            (o.get('f'), &o.operands[..]),
            (None, &["-f".to_string()][..])
        );
        let o = Opts::parse(&PRF, os(&["-", "on"])).unwrap();
        assert_eq!(o.operands, ["-", "on"]);
        let o = Opts::parse(&PRF, os(&["-f", "a", "-f", "b"])).unwrap();
        assert_eq!(o.get('f'), Some("b"));
    }

    /// Every classic table: its clap command is well formed, lists each
    /// option, and the parser takes each one (a value given `5`) and
    /// refuses every other letter.
    #[test]
    fn the_parser_takes_exactly_the_documented_options() {
        for spec in crate::args::ALL.iter().copied() {
            let cmd = command(spec);
            cmd.clone().debug_assert();
            assert!(help(spec).starts_with(&format!("{}\n", usage(spec))));
            assert!(usage(spec).starts_with(&format!("usage: {}", spec.synopsis)));
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
