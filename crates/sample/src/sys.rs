//! The kernel ABI: `struct perf_event_attr`, the record constants of
//! `<linux/perf_event.h>`, and the three system calls the engine makes
//! (perf_event_open, ioctl, poll). Everything here mirrors the uapi header;
//! nothing here decides policy.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `PERF_TYPE_SOFTWARE`.
pub const PERF_TYPE_SOFTWARE: u32 = 1;
/// `PERF_COUNT_SW_CPU_CLOCK`.
pub const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
/// `PERF_COUNT_SW_CONTEXT_SWITCHES`: counted as a task leaves a CPU, in
/// the scheduler, with the leaving task's registers.
pub const PERF_COUNT_SW_CONTEXT_SWITCHES: u64 = 3;

/// `enum perf_event_sample_format` bits.
pub mod sample {
    pub const IP: u64 = 1 << 0;
    pub const TID: u64 = 1 << 1;
    pub const TIME: u64 = 1 << 2;
    pub const ADDR: u64 = 1 << 3;
    pub const READ: u64 = 1 << 4;
    pub const CALLCHAIN: u64 = 1 << 5;
    pub const ID: u64 = 1 << 6;
    pub const CPU: u64 = 1 << 7;
    pub const PERIOD: u64 = 1 << 8;
    pub const STREAM_ID: u64 = 1 << 9;
    pub const RAW: u64 = 1 << 10;
    pub const BRANCH_STACK: u64 = 1 << 11;
    pub const REGS_USER: u64 = 1 << 12;
    pub const STACK_USER: u64 = 1 << 13;
    pub const IDENTIFIER: u64 = 1 << 16;
}

/// Bits of the `perf_event_attr` flag word (the C bitfield, in order).
pub mod flag {
    pub const DISABLED: u64 = 1 << 0;
    pub const INHERIT: u64 = 1 << 1;
    pub const EXCLUDE_USER: u64 = 1 << 4;
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    pub const EXCLUDE_HV: u64 = 1 << 6;
    pub const MMAP: u64 = 1 << 8;
    pub const COMM: u64 = 1 << 9;
    pub const FREQ: u64 = 1 << 10;
    pub const ENABLE_ON_EXEC: u64 = 1 << 12;
    pub const TASK: u64 = 1 << 13;
    pub const WATERMARK: u64 = 1 << 14;
    pub const MMAP_DATA: u64 = 1 << 17;
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    pub const EXCLUDE_CALLCHAIN_USER: u64 = 1 << 22;
    pub const MMAP2: u64 = 1 << 23;
    pub const COMM_EXEC: u64 = 1 << 24;
    pub const USE_CLOCKID: u64 = 1 << 25;
    pub const CONTEXT_SWITCH: u64 = 1 << 26;
}

/// `enum perf_event_type`.
pub mod record {
    pub const MMAP: u32 = 1;
    pub const LOST: u32 = 2;
    pub const COMM: u32 = 3;
    pub const EXIT: u32 = 4;
    pub const THROTTLE: u32 = 5;
    pub const UNTHROTTLE: u32 = 6;
    pub const FORK: u32 = 7;
    pub const SAMPLE: u32 = 9;
    pub const MMAP2: u32 = 10;
    pub const LOST_SAMPLES: u32 = 13;
    pub const SWITCH: u32 = 14;
    pub const SWITCH_CPU_WIDE: u32 = 15;
}

/// `PERF_RECORD_MISC_*` bits of the record header.
pub mod misc {
    pub const CPUMODE_MASK: u16 = 7;
    pub const KERNEL: u16 = 1;
    pub const USER: u16 = 2;
    /// On COMM records: the name changed by exec.
    pub const COMM_EXEC: u16 = 1 << 13;
    /// On MMAP/MMAP2 records: a data (non-executable) mapping.
    pub const MMAP_DATA: u16 = 1 << 13;
    /// On MMAP2 records: the union holds a build id, not dev/inode.
    pub const MMAP_BUILD_ID: u16 = 1 << 14;
    /// On SWITCH records: the task left the CPU (else it came back).
    pub const SWITCH_OUT: u16 = 1 << 13;
    /// On SWITCH records leaving: the task was still runnable.
    pub const SWITCH_OUT_PREEMPT: u16 = 1 << 14;
}

