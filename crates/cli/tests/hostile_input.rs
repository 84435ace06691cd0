//! Every reader of a user-given file, fed /dev/zero, a FIFO and oversized
//! (sparse) files, under a memory bound (`prlimit --as`) and a time bound
//! (`timeout -s KILL`): each ends with a clear sentence and exit status 1,
//! never hangs, never grows.

mod common;
use common::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Address space for one profdev run: 1 GiB (a reader that allocated the
/// sparse files below would die of it).
const MEMORY: u64 = 1 << 30;

fn tools() -> Result<(), String> {
    for tool in ["prlimit", "timeout"] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool} >/dev/null"))
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !found {
            return Err(format!("{tool} is not installed"));
        }
    }
    Ok(())
}

/// Run `profdev ARGS` bounded in memory and time; fails the test if it was
/// killed or timed out. Returns (exit code, stdout, stderr).
fn bounded(args: &[&OsStr]) -> (i32, String, String) {
    let out = Command::new("prlimit")
        .arg(format!("--as={MEMORY}"))
        .args(["timeout", "-s", "KILL", "20"])
        .arg(env!("CARGO_BIN_EXE_profdev"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = out
        .status
        .code()
        .unwrap_or_else(|| panic!("{args:?}: killed ({}) {stderr}", out.status));
    assert_ne!(code, 124, "{args:?}: timed out");
    assert_ne!(code, 137, "{args:?}: killed at the time bound");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(
        !stderr.contains("memory allocation"),
        "{args:?}: ran out of memory: {stderr}"
    );
    (code, stdout, stderr)
}

struct Files {
    _dir: tempfile::TempDir,
    fifo: PathBuf,
    /// 10 GiB of zeros, sparse.
    huge: PathBuf,
    map: PathBuf,
}

fn sparse(path: &Path, len: u64, head: &[u8]) {
    let f = std::fs::File::create(path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, head, 0).unwrap();
    f.set_len(len).unwrap();
}

fn files() -> Files {
    let dir = tempdir();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: c is a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let huge = dir.path().join("huge");
    sparse(&huge, 10 << 30, b"");
    let map = dir.path().join("System.map");
    std::fs::write(&map, "80100000 T start\n80100040 T fnA\n80100400 T etext\n").unwrap();
    Files {
        _dir: dir,
        fifo,
        huge,
        map,
    }
}

#[test]
fn kprof_refuses_devices_fifos_and_oversized_files() {
    if !privileged("kprof hostile input", tools()) {
        return;
    }
    let f = files();
    let dir = f.huge.parent().unwrap();
    let zero = Path::new("/dev/zero");
    // KPDATA.
    for (data, want) in [
        (
            zero.to_path_buf(),
            "kprof: /dev/zero is a character device, not a regular file; give a regular file\n".to_string(),
        ),
        (
            f.fifo.clone(),
            format!(
                "kprof: {} is a FIFO, not a regular file; give a regular file\n",
                f.fifo.display()
            ),
        ),
        (
            f.huge.clone(),
            format!(
                "kprof: {}: data file of 10737418240 bytes is longer than a kpdata file can be (4294967323 bytes at most by its header and a 1 GiB kernel text); is it a kpdata file?\n",
                f.huge.display()
            ),
        ),
    ] {
        let (code, out, err) = bounded(&["kprof".as_ref(), f.map.as_os_str(), data.as_os_str()]);
        assert_eq!(code, 1, "{}", data.display());
        assert_eq!(out, "");
        assert_eq!(err, want);
    }
    // A good header that says 128 words, then a sparse gigabyte.
    let mut header = vec![0u8; 24];
    for (i, w) in [(0, 1u32), (3, 128), (4, 4), (5, 3)] {
        header[4 * i..4 * i + 4].copy_from_slice(&w.to_be_bytes());
    }
    let padded = dir.join("padded");
    sparse(&padded, 1 << 30, &header);
    let (code, _, err) = bounded(&["kprof".as_ref(), f.map.as_os_str(), padded.as_os_str()]);
    assert_eq!(code, 1);
    assert!(
        err.contains(
            "data file of 1073741824 bytes is longer than a kpdata file can be (515 bytes"
        ),
        "{err}"
    );

    // TEXT.
    let kpdata = dir.join("kpdata");
    std::fs::write(&kpdata, &header).unwrap();
    let big_text = dir.join("big.map");
    sparse(&big_text, 1 << 30, b"80100000 T start\n");
    for (text, why) in [
        (zero.to_path_buf(), "a character device, not a regular file"),
        (f.fifo.clone(), "a FIFO, not a regular file"),
        (big_text.clone(), "larger than 268435456 bytes"),
    ] {
        let (code, _, err) = bounded(&["kprof".as_ref(), text.as_os_str(), kpdata.as_os_str()]);
        assert_eq!(code, 1, "{}", text.display());
        assert_eq!(
            err,
            format!("kprof: cannot read {}: {why}\n", text.display()),
            "{}",
            text.display()
        );
    }
}

#[test]
fn prfpr_refuses_devices_fifos_and_oversized_files() {
    if !privileged("prfpr hostile input", tools()) {
        return;
    }
    let f = files();
    let dir = f.huge.parent().unwrap();
    let zero = Path::new("/dev/zero");
    for (log, stdout, why) in [
        (
            zero.to_path_buf(),
            "error: cannot open data file\n",
            "it is a character device, not a regular file; give the path of a log written by prfsnap or prfdc",
        ),
        (
            f.fifo.clone(),
            "error: cannot open data file\n",
            "it is a FIFO, not a regular file; give the path of a log written by prfsnap or prfdc",
        ),
        (
            f.huge.clone(),
            "error: bad data file\n",
            "prf log: the address count at byte offset 0 is 0; a log holds at least one address; is it a log written by prfsnap or prfdc?",
        ),
    ] {
        let (code, out, err) = bounded(&["prfpr".as_ref(), log.as_os_str(), "1".as_ref(), f.map.as_os_str()]);
        assert_eq!(code, 1, "{}", log.display());
        assert_eq!(out, stdout, "{}", log.display());
        assert_eq!(err, format!("prfpr: {}: {why}\n", log.display()));
    }

    // An address count beyond PRF_GETMAX: refused before allocating.
    let mut header = b"PRFLOG64".to_vec();
    header.extend(1u32.to_le_bytes());
    header.extend(2u32.to_le_bytes());
    header.extend((1u64 << 40).to_le_bytes());
    let many = dir.join("many");
    sparse(&many, 10 << 30, &header);
    let (code, out, err) = bounded(&[
        "prfpr".as_ref(),
        many.as_os_str(),
        "1".as_ref(),
        f.map.as_os_str(),
    ]);
    assert_eq!(code, 1);
    assert_eq!(out, "error: cannot read profile addresses\n");
    assert!(
        err.contains("more than the 130560 the device holds"),
        "{err}"
    );

    // A good header, then 10 GiB of zeros: the second zero record is
    // foreign, found at once.
    let mut header = b"PRFLOG64".to_vec();
    header.extend(1u32.to_le_bytes());
    header.extend(2u32.to_le_bytes());
    header.extend(3u64.to_le_bytes());
    for a in [0u64, 0x8010_0000, 0x8010_0040] {
        header.extend(a.to_le_bytes());
    }
    let zeros = dir.join("zeros");
    sparse(&zeros, 10 << 30, &header);
    let (code, out, err) = bounded(&[
        "prfpr".as_ref(),
        zeros.as_os_str(),
        "1".as_ref(),
        f.map.as_os_str(),
    ]);
    assert_eq!(code, 1);
    assert_eq!(out, "");
    // Header 48 bytes, records 48: the second starts at 96.
    assert!(
        err.contains("the record at byte offset 96 is not one of this log's: only the first record may have time 0"),
        "{err}"
    );

    // The namelist.
    let log = dir.join("log");
    std::fs::write(&log, &header).unwrap();
    for text in [zero.to_path_buf(), f.fifo.clone(), f.huge.clone()] {
        let (code, out, err) = bounded(&[
            "prfpr".as_ref(),
            log.as_os_str(),
            "1".as_ref(),
            text.as_os_str(),
        ]);
        assert_eq!(code, 1, "{}", text.display());
        assert_eq!(out, "error: cannot open namelist file\n");
        assert!(
            err.starts_with(&format!("prfpr: {}: ", text.display())),
            "{err}"
        );
    }
}

#[test]
fn prf_commands_refuse_a_fifo_or_device_in_the_devices_place() {
    if !privileged("prf commands hostile device", tools()) {
        return;
    }
    let f = files();
    let log = f.huge.parent().unwrap().join("log");
    for dev in [f.fifo.as_path(), Path::new("/dev/zero")] {
        for args in [
            vec![
                "prfld".as_ref(),
                "-f".as_ref(),
                dev.as_os_str(),
                f.map.as_os_str(),
            ],
            vec!["prfstat".as_ref(), "-f".as_ref(), dev.as_os_str()],
            vec![
                "prfsnap".as_ref(),
                "-f".as_ref(),
                dev.as_os_str(),
                log.as_os_str(),
            ],
        ] {
            let (code, out, err) = bounded(&args);
            assert_eq!(code, 1, "{args:?}");
            // A FIFO opened write-only without a reader fails at once
            // (ENXIO); anything else that opens is found not to be a file.
            let said = format!("{out}{err}");
            assert!(
                said.contains("not a prf device") || said.contains("No such device or address"),
                "{args:?}: {said}"
            );
        }
    }
}

/// What one bounded run of profdev cost: its exit code, output, peak
/// resident memory (the child's own `ru_maxrss`, from `wait4`) and time.
struct Cost {
    code: i32,
    stdout: String,
    stderr: String,
    max_rss: u64,
    elapsed: std::time::Duration,
}

/// Resident memory a crafted input may cost a run: 1 GiB.
const RSS_BOUND: u64 = 1 << 30;
/// Time it may take: 10 s, generous (these runs take milliseconds).
const TIME_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// Run `profdev ARGS` and measure it. Its address space is limited to
/// 4 GiB, a safety net so that a reader that would balloon fails at once
/// rather than taking the machine's memory; the assertions are on what it
/// used. Killed (and the test failed) past [`TIME_BOUND`].
#[allow(clippy::zombie_processes)] // reaped with wait4, for its rusage
fn measured(args: &[&OsStr]) -> Cost {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let start = std::time::Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_profdev"));
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between
    // fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 4 << 30,
                rlim_max: 4 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let pipe = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = pipe(Box::new(child.stdout.take().unwrap()));
    let err = pipe(Box::new(child.stderr.take().unwrap()));
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut reaped = false;
    let mut timed_out = false;
    // Reaped here with wait4, for its rusage; std's Child is not waited.
    wait_until(
        "profdev to exit (or the time bound)",
        TIME_BOUND + std::time::Duration::from_secs(5),
        || {
            // SAFETY: pid is our child; status and usage are valid.
            let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
            if r == pid {
                reaped = true;
            } else if start.elapsed() > TIME_BOUND && !timed_out {
                timed_out = true;
                let _ = child.kill();
            }
            reaped
        },
    );
    let elapsed = start.elapsed();
    let stdout = out.join().unwrap();
    let stderr = err.join().unwrap();
    assert!(
        !timed_out,
        "{args:?}: still running after {TIME_BOUND:?}: {stderr}"
    );
    assert!(
        libc::WIFEXITED(status),
        "{args:?}: ended by signal {}: {stderr}",
        libc::WTERMSIG(status)
    );
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    Cost {
        code: libc::WEXITSTATUS(status),
        stdout,
        stderr,
        max_rss: usage.ru_maxrss as u64 * 1024,
        elapsed,
    }
}

impl Cost {
    /// Within 1 GiB of resident memory and 10 s.
    fn assert_bounded(&self, what: &str) {
        assert!(
            self.max_rss < RSS_BOUND,
            "{what}: peak RSS {} MiB, more than {} MiB",
            self.max_rss >> 20,
            RSS_BOUND >> 20
        );
        assert!(self.elapsed < TIME_BOUND, "{what}: took {:?}", self.elapsed);
    }
}

/// The unwinder's fixture (9 KB, static, exits at once): `.text` is
/// section 1, 0x12b bytes at file offset 0x1000.
const FX: &[u8] = include_bytes!("../../symbolize/fuzz-fixture/fx.elf");

/// `profdev gmon` on an executable whose `.text` claims 2^62 bytes: one
/// sentence naming the file, exit 1, before anything is sized from the
/// claim (it aborted allocating 2^61 bytes of histogram).
#[test]
fn gmon_refuses_a_text_that_claims_more_than_the_file_holds() {
    let dir = tempdir();
    let mut elf = FX.to_vec();
    let shoff = u64::from_le_bytes(elf[0x28..0x30].try_into().unwrap()) as usize;
    // Section 1's sh_size.
    let size = shoff + 64 + 0x20;
    elf[size..size + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let exe = dir.path().join("crafted");
    profdev_testkit::write_executable(&exe, &elf, 0o755);
    let out = dir.path().join("gmon.out");
    let c = measured(&[
        "gmon".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        "--".as_ref(),
        exe.as_os_str(),
    ]);
    assert_eq!(c.code, 1, "{}", c.stderr);
    assert_eq!(c.stdout, "");
    assert_eq!(
        c.stderr,
        format!(
            "profdev gmon: {} is a malformed ELF file: its .text section claims \
             4611686018427387904 bytes at file offset 4096, past the end of the file (9448 \
             bytes); give an intact executable\n",
            exe.display()
        )
    );
    assert!(!out.exists());
    c.assert_bounded("gmon on a crafted ELF");
}

/// `profdev kprof` on 4 GiB sparse kpdata files: the classic output, read
/// as it is formatted (it read the whole file, 8.4 GB and 30 s, to print
/// `total: 0`).
#[test]
fn kprof_reads_a_sparse_4_gib_kpdata_only_as_far_as_it_formats() {
    let dir = tempdir();
    let map = dir.path().join("System.map");
    std::fs::write(
        &map,
        "80100000 T _start\n80100040 T fnA\n80100100 T fnB\n80100200 T fnC\n80100400 T etext\n",
    )
    .unwrap();
    // TV-K6: a first word of 0 prints only the totals line, exit 0. With
    // no bucket size (word 5 is 0: 1-byte buckets), the header allows
    // 4 GiB and 27 bytes.
    let zeros = dir.path().join("zeros");
    sparse(&zeros, 4 << 30, b"");
    let c = measured(&["kprof".as_ref(), map.as_os_str(), zeros.as_os_str()]);
    assert_eq!((c.code, c.stderr.as_str()), (0, ""));
    assert_eq!(
        c.stdout,
        "total: 0\tin kernel text: 0\toutside kernel text: 0\n"
    );
    c.assert_bounded("kprof on 4 GiB of zeros");

    // Ticks: 1-byte buckets, 5 ticks of 1 ms in fnB's first byte, then
    // zeros to 4 GiB: only the buckets up to etext are read.
    let mut head = Vec::new();
    for w in [5u32, 0, 1000, 0, 4, 0] {
        head.extend(w.to_be_bytes());
    }
    head.resize(4 * 0x100, 0);
    head.extend(5u32.to_be_bytes());
    let ticks = dir.path().join("ticks");
    sparse(&ticks, 4 << 30, &head);
    let c = measured(&["kprof".as_ref(), map.as_os_str(), ticks.as_os_str()]);
    assert_eq!((c.code, c.stderr.as_str()), (0, ""));
    assert_eq!(
        c.stdout,
        "total: 5\tin kernel text: 5\toutside kernel text: 0\nKTZERO 80100000\n\
         ms\t  %\tsym\n5\t100.0\tfnB\n"
    );
    c.assert_bounded("kprof on 4 GiB with ticks");
}

/// `prof` asked to profile a malformed ELF file: the classic `no profile
/// information`, byte for byte, then a line naming the file and what is
/// wrong with it (the classic line alone left the user guessing).
#[test]
fn prof_names_the_malformed_elf_it_could_not_profile() {
    if !privileged("prof on a malformed ELF", can_sample_children()) {
        return;
    }
    let dir = tempdir();
    // The fixture cut after 100 bytes: its program headers are missing.
    // The kernel refuses to run it (the shell then reads it as a script);
    // nothing of it is sampled.
    let bad = dir.path().join("cut");
    profdev_testkit::write_executable(&bad, &FX[..100], 0o755);
    let why = format!(
        "prof: no profile information\nprof: {} is a malformed ELF file: Invalid ELF program \
         header size or alignment\n",
        bad.display()
    );
    let c = measured(&["prof".as_ref(), "-e".as_ref(), bad.as_os_str()]);
    // CMD failed (the shell could not read it as a script either): prof
    // exits with CMD's status, after the classic line.
    assert_ne!(c.code, 0);
    assert_eq!(c.stdout, "");
    assert!(c.stderr.contains(&why), "{}", c.stderr);
    // As a module asked for with -m, beside one that is no ELF at all.
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a program\n").unwrap();
    let c = measured(&[
        "prof".as_ref(),
        "-m".as_ref(),
        bad.as_os_str(),
        "-m".as_ref(),
        text.as_os_str(),
        "--".as_ref(),
        "true".as_ref(),
    ]);
    assert_eq!(c.code, 1);
    assert!(
        c.stderr.ends_with(&format!(
            "{why}prof: {} is not an ELF file\n",
            text.display()
        )),
        "{}",
        c.stderr
    );
    // cprof and mprof: their classic line, then the same.
    for (cmd, classic) in [
        ("cprof", "no profile information (no module asked for ran)"),
        (
            "mprof",
            "no profile information (no allocation was made in the modules shown)",
        ),
    ] {
        let c = measured(&[
            cmd.as_ref(),
            "-m".as_ref(),
            bad.as_os_str(),
            "--".as_ref(),
            "true".as_ref(),
        ]);
        assert_eq!(c.code, 1, "{cmd}: {}", c.stderr);
        assert!(
            c.stderr.ends_with(&format!(
                "{cmd}: {classic}\n{cmd}: {} is a malformed ELF file: Invalid ELF program header \
                 size or alignment\n",
                bad.display()
            )),
            "{cmd}: {}",
            c.stderr
        );
    }
}
