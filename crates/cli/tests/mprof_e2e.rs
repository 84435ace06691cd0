//! `profdev mprof` end to end: programs with known allocations at known
//! lines (tests/data/mprof), compiled here, run under mprof; the tables and
//! the leaks must show exactly those bytes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/mprof")
        .join(name)
}

fn compile(compiler: &str, args: &[&str], src: &str, out: &Path) {
    let status = Command::new(compiler)
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(data(src))
        .status()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(status.success(), "{compiler} failed on {src}");
}

fn mprof(args: &[&str], cmd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-o", "-"])
        .args(args)
        .arg(cmd)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "mprof failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// The rows of module `name`'s section (up to its blank line).
fn section<'a>(out: &'a str, name: &str) -> Vec<&'a str> {
    let start = out
        .find(&format!("\nModule: {name}("))
        .unwrap_or_else(|| panic!("no module {name} in:\n{out}"));
    out[start..]
        .lines()
        .skip(3)
        .take_while(|l| !l.is_empty())
        .collect()
}

/// The first three tab-separated columns of each row.
fn numbers(rows: &[&str]) -> Vec<String> {
    rows.iter()
        .map(|r| r.split('\t').take(3).collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn known_sizes_at_known_lines() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("known");
    compile("cc", &["-g", "-O0", "-pthread"], "known.c", &exe);
    let out = stdout(&mprof(&["-l", "-M", "--leaks"], &exe));
    // 13: two threads, 256 x 4 KiB each, all live at the barrier, all freed.
    // 23: 1000 x 100, 600 freed. 26: 64 KiB never freed. 28: 10 bytes,
    // realloc'd (freed) at 29, which grew it to 10000 and freed it.
    assert_eq!(
        numbers(&section(&out, "known")),
        [
            "13 0 2097152",
            "23 40000 100000",
            "26 65536 65536",
            "28 0 10",
            "29 0 10000"
        ],
        "{out}"
    );
    // The module's own high water: 40000 + 65536 live when both threads
    // held their MiB.
    assert!(out.contains("Module totals\t105536\t2202688\n"), "{out}");
    assert!(section(&out, "known")[1]
        .ends_with("blocks[i] = malloc(100); /* line 23: 1000 x 100, 600 freed */"));
    let src = data("known.c").canonicalize().unwrap();
    let leaks = format!(
        "bytes\tblocks\tsite\tfunction\n65536\t1\t{0}:26\tmain()\n40000\t400\t{0}:23\tmain()\n",
        src.display()
    );
    assert!(out.contains(&leaks), "{out}");
    // -f: the thread's and main's bytes.
    let out = stdout(&mprof(&["-f", "-e"], &exe));
    assert_eq!(
        numbers(&section(&out, "known")),
        ["9 0 2097152", "20 105536 175546"],
        "{out}"
    );
}

#[test]
fn cplusplus_new_is_charged_to_the_users_line() {
    if !profdev_testkit::tools("mprof's C++ test", &["g++"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("newt");
    compile("g++", &["-g", "-O0"], "new.cpp", &exe);
    let out = stdout(&mprof(&["-l", "-e"], &exe));
    assert_eq!(
        numbers(&section(&out, "newt")),
        ["9 1000 1000", "12 0 560"],
        "{out}"
    );
    assert!(!out.contains("libstdc++"), "{out}");
}

/// At -O0 `new std::vector<int>(25000)` allocates in the allocator
/// template of bits/new_allocator.h, instantiated in the program: system
/// code, walked past to the user's line (module totals unchanged).
#[test]
fn a_vector_made_in_system_headers_is_charged_to_the_users_line() {
    if !profdev_testkit::tools("mprof's C++ test", &["g++"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("vector");
    compile("g++", &["-g", "-O0"], "vector.cpp", &exe);
    let out = stdout(&mprof(&["-l", "-n", "-M", "-e"], &exe));
    let src = data("vector.cpp").canonicalize().unwrap();
    let rows = section(&out, "vector");
    assert_eq!(
        numbers(&rows),
        [
            format!("{}:10 100024 100024", src.display()),
            format!("{}:11 0 400", src.display())
        ],
        "{out}"
    );
    assert!(out.contains("Module totals\t100024\t100424\n"), "{out}");
    assert!(!out.contains("new_allocator.h"), "{out}");
}

/// With `-m LIB` (by path) the user's source is LIB's: its system code is
/// walked past to its own line; named by basename, LIB's system code is
/// not known before the run and keeps the header's line.
#[test]
fn with_m_lib_the_users_line_is_the_librarys() {
    if !profdev_testkit::tools("mprof's C++ test", &["g++"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libvec.so");
    compile(
        "g++",
        &["-g", "-O0", "-shared", "-fPIC"],
        "vector_lib.cpp",
        &lib,
    );
    let exe = dir.path().join("vmain");
    let rpath = format!("-Wl,-rpath,{}", dir.path().display());
    let l = format!("-L{}", dir.path().display());
    let status = Command::new("cc")
        .args(["-g", "-O0", "-o"])
        .arg(&exe)
        .arg(data("vector_main.c"))
        .args([l.as_str(), "-lvec", rpath.as_str()])
        .status()
        .unwrap();
    assert!(status.success());
    let by_path = lib.display().to_string();
    let out = stdout(&mprof(&["-n", "-m", &by_path], &exe));
    let src = data("vector_lib.cpp").canonicalize().unwrap();
    assert_eq!(
        numbers(&section(&out, "libvec.so")),
        [format!("{}:8 20024 20024", src.display())],
        "{out}"
    );
    let out = stdout(&mprof(&["-n", "-m", "libvec.so"], &exe));
    assert!(out.contains("bits/new_allocator.h:"), "{out}");
}

#[test]
fn rust_vec_growth_is_charged_to_the_users_line() {
    if !profdev_testkit::tools("mprof's Rust test", &["rustc"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (name, opt) in [("vec_opt", "-O"), ("vec_debug", "-Copt-level=0")] {
        let exe = dir.path().join(name);
        compile("rustc", &[opt, "-g"], "vec.rs", &exe);
        let out = stdout(&mprof(&["-l", "-n", "--leaks", "-e"], &exe));
        let src = data("vec.rs").canonicalize().unwrap();
        // 1000 u64 pushed: capacity doubles 4, 8, ... 1024, each growth a
        // realloc at the push line; the last block is kept (forgotten).
        let row = format!("{}:5\t8192\t8192\t", src.display());
        assert!(
            section(&out, name).iter().any(|r| r.starts_with(&row)),
            "{name}: {out}"
        );
        assert!(
            out.contains(&format!("8192\t1\t{}:5\t", src.display())),
            "{name}: {out}"
        );
        assert!(!out.contains("raw_vec"), "{name}: {out}");
    }
}

#[test]
fn a_static_binary_is_out_of_reach_with_a_sentence() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("static");
    let status = Command::new("cc")
        .args(["-static", "-g", "-pthread", "-o"])
        .arg(&exe)
        .arg(data("known.c"))
        .status()
        .unwrap();
    if !status.success() {
        // No libc.a: CI's build-essential has it.
        assert!(
            !profdev_testkit::privileged_required(),
            "cc -static failed (libc6-dev's libc.a missing?)"
        );
        eprintln!("SKIPPED static binary test: cc -static failed");
        return;
    }
    let o = mprof(&[], &exe);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty(), "no profile is printed");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("is statically linked: its allocations are out of reach of mprof"),
        "{err}"
    );
}

#[test]
fn exit_status_and_children() {
    // sh -c forks and execs: each process reports; the status is CMD's.
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("known");
    compile("cc", &["-g", "-O0", "-pthread"], "known.c", &exe);
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-o", "-", "-l", "-m", "known", "sh", "-c"])
        .arg(format!("{0}; {0}; exit 3", exe.display()))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let out = String::from_utf8_lossy(&o.stdout);
    // Two runs add up: twice each line's bytes.
    assert_eq!(
        numbers(&section(&out, "known")),
        [
            "13 0 4194304",
            "23 80000 200000",
            "26 131072 131072",
            "28 0 20",
            "29 0 20000"
        ],
        "{out}"
    );
}

fn can_mount() -> Result<(), String> {
    if !profdev_testkit::is_root() {
        return Err("mounting needs root (CAP_SYS_ADMIN)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse does not exist (modprobe fuse)".into());
    }
    Ok(())
}

/// `startmp…` on a mounted prof/ctl, and `mprof -b`, `-c` and the bare
/// command against the mount.
#[test]
fn startmp_through_the_mount() {
    use std::io::Write;
    if !profdev_testkit::privileged("startmp through the mount", can_mount()) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap().join("mnt");
    std::fs::create_dir(&dir).unwrap();
    let profdev = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_profdev"));
        c.env("PROFDEV_MOUNT", &dir);
        c
    };
    let o = profdev().arg("mount").arg("-b").arg(&dir).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new(env!("CARGO_BIN_EXE_profdev"))
                .arg("unmount")
                .arg(self.0)
                .status();
        }
    }
    let _unmount = Unmount(&dir);
    let ctl = |msg: &str| -> std::io::Result<usize> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("prof/ctl"))?
            .write(msg.as_bytes())
    };
    let errno = |r: std::io::Result<usize>| r.unwrap_err().raw_os_error();
    let me = std::process::id();
    assert_eq!(errno(ctl("startmp4\n")), Some(libc::EINVAL));
    assert_eq!(errno(ctl("startmp11\n")), Some(libc::EINVAL));
    assert_eq!(errno(ctl("startmp1 2147483647\n")), Some(libc::ESRCH));
    // The writer itself: it would wait for ever for its own write (real
    // attaches: mprof_attach.rs).
    let e = ctl(&format!("startmp1 {me}\n")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    // mprof -b: memory mode with nothing hooked, which a PID may join.
    let o = profdev().args(["mprof", "-b", "-1"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(errno(ctl(&format!("startmp1 {me}\n"))), Some(libc::EINVAL));
    // Nothing hooked: nothing to show, said in a sentence.
    let o = profdev().arg("mprof").output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no profile information"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // -c ends the session: the device takes startmp again.
    let o = profdev().args(["mprof", "-c"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(ctl("startmp13\n").unwrap(), 10);
    assert_eq!(ctl("stop\n").unwrap(), 5);
}

/// `--pprof`: Go's pprof reads the export and names the sites with their
/// exact counts (`go tool pprof -raw`).
#[test]
fn pprof_export_read_by_go_tool_pprof() {
    if !profdev_testkit::tools("mprof's pprof export", &["go"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("known");
    compile("cc", &["-g", "-O0", "-pthread"], "known.c", &exe);
    let file = dir.path().join("heap.pb");
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-o", "-", "-l", "--pprof"])
        .arg(&file)
        .arg(&exe)
        .output()
        .unwrap();
    stdout(&o);
    let o = Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(&file)
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let raw = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{raw}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        raw.contains(
            "alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes[dflt]"
        ),
        "{raw}"
    );
    let src = data("known.c").canonicalize().unwrap();
    // Each site: its sample's four values and its location's line (the
    // sample's first location: its callers' follow, whole stacks on).
    for (values, line) in [
        ("512    2097152          0          0", 13),
        ("1000     100000        400      40000", 23),
        ("1      65536          1      65536", 26),
        ("1         10          0          0", 28),
        ("1      10000          0          0", 29),
    ] {
        let loc = raw
            .lines()
            .find(|l| {
                l.contains(&format!(" {}:{line} ", src.display())) && l.contains(" main ")
                    || l.contains(&format!("thread_body {}:{line} ", src.display()))
            })
            .unwrap_or_else(|| panic!("no location at line {line}: {raw}"));
        let id = loc.trim().split(':').next().unwrap();
        assert!(
            raw.lines().any(|l| l.trim_start().starts_with(values)
                && (l.trim_end().ends_with(&format!(": {id}")) || l.contains(&format!(": {id} ")))),
            "line {line}: {values}: {raw}"
        );
    }
    // `go tool pprof -top`, as a user reads it: the sites by name and line,
    // with their bytes in use (64 KiB at 26, 400 x 100 bytes at 23).
    let o = Command::new("go")
        .args([
            "tool",
            "pprof",
            "-top",
            "-lines",
            "-sample_index=inuse_space",
        ])
        .arg(&file)
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let top = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{top}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for (bytes, line) in [("64kB", 26), ("39.06kB", 23)] {
        assert!(
            top.lines().any(|l| l.trim_start().starts_with(bytes)
                && l.trim_end()
                    .ends_with(&format!("main {}:{line}", src.display()))),
            "line {line}: {top}"
        );
    }
    let o = Command::new("go")
        .args(["tool", "pprof", "-top", "-sample_index=alloc_space"])
        .arg(&file)
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let top = String::from_utf8_lossy(&o.stdout);
    assert!(
        top.lines()
            .any(|l| l.trim_start().starts_with("2048kB") && l.trim_end().ends_with(" thread_body")),
        "{top}"
    );
}

/// `--dhat`: the JSON passes the checks of valgrind's own viewer
/// (`dh_view.js`: its `checkFields` and `checkPP`, and the top-level field
/// list and version of its `buildTree`, run by node), and carries exact
/// figures: bytes at t-gmax are the sites' bytes when both threads held
/// their MiB.
#[test]
fn dhat_export_passes_dh_view_checks() {
    const VIEWER: &str = "/usr/libexec/valgrind/dh_view.js";
    if !profdev_testkit::tools("mprof's DHAT export", &["node"]) {
        return;
    }
    if !Path::new(VIEWER).exists() {
        assert!(
            !profdev_testkit::privileged_required(),
            "{VIEWER} is missing (apt-get install valgrind)"
        );
        eprintln!("SKIPPED mprof's DHAT export: {VIEWER} missing (valgrind)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("known");
    compile("cc", &["-g", "-O0", "-pthread"], "known.c", &exe);
    let file = dir.path().join("dhat.json");
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-o", "-", "-l", "--dhat"])
        .arg(&file)
        .arg(&exe)
        .output()
        .unwrap();
    stdout(&o);
    let script = r#"
const fs = require('fs');
const src = fs.readFileSync(process.argv[1], 'utf8');
function grab(name) {
  const i = src.indexOf('function ' + name + '(');
  if (i < 0) throw new Error('no ' + name);
  let depth = 0;
  for (let k = src.indexOf('{', i); k < src.length; k++) {
    if (src[k] == '{') depth++;
    else if (src[k] == '}' && --depth == 0) return src.slice(i, k + 1);
  }
}
eval(grab('checkFields') + '\n' + grab('checkPP'));
const version = Number(/const kExpectedFileVersion = (\d+);/.exec(src)[1]);
const fields = eval(/let fields = (\[[^\]]*\]);/.exec(src)[1]);
var gData = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
checkFields(gData, fields);
if (gData.dhatFileVersion != version) throw new Error('version ' + gData.dhatFileVersion);
if (gData.bklt) checkFields(gData, ['tg', 'tuth']);
for (const pp of gData.pps) {
  checkPP(pp);
  for (const f of pp.fs) if (!(f in gData.ftbl)) throw new Error('frame ' + f);
}
if (gData.ftbl[0] !== '[root]') throw new Error('ftbl[0]');
for (const [i, pp] of gData.pps.entries())
  console.log([pp.tb, pp.tbk, pp.mb, pp.gb, pp.eb, pp.ebk].join(' ') + ' ' + gData.ftbl[pp.fs[0]]);
"#;
    let o = Command::new("node")
        .arg("-e")
        .arg(script)
        .arg(VIEWER)
        .arg(&file)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{}{out}",
        String::from_utf8_lossy(&o.stderr)
    );
    let src = data("known.c").canonicalize().unwrap();
    // tb tbk mb gb eb ebk, then the frame.
    for (row, line) in [
        ("2097152 512 2097152 2097152 0 0", 13),
        ("100000 1000 100000 40000 40000 400", 23),
        ("65536 1 65536 65536 65536 1", 26),
        ("10 1 10 0 0 0", 28),
        ("10000 1 10000 0 0 0", 29),
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("{row} 0x"))
                && l.ends_with(&format!("({}:{line})", src.display()))),
            "line {line}: {row}:\n{out}"
        );
    }
}

/// Pools 2 and 3 (tests/data/mprof/pools.c): the program's own anonymous
/// mappings and break (pool 2) and file mappings (pool 3), charged to their
/// lines in whole pages (the break in bytes) and credited by munmap, part
/// of a mapping too; malloc's own mmap of a 1 MiB block is pool 1 only.
#[test]
fn pools_2_and_3_count_the_programs_own_mappings() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("pools");
    compile("cc", &["-g", "-O0"], "pools.c", &exe);
    // All pools (the default): each line's own bytes.
    let out = stdout(&mprof(&["-l", "-M", "-e", "--leaks"], &exe));
    assert_eq!(
        numbers(&section(&out, "pools")),
        [
            "13 0 12288",    // 3 pages; the middle one unmapped, then the rest
            "16 8192 8192",  // 5000 bytes: 2 pages, never unmapped
            "19 0 8192",     // a file, 2 pages
            "22 6000 10000", // sbrk(10000), sbrk(-4000)
            "24 0 4096",     // 1 page, then moved by mremap
            "25 0 16384",    // mremap's 4 pages, unmapped
            "27 0 1048576",  // malloc (pool 1), by malloc's own mmap
        ],
        "{out}"
    );
    // The module's high water: 14192 live (16 and 22) plus the MiB.
    assert!(out.contains("Module totals\t14192\t1062768\n"), "{out}");
    let src = data("pools.c").canonicalize().unwrap();
    assert!(
        out.contains(&format!(
            "8192\t1\t{0}:16\tmain()\n6000\t1\t{0}:22\tmain()\n",
            src.display()
        )),
        "{out}"
    );
    // Pool 2 alone: no row for malloc's MiB, and no other module (glibc's
    // malloc maps through its internal __mmap, which is not the program's).
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-o", "-", "-2", "-l", "-M"])
        .arg(&exe)
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(
        numbers(&section(&out, "pools")),
        [
            "13 0 12288",
            "16 8192 8192",
            "22 6000 10000",
            "24 0 4096",
            "25 0 16384"
        ],
        "{out}"
    );
    assert!(out.contains("Module totals\t14192\t30576\n"), "{out}");
    assert_eq!(out.matches("\nModule: ").count(), 1, "{out}");
    // Pool 3 alone: the file mapping.
    let out = stdout(&mprof(&["-3", "-l", "-e"], &exe));
    assert_eq!(numbers(&section(&out, "pools")), ["19 0 8192"], "{out}");
    // Pool 1 alone: the MiB.
    let out = stdout(&mprof(&["-1", "-l", "-e"], &exe));
    assert_eq!(numbers(&section(&out, "pools")), ["27 0 1048576"], "{out}");
}

/// fork: the child starts from zero (its frees of inherited blocks
/// subtract nothing), and the processes' tables add up.
#[test]
fn a_forked_child_starts_from_zero() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("forker");
    compile("cc", &["-g", "-O0"], "fork.c", &exe);
    let out = stdout(&mprof(&["-l", "-e", "--leaks"], &exe));
    // Had the child inherited the parent's counts, lines 8 and 9 would
    // show twice their high water (and 9 nothing current in the child).
    assert_eq!(
        numbers(&section(&out, "forker")),
        ["8 1000 1000", "9 3000 3000", "14 300 300", "19 200 200"],
        "{out}"
    );
    let src = data("fork.c").canonicalize().unwrap();
    assert!(
        out.contains(&format!("3000\t1\t{}:9\tmain()\n", src.display())),
        "{out}"
    );
}

/// A Rust program whose `#[global_allocator]` never calls malloc: out of
/// reach, said in a sentence, never an empty profile.
#[test]
fn an_own_allocator_is_out_of_reach_with_a_sentence() {
    if !profdev_testkit::tools("mprof's own-allocator test", &["rustc"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("bump");
    compile("rustc", &["-O", "-g"], "bump.rs", &exe);
    for args in [&["-l"][..], &["-l", "-e"]] {
        let o = mprof(args, &exe);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(o.stdout.is_empty(), "no profile is printed");
        assert!(
            err.contains(
                "carries its own allocator (a Rust #[global_allocator]): its allocations \
                 bypass the C \
                 library's malloc and are out of reach of mprof"
            ),
            "{err}"
        );
    }
}

/// lost.c's one row (line 12, 54321 bytes never freed) in `out`.
fn assert_lost_counted(out: &str) {
    assert_eq!(
        numbers(&section(out, "lost")),
        ["12 54321 54321"],
        "the bytes counted before the end: {out}"
    );
}

/// A program that ends without running its destructors (`_exit`, a
/// signal, SIGKILL as from the OOM killer) is shown all the same: the
/// library counts into a table shared with profdev (issue 23, item 6).
#[test]
fn counts_survive_exit_signals_and_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("lost");
    compile("cc", &["-g", "-O0"], "lost.c", &exe);
    for (how, status) in [("_exit", Some(0)), ("segv", Some(139)), ("kill", Some(137))] {
        let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
            .args(["mprof", "-o", "-", "-l", "-e"])
            .arg(&exe)
            .arg(how)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), status, "{how}: {err}");
        assert_lost_counted(&String::from_utf8_lossy(&o.stdout));
    }
    // dash ends with _exit: `sh -c 'echo hi'` has its tables.
    if std::fs::canonicalize("/bin/sh").is_ok_and(|p| p.ends_with("dash")) {
        let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
            .args(["mprof", "-o", "-", "-l", "--", "sh", "-c", "echo hi"])
            .output()
            .unwrap();
        let out = stdout(&o);
        assert!(out.starts_with("hi\n"), "{out}");
        assert!(out.contains("\nModule: dash("), "{out}");
    }
}

/// SIGINT to profdev while CMD runs: the tables of what was counted, the
/// sentence, exit status 130; the private directory is 0700 while it
/// lives, and one left by a SIGKILLed profdev is removed by the next run.
#[test]
fn interrupted_mprof_shows_the_counts_and_exits_128_plus_the_signal() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::fs::PermissionsExt;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("lost");
    compile("cc", &["-g", "-O0"], "lost.c", &exe);
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let start = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_profdev"));
        // SIGINT at its default, whatever this test inherited (a
        // background job of a shell starts with it ignored, and mprof
        // honours an ignored signal, as nohup asks).
        // SAFETY: signal(2) is async-signal-safe, allowed between fork
        // and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let mut c = cmd
            .args(["mprof", "-o", "-", "-l", "-e"])
            .arg(&exe)
            .arg("wait")
            .env("TMPDIR", &tmp)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let pid: i32 = line
            .strip_prefix("ready ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("{line:?}"));
        (c, out, pid)
    };
    let sessions = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("/profdev-mprof."))
            .collect()
    };
    let (mut c, mut out, _) = start();
    let s = sessions();
    assert_eq!(s.len(), 1, "{s:?}");
    let mode = std::fs::metadata(&s[0]).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700, "the private directory's mode");
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(c.id() as i32, libc::SIGINT) }, 0);
    let status = profdev_testkit::wait_exit("mprof", &mut c, std::time::Duration::from_secs(30));
    let mut text = String::new();
    std::io::Read::read_to_string(&mut out, &mut text).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(c.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert_lost_counted(&text);
    assert!(
        err.contains("mprof: interrupted by SIGINT;") && err.contains("what was counted"),
        "{err}"
    );
    assert!(
        sessions().is_empty(),
        "removed at the end: {:?}",
        sessions()
    );
    // SIGKILL: the directory stays behind (CMD dies with profdev)...
    let (mut c, _out, pid) = start();
    let left = sessions();
    c.kill().unwrap();
    c.wait().unwrap();
    profdev_testkit::wait_until(
        "the program killed with mprof is gone",
        std::time::Duration::from_secs(30),
        || !Path::new(&format!("/proc/{pid}")).exists(),
    );
    assert_eq!(sessions(), left);
    // ...until the next run of the same user.
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-o", "-", "-l", "-e"])
        .arg(&exe)
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert_lost_counted(&stdout(&o));
    assert!(sessions().is_empty(), "swept: {:?}", sessions());
}

