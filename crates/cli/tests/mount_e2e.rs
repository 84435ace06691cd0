//! End to end: `profdev mount` and `profdev unmount` with the real binary,
//! the real kernel FUSE and the real perf_event engine.
//!
//! Needs root and /dev/fuse (and system-wide sampling for the man page
//! test); skips saying why without them, and fails instead when
//! PROFDEV_REQUIRE_PRIVILEGED=1.

mod common;
use common::*;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The file system type mounted at `dir`, from /proc/mounts.
fn mounted(dir: &Path) -> Option<String> {
    let table = std::fs::read_to_string("/proc/mounts").unwrap();
    table
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (Path::new(f[1]) == dir).then(|| f[2].to_string())
        })
        .next_back()
}

fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    wait_until(what, Duration::from_secs(20), cond);
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A temporary directory (reachable by other users) with a mount point
/// `mnt` in it; on drop, whatever is still mounted there is detached and
/// any server still running is killed.
struct Scene {
    tmp: tempfile::TempDir,
    dir: PathBuf,
    servers: Vec<Child>,
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
            servers: Vec::new(),
            pids: Vec::new(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `profdev mount -b DIR`: the server's pid, from its message.
    fn background(&mut self) -> i32 {
        let out = run(profdev().arg("mount").arg("-b").arg(&self.dir));
        let err = stderr_of(&out);
        assert!(out.status.success(), "{err}");
        let line = err
            .lines()
            .find(|l| l.contains("in the background"))
            .unwrap_or_else(|| panic!("{err}"));
        assert_eq!(
            line,
            format!(
                "profdev: serving {} at {} in the background (pid {}, log {}.log)",
                served_files(),
                self.dir.display(),
                pid_in(line),
                self.dir.display()
            )
        );
        assert_eq!(mounted(&self.dir).as_deref(), Some("fuse.profdev"));
        let pid = pid_in(line);
        self.pids.push(pid);
        pid
    }

    /// `profdev mount DIR` in the foreground, its log in `fg.log`; returns
    /// once the mount answers.
    fn foreground(&mut self) -> &mut Child {
        let log = std::fs::File::create(self.tmp.path().join("fg.log")).unwrap();
        let child = profdev()
            .arg("mount")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.servers.push(child);
        let kpctl = self.path("kpctl");
        wait_for("the foreground mount", || kpctl.exists());
        self.servers.last_mut().unwrap()
    }

    fn fg_log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("fg.log")).unwrap()
    }

    fn bg_log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("mnt.log")).unwrap()
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        for c in &mut self.servers {
            let _ = c.kill();
            let _ = c.wait();
        }
        for &pid in &self.pids {
            // SAFETY: kill has no memory preconditions; the pid is a server
            // this test started (or a finished one).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if mounted(&self.dir).is_some() {
            let c = CString::new(self.dir.as_os_str().as_bytes()).unwrap();
            // SAFETY: c is a valid NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

fn pid_in(line: &str) -> i32 {
    let rest = &line[line.find("(pid ").expect("a pid") + 5..];
    rest[..rest.find(',').unwrap()].parse().unwrap()
}

fn alive(pid: i32) -> bool {
    // A zombie child of the launcher is reaped by init; /proc says if it
    // is still running.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

/// write(2) on a fresh descriptor; the errno on failure.
fn raw_write(path: &Path, data: &[u8]) -> Result<usize, i32> {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: c is a valid path; data outlives the call; fd is closed.
    unsafe {
        let fd = libc::open(c.as_ptr(), libc::O_WRONLY);
        assert!(fd >= 0, "open {}", path.display());
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = *libc::__errno_location();
        libc::close(fd);
        if n < 0 {
            Err(err)
        } else {
            Ok(n as usize)
        }
    }
}

fn sh(script: &str) -> std::process::Output {
    Command::new("sh").arg("-c").arg(script).output().unwrap()
}

fn ok(out: std::process::Output) -> Vec<u8> {
    assert!(out.status.success(), "{}", stderr_of(&out));
    out.stdout
}

/// The kprof(3) man page's example, in sh, against a real mount: profile
/// a kernel workload, copy kpdata, format it, find the workload's kernel
/// function. Then every way of reading kpdata agrees, stat shows its
/// length, a bad control message is EINVAL and changes nothing, and the
/// unmount leaves nothing behind.
#[test]
fn man_page_sample_function_finds_the_workload() {
    let what = "man_page_sample_function_finds_the_workload";
    if !privileged(what, can_mount()) || !privileged(what, can_sample_system()) {
        return;
    }
    let mut s = Scene::new();
    let pid = s.background();
    let copy = s.tmp.path().join("kpdata");

    // Inferno's example, with sh's function syntax:
    //     fn sample { echo start >/dev/kpctl; $1; echo stop >/dev/kpctl;
    //                 cp /dev/kpdata /n/remote/tmp/kpdata }
    let script = format!(
        r#"
M={m}
sample() {{
	echo start >$M/kpctl
	eval "$1"
	echo stop >$M/kpctl
	cp $M/kpdata {copy}
}}
sample 'dd if=/dev/zero of=/dev/null bs=1M count=20000 2>/dev/null'
"#,
        m = s.dir.display(),
        copy = copy.display()
    );
    ok(sh(&script));
    let out = run(profdev().arg("kprof").arg("/proc/kallsyms").arg(&copy));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{table}{}", stderr_of(&out));
    let top = kprof_top(&table, 5);
    // Five, not one: the machine may be busy with other work meanwhile.
    assert!(
        top.iter().any(|s| is_zeroing(s)),
        "top five {top:?}\n{table}"
    );

    // Profiling is off: every reader sees the copy's bytes.
    let want = std::fs::read(&copy).unwrap();
    let kpdata = s.path("kpdata");
    let p = kpdata.display();
    assert_eq!(ok(sh(&format!("cat {p}"))), want, "cat");
    // Word by word (the first 64 KiB: 16384 reads through FUSE; the whole
    // file is read that way in profdev-fuse's tests), and with dd's skip.
    assert_eq!(
        ok(sh(&format!("dd if={p} bs=4 count=16384 status=none"))),
        &want[..65536],
        "dd bs=4"
    );
    assert_eq!(
        ok(sh(&format!("dd if={p} bs=4 skip=1000 count=3 status=none"))),
        &want[4000..4012],
        "dd bs=4 skip=1000"
    );
    let copy2 = s.tmp.path().join("kpdata.cp");
    ok(sh(&format!("cp {p} {}", copy2.display())));
    assert_eq!(std::fs::read(&copy2).unwrap(), want, "cp");
    assert_eq!(
        ok(sh(&format!("od -An -tx4 -v {p}"))),
        ok(sh(&format!("od -An -tx4 -v {}", copy.display()))),
        "od"
    );
    let words = u32::from_be_bytes(want[12..16].try_into().unwrap()) as usize;
    assert_eq!(want.len(), words * 4);
    assert_eq!(
        String::from_utf8(ok(sh(&format!("stat -c %s {p}")))).unwrap(),
        format!("{}\n", want.len()),
        "stat shows the true length"
    );

    // An unknown control message: EINVAL from write(2), logged quoted,
    // and the counts recorded before are still there.
    assert_eq!(
        raw_write(&s.path("kpctl"), b"stopwatch\n"),
        Err(libc::EINVAL)
    );
    assert_eq!(std::fs::read(&kpdata).unwrap(), want);
    let log = s.bg_log();
    assert!(
        log.contains(
            "profdev: kprof: write to kpctl failed: unknown control message \"stopwatch\"\n"
        ),
        "{log}"
    );

    let out = run(profdev().arg("unmount").arg(&s.dir));
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(stderr_of(&out), log_stays(&s.dir));
    assert_eq!(mounted(&s.dir), None);
    wait_for("the server to exit", || !alive(pid));
    assert!(s.bg_log().ends_with(&format!(
        "profdev: {} was unmounted; server exiting\n",
        s.dir.display()
    )));
}

#[test]
fn sigterm_while_a_reader_holds_kpdata_leaves_nothing_mounted() {
    if !privileged("sigterm_while_a_reader_holds_kpdata", can_mount()) {
        return;
    }
    let mut s = Scene::new();
    let server = s.foreground();
    let pid = server.id() as i32;
    let dir = s.dir.clone();
    let held = std::fs::File::open(dir.join("kpdata")).unwrap();
    // SAFETY: kill has no memory preconditions; pid is our child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = s.servers.last_mut().unwrap().wait().unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(mounted(&dir), None, "nothing left in /proc/mounts");
    let log = s.fg_log();
    assert!(
        log.contains(&format!("profdev: SIGTERM: unmounted {}", dir.display())),
        "{log}"
    );
    drop(held);
    // The name is free again: a new server mounts there.
    s.background();
}

#[test]
fn sigint_and_outside_unmount_end_a_foreground_server() {
    if !privileged("sigint_and_outside_unmount", can_mount()) {
        return;
    }
    let mut s = Scene::new();
    let pid = s.foreground().id() as i32;
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    assert!(s.servers[0].wait().unwrap().success());
    assert_eq!(mounted(&s.dir), None);

    s.foreground();
    let out = run(profdev().arg("unmount").arg(&s.dir));
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(s.servers[1].wait().unwrap().success());
    assert_eq!(mounted(&s.dir), None);
    assert!(s.fg_log().contains("was unmounted; server exiting"));
}

/// Kill the server, wait until its mount is dead (stat says "transport
/// endpoint is not connected").
fn kill_server(s: &Scene, pid: i32) {
    // SAFETY: kill has no memory preconditions; pid is our server.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    wait_for("the mount to die", || {
        std::fs::metadata(&s.dir)
            .err()
            .and_then(|e| e.raw_os_error())
            == Some(libc::ENOTCONN)
    });
    assert_eq!(mounted(&s.dir).as_deref(), Some("fuse.profdev"));
}

