//! cprof as a new user meets it (issue 25, items 2 and 6): a `-g`
//! library installed as its soname link pair is listed and counted
//! exactly; a small program's listing is short and its notes one line
//! per kind; an export that cannot be written is refused before CMD runs.

mod common;

use common::{profdev, run, tempdir};
use std::path::Path;
use std::process::{Command, Output};

const LIB: &str = "int sq(int x)
{
    int r = 0;
    for (int i = 0; i < x; i++)
        r += x;
    return r;
}

int never(void)
{
    return 42;
}
";

const MAIN: &str = "#include <stdio.h>
int sq(int x);
int main(void)
{
    int s = 0;
    for (int i = 0; i < 5; i++)
        s += sq(i);
    printf(\"s %d\\n\", s);
    return 0;
}
";

fn cc(dir: &Path, args: &[&str]) {
    let out = Command::new("cc")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("cc runs");
    assert!(out.status.success(), "cc {args:?}: {out:?}");
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The `-f` rows of source file `file` in a listing: line -> mark.
fn rows(listing: &str, module: &str) -> Vec<(u32, String)> {
    let at = listing
        .find(&format!("Module: {module}("))
        .unwrap_or_else(|| panic!("no module {module} in\n{listing}"));
    let body = &listing[at..];
    let body = &body[..body.find("\n**** module").unwrap_or(body.len())];
    body.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            let n = f.next()?.parse().ok()?;
            Some((n, f.next()?.to_string()))
        })
        .collect()
}

/// `libsq.so.1.0.0` (soname `libsq.so.1`, `-g -O0`), installed in `dir`
/// as libraries are: `libsq.so.1 -> libsq.so.1.0.0`, `libsq.so ->
/// libsq.so.1`; and `prog`, linked to it, finding it through its rpath.
fn soname_pair(dir: &Path) {
    std::fs::write(dir.join("sq.c"), LIB).unwrap();
    std::fs::write(dir.join("main.c"), MAIN).unwrap();
    cc(
        dir,
        &[
            "-g",
            "-O0",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libsq.so.1",
            "-o",
            "libsq.so.1.0.0",
            "sq.c",
        ],
    );
    std::os::unix::fs::symlink("libsq.so.1.0.0", dir.join("libsq.so.1")).unwrap();
    std::os::unix::fs::symlink("libsq.so.1", dir.join("libsq.so")).unwrap();
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    cc(
        dir,
        &["-g", "-O0", "-o", "prog", "main.c", "-L.", "-lsq", &rpath],
    );
}

/// The library's `-f` counts at -O0: `sq` entered 5 times (i = 0..4),
/// its loop body 0+1+2+3+4 = 10 times, its `for` line's init, test and
/// increment 5, 15 and 10 times; `never` never.
const COUNTS: &[(u32, &str)] = &[
    (2, "5"),
    (3, "5"),
    (4, "5|15|10"),
    (5, "10"),
    (6, "5"),
    (7, "5"),
    (10, "0"),
    (11, "0"),
    (12, "0"),
];

fn check_counts(rows: &[(u32, String)], listing: &str) {
    for &(line, want) in COUNTS {
        let got = rows.iter().find(|r| r.0 == line).map(|r| r.1.as_str());
        assert_eq!(got, Some(want), "line {line} of sq.c in\n{listing}");
    }
    for line in [1, 8, 9] {
        let got = rows.iter().find(|r| r.0 == line).map(|r| r.1.as_str());
        assert_eq!(got, Some(" "), "line {line} has no code, in\n{listing}");
    }
}

#[test]
fn a_library_reached_through_its_soname_link_is_counted() {
    if !profdev_testkit::tools("cprof on a soname link", &["cc"]) {
        return;
    }
    let tmp = tempdir();
    let dir = tmp.path();
    soname_pair(dir);
    let out = run(profdev()
        .current_dir(dir)
        .args([
            "cprof",
            "-o",
            "-",
            "-f",
            "-m",
            "libsq.so.1",
            "--lcov",
            "sq.info",
            "--",
        ])
        .arg(dir.join("prog")));
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("symbolic link"), "{stderr}");
    assert!(stdout.contains("s 30\n"), "the program ran: {stdout}");
    let header = format!(
        "\nModule: libsq.so.1({})\t",
        dir.join("libsq.so.1").display()
    );
    assert!(stdout.contains(&header), "{stdout}{stderr}");
    check_counts(&rows(&stdout, "libsq.so.1"), &stdout);

    // The lcov tracefile: the same counts, the functions, the loop's jump.
    let info = std::fs::read_to_string(dir.join("sq.info")).unwrap();
    let src = format!("SF:{}\n", dir.join("sq.c").display());
    let at = info.find(&src).unwrap_or_else(|| panic!("{info}"));
    let record = &info[at..at + info[at..].find("end_of_record").unwrap()];
    for da in [
        "DA:2,5\n",
        "DA:3,5\n",
        "DA:4,15\n",
        "DA:5,10\n",
        "DA:6,5\n",
        "DA:7,5\n",
        "DA:10,0\n",
        "DA:12,0\n",
        "FNDA:5,sq\n",
        "FNDA:0,never\n",
        "BRDA:4,0,0,10\nBRDA:4,0,1,5\n",
    ] {
        assert!(record.contains(da), "{da:?} not in\n{record}");
    }

    // Recorded (-r), then shown from the records: the same counts, the
    // header naming the file the link led to.
    let out = run(profdev()
        .current_dir(dir)
        .args(["cprof", "-r", "-m", "libsq.so.1", "--"])
        .arg(dir.join("prog")));
    assert!(out.status.success(), "{}", text(&out).1);
    let out = run(profdev()
        .current_dir(dir)
        .args(["cprof", "-f", "-m", "libsq.so.1"]));
    let (shown, err) = text(&out);
    assert!(out.status.success(), "{err}");
    check_counts(&rows(&shown, "libsq.so.1.0.0"), &shown);
}

