//! Complete user stacks: the one unwinder every command uses
//! (`profdev_symbolize::unwind`), on live samples of C, C++ and Rust release
//! programs taken as `profdev gmon` takes them (user mode, registers and a
//! 16 KB stack copy per sample).
//!
//! A stack is *complete* when its outermost frame is in a function named
//! `_start` (the executable's, or, for samples taken in the dynamic loader
//! before the executable runs, the loader's: there a return address at most
//! 64 bytes past the loader's ELF entry point, as the loader has no symbol
//! for it) or in a thread's start routine (`clone3`,
//! `clone`, `start_thread`; without libc's debug file, which names them,
//! the code of libc.so.6 where the CFI unwind ended because the CFI marks
//! the return address undefined, as glibc's clone3 does for a new thread):
//! the unwinder walked from the sampled instruction to the root of the
//! thread. Nothing else counts: a stack cut
//! anywhere short of the root is incomplete, whatever method produced it.
//! Every sample of the program's process is counted; a correct unwinder
//! completes all of them (perf's `--call-graph dwarf` completes 100% of the
//! same programs' samples), and the tests ask for 99%.
//!
//! Fixture recipe: tests/fixtures/hotcall.c (gcc -O2 -fomit-frame-pointer),
//! hotcall.cc (g++ -O2, exceptions, a second thread), hotcall.rs (rustc -O)
//! and btree.rs (rustc -O: std's BTreeMap, code generic over std that
//! inlines deeply), compiled by the tests.

mod common;
use common::*;
use profdev_core::{CpuMode, ProcessVa, Record, SessionConfig, SourceError, Target};
use profdev_symbolize::unwind::UserUnwinder;
use profdev_symbolize::{ElfObject, Objects, Tasks};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn build(dir: &Path, compiler: &str, args: &[&str], src: &str, out: &str) -> PathBuf {
    let exe = dir.join(out);
    let o = Command::new(compiler)
        .args(args)
        .arg("-o")
        .arg(&exe)
        .arg(fixture(src))
        .output()
        .unwrap();
    assert!(o.status.success(), "{compiler}: {o:?}");
    exe
}

/// Names frames: the object's symbols, from its detached debug file where
/// one is installed (glibc's `start_thread` and `clone3` are not in
/// libc.so.6's dynamic symbol table).
struct Namer {
    objects: HashMap<String, Option<(ElfObject, Option<ElfObject>)>>,
}

impl Namer {
    /// (module, function) of process address `va`. A return address in
    /// the first 64 bytes after an object's entry point is named `_start`:
    /// the dynamic loader's `_start` has no symbol in the stripped loader
    /// and no CFI, and it is where the loader's stacks begin.
    fn name(&mut self, tasks: &Tasks, pid: u32, va: u64) -> (String, String) {
        let Some(m) = tasks.lookup(pid, ProcessVa(va)) else {
            return (String::new(), format!("{va:#x}"));
        };
        let off = m.file_offset(ProcessVa(va));
        let module = m.path.rsplit('/').next().unwrap_or("").to_string();
        let obj = self.objects.entry(m.path.clone()).or_insert_with(|| {
            let o = ElfObject::open(Path::new(&m.path)).ok()?;
            let debug = o.separate_debug_info();
            Some((o, debug))
        });
        let name = match obj {
            Some((o, debug)) => match o.file_addr_of_offset(off) {
                Some(fa) if fa.0 >= o.entry().0 && fa.0 < o.entry().0 + 64 => "_start".into(),
                Some(fa) => debug
                    .as_ref()
                    .and_then(|d| d.symbol(fa))
                    .map_or_else(|| o.function_name(fa), |(s, _)| s.name()),
                None => format!("{}+{off:#x}", m.path),
            },
            None => format!("{}+{off:#x}", m.path),
        };
        (module, name)
    }
}

/// Samples of `exe args`, unwound: (complete, total, an incomplete example).
fn unwind_run(exe: &Path, args: &[&str]) -> (u64, u64, Vec<String>) {
    let config = SessionConfig {
        target: Target::Process {
            pid: 0,
            inherit: true,
        },
        frequency_hz: 1000,
        kernel: false,
        user: true,
        callchain: true,
        user_stack_bytes: 16384,
        track_tasks: true,
        off_cpu: false,
    };
    let mut cmd = Command::new(exe);
    cmd.args(args).stdout(std::process::Stdio::null());
    let (mut child, mut source) = profdev_sample::spawn_profiled(&mut cmd, &config).unwrap();
    let mut tasks = Tasks::with_objects(Objects::new());
    let mut unwinder = UserUnwinder::new();
    let mut namer = Namer {
        objects: HashMap::new(),
    };
    let (mut complete, mut total) = (0, 0);
    let mut example = Vec::new();
    let mut batch = Vec::new();
    loop {
        let r = source.read(&mut batch, Duration::from_millis(100));
        for rec in batch.drain(..) {
            tasks.observe(&rec);
            let Record::Sample(s) = &rec else { continue };
            if s.mode != CpuMode::User {
                continue;
            }
            let stack = unwinder.unwind(&tasks, s);
            let names: Vec<(String, String)> = (0..stack.frames.len())
                .map(|i| namer.name(&tasks, s.pid, stack.lookup_address(i).0))
                .collect();
            total += 1;
            let (module, root) = names.last().cloned().unwrap_or_default();
            // Without libc's debug file its thread root has no name, but
            // it is the only code of libc whose CFI ends the stack (marks
            // the return address undefined), which is what Cfi means.
            let thread_root = module.starts_with("libc.so")
                && stack.method == profdev_symbolize::unwind::UnwindMethod::Cfi;
            if ["_start", "clone3", "clone", "start_thread"].contains(&root.as_str()) || thread_root
            {
                complete += 1;
            } else if example.is_empty() {
                example = names
                    .into_iter()
                    .map(|(m, f)| format!("{f} in {m}"))
                    .collect();
            }
        }
        match r {
            Ok(()) => {}
            Err(SourceError::Ended) => break,
            Err(e) => panic!("sampling stopped early: {e}"),
        }
    }
    assert!(child.wait().unwrap().success());
    eprintln!(
        "{}: {complete} of {total} stacks complete; {}",
        exe.display(),
        unwinder.stats()
    );
    (complete, total, example)
}

