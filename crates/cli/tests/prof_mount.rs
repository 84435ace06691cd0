//! The prof device through the mount, with real system calls: TV-P1's
//! control messages and TV-P2's histogram reads (adapted), a system-wide
//! session checked with addr2line, and `profdev prof` reading the mount.
//!
//! Adaptations (documented in `profdev_dev::prof`): a 200-byte control
//! message is taken whole (returns 200, not 127); the counts of a live
//! session are not TV-P2's [0,5,0,0,7], so the protocol is checked on
//! whatever the session recorded: one `0x<pc> <count>\n` pair per read, pcs
//! increasing, counts non-zero, then end of file; a read too small for the
//! next pair fails with EINVAL and the pair comes with the next read.
//!
//! Fixture recipe: `work.c` in prof_fixture/mod.rs, compiled by the test.

mod common;
mod prof_fixture;

use common::*;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::Path;
use std::process::Command;

fn can_mount() -> Result<(), String> {
    can_sample_system()?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("mounting needs root (CAP_SYS_ADMIN)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse does not exist (modprobe fuse)".into());
    }
    Ok(())
}

/// What these tests ask of a mount beyond the common one.
trait MountExt {
    fn dirs(&self) -> Vec<String>;
    fn modules(&self) -> Vec<prof_fixture::Module>;
}

impl MountExt for Mount {
    /// The record directories, sorted.
    fn dirs(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.prof())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "ctl")
            .collect();
        v.sort();
        v
    }

    /// Every record as prof_fixture reads it.
    fn modules(&self) -> Vec<prof_fixture::Module> {
        self.dirs()
            .iter()
            .map(|d| {
                let dir = self.prof().join(d);
                let text = |f: &str| {
                    std::fs::read_to_string(dir.join(f))
                        .unwrap()
                        .trim_end()
                        .to_string()
                };
                prof_fixture::Module {
                    name: text("name"),
                    path: text("path"),
                    pairs: read_pairs(&dir.join("histogram"))
                        .iter()
                        .map(|p| profdev_formats::prof_histogram::parse_pair(p).unwrap())
                        .collect(),
                }
            })
            .collect()
    }
}

/// Every read(2) of 64 bytes until end of file.
fn read_pairs(path: &Path) -> Vec<Vec<u8>> {
    let mut f = File::open(path).unwrap();
    let mut out = Vec::new();
    loop {
        let mut buf = [0u8; 64];
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return out;
        }
        out.push(buf[..n].to_vec());
        assert!(out.len() < 1_000_000, "{} does not end", path.display());
    }
}

fn einval(r: std::io::Result<usize>, what: &str) {
    let e = r.expect_err(what);
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{what}: {e}");
}

#[test]
fn tv_p1_p2_through_the_mount() {
    if !privileged("prof through the mount", can_mount()) {
        return;
    }
    let m = Mount::new();
    let d = tempdir();
    // A name of its own: other tests run workloads system wide meanwhile.
    let work = prof_fixture::compile_work(d.path(), "work-tvp1");

    // TV-P1.
    assert_eq!(m.ctl(b"interval 10").unwrap(), 11);
    assert_eq!(m.ctl(b"interval 0x10").unwrap(), 13);
    assert_eq!(m.ctl(b"module").unwrap(), 6);
    einval(m.ctl(b"startcp"), "startcp");
    einval(m.ctl(b"start now"), "start now");
    einval(m.ctl(b"bogus"), "bogus");
    einval(m.ctl(b"interval 0"), "interval 0");
    let mut long = b"module".to_vec();
    while long.len() < 200 {
        long.extend_from_slice(b" a");
    }
    assert_eq!(m.ctl(&long).unwrap(), 200);
    // The list the session uses: blanks and tabs separate names.
    m.ctl(b"module  work-tvp1\t/nonexistent/bar.so\n").unwrap();
    m.ctl(b"interval 1\n").unwrap();
    m.ctl(b"start\n").unwrap();
    assert!(Command::new(&work).output().unwrap().status.success());
    m.ctl(b"stop\n").unwrap();
    assert_eq!(
        m.dirs(),
        ["00000001"],
        "only the wanted module: {:#?}",
        m.modules()
    );
    let dir = m.prof().join("00000001");
    assert_eq!(
        std::fs::read_to_string(dir.join("name")).unwrap(),
        "work-tvp1\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("path")).unwrap(),
        format!("{}\n", work.display())
    );

    // TV-P2, adapted: one pair per read, increasing, non-zero, then EOF.
    let hist = dir.join("histogram");
    let reads = read_pairs(&hist);
    assert!(reads.len() > 3, "{reads:?}");
    let mut last = None;
    for r in &reads {
        let text = std::str::from_utf8(r).unwrap();
        assert!(text.starts_with("0x") && text.ends_with('\n'), "{text:?}");
        assert_eq!(text.matches('\n').count(), 1, "one pair per read: {text:?}");
        let (pc, n) = profdev_formats::prof_histogram::parse_pair(r).unwrap();
        assert!(n > 0);
        assert!(last < Some(pc), "pcs increase: {text:?}");
        last = Some(pc);
    }
    // A read too small for the pair fails (EINVAL) and loses nothing.
    let mut f = File::open(&hist).unwrap();
    let mut small = [0u8; 3];
    let e = f.read(&mut small).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    let mut buf = [0u8; 64];
    let n = f.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], &reads[0][..]);
    let n = f.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], &reads[1][..]);

    // The files' rules.
    let e = OpenOptions::new()
        .write(true)
        .open(dir.join("pctl"))
        .unwrap()
        .write(b"x");
    assert!(e.is_err(), "pctl refuses writes");
    assert!(
        File::open(m.prof().join("ctl")).is_err(),
        "ctl is write-only"
    );

    // `end` frees everything.
    m.ctl(b"end\n").unwrap();
    assert!(m.dirs().is_empty());
    assert!(File::open(&hist).is_err());
}

