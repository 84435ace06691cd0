//! End to end: the prf device mounted by `profdev mount`, driven with real
//! system calls (open, write, read, ioctl, poll through libc) and by the
//! profiler(1M) commands. Needs /dev/fuse and root (mounting), and
//! system-wide perf_event_open (sampling).
//!
//! Fixtures: none on disk. TV-R1's table `[0, 0xC0001000, 0xC0002000,
//! 0xC0003000]` and TV-R2's tables are written by the tests; the live
//! tests load the running kernel's /proc/kallsyms with prfld.

mod common;
use common::*;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PRF_GETSTATUS: u64 = 0x5001;
const PRF_GETSIZE: u64 = 0x5002;
const PRF_SETSTATE: u64 = 0x5003;
const PRF_GETMAX: u64 = 0x5004;
const MAXPRF: usize = 130_560;
const TV_R1: [u64; 4] = [0, 0xC000_1000, 0xC000_2000, 0xC000_3000];

/// Mounting (root, /dev/fuse) and system-wide sampling.
fn can_mount_and_sample() -> Result<(), String> {
    can_mount()?;
    can_sample_system()
}

/// A device server mounted on a temporary directory, unmounted on drop.
struct Mount {
    dir: tempfile::TempDir,
}

impl Mount {
    fn new(what: &str) -> Option<Mount> {
        if !privileged(what, can_mount_and_sample()) {
            return None;
        }
        let dir = tempdir();
        let out = run(profdev().args(["mount", "-b"]).arg(dir.path()));
        assert!(out.status.success(), "profdev mount -b: {out:?}");
        Some(Mount { dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The per-CPU files, in CPU order.
    fn cpu_files(&self) -> Vec<PathBuf> {
        let mut cpus: Vec<u32> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_prefix("prf")?.parse().ok()
            })
            .collect();
        cpus.sort_unstable();
        cpus.iter().map(|c| self.path(&format!("prf{c}"))).collect()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = run(profdev().arg("unmount").arg(self.dir.path()));
    }
}

/// A file descriptor, closed on drop; every call is the raw system call.
struct Fd(i32);

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

impl Fd {
    fn open(path: &Path, flags: i32) -> Result<Fd, i32> {
        let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: c is a NUL-terminated path that outlives the call.
        let fd = unsafe { libc::open(c.as_ptr(), flags) };
        if fd < 0 {
            Err(errno())
        } else {
            Ok(Fd(fd))
        }
    }

    fn write(&self, data: &[u8]) -> Result<usize, i32> {
        // SAFETY: data is a live slice of data.len() bytes.
        let n = unsafe { libc::write(self.0, data.as_ptr().cast(), data.len()) };
        if n < 0 {
            Err(errno())
        } else {
            Ok(n as usize)
        }
    }

    fn write_words(&self, words: &[u64]) -> Result<usize, i32> {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        self.write(&bytes)
    }

