//! Unwind tables for the library's stack walk (issue 29): for each module
//! profdev knows before the run (the program and its `DT_NEEDED`
//! libraries, found as the loader would), a compact sorted table of
//! address ranges and the x86-64 rule that unwinds a frame there, built
//! from the module's `.eh_frame` and written into the session's
//! directory, one file per module, named by the module's device and inode
//! (`{dev:x}-{ino:x}.unw`: the library `stat`s each module it meets).
//!
//! The rules kept are the common case: the CFA is `rsp+N` or `rbp+N`,
//! the return address at `CFA-8`, `rbp` saved at `CFA+K` or unchanged.
//! A range whose CFI is anything else is [`Rule::Unknown`] (the walk
//! stops there); a range no FDE covers is [`Rule::None`] (the walk falls
//! back to the frame pointer there).
//!
//! The file (little-endian): a 32-byte header (the magic
//! [`MAGIC`], the version [`VERSION`] as u32, the entry count as u32, the
//! module's size and modification time in ns as u64, checked against the
//! module's `stat` by the reader), then `count` entries of 16 bytes
//! (`start` u64, the module's virtual address; `cfa_off` i32; `rbp_off`
//! i16, 0 for unchanged; `kind` u8; a pad byte), sorted by `start`; an
//! entry holds up to the next one's start. The C reader
//! (`c/unwind.c`) checks the header, the size and every index.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The environment variable naming the directory of unwind tables.
pub const UNWIND_ENV: &str = "PROFDEV_MPROF_UNWIND_DIR";
/// A table file's first 8 bytes.
pub const MAGIC: &[u8; 8] = b"PDMPUNW\0";
/// The table format's version.
pub const VERSION: u32 = 1;
/// The header's size in bytes.
pub const HEADER: usize = 32;
/// An entry's size in bytes.
pub const ENTRY: usize = 16;
/// Larger modules get no table (their frames are walked by frame pointer).
pub const MAX_MODULE: u64 = 1 << 30;

/// How a frame whose pc lies in a range is unwound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// No FDE covers the range: the frame pointer is followed.
    None,
    /// CFA = rsp + cfa_off; rbp saved at CFA + rbp_off (0: unchanged).
    Rsp {
        /// The CFA's offset from rsp.
        cfa_off: i32,
        /// Where rbp is saved, from the CFA (0: unchanged).
        rbp_off: i16,
    },
    /// CFA = rbp + cfa_off; rbp saved at CFA + rbp_off (0: unchanged).
    Rbp {
        /// The CFA's offset from rbp.
        cfa_off: i32,
        /// Where rbp is saved, from the CFA (0: unchanged).
        rbp_off: i16,
    },
    /// CFI of another kind: the walk stops.
    Unknown,
}

impl Rule {
    fn encode(self) -> (u8, i32, i16) {
        match self {
            Rule::None => (0, 0, 0),
            Rule::Rsp { cfa_off, rbp_off } => (1, cfa_off, rbp_off),
            Rule::Rbp { cfa_off, rbp_off } => (2, cfa_off, rbp_off),
            Rule::Unknown => (3, 0, 0),
        }
    }
}

/// A module's table: `(start, rule)` sorted by start, each rule holding
/// to the next start; consecutive equal rules merged.
pub fn build(data: &[u8]) -> Result<Vec<(u64, Rule)>, String> {
    use gimli::UnwindSection;
    use object::{Object, ObjectSection};
    let file = object::File::parse(data).map_err(|e| e.to_string())?;
    if file.architecture() != object::Architecture::X86_64 {
        return Err("not an x86-64 object".into());
    }
    let Some(sec) = file.section_by_name(".eh_frame") else {
        return Ok(Vec::new());
    };
    let bytes = sec.data().map_err(|e| e.to_string())?;
    let eh = gimli::EhFrame::new(bytes, gimli::LittleEndian);
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(sec.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = file.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    // (start, end, rule) of every row.
    let mut rows: Vec<(u64, u64, Rule)> = Vec::new();
    let mut ctx = gimli::UnwindContext::new();
    let mut entries = eh.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let gimli::CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(gimli::EhFrame::cie_from_offset) else {
            continue;
        };
        if fde.initial_address() == 0 || fde.len() == 0 {
            continue;
        }
        let Ok(mut table) = fde.rows(&eh, &bases, &mut ctx) else {
            rows.push((fde.initial_address(), fde.end_address(), Rule::Unknown));
            continue;
        };
        loop {
            match table.next_row() {
                Ok(Some(row)) => {
                    rows.push((row.start_address(), row.end_address(), rule_of_row(row)))
                }
                Ok(None) => break,
                Err(_) => {
                    rows.push((fde.initial_address(), fde.end_address(), Rule::Unknown));
                    break;
                }
            }
        }
    }
    rows.sort_by_key(|r| r.0);
    let mut out: Vec<(u64, Rule)> = Vec::new();
    let mut end = 0u64;
    for (s, e, r) in rows {
        if s < end {
            continue; // overlapping FDEs: the first one's rows stand
        }
        if s > end && !out.is_empty() {
            out.push((end, Rule::None));
        }
        if out.last().map(|l| l.1) != Some(r) {
            out.push((s, r));
        }
        end = e;
    }
    if !out.is_empty() {
        out.push((end, Rule::None));
    }
    Ok(out)
}

