//! The device layer: profdev's classic devices behind one trait.
//!
//! Plan 9 made every device one small file filling one uniform table, its
//! files described as data. profdev does the same:
//!
//! * [`Dev`] is the trait; a device implements `gen` (its file tree, as data)
//!   and whichever of `read`, `write`, `ioctl` it needs. The others refuse.
//! * [`access`] states who may use a mount (checked by the file server on
//!   every request) and the kernel's ptrace-attach rule that a control
//!   message naming a process must pass.
//! * [`ctl`] parses control messages through a command table (exact verbs,
//!   never prefixes) and quotes bad messages back.
//! * [`engine`] opens sampling sessions for devices that are switched on and
//!   feeds them records from whatever [`SourceFactory`] it was given: the
//!   live perf_event engine, or a replay in tests.
//! * [`kit`] is what every sampling device shares, written once: the
//!   session, the sink, the open-mode rule, snapshots, error mapping.
//! * [`health`] is what a device says about itself while it runs, kept by
//!   the kit's session; [`stat`] serves it as `stat/NAME`, one file per
//!   device that has one.
//! * [`devtab`] is the device table: adding a device is one line there.
//! * [`outside`] attributes the ticks outside kernel text (per process,
//!   user function, kernel-module symbol) for `profdev sample`; `report`
//!   renders them.
//!
//! No FUSE type appears here: the file server (`profdev-fuse`) serves any
//! table of devices, and tests drive devices directly.
//!
//! [`SourceFactory`]: profdev_core::SourceFactory

// No unsafe code in the library; only unit tests call getuid(2).
#![cfg_attr(not(test), forbid(unsafe_code))]

pub mod access;
pub mod ctl;
pub mod engine;
pub mod health;
pub mod kgmon;
pub mod kit;
pub mod kprof;
pub mod outside;
mod pc_counts;
pub mod prf;
pub mod prof;
pub mod stat;

mod error;
pub mod top;
pub mod tree;

#[doc(hidden)]
pub mod fuzzing;

pub use access::{AccessRules, Cred};
pub use engine::{Engine, Subscription};
pub use error::DevError;
pub use tree::{Chan, DirEntry, OpenMode, Qid};

use profdev_core::KernelText;
use std::sync::Arc;

/// One classic device.
///
/// A device numbers its own files with [`Qid`]s; [`Qid::ROOT`] is its top
/// directory. The server places a device's top directory at the mount root
/// when [`Dev::dir_name`] is empty (kprof's `kpctl` and `kpdata` sit at the
/// root, as under `bind -a '#K' /dev`), or under a directory of that name
/// (`gmon/`, `prof/`).
///
/// Uninteresting operations keep their default, which refuses.
///
/// ```
/// use profdev_dev::{Chan, Dev, DevError, DirEntry, Qid};
///
/// struct Hello;
/// impl Dev for Hello {
///     fn name(&self) -> &'static str { "hello" }
///     fn gen(&self, dir: Qid) -> Result<Vec<DirEntry>, DevError> {
///         if dir != Qid::ROOT { return Err(DevError::NotDir); }
///         Ok(vec![DirEntry::file("hello", Qid::file(1), 0o444, 6)])
///     }
///     fn read(&self, _c: &mut Chan, offset: u64, count: u32) -> Result<Vec<u8>, DevError> {
///         Ok(profdev_dev::tree::read_slice(b"hello\n", offset, count))
///     }
/// }
/// let h = Hello;
/// let mut c = h.open(Qid::file(1), profdev_dev::OpenMode::Read).unwrap();
/// assert_eq!(h.read(&mut c, 0, 100).unwrap(), b"hello\n");
/// ```
pub trait Dev: Send + Sync {
    /// The device's name, for logs (`kprof`, `kgmon`, `prf`, `prof`).
    fn name(&self) -> &'static str;

