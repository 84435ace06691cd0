//! The file server through the real kernel: an in-process mount of test
//! devices and of kprof fed from a replay, driven by real system calls and
//! by the ordinary tools (sh, cat, cp, dd, od, stat).
//!
//! Needs root and /dev/fuse; skips (saying why) without them, and fails
//! instead when PROFDEV_REQUIRE_PRIVILEGED=1.

use profdev_core::{KernelPc, KernelText, Record, Sample};
use profdev_dev::engine::ReplayFactory;
use profdev_dev::kprof::{Kprof, KprofConfig};
use profdev_dev::{tree, Chan, Dev, DevError, DirEntry, Engine, OpenMode, Qid};
use profdev_fuse::{mount, Background, MountError, MountOptions, Server};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------- gate

fn privileged(what: &str) -> bool {
    profdev_testkit::privileged(what, profdev_testkit::can_mount())
}

// ---------------------------------------------------------------- devices

/// Echoes ioctls: `_IO('P', n)` for n in 1..=4 (no size bits, as prf's
/// commands) returns n*1000 + arg; an _IOR command copies out a known
/// word, an _IOW one returns the sum of the bytes copied in. Counts the
/// calls that reach it.
struct Echo {
    calls: AtomicU64,
}

fn echo() -> Arc<Echo> {
    Arc::new(Echo {
        calls: AtomicU64::new(0),
    })
}

const IO_P: u32 = (b'P' as u32) << 8; // _IO('P', 0)
const IOR_WORD: u32 = (2 << 30) | (8 << 16) | ((b'E' as u32) << 8) | 5; // _IOR('E', 5, u64)
const IOW_BYTES: u32 = (1 << 30) | (4 << 16) | ((b'E' as u32) << 8) | 6; // _IOW('E', 6, u32)

impl Dev for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }
    fn dir_name(&self) -> &'static str {
        "echo"
    }
    fn gen(&self, dir: Qid) -> Result<Vec<DirEntry>, DevError> {
        if dir != Qid::ROOT {
            return Err(DevError::NotDir);
        }
        Ok(vec![DirEntry::file("ctl", Qid::file(1), 0o600, 0)])
    }
    fn ioctl(
        &self,
        _chan: &mut Chan,
        cmd: u32,
        arg: u64,
        input: &[u8],
        out_size: u32,
    ) -> Result<(i32, Vec<u8>), DevError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match cmd {
            c if (IO_P + 1..=IO_P + 4).contains(&c) => {
                Ok(((c - IO_P) as i32 * 1000 + arg as i32, Vec::new()))
            }
            IOR_WORD => Ok((
                0,
                0x1122_3344_5566_7788u64.to_le_bytes()[..out_size as usize].to_vec(),
            )),
            IOW_BYTES => Ok((input.iter().map(|&b| i32::from(b)).sum(), Vec::new())),
            _ => Err(DevError::NoIoctl),
        }
    }
}

/// A directory whose contents change: `grow` written to ctl adds a file
/// to `d/`; file `fN` holds N bytes.
struct Dynamic {
    n: AtomicU64,
}

const D: Qid = Qid::dir(1);

impl Dev for Dynamic {
    fn name(&self) -> &'static str {
        "dynamic"
    }
    fn dir_name(&self) -> &'static str {
        "dyn"
    }
    fn gen(&self, dir: Qid) -> Result<Vec<DirEntry>, DevError> {
        match dir {
            Qid::ROOT => Ok(vec![
                DirEntry::file("ctl", Qid::file(1), 0o200, 0),
                DirEntry::dir("d", D, 0o500),
            ]),
            D => Ok((1..=self.n.load(Ordering::SeqCst))
                .map(|i| DirEntry::file(&format!("f{i}"), Qid::file(100 + i), 0o400, i))
                .collect()),
            _ => Err(DevError::NotDir),
        }
    }
    fn read(&self, chan: &mut Chan, offset: u64, count: u32) -> Result<Vec<u8>, DevError> {
        let n = chan.qid.number().checked_sub(100).ok_or(DevError::Perm)?;
        Ok(tree::read_slice(&vec![b'x'; n as usize], offset, count))
    }
    fn write(&self, chan: &mut Chan, _offset: u64, data: &[u8]) -> Result<usize, DevError> {
        if chan.qid != Qid::file(1) {
            return Err(DevError::Perm);
        }
        match profdev_dev::ctl::quoted(data).as_str() {
            "grow" => {
                self.n.fetch_add(1, Ordering::SeqCst);
                Ok(data.len())
            }
            _ => Err(DevError::BadCtl(profdev_dev::ctl::quoted(data))),
        }
    }
    fn open(&self, qid: Qid, mode: OpenMode) -> Result<Chan, DevError> {
        if qid.is_dir() && mode != OpenMode::Read {
            return Err(DevError::Perm);
        }
        Ok(Chan::new(qid, mode))
    }
}

