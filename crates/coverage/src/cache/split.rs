//! A cache file read in two steps: its header and encoding at once (what
//! a module's load is served from), its plan later ([`Split::plan`], on
//! a thread of the launch server's own while the program runs).
//!
//! From the cache directory ([`Cache::load_split`]) only the header and
//! the encoding are read at first; the plan (cc1's: 1,350,000 blocks, 35
//! of the file's 39 MB) stays in the file, held open, and is read when
//! asked. Reading and copying it had been a third of cc1's warm load.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::{check, check_encoding, read_encoding, read_plan, Cache, Key, MAGIC, MAX_FILE, R};
use crate::encode::Encoded;
use crate::plan::Plan;

/// Where a split file's plan is.
enum PlanBytes {
    /// Copied out of the file's bytes.
    Here(Vec<u8>),
    /// Still in the file: `len` bytes at `at`.
    File { file: File, at: u64, len: usize },
}

/// A cache file's header and encoding, its plan not read yet.
pub struct Split {
    /// The plan's blocks and counters ([`Plan::counters`]).
    pub blocks: u64,
    pub counters: u64,
    /// Its area's size for plain counting code
    /// ([`crate::encode::area_size_with`], default options).
    pub size: u64,
    /// The encoding kept, for an area at that offset from the bias.
    pub encoded: Option<(u64, Encoded)>,
    plan: PlanBytes,
}

/// A file's header: blocks, counters, area size, and where its plan's
/// bytes are (offset and length).
struct Head {
    blocks: u64,
    counters: u64,
    size: u64,
    at: usize,
    len: usize,
}

/// The most bytes a file's header takes: the magic line, the key, and
/// four numbers of at most ten bytes.
const HEAD_MAX: usize = MAGIC.len() + 32 + 40;

/// Read the header from the start of a file (`b`, at least the header);
/// `total` is the file's length.
fn head(b: &[u8], key: &Key, total: usize) -> Result<Head, String> {
    let mut r = R(b);
    if r.take(MAGIC.len())? != MAGIC {
        return Err("not a profdev coverage cache file of this version".into());
    }
    if r.take(32)? != key.0 {
        return Err("it holds another module's entry".into());
    }
    let (blocks, counters, size) = (r.v()?, r.v()?, r.v()?);
    let len = r.v()?;
    let at = b.len() - r.0.len();
    if len > (total - at) as u64 {
        return Err("a length runs past its end".into());
    }
    Ok(Head {
        blocks,
        counters,
        size,
        at,
        len: len as usize,
    })
}

/// The encoding part (`b`: all of the file after the plan; within
/// `owner`'s bytes when given, which its patches' records then share).
fn encoding(
    b: &[u8],
    owner: Option<&bytes::Bytes>,
    blocks: u64,
) -> Result<Option<(u64, Encoded)>, String> {
    let mut r = R(b);
    let encoded = read_encoding(&mut r, owner)?;
    if !r.0.is_empty() {
        return Err("it has bytes past its end".into());
    }
    if let Some((_, e)) = &encoded {
        check_encoding(e, blocks)?;
    }
    Ok(encoded)
}

/// Read the header and encoding of a cache file's bytes that must hold
/// `key`'s entry, keeping its plan's bytes for [`Split::plan`].
pub fn split(bytes: Vec<u8>, key: &Key) -> Result<Split, String> {
    let h = head(&bytes, key, bytes.len())?;
    let encoded = encoding(&bytes[h.at + h.len..], None, h.blocks)?;
    // Only the plan's bytes are kept: the rest of the file (the
    // encoding's code, cc1's 21 MB in counting mode, now copied out)
    // would otherwise stay until the plan has been read.
    Ok(Split {
        blocks: h.blocks,
        counters: h.counters,
        size: h.size,
        encoded,
        plan: PlanBytes::Here(bytes[h.at..h.at + h.len].to_vec()),
    })
}

impl Split {
    /// The size of its plan in the file, in bytes.
    pub fn plan_bytes(&self) -> usize {
        match &self.plan {
            PlanBytes::Here(b) => b.len(),
            PlanBytes::File { len, .. } => *len,
        }
    }