    /// The name of the device's directory at the mount root, or `""` to put
    /// its files directly at the root.
    fn dir_name(&self) -> &'static str {
        ""
    }

    /// The entries of directory `dir`: the file tree as data.
    fn gen(&self, dir: Qid) -> Result<Vec<DirEntry>, DevError>;

    /// The entry named `name` in directory `dir`. The default lists `dir`;
    /// a device with large directories answers directly, so that a lookup
    /// is not a listing (`ls -l` of n entries would be O(n²)).
    fn walk(&self, dir: Qid, name: &str) -> Result<DirEntry, DevError> {
        tree::walk(self, dir, name)
    }

    /// The entry describing `qid` (its current length included). The
    /// default searches the tree from the root; a device whose tree grows
    /// answers directly, in time independent of its size.
    fn stat(&self, qid: Qid) -> Result<DirEntry, DevError> {
        tree::find(self, Qid::ROOT, qid)
    }

    /// Open `qid`. The default checks that directories are opened for
    /// reading only and returns a channel with no per-open state.
    fn open(&self, qid: Qid, mode: OpenMode) -> Result<Chan, DevError> {
        if qid.is_dir() && mode != OpenMode::Read {
            return Err(DevError::Perm);
        }
        Ok(Chan::new(qid, mode))
    }

    /// Read up to `count` bytes at `offset`.
    fn read(&self, chan: &mut Chan, offset: u64, count: u32) -> Result<Vec<u8>, DevError> {
        let _ = (chan, offset, count);
        Err(DevError::Perm)
    }

    /// Write `data` at `offset`; returns the bytes accepted.
    fn write(&self, chan: &mut Chan, offset: u64, data: &[u8]) -> Result<usize, DevError> {
        let _ = (chan, offset, data);
        Err(DevError::Perm)
    }

    /// An ioctl: `cmd` and the by-value `arg`, with `input` bytes copied in
    /// and room for `out_size` bytes out. Returns the ioctl's result value
    /// and the bytes to copy out.
    fn ioctl(
        &self,
        chan: &mut Chan,
        cmd: u32,
        arg: u64,
        input: &[u8],
        out_size: u32,
    ) -> Result<(i32, Vec<u8>), DevError> {
        let _ = (chan, cmd, arg, input, out_size);
        Err(DevError::NoIoctl)
    }

    /// Release a channel (last close of an open file).
    fn close(&self, chan: Chan) {
        let _ = chan;
    }

    /// The device's health counters, if it samples (see [`health`]): the
    /// device table gives each a `stat/` file.
    fn health(&self) -> Option<Arc<health::Health>> {
        None
    }
}

/// What the device table needs to build its devices.
#[derive(Clone)]
pub struct DevContext {
    /// Opens sampling sessions.
    pub engine: Engine,
    /// The running kernel's text, `[_stext, _etext)`.
    pub kernel_text: KernelText,
    /// Online CPUs.
    pub cpus: Vec<u32>,
    /// Entry addresses of the core kernel's functions, ascending (for
    /// kgmon's `selfpc`), e.g. from
    /// `KernelSymbols::text_symbols()` in `profdev-symbolize`.
    pub kernel_functions: Arc<[u64]>,
    /// What prof's `startcp PID` and `startmp… PID` attach with
    /// (`profdev-attach`'s engines; none: those messages are ENXIO).
    pub prof_engines: prof::Engines,
}

/// The device table: every device profdev serves, in mount order.
///
/// Adding a device is one line here; the last entry, `stat/`, serves the
/// health of every device before it.
pub fn devtab(ctx: &DevContext) -> Vec<Arc<dyn Dev>> {
    let mut devs: Vec<Arc<dyn Dev>> = vec![
        Arc::new(kprof::Kprof::new(
            kprof::KprofConfig::new(ctx.kernel_text),
            ctx.engine.clone(),
        )),
        Arc::new(prf::Prf::new(
            prf::PrfConfig::new(ctx.cpus.clone()),
            ctx.engine.clone(),
        )),
        Arc::new(kgmon::Kgmon::new(
            kgmon::KgmonConfig::new(ctx.kernel_text, &ctx.kernel_functions),
            ctx.engine.clone(),
        )),
        Arc::new(prof::Prof::with_engines(
            ctx.engine.clone(),
            ctx.prof_engines.clone(),
        )),
    ];
    devs.push(Arc::new(stat::Stat::of(&devs)));
    devs
}