/// A directory `many/d` of `n` files that counts how often it is listed:
/// it answers lookups (`walk`) and `stat` itself, as prof does.
struct Many {
    n: u64,
    lists: AtomicU64,
    walks: AtomicU64,
}

impl Many {
    fn entry(&self, i: u64) -> Option<DirEntry> {
        (1..=self.n)
            .contains(&i)
            .then(|| DirEntry::file(&format!("m{i:05}"), Qid::file(i), 0o400, 0))
    }
}

impl Dev for Many {
    fn name(&self) -> &'static str {
        "many"
    }
    fn dir_name(&self) -> &'static str {
        "many"
    }
    fn gen(&self, dir: Qid) -> Result<Vec<DirEntry>, DevError> {
        match dir {
            Qid::ROOT => Ok(vec![DirEntry::dir("d", D, 0o500)]),
            D => {
                self.lists.fetch_add(1, Ordering::SeqCst);
                Ok((1..=self.n).filter_map(|i| self.entry(i)).collect())
            }
            _ => Err(DevError::NotDir),
        }
    }
    fn walk(&self, dir: Qid, name: &str) -> Result<DirEntry, DevError> {
        if dir != D {
            return tree::walk(self, dir, name);
        }
        self.walks.fetch_add(1, Ordering::SeqCst);
        let i = name.strip_prefix('m').and_then(|n| n.parse().ok());
        i.and_then(|i| self.entry(i))
            .filter(|e| e.name == name)
            .ok_or(DevError::NotFound)
    }
    fn stat(&self, qid: Qid) -> Result<DirEntry, DevError> {
        match qid {
            Qid::ROOT => Ok(DirEntry::dir(".", Qid::ROOT, 0o500)),
            D => Ok(DirEntry::dir("d", D, 0o500)),
            q => self.entry(q.number()).ok_or(DevError::NotFound),
        }
    }
}

/// kprof over 1 MiB of pretend kernel text (kpdata is 512 KiB, more than
/// one FUSE read), fed from a replay that never runs: the tests feed it.
fn kprof() -> Arc<Kprof> {
    let text = KernelText {
        start: KernelPc(0xffff_ffff_8100_0000),
        end: KernelPc(0xffff_ffff_8110_0000),
    };
    Arc::new(Kprof::new(
        KprofConfig::new(text),
        Engine::new(Arc::new(ReplayFactory::new(vec![]))),
    ))
}

fn samples(pcs: impl IntoIterator<Item = u64>) -> Vec<Record> {
    pcs.into_iter()
        .map(|ip| {
            Record::Sample(Sample {
                ip,
                ..Default::default()
            })
        })
        .collect()
}

// ---------------------------------------------------------------- mount

struct TestMount {
    bg: Option<Background>,
    log: Arc<Mutex<Vec<String>>>,
    dir: PathBuf,
    // Dropped after the mount is gone.
    _tmp: tempfile::TempDir,
}

