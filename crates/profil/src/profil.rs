//! profil(2) with the NEWS-os/SVR4 semantics: the process-wide state and the
//! safe Rust API.
//!
//! # Synopsis
//!
//! ```no_run
//! use profdev_profil::Profil;
//! # fn work() {}
//! let mut cells = vec![0u16; 4096];
//! let text_start = work as usize & !0xfff;
//! // One cell per ~2 bytes of text from text_start on (scale 0xFFFF).
//! Profil::scope(&mut cells, text_start, 0xFFFF, |p| {
//!     work();
//!     assert!(p.is_counting());
//! })
//! .unwrap();
//! // Profiling has stopped; `cells` is ours again.
//! let total: u64 = cells.iter().map(|&c| u64::from(c)).sum();
//! # let _ = total;
//! ```
//!
//! # Description
//!
//! There is one profil per process, as there was one per u-area. Every tick
//! of process CPU time (see [`crate::clock`]) the interrupted PC is mapped by
//! [`crate::index::svr4`] to a `u16` cell which is incremented with 16-bit
//! wrap. A later call replaces the earlier one: from the moment it returns,
//! the earlier buffer is no longer written (the call waits for a tick that
//! is being counted on another thread to finish). Scale 0 or 1 turns
//! profiling off; bufsiz 0 makes it ineffective. If a cell cannot be written
//! (the buffer was unmapped or made read-only), profiling turns itself off
//! (`scale` becomes 0), as SVR4's `addupc` did.
//!
//! The Rust API enforces the buffer's lifetime: [`Profil::scope`] lends a
//! buffer for the duration of a closure and stops profiling before it
//! returns (also when the closure panics); [`Profil::start`] takes an owned
//! buffer and gives it back from [`Profil::into_buffer`]. A guard over a
//! *borrowed* buffer that stopped on drop would be unsound, because
//! `mem::forget` would let the buffer die while the kernel still writes it;
//! forgetting an owned [`Profil`] only leaks the buffer.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Once;

use crate::error::Error;
use crate::index::{self, Tick};
use crate::{cell, clock};

/// The arguments of one profil(2) call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Address of the first `u16` cell (0 = no buffer).
    pub buf: usize,
    /// Buffer size in bytes; `bufsiz / 2` cells.
    pub bufsiz: usize,
    /// PC that maps to cell 0.
    pub offset: usize,
    /// 16-bit fixed-point scale; only `scale & 0xFFFE` is used.
    pub scale: u32,
}

impl Config {
    /// The configuration that turns profiling off.
    pub const OFF: Config = Config {
        buf: 0,
        bufsiz: 0,
        offset: 0,
        scale: 0,
    };

    /// Whether a tick could ever be counted: a buffer of at least one cell
    /// and a scale that is on.
    pub fn can_count(&self) -> bool {
        self.buf != 0 && self.bufsiz >= 2 && index::svr4_is_on(self.scale)
    }
}

// The current configuration, published with a sequence lock: SEQ is odd
// while a writer changes the fields. The signal handler never waits; it
// drops the tick when it sees a write in progress.
static SEQ: AtomicUsize = AtomicUsize::new(0);
static BUF: AtomicUsize = AtomicUsize::new(0);
static BUFSIZ: AtomicUsize = AtomicUsize::new(0);
static OFFSET: AtomicUsize = AtomicUsize::new(0);
static SCALE: AtomicU32 = AtomicU32::new(0);
/// Incremented by every call; a [`Profil`] stops profiling only if it is
/// still the latest call.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// Number of handlers between reading the configuration and finishing
/// their write; writers wait for 0 after publishing.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// A pthread mutex (not std's) so that the fork handlers can hold it from
/// `prepare` to `parent`/`child`.
struct WriterLock(UnsafeCell<libc::pthread_mutex_t>);
// SAFETY: the pthread mutex is designed to be shared between threads.
unsafe impl Sync for WriterLock {}
static WRITER: WriterLock = WriterLock(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));

impl WriterLock {
    fn lock(&self) -> WriterGuard<'_> {
        // SAFETY: a statically initialised mutex, never moved.
        unsafe { libc::pthread_mutex_lock(self.0.get()) };
        WriterGuard(self)
    }
}

struct WriterGuard<'a>(&'a WriterLock);

impl Drop for WriterGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: we hold the lock.
        unsafe { libc::pthread_mutex_unlock(self.0 .0.get()) };
    }
}

fn begin_write() -> usize {
    loop {
        let s = SEQ.load(Ordering::SeqCst);
        if s & 1 == 0
            && SEQ
                .compare_exchange(s, s + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return s;
        }
        std::hint::spin_loop();
    }
}

fn store(cfg: Config) {
    BUF.store(cfg.buf, Ordering::SeqCst);
    BUFSIZ.store(cfg.bufsiz, Ordering::SeqCst);
    OFFSET.store(cfg.offset, Ordering::SeqCst);
    SCALE.store(cfg.scale, Ordering::SeqCst);
}

