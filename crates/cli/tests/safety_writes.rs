//! Issue 11's write rules, attacked: run as root, with user `nobody`
//! planting symbolic links at every temporary and final name profdev
//! writes (in a directory nobody owns and in a /tmp-like sticky 1777 one),
//! each pointing at a root-owned victim. The victim must come out
//! untouched (content and mtime), the links at old fixed temporary names
//! must still be links, and no file outside the output may change. Also:
//! a directory writable by others and not sticky is refused with a
//! sentence; `-o` on a full 64 KiB tmpfs leaves no partial file and no
//! temporary, names the file and the error, still prints the report, and
//! exits non-zero; every file holding kernel addresses is 0600.

mod common;
use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

/// Can this process run the attacks: root (to run profdev as the victim's
/// owner) and setpriv (to act as nobody)?
fn can_attack() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(
            "the symlink attacks need root (profdev as root, the attacker as nobody)".into(),
        );
    }
    match Command::new("setpriv").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("setpriv is not installed".into()),
    }
}

fn can_mount() -> Result<(), String> {
    can_attack()?;
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse is missing".into());
    }
    can_sample_system()
}

/// Run `cmd args` as nobody:nogroup (`ln` makes symbolic links); it must
/// succeed.
fn as_nobody(cmd: &str, args: &[&Path]) {
    let (cmd, flags): (&str, &[&str]) = match cmd {
        "ln" => ("ln", &["-s"]),
        other => (other, &[]),
    };
    let o = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--",
            cmd,
        ])
        .args(flags)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "as nobody: {cmd} {args:?}: {o:?}");
}

/// `stat -c %a`.
fn mode_of(path: &Path) -> String {
    let o = Command::new("stat")
        .args(["-c", "%a"])
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "stat {}: {o:?}", path.display());
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn is_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// A regular file profdev wrote as root with `mode`.
fn assert_written(path: &Path, mode: &str) {
    let m = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        m.file_type().is_file(),
        "{} is no regular file",
        path.display()
    );
    assert_eq!(m.uid(), 0, "{}", path.display());
    assert!(m.len() > 0, "{} is empty", path.display());
    assert_eq!(mode_of(path), mode, "{}", path.display());
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Everything under a directory: (path, kind, length, mtime, mode).
type Snapshot = Vec<(PathBuf, bool, u64, SystemTime, u32)>;

fn snapshot(dir: &Path) -> Snapshot {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let m = std::fs::symlink_metadata(&p).unwrap();
        v.push((
            p.clone(),
            m.is_dir(),
            m.len(),
            m.modified().unwrap(),
            m.mode(),
        ));
        if m.is_dir() {
            v.extend(snapshot(&p));
        }
    }
    v.sort();
    v
}

/// The scene: a root-owned victim file and directory, a directory owned
/// by nobody, and a sticky 1777 directory owned by root.
struct World {
    top: tempfile::TempDir,
    victims: PathBuf,
    before: Snapshot,
}

impl World {
    fn new() -> World {
        let top = tempdir();
        let p = top.path();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        let victims = p.join("victims");
        std::fs::create_dir(&victims).unwrap();
        std::fs::write(victims.join("victim"), b"precious\n").unwrap();
        std::fs::create_dir(victims.join("vdir")).unwrap();
        std::fs::write(victims.join("vdir/kept"), b"kept\n").unwrap();
        let attacker = p.join("attacker");
        std::fs::create_dir(&attacker).unwrap();
        std::os::unix::fs::chown(&attacker, Some(65534), Some(65534)).unwrap();
        let sticky = p.join("sticky");
        std::fs::create_dir(&sticky).unwrap();
        std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let before = snapshot(&victims);
        World {
            top,
            victims,
            before,
        }
    }

    fn attacker(&self) -> PathBuf {
        self.top.path().join("attacker")
    }

    fn sticky(&self) -> PathBuf {
        self.top.path().join("sticky")
    }

    fn victim(&self) -> PathBuf {
        self.victims.join("victim")
    }

    /// The two shared directories the attacker can plant in.
    fn shared(&self) -> [PathBuf; 2] {
        [self.attacker(), self.sticky()]
    }

    /// As nobody: a link at `dir/name` to the victim file.
    fn plant(&self, dir: &Path, name: &str) {
        as_nobody("ln", &[&self.victim(), &dir.join(name)]);
        assert!(is_link(&dir.join(name)));
    }