    fn read_into(&self, buf: &mut [u8]) -> Result<usize, i32> {
        // SAFETY: buf is a live, writable slice of buf.len() bytes.
        let n = unsafe { libc::read(self.0, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(errno())
        } else {
            Ok(n as usize)
        }
    }

    /// One read of `count` bytes from offset 0: the seed's usage (lseek to
    /// 0, then read).
    fn read(&self, count: usize) -> Result<Vec<u8>, i32> {
        // SAFETY: lseek on our own descriptor.
        assert_eq!(unsafe { libc::lseek(self.0, 0, libc::SEEK_SET) }, 0);
        let mut buf = vec![0u8; count];
        let n = self.read_into(&mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    fn ioctl(&self, cmd: u64, arg: u64) -> Result<i32, i32> {
        // SAFETY: the prf ioctls are _IO numbers taking a value; the
        // intercepted numbers 1 and 2 are only ever given a null pointer.
        let r = unsafe { libc::ioctl(self.0, cmd as _, arg as libc::c_ulong) };
        if r < 0 {
            Err(errno())
        } else {
            Ok(r)
        }
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and closed once.
        unsafe { libc::close(self.0) };
    }
}

fn words(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|w| u64::from_ne_bytes(w.try_into().unwrap()))
        .collect()
}

#[test]
fn diagnostics_and_tv_r2_r3_through_system_calls() {
    let Some(m) = Mount::new("prf device system calls") else {
        return;
    };
    let prf = m.path("prf");
    let fd = Fd::open(&prf, libc::O_RDWR).unwrap();

    // Before any load: state 0, N 0, GETMAX; SETSTATE has no effect (DG/UX).
    assert_eq!(fd.ioctl(PRF_GETSTATUS, 0), Ok(0));
    assert_eq!(fd.ioctl(PRF_GETSIZE, 0), Ok(0));
    assert_eq!(fd.ioctl(PRF_GETMAX, 0), Ok(MAXPRF as i32));
    assert_eq!(fd.ioctl(PRF_SETSTATE, 1), Ok(0));
    assert_eq!(fd.ioctl(PRF_GETSTATUS, 0), Ok(0));

    // ENXIO, buffer untouched.
    let mut buf = [0xAAu8; 64];
    assert_eq!(fd.read_into(&mut buf), Err(libc::ENXIO));
    assert_eq!(buf, [0xAA; 64]);

    // TV-R2: E2BIG for too few or partial words, ENOSPC for too many
    // (checked first); the state is unchanged by each.
    for (len, want) in [
        (8, libc::E2BIG),
        (14, libc::E2BIG),
        (16, libc::E2BIG),
        (28, libc::E2BIG),
        ((MAXPRF + 1) * 8, libc::ENOSPC),
        ((MAXPRF + 1) * 8 + 2, libc::ENOSPC),
        (4 << 20, libc::ENOSPC), // larger than one FUSE request: refused whole
    ] {
        assert_eq!(fd.write(&vec![0; len]), Err(want), "{len} bytes");
        assert_eq!(fd.ioctl(PRF_GETSTATUS, 0), Ok(0), "{len} bytes");
        assert_eq!(fd.read(8), Err(libc::ENXIO), "{len} bytes");
    }

    // The largest table loads whole even from a buffer that starts 8 bytes
    // before a page boundary (so it spans one page more than its length),
    // and a read of its 2 MiB image, which FUSE splits, is one snapshot.
    let table: Vec<u64> = (0..MAXPRF as u64).map(|i| i * 16).collect();
    let bytes: Vec<u8> = table.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let mut backing = vec![0u8; bytes.len() + 8192];
    let skew = (4088 + 4096 - backing.as_ptr() as usize % 4096) % 4096;
    backing[skew..skew + bytes.len()].copy_from_slice(&bytes);
    assert_eq!(fd.write(&backing[skew..skew + bytes.len()]), Ok(MAXPRF * 8));
    assert_eq!(fd.ioctl(PRF_GETSIZE, 0), Ok(MAXPRF as i32));
    let image = fd.read((2 * MAXPRF + 2) * 8 + 100).unwrap();
    assert_eq!(image.len(), (2 * MAXPRF + 2) * 8);
    assert_eq!(words(&image[..MAXPRF * 8]), table);
    assert!(image[MAXPRF * 8..].iter().all(|&b| b == 0));
    assert_eq!(
        fd.read(16).unwrap(),
        image[..16],
        "the next read starts over"
    );

    // A good load; then TV-R3.
    assert_eq!(fd.write_words(&TV_R1), Ok(32));
    assert_eq!(fd.ioctl(PRF_GETSTATUS, 0), Ok(2));
    assert_eq!(fd.ioctl(PRF_SETSTATE, 1), Ok(0));
    assert_eq!(fd.ioctl(PRF_GETSTATUS, 0), Ok(3));
    assert_eq!(fd.ioctl(PRF_GETSIZE, 0), Ok(4));
    assert_eq!(fd.ioctl(PRF_SETSTATE, 0x11), Ok(0));
    assert_eq!(fd.ioctl(PRF_GETSTATUS, 0), Ok(3));
    assert_eq!(fd.ioctl(9, 0), Err(libc::EINVAL));
    assert_eq!(
        fd.ioctl(3, 1),
        Err(libc::EINVAL),
        "bare SVR4 numbers are not ours"
    );
    // Why the numbers are not SVR4's bare 1 and 2: Linux answers FIBMAP and
    // FIGETBSZ itself, for every regular file, and they never reach us.
    assert_eq!(fd.ioctl(2, 0), Err(libc::EFAULT));
    assert!(fd.ioctl(1, 0).is_err());

    // EBUSY while on (sizes are checked first), state and counters unchanged.
    let on_image = fd.read(80).unwrap();
    assert_eq!(fd.write_words(&[0, 1, 2]), Err(libc::EBUSY));
    assert_eq!(fd.write(&[0; 16]), Err(libc::E2BIG));
    assert_eq!(fd.ioctl(PRF_GETSTATUS, 0), Ok(3));
    assert_eq!(fd.ioctl(PRF_GETSIZE, 0), Ok(4));
    assert_eq!(words(&fd.read(80).unwrap())[..4], TV_R1);
    assert_eq!(words(&on_image)[..4], TV_R1);
    assert_eq!(fd.ioctl(PRF_SETSTATE, 0x10), Ok(0));
    assert_eq!(fd.ioctl(PRF_GETSTATUS, 0), Ok(2));

    // Reads honour the file offset and end at the image's length (80
    // bytes for 4 addresses), which stat reports; a read from offset 0
    // returns what the seed's did.
    let first = fd.read(80).unwrap();
    assert_eq!(first.len(), 80);
    let mut rest = [0u8; 1000];
    assert_eq!(
        fd.read_into(&mut rest),
        Ok(0),
        "end of file after the image"
    );
    let again = fd.read(80).unwrap();
    assert_eq!(again, first, "a read at offset 0 starts from the start");
    assert_eq!(fd.read(13).unwrap(), first[..13]);
    assert_eq!(fd.read_into(&mut rest), Ok(67), "the next read continues");
    assert_eq!(rest[..67], first[13..]);
    assert_eq!(fd.read_into(&mut rest), Ok(0));
    assert_eq!(fd.read(1000).unwrap(), first, "no more than the image");
    assert_eq!(std::fs::metadata(&prf).unwrap().len(), 80);

    // EINVAL for an unsorted table: no valid table afterwards.
    assert_eq!(fd.write_words(&[0, 0x20, 0x10]), Err(libc::EINVAL));
    assert_eq!(fd.ioctl(PRF_GETSTATUS, 0), Ok(0));
    let mut buf = [0x55u8; 32];
    assert_eq!(fd.read_into(&mut buf), Err(libc::ENXIO));
    assert_eq!(buf, [0x55; 32]);
    assert_eq!(fd.ioctl(PRF_SETSTATE, 1), Ok(0));
    assert_eq!(
        fd.ioctl(PRF_GETSTATUS, 0),
        Ok(0),
        "no effect without a table"
    );

    // Equal neighbours are accepted; counters start at zero.
    assert_eq!(fd.write_words(&[0, 0x10, 0x10]), Ok(24));
    assert_eq!(fd.ioctl(PRF_GETSTATUS, 0), Ok(2));
    assert_eq!(
        words(&fd.read(1 << 10).unwrap()),
        [0, 0x10, 0x10, 0, 0, 0, 0, 0]
    );

    // A per-CPU file shares the table and the state.
    let cpu0 = Fd::open(&m.cpu_files()[0], libc::O_RDONLY).unwrap();
    assert_eq!(cpu0.ioctl(PRF_GETSIZE, 0), Ok(3));
    assert_eq!(words(&cpu0.read(24).unwrap()), [0, 0x10, 0x10]);

    // poll: always ready for reading and writing.
    let mut pfd = [
        libc::pollfd {
            fd: fd.0,
            events: libc::POLLIN | libc::POLLOUT,
            revents: 0,
        },
        libc::pollfd {
            fd: cpu0.0,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: pfd is a live array of two pollfd.
    let n = unsafe { libc::poll(pfd.as_mut_ptr(), 2, 0) };
    assert_eq!(n, 2);
    assert_eq!(
        pfd[0].revents & (libc::POLLIN | libc::POLLOUT),
        libc::POLLIN | libc::POLLOUT
    );
    assert_eq!(pfd[1].revents & libc::POLLIN, libc::POLLIN);
}

/// One `dd if=/dev/zero of=/dev/null` of 1.3 GB: kernel zeroing.
fn dd() {
    let st = std::process::Command::new("dd")
        .args(["if=/dev/zero", "of=/dev/null", "bs=64k", "count=20000"])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
}

/// prf's image now: its N addresses, and its N + 2 counters (one per
/// address, then user, then idle).
fn image(prf: &Path) -> (Vec<u64>, Vec<u64>) {
    let fd = Fd::open(prf, libc::O_RDONLY).unwrap();
    let n = fd.ioctl(PRF_GETSIZE, 0).unwrap() as usize;
    let mut addrs = words(&fd.read((2 * n + 2) * 8).unwrap());
    assert_eq!(addrs.len(), 2 * n + 2);
    let counters = addrs.split_off(n);
    (addrs, counters)
}

/// The ticks of `counters` (N + 2 of them) in kernel text: all but the
/// user and idle ones.
fn kernel_ticks(counters: &[u64]) -> u64 {
    counters[..counters.len() - 2].iter().sum()
}

/// Run [`dd`] until `enough` holds of prf's addresses and counters,
/// checked after each run: a workload as long as the counters need,
/// however loaded the machine. Fails, naming `what`, when it still does
/// not hold after two minutes of dd (a hang guard: dd takes a fraction of
/// a second on an idle machine).
fn dd_until(prf: &Path, what: &str, mut enough: impl FnMut(&[u64], &[u64]) -> bool) {
    let start = Instant::now();
    loop {
        dd();
        let (addrs, counters) = image(prf);
        if enough(&addrs, &counters) {
            return;
        }
        let n = addrs.len();
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{what}: not yet after 120 s of dd; {} kernel ticks, user {}, idle {}",
            kernel_ticks(&counters),
            counters[n],
            counters[n + 1]
        );
    }
}

/// The addresses of the kernel's zeroing functions ([`is_zeroing`]) in
/// /proc/kallsyms, the namelist prfld loads by default.
fn zeroing_addresses() -> std::collections::HashSet<u64> {
    std::fs::read_to_string("/proc/kallsyms")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (addr, _kind, name) = (f.next()?, f.next()?, f.next()?);
            is_zeroing(name).then(|| u64::from_str_radix(addr, 16).ok())?
        })
        .collect()
}

fn prf_cmd(args: &[&str], dev: &Path) -> std::process::Output {
    let (cmd, rest) = args.split_first().unwrap();
    run(profdev().arg(cmd).arg("-f").arg(dev).args(rest))
}

#[test]
fn per_cpu_files_add_up_to_prf() {
    let Some(m) = Mount::new("prf per-CPU files") else {
        return;
    };
    let prf = m.path("prf");
    let out = prf_cmd(&["prfld"], &prf);
    assert!(out.status.success(), "{out:?}");
    let out = prf_cmd(&["prfstat", "on"], &prf);
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("profiling enabled\n"),
        "{out:?}"
    );
    // Kernel ticks, as many as the checks below need, however long that
    // takes on a loaded machine.
    dd_until(&prf, "100 kernel ticks", |_, counters| {
        kernel_ticks(counters) >= 100
    });
    let out = prf_cmd(&["prfstat", "off"], &prf);
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("profiling disabled\n"),
        "{out:?}"
    );

