//! Shared helpers for the end-to-end tests: the binary, golden files, and
//! the privileged-capability gate (the last three, with bounded waiting and
//! sampling margins, from `profdev-testkit`, shared by every crate's tests).
#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `profdev` binary under test.
pub fn profdev() -> Command {
    Command::new(env!("CARGO_BIN_EXE_profdev"))
}

/// `cmd` with SIGINT, SIGTERM, SIGHUP and SIGQUIT at their default
/// disposition, whatever this test process inherited (a background job of
/// a non-interactive shell starts with SIGINT and SIGQUIT ignored, and a
/// command honours an ignored signal as nohup(1) asks): for tests that
/// send those signals.
pub fn with_default_signals(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal(2) is async-signal-safe, the only kind of call
    // allowed between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        })
    }
}

/// Run and capture.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("running profdev")
}

/// Compare `actual` with `tests/golden/NAME`; `PROFDEV_BLESS=1` rewrites it.
pub fn golden(name: &str, actual: &[u8]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    profdev_testkit::golden(&path, actual);
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[allow(unused_imports)] // reason: each test file uses a different subset
pub use profdev_testkit::{
    assert_share_at_least, assert_share_near, can_mount, privileged, wait_until,
};

/// Can this process sample system wide with perf_event_open?
pub fn can_sample_system() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map_err(|e| format!("cannot read kernel.perf_event_paranoid: {e}"))?;
    let paranoid: i32 = paranoid.trim().parse().unwrap_or(2);
    if root || paranoid <= 0 {
        Ok(())
    } else {
        Err(format!(
            "system-wide sampling needs root or CAP_PERFMON (kernel.perf_event_paranoid is {paranoid})"
        ))
    }
}

/// Path of a file in the test's fixture directory.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Kernel functions that do the zeroing for `dd if=/dev/zero` across
/// kernel versions (6.x inlines clear_user into read_zero).
pub fn is_zeroing(sym: &str) -> bool {
    [
        "read_zero",
        "clear_user",
        "rep_stos",
        "iov_iter_zero",
        "clear_page",
    ]
    .iter()
    .any(|z| sym.contains(z))
}

/// The symbol names of the first `n` rows of a kprof table, checking the
/// header lines `total: …`, `KTZERO …` and `ms\t  %\tsym` before them.
pub fn kprof_top(table: &str, n: usize) -> Vec<&str> {
    let mut lines = table.lines();
    assert!(lines.next().unwrap().starts_with("total: "), "{table}");
    assert!(lines.next().unwrap().starts_with("KTZERO "), "{table}");
    assert_eq!(lines.next().unwrap(), "ms\t  %\tsym", "{table}");
    lines
        .take(n)
        .map(|l| l.rsplit('\t').next().unwrap())
        .collect()
}

/// Run `sh -c SCRIPT sh ARGS...` as user nobody, group nogroup, no
/// supplementary groups.
pub fn as_nobody(script: &str, args: &[&Path]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .args(["sh", "-c", script, "sh"])
        .args(args)
        .output()
        .expect("setpriv runs")
}

/// Can this process sample its own children (user mode)?
pub fn can_sample_children() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map_err(|e| format!("cannot read kernel.perf_event_paranoid: {e}"))?;
    let paranoid: i32 = paranoid.trim().parse().unwrap_or(3);
    if root || paranoid <= 2 {
        Ok(())
    } else {
        Err(format!(
            "sampling a child process needs kernel.perf_event_paranoid <= 2 (it is {paranoid})"
        ))
    }
}

/// The gate of a test that samples its children with external `tools`
/// (compilers, gprof): skipped or failed as `privileged` and
/// `profdev_testkit::tools` decide.
pub fn ready(what: &str, tools: &[&str]) -> bool {
    privileged(what, can_sample_children()) && profdev_testkit::tools(what, tools)
}

/// A private mount (`profdev mount -b DIR`, DIR a fresh `mnt` in a
/// temporary directory), unmounted on drop.
pub struct Mount {
    _tmp: tempfile::TempDir,
    /// The mount point.
    pub dir: PathBuf,
}