/// The issue's small program: a listing of a few hundred lines at most
/// with every module counted, its own lines among them, and at most four
/// notes.
#[test]
fn a_small_program_is_listed_in_few_lines() {
    if !profdev_testkit::tools("cprof on a small program", &["cc"]) {
        return;
    }
    let tmp = tempdir();
    let dir = tmp.path();
    std::fs::write(
        dir.join("small.c"),
        "#include <stdio.h>\nint main(void)\n{ puts(\"hello, small\"); return 0; }\n",
    )
    .unwrap();
    cc(dir, &["-g", "-O0", "-o", "small", "small.c"]);
    let out = run(profdev()
        .current_dir(dir)
        .args(["cprof", "-o", "-", "--", "./small"]));
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(all.contains("hello, small\n"), "{all}");
    let lines = all.lines().count();
    assert!(lines < 400, "{lines} lines:\n{all}");
    let notes: Vec<&str> = stderr.lines().filter(|l| l.starts_with("cprof:")).collect();
    assert!(notes.len() <= 4, "{notes:#?}");
    assert!(
        stdout.contains("Module: "),
        "-o - lists on stdout: {stdout}"
    );
    assert!(stderr.lines().count() <= 4, "{stderr}");
    // Its own lines, with their text; the C library's header and totals.
    assert!(
        all.contains("3\t+\t{ puts(\"hello, small\"); return 0; }\n"),
        "{all}"
    );
    assert!(all.contains("\nModule: libc.so.6("), "{all}");
    // -q: no notes.
    let out = run(profdev()
        .current_dir(dir)
        .args(["cprof", "-o", "-", "-q", "--", "./small"]));
    assert!(out.status.success());
    let (_, stderr) = text(&out);
    assert!(!stderr.lines().any(|l| l.starts_with("cprof:")), "{stderr}");
}

/// Source files that are gone: no rows by default and one note for
/// them all; `-a` lists their lines without text.
#[test]
fn files_not_found_are_one_note_and_listed_only_with_a() {
    if !profdev_testkit::tools("cprof on missing sources", &["cc"]) {
        return;
    }
    let tmp = tempdir();
    let dir = tmp.path();
    let mut main = String::new();
    let mut args = vec!["-g", "-O0", "-o", "prog", "main.c"];
    let names: Vec<String> = (1..=5).map(|i| format!("f{i}.c")).collect();
    for (i, name) in names.iter().enumerate() {
        std::fs::write(
            dir.join(name),
            format!("int f{i}(int x)\n{{\n    return x + {i};\n}}\n"),
        )
        .unwrap();
        main.push_str(&format!("int f{i}(int);\n"));
        args.push(name);
    }
    main.push_str("int main(void)\n{\n    return f0(0) + f1(-1) + f2(-2) + f3(-3) + f4(-4);\n}\n");
    std::fs::write(dir.join("main.c"), main).unwrap();
    cc(dir, &args);
    for name in &names {
        std::fs::remove_file(dir.join(name)).unwrap();
    }
    let out = run(profdev()
        .current_dir(dir)
        .args(["cprof", "-o", "-", "-f", "-e", "./prog"]));
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(!stdout.contains("f1.c"), "{stdout}");
    assert!(
        stdout.contains(&format!("{}:\n", dir.join("main.c").display())),
        "main.c is listed, headed: {stdout}"
    );
    assert_eq!(
        stderr,
        format!(
            "cprof: 5 source files not found, their lines not listed (-a lists them): {}, {}, \
             {} and 2 more\n",
            dir.join("f1.c").display(),
            dir.join("f2.c").display(),
            dir.join("f3.c").display()
        )
    );
    let out = run(profdev()
        .current_dir(dir)
        .args(["cprof", "-o", "-", "-f", "-a", "-e", "./prog"]));
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let f1 = format!("{}:\n2\t1\n3\t1\n4\t1\n", dir.join("f1.c").display());
    assert!(stdout.contains(&f1), "{f1:?} in {stdout}");
    assert!(
        stderr.starts_with("cprof: 5 source files not found, listed as line numbers only: "),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let out = run(profdev()
        .current_dir(dir)
        .args(["cprof", "-o", "-", "-q", "-f", "-e", "./prog"]));
    assert!(out.status.success());
    assert_eq!(text(&out).1, "", "-q says nothing");
}

/// `--lcov` (or `--cobertura`) into a directory that does not exist:
/// one sentence, a failure, and CMD never runs.
#[test]
fn an_export_that_cannot_be_written_is_refused_before_cmd_runs() {
    let tmp = tempdir();
    let ran = tmp.path().join("ran");
    for option in ["--lcov", "--cobertura"] {
        let out = run(profdev().args([
            "cprof",
            option,
            "/nonexistent/x",
            "--",
            "sh",
            "-c",
            &format!("echo > {}", ran.display()),
        ]));
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "{stdout}{stderr}");
        assert!(!ran.exists(), "CMD ran");
        assert_eq!(stdout, "");
        assert!(
            stderr.starts_with(&format!("cprof: cannot write /nonexistent/x ({option}): ")),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "one sentence: {stderr}");
    }
}
