//! `profdev`: the classic profiling devices on modern Linux.
//!
//! One binary; each subcommand is named after the classic tool it brings
//! back and lives in a module of its own. A subcommand can also be run
//! through a link named after it (`ln -s profdev kprof`).
//!
//! **Where `unsafe` lives, and why.** In the two prf commands that act on
//! the prf device directly, as the classic tools did: `prfdev` issues the
//! device's by-value ioctls, clears O_NONBLOCK with fcntl and formats
//! times with the C library's localtime_r (the zone the classic output
//! used); `prfdc` forks into the background and calls setsid and dup2.
//! Beside them, `malloc` tunes glibc's allocator for the server
//! (mallopt, malloc_trim). Every other command is safe code over the
//! library crates.

mod agent;
mod bar;
mod child;
mod classic;
mod cmdline;
mod completions;
mod cprof;
mod export;
mod gmon;
mod kgmon;
mod kprof;
mod malloc;
mod man;
mod mount;
mod mprof;
mod output;
mod prfdc;
mod prfdev;
mod prfld;
mod prfpr;
mod prfsnap;
mod prfstat;
mod prof;
mod progress;
mod record;
mod report;
mod sample;
mod stat;
mod top;
mod topui;
mod unmount;

use std::ffi::OsString;
use std::process::ExitCode;

/// A subcommand: its name, one line of help, and its entry point, which
/// gets the arguments after the name and returns the exit status.
struct Command {
    name: &'static str,
    about: &'static str,
    run: fn(Vec<OsString>) -> ExitCode,
    /// Its command line as data (options, operands, usage): `--help`, the
    /// man page's SYNOPSIS and OPTIONS and the completions all come from
    /// it (see `man`, `completions`).
    cli: fn() -> clap::Command,
    /// Its module's source: the `//!` doc is the man page's DESCRIPTION and
    /// the sections after it.
    doc: &'static str,
    /// Named after a classic tool (kprof, prfpr...): also run, and
    /// completed, through a link of that name (`ln -s profdev kprof`).
    classic: bool,
}