impl TestMount {
    fn new(devs: Vec<Arc<dyn Dev>>) -> TestMount {
        let tmp = tempfile::tempdir().unwrap();
        // Other users must reach the mount point for the EACCES test.
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = tmp.path().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let server = Server::new(devs)
            .unwrap()
            .with_log(Arc::new(move |l: &str| {
                sink.lock().unwrap().push(l.to_string())
            }));
        let bg = mount(server, &dir, MountOptions::default())
            .unwrap()
            .spawn()
            .unwrap();
        TestMount {
            bg: Some(bg),
            log,
            dir,
            _tmp: tmp,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        if let Some(bg) = self.bg.take() {
            let _ = bg.unmount(Duration::from_secs(5));
        }
    }
}

fn sh(script: &str) -> std::process::Output {
    Command::new("sh").arg("-c").arg(script).output().unwrap()
}

fn ok(out: std::process::Output) -> Vec<u8> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// write(2) on a fresh descriptor; the errno on failure.
fn raw_write(path: &Path, data: &[u8]) -> Result<usize, i32> {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: c is a valid NUL-terminated path; data outlives the call;
    // the descriptor is closed before returning.
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

// ---------------------------------------------------------------- tests

#[test]
fn kpdata_reads_the_same_through_every_tool() {
    if !privileged("kpdata_reads_the_same_through_every_tool") {
        return;
    }
    let k = kprof();
    k.feed(&samples(
        (0..5000u64).map(|i| 0xffff_ffff_8100_0000 + (i * 7919) % 0x10_0000),
    ));
    let m = TestMount::new(vec![k.clone()]);
    let want = k.snapshot();
    assert_eq!(want.len(), 512 * 1024);

    let kpdata = m.path("kpdata");
    let p = kpdata.display();
    assert_eq!(std::fs::read(&kpdata).unwrap(), want, "read(2)");
    assert_eq!(ok(sh(&format!("cat {p}"))), want, "cat");
    let copy = m._tmp.path().join("copy");
    ok(sh(&format!("cp {p} {}", copy.display())));
    assert_eq!(std::fs::read(&copy).unwrap(), want, "cp");
    assert_eq!(
        ok(sh(&format!("dd if={p} bs=4 status=none"))),
        want,
        "dd bs=4"
    );
    assert_eq!(
        ok(sh(&format!("od -An -tx1 -v {p}"))),
        ok(sh(&format!("od -An -tx1 -v {}", copy.display()))),
        "od"
    );
    // stat shows the true length (Inferno 4e said 0).
    assert_eq!(
        String::from_utf8(ok(sh(&format!("stat -c %s {p}")))).unwrap(),
        "524288\n"
    );
    // Reads keep the device's offset rules: a misaligned offset is EINVAL,
    // a 1-3 byte read returns nothing.
    let out = sh(&format!("dd if={p} bs=2 skip=1 count=1 status=none"));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Invalid argument"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ok(sh(&format!("dd if={p} bs=3 count=1 status=none"))), b"");
}

#[test]
fn control_messages_and_truncation() {
    if !privileged("control_messages_and_truncation") {
        return;
    }
    let k = kprof();
    let m = TestMount::new(vec![k.clone()]);
    let ctl = m.path("kpctl");

    // The man page's way: the shell truncates, then writes.
    ok(sh(&format!("echo startclr >{}", ctl.display())));
    assert!(k.is_on());
    ok(sh(&format!("echo stop >{}", ctl.display())));
    assert!(!k.is_on());

    k.feed(&samples([0xffff_ffff_8100_1000; 9]));
    let before = std::fs::read(m.path("kpdata")).unwrap();
    assert_eq!(&before[..4], &[0, 0, 0, 9]);

    // An unknown message fails with EINVAL, changes nothing, and is logged.
    assert_eq!(raw_write(&ctl, b"stopwatch\n"), Err(libc::EINVAL));
    assert_eq!(raw_write(&ctl, b"startxyz"), Err(libc::EINVAL));
    assert!(!k.is_on());
    assert_eq!(std::fs::read(m.path("kpdata")).unwrap(), before);
    let log = m.log();
    assert!(
        log.iter()
            .any(|l| l == "kprof: write to kpctl failed: unknown control message \"stopwatch\""),
        "{log:?}"
    );
    assert!(!sh(&format!("echo stopwatch >{}", ctl.display()))
        .status
        .success());

    // Writing kpdata is refused, and logged with the bytes quoted.
    assert_eq!(raw_write(&m.path("kpdata"), b"x"), Err(libc::EINVAL));
    assert!(
        m.log()
            .iter()
            .any(|l| l == "kprof: write \"x\" to kpdata failed: inappropriate use of fd"),
        "{:?}",
        m.log()
    );

    // Truncation to 0 is a no-op; any other attribute change is refused.
    ok(sh(&format!(": >{}", ctl.display())));
    assert!(!sh(&format!("truncate -s 5 {}", ctl.display()))
        .status
        .success());
    assert!(!sh(&format!("chmod 644 {}", ctl.display())).status.success());
    let meta = std::fs::metadata(&ctl).unwrap();
    assert_eq!(meta.mode(), 0o100600);
}

#[test]
fn modes_and_other_users() {
    if !privileged("modes_and_other_users") {
        return;
    }
    let m = TestMount::new(vec![kprof(), echo()]);
    for name in ["kpctl", "kpdata"] {
        let meta = std::fs::metadata(m.path(name)).unwrap();
        assert_eq!(meta.mode(), 0o100600, "{name}");
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{name}");
    }
    let root = std::fs::metadata(&m.dir).unwrap();
    assert_eq!(root.mode(), 0o40555);
    let echo = std::fs::metadata(m.path("echo")).unwrap();
    assert!(echo.is_dir());

    // nobody may list the root but not open the 0600 files.
    for (script, expect_ok) in [
        (format!("ls {}", m.dir.display()), true),
        (format!("cat {}", m.path("kpdata").display()), false),
        (format!("echo start >{}", m.path("kpctl").display()), false),
    ] {
        let out = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), expect_ok, "{script}: {err}");
        if !expect_ok {
            assert!(err.contains("Permission denied"), "{script}: {err}");
        }
    }
}

