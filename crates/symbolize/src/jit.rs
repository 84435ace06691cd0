//! Names of code that no file holds: functions a JIT compiler or an
//! interpreter generated at run time, as the runtime announces them in
//! the two files perf reads.
//!
//! * **`/tmp/perf-PID.map`** (node `--perf-basic-prof`, CPython 3.12+ `-X
//!   perf`, JVM agents, .NET): one line per function, `START SIZE NAME`,
//!   START and SIZE in hexadecimal ([`parse_perf_map`]). A process in
//!   another pid namespace writes its own pid there (`NSpid`), in its own
//!   `/tmp`.
//! * **jitdump** (`jit-PID.dump`, in any directory, found by the mapping
//!   the process makes of it, as perf finds it): a header and records of
//!   code loaded (with the code's address, size, name), moved, and debug
//!   information (lines of the code that follows) ([`parse_jitdump`], the
//!   layout of the Linux kernel's `tools/perf/Documentation/jitdump-specification.txt`).
//!
//! Both files belong to the profiled process's user, who may write
//! anything into them, or put a link where they are expected: a read by
//! path ([`read_process_file`]) resolves the path inside the process's
//! own root (`/proc/PID/root`, `RESOLVE_IN_ROOT`, no magic links, no
//! final symbolic link) and takes only a regular file owned by the
//! process's user. A jitdump is better read from the descriptor an
//! objects table opened when its mapping was reported
//! ([`read_mapped_file`]): that is the very file the process mapped, and
//! it stays readable after the process has ended, when its root no longer
//! resolves. Every read is bounded; the parsers bound what they keep by
//! the bytes they were given, and stop at the first torn or unknown
//! record (a file still being written ends in one).

use std::io::Read;
use std::path::Path;

/// The most bytes of one JIT symbol file read.
pub const MAX_JIT_FILE: u64 = 256 << 20;

/// One generated function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitFunction {
    /// Its address in the process, and its size in bytes.
    pub start: u64,
    pub size: u64,
    /// Its name as the runtime gave it.
    pub name: String,
    /// Line rows, sorted by address: (address, source file, line).
    pub lines: Vec<(u64, String, u32)>,
    /// When it was loaded (the jitdump record's `CLOCK_MONOTONIC`
    /// nanoseconds; 0 for a perf map, which has no times).
    pub time: u64,
}

/// The functions of a perf map: one per well-formed line, later lines
/// after earlier ones (a later one for the same address replaces it).
pub fn parse_perf_map(text: &[u8]) -> Vec<JitFunction> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        let mut parts = line.trim_end_matches('\r').splitn(3, ' ');
        let (Some(start), Some(size), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
        let (Some(start), Some(size)) = (hex(start), hex(size)) else {
            continue;
        };
        if size == 0 || name.is_empty() || start.checked_add(size).is_none() {
            continue;
        }
        out.push(JitFunction {
            start,
            size,
            name: name.to_string(),
            lines: Vec::new(),
            time: 0,
        });
    }
    out
}

/// The jitdump magic, as the file's first four bytes read in its byte
/// order ('JiTD').
pub const JITDUMP_MAGIC: u32 = 0x4A69_5444;

/// What a jitdump holds so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JitDump {
    /// The pid the header names.
    pub pid: u32,
    /// Whether its times are the CPU's time stamp counter rather than
    /// `CLOCK_MONOTONIC` (flag bit 0).
    pub arch_timestamps: bool,
    /// Functions loaded (a moved one again at its new address, with the
    /// move's time).
    pub functions: Vec<JitFunction>,
    /// Bytes read up to the end of the last whole record: read again from
    /// there when the file grows.
    pub consumed: usize,
}

const CODE_LOAD: u32 = 0;
const CODE_MOVE: u32 = 1;
const CODE_DEBUG_INFO: u32 = 2;
const CODE_CLOSE: u32 = 3;
const CODE_UNWINDING_INFO: u32 = 4;

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn cstr(&mut self) -> Option<String> {
        let rest = self.b.get(self.at..)?;
        let n = rest.iter().position(|&b| b == 0)?;
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.at += n + 1;
        Some(s)
    }
}

