//! The device server's allocator settings: memory a read gave back goes
//! back to the kernel.
//!
//! Every open of `kpdata`, `gmon/gmon.out` or `prf` snapshots the file (9 to
//! 10 MB each for a 19 MB kernel text), on whichever FUSE thread serves the
//! open, and frees it at close. glibc's malloc raises its mmap threshold to
//! the size of the largest mmapped block freed so far (up to 32 MB), so
//! after the first snapshot every later one is carved from a malloc arena
//! instead, one arena per thread that ever allocated, and a freed arena
//! block is kept for reuse, never returned: a few reads pinned 50 to 70 MB
//! in a server whose live data is 20 MB (`bench/server_rss.sh`).
//!
//! Setting the threshold explicitly switches that adjustment off, so every
//! block of 128 KiB or more is its own mapping, unmapped at free; two arenas
//! keep the small-block fragmentation of the server's threads in bounds.

/// Blocks of this size and larger are mapped on their own and returned to
/// the kernel when freed (glibc's initial default, made fixed).
const MMAP_THRESHOLD: i32 = 128 * 1024;

/// Arenas the server's threads share (the engine threads, the FUSE
/// threads); glibc's default is 8 per CPU.
const ARENA_MAX: i32 = 2;

/// Fix glibc's mmap threshold and arena count for a long-running server.
/// Call before the server starts its threads. A no-op on other C
/// libraries.
pub fn bound_for_server() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; it is called
    // before the server starts any thread, and takes plain integers.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX);
    }
}

/// Give the kernel back the free pages of the heap (`malloc_trim`): called
/// once the server is built, when the kernel symbol table it was built
/// from (about 5 MB of parsing) has been freed. A no-op on other C
/// libraries.
pub fn release_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the kernel; it takes
    // the allocator's lock like any malloc call.
    unsafe {
        libc::malloc_trim(0);
    }
}
