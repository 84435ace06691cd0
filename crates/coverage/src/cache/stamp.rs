//! A module file's key remembered by the file's identity, so that a warm
//! run neither reads nor hashes the module (cc1's 21 MB of code: 50 ms
//! of its process's start-up, every time it is exec'd).
//!
//! **What is trusted.** A [`Stamp`] is what the kernel keeps of a file
//! that changes whenever its bytes do: device, inode, size, modification
//! and status-change times to the nanosecond. The status-change time
//! (ctime) cannot be set by anyone (`utimensat` sets it to now): a file
//! written after its key was taken has another ctime, unless the write
//! falls within the same tick of the file system's clock as the change
//! before it. So a key is remembered only for a file whose ctime was at
//! least [`SETTLED`] in the past when its bytes were read and whose stamp
//! was the same before and after the read (git's "racy" rule): any later
//! change to it is ticks away and changes the stamp. A file system whose
//! inode numbers or times are not stable only misses.
//!
//! **Where.** A file `id-<SHA-256 of the engine, the mode and the
//! stamp>` in the cache directory, holding [`MAGIC`], the stamp and the
//! key, written and read back like the entries ([`profdev_safefile`]:
//! only when nobody but profdev's user could have written it). A stamp
//! that names an entry the cache no longer holds is a miss: the module is
//! read and hashed, as before. At most [`MAX_STAMPS`] are kept, the least
//! recently used removed first.

use std::os::unix::fs::MetadataExt;

use sha2::{Digest, Sha256};

use super::{Cache, Key, ENGINE};
use crate::plan::Mode;

/// A stamp file's first line.
const MAGIC: &[u8] = b"profdev-coverage-stamp 1\n";

/// Stamp files' names start so.
pub(super) const PREFIX: &str = "id-";

/// How long before a module's bytes are read its ctime must be for its
/// key to be remembered, in nanoseconds (coarser than any file system's
/// clock: FAT's is two seconds).
pub const SETTLED: i128 = 3_000_000_000;

/// The most stamp files a cache keeps.
pub const MAX_STAMPS: usize = 4096;

/// A file's identity: device, inode, size, mtime and ctime in
/// nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: i128,
    pub ctime: i128,
}

impl Stamp {
    /// The stamp of an open file's metadata.
    pub fn of(m: &std::fs::Metadata) -> Stamp {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: ns(m.mtime(), m.mtime_nsec()),
            ctime: ns(m.ctime(), m.ctime_nsec()),
        }
    }

    /// Whether a key taken from the file's bytes read at `now` (in
    /// nanoseconds since the epoch), the stamp the same before and after
    /// the read, may be remembered ([`SETTLED`]).
    pub fn settled_at(&self, now: i128) -> bool {
        self.ctime <= now - SETTLED
    }

    fn bytes(&self) -> [u8; 56] {
        let mut b = [0u8; 56];
        b[..8].copy_from_slice(&self.dev.to_le_bytes());
        b[8..16].copy_from_slice(&self.ino.to_le_bytes());
        b[16..24].copy_from_slice(&self.size.to_le_bytes());
        b[24..40].copy_from_slice(&self.mtime.to_le_bytes());
        b[40..].copy_from_slice(&self.ctime.to_le_bytes());
        b
    }

    fn name(&self, mode: Mode) -> String {
        let mut h = Sha256::new();
        h.update(ENGINE.as_bytes());
        h.update([0]);
        h.update(super::mode_tag(mode));
        h.update(self.bytes());
        let mut s = String::from(PREFIX);
        for b in h.finalize() {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}

/// Now, in nanoseconds since the epoch.
pub fn now() -> i128 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    d.as_nanos() as i128
}

impl Cache {
    /// The key remembered for the file of `stamp` in `mode`, if any.
    /// Ok(None) when none is; an error (one sentence) when a stamp file
    /// is there and cannot be trusted or read.
    pub fn known(&self, stamp: &Stamp, mode: Mode) -> Result<Option<Key>, String> {
        let name = stamp.name(mode);
        let max = (MAGIC.len() + 56 + 32) as u64;
        let Some(b) = self.dir.read_own(&name, max).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let body = b
            .strip_prefix(MAGIC)
            .filter(|r| r.len() == 56 + 32 && r[..56] == stamp.bytes())
            .ok_or_else(|| {
                format!(
                    "{}: not a stamp of this file",
                    self.dir.path().join(&name).display()
                )
            })?;
        let _ = self.dir.touch(&name);
        Ok(Some(Key(body[56..].try_into().expect("32 bytes"))))
    }

    /// Remember `key` for the file of `stamp` in `mode` (the caller has
    /// checked [`Stamp::settled_at`]), then keep at most [`MAX_STAMPS`].
    pub fn remember(&self, stamp: &Stamp, mode: Mode, key: &Key) -> Result<(), String> {
        let mut b = Vec::with_capacity(MAGIC.len() + 56 + 32);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&stamp.bytes());
        b.extend_from_slice(&key.0);
        self.dir
            .write_file(stamp.name(mode), &b, 0o600)
            .map_err(|e| e.to_string())?;
        self.prune_stamps(MAX_STAMPS);
        Ok(())
    }

    /// Remove the stamp files used longest ago until at most `max` are
    /// left.
    pub(super) fn prune_stamps(&self, max: usize) {
        let Ok(mut files) = self.dir.files(PREFIX) else {
            return;
        };
        if files.len() > max {
            files.sort_by_key(|f| f.2);
            let extra = files.len() - max;
            for (name, _, _) in files.into_iter().take(extra) {
                let _ = self.dir.remove(&name);
            }
        }
    }
}