fn load() -> Config {
    Config {
        buf: BUF.load(Ordering::SeqCst),
        bufsiz: BUFSIZ.load(Ordering::SeqCst),
        offset: OFFSET.load(Ordering::SeqCst),
        scale: SCALE.load(Ordering::SeqCst),
    }
}

fn wait_quiescent() {
    let mut spins = 0u32;
    while IN_FLIGHT.load(Ordering::SeqCst) != 0 {
        spins += 1;
        if spins < 100 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

static ATFORK: Once = Once::new();

extern "C" fn fork_prepare() {
    // SAFETY: released by fork_parent / fork_child in the same thread.
    unsafe { libc::pthread_mutex_lock(WRITER.0.get()) };
}

extern "C" fn fork_parent() {
    // SAFETY: locked by fork_prepare.
    unsafe { libc::pthread_mutex_unlock(WRITER.0.get()) };
}

extern "C" fn fork_child() {
    // Only the forking thread exists here. A handler that was running on
    // another thread at the instant of fork left its marks; clear them.
    IN_FLIGHT.store(0, Ordering::SeqCst);
    let s = SEQ.load(Ordering::SeqCst);
    if s & 1 == 1 {
        SEQ.store(s + 1, Ordering::SeqCst);
    }
    clock::forget_timer();
    if load().can_count() {
        // The child keeps profiling into its copy of the buffer. There is
        // nobody to report a failure to; profiling just stays off.
        if clock::arm().is_err() {
            let s = begin_write();
            SCALE.store(0, Ordering::SeqCst);
            SEQ.store(s + 2, Ordering::SeqCst);
        }
    }
    // SAFETY: locked by fork_prepare in this (the only) thread.
    unsafe { libc::pthread_mutex_unlock(WRITER.0.get()) };
}

/// Replace the process's profil configuration; the raw profil(2) call.
/// Returns the new generation number.
///
/// # Safety
/// If `cfg.can_count()`, `cfg.buf .. cfg.buf + cfg.bufsiz` must stay valid
/// for writes until profiling is replaced or stopped, or be unmapped (which
/// stops profiling). No other code may write the buffer meanwhile.
pub unsafe fn set(cfg: Config) -> Result<u64, Error> {
    let _w = WRITER.lock();
    if cfg.can_count() {
        cell::choose_mode();
        clock::install(tick)?;
        ATFORK.call_once(|| {
            // SAFETY: registering static extern "C" functions. pthread_atfork
            // fails only with ENOMEM; without the handlers a child merely
            // stops counting, as under glibc.
            unsafe {
                libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child))
            };
        });
    }
    let s = begin_write();
    store(cfg);
    let armed = if cfg.can_count() {
        clock::arm()
    } else {
        clock::disarm();
        Ok(())
    };
    if armed.is_err() {
        store(Config::OFF);
        clock::disarm();
    }
    let generation = GENERATION.fetch_add(1, Ordering::SeqCst) + 1;
    SEQ.store(s + 2, Ordering::SeqCst);
    wait_quiescent();
    armed.map(|()| generation)
}

/// The current configuration and generation (for diagnostics and tests).
pub fn current() -> (Config, u64) {
    loop {
        let s1 = SEQ.load(Ordering::SeqCst);
        let cfg = load();
        let g = GENERATION.load(Ordering::SeqCst);
        if s1 & 1 == 0 && SEQ.load(Ordering::SeqCst) == s1 {
            return (cfg, g);
        }
        std::hint::spin_loop();
    }
}

/// Turn profiling off if `generation` is still the latest call.
pub(crate) fn stop_if_current(generation: u64) {
    let _w = WRITER.lock();
    if GENERATION.load(Ordering::SeqCst) != generation {
        return;
    }
    let s = begin_write();
    clock::disarm();
    store(Config::OFF);
    GENERATION.fetch_add(1, Ordering::SeqCst);
    SEQ.store(s + 2, Ordering::SeqCst);
    wait_quiescent();
}

/// Count `ticks` at `pc`. Called from the SIGPROF handler: atomics and raw
/// system calls only.
fn tick(pc: usize, ticks: u16) {
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let s = SEQ.load(Ordering::SeqCst);
    if s & 1 == 0 {
        let cfg = load();
        if SEQ.load(Ordering::SeqCst) == s {
            if let Tick::Cell(i) = index::svr4(pc, cfg.offset, cfg.scale, cfg.bufsiz) {
                let ok = match cfg.buf.checked_add(2 * i) {
                    // SAFETY: in checked mode the kernel validates the
                    // address; in direct mode the caller of `set` promised a
                    // writable buffer and `i < bufsiz / 2`.
                    Some(addr) => unsafe { cell::add(addr, ticks) },
                    None => false,
                };
                if !ok {
                    turn_off_after_fault(s);
                }
            }
        }
    }
    IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
}