/// The fewest stacks a run must give for its share of complete ones to
/// be judged (the workloads run 0.3 s or more of CPU at 1000 Hz).
const MIN_STACKS: u64 = 100;

fn check(exe: &Path, args: &[&str]) {
    let (complete, total, example) = unwind_run(exe, args);
    // Enough stacks for the share to mean something (at most one of 100
    // incomplete); how many a run gets follows the program's CPU time,
    // which a faster or busier machine makes smaller: a floor any
    // sampler meets, not a count.
    assert!(total >= MIN_STACKS, "too few samples: {total}");
    assert!(
        complete * 100 >= total * 99,
        "{complete} of {total} stacks complete; an incomplete one: {example:?}"
    );
}

#[test]
fn c_without_frame_pointers() {
    if !ready("unwinding C -O2 -fomit-frame-pointer", &["gcc"]) {
        return;
    }
    let d = tempdir();
    let exe = build(
        d.path(),
        "gcc",
        &["-O2", "-fomit-frame-pointer"],
        "hotcall.c",
        "hot_c",
    );
    check(&exe, &["1500"]);
}

#[test]
fn cpp_with_exceptions_and_a_thread() {
    if !ready("unwinding C++ -O2", &["g++"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path(), "g++", &["-O2"], "hotcall.cc", "hot_cc");
    check(&exe, &["1500"]);
}

#[test]
fn rust_release_binaries() {
    if !ready("unwinding Rust release binaries", &["rustc"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path(), "rustc", &["-O"], "hotcall.rs", "hot_rs");
    check(&exe, &["2500"]);
    let exe = build(d.path(), "rustc", &["-O"], "btree.rs", "btree_rs");
    check(&exe, &["2"]);
}

/// perf's share of complete stacks in `perf script` of a
/// `perf record --call-graph dwarf` run (same definition: the outermost
/// frame is `_start` or a thread start routine).
fn perf_complete(dir: &Path, exe: &Path, args: &[&str]) -> (u64, u64) {
    let data = dir.join("perf.data");
    let o = Command::new("perf")
        .args([
            "record",
            "-q",
            "-F",
            "1000",
            "-e",
            "cpu-clock:u",
            "--call-graph",
            "dwarf",
            "-o",
        ])
        .arg(&data)
        .arg("--")
        .arg(exe)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "perf record: {o:?}");
    let o = Command::new("perf")
        .args(["script", "-F", "ip,sym", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success(), "perf script: {o:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    let (mut complete, mut total) = (0, 0);
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let Some(last) = block.lines().rfind(|l| !l.trim().is_empty()) else {
            continue;
        };
        total += 1;
        let sym = last.split_whitespace().nth(1).unwrap_or("");
        if ["_start", "clone3", "clone", "start_thread"].contains(&sym) {
            complete += 1;
        }
    }
    (complete, total)
}

/// perf as the oracle: on the C++ program (two threads, exceptions) and
/// the BTreeMap program, wherever perf's dwarf unwinding completes 99% of
/// the stacks, profdev's completes 99% too.
#[test]
fn as_complete_as_perf() {
    if !ready("unwinding against perf", &["g++", "rustc", "perf"]) {
        return;
    }
    let d = tempdir();
    let cc = build(d.path(), "g++", &["-O2"], "hotcall.cc", "hot_cc");
    let rs = build(d.path(), "rustc", &["-O"], "btree.rs", "btree_rs");
    for (exe, args) in [(&cc, &["1500"][..]), (&rs, &["1"][..])] {
        let (pc, pt) = perf_complete(d.path(), exe, args);
        eprintln!("perf: {pc} of {pt} stacks complete");
        assert!(pt >= MIN_STACKS, "perf took too few samples: {pt}");
        if pc * 100 >= pt * 99 {
            let (c, t, example) = unwind_run(exe, args);
            assert!(
                c * 100 >= t * 99,
                "perf: {pc} of {pt}, profdev: {c} of {t}; an incomplete one: {example:?}"
            );
        }
    }
}
