//! The mount under attack: every file ends for `cat`, `cp -r`, `tar` and
//! `grep -r` (under a time and a size bound); user nobody is kept out by
//! the server's own rule, not only by modes; control messages cannot forge
//! log lines; a non-empty directory is refused.
//!
//! Needs root and /dev/fuse; skips saying why without them, and fails
//! instead when PROFDEV_REQUIRE_PRIVILEGED=1.

mod common;
use common::*;
use std::ffi::CString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn can_mount() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("mounting needs root (CAP_SYS_ADMIN)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse does not exist (modprobe fuse)".into());
    }
    for tool in ["setpriv", "timeout", "prlimit", "tar", "grep", "cp"] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .stdout(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !found {
            return Err(format!("{tool} is not installed"));
        }
    }
    Ok(())
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn mounted(dir: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/mounts").unwrap();
    table
        .lines()
        .any(|l| l.split(' ').nth(1).map(Path::new) == Some(dir))
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A directory other users can reach, with an empty mount point `mnt`;
/// on drop, the mount is detached and the server killed.
struct Scene {
    tmp: tempfile::TempDir,
    dir: PathBuf,
    pids: Vec<i32>,
}

impl Scene {
    fn new() -> Scene {
        let tmp = tempdir();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = tmp.path().canonicalize().unwrap().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        Scene {
            tmp,
            dir,
            pids: Vec::new(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `profdev mount -b [ARGS] DIR`.
    fn mount(&mut self, args: &[&str]) {
        let out = run(profdev().arg("mount").arg("-b").args(args).arg(&self.dir));
        let err = stderr_of(&out);
        assert!(out.status.success(), "{err}");
        let rest = &err[err.find("(pid ").expect("a pid") + 5..];
        self.pids
            .push(rest[..rest.find(',').unwrap()].parse().unwrap());
        assert!(mounted(&self.dir));
    }

    fn unmount(&mut self) {
        let out = run(profdev().arg("unmount").arg(&self.dir));
        assert!(out.status.success(), "{}", stderr_of(&out));
        assert!(!mounted(&self.dir));
    }

    fn log(&self) -> Vec<u8> {
        std::fs::read(self.dir.with_file_name("mnt.log")).unwrap()
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        for &pid in &self.pids {
            // SAFETY: kill has no memory preconditions; the pid is a server
            // this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if mounted(&self.dir) {
            let c = CString::new(self.dir.as_os_str().as_bytes()).unwrap();
            // SAFETY: c is a valid NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// Load a 3-address table into prf (so that it has something to read).
fn load_prf(s: &Scene) {
    let words: Vec<u8> = [0u64, 0x1000, 0x2000]
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .collect();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(s.path("prf"))
        .unwrap();
    assert_eq!(std::io::Write::write(&mut f, &words).unwrap(), words.len());
}

/// Every file below `dir` (not directories), with its stat size and mode.
fn files(dir: &Path) -> Vec<(PathBuf, u64, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let m = std::fs::metadata(&p).unwrap();
        if m.is_dir() {
            out.extend(files(&p));
        } else {
            out.push((p, m.len(), m.permissions().mode() & 0o7777));
        }
    }
    out
}

/// Slack over the files' own lengths that a reader of the whole mount may
/// add (tar's headers and padding, grep's file names).
const SLACK: u64 = 64 << 20;

/// Run `cmd` for at most `secs` seconds (`timeout -s KILL`), reading at
/// most `bound` + 1 bytes of its output (the first MiB kept): (exit code,
/// that output, its whole length). Fails the test if it timed out, was killed, or wrote more
/// than `bound`: a file that does not end.
fn bounded(what: &str, secs: u32, bound: u64, args: &[&std::ffi::OsStr]) -> (i32, Vec<u8>, u64) {
    let mut child = Command::new("timeout")
        .arg("-s")
        .arg("KILL")
        .arg(secs.to_string())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = Vec::new();
    let mut stdout = child.stdout.take().unwrap().take(bound + 1);
    let mut total = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = stdout.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n as u64;
        if out.len() < 1 << 20 {
            out.extend_from_slice(&buf[..n]);
        }
    }
    let too_much = total > bound;
    if too_much {
        let _ = child.kill();
    }
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    let status = child.wait().unwrap();
    assert!(
        !too_much,
        "{what}: more than {bound} bytes: a file does not end"
    );
    let code = status
        .code()
        .unwrap_or_else(|| panic!("{what}: killed ({status}): {err}"));
    assert_ne!(code, 124, "{what}: timed out: a file does not end; {err}");
    assert_ne!(code, 137, "{what}: killed at the time bound: {err}");
    (code, out, total)
}

#[test]
fn every_file_in_the_mount_ends_for_cat_cp_tar_and_grep() {
    let what = "every_file_in_the_mount_ends";
    if !privileged(what, can_mount()) || !privileged(what, can_sample_system()) {
        return;
    }
    let mut s = Scene::new();
    s.mount(&[]);
    load_prf(&s);
    // Give prof a module directory with a histogram: profile until one
    // appears (bounded), then stop.
    std::fs::write(s.path("prof/ctl"), "start\n").unwrap();
    let has_module = |s: &Scene| {
        std::fs::read_dir(s.path("prof"))
            .unwrap()
            .any(|e| e.unwrap().path().is_dir())
    };
    wait_for("a prof module directory", || {
        let _ = Command::new("sh")
            .arg("-c")
            .arg("i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
            .status();
        has_module(&s)
    });
    std::fs::write(s.path("prof/ctl"), "stop\n").unwrap();

    let all = files(&s.dir);
    // What the whole mount may hold: every file's stat length (each
    // module's `object` is a whole ELF file), and the largest one.
    let total: u64 = all.iter().map(|f| f.1).sum::<u64>() + SLACK;
    let largest = all.iter().map(|f| f.1).max().unwrap_or(0) + SLACK;
    let names: Vec<String> = all
        .iter()
        .map(|(p, _, _)| p.strip_prefix(&s.dir).unwrap().display().to_string())
        .collect();
    for want in [
        "kpctl",
        "kpdata",
        "prf",
        "gmon/ctl",
        "gmon/gmon.out",
        "prof/ctl",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    assert!(names.iter().any(|n| n.ends_with("/histogram")), "{names:?}");

    // cat: each file ends; a readable one with a length gives exactly it.
    for (path, size, mode) in &all {
        let (code, _, len) = bounded(
            &format!("cat {}", path.display()),
            20,
            largest,
            &["cat".as_ref(), path.as_os_str()],
        );
        if mode & 0o444 == 0 {
            // Write-only (prof/ctl, pctl): root may open it, the device
            // refuses the read.
            assert_ne!(code, 0, "cat {} of a write-only file", path.display());
            continue;
        }
        assert_eq!(code, 0, "cat {}", path.display());
        if *size > 0 {
            assert_eq!(len, *size, "cat {} gives stat's size", path.display());
        }
    }
    let prf = std::fs::read(s.path("prf")).unwrap();
    assert_eq!(prf.len(), 64, "3 addresses and 5 counters");

    // cp -r, under a file size bound (SIGXFSZ kills cp past it).
    let copy = s.tmp.path().join("copy");
    let limit = format!("--fsize={largest}");
    let (code, _, _) = bounded(
        "cp -r",
        120,
        total,
        &[
            "prlimit".as_ref(),
            limit.as_ref(),
            "cp".as_ref(),
            "-r".as_ref(),
            s.dir.as_os_str(),
            copy.as_os_str(),
        ],
    );
    assert!(code == 0 || code == 1, "cp -r exited {code}");
    for (path, size, mode) in &all {
        if mode & 0o444 == 0 || *size == 0 {
            continue;
        }
        let c = copy.join(path.strip_prefix(&s.dir).unwrap());
        assert_eq!(
            std::fs::metadata(&c).unwrap().len(),
            *size,
            "{}",
            c.display()
        );
    }

    // tar, to a pipe read under the bound.
    let (code, _, len) = bounded(
        "tar",
        120,
        total,
        &[
            "tar".as_ref(),
            "-cf".as_ref(),
            "-".as_ref(),
            "-C".as_ref(),
            s.tmp.path().as_os_str(),
            "mnt".as_ref(),
        ],
    );
    assert!(code == 0 || code == 2, "tar exited {code}");
    assert!(len > 64, "tar wrote an archive");

    // grep -r, under a memory bound.
    let (code, out, _) = bounded(
        "grep -r",
        120,
        total,
        &[
            "prlimit".as_ref(),
            "--as=2147483648".as_ref(),
            "grep".as_ref(),
            "-r".as_ref(),
            "-c".as_ref(),
            "-a".as_ref(),
            "x".as_ref(),
            s.dir.as_os_str(),
        ],
    );
    assert!(code <= 2, "grep -r exited {code}");
    let listed = String::from_utf8_lossy(&out);
    assert!(listed.contains("/kpdata:"), "{listed}");
    assert!(listed.contains("/prf:"), "{listed}");
    s.unmount();
}

const WRITE: &str = "printf 'start\\n' >\"$1\"";
const READ: &str = "cat \"$1\" >/dev/null";

/// nobody's write of "start" and read, each failing with "Permission
/// denied" (EACCES); the other outcomes say which passed.
fn nobody_is_refused(s: &Scene, writes: &[&str], reads: &[&str]) {
    for f in writes {
        let out = as_nobody(WRITE, &[&s.path(f)]);
        assert!(!out.status.success(), "nobody wrote {f}");
        assert!(
            stderr_of(&out).contains("Permission denied"),
            "{f}: {}",
            stderr_of(&out)
        );
    }
    for f in reads {
        let out = as_nobody(READ, &[&s.path(f)]);
        assert!(!out.status.success(), "nobody read {f}");
        assert!(
            stderr_of(&out).contains("Permission denied"),
            "{f}: {}",
            stderr_of(&out)
        );
    }
}

const WRITES: [&str; 5] = ["kpctl", "prof/ctl", "gmon/ctl", "prf", "prf0"];
const READS: [&str; 5] = ["kpdata", "prf", "prf0", "gmon/gmon.out", "gmon/gmonparam"];

#[test]
fn nobody_gets_eacces_and_changes_nothing() {
    if !privileged("nobody_gets_eacces", can_mount()) {
        return;
    }
    let mut s = Scene::new();
    s.mount(&[]);
    load_prf(&s);
    let before = |s: &Scene| {
        (
            std::fs::read(s.path("kpdata")).unwrap(),
            std::fs::read(s.path("prf")).unwrap(),
            std::fs::read_to_string(s.path("gmon/state")).unwrap(),
            std::fs::read_dir(s.path("prof")).unwrap().count(),
        )
    };
    let then = before(&s);
    nobody_is_refused(&s, &WRITES, &READS);
    let out = as_nobody("ls \"$1\"", &[&s.path("prof")]);
    assert!(
        stderr_of(&out).contains("Permission denied"),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(before(&s), then, "nothing changed");
    assert_eq!(then.2, "off\n");
    s.unmount();

    // The rule is the server's, not the modes': a mount that names another
    // user (uid 1) shows the files 0666, and nobody is still refused.
    s.mount(&["--allow-user", "1"]);
    load_prf(&s);
    let mode = std::fs::metadata(s.path("kpctl"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o666, "owner bits shown to others");
    let then = before(&s);
    nobody_is_refused(&s, &WRITES, &READS);
    assert_eq!(before(&s), then, "nothing changed");
    s.unmount();

    // Named, nobody gets in: reads kpdata, and its bad control message is
    // the device's EINVAL, not EACCES.
    for allow in [["--allow-user", "nobody"], ["--allow-group", "nogroup"]] {
        s.mount(&allow);
        let out = as_nobody("wc -c <\"$1\"", &[&s.path("kpdata")]);
        assert!(out.status.success(), "{allow:?}: {}", stderr_of(&out));
        let len = std::fs::metadata(s.path("kpdata")).unwrap().len();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), len.to_string());
        let out = as_nobody("env printf 'stopwatch\\n' >\"$1\"", &[&s.path("kpctl")]);
        assert!(
            stderr_of(&out).contains("Invalid argument"),
            "{allow:?}: {}",
            stderr_of(&out)
        );
        s.unmount();
    }

    let out = run(profdev()
        .args(["mount", "-b", "--allow-user", "no-such-user-here"])
        .arg(&s.dir));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr_of(&out),
        "profdev mount: --allow-user \"no-such-user-here\": no such user; give a uid or a name from /etc/passwd\n"
    );
}

#[test]
fn control_messages_cannot_forge_log_lines() {
    if !privileged("control_messages_cannot_forge_log_lines", can_mount()) {
        return;
    }
    let mut s = Scene::new();
    s.mount(&[]);
    let hostile = b"st\"op\nprofdev: kprof: forged line\x1b[2J\r\n";
    let err = std::fs::OpenOptions::new()
        .write(true)
        .open(s.path("kpctl"))
        .and_then(|mut f| std::io::Write::write(&mut f, hostile))
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    s.unmount();
    let log = s.log();
    assert!(!log.contains(&0x1b), "no ESC in the log");
    assert!(!log.contains(&b'\r'), "no carriage return in the log");
    let text = String::from_utf8(log).unwrap();
    let forged: Vec<&str> = text.lines().filter(|l| l.contains("forged")).collect();
    assert_eq!(
        forged,
        ["profdev: kprof: write to kpctl failed: unknown control message \"st\\\"op\\nprofdev: kprof: forged line\\u{1b}[2J\""],
        "{text}"
    );
}

#[test]
fn a_directory_with_files_is_refused_unless_nonempty() {
    if !privileged("a_directory_with_files_is_refused", can_mount()) {
        return;
    }
    let mut s = Scene::new();
    std::fs::write(s.path("keep"), b"mine\n").unwrap();
    for args in [&["mount", "-b"][..], &["mount"][..]] {
        let out = run(profdev().args(args).arg(&s.dir));
        assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
        assert_eq!(
            stderr_of(&out),
            format!(
                "profdev mount: {} is not empty: a mount there would hide its files; empty it, choose another directory, or give --nonempty\n",
                s.dir.display()
            )
        );
        assert!(!mounted(&s.dir));
    }
    s.mount(&["--nonempty"]);
    assert!(!s.path("keep").exists(), "hidden while mounted");
    assert!(s.path("kpctl").exists());
    s.unmount();
    assert_eq!(std::fs::read(s.path("keep")).unwrap(), b"mine\n");
}

#[test]
fn a_mount_point_another_user_controls_is_refused() {
    if !privileged(
        "a_mount_point_another_user_controls_is_refused",
        can_mount(),
    ) {
        return;
    }
    let s = Scene::new();
    // A /tmp-like directory (sticky, everyone writes) and one that is
    // shared without the sticky bit; a victim directory root cares about.
    let sticky = s.tmp.path().join("sticky");
    let open = s.tmp.path().join("open");
    let victim = s.tmp.path().join("victim");
    for (d, mode) in [(&sticky, 0o1777), (&open, 0o777), (&victim, 0o755)] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::write(victim.join("precious"), b"root's\n").unwrap();
    let link = sticky.join("mnt");
    let owned = sticky.join("own");
    let out = as_nobody(
        "ln -s \"$1\" \"$2\" && mkdir \"$3\"",
        &[&victim, &link, &owned],
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let theirs = |d: &Path| {
        format!(
            "{} is controlled by user 65534, who could swap it for a link to any directory before the mount; \
             mount on a directory that only you or root can change",
            d.display()
        )
    };
    std::fs::create_dir(open.join("mnt")).unwrap();
    let cases = [
        (link.clone(), theirs(&link)),
        (owned.clone(), theirs(&owned)),
        (
            open.join("mnt"),
            format!(
                "{} is in a directory other users may write (and not sticky), so they could swap it \
                 for a link to any directory before the mount; mount on a directory that only you or root can change",
                open.join("mnt").display()
            ),
        ),
    ];
    for (dir, sentence) in &cases {
        let out = run(profdev().args(["mount", "-b"]).arg(dir));
        assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
        let err = stderr_of(&out);
        assert!(err.ends_with(&format!("{sentence}\n")), "{err}");
        assert!(!mounted(&victim) && !mounted(dir));
    }
    assert_eq!(std::fs::read(victim.join("precious")).unwrap(), b"root's\n");
    // A root-owned mount point in the sticky directory is fine.
    let mine = sticky.join("mine");
    std::fs::create_dir(&mine).unwrap();
    let out = run(profdev().args(["mount", "-b"]).arg(&mine));
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(mounted(&mine));
    let out = run(profdev().arg("unmount").arg(&mine));
    assert!(out.status.success(), "{}", stderr_of(&out));
}

/// A mount point reached through another user's symbolic link is refused
/// before anything is created: nobody's `/tmp/X -> DIR` must not make root
/// create (and mount on) `DIR/mnt`.
#[test]
fn a_path_through_another_users_link_is_refused() {
    if !privileged("a_path_through_another_users_link", can_mount()) {
        return;
    }
    let tmp = tempdir();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let target = tmp.path().join("target");
    std::fs::create_dir(&target).unwrap();
    let link = tmp.path().join("link");
    let out = as_nobody("ln -s \"$1\" \"$2\"", &[&target, &link]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let out = profdev()
        .args(["mount", "-b"])
        .env("PROFDEV_MOUNT", link.join("mnt"))
        .output()
        .unwrap();
    let err = stderr_of(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("is controlled by user"), "{err}");
    assert!(!target.join("mnt").exists(), "created through the link");
    assert!(!target.join("mnt.log").exists());
}