/// A setuid program run by another user ignores LD_PRELOAD: mprof names
/// that cause, with the program's status, and nothing else (not a signal,
/// not an interrupt).
#[test]
fn a_setuid_program_is_named_as_the_cause() {
    use std::os::unix::fs::PermissionsExt;
    let why = if !profdev_testkit::is_root() {
        Err("making a setuid-root program needs root".to_string())
    } else {
        Ok(())
    };
    if !profdev_testkit::privileged("mprof of a setuid program", why)
        || !profdev_testkit::tools("mprof of a setuid program", &["cc", "setpriv", "cp"])
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // SAFETY: statvfs fills the zeroed struct; the path is a valid C string.
    let nosuid = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        let p = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap();
        libc::statvfs(p.as_ptr(), &mut st) == 0 && st.f_flag & libc::ST_NOSUID != 0
    };
    assert!(
        !nosuid,
        "{} is mounted nosuid: no setuid program can be made there",
        dir.path().display()
    );
    let exe = dir.path().join("lost");
    compile("cc", &["-g", "-O0"], "lost.c", &exe);
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let profdev = dir.path().join("profdev");
    assert!(Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_profdev"))
        .arg(&profdev)
        .status()
        .unwrap()
        .success());
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&profdev)
        .args(["mprof", "-o", "-", "-e"])
        .arg(&exe)
        .env("TMPDIR", "/tmp")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("never loaded the accounting library (it exited with status 0): it is setuid"),
        "{err}"
    );
}
