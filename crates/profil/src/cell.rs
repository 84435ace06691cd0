//! Adding ticks to a histogram cell without ever faulting.
//!
//! SVR4's `addupc` wrote the counter with a fault-catching user copy and
//! turned profiling off when it faulted. The Linux equivalent of a
//! fault-catching copy from inside the process is `process_vm_readv` /
//! `process_vm_writev` on our own pid: the kernel walks the page tables with
//! `FOLL_WRITE` but without `FOLL_FORCE`, so an unmapped cell, a read-only
//! cell (`mprotect(PROT_READ)`) or a guard page returns `EFAULT` instead of
//! raising SIGSEGV. (Writing `/proc/self/mem` would not do: it uses
//! `FOLL_FORCE` and writes straight through read-only mappings.)
//!
//! The read-modify-write is not atomic; it does not need to be, because a
//! POSIX timer has a single preallocated signal, so two ticks are never
//! being counted at the same time except when a handler is delayed past a
//! whole timer interval.
//!
//! Where a seccomp policy forbids the two calls (`ENOSYS`, `EPERM`), the
//! mode falls back to a direct atomic increment; an unmapped buffer then
//! faults as it would under glibc. `choose_mode` decides once, outside the
//! signal handler.

use std::sync::atomic::{AtomicU16, AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const CHECKED: u8 = 1;
const DIRECT: u8 = 2;

static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// How cells are written, for diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellMode {
    /// Not decided yet (no profiling started).
    Unknown,
    /// `process_vm_readv`/`process_vm_writev`: an unwritable cell turns profiling off.
    Checked,
    /// Plain atomic increment (the probe calls are forbidden here).
    Direct,
}

/// The mode chosen so far.
pub fn mode() -> CellMode {
    match MODE.load(Ordering::Relaxed) {
        CHECKED => CellMode::Checked,
        DIRECT => CellMode::Direct,
        _ => CellMode::Unknown,
    }
}

/// Probe once whether `process_vm_readv` on ourselves works.
pub(crate) fn choose_mode() {
    if MODE.load(Ordering::Relaxed) != UNKNOWN {
        return;
    }
    let src: u16 = 0x5a5a;
    let mut dst: u16 = 0;
    // SAFETY: both iovecs describe live, correctly sized local variables.
    let n = unsafe { vm_copy(&mut dst, &src as *const u16 as usize, Direction::Read) };
    let m = if n == 2 && dst == src {
        CHECKED
    } else {
        DIRECT
    };
    MODE.store(m, Ordering::Relaxed);
}

enum Direction {
    Read,
    Write,
}

/// Copy 2 bytes between `local` and the remote address `addr` of our own
/// process. Returns bytes copied or -1.
///
/// # Safety
/// `local` must be a valid u16. `addr` may be anything: the kernel checks it.
unsafe fn vm_copy(local: *mut u16, addr: usize, dir: Direction) -> isize {
    let l = libc::iovec {
        iov_base: local.cast(),
        iov_len: 2,
    };
    let r = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: 2,
    };
    // SAFETY: per the function contract; the kernel validates `addr`.
    unsafe {
        let pid = libc::getpid();
        match dir {
            Direction::Read => libc::process_vm_readv(pid, &l, 1, &r, 1, 0),
            Direction::Write => libc::process_vm_writev(pid, &l, 1, &r, 1, 0),
        }
    }
}

/// Add `ticks` (u16 wrap) to the cell at `addr`. Returns false if the cell is
/// not readable and writable, in which case nothing was changed.
/// Async-signal-safe.
///
/// # Safety
/// In [`CellMode::Checked`] any `addr` is fine. In the direct mode `addr`
/// must point to a writable, 2-aligned u16 that nothing else accesses
/// non-atomically.
pub(crate) unsafe fn add(addr: usize, ticks: u16) -> bool {
    if MODE.load(Ordering::Relaxed) == DIRECT {
        if addr % 2 != 0 {
            return false;
        }
        // SAFETY: per the function contract for the direct mode.
        unsafe { (*(addr as *const AtomicU16)).fetch_add(ticks, Ordering::Relaxed) };
        return true;
    }
    let mut v: u16 = 0;
    // SAFETY: `v` is a live local; the kernel checks `addr`.
    if unsafe { vm_copy(&mut v, addr, Direction::Read) } != 2 {
        return false;
    }
    v = v.wrapping_add(ticks);
    // SAFETY: as above.
    unsafe { vm_copy(&mut v, addr, Direction::Write) == 2 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_mode_refuses_unmapped_and_read_only_cells() {
        choose_mode();
        assert_eq!(
            mode(),
            CellMode::Checked,
            "process_vm_readv is available in the test environment"
        );
        let mut cell: u16 = 0xfffe;
        let addr = &mut cell as *mut u16 as usize;
        // SAFETY: checked mode, any address is acceptable.
        assert!(unsafe { add(addr, 3) });
        // SAFETY: `cell` is still alive; read it back through a volatile read
        // because the kernel wrote it behind the compiler's back.
        assert_eq!(unsafe { std::ptr::read_volatile(&cell) }, 1);
        // SAFETY: checked mode.
        assert!(!unsafe { add(0x10, 1) }, "address 0x10 is never mapped");
        // SAFETY: a fresh anonymous read-only page, unmapped at the end.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert!(!add(p as usize, 1), "a read-only page must not be written");
            assert_eq!(*(p as *const u16), 0);
            libc::munmap(p, 4096);
        }
    }
}