    /// The plan, read and checked (against the header too).
    pub fn plan(&self) -> Result<Plan, String> {
        let (read, mapped);
        // A mapped file's bytes are the plan's sections' too (kept
        // mapped while the plan lives): not copied.
        let (bytes, owner): (&[u8], _) = match &self.plan {
            PlanBytes::Here(b) => (b, None),
            PlanBytes::File { file, at, len } => match map(file) {
                // (The file's length was known at its opening: a file
                // only root writes cannot have changed since.)
                Some(m) if m.len() as u64 >= at + *len as u64 => {
                    mapped = bytes::Bytes::from_owner(m);
                    (&mapped[*at as usize..*at as usize + *len], Some(&mapped))
                }
                _ => {
                    let mut b = vec![0; *len];
                    file.read_exact_at(&mut b, *at)
                        .map_err(|e| format!("its plan cannot be read: {e}"))?;
                    read = b;
                    (&read[..], None)
                }
            },
        };
        let mut r = R(bytes);
        let plan = read_plan(&mut r, owner)?;
        if !r.0.is_empty() {
            return Err("its plan has bytes past its end".into());
        }
        check(&plan, None)?;
        if plan.blocks.len() as u64 != self.blocks
            || plan.counters() != self.counters
            || crate::encode::area_size_with(&plan, crate::encode::Options::default()) != self.size
        {
            return Err("its header does not match its plan".into());
        }
        Ok(plan)
    }
}

/// The whole of a cache file, mapped read-only, when only root can write
/// it (profdev_symbolize's rule: whoever can write a mapped file can
/// truncate it, and a read of the truncated part kills the reader with
/// SIGBUS). cc1's plan is 35 MB: read, it was as many fresh pages to
/// fault in and fill in every run; mapped, it is the page cache's.
pub(super) fn map(file: &File) -> Option<memmap2::Mmap> {
    let meta = file.metadata().ok()?;
    if !profdev_symbolize::elf::only_root_writes(&meta) {
        return None;
    }
    // SAFETY: the map is read-only and private, and only root can write
    // (or truncate) the file, so it cannot shrink under the map.
    unsafe { memmap2::Mmap::map(file) }.ok()
}

impl Cache {
    /// The entry kept for `key`, its plan not read yet ([`Split`]): the
    /// file's header and encoding are read, its plan left in the file,
    /// which the split holds open. A cache file is written whole under
    /// a new name and renamed into place, never rewritten: the file held
    /// keeps what was read from it.
    pub fn load_split(&self, key: &Key) -> Result<Option<Split>, String> {
        let name = key.name();
        let at = |why: String| format!("{}: {why}", self.file(key).display());
        let Some((file, total)) = self
            .dir
            .open_own(&name, MAX_FILE)
            .map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        let total = total as usize;
        let read = |from: usize, len: usize| -> Result<Vec<u8>, String> {
            let mut b = vec![0; len];
            file.read_exact_at(&mut b, from as u64)
                .map_err(|e| at(format!("it cannot be read: {e}")))?;
            Ok(b)
        };
        let h = head(&read(0, HEAD_MAX.min(total))?, key, total).map_err(at)?;
        let rest = h.at + h.len;
        // Mapped (when only root can write the file), the patches' records
        // are the file's, sent to each load as they are (cc1's 1,350,000
        // one-shot probes: 16 MB); else read, and copied out.
        let encoded = match map(&file).filter(|m| m.len() == total) {
            Some(m) => {
                let m = bytes::Bytes::from_owner(m);
                encoding(&m[rest..], Some(&m), h.blocks)
            }
            None => encoding(&read(rest, total - rest)?, None, h.blocks),
        }
        .map_err(at)?;
        // Used: the last to be pruned.
        let _ = self.dir.touch(&name);
        Ok(Some(Split {
            blocks: h.blocks,
            counters: h.counters,
            size: h.size,
            encoded,
            plan: PlanBytes::File {
                file,
                at: h.at as u64,
                len: h.len,
            },
        }))
    }
}