#[test]
fn system_wide_session_through_the_mount() {
    if !privileged("prof through the mount", can_mount()) {
        return;
    }
    let m = Mount::new();
    let d = tempdir();
    let work = prof_fixture::compile_work(d.path(), "work-mount");
    m.ctl(b"module\n").unwrap();
    m.ctl(b"interval 1\n").unwrap();
    m.ctl(b"start\n").unwrap();
    assert!(Command::new(&work).output().unwrap().status.success());
    m.ctl(b"stop\n").unwrap();
    prof_fixture::check_modules(&m.modules(), &work);

    // `profdev prof` without CMD shows what the mount holds.
    let out = run(profdev()
        .args(["prof", "-f", "-m", "x"])
        .env("PROFDEV_MOUNT", &m.dir));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("prof: warning: -m option ignored\n"),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!("\nModule: work-mount({})\n\n", work.display())),
        "{stdout}"
    );
    assert!(stdout.contains("\thot()\n"), "{stdout}");
    assert!(stdout.contains("\n**** total sampling points "), "{stdout}");
    m.ctl(b"end\n").unwrap();

    // `profdev prof -b` starts the mounted device and leaves it on.
    let out = run(profdev()
        .args(["prof", "-b", "-s", "1", "-m", "work-mount"])
        .arg(&work)
        .env("PROFDEV_MOUNT", &m.dir));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    m.ctl(b"stop\n").unwrap();
    assert_eq!(m.dirs(), ["00000001"]);
    m.ctl(b"end\n").unwrap();
}

/// A program rebuilt at the same path between two runs inside one server
/// keeps both builds' symbols: each record's `object` is the file that was
/// mapped, so record 1 is symbolized from the first build although the
/// path now holds the second. The server opens a mapped file when its
/// reader gets to the mapping's record, which the first run (0.1 s) and
/// the rebuild can outpace on a loaded machine: the rebuild waits until
/// the server holds a descriptor of the first build (at most 120 s).
#[test]
fn a_program_rebuilt_at_the_same_path_keeps_both_builds_symbols() {
    if !privileged("prof through the mount", can_mount()) {
        return;
    }
    let m = Mount::new();
    let d = tempdir();
    let src = d.path().join("rebuilt.c");
    let exe = d.path().join("rebuilt-prog");
    let build = |name: &str| {
        std::fs::write(
            &src,
            format!(
                "static volatile unsigned long sink;\n\
                 __attribute__((noinline)) void {name}(void)\n\
                 {{ unsigned long x = 1; for (unsigned long i = 0; i < 100000000UL; i++) x = x * 6364136223846793005UL + i; sink = x; }}\n\
                 int main(void) {{ {name}(); return 0; }}\n"
            ),
        )
        .unwrap();
        let o = Command::new("cc")
            .args(["-g", "-O1", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .unwrap();
        assert!(o.status.success(), "cc: {o:?}");
    };
    m.ctl(b"module rebuilt-prog\n").unwrap();
    m.ctl(b"interval 1\n").unwrap();
    m.ctl(b"start\n").unwrap();
    build("first_build_spin");
    let first_build = {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&exe).unwrap();
        (meta.dev(), meta.ino())
    };
    assert!(Command::new(&exe).status().unwrap().success());
    wait_until(
        "the server to hold the first build open",
        std::time::Duration::from_secs(120),
        || server_holds(&m.dir, first_build),
    );
    build("second_build_spin");
    assert!(Command::new(&exe).status().unwrap().success());
    m.ctl(b"stop\n").unwrap();
    assert_eq!(m.dirs(), ["00000001", "00000002"], "{:#?}", m.modules());
    // The first record's object is the first build, gone from the path.
    let first = std::fs::read(m.prof().join("00000001/object")).unwrap();
    assert_ne!(first, std::fs::read(&exe).unwrap());
    assert_eq!(
        std::fs::read(m.prof().join("00000002/object")).unwrap(),
        std::fs::read(&exe).unwrap()
    );
    let out = run(profdev().args(["prof", "-f"]).env("PROFDEV_MOUNT", &m.dir));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sections: Vec<&str> = stdout.split("Module: rebuilt-prog(").skip(1).collect();
    assert_eq!(sections.len(), 2, "{stdout}");
    assert!(sections[0].contains("first_build_spin"), "{stdout}");
    assert!(!sections[0].contains("second_build_spin"), "{stdout}");
    assert!(sections[1].contains("second_build_spin"), "{stdout}");
    assert!(!sections[1].contains("first_build_spin"), "{stdout}");
    m.ctl(b"end\n").unwrap();
}

/// Does the server of the mount at `dir` (the process whose arguments
/// name `dir`) hold a descriptor of the file `(device, inode)`?
fn server_holds(dir: &Path, file: (u64, u64)) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        let names_dir = std::fs::read(p.path().join("cmdline")).is_ok_and(|c| {
            c.split(|&b| b == 0)
                .any(|a| a == dir.as_os_str().as_encoded_bytes())
        });
        names_dir
            && std::fs::read_dir(p.path().join("fd")).is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    std::fs::metadata(fd.path()).is_ok_and(|m| (m.dev(), m.ino()) == file)
                })
            })
    })
}