/// Callchain context markers (`enum perf_callchain_context`), as u64.
pub mod context {
    pub const HV: u64 = -32i64 as u64;
    pub const KERNEL: u64 = -128i64 as u64;
    pub const USER: u64 = -512i64 as u64;
    pub const GUEST: u64 = -2048i64 as u64;
    pub const GUEST_KERNEL: u64 = -2176i64 as u64;
    pub const GUEST_USER: u64 = -2560i64 as u64;
    /// Every value at or above this is a marker, not an address.
    pub const MAX: u64 = -4095i64 as u64;
}

/// `PERF_SAMPLE_REGS_ABI_NONE`: no user registers (kernel thread).
pub const REGS_ABI_NONE: u64 = 0;

/// Which registers REGS_USER asks for, as bit indexes of
/// `enum perf_event_x86_regs` / `perf_event_arm_regs`: (frame pointer,
/// stack pointer, instruction pointer).
#[cfg(target_arch = "x86_64")]
pub const USER_REG_BITS: Option<(u32, u32, u32)> = Some((6, 7, 8)); // BP, SP, IP
#[cfg(target_arch = "aarch64")]
pub const USER_REG_BITS: Option<(u32, u32, u32)> = Some((29, 31, 32)); // X29, SP, PC
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const USER_REG_BITS: Option<(u32, u32, u32)> = None;

/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `_IO('$', 0)`.
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
/// `_IO('$', 1)`.
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;

/// Offsets into `struct perf_event_mmap_page`.
pub mod mmap_page {
    pub const DATA_HEAD: usize = 1024;
    pub const DATA_TAIL: usize = 1032;
    pub const DATA_OFFSET: usize = 1040;
    pub const DATA_SIZE: usize = 1048;
}

/// `struct perf_event_attr`, `PERF_ATTR_SIZE_VER8` (136 bytes). Unions are
/// named after the member profdev uses.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfEventAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_watermark: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved_2: u16,
    pub aux_sample_size: u32,
    pub reserved_3: u32,
    pub sig_data: u64,
    pub config3: u64,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 136);

/// perf_event_open(2) with `PERF_FLAG_FD_CLOEXEC` and no group.
pub fn perf_event_open(attr: &PerfEventAttr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    // SAFETY: `attr` points to a live, fully initialised 136-byte struct whose
    // `size` field says so; the kernel only reads it. The other arguments are
    // plain integers.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            pid as libc::c_long,
            cpu as libc::c_long,
            -1 as libc::c_long,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = ret as libc::c_int;
    // SAFETY: the kernel just returned this descriptor to us; nobody else
    // owns it, so OwnedFd may close it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ioctl_none(fd: &OwnedFd, request: libc::c_ulong) -> io::Result<()> {
    // SAFETY: ENABLE/DISABLE take no argument pointer (0 means "this event
    // only"); the descriptor is valid for the borrow's lifetime.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, 0) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `PERF_EVENT_IOC_ENABLE`.
pub fn enable(fd: &OwnedFd) -> io::Result<()> {
    ioctl_none(fd, PERF_EVENT_IOC_ENABLE)
}

/// `PERF_EVENT_IOC_DISABLE`.
pub fn disable(fd: &OwnedFd) -> io::Result<()> {
    ioctl_none(fd, PERF_EVENT_IOC_DISABLE)
}

/// poll(2) on `fds` (events already set); returns the number ready, 0 on
/// timeout, and treats EINTR as "nothing ready".
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: the pointer and length describe a live, exclusively borrowed
    // slice of pollfd, which the kernel writes `revents` into.
    let ret = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if ret < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(err);
    }
    Ok(ret as usize)
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock profdev's records are
/// stamped with (`use_clockid`).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, exclusively borrowed timespec the kernel
    // writes; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n <= 0 {
        4096
    } else {
        n as usize
    }
}