impl Mount {
    /// Mount a fresh server; panics with profdev's words if it fails.
    pub fn new() -> Mount {
        let tmp = tempdir();
        let dir = tmp.path().canonicalize().unwrap().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let out = run(profdev().arg("mount").arg("-b").arg(&dir));
        assert!(
            out.status.success(),
            "profdev mount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Mount { _tmp: tmp, dir }
    }

    /// The prof device's directory.
    pub fn prof(&self) -> PathBuf {
        self.dir.join("prof")
    }

    /// One write(2) of `msg` to prof/ctl: its result.
    pub fn ctl(&self, msg: impl AsRef<[u8]>) -> std::io::Result<usize> {
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.prof().join("ctl"))?
            .write(msg.as_ref())
    }

    /// The prof record directory whose `name` file says `name`.
    pub fn record(&self, name: &str) -> Option<PathBuf> {
        std::fs::read_dir(self.prof())
            .ok()?
            .map(|e| e.unwrap().path())
            .find(|p| std::fs::read_to_string(p.join("name")).is_ok_and(|n| n.trim_end() == name))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = run(profdev().arg("unmount").arg(&self.dir));
    }
}

/// A copy of the profdev binary at `dir/profdev` (mode 0755), for running
/// it as another user wherever the build tree is; copied as
/// [`profdev_testkit::copy_executable`] says, so that running it never meets
/// ETXTBSY.
pub fn profdev_copy(dir: &Path) -> PathBuf {
    let exe = dir.join("profdev");
    profdev_testkit::copy_executable(Path::new(env!("CARGO_BIN_EXE_profdev")), &exe, 0o755);
    exe
}

/// What a [`collector`] was sent: each request's path and body.
pub type Requests = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>;

/// An HTTP collector on `listener` (127.0.0.1) answering every POST with
/// 200, keeping each request's path and body (a gzipped one decoded).
pub fn collector(listener: std::net::TcpListener) -> Requests {
    collector_unless(listener, Default::default())
}

/// A [`collector`] that is down while `down` is set: it answers 503 and
/// keeps nothing.
pub fn collector_unless(
    listener: std::net::TcpListener,
    down: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Requests {
    use std::io::{BufRead, BufReader, Read, Write};
    let got = Requests::default();
    let keep = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let keep = keep.clone();
            let down = down.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream.try_clone().unwrap());
                let mut w = stream;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let (mut len, mut gzip) = (0, false);
                    loop {
                        let mut h = String::new();
                        r.read_line(&mut h).unwrap();
                        let h = h.trim_end().to_ascii_lowercase();
                        if h.is_empty() {
                            break;
                        }
                        if let Some(v) = h.strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap();
                        }
                        gzip |= h == "content-encoding: gzip";
                    }
                    let mut body = vec![0; len];
                    r.read_exact(&mut body).unwrap();
                    if gzip {
                        let mut plain = Vec::new();
                        flate2::read::GzDecoder::new(&body[..])
                            .read_to_end(&mut plain)
                            .unwrap();
                        body = plain;
                    }
                    if down.load(std::sync::atomic::Ordering::SeqCst) {
                        w.write_all(
                            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
                        )
                        .unwrap();
                        continue;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                    keep.lock().unwrap().push((path, body));
                    w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                        .unwrap();
                }
            });
        }
    });
    got
}

/// Compile the C file `tests/data/mprof/NAME` with `cc FLAGS` into `out`
/// (the memory tests' fixtures); panics if cc fails.
pub fn cc_mprof_fixture(name: &str, flags: &[&str], out: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/mprof")
        .join(name);
    let status = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(&src)
        .status()
        .expect("cc runs");
    assert!(status.success(), "cc failed on {name}");
}

/// Root, to attach to a process that is not profdev's child (whatever
/// ptrace's scope says): the gate of the `-p PID` memory tests.
pub fn can_attach_any() -> Result<(), String> {
    if profdev_testkit::is_root() {
        Ok(())
    } else {
        Err("attaching to a process that is not profdev's child needs root".into())
    }
}

