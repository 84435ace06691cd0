//! Launch mode on a C program of known trip counts, built at -O0 and -O2:
//! the blocks at the functions' entries and the conditional branch have
//! exactly the counts the program's structure implies, and the program's
//! output is unchanged.

use profdev_coverage::counts::ModuleCoverage;
use profdev_coverage::launch::launch;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn build(dir: &Path, src: &str, opt: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(format!("prog{opt}"));
    let st = Command::new("cc")
        .args([opt, "-g", "-o"])
        .arg(&out)
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures")
                .join(src),
        )
        .args(extra)
        .status()
        .expect("cc runs");
    assert!(st.success());
    out
}

fn sym(path: &Path, name: &str) -> (u64, u64) {
    let elf = profdev_symbolize::ElfObject::open(path).expect("parses");
    let s = elf
        .symbols()
        .iter()
        .find(|s| s.mangled == name)
        .unwrap_or_else(|| panic!("{name} in {}", path.display()));
    (s.addr, s.addr + s.size)
}

fn count_at(m: &ModuleCoverage, addr: u64) -> u64 {
    m.blocks
        .iter()
        .find(|b| b.start == addr)
        .unwrap_or_else(|| panic!("no block at {addr:#x}"))
        .count
}

fn native(prog: &Path, args: &[&str]) -> Vec<u8> {
    let o = Command::new(prog).args(args).output().expect("runs");
    assert!(o.status.success());
    o.stdout
}

fn covered(prog: &Path, args: &[&str], select: &[String]) -> (Vec<u8>, Vec<ModuleCoverage>) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("stdout");
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()));
    let run = launch(cmd, select).expect("launches");
    for n in &run.notes {
        eprintln!("note: {n}");
    }
    assert!(run.status.success(), "{:?}", run.status);
    (std::fs::read(&out).unwrap(), run.modules)
}

fn check_loops(prog: &Path, select: &[String]) {
    let n = 1000u64;
    let (stdout, mods) = covered(prog, &["1000"], select);
    assert_eq!(stdout, native(prog, &["1000"]));
    let canon = std::fs::canonicalize(prog).unwrap();
    let m = mods.iter().find(|m| m.path == canon).unwrap_or_else(|| {
        panic!(
            "{} not covered: {:?}",
            canon.display(),
            mods.iter().map(|m| &m.path).collect::<Vec<_>>()
        )
    });
    let (called, _) = sym(prog, "called");
    let (never, _) = sym(prog, "never");
    let (branchy, branchy_end) = sym(prog, "branchy");
    let (partly, _) = sym(prog, "partly");
    let (main, _) = sym(prog, "main");
    assert_eq!(count_at(m, main), 1, "main");
    assert_eq!(count_at(m, called), n / 4, "called");
    assert_eq!(count_at(m, never), 0, "never");
    assert_eq!(count_at(m, branchy), n, "branchy");
    assert_eq!(count_at(m, partly), n, "partly");
    // The test in branchy: taken N/4 or 3N/4 times.
    let br: Vec<_> = m
        .branches
        .iter()
        .filter(|b| b.addr >= branchy && b.addr < branchy_end)
        .collect();
    assert!(
        br.iter().any(|b| {
            let mut v = [b.taken, b.not_taken];
            v.sort();
            v == [n / 4, 3 * n / 4]
        }),
        "{br:?}"
    );
    // Blocks: sorted and disjoint; every block of `never` has count 0.
    for w in m.blocks.windows(2) {
        assert!(w[0].end <= w[1].start);
    }
    assert_eq!(m.uncounted, 0, "uncounted blocks in the fixture");
}

#[test]
fn exact_counts_executable_only() {
    let tmp = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O2"] {
        let prog = build(tmp.path(), "loops.c", opt, &[]);
        let name = prog.file_name().unwrap().to_string_lossy().into_owned();
        check_loops(&prog, &[name]);
    }
}

#[test]
fn exact_counts_with_every_module() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build(tmp.path(), "loops.c", "-O2", &[]);
    check_loops(&prog, &[]);
}

fn check_threads(prog: &Path, select: &[String]) {
    let n = 200_000u64;
    let (stdout, mods) = covered(prog, &["200000"], select);
    assert_eq!(String::from_utf8_lossy(&stdout), "execd\ndone 0\n");
    let canon = std::fs::canonicalize(prog).unwrap();
    let m = mods.iter().find(|m| m.path == canon).expect("covered");
    let (work, work_end) = sym(prog, "work");
    assert_eq!(count_at(m, work), 3 * n, "work: two threads and a child");
    let br: Vec<_> = m
        .branches
        .iter()
        .filter(|b| b.addr >= work && b.addr < work_end)
        .collect();
    assert!(
        br.iter()
            .any(|b| b.taken == 3 * n / 2 && b.not_taken == 3 * n / 2),
        "{br:?}"
    );
    assert_eq!(count_at(m, sym(prog, "child_only").0), 1);
    assert_eq!(count_at(m, sym(prog, "exec_path").0), 1);
    assert_eq!(count_at(m, sym(prog, "execd").0), 1);
    // main: once in the first image, once in the exec'd one.
    assert_eq!(count_at(m, sym(prog, "main").0), 2);
}