    let fd = Fd::open(&prf, libc::O_RDONLY).unwrap();
    let n = fd.ioctl(PRF_GETSIZE, 0).unwrap() as usize;
    let all = words(&fd.read((2 * n + 2) * 8).unwrap());
    assert_eq!(all.len(), 2 * n + 2);
    let mut sum = vec![0u64; n + 2];
    let mut totals = Vec::new();
    for f in m.cpu_files() {
        let cpu = words(
            &Fd::open(&f, libc::O_RDONLY)
                .unwrap()
                .read((2 * n + 2) * 8)
                .unwrap(),
        );
        assert_eq!(cpu[..n], all[..n], "{}: same table", f.display());
        for (s, c) in sum.iter_mut().zip(&cpu[n..]) {
            *s += c;
        }
        totals.push(cpu[n..].iter().sum::<u64>());
    }
    assert_eq!(sum, all[n..], "the per-CPU counters add up to prf's");
    // The 100 kernel ticks seen while on are still there once off. (Not
    // every CPU need have ticks: on some VMs an idle vCPU's cpu-clock timer
    // does not fire, and `perf record -a` sees the same.)
    let (user, idle) = (all[2 * n], all[2 * n + 1]);
    let kernel = kernel_ticks(&all[n..]);
    assert!(
        kernel >= 100,
        "kernel ticks counted: {kernel}, user {user}, idle {idle}; per-CPU totals {totals:?}"
    );
    eprintln!(
        "prf: {n} addresses; {} ticks on {} CPUs; kernel {kernel} user {user} idle {idle}",
        totals.iter().sum::<u64>(),
        totals.len(),
    );
}

