//! Plans and encodings kept on disk between runs.
//!
//! Planning a module and encoding its trampolines is most of what a short
//! covered run costs (python3's 220,000 blocks: about 0.9 s, cc1's
//! 700,000 more, per process that maps it). Both depend only on the
//! module's bytes and on the engine, so profdev keeps them: one file per
//! module content and plan mode, named by the SHA-256 of the engine's
//! identity, the mode and the module's bytes ([`Key`]). A file changed in
//! any byte, or a profdev built from other engine sources, gets another
//! name; nothing stale is ever reused; a hit-mode plan
//! ([`crate::plan::Mode::Hits`]) is never found where a counting plan is
//! looked for, nor the other way round (the mode is stored too, and an
//! implied block in a counting plan refused). The encoding kept is the one the module's first load in the run
//! that wrote the file got: a later load is offered the same distance
//! between module and area ([`crate::encode`]'s reuse) and, when its
//! runtime can map the area there, gets the kept code with its counters
//! and patches moved, unencoded. Only plain counting code is kept: a run
//! that records call targets ([`crate::encode::Options`], `profdev gmon
//! --exact`) takes the plan and encodes afresh.
//!
//! A warm run finds the key by the module file's stamp instead
//! ([`Stamp`]: device, inode, size, times), without reading the module.
//!
//! **Where.** `$PROFDEV_CACHE_DIR/coverage` when that is set (`off`
//! disables the cache); otherwise `/var/cache/profdev/coverage` for root
//! and `$XDG_CACHE_HOME/profdev/coverage` (or `~/.cache/...`) for other
//! users. The directory is created 0700; files are written through
//! `profdev_safefile` (0600), and read back only when nobody but the user
//! running profdev could have written them or their directory
//! ([`profdev_safefile::Dir::read_own`]): a plan decides what profdev
//! writes into a process's code. The cache is kept under
//! [`MAX_TOTAL`] bytes by removing the files used least recently.
//!
//! **Per user.** A module planned for a process of a user other than
//! root and profdev's own (`startcp` of another user's process, through
//! the device, run by root) is kept apart, in the subdirectory named by
//! that user's uid (`/var/cache/profdev/coverage/65534/`, created 0700,
//! owned by profdev's user like the rest: [`Cache::for_user`]), under its
//! own bound, [`USER_TOTAL`] bytes. What one user's processes map can
//! thus neither fill nor evict the entries of root, of profdev's user or
//! of another user; the cache as a whole holds at most [`MAX_TOTAL`]
//! plus [`USER_TOTAL`] per such user.
//!
//! **Format**: the line `profdev-coverage-cache 5\n` ([`MAGIC`]), the
//! 32-byte key, a header (the plan's blocks, counters and area size for
//! plain counting code), the plan prefixed by its length in bytes (so a
//! load is served from the header and the encoding while the plan is read
//! on another thread: [`Split`]), then the encoding (see [`write`]): every
//! number an unsigned LEB128, every address or offset as its difference
//! from the one before it (the previous block's start, the block's
//! start, the previous patch or branch; wrapping, zigzag), so that a
//! block takes a few bytes; sequences are prefixed by their length. Two
//! parts are kept as the program holds them in memory, to be read back as
//! they are (version 5): the blocks' instruction addresses, one buffer of
//! a byte per instruction ([`crate::insns`]) and each block's length in
//! it; and the encoding's patches, the 12-byte records a load is sent
//! ([`crate::encode::wire`]). cc1's hit-mode entry (1,350,000 blocks) is
//! 57 MB: 21 MB of its code's own bytes, 13 MB of records (version 4, all
//! differences: 39 MB; version 2, fixed 8-byte fields: 159 MB). The
//! reader checks every length against the bytes left
//! before it allocates (each element takes at least one to four bytes of
//! the file: what is reserved is bounded by a small multiple of the
//! file's size, and filled only as far as the file holds), every number
//! against its width, and every index the plan holds, so a damaged file,
//! or one of another version, is refused (and replaced), never trusted.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::encode::wire::{Records, WIRE};
use crate::encode::Encoded;
use crate::insns::Buf;
use crate::plan::{Derived, Edge, How, Mode, Plan, PlannedBlock};