fn rule_of_row<T: gimli::ReaderOffset>(row: &gimli::UnwindTableRow<T, gimli::StoreOnHeap>) -> Rule {
    use gimli::{CfaRule, RegisterRule, X86_64};
    let (reg, off) = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => (*register, *offset),
        _ => return Rule::Unknown,
    };
    let Ok(cfa_off) = i32::try_from(off) else {
        return Rule::Unknown;
    };
    match row.register(X86_64::RA) {
        RegisterRule::Offset(-8) => {}
        _ => return Rule::Unknown,
    }
    let rbp_off = match row.register(X86_64::RBP) {
        RegisterRule::Undefined | RegisterRule::SameValue => 0,
        RegisterRule::Offset(k) if k != 0 => match i16::try_from(k) {
            Ok(k) => k,
            Err(_) => return Rule::Unknown,
        },
        _ => return Rule::Unknown,
    };
    if reg == X86_64::RSP {
        Rule::Rsp { cfa_off, rbp_off }
    } else if reg == X86_64::RBP {
        Rule::Rbp { cfa_off, rbp_off }
    } else {
        Rule::Unknown
    }
}

/// The file of a table, for a module of `size` bytes modified at
/// `mtime_ns`.
pub fn encode(table: &[(u64, Rule)], size: u64, mtime_ns: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER + ENTRY * table.len());
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&(table.len() as u32).to_le_bytes());
    b.extend_from_slice(&size.to_le_bytes());
    b.extend_from_slice(&mtime_ns.to_le_bytes());
    for &(start, rule) in table {
        let (kind, cfa, rbp) = rule.encode();
        b.extend_from_slice(&start.to_le_bytes());
        b.extend_from_slice(&cfa.to_le_bytes());
        b.extend_from_slice(&rbp.to_le_bytes());
        b.push(kind);
        b.push(0);
    }
    b
}

/// The file name of the table of the module `meta` describes.
pub fn file_name(meta: &std::fs::Metadata) -> String {
    format!("{:x}-{:x}.unw", meta.dev(), meta.ino())
}

/// `program` and the libraries it needs, found as the loader would
/// (`DT_RPATH`/`DT_RUNPATH` with `$ORIGIN`, `LD_LIBRARY_PATH`, the system
/// directories), transitively; those that cannot be found are left out.
pub fn modules(program: &Path) -> Vec<PathBuf> {
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let mut out = Vec::new();
    let mut todo = vec![program.to_path_buf()];
    let ld_path: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    const SYSTEM: &[&str] = &[
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
        "/usr/local/lib",
    ];
    while let Some(p) = todo.pop() {
        let Ok(real) = std::fs::canonicalize(&p) else {
            continue;
        };
        if !seen.insert(real.clone()) || out.len() >= 256 {
            continue;
        }
        let Ok(data) = std::fs::read(&real) else {
            continue;
        };
        out.push(real.clone());
        let Some((needed, rpaths)) = dynamic(&data) else {
            continue;
        };
        let origin = p.parent().map(Path::to_path_buf).unwrap_or_default();
        let dirs: Vec<PathBuf> = rpaths
            .iter()
            .flat_map(|r| r.split(':').map(|d| d.to_string()).collect::<Vec<_>>())
            .map(|d| {
                PathBuf::from(
                    d.replace("${ORIGIN}", &origin.to_string_lossy())
                        .replace("$ORIGIN", &origin.to_string_lossy()),
                )
            })
            .chain(ld_path.iter().cloned())
            .chain(SYSTEM.iter().map(PathBuf::from))
            .collect();
        for n in needed {
            if n.contains('/') {
                todo.push(PathBuf::from(n));
            } else if let Some(f) = dirs.iter().map(|d| d.join(&n)).find(|f| f.is_file()) {
                todo.push(f);
            }
        }
    }
    out
}