/// Parse a jitdump (little-endian, as x86_64 writes it): its header, then
/// records up to the first that is torn (a file still being written) or
/// malformed. An error only when the header itself is not a jitdump's.
pub fn parse_jitdump(bytes: &[u8]) -> Result<JitDump, String> {
    let mut c = Cursor { b: bytes, at: 0 };
    let bad = |why: &str| format!("not a jitdump: {why}");
    let magic = c.u32().ok_or_else(|| bad("shorter than its header"))?;
    if magic != JITDUMP_MAGIC {
        return Err(bad("no JiTD magic (or the other byte order)"));
    }
    let _version = c.u32().ok_or_else(|| bad("torn header"))?;
    let header_size = c.u32().ok_or_else(|| bad("torn header"))? as usize;
    let _elf_mach = c.u32().ok_or_else(|| bad("torn header"))?;
    let _pad = c.u32().ok_or_else(|| bad("torn header"))?;
    let pid = c.u32().ok_or_else(|| bad("torn header"))?;
    let _timestamp = c.u64().ok_or_else(|| bad("torn header"))?;
    let flags = c.u64().ok_or_else(|| bad("torn header"))?;
    if header_size < 40 || header_size > bytes.len() {
        return Err(bad("header size out of range"));
    }
    let mut out = JitDump {
        pid,
        arch_timestamps: flags & 1 != 0,
        functions: Vec::new(),
        consumed: header_size,
    };
    // Debug information waits for the code load it describes.
    let mut pending_lines: std::collections::HashMap<u64, Vec<(u64, String, u32)>> =
        Default::default();
    let mut at = header_size;
    loop {
        let mut r = Cursor { b: bytes, at };
        let (Some(id), Some(size), Some(time)) = (r.u32(), r.u32(), r.u64()) else {
            break;
        };
        let size = size as usize;
        let Some(end) = at
            .checked_add(size)
            .filter(|&e| size >= 16 && e <= bytes.len())
        else {
            break;
        };
        let mut body = Cursor {
            b: &bytes[..end],
            at: at + 16,
        };
        let ok = match id {
            CODE_LOAD => (|| {
                let (_pid, _tid) = (body.u32()?, body.u32()?);
                let (_vma, code_addr, code_size, _index) =
                    (body.u64()?, body.u64()?, body.u64()?, body.u64()?);
                let name = body.cstr()?;
                code_addr.checked_add(code_size)?;
                (code_size > 0).then_some(())?;
                out.functions.push(JitFunction {
                    start: code_addr,
                    size: code_size,
                    name,
                    lines: pending_lines.remove(&code_addr).unwrap_or_default(),
                    time,
                });
                Some(())
            })(),
            CODE_MOVE => (|| {
                let (_pid, _tid) = (body.u32()?, body.u32()?);
                let (_vma, old, new, size, _index) = (
                    body.u64()?,
                    body.u64()?,
                    body.u64()?,
                    body.u64()?,
                    body.u64()?,
                );
                let moved = out.functions.iter().rev().find(|f| f.start == old)?.clone();
                let delta = new.wrapping_sub(old);
                out.functions.push(JitFunction {
                    start: new,
                    size,
                    lines: moved
                        .lines
                        .into_iter()
                        .map(|(a, f, l)| (a.wrapping_add(delta), f, l))
                        .collect(),
                    time,
                    ..moved
                });
                Some(())
            })(),
            CODE_DEBUG_INFO => (|| {
                let code_addr = body.u64()?;
                let n = body.u64()?;
                // Each entry takes at least 17 bytes: bounded by the record.
                if n > (size as u64) / 17 {
                    return None;
                }
                let mut lines = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let (addr, line, _discrim) = (body.u64()?, body.u32()?, body.u32()?);
                    let file = body.cstr()?;
                    lines.push((addr, file, line));
                }
                lines.sort_by_key(|l| l.0);
                pending_lines.insert(code_addr, lines);
                Some(())
            })(),
            CODE_CLOSE | CODE_UNWINDING_INFO => Some(()),
            // A record of a later version: skipped whole.
            _ => Some(()),
        };
        if ok.is_none() {
            break;
        }
        at = end;
        out.consumed = end;
    }
    Ok(out)
}

/// The pid `pid` (as this process sees it) has in its own pid namespace,
/// the last `NSpid` of its status; `pid` where the kernel does not say.
pub fn namespace_pid(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|v| v.split_whitespace().last()?.parse().ok())
        })
        .unwrap_or(pid)
}

/// The real uid of process `pid`.
fn process_uid(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// File `path` as process `pid` sees it (inside its root), from byte
/// `from`: the rest of it, at most [`MAX_JIT_FILE`] in all. Only a
/// regular file owned by the process's user, reached with no symbolic
/// link at its end and no link leaving the process's root.
pub fn read_process_file(pid: u32, path: &Path, from: u64) -> Result<Vec<u8>, String> {
    use rustix::fs::{openat2, Mode, OFlags, ResolveFlags};
    let what = |e: &dyn std::fmt::Display| format!("{} of pid {pid}: {e}", path.display());
    let uid = process_uid(pid).ok_or_else(|| what(&"the process is gone"))?;
    let root = std::fs::File::open(format!("/proc/{pid}/root")).map_err(|e| what(&e))?;
    let rel = path.strip_prefix("/").unwrap_or(path);
    let fd = openat2(
        &root,
        rel,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| what(&e))?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| what(&e))?;
    use std::os::unix::fs::MetadataExt;
    if !meta.is_file() {
        return Err(what(&"not a regular file"));
    }
    if meta.uid() != uid {
        return Err(what(&format!(
            "owned by uid {}, not by the process's user {uid}",
            meta.uid()
        )));
    }
    if meta.len() > MAX_JIT_FILE {
        return Err(what(&format!("larger than {MAX_JIT_FILE} bytes")));
    }
    let mut out = Vec::new();
    let mut file = file;
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(from)).map_err(|e| what(&e))?;
    file.take(MAX_JIT_FILE.saturating_sub(from))
        .read_to_end(&mut out)
        .map_err(|e| what(&e))?;
    Ok(out)
}