/// SVR4: "if counter not writable ... pr_scale = 0". Only if nobody replaced
/// the configuration since the handler read it.
fn turn_off_after_fault(seen: usize) {
    if SEQ
        .compare_exchange(seen, seen + 1, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        clock::disarm();
        SCALE.store(0, Ordering::SeqCst);
        SEQ.store(seen + 2, Ordering::SeqCst);
    }
}

/// A running profil(2) whose buffer's lifetime the type system enforces.
///
/// Obtained from [`Profil::scope`] (borrowed buffer, profiling stops when
/// the closure returns) or [`Profil::start`] (owned buffer, profiling stops
/// on drop or [`Profil::into_buffer`]). If a later profil call replaces
/// this one, this buffer simply stops counting and dropping the handle does
/// not disturb the newer call.
pub struct Profil<'buf> {
    cells: NonNull<u16>,
    len: usize,
    generation: u64,
    owned: bool,
    _buf: PhantomData<&'buf mut [u16]>,
}

// SAFETY: the handle only reads its cells atomically and stops profiling
// under the writer lock; it can move to and be shared with other threads.
unsafe impl Send for Profil<'_> {}
// SAFETY: as above.
unsafe impl Sync for Profil<'_> {}

impl<'buf> Profil<'buf> {
    /// Profile into `buf` while `f` runs: cell `i` counts the ticks whose PC
    /// `pc` gives `((pc - offset) * (scale & 0xFFFE)) >> 17 == i`. Profiling
    /// is stopped before this returns, even if `f` panics.
    pub fn scope<R>(
        buf: &'buf mut [u16],
        offset: usize,
        scale: u32,
        f: impl FnOnce(&Profil<'buf>) -> R,
    ) -> Result<R, Error> {
        let len = buf.len();
        let cells = NonNull::from(buf).cast::<u16>();
        let cfg = Config {
            buf: cells.as_ptr() as usize,
            bufsiz: len * 2,
            offset,
            scale,
        };
        // SAFETY: `buf` is exclusively borrowed for 'buf, which outlives this
        // call; the handle below stops profiling when dropped, before the
        // borrow ends, and it cannot escape `f`.
        let generation = unsafe { set(cfg)? };
        let p = Profil {
            cells,
            len,
            generation,
            owned: false,
            _buf: PhantomData,
        };
        Ok(f(&p))
    }

    /// Number of cells.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no cells (profiling is then ineffective).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether ticks are still being counted into this buffer: it is the
    /// latest profil call, its scale is on, and no fault turned it off.
    pub fn is_counting(&self) -> bool {
        let (cfg, g) = current();
        g == self.generation && cfg.can_count()
    }

    /// A copy of the cells as they are now.
    pub fn snapshot(&self) -> Vec<u16> {
        (0..self.len)
            .map(|i| {
                // SAFETY: `i < len` cells of a live buffer; u16 and AtomicU16
                // have the same layout; concurrent writers write atomically
                // or from the kernel.
                unsafe {
                    (*(self.cells.as_ptr().add(i) as *const AtomicU16)).load(Ordering::Relaxed)
                }
            })
            .collect()
    }

    /// The generation number of this call (see [`current`]).
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

impl Profil<'static> {
    /// Start profiling into an owned buffer (see [`Profil::scope`] for the
    /// mapping). Drop the handle or call [`Profil::into_buffer`] to stop.
    pub fn start(buf: Box<[u16]>, offset: usize, scale: u32) -> Result<Profil<'static>, Error> {
        let len = buf.len();
        let cells = NonNull::new(Box::into_raw(buf) as *mut u16).expect("Box is never null");
        let cfg = Config {
            buf: cells.as_ptr() as usize,
            bufsiz: len * 2,
            offset,
            scale,
        };
        // SAFETY: the buffer is owned by the handle and freed only after
        // profiling into it stopped (Drop), or leaked if the handle is forgotten.
        match unsafe { set(cfg) } {
            Ok(generation) => Ok(Profil {
                cells,
                len,
                generation,
                owned: true,
                _buf: PhantomData,
            }),
            Err(e) => {
                // SAFETY: reconstituting the box we leaked above; profiling
                // into it never started (set failed and stored OFF).
                drop(unsafe {
                    Box::from_raw(std::ptr::slice_from_raw_parts_mut(cells.as_ptr(), len))
                });
                Err(e)
            }
        }
    }

    /// Stop profiling (if this is still the latest call) and return the buffer.
    pub fn into_buffer(self) -> Box<[u16]> {
        stop_if_current(self.generation);
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: the box leaked in `start`; no tick writes it any more.
        unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                me.cells.as_ptr(),
                me.len,
            ))
        }
    }
}

impl Drop for Profil<'_> {
    fn drop(&mut self) {
        stop_if_current(self.generation);
        if self.owned {
            // SAFETY: the box leaked in `start`; profiling into it stopped
            // (or was replaced, and `set` waited for in-flight ticks).
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.cells.as_ptr(),
                    self.len,
                ))
            });
        }
    }
}