/// A shared object's `DT_NEEDED` names and its `DT_RPATH`/`DT_RUNPATH`.
fn dynamic(data: &[u8]) -> Option<(Vec<String>, Vec<String>)> {
    use object::read::elf::{Dyn, FileHeader};
    let header = object::elf::FileHeader64::<object::LittleEndian>::parse(data).ok()?;
    let e = header.endian().ok()?;
    let sections = header.sections(e, data).ok()?;
    let (dynamic, link) = sections.dynamic(e, data).ok()??;
    let strings = sections.strings(e, data, link).ok()?;
    let (mut needed, mut rpaths) = (Vec::new(), Vec::new());
    for d in dynamic {
        let tag = d.d_tag(e) as u32;
        let s = || {
            d.string(e, strings)
                .ok()
                .map(|s| String::from_utf8_lossy(s).into_owned())
        };
        match tag {
            object::elf::DT_NEEDED => needed.extend(s()),
            object::elf::DT_RPATH | object::elf::DT_RUNPATH => rpaths.extend(s()),
            _ => {}
        }
    }
    Some((needed, rpaths))
}

/// Writes the tables of `modules` (paths of ELF files; see [`modules`])
/// into `dir` (created, private), through profdev-safefile; the variable
/// and its value. Modules whose table cannot be built are left out
/// (their frames are walked by frame pointer). Several modules are built
/// at once, one thread each (as many as there are CPUs): the tables are
/// made before CMD starts, and a program's own `.eh_frame` and the C
/// library's are the largest part of the fixed cost of a run with stacks.
pub fn write_tables(dir: &Path, modules: &[PathBuf]) -> std::io::Result<(&'static str, OsString)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    profdev_safefile::create_dir(dir, 0o700).map_err(profdev_safefile::Error::into_os_error)?;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, modules.len().max(1));
    let next = AtomicUsize::new(0);
    let work = || -> std::io::Result<()> {
        while let Some(m) = modules.get(next.fetch_add(1, Ordering::Relaxed)) {
            write_table(dir, m)?;
        }
        Ok(())
    };
    std::thread::scope(|s| {
        let others: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mine = work();
        others
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .fold(mine, |a, b| a.and(b))
    })?;
    Ok((UNWIND_ENV, dir.as_os_str().to_owned()))
}

/// Writes module `m`'s table into `dir` ([`write_tables`]); nothing for a
/// module whose table cannot be built.
fn write_table(dir: &Path, m: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    // Not blocked by a FIFO at m: its metadata refuses it.
    let open = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(m);
    let Ok(file) = open else {
        return Ok(());
    };
    write_table_of(dir, &file, 0o400).map(drop)
}

/// Writes the table of the module open as `file` into `dir` (its mode
/// `mode`), unless it is there already: whether the directory holds it
/// now. A module that is not a regular file, is larger than
/// [`MAX_MODULE`] or has no usable `.eh_frame` gets none (its frames are
/// walked by frame pointer).
fn write_table_of(dir: &Path, file: &std::fs::File, mode: u32) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() > MAX_MODULE {
        return Ok(false);
    }
    let path = dir.join(file_name(&meta));
    if std::fs::symlink_metadata(&path).is_ok() {
        return Ok(true);
    }
    let mut data = vec![0; meta.len() as usize];
    if file.read_exact_at(&mut data, 0).is_err() {
        return Ok(false);
    }
    let Ok(table) = build(&data) else {
        return Ok(false);
    };
    let mtime = (meta.mtime() as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(meta.mtime_nsec() as u64);
    let bytes = encode(&table, meta.size(), mtime);
    match profdev_safefile::write_file(&path, &bytes, mode) {
        Ok(()) => Ok(true),
        // Written by a request served meanwhile: the same table.
        Err(_) if std::fs::symlink_metadata(&path).is_ok() => Ok(true),
        Err(e) => Err(e.into_os_error()),
    }
}

/// The socket, in a directory of tables, on which [`serve`] builds the
/// table of a module the run meets that profdev did not know before it:
/// a program CMD executes (a compiler driver's `cc1`, a shell script's
/// commands) and a library loaded with `dlopen`. `c/unwind.c` names it
/// too.
pub const SOCKET: &str = "build.sock";

/// How long [`serve`] waits for a request's one message.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Serving tables on request in one directory ([`serve`]): dropping it
/// stops the service.
pub struct Server {
    /// The listening socket (a duplicate of the serving thread's).
    listener: std::os::fd::OwnedFd,
}