mod split;
mod stamp;
pub use split::{split, Split};
pub use stamp::{now, Stamp};

/// The engine's identity: the crate version and a digest of its sources
/// (build.rs).
pub const ENGINE: &str = env!("PROFDEV_COV_ENGINE");

/// A cache file's first line. Version 3: numbers as LEB128, addresses
/// as differences; a file of another version is refused (and
/// replaced), never misread.
pub const MAGIC: &[u8] = b"profdev-coverage-cache 5\n";

/// A cache file larger than this is refused.
const MAX_FILE: u64 = 1 << 30;

/// The cache's size bound, in bytes.
pub const MAX_TOTAL: u64 = 2 << 30;

/// The size bound of the cache of another user's modules
/// ([`Cache::for_user`]), in bytes.
pub const USER_TOTAL: u64 = 256 << 20;

/// Cache files' names start so.
const PREFIX: &str = "mod-";

/// A module's key: SHA-256 of [`ENGINE`], the plan's [`Mode`] and the
/// module's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key(pub [u8; 32]);

impl Key {
    /// The key of the plan for `mode` of a module whose file holds
    /// `bytes`: a hit-mode plan is never found under a counting plan's
    /// key, nor the other way round, and a key made before modes existed
    /// (the engine's identity, a zero byte, the bytes) is neither.
    pub fn of(bytes: &[u8], mode: Mode) -> Key {
        let mut h = Sha256::new();
        h.update(ENGINE.as_bytes());
        h.update([0]);
        h.update(mode_tag(mode));
        h.update(bytes);
        Key(h.finalize().into())
    }

    fn name(&self) -> String {
        let mut s = String::from(PREFIX);
        for b in self.0 {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}

/// A mode as a key's digest takes it.
fn mode_tag(mode: Mode) -> &'static [u8] {
    match mode {
        Mode::Counts => b"mode counts\0",
        Mode::Hits => b"mode hits\0",
        Mode::Edges => b"mode edges\0",
    }
}

/// What a cache file holds: the plan, and an encoding with the distance
/// from the module's bias to the area it was made for.
pub struct Entry {
    pub plan: Plan,
    pub encoded: Option<(u64, Encoded)>,
}

/// The cache directory.
pub struct Cache {
    dir: profdev_safefile::Dir,
    /// Its size bound.
    max: u64,
}

impl Cache {
    /// The default cache (see the module doc), or None when it is
    /// disabled or cannot be made (then a run plans as if it were empty).
    pub fn default_dir() -> Option<PathBuf> {
        let env = std::env::var_os("PROFDEV_CACHE_DIR");
        let base = match env {
            Some(v) if v.is_empty() || v == "off" => return None,
            Some(v) => PathBuf::from(v),
            // SAFETY: geteuid has no preconditions.
            None if unsafe { libc::geteuid() } == 0 => PathBuf::from("/var/cache/profdev"),
            None => match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
                Some(x) => PathBuf::from(x).join("profdev"),
                None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/profdev"),
            },
        };
        Some(base.join("coverage"))
    }

    /// Open (creating it 0700) the cache directory `path`.
    pub fn open(path: &Path) -> Result<Cache, profdev_safefile::Error> {
        Ok(Cache {
            dir: profdev_safefile::Dir::create(path, 0o700)?,
            max: MAX_TOTAL,
        })
    }

    /// The cache of the modules planned for processes of user `uid`
    /// (not root, not profdev's own): the subdirectory named by the uid,
    /// created 0700, bounded by [`USER_TOTAL`] on its own.
    pub fn for_user(&self, uid: u32) -> Result<Cache, profdev_safefile::Error> {
        Ok(Cache {
            dir: profdev_safefile::Dir::create(&self.dir.path().join(uid.to_string()), 0o700)?,
            max: USER_TOTAL,
        })
    }

