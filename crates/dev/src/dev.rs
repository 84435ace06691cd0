//! The [`Dev`] trait: one classic device, its file tree as data, the
//! operations it does not need refused by default.

use crate::error::DevError;
use crate::health;
use crate::tree::{self, Chan, DirEntry, OpenMode, Qid};
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