    fn assert_untouched(&self) {
        assert_eq!(std::fs::read(self.victim()).unwrap(), b"precious\n");
        assert_eq!(
            snapshot(&self.victims),
            self.before,
            "a file outside the output changed"
        );
    }
}

#[test]
fn sample_replaces_planted_links_and_refuses_a_planted_output_dir() {
    if !privileged(
        "sample symlink attack",
        can_attack().and_then(|()| can_sample_system()),
    ) {
        return;
    }
    let w = World::new();
    for d in w.shared() {
        let out = d.join("profdev.out");
        as_nobody("mkdir", &[&out]);
        // kpdata's final name, and the seed's fixed temporaries.
        for name in ["kpdata", "kpdata.tmp", ".profdev-write-test"] {
            w.plant(&out, name);
        }
        let o = run(profdev()
            .current_dir(&d)
            .args(["sample", "-F", "100", "--", "true"]));
        assert!(o.status.success(), "{}: {}", d.display(), stderr(&o));
        assert_written(&out.join("kpdata"), "600");
        assert!(is_link(&out.join("kpdata.tmp")) && is_link(&out.join(".profdev-write-test")));
        assert_eq!(names(&out), [".profdev-write-test", "kpdata", "kpdata.tmp"]);
        w.assert_untouched();
    }
    // profdev.out itself a link by nobody to a root directory: refused.
    let d = w.sticky();
    as_nobody("ln", &[&w.victims.join("vdir"), &d.join("planted.out")]);
    let o = run(profdev().current_dir(&d).args([
        "sample",
        "-F",
        "100",
        "-o",
        "planted.out",
        "--",
        "true",
    ]));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "profdev sample: refusing to use planted.out: it is a symbolic link that uid 65534 \
         controls; remove it or choose another directory\n"
    );
    w.assert_untouched();
}

/// A tiny C program (with its symbol table) that exits with `argv[1]`.
fn exit_program(dir: &Path) -> PathBuf {
    let src = dir.join("exit.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\nint main(int c, char **v) { return c > 1 ? atoi(v[1]) : 0; }\n",
    )
    .unwrap();
    let exe = dir.join("exit");
    let o = Command::new("gcc").arg("-o").arg(&exe).arg(&src).output();
    match o {
        Ok(o) if o.status.success() => exe,
        other => panic!("gcc (the tests need a C compiler): {other:?}"),
    }
}

#[test]
fn gmon_replaces_a_planted_link() {
    if !privileged(
        "gmon symlink attack",
        can_attack().and_then(|()| can_sample_system()),
    ) {
        return;
    }
    let w = World::new();
    let prog = exit_program(w.top.path());
    for d in w.shared() {
        w.plant(&d, "gmon.out");
        let o = run(profdev()
            .current_dir(&d)
            .args(["gmon", "-F", "100", "--"])
            .arg(&prog));
        assert!(o.status.success(), "{}: {}", d.display(), stderr(&o));
        assert_written(&d.join("gmon.out"), "644");
        assert_eq!(names(&d), ["gmon.out"]);
        w.assert_untouched();
    }
}

/// A device server mounted on `dir`, unmounted on drop.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = run(profdev().arg("unmount").arg(&self.0));
    }
}

