//! One convention for the commands that run CMD (issue 25, items 1, 7, 8):
//!
//! * a report never goes into CMD's standard output: with CMD, prof,
//!   cprof, mprof and sample write it to standard error or to the file
//!   asked for (`-o FILE`, sample's `--report FILE`), gmon writes nothing
//!   there at all; `-o -` is the old stream, standard output;
//! * the exit status with CMD is CMD's when CMD failed, else 0 when a
//!   report was shown; a usage error of prof, cprof, mprof exits 2, with
//!   the classic usage line and a second one listing profdev's additions;
//!   `profdev help CMD` is CMD's help; cprof says it was interrupted as
//!   the others do;
//! * `-H` heads the tables with their columns' names, rows unchanged.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A program that copies the file it is given to standard output, keeps
/// 100 bytes it never frees, and spins for `argv[2]` seconds of CPU time.
const PROG: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

int main(int argc, char **argv)
{
    FILE *f = fopen(argv[1], "r");
    if (!f)
        return 2;
    char *buf = malloc(4096);
    size_t n;
    while ((n = fread(buf, 1, 4096, f)) > 0)
        fwrite(buf, 1, n, stdout);
    free(buf);
    char *kept = malloc(100);
    sink = (unsigned long)kept;
    double cpu = argc > 2 ? atof(argv[2]) : 0;
    while ((double)clock() / CLOCKS_PER_SEC < cpu)
        for (int i = 0; i < 100000; i++)
            sink = sink * 6364136223846793005UL + 1;
    return 0;
}
"#;

/// The input the programs copy.
const TEXT: &str = "one\ntwo\nthree: not a report\n";

/// A directory with `input.txt` and, built from [`PROG`], `prog`.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempdir();
    let input = d.path().join("input.txt");
    std::fs::write(&input, TEXT).unwrap();
    let src = d.path().join("prog.c");
    std::fs::write(&src, PROG).unwrap();
    let exe = d.path().join("prog");
    let o = Command::new("cc")
        .args(["-g", "-O0", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc runs");
    assert!(o.status.success(), "cc: {o:?}");
    (d, input, exe)
}

/// `profdev ARGS` in `dir`, its standard output going to the file `out`
/// (as `> OUT` in a shell); the status and standard error.
fn into_file(dir: &Path, args: &[&std::ffi::OsStr], out: &Path) -> Output {
    profdev()
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out).unwrap())
        .output()
        .expect("profdev runs")
}

fn os(v: &[&str]) -> Vec<std::ffi::OsString> {
    v.iter().map(Into::into).collect()
}

/// `profdev CMD -- cat FILE > OUT` leaves OUT a copy of FILE, for every
/// command that runs a program.
#[test]
fn cat_through_every_command_leaves_its_output_alone() {
    if !ready("reports beside CMD's output", &["cc"]) {
        return;
    }
    let (d, input, _) = setup();
    let i = input.to_str().unwrap();
    let cases: Vec<Vec<std::ffi::OsString>> = vec![
        os(&["prof", "-f", "--", "cat", i]),
        os(&["cprof", "--", "cat", i]),
        os(&["mprof", "--", "cat", i]),
        os(&["sample", "-F", "100", "-o", "kp", "--", "cat", i]),
        os(&["gmon", "-o", "gmon.out", "--", "cat", i]),
    ];
    for args in cases {
        let out = d.path().join("out");
        let words: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let o = into_file(d.path(), &words, &out);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            TEXT,
            "{args:?} wrote into cat's output; stderr: {err}"
        );
        // cat succeeded: 0 when a report was shown (prof may sample
        // nothing of so short a run: then 1 with the classic line).
        if args[0] != "gmon" {
            let said_nothing = err.contains("no profile information");
            assert_eq!(
                o.status.code(),
                Some(i32::from(said_nothing)),
                "{args:?}: {err}"
            );
        }
    }
}

