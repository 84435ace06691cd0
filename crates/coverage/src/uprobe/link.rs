//! bpf(2): the per-CPU counter map, the program loaded, and the
//! multi-uprobe link that attaches it to every probe of a module.

use super::*;

use profdev_sample::bpf::attr::{
    load_program, obj_name, MapCreate, MapLookupElem, UprobeMultiLink, BPF_MAP_TYPE_PERCPU_ARRAY,
    BPF_PROG_TYPE_KPROBE, BPF_TRACE_UPROBE_MULTI,
};
use profdev_sample::bpf::{fd as bpf_fd, syscall as bpf};
/// The kernel's ENOTSUPP (not in libc).
pub(super) const ENOTSUPP: i32 = 524;

pub(super) fn permission(what: &str) -> UprobeError {
    let knob = std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    UprobeError::Permission(format!(
        "the kernel refused {what}: counting a static program through uprobes needs CAP_BPF and \
         CAP_PERFMON (or root); run profdev as root or grant it those capabilities \
         (sysctl kernel.unprivileged_bpf_disabled is {knob}, and uprobe programs need the \
         capabilities whatever its value)"
    ))
}

pub(super) fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

pub(super) fn unsupported(what: &str, e: &io::Error) -> UprobeError {
    UprobeError::Unsupported(format!(
        "the kernel refused {what} ({e}): counting a static program needs {FEATURE}, and this \
         kernel is {}; run it on Linux 6.6 or later, or build the program without -static",
        kernel_release()
    ))
}

pub(super) fn refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
}

pub(super) fn no_feature(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP | libc::ENOSYS)
    )
}

/// The number of possible CPUs (a per-CPU value has one entry each).
pub(super) fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut max = 0usize;
    for part in s.trim().split(',') {
        let hi = part.rsplit('-').next().unwrap_or(part);
        let n: usize = hi.parse().map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidData, format!("possible CPUs {s:?}"))
        })?;
        max = max.max(n);
    }
    Ok(max + 1)
}

/// A module counted through one multi-uprobe link.
pub struct Counter {
    probes: Probes,
    // Field order is drop order: the link first (removes the probes).
    link: Mutex<Option<OwnedFd>>,
    _prog: OwnedFd,
    map: OwnedFd,
    cpus: usize,
}

impl Counter {
    /// Attach `probes` to the file `path` (what the kernel resolves: the
    /// module's file, or `/proc/PID/exe`), counting only process `pid`'s
    /// threads.
    pub fn attach(probes: Probes, path: &Path, pid: u32) -> Result<Counter, UprobeError> {
        if !cfg!(target_arch = "x86_64") {
            return Err(UprobeError::Unsupported(
                "the uprobe fallback reads x86-64 flags: it runs on x86-64 only".into(),
            ));
        }
        if probes.is_empty() {
            return Err(io_error(
                format!(
                    "{} has no instruction a uprobe can take",
                    probes.path.display()
                ),
                io::Error::from_raw_os_error(libc::ENOEXEC),
            ));
        }
        let cpus = possible_cpus().map_err(|e| io_error("cannot count the possible CPUs", e))?;
        let slots = probes.slots.max(1);
        let map = bpf_fd(&mut MapCreate {
            map_type: BPF_MAP_TYPE_PERCPU_ARRAY,
            key_size: 4,
            value_size: 8,
            max_entries: slots,
            ..MapCreate::default()
        })
        .map_err(|e| {
            if refused(&e) {
                permission("creating a BPF map")
            } else {
                io_error(
                    format!("cannot create a per-CPU BPF array of {slots} counters"),
                    e,
                )
            }
        })?;

        let insns = program(map.as_raw_fd());
        let code = profdev_sample::bpf::asm::encode(&insns);
        let prog = match load_program(
            BPF_PROG_TYPE_KPROBE,
            BPF_TRACE_UPROBE_MULTI,
            obj_name(b"cprofupr"),
            &code,
        ) {
            Ok(fd) => fd,
            Err(e) if refused(&e.error) && e.log.is_empty() => {
                return Err(permission("loading a BPF program"));
            }
            Err(e) if no_feature(&e.error) && e.log.is_empty() => {
                return Err(unsupported("a uprobe-multi BPF program", &e.error));
            }
            Err(e) => {
                return Err(io_error(
                    format!(
                        "the BPF verifier rejected the uprobe counting program: {}",
                        e.log_head()
                    ),
                    e.error,
                ));
            }
        };

        let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
            io_error(
                format!("{} holds a NUL byte", path.display()),
                io::Error::from_raw_os_error(libc::EINVAL),
            )
        })?;
        let link = bpf_fd(&mut UprobeMultiLink {
            prog_fd: prog.as_raw_fd() as u32,
            attach_type: BPF_TRACE_UPROBE_MULTI,
            path: cpath.as_ptr() as u64,
            offsets: probes.offsets.as_ptr() as u64,
            cookies: probes.cookies.as_ptr() as u64,
            cnt: probes.offsets.len() as u32,
            pid,
            ..UprobeMultiLink::default()
        })
        .map_err(|e| {
            if refused(&e) {
                permission("a uprobe link")
            } else if no_feature(&e) && kernel_older_than(6, 6) {
                unsupported("a multi-uprobe link", &e)
            } else if e.raw_os_error() == Some(libc::ESRCH) {
                io_error(format!("process {pid} is gone"), e)
            } else {
                io_error(
                    format!(
                        "cannot attach {} uprobes to {} for process {pid}",
                        probes.offsets.len(),
                        path.display()
                    ),
                    e,
                )
            }
        })?;
        Ok(Counter {
            probes,
            link: Mutex::new(Some(link)),
            _prog: prog,
            map,
            cpus,
        })
    }

    /// Remove the probes (the counts so far stay readable).
    pub fn detach(&self) {
        self.link.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// The number of probes attached.
    pub fn probes(&self) -> usize {
        self.probes.len()
    }

    /// Blocks no probe counts.
    pub fn uncounted(&self) -> u64 {
        self.probes.uncounted()
    }

    /// The counts so far, summed over the CPUs.
    pub fn coverage(&self) -> ModuleCoverage {
        let n = self.probes.slots as usize;
        let mut slots = vec![0u64; n];
        let mut value = vec![0u64; self.cpus];
        for (key, total) in slots.iter_mut().enumerate() {
            let key = key as u32;
            let mut attr = MapLookupElem {
                map_fd: self.map.as_raw_fd() as u32,
                key: &key as *const u32 as u64,
                value: value.as_mut_ptr() as u64,
                ..MapLookupElem::default()
            };
            if bpf(&mut attr).is_ok() {
                *total = value.iter().fold(0u64, |s, v| s.saturating_add(*v));
            }
        }
        self.probes.coverage(&slots)
    }
}

/// Is the running kernel older than `major.minor`? (False when unknown.)
pub(super) fn kernel_older_than(major: u32, minor: u32) -> bool {
    release_older_than(&kernel_release(), major, minor)
}

/// Is the kernel release `r` (`6.1.0-18-amd64`) older than
/// `major.minor`? False when it does not start with two numbers.
pub(super) fn release_older_than(r: &str, major: u32, minor: u32) -> bool {
    let mut it = r.split(|c: char| !c.is_ascii_digit());
    match (
        it.next().and_then(|a| a.parse::<u32>().ok()),
        it.next().and_then(|b| b.parse::<u32>().ok()),
    ) {
        (Some(a), Some(b)) => (a, b) < (major, minor),
        _ => false,
    }
}