/// Wait, within a bound, until `done` holds.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn mount_log_kgmon_and_prf_logs_resist_planted_links_and_are_0600() {
    if !privileged("mount/kgmon/prf symlink attack", can_mount()) {
        return;
    }
    let w = World::new();
    // DIR.log planted beside a mount point: a link, and nobody's own file.
    for d in w.shared() {
        let mnt = d.join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        w.plant(&d, "mnt.log");
        let o = run(profdev().arg("mount").arg("-b").arg(&mnt));
        let _cleanup = Mount(mnt.clone());
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        // In nobody's own directory the mount point itself is refused
        // first (nobody could swap it for a link); in the sticky one the
        // planted DIR.log is.
        let refusal = if d == w.attacker() {
            format!("{} is controlled by user 65534", mnt.display())
        } else {
            format!(
                "refusing to append to {}: it is a symbolic link",
                d.join("mnt.log").display()
            )
        };
        assert!(stderr(&o).contains(&refusal), "{}", stderr(&o));
        w.assert_untouched();
    }
    let d = w.sticky();
    as_nobody("rm", &[&d.join("mnt.log")]);
    as_nobody("touch", &[&d.join("mnt.log")]);
    let o = run(profdev().arg("mount").arg("-b").arg(d.join("mnt")));
    let _cleanup = Mount(d.join("mnt"));
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        stderr(&o).contains("it belongs to uid 65534, not to uid 0"),
        "{}",
        stderr(&o)
    );

    // A mount of our own, its log 0600.
    let mnt = w.top.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let o = run(profdev().arg("mount").arg("-b").arg(&mnt));
    assert!(o.status.success(), "{o:?}");
    let _mounted = Mount(mnt.clone());
    assert_written(&w.top.path().join("mnt.log"), "600");

    // kgmon -p: gmon.out and vmlinux.syms over planted links, 0600.
    for d in w.shared() {
        for name in ["gmon.out", "vmlinux.syms"] {
            w.plant(&d, name);
        }
        let o = run(profdev()
            .current_dir(&d)
            .env("PROFDEV_MOUNT", &mnt)
            .args(["kgmon", "-p"]));
        assert!(o.status.success(), "{}", stderr(&o));
        assert_written(&d.join("gmon.out"), "600");
        assert_written(&d.join("vmlinux.syms"), "600");
        assert_eq!(names(&d).iter().filter(|n| n.starts_with('.')).count(), 0);
        w.assert_untouched();
    }

    // prf logs: a planted link is refused by prfsnap and prfdc; new logs
    // are 0600 and hold whole records.
    let prf = mnt.join("prf");
    let o = run(profdev().arg("prfld").arg("-f").arg(&prf));
    assert!(o.status.success(), "prfld: {o:?}");
    for d in w.shared() {
        w.plant(&d, "snap.log");
        let o = run(profdev()
            .arg("prfsnap")
            .arg("-f")
            .arg(&prf)
            .arg(d.join("snap.log")));
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        assert!(
            stderr(&o).contains("it is a symbolic link"),
            "{}",
            stderr(&o)
        );
        w.plant(&d, "dc.log");
        let o = run(profdev()
            .arg("prfdc")
            .arg("-f")
            .arg(&prf)
            .args(["-u", "1", "-n", "1"])
            .arg(d.join("dc.log")));
        assert_eq!(stderr(&o), "prfdc: existing file would be truncated\n");
        w.assert_untouched();

        let log = d.join("new.log");
        for _ in 0..2 {
            let o = run(profdev().arg("prfsnap").arg("-f").arg(&prf).arg(&log));
            assert!(o.status.success(), "prfsnap: {o:?}");
        }
        assert_written(&log, "600");
        let bytes = std::fs::read(&log).unwrap();
        let parsed = profdev_formats::prflog::parse(&bytes).unwrap();
        assert_eq!(parsed.records.len(), 2);
        assert!(parsed.partial.is_none());

        let dc = d.join("dc-new.log");
        let o = run(profdev()
            .arg("prfdc")
            .arg("-f")
            .arg(&prf)
            .args(["-u", "1", "-n", "1"])
            .arg(&dc));
        assert!(o.status.success(), "prfdc: {o:?}");
        // The collector writes in the background: header and record in one
        // write, so the log parses once it is not empty.
        wait_for("prfdc's record", || {
            std::fs::read(&dc).is_ok_and(|b| !b.is_empty())
        });
        assert_written(&dc, "600");
        let parsed = profdev_formats::prflog::parse(&std::fs::read(&dc).unwrap()).unwrap();
        assert_eq!(parsed.records.len(), 1);
        w.assert_untouched();
    }
}

#[test]
fn a_directory_writable_by_others_and_not_sticky_is_refused() {
    if !privileged("shared directory refusal", can_attack()) {
        return;
    }
    let w = World::new();
    let open = w.top.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let sentence = format!(
        "refusing to write in {0}: it is writable by other users and not sticky, so they could \
         swap its files; use a directory only you can write (chmod go-w {0}) or a sticky one \
         such as /tmp",
        open.display()
    );
    let o = run(profdev()
        .arg("sample")
        .arg("-o")
        .arg(&open)
        .args(["--", "true"]));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), format!("profdev sample: {sentence}\n"));
    let prog = exit_program(w.top.path());
    let o = run(profdev()
        .arg("gmon")
        .arg("-o")
        .arg(open.join("gmon.out"))
        .arg("--")
        .arg(&prog));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), format!("profdev gmon: {sentence}\n"));
    // prfsnap refuses before it opens anything but its device (a regular
    // file stands in for one: prf commands refuse anything else).
    let fake_device = w.top.path().join("prf");
    std::fs::write(&fake_device, b"").unwrap();
    let o = run(profdev()
        .arg("prfsnap")
        .arg("-f")
        .arg(&fake_device)
        .arg(open.join("log")));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!("prfsnap: cannot creat log file: {sentence}\n")
    );
    assert!(
        names(&open).is_empty(),
        "nothing written: {:?}",
        names(&open)
    );
    w.assert_untouched();
}