#[test]
fn listing_and_dynamic_directories() {
    if !privileged("listing_and_dynamic_directories") {
        return;
    }
    let dynamic = Arc::new(Dynamic {
        n: AtomicU64::new(1),
    });
    let m = TestMount::new(vec![kprof(), echo(), dynamic]);
    let mut names: Vec<String> = std::fs::read_dir(&m.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["dyn", "echo", "kpctl", "kpdata"]);

    let d = m.path("dyn/d");
    let list = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(list(&d), ["f1"]);
    assert!(!d.join("f3").exists());
    for _ in 0..2 {
        ok(sh(&format!("echo grow >{}", m.path("dyn/ctl").display())));
    }
    assert_eq!(list(&d), ["f1", "f2", "f3"]);
    assert_eq!(std::fs::read(d.join("f3")).unwrap(), b"xxx");
    assert_eq!(std::fs::metadata(d.join("f3")).unwrap().len(), 3);

    // Inode numbers are stable and distinct.
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    assert_eq!(ino(&d.join("f2")), ino(&d.join("f2")));
    let all = [
        ino(&m.path("kpctl")),
        ino(&m.path("kpdata")),
        ino(&m.path("echo")),
        ino(&m.path("echo/ctl")),
        ino(&m.path("dyn/ctl")),
        ino(&d),
        ino(&d.join("f1")),
        ino(&m.dir),
    ];
    let distinct: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "{all:x?}");
    assert!(!m.path("nonesuch").exists());
}

#[test]
fn ls_l_lists_a_directory_once() {
    if !privileged("ls_l_lists_a_directory_once") {
        return;
    }
    let many = Arc::new(Many {
        n: 3000,
        lists: AtomicU64::new(0),
        walks: AtomicU64::new(0),
    });
    let m = TestMount::new(vec![many.clone()]);
    let out = ok(sh(&format!("ls -l {}", m.path("many/d").display())));
    let lines = String::from_utf8(out).unwrap();
    assert_eq!(lines.lines().filter(|l| l.contains(" m0")).count(), 3000);
    // One listing for the whole directory (not one per readdir page), and
    // one walk per name looked up (not one listing per lookup).
    assert_eq!(many.lists.load(Ordering::SeqCst), 1);
    assert!(many.walks.load(Ordering::SeqCst) >= 3000);
    assert!(!m.path("many/d/m03001").exists());
    assert!(!m.path("many/d/m1").exists());
    assert_eq!(many.lists.load(Ordering::SeqCst), 1);
}