#[test]
fn prfld_prfstat_prfsnap_prfpr_names_the_workload() {
    let Some(m) = Mount::new("prf command sequence") else {
        return;
    };
    let prf = m.path("prf");
    let d = tempdir();
    let log = d.path().join("log");
    let log = log.to_str().unwrap();

    let out = prf_cmd(&["prfld"], &prf);
    assert_eq!(
        (out.status.code(), out.stdout.len()),
        (Some(0), 0),
        "{out:?}"
    );
    let out = prf_cmd(&["prfstat", "on"], &prf);
    let stat = String::from_utf8_lossy(&out.stdout);
    assert!(
        stat.starts_with("profiling enabled\n") && stat.ends_with(" kernel text addresses\n"),
        "{stat}"
    );
    let out = prf_cmd(&["prfsnap", log], &prf);
    assert!(out.status.success(), "{out:?}");
    // The interval's zeroing ticks, counted from the counters the first
    // record holds: dd until they are at least 50 and 3% of all its ticks,
    // so that prfpr, with a 1% cutoff, shows them whatever the ticks between
    // the last check and the second prfsnap add.
    let bytes = std::fs::read(log).unwrap();
    let n = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
    let first: Vec<u64> = bytes[24 + 8 * n + 8..]
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
        .collect();
    assert_eq!(first.len(), n + 2, "one record");
    let zeroing = zeroing_addresses();
    let zero_ticks = |addrs: &[u64], counters: &[u64]| -> u64 {
        addrs
            .iter()
            .zip(counters)
            .filter(|(a, _)| zeroing.contains(a))
            .map(|(_, c)| c)
            .sum()
    };
    let (addrs, _) = image(&prf);
    let zero0 = zero_ticks(&addrs, &first);
    let all0: u64 = first.iter().sum();
    dd_until(
        &prf,
        "50 zeroing ticks, 3% of the interval's",
        |addrs, counters| {
            let zero = zero_ticks(addrs, counters).saturating_sub(zero0);
            let all = counters.iter().sum::<u64>().saturating_sub(all0);
            zero >= 50 && zero * 100 >= all * 3
        },
    );
    let out = prf_cmd(&["prfsnap", log], &prf);
    assert!(out.status.success(), "{out:?}");
    let out = run(profdev().args(["prfpr", log, "1"]));
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let (t0, t1) = (lines.next().unwrap(), lines.next().unwrap());
    for t in [t0, t1] {
        // mm/dd/yyy hh:mm, the year as tm_year.
        assert_eq!(t.len(), 15, "{text}");
        assert_eq!(&t[6..9], &format!("{}", year_since_1900()), "{text}");
    }
    let named: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once('\t').map(|(name, _)| name.trim_end()))
        .collect();
    assert!(
        named.iter().any(|n| is_zeroing(n)),
        "no zeroing function in\n{text}"
    );

    // The log: profdev's layout, two records, N + 2 counters.
    let bytes = std::fs::read(log).unwrap();
    assert_eq!(&bytes[..8], b"PRFLOG64");
    let n = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
    assert_eq!(bytes.len(), 24 + 8 * n + 2 * (8 + 8 * (n + 2)));

    // Appending after a reload with another table is refused.
    prf_cmd(&["prfstat", "off"], &prf);
    let fd = Fd::open(&prf, libc::O_WRONLY).unwrap();
    fd.write_words(&TV_R1).unwrap();
    let out = prf_cmd(&["prfsnap", log], &prf);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("different address table"),
        "{out:?}"
    );
}