#[test]
fn threads_fork_exec_exact() {
    let tmp = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O2"] {
        let prog = build(tmp.path(), "threads.c", opt, &["-pthread"]);
        let name = prog.file_name().unwrap().to_string_lossy().into_owned();
        check_threads(&prog, &[name]);
    }
    let prog = build(tmp.path(), "threads.c", "-O2", &["-pthread"]);
    check_threads(&prog, &[]);
}

/// Real programs under coverage of every module they map (libc and the
/// loader included) behave exactly as natively.
#[test]
fn real_programs_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    let text: String = (0..5000)
        .map(|i| format!("{}\n", (i * 7919) % 10007))
        .collect();
    std::fs::write(&input, text).unwrap();
    let input = input.to_string_lossy().into_owned();
    let listed = tmp.path().join("listed");
    std::fs::create_dir(&listed).unwrap();
    for i in 0..20 {
        std::fs::write(listed.join(format!("f{i}")), "x".repeat(i)).unwrap();
    }
    let listed = listed.to_string_lossy().into_owned();
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("/bin/ls", vec!["-l", &listed]),
        ("/usr/bin/sort", vec!["-n", &input]),
        (
            "/usr/bin/python3",
            vec!["-c", "s=0\nfor i in range(200000): s+=i*i\nprint(s)"],
        ),
        (
            "/bin/sh",
            vec!["-c", "echo a; /bin/echo b | /usr/bin/tr b c"],
        ),
    ];
    for (prog, args) in cases {
        if !Path::new(prog).exists() {
            panic!("{prog} is missing (Debian: coreutils, python3)");
        }
        let want = Command::new(prog).args(&args).output().unwrap();
        let out = tmp.path().join("out");
        let mut cmd = Command::new(prog);
        cmd.args(&args)
            .stdout(Stdio::from(std::fs::File::create(&out).unwrap()));
        let t = std::time::Instant::now();
        let run = launch(cmd, &[]).expect("launches");
        eprintln!("{prog}: {:?} under coverage", t.elapsed());
        for n in &run.notes {
            eprintln!("  note: {n}");
        }
        assert_eq!(run.status.code(), want.status.code(), "{prog}");
        assert_eq!(
            String::from_utf8_lossy(&std::fs::read(&out).unwrap()),
            String::from_utf8_lossy(&want.stdout),
            "{prog}"
        );
        let libc = run
            .modules
            .iter()
            .find(|m| m.path.file_name().is_some_and(|n| n == "libc.so.6"))
            .expect("libc covered");
        assert!(libc.blocks.iter().any(|b| b.count > 0), "libc counted");
    }
}

/// The attach entry, started by the program itself after dlopen (as the
/// injector does in a stopped process): only what runs after the attach
/// is counted, and the inner/outer ratio is exact.
#[test]
fn attach_entry_counts_from_the_attach_on() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build(tmp.path(), "attach.c", "-O2", &["-ldl"]);
    let server = profdev_coverage::launch::Server::new(&["prog-O2".to_string()]).unwrap();
    let out = Command::new(&prog)
        .arg("500")
        .env("COV_RT", server.runtime())
        .env("COV_CONFIG", server.attach_config())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let (mods, notes) = server.collect();
    for n in &notes {
        eprintln!("note: {n}");
    }
    let canon = std::fs::canonicalize(&prog).unwrap();
    let m = mods.iter().find(|m| m.path == canon).expect("covered");
    assert_eq!(count_at(m, sym(&prog, "outer").0), 500);
    assert_eq!(count_at(m, sym(&prog, "inner").0), 5000);
    // main ran before the attach: its entry block is not counted.
    assert_eq!(count_at(m, sym(&prog, "main").0), 0);
}

/// A process near its descriptor limit: the runtime opens up to eight
/// conversations with the server ahead of their turn, and one it could
/// not open then (no descriptor left) is opened again in its turn, so
/// every module is counted as without the limit (at a limit of 6, `ls`
/// lost libc and the loader).
#[test]
fn every_module_is_counted_near_the_descriptor_limit() {
    use std::os::unix::process::CommandExt;
    let modules = |limit: Option<u64>| -> Vec<PathBuf> {
        let mut cmd = Command::new("/bin/ls");
        cmd.arg("/").stdout(Stdio::null());
        if let Some(n) = limit {
            // SAFETY: setrlimit is async-signal-safe; nothing else runs
            // between the fork and the exec.
            unsafe {
                cmd.pre_exec(move || {
                    let r = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let run = launch(cmd, &[]).expect("launches");
        assert!(
            run.status.success(),
            "ls with {limit:?} descriptors: {:?}",
            run.status
        );
        let mut v: Vec<PathBuf> = run
            .modules
            .iter()
            .filter(|m| m.blocks.iter().any(|b| b.count > 0))
            .map(|m| m.path.clone())
            .collect();
        v.sort();
        v
    };
    let all = modules(None);
    assert!(all.len() >= 3, "{all:?}");
    for n in [6, 7] {
        assert_eq!(modules(Some(n)), all, "with {n} descriptors");
    }
}
