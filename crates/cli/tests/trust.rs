//! The new powers keep root's rules, tried as user nobody on a mount that
//! allows nobody (`profdev mount -b --allow-user nobody DIR`), as root in
//! CI:
//!
//! * `object` is served only to whom open(2) would serve the file: not a
//!   0755 program root ran from a 0700 directory, not one an ACL denies,
//!   not one deleted since (root still reads each);
//! * `startcp` and `startmp1` refuse a process of nobody's that is not
//!   dumpable (EPERM), as `strace -p` does;
//! * a process of nobody's that execs a set-user-id-root program while
//!   nobody's `startcp` or `startmp1` runs never gets profdev code mapped
//!   while it is root, whatever the delay (0 to 50 ms); the test first
//!   proves the program really runs with euid 0, and fails where it cannot.
//!
//! Fixture: `fixtures/trust.c`, compiled by the test.

mod common;

use common::*;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn can_mount() -> Result<(), String> {
    can_sample_system()?;
    if !profdev_testkit::is_root() {
        return Err("mounting and acting as nobody need root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse does not exist (modprobe fuse)".into());
    }
    Ok(())
}

/// A mount nobody may use, in a directory nobody can reach, unmounted on
/// drop.
struct Shared {
    tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Shared {
    fn new() -> Shared {
        let tmp = tempdir();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = tmp.path().canonicalize().unwrap().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let o = run(profdev()
            .args(["mount", "-b", "--allow-user", "nobody"])
            .arg(&dir));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        Shared { tmp, dir }
    }

    fn ctl_path(&self) -> PathBuf {
        self.dir.join("prof/ctl")
    }

    /// One write of `msg` by root.
    fn ctl(&self, msg: &str) -> std::io::Result<usize> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.ctl_path())?
            .write(msg.as_bytes())
    }

    /// One write of `msg` by nobody: Ok, or the error as printf says it.
    fn ctl_as_nobody(&self, msg: &str) -> Result<(), String> {
        let o = as_nobody(
            "/usr/bin/printf '%s\\n' \"$(cat \"$1\")\" >\"$2\"",
            &[&self.write_msg(msg), &self.ctl_path()],
        );
        if o.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).into_owned())
        }
    }

    /// `msg` in a file nobody can read (no quoting through the shell).
    fn write_msg(&self, msg: &str) -> PathBuf {
        let p = self.tmp.path().join("msg");
        std::fs::write(&p, msg).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        p
    }

    /// The record directory whose `name` is `name`.
    fn record(&self, name: &str) -> Option<PathBuf> {
        std::fs::read_dir(self.dir.join("prof"))
            .ok()?
            .map(|e| e.unwrap().path())
            .find(|p| std::fs::read_to_string(p.join("name")).is_ok_and(|n| n.trim_end() == name))
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let _ = run(profdev().arg("unmount").arg(&self.dir));
    }
}