fn year_since_1900() -> i64 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // Close enough for the year away from New Year's Eve.
    (1970 + secs / 31_556_952) - 1900
}

#[test]
fn tv_r5_and_command_messages() {
    let Some(m) = Mount::new("prf command messages") else {
        return;
    };
    let prf = m.path("prf");
    let d = tempdir();

    // Nothing loaded.
    let out = prf_cmd(&["prfstat"], &prf);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "profiling disabled\n");
    let snap = d.path().join("snap");
    let out = prf_cmd(&["prfsnap", snap.to_str().unwrap()], &prf);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).as_ref()
        ),
        (Some(1), "prfsnap: cannot activate profiling\n")
    );

    // TV-R5: four addresses loaded with profiling off.
    let fd = Fd::open(&prf, libc::O_WRONLY).unwrap();
    fd.write_words(&TV_R1).unwrap();
    let out = prf_cmd(&["prfstat"], &prf);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "profiling disabled\n4 kernel text addresses\n"
    );
    assert_eq!(out.status.code(), Some(0));

    let msg = |out: &std::process::Output| {
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let out = prf_cmd(&["prfstat", "maybe"], &prf);
    assert_eq!(
        msg(&out),
        (
            1,
            "eh?\n".into(),
            "prfstat: \"maybe\" is neither on nor off: say prfstat on, prfstat off, or prfstat alone for the state\n".into()
        )
    );
    let out = prf_cmd(&["prfstat", "on", "off"], &prf);
    assert_eq!(
        msg(&out),
        (1, "usage: prfstat  [ on ]  [ off ]\n".into(), String::new())
    );
    let missing = m.path("prf999999");
    let out = prf_cmd(&["prfstat"], &missing);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("cannot open "),
        "{out:?}"
    );

    // prfld while on: EBUSY's message; too many arguments; bad namelist.
    prf_cmd(&["prfstat", "on"], &prf);
    let out = prf_cmd(&["prfld"], &prf);
    assert_eq!(
        msg(&out),
        (
            1,
            "error: profiler is enabled\n".into(),
            "prfld: switch profiling off first (profdev prfstat off), then load\n".into()
        )
    );
    prf_cmd(&["prfstat", "off"], &prf);
    let out = prf_cmd(&["prfld", "a", "b"], &prf);
    assert_eq!(
        msg(&out),
        (
            1,
            "error: usage: prfld [-f device_name] [namelist]\n".into(),
            String::new()
        )
    );
    let out = prf_cmd(&["prfld", "/nonexistent/System.map"], &prf);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("error: cannot read /nonexistent"));
    let out = prf_cmd(&["prfld"], &missing);
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("error: cannot open "),
        "{out:?}"
    );
    // A namelist with too few text symbols: the device's E2BIG.
    let tiny = d.path().join("tiny.map");
    std::fs::write(&tiny, "ffffffff81000000 T _stext\n").unwrap();
    let out = prf_cmd(&["prfld", tiny.to_str().unwrap()], &prf);
    assert_eq!(
        msg(&out),
        (
            1,
            "error: unaligned data or insufficient addresses\n".into(),
            "prfld: the device takes 0 and at least two text addresses; give the running kernel's \
             namelist (/proc/kallsyms, its System.map or its vmlinux)\n"
                .into()
        )
    );
    // A failed load left the last good table in place.
    assert_eq!(fd.ioctl(PRF_GETSIZE, 0), Ok(4));

    // prfsnap usage; prfdc usage, rate, existing file.
    let out = prf_cmd(&["prfsnap"], &prf);
    assert_eq!(
        msg(&out),
        (
            1,
            String::new(),
            "prfsnap: usage: prfsnap  logfile\n".into()
        )
    );
    let out = prf_cmd(&["prfdc"], &prf);
    assert_eq!(
        msg(&out),
        (
            1,
            String::new(),
            "prfdc: usage: prfdc  logfile  [ rate  [ off_hour ] ]\n".into()
        )
    );
    let out = prf_cmd(&["prfdc", d.path().join("x").to_str().unwrap(), "0"], &prf);
    assert_eq!(
        msg(&out),
        (1, String::new(), "prfdc: invalid sampling rate\n".into())
    );
    let out = prf_cmd(&["prfdc", tiny.to_str().unwrap()], &prf);
    assert_eq!(
        msg(&out),
        (
            1,
            String::new(),
            "prfdc: existing file would be truncated\n".into()
        )
    );
}