#[test]
fn sigkill_then_unmount_clears_the_dead_mount() {
    if !privileged("sigkill_then_unmount", can_mount()) {
        return;
    }
    let mut s = Scene::new();
    let pid = s.background();
    kill_server(&s, pid);
    let out = run(profdev().arg("unmount").arg(&s.dir));
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        stderr_of(&out),
        format!(
            "profdev: cleared a dead mount at {} (its server had died)\n{}",
            s.dir.display(),
            log_stays(&s.dir)
        )
    );
    assert_eq!(mounted(&s.dir), None, "nothing left in /proc/mounts");
}

/// What unmount says of a background server's log, `DIR.log`.
fn log_stays(dir: &Path) -> String {
    format!(
        "profdev: the server's log stays in {}.log (remove it when done)\n",
        dir.display()
    )
}

/// `PROFDEV_MOUNT=DIR`: mount, stat and unmount all act on DIR, which
/// mount creates (0755, its missing parents too) as it creates
/// /run/profdev; stat suggests only a mount that works.
#[test]
fn profdev_mount_names_the_directory_of_every_command() {
    if !privileged("profdev_mount_names_the_directory", can_mount()) {
        return;
    }
    let mut s = Scene::new();
    let dir = s.tmp.path().canonicalize().unwrap().join("new/mnt");
    s.dir = dir.clone();
    let with_env = |args: &[&str]| run(profdev().env("PROFDEV_MOUNT", &dir).args(args));

    let out = with_env(&["stat"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr_of(&out),
        format!(
            "profdev stat: no device server is mounted at {0} (start one with: profdev mount -b {0})\n",
            dir.display()
        )
    );
    assert!(!dir.exists(), "stat changes nothing");

    let out = with_env(&["mount", "-b"]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    let pid = pid_in(&err);
    s.pids.push(pid);
    assert_eq!(
        err,
        format!(
            "profdev: serving {} at {} in the background (pid {pid}, log {}.log)\n",
            served_files(),
            dir.display(),
            dir.display()
        )
    );
    assert_eq!(mounted(&dir).as_deref(), Some("fuse.profdev"));
    let parent = std::fs::metadata(dir.parent().unwrap()).unwrap();
    assert_eq!(parent.mode_bits() & !0o022, 0o755 & !0o022);

    let out = with_env(&["stat"]);
    assert!(out.status.success(), "{}", stderr_of(&out));

    let out = with_env(&["unmount"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(stderr_of(&out), log_stays(&dir));
    assert_eq!(mounted(&dir), None);
    wait_for("the server to exit", || !alive(pid));

    // A directory with files: stat does not suggest hiding them.
    let full = s.tmp.path().canonicalize().unwrap();
    let out = run(profdev().arg("stat").arg(&full));
    assert_eq!(
        stderr_of(&out),
        format!(
            "profdev stat: no device server is mounted at {} ({} is not empty: a mount there \
             would hide its files; start one on a new or empty directory with: profdev mount \
             -b DIR, and set PROFDEV_MOUNT=DIR)\n",
            full.display(),
            full.display()
        )
    );
}

/// The files the device table puts at the mount root, in table order:
/// kprof's, then prf's (one per online CPU).
fn served_files() -> String {
    let mut files: Vec<String> = ["kpctl", "kpdata", "prf"].map(String::from).to_vec();
    let cpus = profdev_sample::online_cpus().unwrap();
    files.extend(cpus.iter().map(|c| format!("prf{c}")));
    files.push("gmon".into());
    files.push("prof".into());
    files.push("stat".into());
    files.join(" ")
}

#[test]
fn sigkill_then_mount_clears_the_dead_mount_and_serves() {
    if !privileged("sigkill_then_mount", can_mount()) {
        return;
    }
    let mut s = Scene::new();
    let pid = s.background();
    kill_server(&s, pid);
    let out = run(profdev().arg("mount").arg("-b").arg(&s.dir));
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.starts_with(&format!(
            "profdev: cleared a dead mount at {} (its server had died)\nprofdev: serving {} at",
            s.dir.display(),
            served_files()
        )),
        "{err}"
    );
    s.pids.push(pid_in(err.lines().nth(1).unwrap()));
    assert_eq!(
        std::fs::metadata(s.path("kpdata")).unwrap().mode_bits(),
        0o600
    );
    assert!(run(profdev().arg("unmount").arg(&s.dir)).status.success());
    assert_eq!(mounted(&s.dir), None);
}

trait ModeBits {
    fn mode_bits(&self) -> u32;
}

impl ModeBits for std::fs::Metadata {
    fn mode_bits(&self) -> u32 {
        self.permissions().mode() & 0o7777
    }
}

/// profdev's own commands report errors in one form, `profdev CMD: …`,
/// usage errors included (clap's `error: …` is not passed on as is).
#[test]
fn errors_take_one_form() {
    for (args, want) in [
        (
            &["sample", "-x"][..],
            "profdev sample: unexpected argument '-x' found\n",
        ),
        (
            &["gmon"][..],
            "profdev gmon: the following required arguments were not provided:\n",
        ),
        (
            &["mount", "-q"][..],
            "profdev mount: unexpected argument '-q' found\n",
        ),
        (
            &["unmount", "a", "b"][..],
            "profdev unmount: unexpected argument 'b' found\n",
        ),
    ] {
        let out = run(profdev().args(args));
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with(want), "{args:?}: {err}");
        assert!(!err.contains("error:"), "{args:?}: {err}");
    }
    let d = tempdir();
    let out = run(profdev().arg("unmount").arg(d.path()));
    assert_eq!(
        stderr_of(&out),
        format!(
            "profdev unmount: nothing is mounted at {}\n",
            d.path().display()
        )
    );
}

#[test]
fn bad_mount_points_are_one_sentence() {
    if !privileged("bad_mount_points_are_one_sentence", can_mount()) {
        return;
    }
    let mut s = Scene::new();
    let t = s.tmp.path().canonicalize().unwrap();
    let fails = |args: &[&std::ffi::OsStr]| -> String {
        let out = run(profdev().args(args));
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr_of(&out));
        stderr_of(&out)
    };
    let file = t.join("file");
    std::fs::write(&file, b"").unwrap();
    // A missing DIR is created; one that cannot be is one sentence.
    let under_a_file = file.join("mnt");
    let err = fails(&["mount".as_ref(), under_a_file.as_os_str()]);
    assert!(
        err.starts_with("profdev mount: cannot create the mount point: ")
            && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(
        fails(&["mount".as_ref(), "-b".as_ref(), file.as_os_str()]),
        format!("profdev mount: {} is not a directory\n", file.display())
    );
    assert_eq!(
        fails(&["unmount".as_ref(), s.dir.as_os_str()]),
        format!(
            "profdev unmount: nothing is mounted at {}\n",
            s.dir.display()
        )
    );

    // Something else mounted there.
    let other = t.join("tmpfs");
    std::fs::create_dir(&other).unwrap();
    assert!(Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&other)
        .status()
        .unwrap()
        .success());
    let busy = fails(&["mount".as_ref(), other.as_os_str()]);
    let refused = fails(&["unmount".as_ref(), other.as_os_str()]);
    let c = CString::new(other.as_os_str().as_bytes()).unwrap();
    // SAFETY: c is a valid path.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    assert_eq!(
        busy,
        format!(
            "profdev mount: {} is already a mount point (tmpfs); unmount it first\n",
            other.display()
        )
    );
    assert_eq!(
        refused,
        format!(
            "profdev unmount: {} is a tmpfs mount, not a profdev one; profdev leaves it alone\n",
            other.display()
        )
    );

    // A live profdev server there.
    s.background();
    assert_eq!(
        fails(&["mount".as_ref(), "-b".as_ref(), s.dir.as_os_str()]),
        format!(
            "profdev mount: a profdev server is already mounted at {}\n",
            s.dir.display()
        )
    );
    assert!(run(profdev().arg("unmount").arg(&s.dir)).status.success());

    // Not privileged: nobody may not mount. (A copy of the binary, so that
    // nobody can run it wherever the build tree is.)
    let exe = profdev_copy(&t);
    let out = Command::new(&exe)
        .arg("mount")
        .arg(&s.dir)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr_of(&out),
        format!(
            "profdev mount: mounting {} needs CAP_SYS_ADMIN; run profdev mount as root\n",
            s.dir.display()
        )
    );

    // No /dev/fuse: in a mount namespace of its own, /dev is an empty tmpfs.
    let root = CString::new("/").unwrap();
    let dev = CString::new("/dev").unwrap();
    let tmpfs = CString::new("tmpfs").unwrap();
    let mut cmd = profdev();
    cmd.arg("mount").arg(&s.dir);
    // SAFETY: the hook only makes system calls (unshare, mount) on
    // C strings built before the fork, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(
                    std::ptr::null(),
                    root.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                || libc::mount(
                    tmpfs.as_ptr(),
                    dev.as_ptr(),
                    tmpfs.as_ptr(),
                    0,
                    std::ptr::null(),
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert_eq!(
        stderr_of(&out),
        "profdev mount: /dev/fuse does not exist; load the fuse module (modprobe fuse)\n"
    );
    assert_eq!(mounted(&s.dir), None);
}