    /// Its size bound, in bytes.
    pub fn bound(&self) -> u64 {
        self.max
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The entry kept for `key`: Ok(None) when there is none; an error
    /// (one sentence) when a file is there and cannot be trusted or read.
    pub fn load(&self, key: &Key) -> Result<Option<Entry>, String> {
        let Some(s) = self.load_split(key)? else {
            return Ok(None);
        };
        let plan = s
            .plan()
            .map_err(|why| format!("{}: {why}", self.file(key).display()))?;
        Ok(Some(Entry {
            plan,
            encoded: s.encoded,
        }))
    }

    /// The file of `key`'s entry.
    pub fn file(&self, key: &Key) -> PathBuf {
        self.dir.path().join(key.name())
    }

    /// Keep `plan` and `encoded` (made for an area at `offset` from the
    /// bias) under `key`, then keep the cache under its bound
    /// ([`MAX_TOTAL`], or [`USER_TOTAL`] for another user's).
    pub fn store(
        &self,
        key: &Key,
        plan: &Plan,
        encoded: Option<(u64, &Encoded)>,
    ) -> Result<(), String> {
        let bytes = write(key, plan, encoded);
        self.dir
            .write_file(key.name(), &bytes, 0o600)
            .map_err(|e| e.to_string())?;
        self.prune(self.max);
        Ok(())
    }

    /// Remove the files modified longest ago until the cache holds at
    /// most `max` bytes (a file is touched when it is read: the least
    /// recently used go first).
    fn prune(&self, max: u64) {
        let Ok(mut files) = self.dir.files(PREFIX) else {
            return;
        };
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort_by_key(|f| f.2);
        for (name, len, _) in files {
            if total <= max {
                break;
            }
            if self.dir.remove(&name).is_ok() {
                total -= len;
            }
        }
    }
}

/// The cache file of `plan` and `encoded` under `key`.
pub fn write(key: &Key, plan: &Plan, encoded: Option<(u64, &Encoded)>) -> Vec<u8> {
    let mut p = W(Vec::with_capacity(1 << 20));
    write_plan(&mut p, plan);
    let mut w = W(Vec::with_capacity(p.0.len() + (1 << 20)));
    w.0.extend_from_slice(MAGIC);
    w.0.extend_from_slice(&key.0);
    // The header: what a load needs before the plan is read.
    w.v(plan.blocks.len() as u64);
    w.v(plan.counters());
    w.v(crate::encode::area_size_with(
        plan,
        crate::encode::Options::default(),
    ));
    w.bytes(&p.0);
    write_encoding(&mut w, encoded);
    w.0
}

/// The plan's part of a cache file: its blocks' count, their
/// instructions as one buffer ([`crate::insns`]'s, as it is: a byte each,
/// read back without decoding, and shared with a mapped file) and where
/// each block's list ends in it, then the blocks.
fn write_plan(w: &mut W, plan: &Plan) {
    w.v(plan.blocks.len() as u64);
    let mut all = crate::insns::Builder::with_capacity(plan.blocks.len(), 0);
    let mut one = Vec::new();
    let mut fits = true;
    for b in &plan.blocks {
        one.clear();
        one.extend(b.insns.iter());
        fits = fits && all.push(&one).is_some();
    }
    match all.parts() {
        // (Past 4 GiB of addresses: marked, and refused when read.)
        _ if !fits => w.u8(2),
        (Buf::Near(b), ends) => {
            w.u8(0);
            w.bytes(&b);
            write_ends(w, &ends);
        }
        (Buf::Wide(v), ends) => {
            w.u8(1);
            w.v(8 * v.len() as u64);
            for a in v {
                w.0.extend_from_slice(&a.to_le_bytes());
            }
            write_ends(w, &ends);
        }
    }
    let mut prev = 0;
    for b in &plan.blocks {
        w.d(b.start, prev);
        prev = b.start;
        w.d(b.end, b.start);
        let kind = match b.how {
            How::None => 0,
            How::Jmp { .. } => 1,
            How::Int3 { .. } => 2,
            How::Hop { .. } => 3,
            How::Call { .. } => 4,
            How::Covered => 5,
            How::Fell { .. } => 6,
            How::Implied { .. } => 7,
            How::Branches { .. } => 8,
            How::Once => 9,
        };
        w.u8(kind
            | if b.flags_live { LIVE } else { 0 }
            | if b.branch.is_some() { BRANCH } else { 0 });
        match b.how {
            How::None | How::Covered | How::Once => {}
            How::Jmp {
                from,
                to,
                overwrite,
            } => {
                w.d(from, b.start);
                w.d(to, from);
                w.v(overwrite.into());
            }
            How::Int3 { to } => w.d(to, b.start),
            How::Hop { to, slot } => {
                w.d(to, b.start);
                w.v(slot);
            }
            How::Call { len } => w.v(len.into()),
            How::Fell { branch } => w.v(branch.into()),
            How::Implied { by } => w.v(by.into()),
            How::Branches { taken, fell } => {
                w.v(taken.into());
                w.v(fell.into());
            }
        }
        if let Some(j) = b.branch {
            w.v(j.into());
        }
    }
    w.v(plan.branches.len() as u64);
    let mut prev = 0;
    for (&(a, live), from) in plan.branches.iter().zip(&plan.fell_from) {
        w.d(a, prev);
        prev = a;
        // The block the fall-throughs are read from, plus one (0: none),
        // shifted past the flags' liveness.
        w.v((from.map_or(0, |k| u64::from(k) + 1) << 1) | u64::from(live));
    }
    match &plan.build_id {
        Some(id) => {
            w.u8(1);
            w.bytes(id);
        }
        None => w.u8(0),
    }
    w.v(plan.sections.len() as u64);
    for (a, data) in &plan.sections {
        w.v(*a);
        w.bytes(data);
    }
    w.v(plan.tables.len() as u64);
    let mut prev = 0;
    for &a in &plan.tables {
        w.d(a, prev);
        prev = a;
    }
    w.u8(match plan.mode {
        Mode::Counts => 0,
        Mode::Hits => 1,
        Mode::Edges => 2,
    });
    w.v(plan.copied.len() as u64);
    for &(lo, hi) in &plan.copied {
        w.v(lo);
        w.d(hi, lo);
    }
    w.v(plan.derived.len() as u64);
    let mut prev = 0;
    for d in &plan.derived {
        w.d(d.block.into(), prev);
        prev = d.block.into();
        w.v(d.from.len() as u64);
        for &(p, e) in &d.from {
            // The block it comes from, shifted past the edge's kind.
            let kind = match e {
                Edge::Whole => 0,
                Edge::Taken => 1,
                Edge::Fell => 2,
            };
            w.v((u64::from(p) << 2) | kind);
        }
    }
    // Edges mode: per branch, the blocks its edges are read from, plus
    // one (0: its own flag).
    w.v(plan.edges.len() as u64);
    for &(t, f) in &plan.edges {
        w.v(t.map_or(0, |k| u64::from(k) + 1));
        w.v(f.map_or(0, |k| u64::from(k) + 1));
    }
}

/// Where each block's list ends: its length.
fn write_ends(w: &mut W, ends: &[u32]) {
    let mut prev = 0;
    for &e in ends {
        w.v(u64::from(e - prev));
        prev = e;
    }
}

/// The encoding's part of a cache file (`encoded`: its patches at bias
/// 0, its area at the offset). Its patches are kept as the records a load
/// is sent ([`crate::encode::wire`]): an encoding whose patches do not fit
/// them (a module past 4 GiB) could serve no load, and is not kept.
fn write_encoding(w: &mut W, encoded: Option<(u64, &Encoded)>) {
    let wire = encoded.and_then(|(offset, e)| Some((offset, e, e.wire(0, offset)?)));
    match wire {
        None => w.u8(0),
        Some((offset, e, wire)) => {
            w.u8(1);
            w.v(offset);
            w.bytes(&e.code);
            w.v((wire.len() / WIRE) as u64);
            w.0.extend_from_slice(&wire);
            w.v(e.failed);
            w.v(e.trapped);
            w.v(e.failed_blocks.len() as u64);
            for &i in &e.failed_blocks {
                w.v(i as u64);
            }
            w.v(e.counter_fixups.len() as u64);
            let mut prev = 0;
            for &o in &e.counter_fixups {
                w.d(o.into(), prev);
                prev = o.into();
            }
            w.v(e.first_counter);
            w.u8(e.movable.into());
            w.v(e.far_fixups.len() as u64);
            let mut prev = 0;
            for &o in &e.far_fixups {
                w.d(o.into(), prev);
                prev = o.into();
            }
        }
    }
}

/// A block's kind byte: the [`How`] in the low bits, and these.
const LIVE: u8 = 0x10;
const BRANCH: u8 = 0x20;

/// Read a cache file that must hold `key`'s entry.
pub fn read(bytes: &[u8], key: &Key) -> Result<Entry, String> {
    let s = split(bytes.to_vec(), key)?;
    let plan = s.plan()?;
    Ok(Entry {
        plan,
        encoded: s.encoded,
    })
}

/// `b`, a part of `owner`'s bytes when given (shared, not copied), else
/// copied.
fn shared(owner: Option<&bytes::Bytes>, b: &[u8]) -> bytes::Bytes {
    match owner {
        Some(o) => o.slice_ref(b),
        None => bytes::Bytes::copy_from_slice(b),
    }
}

/// The plan's part of a cache file; its sections' bytes share `owner`'s
/// when `r` reads from it (a mapped file), else they are copied.
fn read_plan(r: &mut R, owner: Option<&bytes::Bytes>) -> Result<Plan, String> {
    // A block: at least four bytes (its list's length, start, end, kind).
    let n = r.len(4)?;
    // Every block's instructions: one buffer, as written.
    let parts = match (r.u8()?, r.bytes()?) {
        (0, b) => Buf::Near(shared(owner, b)),
        (1, b) if b.len() % 8 == 0 => Buf::Wide(
            b.chunks_exact(8)
                .map(|a| u64::from_le_bytes(a.try_into().expect("8 bytes")))
                .collect(),
        ),
        (2, _) => return Err("a plan of too many instructions".into()),
        _ => return Err("its instructions are neither bytes nor addresses".into()),
    };
    let mut ends = Vec::with_capacity(n);
    let mut end = 0u32;
    for _ in 0..n {
        end = u32::try_from(r.v()?)
            .ok()
            .and_then(|k| end.checked_add(k))
            .ok_or("a block's instructions lie past their buffer")?;
        ends.push(end);
    }
    let mut views = crate::insns::views_of(parts, ends)
        .ok_or("a block's instructions lie past their buffer")?;
    let mut blocks = Vec::with_capacity(n);
    huge_pages(&mut blocks);
    let mut prev = 0;
    for _ in 0..n {
        let start = r.d(prev)?;
        prev = start;
        let end = r.d(start)?;
        let insns = views.next().expect("a view per block");
        let kind = r.u8()?;
        if kind & !(0xf | LIVE | BRANCH) != 0 {
            return Err(format!("unknown block kind {kind:#x}"));
        }
        let how = match kind & 0xf {
            0 => How::None,
            1 => {
                let from = r.d(start)?;
                How::Jmp {
                    from,
                    to: r.d(from)?,
                    overwrite: r.v32()?,
                }
            }
            2 => How::Int3 { to: r.d(start)? },
            3 => How::Hop {
                to: r.d(start)?,
                slot: r.v()?,
            },
            4 => How::Call { len: r.v32()? },
            5 => How::Covered,
            6 => How::Fell { branch: r.v32()? },
            7 => How::Implied { by: r.v32()? },
            8 => How::Branches {
                taken: r.v32()?,
                fell: r.v32()?,
            },
            9 => How::Once,
            t => return Err(format!("unknown block kind {t}")),
        };
        let branch = match kind & BRANCH {
            0 => None,
            _ => Some(r.v32()?),
        };
        blocks.push(PlannedBlock {
            start,
            end,
            insns,
            how,
            flags_live: kind & LIVE != 0,
            branch,
        });
    }
    let n = r.len(2)?;
    let mut branches = Vec::with_capacity(n);
    let mut fell_from = Vec::with_capacity(n);
    let mut prev = 0;
    for _ in 0..n {
        let a = r.d(prev)?;
        prev = a;
        let v = r.v()?;
        branches.push((a, v & 1 != 0));
        fell_from.push(match v >> 1 {
            0 => None,
            k => Some(u32::try_from(k - 1).map_err(|_| "a block index out of range")?),
        });
    }
    let build_id = match r.u8()? {
        0 => None,
        _ => Some(r.bytes()?.to_vec()),
    };
    let n = r.len(2)?;
    let mut sections = Vec::with_capacity(n);
    for _ in 0..n {
        sections.push((r.v()?, shared(owner, r.bytes()?)));
    }
    let n = r.len(1)?;
    let mut tables = Vec::with_capacity(n);
    let mut prev = 0;
    for _ in 0..n {
        prev = r.d(prev)?;
        tables.push(prev);
    }
    let mode = match r.u8()? {
        0 => Mode::Counts,
        1 => Mode::Hits,
        2 => Mode::Edges,
        m => return Err(format!("unknown plan mode {m}")),
    };
    let n = r.len(2)?;
    let mut copied = Vec::with_capacity(n);
    for _ in 0..n {
        let lo = r.v()?;
        copied.push((lo, r.d(lo)?));
    }
    let derived = read_derived(r)?;
    let edges = read_edges(r)?;
    Ok(Plan {
        blocks,
        branches,
        fell_from,
        build_id,
        tables,
        mode,
        sections,
        copied,
        derived,
        edges,
    })
}

/// The encoding's part of a cache file.
/// The encoding's part of a cache file; its patches' records share
/// `owner`'s bytes when `r` reads from it, else they are copied.
fn read_encoding(
    r: &mut R,
    owner: Option<&bytes::Bytes>,
) -> Result<Option<(u64, Encoded)>, String> {
    Ok(match r.u8()? {
        0 => None,
        _ => {
            let offset = r.v()?;
            let code = r.bytes()?.to_vec();
            let n = r.len(WIRE)?;
            let wire = r.take(n * WIRE)?;
            let wire = shared(owner, wire);
            let records = Records::new(wire, 0, offset)
                .ok_or("a patch's kind is unknown, or the patches are out of order")?;
            let failed = r.v()?;
            let trapped = r.v()?;
            let n = r.len(1)?;
            let mut failed_blocks = Vec::with_capacity(n);
            for _ in 0..n {
                failed_blocks
                    .push(usize::try_from(r.v()?).map_err(|_| "a block index out of range")?);
            }
            let n = r.len(1)?;
            let mut counter_fixups = Vec::with_capacity(n);
            let mut prev = 0u64;
            for _ in 0..n {
                prev = r.d(prev)?;
                counter_fixups
                    .push(u32::try_from(prev).map_err(|_| "a counter relocation is out of range")?);
            }
            let first_counter = r.v()?;
            let movable = r.u8()? != 0;
            let n = r.len(1)?;
            let mut far_fixups = Vec::with_capacity(n);
            let mut prev = 0u64;
            for _ in 0..n {
                prev = r.d(prev)?;
                far_fixups.push(u32::try_from(prev).map_err(|_| "a relocation is out of range")?);
            }
            Some((
                offset,
                Encoded {
                    code,
                    patches: Vec::new(),
                    records: Some(records),
                    failed,
                    trapped,
                    failed_blocks,
                    counter_fixups,
                    far_fixups,
                    movable,
                    first_counter,
                },
            ))
        }
    })
}

/// One branch's edges as [`Plan::edges`] keeps them: taken, fallen through.
type Edges = (Option<u32>, Option<u32>);

/// [`Plan::edges`]: per branch, where its taken and fallen-through
/// edges' marks come from (each the index plus one of the block whose hit
/// is read, 0 for a byte of the edge's own).
fn read_edges(r: &mut R) -> Result<Vec<Edges>, String> {
    let n = r.len(2)?;
    let mut edges = Vec::with_capacity(n);
    for _ in 0..n {
        let mut k = || r.v().map(|k| k.checked_sub(1).map(|k| k as u32));
        edges.push((k()?, k()?));
    }
    Ok(edges)
}

/// A plan's derived blocks ([`Plan::derived`]): block differences, each
/// way in its block shifted past its edge's kind.
fn read_derived(r: &mut R) -> Result<Vec<Derived>, String> {
    let n = r.len(2)?;
    let mut derived = Vec::with_capacity(n);
    let mut prev = 0u64;
    for _ in 0..n {
        prev = r.d(prev)?;
        let block = u32::try_from(prev).map_err(|_| "a block index out of range")?;
        let k = r.len(1)?;
        let mut from = Vec::with_capacity(k);
        for _ in 0..k {
            let v = r.v()?;
            let e = match v & 3 {
                0 => Edge::Whole,
                1 => Edge::Taken,
                2 => Edge::Fell,
                e => return Err(format!("unknown edge {e}")),
            };
            let p = u32::try_from(v >> 2).map_err(|_| "a block index out of range")?;
            from.push((p, e));
        }
        derived.push(Derived { block, from });
    }
    Ok(derived)
}

/// Ask the kernel to back `v`'s spare capacity, a large buffer about to
/// be filled, with huge pages where the system leaves that to the
/// program (transparent huge pages in `madvise` mode): cc1's plan is
/// 100 MB of blocks, 26,000 page faults in 4 KiB pages and 50 in 2 MiB
/// ones. Advice only: nothing changes if it is not taken.
pub(crate) fn huge_pages<T>(v: &mut Vec<T>) {
    const HUGE: usize = 2 << 20;
    let spare = v.spare_capacity_mut();
    let bytes = std::mem::size_of_val(spare);
    if bytes < 2 * HUGE {
        return;
    }
    let p = spare.as_mut_ptr() as usize;
    let (lo, hi) = (p.next_multiple_of(HUGE), (p + bytes) / HUGE * HUGE);
    if hi > lo {
        // SAFETY: [lo, hi) lies within the vector's own allocation;
        // MADV_HUGEPAGE changes only how the kernel backs it, not its
        // contents.
        unsafe {
            libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE);
        }
    }
}