/// A jitdump read whole (at most [`MAX_JIT_FILE`] bytes) from `file`, the
/// descriptor its process's mapping was opened by (through
/// `/proc/PID/map_files`, or by path with its inode checked against the
/// kernel's record: [`crate::Objects::for_mapping`]). The file is the one
/// the kernel says the process mapped, so neither its path nor its owner
/// is asked again; it is read by position, leaving the descriptor's
/// offset to its other readers.
pub fn read_mapped_file(file: &std::fs::File) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::FileExt;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let len = meta.len().min(MAX_JIT_FILE);
    let mut out = vec![0; usize::try_from(len).map_err(|e| e.to_string())?];
    let mut at = 0;
    while at < out.len() {
        match file.read_at(&mut out[at..], at as u64) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    out.truncate(at);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_map_lines() {
        let text = b"7f0000001000 40 JS:*hot /app/x.js:3:10\n0x7f0000002000 0x10 stub\nbad line\n1 0 empty\nzz 10 nothex\n";
        let f = parse_perf_map(text);
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].start, f[0].size), (0x7f00_0000_1000, 0x40));
        assert_eq!(f[0].name, "JS:*hot /app/x.js:3:10");
        assert_eq!(
            (f[1].start, f[1].size, f[1].name.as_str()),
            (0x7f00_0000_2000, 0x10, "stub")
        );
    }

    /// A jitdump as a writer makes it: header, debug info, load, move, and
    /// a torn last record.
    pub(crate) fn sample_dump() -> Vec<u8> {
        let mut b = Vec::new();
        let u32s = |b: &mut Vec<u8>, v: u32| b.extend_from_slice(&v.to_le_bytes());
        let u64s = |b: &mut Vec<u8>, v: u64| b.extend_from_slice(&v.to_le_bytes());
        u32s(&mut b, JITDUMP_MAGIC);
        u32s(&mut b, 1);
        u32s(&mut b, 40);
        u32s(&mut b, 62);
        u32s(&mut b, 0);
        u32s(&mut b, 4242);
        u64s(&mut b, 1);
        u64s(&mut b, 0);
        let record = |b: &mut Vec<u8>, id: u32, time: u64, body: &[u8]| {
            u32s(b, id);
            u32s(b, 16 + body.len() as u32);
            u64s(b, time);
            b.extend_from_slice(body);
        };
        let mut dbg = Vec::new();
        u64s(&mut dbg, 0x1000);
        u64s(&mut dbg, 2);
        for (addr, line) in [(0x1000u64, 7u32), (0x1008, 9)] {
            u64s(&mut dbg, addr);
            u32s(&mut dbg, line);
            u32s(&mut dbg, 0);
            dbg.extend_from_slice(b"gen.c\0");
        }
        record(&mut b, CODE_DEBUG_INFO, 10, &dbg);
        let mut load = Vec::new();
        u32s(&mut load, 4242);
        u32s(&mut load, 4242);
        for v in [0x1000u64, 0x1000, 0x20, 1] {
            u64s(&mut load, v);
        }
        load.extend_from_slice(b"gen_add\0");
        load.extend_from_slice(&[0xc3; 0x20]);
        record(&mut b, CODE_LOAD, 11, &load);
        let mut mv = Vec::new();
        u32s(&mut mv, 4242);
        u32s(&mut mv, 4242);
        for v in [0x3000u64, 0x1000, 0x3000, 0x20, 1] {
            u64s(&mut mv, v);
        }
        record(&mut b, CODE_MOVE, 12, &mv);
        b
    }

    #[test]
    fn jitdump_records() {
        let mut b = sample_dump();
        let whole = b.len();
        // A torn record at the end is left for the next read.
        b.extend_from_slice(&[0, 0, 0, 0, 200, 0]);
        let d = parse_jitdump(&b).unwrap();
        assert_eq!((d.pid, d.arch_timestamps, d.consumed), (4242, false, whole));
        assert_eq!(d.functions.len(), 2);
        let f = &d.functions[0];
        assert_eq!(
            (f.start, f.size, f.name.as_str(), f.time),
            (0x1000, 0x20, "gen_add", 11)
        );
        assert_eq!(
            f.lines,
            vec![(0x1000, "gen.c".into(), 7), (0x1008, "gen.c".into(), 9)]
        );
        let m = &d.functions[1];
        assert_eq!((m.start, m.time, m.name.as_str()), (0x3000, 12, "gen_add"));
        assert_eq!(m.lines[1], (0x3008, "gen.c".into(), 9));
        // Every truncation parses (or is refused whole) without panicking.
        for n in 0..b.len() {
            let _ = parse_jitdump(&b[..n]);
        }
        assert!(parse_jitdump(b"ELF\x7f").is_err());
    }
}