#[test]
fn prfdc_collects_every_period_in_the_background() {
    let Some(m) = Mount::new("prfdc") else {
        return;
    };
    let prf = m.path("prf");
    let d = tempdir();
    let log = d.path().join("dc.log");
    let out = prf_cmd(&["prfld"], &prf);
    assert!(out.status.success(), "{out:?}");
    let started = Instant::now();
    // Every second (-u 1, period 1), never an off hour (24), three records.
    // The collector keeps stderr (for its errors), so read prfdc's line,
    // not the pipe to its end.
    let mut child = profdev()
        .args(["prfdc", "-f"])
        .arg(&prf)
        .args(["-u", "1", "-n", "3"])
        .arg(&log)
        .args(["1", "24"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let st = child.wait().unwrap();
    assert!(st.success());
    let mut err = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stderr.take().unwrap()),
        &mut err,
    )
    .unwrap();
    // The collector's stdout is not the caller's: `$(prfdc …)` returns.
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(out.is_empty());
    // The collector's pid, as prfdc prints it when it detaches.
    let pid: i32 = err
        .strip_prefix(&format!(
            "prfdc: collecting into {} every 1 s in the background: pid ",
            log.display()
        ))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no collector pid in {err:?}"));
    assert!(
        err.ends_with(&format!(" (stop it with kill {pid})\n")),
        "{err:?}"
    );
    // prfdc returns at once: its collector, which writes a record now and
    // two more a second apart, still runs. (Not a bound on the time prfdc
    // took: a busy machine may take over a second to start a program.)
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        !stat.is_empty() && !stat.rsplit(") ").next().unwrap_or("").starts_with('Z'),
        "prfdc returned after its collector ended: {stat:?}"
    );
    let fd = Fd::open(&prf, libc::O_RDONLY).unwrap();
    assert_eq!(
        fd.ioctl(PRF_GETSTATUS, 0),
        Ok(3),
        "prfdc switched profiling on"
    );
    let n = fd.ioctl(PRF_GETSIZE, 0).unwrap() as usize;
    let want = 24 + 8 * n + 3 * (8 + 8 * (n + 2));
    while std::fs::metadata(&log)
        .map(|m| m.len() as usize)
        .unwrap_or(0)
        < want
    {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "prfdc wrote too little"
        );
        dd();
    }
    // The collector exits after its third record (a zombie, if nothing
    // reaps it, counts as gone).
    wait_until("the collector to exit", Duration::from_secs(120), || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit(") ").next().unwrap_or("").starts_with('Z')
        })
    });
    let bytes = std::fs::read(&log).unwrap();
    assert_eq!(
        bytes.len(),
        want,
        "exactly three records, then prfdc stopped"
    );
    let rec = |k: usize| 24 + 8 * n + k * (8 + 8 * (n + 2));
    let time = |k: usize| i64::from_le_bytes(bytes[rec(k)..rec(k) + 8].try_into().unwrap());
    let total = |k: usize| words(&bytes[rec(k) + 8..rec(k + 1)]).iter().sum::<u64>();
    // A record a period (1 s) apart at least; at most 30 s for the two
    // periods, a bound for a loaded machine that still catches a period
    // read in minutes.
    assert!(
        time(1) - time(0) >= 1 && time(2) - time(1) >= 1 && time(2) - time(0) <= 30,
        "record times {} {} {}",
        time(0),
        time(1),
        time(2)
    );
    assert!(total(0) <= total(1) && total(1) < total(2), "counters grow");
    let out = run(profdev().arg("prfpr").arg(&log).arg("0"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text.matches("initialization").count(), 0, "{text}");
    assert!(text.lines().count() >= 6, "two intervals:\n{text}");
}