/// A test program driven one command at a time on its standard input,
/// answering a line each on its standard output, that starts by printing
/// `ready PID` (tests/data/mprof/detach.c, tests/data/agent/heap.c).
pub struct Prog {
    /// The running program.
    pub child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
    /// Its process id.
    pub pid: u32,
}

impl Prog {
    /// Start `exe` and read its `ready PID` line.
    pub fn start(exe: &Path) -> Prog {
        use std::io::BufRead as _;
        use std::process::Stdio;
        let mut child = Command::new(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let pid = line
            .strip_prefix("ready ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("{line:?}"));
        Prog { child, out, pid }
    }

    /// Send `c`, return its answer line.
    pub fn ask(&mut self, c: &str) -> String {
        use std::io::{BufRead as _, Write as _};
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(c.as_bytes()).unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    /// Send `q`; the program must end with status 0 (bounded wait).
    pub fn quit(mut self) {
        use std::io::Write as _;
        self.child.stdin.as_mut().unwrap().write_all(b"q").unwrap();
        let status = profdev_testkit::wait_exit(
            "the program",
            &mut self.child,
            std::time::Duration::from_secs(60),
        );
        assert_eq!(status.code(), Some(0), "the program ends normally");
    }
}

/// The folded lines ending with `suffix` right after a `;` (or equal to
/// it): the stacks through those frames, the frames above left out.
pub fn folded_ending<'a, S: AsRef<str>>(lines: &'a [S], suffix: &str) -> Vec<&'a str> {
    lines
        .iter()
        .map(|l| l.as_ref())
        .filter(|l| {
            l.ends_with(suffix)
                && (l.len() == suffix.len() || l[..l.len() - suffix.len()].ends_with(';'))
        })
        .collect()
}

/// The DA, FNDA and BRDA lines of an lcov tracefile; with `map`, each
/// count mapped to 1 if it is not 0 (or `-`): what hit mode writes for a
/// counting run's file.
pub fn lcov_coverage_lines(text: &str, map: bool) -> Vec<String> {
    text.lines()
        .filter(|l| ["DA:", "FNDA:", "BRDA:"].iter().any(|t| l.starts_with(t)))
        .map(|l| {
            let (tag, rest) = l.split_once(':').unwrap();
            let mut f: Vec<&str> = rest.split(',').collect();
            let k = if tag == "FNDA" { 0 } else { f.len() - 1 };
            if map && f[k].parse::<u64>().is_ok_and(|n| n > 0) {
                f[k] = "1";
            }
            format!("{tag}:{}", f.join(","))
        })
        .collect()
}

/// The names of the files in a directory read (read(2), pread(2)) since
/// [`Reads::watch`]: inotify's `IN_ACCESS` events, whoever reads.
pub struct Reads(std::fs::File);

impl Reads {
    pub fn watch(dir: &Path) -> Reads {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: inotify_init1 has no memory-safety preconditions.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(
            fd >= 0,
            "inotify_init1: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: fd is a new descriptor, owned by nothing else.
        let f = unsafe { std::fs::File::from_raw_fd(fd) };
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: c is a NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_ACCESS) };
        assert!(
            wd >= 0,
            "inotify_add_watch: {}",
            std::io::Error::last_os_error()
        );
        Reads(f)
    }

    /// The names read so far (events are queued by the read itself, so
    /// every read made before this call is here).
    pub fn names(&mut self) -> std::collections::BTreeSet<String> {
        use std::io::Read as _;
        let mut names = std::collections::BTreeSet::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = match self.0.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return names,
                Err(e) => panic!("reading inotify events: {e}"),
            };
            let mut at = 0;
            while at + 16 <= n {
                let u32_at = |o: usize| u32::from_ne_bytes(buf[o..o + 4].try_into().unwrap());
                let (mask, len) = (u32_at(at + 4), u32_at(at + 12) as usize);
                assert_eq!(mask & libc::IN_Q_OVERFLOW, 0, "inotify's queue overflowed");
                let name = &buf[at + 16..at + 16 + len];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(len)];
                if !name.is_empty() {
                    names.insert(String::from_utf8_lossy(name).into_owned());
                }
                at += 16 + len;
            }
        }
    }
}