/// The indices a plan and an encoding hold are in range (what the
/// collector and the relocation index with).
fn check(plan: &Plan, enc: Option<&Encoded>) -> Result<(), String> {
    let nbr = plan.branches.len() as u64;
    if plan.blocks.windows(2).any(|w| w[0].start >= w[1].start) {
        return Err("its blocks are out of order".into());
    }
    for b in &plan.blocks {
        let fell = match b.how {
            How::Fell { branch } => Some(branch),
            _ => None,
        };
        if b.branch
            .into_iter()
            .chain(fell)
            .any(|j| u64::from(j) >= nbr)
        {
            return Err("a branch index is out of range".into());
        }
    }
    let edges_ok = match plan.mode {
        Mode::Edges => plan.edges.len() == plan.branches.len(),
        _ => plan.edges.is_empty(),
    };
    let in_range = |k: &u32| (*k as usize) < plan.blocks.len();
    if !edges_ok
        || !plan
            .edges
            .iter()
            .all(|(t, f)| t.iter().chain(f).all(in_range))
    {
        return Err("an edge's block is out of range".into());
    }
    if plan.fell_from.len() != plan.branches.len()
        || plan
            .fell_from
            .iter()
            .flatten()
            .any(|&k| k as usize >= plan.blocks.len())
    {
        return Err("a block index is out of range".into());
    }
    if plan
        .blocks
        .first()
        .is_some_and(|b| matches!(b.how, How::Fell { .. }))
    {
        return Err("its first block derives from none".into());
    }
    // An implied or branching block: only in a hit-mode plan, derived
    // from blocks in range that are counted, with no cycle and at most
    // TREE blocks read for any one hit (Plan::count reads them).
    if !plan.hits_readable() {
        return Err("an implied block derives from none".into());
    }
    // A derived block: counting mode, in order, from blocks in range that
    // are not derived themselves, with a counted branch for a branch's
    // edge.
    let derived = |k: u32| plan.derived.binary_search_by_key(&k, |d| d.block).is_ok();
    if !plan.derived.is_empty()
        && (plan.mode != Mode::Counts
            || plan.derived.windows(2).any(|w| w[0].block >= w[1].block)
            || plan.derived.iter().any(|d| {
                d.block as usize >= plan.blocks.len()
                    || d.from.iter().any(|&(p, e)| {
                        p == d.block
                            || derived(p)
                            || plan
                                .blocks
                                .get(p as usize)
                                .is_none_or(|b| e != Edge::Whole && b.branch.is_none())
                    })
            }))
    {
        return Err("a derived block derives from none".into());
    }
    match enc {
        Some(e) => check_encoding(e, plan.blocks.len() as u64),
        None => Ok(()),
    }
}