/// Compile fixtures/trust.c to `out` (mode 0755).
fn build(out: &Path) {
    let o = Command::new("cc")
        .args(["-O1", "-o"])
        .arg(out)
        .arg(fixture("trust.c"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::set_permissions(out, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A directory of mode `mode` in `parent`.
fn dir_with_mode(parent: &Path, name: &str, mode: u32) -> PathBuf {
    let d = parent.join(name);
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
    d
}

/// cat of `path` as nobody: Ok(bytes) or its error.
fn cat_as_nobody(path: &Path) -> Result<Vec<u8>, String> {
    let o = as_nobody("cat \"$1\"", &[path]);
    if o.status.success() {
        Ok(o.stdout)
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}

#[test]
fn object_is_served_only_to_whom_open_would_serve_it() {
    if !privileged("object as nobody", can_mount())
        || !profdev_testkit::tools("object as nobody", &["cc", "setpriv", "setfacl"])
    {
        return;
    }
    let work = tempdir();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let open_dir = dir_with_mode(work.path(), "open", 0o755);
    let private = dir_with_mode(work.path(), "private", 0o700);
    let progs = [
        open_dir.join("trust-open"),
        private.join("trust-private"),
        open_dir.join("trust-acl"),
        open_dir.join("trust-deleted"),
    ];
    for p in &progs {
        build(p);
    }
    let acl = Command::new("setfacl")
        .args(["-m", "u:nobody:---"])
        .arg(&progs[2])
        .output()
        .unwrap();
    assert!(acl.status.success(), "setfacl: {acl:?}");
    // Each denial below is the file system's own: cat by path says so.
    assert!(cat_as_nobody(&progs[0]).is_ok());
    for p in &progs[1..3] {
        let e = cat_as_nobody(p).unwrap_err();
        assert!(e.contains("Permission denied"), "{}: {e}", p.display());
    }

    let m = Shared::new();
    m.ctl("module trust-open trust-private trust-acl trust-deleted\n")
        .unwrap();
    m.ctl("interval 1\n").unwrap();
    m.ctl("start\n").unwrap();
    for p in &progs {
        // 300 ms of CPU time each: sampled by any working profiler.
        let st = Command::new(p).arg("spin").status().unwrap();
        assert!(st.success());
    }
    m.ctl("stop\n").unwrap();
    std::fs::remove_file(&progs[3]).unwrap();

    let object = |name: &str| {
        m.record(name)
            .unwrap_or_else(|| panic!("no record of {name}: each ran 300 ms on the CPU"))
            .join("object")
    };
    // The control: a file nobody may read is served to nobody.
    assert_eq!(
        cat_as_nobody(&object("trust-open")).unwrap(),
        std::fs::read(&progs[0]).unwrap()
    );
    for name in ["trust-private", "trust-acl", "trust-deleted"] {
        let e = cat_as_nobody(&object(name)).unwrap_err();
        assert!(e.contains("Permission denied"), "{name}: {e}");
        // Root reads it, the deleted one too.
        let bytes = std::fs::read(object(name)).unwrap();
        assert_eq!(&bytes[..4], b"\x7fELF", "{name}");
    }
    m.ctl("end\n").unwrap();
}

/// A process of nobody's started from `prog` with `args`, its standard
/// input a pipe (closed when dropped) and its output piped; waits until it
/// runs `prog` (after setpriv's exec).
struct Victim {
    child: Option<std::process::Child>,
}

impl Victim {
    fn start(prog: &Path, args: &[&str]) -> Victim {
        let child = Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(prog)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // After setpriv's exec: it runs prog (or already what prog execs).
        profdev_testkit::wait_until("the victim runs", Duration::from_secs(20), || {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| !e.ends_with("setpriv"))
        });
        Victim { child: Some(child) }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// Close its input, and its output once it exits.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        drop(child.stdin.take());
        let o = child.wait_with_output().unwrap();
        (o.status, String::from_utf8_lossy(&o.stdout).into_owned())
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn a_process_that_is_not_dumpable_is_refused() {
    if !privileged("startcp and startmp1 as nobody", can_mount())
        || !profdev_testkit::tools("startcp as nobody", &["cc", "setpriv"])
    {
        return;
    }
    let work = tempdir();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let prog = work.path().join("trust-victim");
    build(&prog);
    let m = Shared::new();
    m.ctl("module trust-victim\n").unwrap();

    // prctl(PR_SET_DUMPABLE, 0), as ssh-agent and gpg-agent do: its
    // /proc files become root's (wait for that: the prctl runs after exec).
    let v = Victim::start(&prog, &["nodump-wait"]);
    let pid = v.pid();
    profdev_testkit::wait_until(
        "the victim is not dumpable",
        Duration::from_secs(20),
        || {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(format!("/proc/{pid}/status")).is_ok_and(|m| m.uid() == 0)
        },
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status.contains("Uid:\t65534\t65534\t65534\t65534"),
        "{status}"
    );
    for verb in ["startcp", "startmp1"] {
        let e = m.ctl_as_nobody(&format!("{verb} {}", v.pid())).unwrap_err();
        assert!(e.contains("Operation not permitted"), "{verb}: {e}");
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", v.pid())).unwrap();
        assert!(!maps.contains("profdev"), "{verb}: {maps}");
    }
    let (st, _) = v.finish();
    assert!(st.success());

    // The control: the same program, dumpable, is nobody's to count.
    let v = Victim::start(&prog, &["wait"]);
    m.ctl_as_nobody(&format!("startmp1 {}", v.pid())).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", v.pid())).unwrap();
    assert!(maps.contains("libprofdev_mprof.so"), "{maps}");
    m.ctl("stop\n").unwrap();
    let (st, _) = v.finish();
    assert!(st.success());
    m.ctl("end\n").unwrap();
}

#[test]
fn an_exec_of_a_setuid_program_racing_the_attach_gets_no_profdev_code() {
    if !privileged("startcp and startmp1 as nobody", can_mount())
        || !profdev_testkit::tools("startcp as nobody", &["cc", "setpriv"])
    {
        return;
    }
    let work = tempdir();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let prog = work.path().join("trust-victim");
    build(&prog);
    let suid = work.path().join("trust-suid");
    build(&suid);
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let m = Shared::new();
    m.ctl("module trust-victim\n").unwrap();
    let mut refused = 0;
    let mut attached = 0;
    for verb in ["startcp", "startmp1"] {
        for delay in (0..=50).step_by(5) {
            let v = Victim::start(
                &prog,
                &["exec-after", &delay.to_string(), suid.to_str().unwrap()],
            );
            match m.ctl_as_nobody(&format!("{verb} {}", v.pid())) {
                Ok(()) => attached += 1,
                Err(e) => {
                    // Refused at the message or once stopped; or the
                    // process was gone, or busy exec'ing.
                    assert!(
                        e.contains("Operation not permitted")
                            || e.contains("No such process")
                            || e.contains("No such device"),
                        "{verb} after {delay} ms: {e}"
                    );
                    refused += 1;
                }
            }
            // stop flushes an attached process: never the root one.
            m.ctl("stop\n").unwrap();
            let (st, out) = v.finish();
            assert!(
                out.starts_with("euid=0\n"),
                "{verb} after {delay} ms: the set-user-id program did not run as root ({st}): \
                 {out:?}; the test needs a file system that honours set-user-id bits"
            );
            assert!(
                out.ends_with("clean\n") && st.success(),
                "{verb} after {delay} ms: profdev code in a root process: {out}"
            );
            m.ctl("end\n").unwrap();
        }
    }
    eprintln!("{attached} attaches before the exec, {refused} refused");
}
