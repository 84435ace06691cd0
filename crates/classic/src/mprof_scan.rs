//! `mprof -p PID --scan`: the caller's right to ptrace PID decided as the
//! kernel decides it (and held by pidfd, checked again once PID is
//! stopped), a process with an allocator of its own refused, the scan
//! (`profdev_attach::scan_process`) and its report.

use crate::mprof::{heap_stacks, own_allocator};
use anyhow::{anyhow, bail, Result};
use profdev_dev::access::{ptrace_may_attach, Cred};
use profdev_dev::DevError;
use profdev_mprof::scan::OriginGroup;
use profdev_mprof::Stack;
use profdev_symbolize::open::{read_object, MappedRange};
use profdev_symbolize::ElfObject;
use std::path::Path;

/// At most this many modules are looked at for an allocator of their own.
const MAX_MODULES: usize = 256;

/// The modules glibc's malloc and the scan's own reading come from.
fn is_glibc_or_ours(path: &str) -> bool {
    let name = Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    ["libc.so", "libc-", "ld-linux", "libprofdev_mprof.so"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// The first module of process `pid` with an allocator of its own
/// (`own_allocator`: jemalloc, tcmalloc, mimalloc, its own `malloc`, a
/// Rust `#[global_allocator]`): (module, symbol). Each read through
/// `/proc/PID/map_files` (the very file mapped), bounded.
fn other_allocator(pid: u32) -> Option<(String, String)> {
    let maps = profdev_symbolize::maps::read(pid).ok()?;
    if !maps
        .iter()
        .any(|m| m.is_file() && is_glibc_or_ours(m.file_path()))
    {
        return None; // no glibc: the scan says so, in its words
    }
    let mut seen = Vec::new();
    for m in maps.iter().filter(|m| m.is_file() && m.perms.exec()) {
        let path = m.file_path();
        if is_glibc_or_ours(path) || seen.contains(&path) || seen.len() >= MAX_MODULES {
            continue;
        }
        seen.push(path);
        let range = MappedRange {
            pid,
            start: m.start,
            end: m.end,
        };
        let Ok(bytes) = read_object(Path::new(path), Some(range)) else {
            continue;
        };
        if let Some(sym) = ElfObject::parse(&bytes, Path::new(path))
            .ok()
            .and_then(|o| own_allocator(&o))
        {
            return Some((path.to_string(), sym));
        }
    }
    None
}

fn sentence(e: DevError) -> anyhow::Error {
    anyhow!(match e {
        DevError::NoDevice(s) | DevError::NotPermitted(s) | DevError::Busy(s) => s,
        DevError::NoProcess(p) => format!("no process {p}: -p needs the id of a running process"),
        e => e.to_string(),
    })
}

/// Scan process `pid` for unreachable heap blocks; the report's text.
pub fn scan(pid: u32) -> Result<String> {
    let me = Cred {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        pid: std::process::id(),
    };
    let permit = ptrace_may_attach(&me, pid).map_err(|e| match e {
        DevError::NotPermitted(why) => anyhow!("not permitted to ptrace {why}"),
        e => sentence(e),
    })?;
    if let Some((module, sym)) = other_allocator(pid) {
        bail!(
            "process {pid} cannot be scanned: {module} carries its own allocator ({sym}), and \
             the scan reads glibc's malloc only"
        );
    }
    let s = profdev_attach::scan_process(pid, Some(permit)).map_err(sentence)?;
    let mut text = profdev_mprof::scan::render(&s.scan, pid, s.pause);
    if s.scan.unreachable.is_empty() {
        return Ok(text);
    }
    match s.scan.origins() {
        Some(groups) => text.push_str(&origins(&groups, s.scan.sampled)),
        None if s.scan.unseen.is_some() => text.push_str(&format!(
            "\n(the allocating stacks in mprof's table were not read: {})\n",
            s.scan.unseen.as_deref().unwrap_or_default()
        )),
        None => text.push_str(
            "\n(size: usable bytes, the size asked for rounded up: at most 23 more; the \
             blocks' allocating sites are known only in a process running under mprof)\n",
        ),
    }
    Ok(text)
}

/// The unreachable blocks by allocating stack (or site), as mprof's
/// table in the process saw them: `blocks bytes asked frames`, the frames
/// symbolized (`function file:line`, the site first, ` < ` its callers);
/// with mprof `sampled`, the blocks it has not were perhaps not sampled.
fn origins(groups: &[OriginGroup], sampled: bool) -> String {
    let stacks: Vec<Stack> = groups
        .iter()
        .map(|g| Stack {
            frames: g.frames.clone().unwrap_or_default(),
            ..Default::default()
        })
        .collect();
    let mut out = String::from(
        "\nBy allocating stack, as mprof's table in the process recorded it (the site alone \
         where it keeps no stacks; bytes: usable, asked: as the program asked)\n\
         blocks\tbytes\tasked\tstack\n",
    );
    for (g, st) in groups.iter().zip(heap_stacks(&stacks)) {
        let frames: Vec<String> = st
            .frames
            .iter()
            .map(|f| match (f.file.as_str(), f.line) {
                ("", _) => f.function.clone(),
                (file, 0) => format!("{} {file}", f.function),
                (file, line) => format!("{} {file}:{line}", f.function),
            })
            .collect();
        let (asked, where_) = match g.frames {
            Some(_) => (g.asked.to_string(), frames.join(" < ")),
            None if sampled => (
                "-".into(),
                "(not sampled, or allocated before mprof)".into(),
            ),
            None => ("-".into(), "(allocated before mprof)".into()),
        };
        out.push_str(&format!("{}\t{}\t{asked}\t{where_}\n", g.blocks, g.bytes));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_and_ours() {
        assert!(is_glibc_or_ours("/usr/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_glibc_or_ours("/lib64/ld-linux-x86-64.so.2"));
        assert!(is_glibc_or_ours(
            "/tmp/profdev-attach.x/libprofdev_mprof.so"
        ));
        assert!(!is_glibc_or_ours("/usr/lib/libjemalloc.so.2"));
    }

    #[test]
    fn no_process() {
        let e = scan(u32::MAX).unwrap_err().to_string();
        assert!(e.contains("no process"), "{e}");
    }
}