/// The indices an encoding holds are in range, for a plan of `blocks`
/// blocks.
fn check_encoding(e: &Encoded, blocks: u64) -> Result<(), String> {
    if e.failed_blocks.iter().any(|&i| i as u64 >= blocks) {
        return Err("a block index is out of range".into());
    }
    if e.counter_fixups
        .iter()
        .chain(&e.far_fixups)
        .any(|&o| o as usize + 4 > e.code.len())
    {
        return Err("a relocation is out of range".into());
    }
    Ok(())
}

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    /// An unsigned LEB128 number.
    fn v(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    /// `v` as its difference from `base` (wrapping, zigzag: a small
    /// step either way is a byte).
    fn d(&mut self, v: u64, base: u64) {
        let s = v.wrapping_sub(base) as i64;
        self.v(((s << 1) ^ (s >> 63)) as u64);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.v(b.len() as u64);
        self.0.extend_from_slice(b);
    }
}

struct R<'a>(&'a [u8]);

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.0.len() {
            return Err("it is cut short".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    /// An unsigned LEB128 number: refused when cut short or past 64 bits.
    fn v(&mut self) -> Result<u64, String> {
        if let Some((&b, rest)) = self.0.split_first().filter(|(&b, _)| b < 0x80) {
            self.0 = rest;
            return Ok(b.into());
        }
        let mut v = 0u64;
        for (i, &b) in self.0.iter().enumerate().take(10) {
            let bits = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                return Err("a number runs past 64 bits".into());
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(v);
            }
        }
        Err(if self.0.len() < 10 {
            "it is cut short".into()
        } else {
            "a number runs past 64 bits".into()
        })
    }
    /// A number written as its difference from `base` ([`W::d`]).
    fn d(&mut self, base: u64) -> Result<u64, String> {
        let z = self.v()?;
        let s = ((z >> 1) as i64) ^ -((z & 1) as i64);
        Ok(base.wrapping_add(s as u64))
    }
    fn v32(&mut self) -> Result<u32, String> {
        u32::try_from(self.v()?).map_err(|_| "a 32-bit field out of range".to_string())
    }
    /// A count of elements each at least `min` bytes long: refused when
    /// the bytes left cannot hold them, before anything is allocated.
    fn len(&mut self, min: usize) -> Result<usize, String> {
        let n = self.v()?;
        if n.saturating_mul(min as u64) > self.0.len() as u64 {
            return Err("a length runs past its end".into());
        }
        Ok(n as usize)
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.len(1)?;
        self.take(n)
    }
}

#[cfg(test)]
mod tests;
