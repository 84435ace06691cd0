//! The prof device in a system-wide session (empty module list), checked
//! with binutils addr2line.
//!
//! Fixture recipe: `work.c` in prof_fixture/mod.rs, compiled by the test.
//! The device runs system wide, so other processes' modules show up too;
//! the test looks only at the workload's executable and libc.

mod common;
mod prof_fixture;
use common::*;
use prof_fixture::*;
use profdev_dev::prof::Prof;
use profdev_dev::tree::walk;
use profdev_dev::{Dev, Engine, OpenMode, Qid};
use std::process::Command;
use std::sync::Arc;

fn read_dev(dev: &dyn Dev) -> Vec<Module> {
    let read = |dir: Qid, name: &str, size: u32| -> Vec<Vec<u8>> {
        let f = walk(dev, dir, name).unwrap();
        let mut c = dev.open(f.qid, OpenMode::Read).unwrap();
        let mut reads = Vec::new();
        let mut offset = 0;
        loop {
            let b = dev.read(&mut c, offset, size).unwrap();
            if b.is_empty() {
                return reads;
            }
            offset += b.len() as u64;
            assert!(offset < 1 << 24, "{name} does not end");
            reads.push(b);
        }
    };
    dev.gen(Qid::ROOT)
        .unwrap()
        .into_iter()
        .filter(|e| e.qid.is_dir())
        .map(|d| Module {
            name: String::from_utf8(read(d.qid, "name", 4096).concat())
                .unwrap()
                .trim_end()
                .into(),
            path: String::from_utf8(read(d.qid, "path", 4096).concat())
                .unwrap()
                .trim_end()
                .into(),
            pairs: read(d.qid, "histogram", 64)
                .iter()
                .map(|p| profdev_formats::prof_histogram::parse_pair(p).unwrap())
                .collect(),
        })
        .collect()
}

#[test]
fn system_wide_session_in_process() {
    if !privileged("prof system-wide session", can_sample_system()) {
        return;
    }
    let d = tempdir();
    let work = compile_work(d.path(), "work-inproc");
    let dev = Prof::new(Engine::new(Arc::new(profdev_sample::PerfFactory::new())));
    let ctl = |msg: &str| {
        let f = walk(&dev, Qid::ROOT, "ctl").unwrap();
        let mut c = dev.open(f.qid, OpenMode::Write).unwrap();
        dev.write(&mut c, 0, msg.as_bytes()).unwrap();
    };
    ctl("module\n");
    ctl("interval 1\n");
    ctl("start\n");
    let st = Command::new(&work).output().unwrap();
    assert!(st.status.success());
    ctl("stop\n");
    let modules = read_dev(&dev);
    ctl("end\n");
    check_modules(&modules, &work);
}

/// `profdev prof -f -- ./work`: the PLT stub work calls random_r through is
/// its own row, `random_r@plt()`, and nothing is charged to `_init`. About
/// one in ten of the executable's samples lands in the stub (measured 93
/// of 766): with hundreds of samples, a run without any is impossible in
/// practice (0.9^300 < 1e-13).
#[test]
fn prof_command_names_the_plt_stub() {
    if !privileged("profdev prof on the PLT fixture", can_sample_system()) {
        return;
    }
    let d = tempdir();
    let work = compile_work(d.path(), "work-plt");
    let out = run(profdev().args(["prof", "-f", "-s", "1", "--"]).arg(&work));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let module = stdout
        .split("\nModule: ")
        .find(|m| m.starts_with("work-plt("))
        .unwrap_or_else(|| panic!("no module for work-plt: {stdout}"));
    let rows: Vec<&str> = module
        .lines()
        .filter_map(|l| l.rsplit('\t').next().filter(|_| l.contains('\t')))
        .collect();
    assert!(rows.contains(&"random_r@plt()"), "{module}");
    assert!(
        rows.contains(&"hot()") && rows.contains(&"main()"),
        "{module}"
    );
    assert!(
        !rows.contains(&"_init()"),
        "a PLT stub charged to _init: {module}"
    );
    assert!(!rows.contains(&"??()"), "{module}");
}