impl Drop for Server {
    fn drop(&mut self) {
        // A listening socket shut down wakes its accept (EINVAL) and
        // refuses new connections. The thread is not joined: it may be in
        // the read of a module on a file system that does not answer.
        let _ = rustix::net::shutdown(&self.listener, rustix::net::Shutdown::Both);
    }
}

/// Builds tables on request in `dir` (made by [`write_tables`]) while
/// the returned [`Server`] lives, on a thread of its own, each table
/// written with mode `mode`. The library, meeting a module that has no
/// table, opens the module's file, sends the descriptor over [`SOCKET`]
/// with one byte, and waits (a bounded time) for one byte back: `1` if
/// the table is there now, `0` if it cannot be made. The table is built
/// from the very file the process opened, named by that file's device and
/// inode as the library names it, and written through profdev-safefile;
/// nothing is read by path. Only who can enter `dir` can connect (a
/// launch's: 0700, root's; an attached process's: 0700, its user's, the
/// socket given to that user too), and a request is a file the process
/// could read already: a table says nothing its file does not.
pub fn serve(dir: &Path, mode: u32) -> std::io::Result<Server> {
    use std::os::fd::{AsFd, AsRawFd};
    use std::os::unix::fs::OpenOptionsExt;
    // A directory too long to name in a socket address (108 bytes: a long
    // $TMPDIR) is named through a descriptor of it, as the library does.
    let held = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)?;
    let mut path = dir.join(SOCKET);
    if path.as_os_str().len() >= 100 {
        path = format!("/proc/self/fd/{}/{SOCKET}", held.as_raw_fd()).into();
    }
    let listener = std::os::unix::net::UnixListener::bind(&path)?;
    drop(held);
    let handle = listener.as_fd().try_clone_to_owned()?;
    let dir = std::sync::Arc::new(dir.to_path_buf());
    let busy = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("mprof-unwind".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(s) => request(&dir, mode, &busy, s),
                    Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    // Shut down (EINVAL), or out of descriptors.
                    Err(_) => break,
                }
            }
        })?;
    Ok(Server { listener: handle })
}

/// Requests served at once, each on a thread of its own: one whose module
/// is slow to read (a file system that does not answer) or whose client
/// sends nothing holds up no other. Past this many, a request is answered
/// `0` at once.
const MAX_REQUESTS: usize = 4;

/// Serves the request on `s` on a thread of its own ([`MAX_REQUESTS`]).
fn request(
    dir: &std::sync::Arc<PathBuf>,
    mode: u32,
    busy: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
    s: std::os::unix::net::UnixStream,
) {
    use std::io::Write;
    use std::sync::atomic::Ordering;
    if busy.fetch_add(1, Ordering::AcqRel) >= MAX_REQUESTS {
        busy.fetch_sub(1, Ordering::AcqRel);
        let _ = (&s).write_all(b"0");
        return;
    }
    let (dir, done) = (dir.clone(), busy.clone());
    let serve = move || {
        answer(&dir, mode, &s);
        done.fetch_sub(1, Ordering::AcqRel);
    };
    // Not spawned: the connection is dropped with the closure, and the
    // library reads no answer (no table).
    if std::thread::Builder::new()
        .name("mprof-unwind-request".into())
        .spawn(serve)
        .is_err()
    {
        busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One request on `s`: its descriptor's table written into `dir` (mode
/// `mode`), and the answer.
fn answer(dir: &Path, mode: u32, s: &std::os::unix::net::UnixStream) {
    use std::io::Write;
    let ok = s.set_read_timeout(Some(REQUEST_TIMEOUT)).is_ok()
        && received(s).is_some_and(|f| write_table_of(dir, &f, mode).unwrap_or(false));
    let _ = (&*s).write_all(if ok { b"1" } else { b"0" });
}

/// The one descriptor a request carries, with its one byte.
fn received(s: &std::os::unix::net::UnixStream) -> Option<std::fs::File> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut byte = [0u8; 1];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        s,
        &mut [std::io::IoSliceMut::new(&mut byte)],
        &mut cmsg,
        RecvFlags::CMSG_CLOEXEC,
    )
    .ok()?;
    let mut fds: Vec<std::os::fd::OwnedFd> = cmsg
        .drain()
        .filter_map(|m| match m {
            RecvAncillaryMessage::ScmRights(fds) => Some(fds),
            _ => None,
        })
        .flatten()
        .collect();
    (got.bytes == 1 && fds.len() == 1).then(|| std::fs::File::from(fds.remove(0)))
}