#[test]
fn without_f_the_command_starts_a_device_server_and_says_so() {
    if !privileged("prf commands starting a server", can_mount_and_sample()) {
        return;
    }
    let d = tempdir();
    let dir = d.path().join("mnt");
    std::fs::create_dir(&dir).unwrap();
    let out = run(profdev().env("PROFDEV_MOUNT", &dir).arg("prfstat"));
    let unmount = run(profdev().arg("unmount").arg(&dir));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "profiling disabled\n");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "profdev: started a device server at {0} (stop it with: profdev unmount {0})\n",
            dir.display()
        )),
        "{out:?}"
    );
    assert!(unmount.status.success(), "{unmount:?}");
    // Bare -f names are files in that directory, started the same way.
    let out = run(profdev()
        .env("PROFDEV_MOUNT", &dir)
        .args(["prfstat", "-f", "prf0"]));
    let unmount = run(profdev().arg("unmount").arg(&dir));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "profiling disabled\n",
        "{out:?}"
    );
    assert!(unmount.status.success(), "{unmount:?}");
}

/// `prfstat xx` says `eh?` without starting a device server for the
/// device it will not use (issue 25, item 10); so does a usage error.
#[test]
fn prfstat_checks_its_operands_before_starting_a_server() {
    let d = tempdir();
    let dir = d.path().join("mnt");
    std::fs::create_dir(&dir).unwrap();
    for (args, stdout) in [
        (&["prfstat", "xx"][..], "eh?\n"),
        (
            &["prfstat", "on", "off"][..],
            "usage: prfstat  [ on ]  [ off ]\n",
        ),
    ] {
        let out = run(profdev().env("PROFDEV_MOUNT", &dir).args(args));
        // Should an old binary have started one, leave nothing mounted.
        let _ = run(profdev().arg("unmount").arg(&dir));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), stdout, "{args:?}");
        assert!(!err.contains("device server"), "{args:?}: {err}");
        assert!(!dir.join("prf").exists(), "{args:?}: nothing mounted");
    }
}