/// `-o R` (sample: `--report R`) holds the listing the old stream,
/// standard output (`-o -`), held after CMD's output; CMD's output alone
/// goes to standard output. R is written through profdev_safefile: a
/// symbolic link planted at R is replaced, not followed.
#[test]
fn o_writes_the_listing_stdout_used_to_hold() {
    if !ready("-o FILE", &["cc"]) {
        return;
    }
    let (d, input, exe) = setup();
    let (i, e) = (input.to_str().unwrap(), exe.to_str().unwrap());
    for cmd in ["cprof", "mprof"] {
        let r = d.path().join(format!("{cmd}.txt"));
        let victim = d.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        std::os::unix::fs::symlink(&victim, &r).unwrap();
        let out = d.path().join("out");
        let args = os(&[cmd, "-e", "-o", r.to_str().unwrap(), "--", e, i]);
        let words: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let o = into_file(d.path(), &words, &out);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{cmd}: {err}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), TEXT, "{cmd}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        let listing = std::fs::read_to_string(&r).unwrap();
        assert!(listing.starts_with("\nModule: prog("), "{cmd}: {listing}");
        assert!(
            !err.contains("\nModule: prog("),
            "{cmd}: the listing went to stderr too"
        );
        // The old stream: CMD's output, then the same listing.
        let old = run(profdev()
            .args([cmd, "-e", "-o", "-", "--", e, i])
            .current_dir(d.path()));
        assert!(old.status.success(), "{cmd}");
        assert_eq!(
            String::from_utf8_lossy(&old.stdout),
            format!("{TEXT}{listing}"),
            "{cmd}"
        );
        // By default, the listing goes to standard error.
        let out = d.path().join("out2");
        let o = into_file(d.path(), &words_of(&[cmd, "-e", "--", e, i]), &out);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), TEXT, "{cmd}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(&listing),
            "{cmd}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // prof and sample: the listing is sampled, so not the same twice; the
    // file holds it and standard output only CMD's.
    let r = d.path().join("prof.txt");
    let out = d.path().join("out");
    let o = into_file(
        d.path(),
        &words_of(&["prof", "-f", "-o", r.to_str().unwrap(), "--", e, i, "0.3"]),
        &out,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), TEXT);
    let listing = std::fs::read_to_string(&r).unwrap();
    assert!(listing.contains("\tmain()\n"), "{listing}");
    assert!(
        listing.contains("**** module sampling points "),
        "{listing}"
    );
    let r = d.path().join("sample.txt");
    let o = into_file(
        d.path(),
        &words_of(&[
            "sample",
            "-F",
            "100",
            "-o",
            "kp",
            "--report",
            r.to_str().unwrap(),
            "--",
            e,
            i,
        ]),
        &out,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), TEXT);
    // The report's head, which kprof writes whatever was sampled (on a busy
    // machine the kernel text may get no tick at all: "kprof: no counts"
    // then stands where the rows would; and with no tick anywhere, the
    // totals line alone, as kprof's formatter has it for a zero total:
    // profdev_report's zero_total_prints_only_totals).
    let report = std::fs::read_to_string(&r).unwrap();
    let mut head = report.lines();
    let first = head.next().unwrap_or_default();
    assert!(first.starts_with("total: "), "{report}");
    if !first.starts_with("total: 0\t") {
        assert!(
            head.next().is_some_and(|l| l.starts_with("KTZERO ")),
            "{report}"
        );
    }
    assert!(!String::from_utf8_lossy(&o.stderr).contains("\nKTZERO "));
}

fn words_of<'a>(v: &[&'a str]) -> Vec<&'a std::ffi::OsStr> {
    v.iter().map(|w| std::ffi::OsStr::new(*w)).collect()
}

