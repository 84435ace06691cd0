//! The classic commands' command lines, pinned: for each command named
//! after a classic tool (prof, cprof, mprof, kprof, kgmon and the prf
//! commands), its `--help`, and the message, usage line and exit status of
//! a bad option, a missing option argument and a bad operand, byte for
//! byte, in `tests/golden/classic_cmdline/CMD.txt` (PROFDEV_BLESS=1
//! rewrites them). Every case fails before the command does anything: no
//! device is mounted or started, no program runs, nothing is written.

mod common;

use common::{golden, profdev, run};
use std::path::Path;

/// Each case: the arguments after the command's name.
const CASES: &[(&str, &[&[&str]])] = &[
    (
        "prof",
        &[
            &["--help"],
            &["-h"],
            &["-q"],
            &["-fq"],
            &["--bogus"],
            &["--mmap-pagesx"],
            &["-m"],
            &["-s"],
            &["-fls"],
            &["--mmap-pages"],
            &["--mmap-pages", "3", "-x"],
            &["--mmap-pages=3x"],
            &["-s", "0"],
            &["-s", "x"],
            &["-s5x"],
            &["-s", "-1"],
            &["-e"],
            &["-e", "-m", "libc.so.6"],
            &["-e", "./no/such/program"],
            &["-bfe"],
        ],
    ),
    (
        "cprof",
        &[
            &["--help"],
            &["-h"],
            &["-q", "x"],
            &["--bogus", "x"],
            &["--lcovx", "x"],
            &["-m"],
            &["-fm"],
            &["-p"],
            &["--lcov"],
            &["--cobertura"],
            &["-p", "x"],
            &["-p", "0"],
            &["-p", "+5"],
            &["-p", "5", "./cmd"],
            &["-p5", "--", "./cmd"],
            &["-e"],
            &["-r"],
            &["-er"],
            &[],
            &["-f", "-n"],
            &["--lcov=x.info"],
            &["-m", "libnosuch.so"],
            &["-mlibnosuch.so", "-m/no/such/module"],
        ],
    ),
    (
        "mprof",
        &[
            &["--help"],
            &["-h"],
            &["-q"],
            &["-Mq"],
            &["--bogus"],
            &["--leaksx"],
            &["--pprofx"],
            &["--wrapperx"],
            &["-m"],
            &["-p"],
            &["--pprof"],
            &["--dhat"],
            &["--wrapper"],
            &["--wrapper", "a,b", "x"],
            &["--wrapper="],
            &["--wrapper", "a b"],
            &["-p", "x"],
            &["-p", "0"],
            &["-p", "+5"],
            &["-p", "5", "./cmd"],
            &["-b", "-p", "5"],
            &["-c", "-p5"],
            &["-e"],
            &["--pprof", "x.pb"],
            &["--dhat=x.json", "-l"],
            &["./no/such/program"],
            &["-e", "--", "./no/such/program"],
        ],
    ),
    (
        "kprof",
        &[
            &["--help"],
            &["-h"],
            &[],
            &["-x"],
            &["text"],
            &["a", "b", "c"],
            &["/no/such/text", "/no/such/data"],
        ],
    ),
    (
        "kgmon",
        &[
            &["--help"],
            &["-x"],
            &["--bogus"],
            &["-N"],
            &["-bN"],
            &["operand"],
            &["-b", "operand"],
        ],
    ),
    (
        "prfld",
        &[
            &["--help"],
            &["-h"],
            &["-x"],
            &["-f"],
            &["--bogus"],
            &["a", "b"],
            &["-f", "/no/such/device", "a", "b"],
            &["-f", "/no/such/device"],
        ],
    ),
    (
        "prfstat",
        &[
            &["--help"],
            &["-h"],
            &["-x"],
            &["-f"],
            &["--bogus"],
            &["-f", "/no/such/device"],
            &["-f", "/dev/null", "on"],
            &["-f", "../prf", "on", "off"],
            &["-f", "../prf", "maybe"],
        ],
    ),
    (
        "prfdc",
        &[
            &["--help"],
            &["-h"],
            &["-x"],
            &["-f"],
            &["-u"],
            &["-n"],
            &["--bogus"],
            &[],
            &["a", "1", "2", "3"],
            &["log", "0"],
            &["log", "x"],
            &["-u", "0", "log"],
            &["-n", "-1", "log"],
            &["-f", "/no/such/device", "/no/such/dir/log"],
        ],
    ),
    (
        "prfsnap",
        &[
            &["--help"],
            &["-h"],
            &["-x"],
            &["-f"],
            &["--bogus"],
            &[],
            &["a", "b"],
            &["-f", "/no/such/device", "log"],
        ],
    ),
    (
        "prfpr",
        &[
            &["--help"],
            &["-h"],
            &[],
            &["-x"],
            &["a", "b", "c", "d"],
            &["/no/such/log"],
            &["../prf", "x"],
            &["../prf", "-1"],
        ],
    ),
];