#[test]
fn ioctl_passes_cmd_and_arg_by_value() {
    if !privileged("ioctl_passes_cmd_and_arg_by_value") {
        return;
    }
    let e = echo();
    let m = TestMount::new(vec![e.clone(), kprof()]);
    let f = std::fs::File::open(m.path("echo/ctl")).unwrap();
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap();
    // SAFETY: fd is open for the whole block; the _IO commands carry no
    // buffer (no _IOC size bits), so arg is only a number; the _IOR and
    // _IOW commands point at live buffers of their encoded sizes.
    unsafe {
        // As C calls prf: ioctl(fd, PRF_SETSTATE, 1), the result returned.
        for (n, arg, want) in [(1, 0, 1000), (2, 1, 2001), (3, 7, 3007), (4, 999, 4999)] {
            let r = libc::ioctl(fd, (IO_P + n) as _, arg as libc::c_ulong);
            assert_eq!(
                r,
                want,
                "_IO('P', {n}): {}",
                std::io::Error::last_os_error()
            );
        }
        let mut word = 0u64;
        assert_eq!(libc::ioctl(fd, IOR_WORD as _, &mut word as *mut u64), 0);
        assert_eq!(word, 0x1122_3344_5566_7788);
        let bytes = [1u8, 2, 3, 4];
        assert_eq!(libc::ioctl(fd, IOW_BYTES as _, bytes.as_ptr()), 10);
        assert_eq!(e.calls.load(Ordering::SeqCst), 6);

        // The bare numbers 1 and 2 are FIBMAP and FIGETBSZ, which the VFS
        // answers itself: they never reach a FUSE file system.
        assert_eq!(libc::ioctl(fd, 1 as _, 0), -1);
        assert_eq!(e.calls.load(Ordering::SeqCst), 6);

        // An unknown command is ENOTTY, and so is any on a device without
        // ioctls.
        assert_eq!(libc::ioctl(fd, (IO_P + 9) as _, 0), -1);
        assert_eq!(errno(), libc::ENOTTY);
        let k = std::fs::File::open(m.path("kpdata")).unwrap();
        assert_eq!(libc::ioctl(k.as_raw_fd(), (IO_P + 1) as _, 1), -1);
        assert_eq!(errno(), libc::ENOTTY);

        // poll is ready at once, for reading and writing, whatever the
        // open mode: device files are always ready, like regular files.
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN | libc::POLLOUT,
            revents: 0,
        };
        assert_eq!(libc::poll(&mut p, 1, 1000), 1);
        assert_eq!(p.revents, libc::POLLIN | libc::POLLOUT);
    }
}

#[test]
fn concurrent_readers_each_see_a_consistent_snapshot() {
    if !privileged("concurrent_readers_each_see_a_consistent_snapshot") {
        return;
    }
    let k = kprof();
    let m = TestMount::new(vec![k.clone()]);
    // One batch before any reader opens, so every snapshot holds samples
    // whatever the scheduling; the feeder keeps ticking during the reads.
    k.feed(&samples((0..64).map(|j| 0xffff_ffff_8100_0100 + j * 8)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let feeder = {
        let (k, stop) = (k.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                k.feed(&samples((0..64).map(|j| {
                    0xffff_ffff_8100_0000 + ((i * 64 + j) * 104_729) % 0x10_0000
                })));
                i += 1;
            }
        })
    };
    let readers: Vec<_> = (0..6)
        .map(|r| {
            let path = m.path("kpdata");
            std::thread::spawn(move || {
                use std::io::Read;
                let mut f = std::fs::File::open(&path).unwrap();
                // Small reads, so that the feeder runs between them.
                let chunk = [4usize, 4096, 65536][r % 3];
                let mut data = Vec::new();
                let mut buf = vec![0u8; chunk];
                loop {
                    let n = f.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    data.extend_from_slice(&buf[..n]);
                }
                data
            })
        })
        .collect();
    for (r, t) in readers.into_iter().enumerate() {
        let data = t.join().unwrap();
        let w: Vec<u32> = data
            .chunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(w.len(), 128 * 1024, "reader {r}");
        // One snapshot: the total is the outside count plus the buckets.
        let buckets: u64 = w[6..].iter().map(|&x| u64::from(x)).sum();
        assert_eq!(u64::from(w[0]), u64::from(w[1]) + buckets, "reader {r}");
        assert!(w[0] > 0, "reader {r} saw no samples");
        assert_eq!(&w[2..6], &[1000, 128 * 1024, 4, 3], "reader {r}");
    }
    stop.store(true, Ordering::Relaxed);
    feeder.join().unwrap();
}

#[test]
fn bad_mount_points_are_one_sentence() {
    if !privileged("bad_mount_points_are_one_sentence") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let server = || Server::new(vec![kprof()]).unwrap();
    let missing = tmp.path().join("missing");
    let err = mount(server(), &missing, MountOptions::default())
        .err()
        .unwrap();
    assert!(matches!(err, MountError::NoDir(_)));
    assert_eq!(
        err.to_string(),
        format!("{} does not exist", missing.display())
    );

    let file = tmp.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let err = mount(server(), &file, MountOptions::default())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!("{} is not a directory", file.display())
    );

    let m = TestMount::new(vec![kprof()]);
    let err = mount(server(), &m.dir, MountOptions::default())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!("a profdev server is already mounted at {}", m.dir.display())
    );

    let clash = Server::new(vec![kprof(), kprof()]).err().unwrap();
    assert_eq!(
        clash.to_string(),
        "devices kprof and kprof both put \"kpctl\" at the mount root"
    );
}
