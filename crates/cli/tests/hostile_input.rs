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
