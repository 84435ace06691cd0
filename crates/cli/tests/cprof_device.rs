//! `startcp PID` on a mounted prof/ctl: the exact parse and each error
//! reaching the writer as its errno (EINVAL, also for the writer's own
//! process, ESRCH, EPERM, EBUSY).

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

fn can_mount() -> Result<(), String> {
    if !profdev_testkit::is_root() {
        return Err("mounting needs root (CAP_SYS_ADMIN)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse does not exist (modprobe fuse)".into());
    }
    Ok(())
}

#[test]
fn startcp_through_the_mount() {
    if !profdev_testkit::privileged("startcp through the mount", can_mount()) {
        return;
    }
    if !profdev_testkit::tools("startcp as nobody", &["setpriv"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // nobody must reach the mount point.
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let dir = tmp.path().canonicalize().unwrap().join("mnt");
    std::fs::create_dir(&dir).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mount", "-b", "--allow-user", "nobody"])
        .arg(&dir)
        .output()
        .unwrap();
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
    let ctl_path = dir.join("prof/ctl");
    let ctl = |msg: &str| -> std::io::Result<usize> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&ctl_path)?
            .write(msg.as_bytes())
    };
    let errno = |r: std::io::Result<usize>| r.unwrap_err().raw_os_error();
    let me = std::process::id();
    for bad in ["startcp\n", "startcp x\n", "startcp 1 2\n", "startcp 0\n"] {
        assert_eq!(errno(ctl(bad)), Some(libc::EINVAL), "{bad:?}");
    }
    assert_eq!(errno(ctl("startcp 2147483647\n")), Some(libc::ESRCH));
    // The writer itself: stopping it would wait for ever (real attaches:
    // tests/cprof_attach.rs).
    let e = ctl(&format!("startcp {me}\n")).unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EINVAL),
        "the writer itself: {e}"
    );
    // nobody may use the mount, but not ptrace pid 1 (root's). The
    // shell's own printf says "I/O error" for any failed write: coreutils'
    // names the errno.
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .args(["sh", "-c", "/usr/bin/printf 'startcp 1\\n' >\"$1\"", "sh"])
        .arg(&ctl_path)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.contains("Operation not permitted"), "{said}");
    // Another mode on: EBUSY, where the seed ignored the request.
    assert_eq!(ctl("startmp1\n").unwrap(), 9);
    assert_eq!(errno(ctl(&format!("startcp {me}\n"))), Some(libc::EBUSY));
    assert_eq!(ctl("stop\n").unwrap(), 5);
}
