//! What /proc and /sys say about CPUs and tasks already running.
//!
//! The kernel reports COMM/MMAP2 only for tasks that exec or map after a
//! session starts; tasks that were running before are described here from
//! /proc, as records with time 0, the way `perf record` synthesizes them.

use profdev_core::Record;
use profdev_symbolize::maps::MapsEntry;
use std::fs;
use std::io;

/// The online CPUs, from /sys/devices/system/cpu/online (e.g. `0-3,6`).
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let path = "/sys/devices/system/cpu/online";
    let text = fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot read {path}: {e}")))?;
    parse_cpu_list(&text)
        .map_err(|msg| io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {msg}")))
}

/// Parse a kernel CPU list (`0-3,6,8-9`, trailing newline allowed).
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    let text = text.trim();
    if text.is_empty() {
        return Err("the CPU list is empty".into());
    }
    for part in text.split(',') {
        let num = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("`{part}` is not a CPU number or range"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("`{part}` is a backwards range"));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The value of /proc/sys/kernel/perf_event_paranoid, or why it could not be
/// read, for error messages.
pub fn perf_event_paranoid() -> String {
    match fs::read_to_string("/proc/sys/kernel/perf_event_paranoid") {
        Ok(s) => s.trim().to_string(),
        Err(e) => format!("unreadable ({e})"),
    }
}

/// The MMAP record of one `/proc/PID/maps` line of `pid`, if it is
/// executable (the kernel's MMAP2 records are of executable mappings
/// only). Anonymous regions become `//anon`, as the kernel names them in
/// MMAP2 records; a named mapping with an inode carries its file id.
pub fn mmap_record(pid: u32, e: &MapsEntry) -> Option<Record> {
    if !e.perms.exec() {
        return None;
    }
    let path = if e.path.is_empty() {
        "//anon".to_string()
    } else {
        e.path.clone()
    };
    Some(Record::Mmap {
        pid,
        tid: pid,
        addr: e.start,
        len: e.end.wrapping_sub(e.start),
        pgoff: e.offset,
        path,
        file: e.file_id(),
        build_id: None,
        time: 0,
    })
}

fn numeric_dirs(path: &str) -> Vec<u32> {
    let mut v: Vec<u32> = match fs::read_dir(path) {
        Ok(rd) => rd
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort_unstable();
    v
}

/// COMM and MMAP records (executable mappings) for tasks running now: every
/// process, or only `pid` (with its threads). All have time 0. Tasks that
/// vanish while /proc is read are skipped; kernel threads get a COMM and no
/// MMAP.
pub fn synthesize_tasks(pid: Option<u32>) -> Vec<Record> {
    let pids = match pid {
        Some(p) => vec![p],
        None => numeric_dirs("/proc"),
    };
    let mut out = Vec::new();
    for pid in pids {
        let tids = numeric_dirs(&format!("/proc/{pid}/task"));
        let mut alive = false;
        for tid in tids {
            let Ok(comm) = fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")) else {
                continue;
            };
            alive = true;
            out.push(Record::Comm {
                pid,
                tid,
                comm: comm.trim_end_matches('\n').to_string(),
                exec: false,
                time: 0,
            });
        }
        if !alive {
            continue;
        }
        let Ok(maps) = profdev_symbolize::maps::read(pid) else {
            continue;
        };
        out.extend(maps.iter().filter_map(|e| mmap_record(pid, e)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0\n").unwrap(), vec![0]);
        assert_eq!(parse_cpu_list("0-1\n").unwrap(), vec![0, 1]);
        assert_eq!(
            parse_cpu_list("0-3,6,8-9").unwrap(),
            vec![0, 1, 2, 3, 6, 8, 9]
        );
        assert_eq!(
            parse_cpu_list("x").unwrap_err(),
            "`x` is not a CPU number or range"
        );
        assert_eq!(
            parse_cpu_list("3-1").unwrap_err(),
            "`3-1` is a backwards range"
        );
        assert!(parse_cpu_list("\n").is_err());
    }

    #[test]
    fn maps_lines() {
        let parse_maps_line = |l: &str| {
            let e = MapsEntry::parse(l)?;
            match mmap_record(9, &e)? {
                Record::Mmap {
                    addr,
                    len,
                    pgoff,
                    file,
                    path,
                    ..
                } => Some((addr, addr + len, pgoff, file, path)),
                _ => None,
            }
        };
        let l = "55d0c1a00000-55d0c1a12000 r-xp 00002000 08:01 1311      /usr/bin/dd";
        assert_eq!(
            parse_maps_line(l),
            Some((
                0x55d0c1a00000,
                0x55d0c1a12000,
                0x2000,
                Some(profdev_core::FileId {
                    major: 8,
                    minor: 1,
                    ino: 1311,
                    ino_generation: 0
                }),
                "/usr/bin/dd".into()
            ))
        );
        // not executable
        assert_eq!(
            parse_maps_line("55d0c1a00000-55d0c1a12000 r--p 00000000 08:01 1311 /usr/bin/dd"),
            None
        );
        // anonymous executable region
        let e = parse_maps_line("7f0000000000-7f0000001000 rwxp 00000000 00:00 0 ").unwrap();
        assert_eq!((e.4.as_str(), e.3), ("//anon", None));
        // pseudo file, path with spaces, hex device numbers
        let e = parse_maps_line(
            "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]",
        )
        .unwrap();
        assert_eq!(e.4, "[vsyscall]");
        let e = parse_maps_line("7f00-7f10 r-xp 00000000 fd:1a 42 /tmp/a b (deleted)").unwrap();
        assert_eq!(e.4, "/tmp/a b (deleted)");
        assert_eq!(e.3.unwrap().major, 0xfd);
        assert_eq!(e.3.unwrap().minor, 0x1a);
        assert_eq!(parse_maps_line("garbage"), None);
    }

    #[test]
    fn synthesize_self() {
        let me = std::process::id();
        let recs = synthesize_tasks(Some(me));
        assert!(recs.iter().all(|r| r.time() == 0));
        assert!(recs
            .iter()
            .any(|r| matches!(r, Record::Comm { pid, tid, .. } if *pid == me && *tid == me)));
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(
            recs.iter().any(
                |r| matches!(r, Record::Mmap { pid, path, file: Some(_), .. }
                if *pid == me && std::path::Path::new(path) == exe)
            ),
            "no mapping of {exe:?} in {recs:?}"
        );
        // a pid that cannot exist yields nothing
        assert!(synthesize_tasks(Some(u32::MAX)).is_empty());
    }
}