/// One run as text: the command line, the exit status, standard output
/// and standard error.
fn transcript(cmd: &str, args: &[&str], dir: &Path) -> String {
    let out = run(profdev()
        .arg(cmd)
        .args(args)
        .current_dir(dir)
        .env_remove("COLUMNS")
        .env_remove("LINES")
        .env_remove("PROFDEV_MOUNT")
        .env_remove("LD_PRELOAD")
        .stdin(std::process::Stdio::null()));
    let status = match out.status.code() {
        Some(c) => c.to_string(),
        None => format!("{:?}", out.status),
    };
    format!(
        "$ {cmd} {}\nstatus: {status}\n--- stdout\n{}--- stderr\n{}\n",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn classic_command_lines_are_byte_for_byte_as_pinned() {
    // The cases run in `work`; `../prf` is an empty regular file, which
    // the prf commands open as a device (and find empty) or a log.
    let dir = common::tempdir();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(dir.path().join("prf"), b"").unwrap();
    for (cmd, cases) in CASES {
        let mut text = String::new();
        for args in *cases {
            text.push_str(&transcript(cmd, args, &work));
        }
        golden(&format!("classic_cmdline/{cmd}.txt"), text.as_bytes());
    }
    assert!(
        std::fs::read_dir(&work).unwrap().next().is_none(),
        "a case left a file behind"
    );
}

/// The classic commands of the command table (`classic: true` in
/// main.rs), in its order.
fn classic_in_the_table() -> Vec<String> {
    let main =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/main.rs")).unwrap();
    let mut names = Vec::new();
    let mut name = None;
    for line in main.lines().map(str::trim) {
        if let Some(n) = line.strip_prefix("name: \"") {
            name = n.split('"').next().map(str::to_string);
        } else if line == "classic: true," {
            names.extend(name.take());
        }
    }
    names
}

#[test]
fn every_classic_command_is_pinned() {
    let mut pinned: Vec<&str> = CASES.iter().map(|(c, _)| *c).collect();
    let mut table = classic_in_the_table();
    pinned.sort_unstable();
    table.sort_unstable();
    assert_eq!(pinned, table);
}

/// Run through a link named after the command, as `ln -s profdev prof`
/// does, each command says the same.
#[test]
fn a_link_named_after_the_command_says_the_same() {
    let dir = common::tempdir();
    let link = dir.path().join("bin");
    std::fs::create_dir(&link).unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    for (cmd, cases) in CASES {
        let path = link.join(cmd);
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_profdev"), &path).unwrap();
        for args in cases.iter().take(4) {
            let via_link = run(std::process::Command::new(&path)
                .args(*args)
                .current_dir(&work)
                .env_remove("COLUMNS")
                .env_remove("PROFDEV_MOUNT")
                .stdin(std::process::Stdio::null()));
            let via_profdev = run(profdev()
                .arg(cmd)
                .args(*args)
                .current_dir(&work)
                .env_remove("COLUMNS")
                .env_remove("PROFDEV_MOUNT")
                .stdin(std::process::Stdio::null()));
            assert_eq!(
                (via_link.status.code(), &via_link.stdout, &via_link.stderr),
                (
                    via_profdev.status.code(),
                    &via_profdev.stdout,
                    &via_profdev.stderr
                ),
                "{cmd} {args:?}"
            );
        }
    }
}
