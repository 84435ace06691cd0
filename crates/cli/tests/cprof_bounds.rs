//! The coverage planning server's bounds, run as root with user nobody
//! as the requester (`profdev mount -b --allow-user nobody`): what a
//! user's process maps cannot make the root server read or hold more
//! than the stated bounds (a 768 MiB sparse mapping, as a plain file and
//! as a valid ELF's executable segment; a 128 MiB forged report), nor
//! fill root's coverage cache; and the private directories are 0700 (in
//! launch mode) and do not outlive the processes that use them.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Maps each file named as an argument, readable and executable, says
/// "ready", and waits for its stdin to close.
const MAPPER: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY);
        if (fd < 0) { perror(argv[i]); return 1; }
        off_t n = lseek(fd, 0, SEEK_END);
        if (mmap(0, n, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
    }
    printf("ready\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {}
    return 0;
}
"#;

/// 768 MiB.
const HUGE: u64 = 768 << 20;

fn gate(what: &str) -> bool {
    privileged(what, can_mount()) && profdev_testkit::tools(what, &["cc", "setpriv"])
}

/// A temporary directory nobody can reach (0755).
fn open_tempdir() -> tempfile::TempDir {
    let tmp = tempdir();
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    tmp
}

fn compile_mapper(dir: &Path) -> PathBuf {
    let src = dir.join("mapper.c");
    std::fs::write(&src, MAPPER).unwrap();
    let exe = dir.join("mapper");
    let st = Command::new("cc")
        .arg("-O1")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "cc failed");
    exe
}

/// The mapper, run as nobody, mapping `files`; returns when it is ready.
fn start_as_nobody(exe: &Path, files: &[&Path]) -> Child {
    let mut child = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(exe)
        .args(files)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    child
}

/// The mount of `profdev mount -b --allow-user nobody DIR`, with the
/// coverage cache in `cache`; unmounted on drop.
struct NobodyMount {
    dir: PathBuf,
    pid: u32,
}

impl NobodyMount {
    fn new(tmp: &Path, cache: &Path) -> NobodyMount {
        NobodyMount::with_env(tmp, &[("PROFDEV_CACHE_DIR", cache)])
    }

    fn with_env(tmp: &Path, env: &[(&str, &Path)]) -> NobodyMount {
        let dir = tmp.canonicalize().unwrap().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let o = profdev()
            .args(["mount", "-b", "--allow-user", "nobody"])
            .arg(&dir)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // The server names its pid in its log, DIR.log.
        let log = std::fs::read_to_string(tmp.canonicalize().unwrap().join("mnt.log")).unwrap();
        let pid = log
            .lines()
            .find_map(|l| l.rsplit_once("(pid ")?.1.strip_suffix(')')?.parse().ok())
            .unwrap_or_else(|| panic!("no pid in the log: {log}"));
        NobodyMount { dir, pid }
    }

    fn ctl(&self) -> PathBuf {
        self.dir.join("prof/ctl")
    }

    /// `msg` written to prof/ctl by user nobody: its stderr, empty when
    /// the write succeeded.
    fn ctl_as_nobody(&self, msg: &str) -> String {
        let o = as_nobody(
            "/usr/bin/printf '%s\\n' \"$1\" >\"$2\"",
            &[Path::new(msg), &self.ctl()],
        );
        if o.status.success() {
            String::new()
        } else {
            format!("failed: {}", String::from_utf8_lossy(&o.stderr))
        }
    }

    /// The server's peak resident size (VmHWM), in bytes.
    fn peak(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap();
        let kb: u64 = s
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap();
        kb << 10
    }
}

impl Drop for NobodyMount {
    fn drop(&mut self) {
        let _ = profdev().arg("unmount").arg(&self.dir).status();
    }
}

/// The private directory whose runtime process `pid` maps.
fn runtime_dir(pid: u32) -> Option<PathBuf> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines().find_map(|l| {
        let p = Path::new(&l[l.find(" /")? + 1..]);
        (p.file_name()? == "libprofdev_cov.so").then(|| p.parent().unwrap().to_path_buf())
    })
}

fn cache_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("mod-"))
                .collect()
        })
        .unwrap_or_default()
}

const MB: u64 = 1 << 20;