/// The command table: adding a subcommand is one line here.
const COMMANDS: &[Command] = &[
    Command {
        name: "sample",
        about: "run a command with kernel profiling on; write kpdata and print the kprof table",
        run: sample::main,
        cli: <sample::Args as clap::CommandFactory>::command,
        doc: include_str!("sample.rs"),
        classic: false,
    },
    Command {
        name: "kgmon",
        about: "control kernel call-graph profiling; dump gmon.out for gprof (NetBSD kgmon)",
        run: kgmon::main,
        cli: <kgmon::Args as clap::CommandFactory>::command,
        doc: include_str!("kgmon.rs"),
        classic: true,
    },
    Command {
        name: "gmon",
        about: "run a command and write a gmon.out for gprof, without -pg",
        run: gmon::main,
        cli: <gmon::Args as clap::CommandFactory>::command,
        doc: include_str!("gmon.rs"),
        classic: false,
    },
    Command {
        name: "prof",
        about: "profile a command's modules by function and source line (Inferno prof)",
        run: prof::main,
        cli: prof::command,
        doc: include_str!("prof.rs"),
        classic: true,
    },
    Command {
        name: "record",
        about: "sample a command, processes or the system, with stacks (-g), into one recording",
        run: record::main,
        cli: <record::Args as clap::CommandFactory>::command,
        doc: include_str!("record.rs"),
        classic: false,
    },
    Command {
        name: "agent",
        about: "profile the whole machine continuously; send a profile per interval to OTLP, Pyroscope or Parca",
        run: agent::main,
        cli: <agent::Args as clap::CommandFactory>::command,
        doc: include_str!("agent.rs"),
        classic: false,
    },
    Command {
        name: "report",
        about: "print a recording's samples by command, process, thread, object and function",
        run: report::main,
        cli: <report::Args as clap::CommandFactory>::command,
        doc: include_str!("report.rs"),
        classic: false,
    },
    Command {
        name: "export",
        about: "write a recording as folded, svg, pprof, firefox, perf-script, gmon, kpdata, proc-profile or otlp",
        run: export::main,
        cli: <export::Args as clap::CommandFactory>::command,
        doc: include_str!("export.rs"),
        classic: false,
    },
    Command {
        name: "mprof",
        about: "count a command's allocations exactly: bytes per source line, function and module (Inferno mprof)",
        run: mprof::main,
        cli: mprof::command,
        doc: include_str!("mprof.rs"),
        classic: true,
    },
    Command {
        name: "cprof",
        about: "count a command's (or a running process's) instructions exactly: lines run, never run, partly run (Inferno cprof)",
        run: cprof::main,
        cli: cprof::command,
        doc: include_str!("cprof.rs"),
        classic: true,
    },
    Command {
        name: "kprof",
        about: "format a kpdata histogram against kernel symbols (Inferno kprof)",
        run: kprof::main,
        cli: kprof::command,
        doc: include_str!("kprof.rs"),
        classic: true,
    },
    Command {
        name: "mount",
        about: "serve the devices as files on DIR (default /run/profdev)",
        run: mount::main,
        cli: <mount::Args as clap::CommandFactory>::command,
        doc: include_str!("mount.rs"),
        classic: false,
    },
    Command {
        name: "stat",
        about: "print every device's health from DIR/stat (default /run/profdev)",
        run: stat::main,
        cli: <stat::Args as clap::CommandFactory>::command,
        doc: include_str!("stat.rs"),
        classic: false,
    },
    Command {
        name: "top",
        about: "show the functions the machine runs, live, by share of the samples (perf top)",
        run: top::main,
        cli: <top::Args as clap::CommandFactory>::command,
        doc: include_str!("top.rs"),
        classic: false,
    },
    Command {
        name: "unmount",
        about: "unmount the device server at DIR (default /run/profdev)",
        run: unmount::main,
        cli: <unmount::Args as clap::CommandFactory>::command,
        doc: include_str!("unmount.rs"),
        classic: false,
    },
    Command {
        name: "prfld",
        about: "load the prf profiler with the kernel's text addresses (profiler(1M))",
        run: prfld::main,
        cli: prfld::command,
        doc: include_str!("prfld.rs"),
        classic: true,
    },
    Command {
        name: "prfstat",
        about: "switch the prf profiler on or off and report its state",
        run: prfstat::main,
        cli: prfstat::command,
        doc: include_str!("prfstat.rs"),
        classic: true,
    },
    Command {
        name: "prfdc",
        about: "collect prf counters into a log every period, in the background",
        run: prfdc::main,
        cli: prfdc::command,
        doc: include_str!("prfdc.rs"),
        classic: true,
    },
    Command {
        name: "prfsnap",
        about: "append a snapshot of the prf counters to a log",
        run: prfsnap::main,
        cli: prfsnap::command,
        doc: include_str!("prfsnap.rs"),
        classic: true,
    },
    Command {
        name: "prfpr",
        about: "print a prf log: each kernel function's share of the ticks",
        run: prfpr::main,
        cli: prfpr::command,
        doc: include_str!("prfpr.rs"),
        classic: true,
    },
    Command {
        name: "man",
        about: "write the man pages (sections 1, 3, 4, 5) under DIR/man1 ... DIR/man5",
        run: man::main,
        cli: <man::Args as clap::CommandFactory>::command,
        doc: include_str!("man.rs"),
        classic: false,
    },
    Command {
        name: "completions",
        about: "print shell completions (bash, zsh, fish) for profdev and the classic names",
        run: completions::main,
        cli: <completions::Args as clap::CommandFactory>::command,
        doc: include_str!("completions.rs"),
        classic: false,
    },
];

fn usage() -> String {
    let mut s = String::from("usage: profdev COMMAND [ARGS]\n\ncommands:\n");
    for c in COMMANDS {
        s.push_str(&format!("  {:<10} {}\n", c.name, c.about));
    }
    s.push_str("\n'profdev help COMMAND' (or 'profdev COMMAND --help') describes each command.\n");
    s
}

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let argv0 = args
        .first()
        .map(std::path::Path::new)
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("profdev")
        .to_string();
    let name = if let Some(c) = COMMANDS.iter().find(|c| c.name == argv0) {
        args.remove(0);
        c.name.to_string()
    } else {
        args.remove(0);
        if args.is_empty() {
            eprint!("{}", usage());
            return ExitCode::from(2);
        }
        args.remove(0).to_string_lossy().into_owned()
    };
    if name == "help" && !args.is_empty() {
        // `profdev help CMD`: CMD's own help, as `profdev CMD --help`.
        let cmd = args.remove(0);
        return match COMMANDS.iter().find(|c| cmd == c.name) {
            Some(c) => (c.run)(vec!["--help".into()]),
            None => {
                eprintln!(
                    "profdev: unknown command \"{}\"; 'profdev --help' lists them",
                    cmd.to_string_lossy()
                );
                ExitCode::from(2)
            }
        };
    }
    match name.as_str() {
        "-h" | "--help" | "help" => {
            print!("{}", usage());
            return ExitCode::SUCCESS;
        }
        "-V" | "--version" => {
            println!("profdev {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    match COMMANDS.iter().find(|c| c.name == name) {
        Some(c) => (c.run)(args),
        None => {
            eprintln!("profdev: unknown command \"{name}\"; 'profdev --help' lists them");
            ExitCode::from(2)
        }
    }
}
