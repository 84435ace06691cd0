//! `profdev`: the classic profiling devices on modern Linux.
//!
//! One binary; each subcommand is named after the classic tool it brings
//! back and lives in a module of its own. A subcommand can also be run
//! through a link named after it (`ln -s profdev kprof`).
//!
//! **Where `unsafe` lives, and why.** Only in the two prf commands that
//! act on the prf device directly, as the classic tools did: `prfdev`
//! issues the device's by-value ioctls, clears O_NONBLOCK with fcntl and
//! formats times with the C library's localtime_r (the zone the classic
//! output used); `prfdc` forks into the background and calls setsid and
//! dup2. Every other command is safe code over the library crates.

mod child;
mod cmdline;
mod export;
mod gmon;
mod kgmon;
mod kprof;
mod malloc;
mod mount;
mod output;
mod prfdc;
mod prfdev;
mod prfld;
mod prfpr;
mod prfsnap;
mod prfstat;
mod prof;
mod record;
mod sample;
mod unmount;

use std::ffi::OsString;
use std::process::ExitCode;

/// A subcommand: its name, one line of help, and its entry point, which
/// gets the arguments after the name and returns the exit status.
struct Command {
    name: &'static str,
    about: &'static str,
    run: fn(Vec<OsString>) -> ExitCode,
}

/// The command table: adding a subcommand is one line here.
const COMMANDS: &[Command] = &[
    Command {
        name: "sample",
        about: "run a command with kernel profiling on; write kpdata and print the kprof table",
        run: sample::main,
    },
    Command {
        name: "kgmon",
        about: "control kernel call-graph profiling; dump gmon.out for gprof (NetBSD kgmon)",
        run: kgmon::main,
    },
    Command {
        name: "gmon",
        about: "run a command and write a gmon.out for gprof, without -pg",
        run: gmon::main,
    },
    Command {
        name: "prof",
        about: "profile a command's modules by function and source line (Inferno prof)",
        run: prof::main,
    },
    Command {
        name: "record",
        about: "sample a command, processes or the system, with stacks (-g), into one recording",
        run: record::main,
    },
    Command {
        name: "export",
        about: "write a recording as folded, svg, pprof, firefox, perf-script, gmon, kpdata or proc-profile",
        run: export::main,
    },
    Command {
        name: "kprof",
        about: "format a kpdata histogram against kernel symbols (Inferno kprof)",
        run: kprof::main,
    },
    Command {
        name: "mount",
        about: "serve the devices as files on DIR (default /run/profdev)",
        run: mount::main,
    },
    Command {
        name: "unmount",
        about: "unmount the device server at DIR (default /run/profdev)",
        run: unmount::main,
    },
    Command {
        name: "prfld",
        about: "load the prf profiler with the kernel's text addresses (profiler(1M))",
        run: prfld::main,
    },
    Command {
        name: "prfstat",
        about: "switch the prf profiler on or off and report its state",
        run: prfstat::main,
    },
    Command {
        name: "prfdc",
        about: "collect prf counters into a log every period, in the background",
        run: prfdc::main,
    },
    Command {
        name: "prfsnap",
        about: "append a snapshot of the prf counters to a log",
        run: prfsnap::main,
    },
    Command {
        name: "prfpr",
        about: "print a prf log: each kernel function's share of the ticks",
        run: prfpr::main,
    },
];

fn usage() -> String {
    let mut s = String::from("usage: profdev COMMAND [ARGS]\n\ncommands:\n");
    for c in COMMANDS {
        s.push_str(&format!("  {:<10} {}\n", c.name, c.about));
    }
    s.push_str("\n'profdev COMMAND --help' describes each command.\n");
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