/// With CMD the status is CMD's when it failed, 0 when a report was
/// shown: `prof -- sh -c 'exit 3'` exits 3 (nothing sampled), `mprof --
/// /bin/true` 0, cprof 3.
#[test]
fn the_status_is_cmds() {
    if !privileged("exit status with CMD", can_sample_children()) {
        return;
    }
    for (args, want) in [
        (&["prof", "--", "sh", "-c", "exit 3"][..], 3),
        (&["mprof", "--", "/bin/true"][..], 0),
        (&["mprof", "--", "sh", "-c", "exit 3"][..], 3),
        (&["cprof", "-e", "--", "sh", "-c", "exit 3"][..], 3),
    ] {
        let o = run(profdev().args(args).stdin(Stdio::null()));
        assert_eq!(
            o.status.code(),
            Some(want),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// A bad command line of prof, cprof and mprof: `NAME: why`, the classic
/// usage line byte for byte, a second line of profdev's additions, exit
/// status 2 (as profdev's own commands); kprof and the prf commands keep
/// their spec's status.
#[test]
fn usage_errors_exit_2_with_the_classic_line_first() {
    for (cmd, classic, adds) in [
        (
            "prof",
            "usage: prof [-bflnv] [-m modname]... [-s rate] [cmd arg ...]",
            "[-eiH] [-F hz] [-o file] [--mmap-pages N]",
        ),
        (
            "cprof",
            "usage: cprof [-fner] [-m modname]... cmd [arg ... ]",
            "[-aqH] [-o file] [--lcov file] [--cobertura file] [--hits] [-p pid]",
        ),
        (
            "mprof",
            "usage: mprof [-bcMflnve] [-m modname]... [cmd arg ...]",
            "[-123H] [-o file] [--leaks] [--pprof file] [--dhat file] [--folded file] \
             [--folded-type alloc|inuse] [--no-stacks] [--sample-bytes n] [--temporary] [--peak] \
             [--wrapper symbol]... [-p pid [--snapshot seconds] [--scan]]",
        ),
    ] {
        let o = run(profdev().args([cmd, "-Q", "x"]));
        assert_eq!(o.status.code(), Some(2), "{cmd}");
        let err = String::from_utf8_lossy(&o.stderr);
        let want = format!("{cmd}: unknown option -Q\n{classic}\n       profdev adds: {adds}\n");
        assert!(err.starts_with(&want), "{cmd}: {err}");
        let help = run(profdev().args([cmd, "--help"]));
        let help = String::from_utf8_lossy(&help.stdout);
        assert!(
            help.starts_with(&format!("{classic}\n       profdev adds: {adds}\n")),
            "{help}"
        );
    }
    let o = run(profdev().args(["mprof", "--pprof"]));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--pprof file] [--dhat file]"),
        "mprof's usage lists --pprof and --dhat"
    );
    let o = run(profdev().args(["prof", "-F", "0", "x"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("prof: bad sample rate: '0'"));
    // profdev's own commands: 2 already; kprof: its spec's 1.
    assert_eq!(run(profdev().args(["sample", "-x"])).status.code(), Some(2));
    assert_eq!(run(profdev().args(["kprof", "x"])).status.code(), Some(1));
}

/// `profdev help CMD` prints what `profdev CMD --help` prints.
#[test]
fn help_cmd_is_the_commands_help() {
    for cmd in ["prof", "cprof", "mprof", "sample", "gmon", "kgmon", "prfpr"] {
        let help = run(profdev().args(["help", cmd]));
        let own = run(profdev().args([cmd, "--help"]));
        assert!(help.status.success(), "{cmd}");
        assert_eq!(
            String::from_utf8_lossy(&help.stdout),
            String::from_utf8_lossy(&own.stdout),
            "{cmd}"
        );
        assert!(!help.stdout.is_empty());
    }
    let o = run(profdev().args(["help", "nosuch"]));
    assert_eq!(o.status.code(), Some(2));
}

/// A signal that ends CMD: cprof says so in the one sentence prof, mprof,
/// sample and gmon say, and exits with 128 + the signal.
#[test]
fn cprof_says_interrupted() {
    if !profdev_testkit::tools("cprof interrupted", &["sh"]) {
        return;
    }
    // CMD signals profdev (its parent) and waits for the signal passed on.
    let o = run(with_default_signals(
        profdev()
            .args(["cprof", "--", "sh", "-c", "kill -TERM $PPID; sleep 30"])
            .stdin(Stdio::null()),
    ));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(128 + libc::SIGTERM), "{err}");
    assert!(
        err.lines().any(
            |l| l.starts_with("cprof: interrupted by SIGTERM; CMD's process group was ended; ")
        ),
        "{err}"
    );
}

/// `-H` heads the tables with their columns' names and changes no row.
#[test]
fn h_names_the_columns() {
    if !ready("-H", &["cc"]) {
        return;
    }
    let (d, input, exe) = setup();
    let (i, e) = (input.to_str().unwrap(), exe.to_str().unwrap());
    for (args, header) in [
        (&["cprof", "-f", "-e"][..], "line\tcount\tsource\n"),
        (&["cprof", "-n", "-e"][..], "file:line\tmark\tsource\n"),
        (
            &["mprof", "-l", "-e"][..],
            "line\tcurrent\thigh-water\tsource\n",
        ),
        (
            &["mprof", "-f", "-e"][..],
            "line\tcurrent\thigh-water\tfunction\n",
        ),
    ] {
        let listing = |h: bool| {
            let o = run(profdev()
                .args(args)
                .args(h.then_some("-H"))
                .args(["-o", "-", "--", e, i])
                .current_dir(d.path()));
            assert!(o.status.success(), "{args:?}");
            String::from_utf8(o.stdout).unwrap()
        };
        let (plain, headed) = (listing(false), listing(true));
        let at = headed
            .find(header)
            .unwrap_or_else(|| panic!("{args:?}: {headed}"));
        assert!(headed[..at].ends_with(")\n\n") || headed[..at].ends_with("coverage\n\n"));
        assert_eq!(
            format!("{}{}", &headed[..at], &headed[at + header.len()..]),
            plain,
            "{args:?}"
        );
    }
    let o = run(profdev()
        .args(["prof", "-H", "-f", "-l", "-o", "-", "--", e, i, "0.3"])
        .current_dir(d.path()));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(")\n\nline\t%time\tfunction\n") && out.contains("\nline\t%time\tsource\n"),
        "{out}"
    );
}

/// The man pages say it: an annotated example with `-H`, the stream in
/// BUGS, and mprof's `?` row.
#[test]
fn the_pages_explain_the_columns() {
    let src = |f: &str| {
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(f)).unwrap()
    };
    for f in ["prof.rs", "cprof.rs", "mprof.rs"] {
        let doc = src(f);
        assert!(doc.contains("-H"), "{f}");
        assert!(doc.contains("<- -H: the"), "{f}: an annotated example");
        let bugs = &doc[doc.find("//! # Bugs").expect(f)..];
        assert!(bugs.contains("Deviations from Inferno's"), "{f}");
        let flat = bugs.replace("\n//!   ", " ");
        assert!(flat.contains(" to standard error"), "{f}: the stream");
    }
    assert!(src("mprof.rs").contains("above the module total"));
}