/// nobody's mapper maps `huge` (768 MiB, sparse, made by `make`, owned
/// by nobody) executable and is `startcp`ed by nobody through the mount;
/// then a 128 MiB forged report appears in its `out/` and nobody writes
/// `stop`. Neither raises the server's peak by 100 MB; the forged report
/// is refused by its size, never read (inotify names every file of
/// `out/` read, by whoever); the mapper's plan goes to nobody's cache,
/// not root's.
fn huge_mapping_of_nobody(name: &str, make: &dyn Fn(&Path)) {
    let tmp = open_tempdir();
    let exe = compile_mapper(tmp.path());
    let huge = tmp.path().join(name);
    make(&huge);
    std::os::unix::fs::chown(&huge, Some(65534), Some(65534)).unwrap();
    let cache = tmp.path().join("cache");
    let m = NobodyMount::new(tmp.path(), &cache);
    let mut child = start_as_nobody(&exe, &[&huge]);
    let before = m.peak();
    // The mapper and the huge file (not libc, whose plan alone takes
    // some 70 MB).
    assert_eq!(m.ctl_as_nobody(&format!("module mapper {name}")), "");
    assert_eq!(m.ctl_as_nobody(&format!("startcp {}", child.id())), "");
    let dir = runtime_dir(child.id()).expect("the runtime is loaded");
    let attached = m.peak();
    assert!(
        attached < before + 100 * MB,
        "startcp raised the server's peak from {} to {} MB",
        before / MB,
        attached / MB
    );
    // A forged report, 128 MiB, in nobody's report directory: refused
    // from its size.
    let o = as_nobody("truncate -s 128M \"$1/out/cov.1.0\"", &[&dir]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut reads = Reads::watch(&dir.join("out"));
    let t = std::time::Instant::now();
    assert_eq!(m.ctl_as_nobody("stop"), "");
    let took = t.elapsed();
    let stopped = m.peak();
    eprintln!(
        "{name}: server peak (VmHWM) {} MB before startcp, {} MB after, {} MB after stop \
         (stop took {took:?})",
        before / MB,
        attached / MB,
        stopped / MB
    );
    assert!(
        stopped < attached + 100 * MB,
        "stop raised the server's peak from {} to {} MB",
        attached / MB,
        stopped / MB
    );
    // nobody's modules are cached in nobody's own cache, never in root's.
    let own = cache.join("coverage");
    let theirs = own.join("65534");
    wait_until("nobody's cache file", Duration::from_secs(60), || {
        !cache_files(&theirs).is_empty()
    });
    assert_eq!(cache_files(&own), Vec::<String>::new());
    drop(child.stdin.take());
    profdev_testkit::wait_exit("the mapper", &mut child, Duration::from_secs(60));
    assert_eq!(m.ctl_as_nobody("end"), "");
    // Refused by its size, before anything was read.
    let read = reads.names();
    eprintln!("{name}: read in out/: {read:?}");
    assert!(
        !read.contains("cov.1.0"),
        "{name}: the forged report was read: {read:?}"
    );
}

#[test]
fn a_768_mib_plain_file_mapped_by_nobody_costs_the_root_server_little() {
    if !gate("startcp of nobody's huge mapping through the mount") {
        return;
    }
    huge_mapping_of_nobody("plain", &|p| {
        std::fs::File::create(p).unwrap().set_len(HUGE).unwrap();
    });
}

#[test]
fn a_768_mib_elf_segment_mapped_by_nobody_costs_the_root_server_little() {
    if !gate("startcp of nobody's huge ELF through the mount") {
        return;
    }
    huge_mapping_of_nobody("elf", &|p| {
        profdev_coverage::image::sparse_elf(p, HUGE).unwrap();
    });
}

/// `profdev cprof` with its temporary directory in `tmp`, running `sh -c
/// SCRIPT`.
fn cprof(tmp: &Path, script: &str) -> Command {
    let mut c = profdev();
    c.args(["cprof", "--", "sh", "-c", script])
        .env("TMPDIR", tmp)
        .env("PROFDEV_CACHE_DIR", "off");
    c
}

fn private_dirs(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("profdev-cov."))
        .map(|e| e.path())
        .collect()
}

#[test]
fn launch_directories_are_private_and_swept_once_unused() {
    if !privileged("cprof's private directories", Ok(())) {
        return;
    }
    let tmp = tempdir();
    let t = tmp.path();
    // 0700, as the docs say.
    let o = cprof(t, "stat -c %a \"$(dirname \"$PROFDEV_COV_SOCK\")\"")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("700\n"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(private_dirs(t), Vec::<PathBuf>::new());
    // cprof killed while its program runs: the directory stays while a
    // process of the program maps the runtime from it (a subshell that
    // waits for a line on a FIFO), and goes at the next run once none
    // does.
    let fifo = t.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut run = cprof(t, "(read x <\"$0\") & echo started; wait")
        .arg(&fifo)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(run.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "started\n");
    let dirs = private_dirs(t);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    run.kill().unwrap();
    run.wait().unwrap();
    let o = cprof(t, "true").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(runtime_users(&dirs[0]) > 0, "the subshell maps the runtime");
    assert!(dirs[0].exists(), "removed while a process maps its runtime");
    // The subshell ends.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .unwrap()
        .write_all(b"x\n")
        .unwrap();
    wait_until("the subshell's end", Duration::from_secs(60), || {
        runtime_users(&dirs[0]) == 0
    });
    assert!(dirs[0].exists());
    let o = cprof(t, "true").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(private_dirs(t), Vec::<PathBuf>::new());
}

/// Processes that map the runtime in `dir`.
fn runtime_users(dir: &Path) -> usize {
    let rt = dir.join("libprofdev_cov.so");
    let rt = rt.to_string_lossy();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|p| std::fs::read_to_string(p.path().join("maps")).is_ok_and(|m| m.contains(&*rt)))
        .count()
}

#[test]
fn a_directory_left_for_an_attached_process_goes_after_it_exits() {
    if !gate("startcp of nobody's process, then unmount") {
        return;
    }
    let tmp = open_tempdir();
    let exe = compile_mapper(tmp.path());
    // The device's private directories, and cprof's, in a directory of
    // this test's.
    let t = tmp.path().join("tmp");
    std::fs::create_dir(&t).unwrap();
    let off = Path::new("off");
    let m = NobodyMount::with_env(tmp.path(), &[("TMPDIR", &t), ("PROFDEV_CACHE_DIR", off)]);
    let mut child = start_as_nobody(&exe, &[]);
    assert_eq!(m.ctl_as_nobody("module mapper"), "");
    assert_eq!(m.ctl_as_nobody(&format!("startcp {}", child.id())), "");
    let dirs = private_dirs(&t);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    // The mount goes while the process runs on, patched: its directory
    // is left for its reports, and kept while it runs.
    let server = m.pid;
    drop(m);
    wait_until("the device server's end", Duration::from_secs(60), || {
        !Path::new(&format!("/proc/{server}")).exists()
    });
    let o = cprof(&t, "true").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dirs[0].exists(), "removed while its process runs");
    drop(child.stdin.take());
    profdev_testkit::wait_exit("the mapper", &mut child, Duration::from_secs(60));
    let o = cprof(&t, "true").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(private_dirs(&t), Vec::<PathBuf>::new());
}