/// A 64 KiB tmpfs, unmounted on drop.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn new() -> Tmpfs {
        let d = tempdir();
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs"])
            .arg(d.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "mount tmpfs: {o:?}");
        Tmpfs(d)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    /// Fill it up: a filler file that takes the last free byte.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.path().join("filler")).unwrap();
        let chunk = [0u8; 512];
        let mut wrote = 0;
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(n) => wrote += n,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
            assert!(wrote <= 64 * 1024, "a 64 KiB tmpfs took more than 64 KiB");
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.path()).status();
    }
}

fn no_space(path: &Path) -> String {
    format!(
        "cannot write {}: No space left on device (os error 28)",
        path.display()
    )
}

#[test]
fn sample_on_a_full_disk_keeps_the_report_and_leaves_no_partial_file() {
    if !privileged(
        "sample on a full disk",
        can_attack().and_then(|()| can_sample_system()),
    ) {
        return;
    }
    let fs = Tmpfs::new();
    let out = fs.path().join("out");
    for (cmd, code) in [("exit 0", 1), ("exit 3", 3)] {
        let o = run(profdev()
            .args(["sample", "--report", "-", "-F", "100", "-o"])
            .arg(&out)
            .args(["--", "sh", "-c", cmd]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(code), "{cmd}: {err}");
        assert!(
            err.contains(&format!(
                "profdev sample: {}\n",
                no_space(&out.join("kpdata"))
            )),
            "{err}"
        );
        assert!(err.contains("not written"), "{err}");
        let report = String::from_utf8_lossy(&o.stdout);
        assert!(
            report.starts_with("total: "),
            "the report is still written (--report -: to stdout): {report}"
        );
        assert!(
            names(&out).is_empty(),
            "no kpdata and no temporary: {:?}",
            names(&out)
        );
    }
}

#[test]
fn gmon_on_a_full_disk_leaves_no_partial_file() {
    if !privileged(
        "gmon on a full disk",
        can_attack().and_then(|()| can_sample_system()),
    ) {
        return;
    }
    let top = tempdir();
    let prog = exit_program(top.path());
    let fs = Tmpfs::new();
    fs.fill();
    let file = fs.path().join("gmon.out");
    for (arg, code) in [("0", 1), ("3", 3)] {
        let o = run(profdev()
            .args(["gmon", "-F", "100", "-o"])
            .arg(&file)
            .arg("--")
            .arg(&prog)
            .arg(arg));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(code), "{err}");
        assert!(
            err.contains(&format!("profdev gmon: {}\n", no_space(&file))),
            "{err}"
        );
        assert!(err.contains("did not write"), "{err}");
        assert_eq!(names(fs.path()), ["filler"], "no gmon.out and no temporary");
    }
}

#[test]
fn kgmon_dump_on_a_full_disk_leaves_no_partial_file() {
    if !privileged("kgmon -p on a full disk", can_mount()) {
        return;
    }
    let top = tempdir();
    let mnt = top.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let o = run(profdev().arg("mount").arg("-b").arg(&mnt));
    assert!(o.status.success(), "{o:?}");
    let _mounted = Mount(mnt.clone());
    let fs = Tmpfs::new();
    // vmlinux.syms (a few hundred bytes) fits; gmon.out (megabytes) does not.
    let o = run(profdev()
        .current_dir(fs.path())
        .env("PROFDEV_MOUNT", &mnt)
        .args(["kgmon", "-p"]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.ends_with(&format!(
            "kgmon: {}\n",
            no_space(&Path::new(".").join("gmon.out"))
        )),
        "{err}"
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "kgmon: kernel profiling is off.\n"
    );
    assert_eq!(
        names(fs.path()),
        ["vmlinux.syms"],
        "gmon.out absent, no temporary"
    );
    assert_written(&fs.path().join("vmlinux.syms"), "600");
}
