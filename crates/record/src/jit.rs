//! JIT frames: code a runtime generated, named from the perf map or the
//! jitdump it writes (`profdev_symbolize::jit` reads and parses them).
//!
//! A process's names come from its jitdump when it has mapped one (a
//! mapping whose file is `jit-N.dump`, anywhere: the marker perf looks
//! for), else from `/tmp/perf-N.map` inside its root, N its pid in its own
//! namespace. A jitdump is read from the descriptor the objects table
//! opened when its mapping was reported (the file the process mapped,
//! readable however long after the process ended the recorder gets to
//! its samples), a perf map inside the process's root. The file is read
//! when a sample first lands in the process's anonymous memory, and read
//! on from where it ended when a later sample falls outside every
//! function it named (at most every 10 ms of sample
//! time; a process without such a file is tried again each second), so
//! names follow the runtime as it compiles.
//!
//! Each function is written into the recording at its first sample, as a
//! symbol of an anonymous object named after the file: the name is in the
//! recording however soon the process ends. An address can be reused for
//! another function (code freed and compiled again): a sample is named by
//! the latest function loaded at its address no later than the sample (a
//! jitdump has times; a perf map's later line replaces an earlier one),
//! and when that conflicts with a function already written, the object
//! starts a new generation (a second object of the same name), so the
//! earlier samples keep their name.

use profdev_formats::recording::{Encoder, Frame, Function, Line, ObjectInfo, ObjectKind};
use profdev_symbolize::jit::{self, JitFunction};
use profdev_symbolize::{Mapping, Object};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Sample-time nanoseconds between reads of a file that named nothing
/// new, and between tries of a process that has no file.
const REREAD_NS: u64 = 10_000_000;
const RETRY_NS: u64 = 1_000_000_000;

/// Where a process's names come from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    PerfMap(PathBuf),
    JitDump(PathBuf),
}

impl Source {
    fn path(&self) -> &PathBuf {
        match self {
            Source::PerfMap(p) | Source::JitDump(p) => p,
        }
    }
}

/// One generation of a process's JIT object in the current recording:
/// its id and the functions written into it (start -> (end, name)).
struct Generation {
    id: u32,
    written: BTreeMap<u64, (u64, String)>,
}

#[derive(Default)]
struct Proc {
    source: Option<Source>,
    /// The jitdump's object, holding the descriptor opened when its
    /// mapping was reported.
    held: Option<Arc<Object>>,
    /// Bytes of the file consumed.
    read: u64,
    funcs: Vec<JitFunction>,
    /// Sample time of the last read (or try).
    tried: Option<u64>,
    /// Whether the last try found no file.
    missing: bool,
    generations: Vec<Generation>,
}

/// The JIT names of every process (see the module doc).
#[derive(Default)]
pub(crate) struct Jit {
    procs: HashMap<u32, Proc>,
    /// Processes ended, with the time: forgotten two seconds of sample
    /// time later (their last samples may come after the exit record).
    exits: std::collections::VecDeque<(u64, u32)>,
}

/// How long a process's names are kept after its exit record.
const KEEP_NS: u64 = 2_000_000_000;

/// The source of process `pid`, given its mappings' paths.
fn source_of<'a>(pid: u32, mut paths: impl Iterator<Item = &'a str>) -> Source {
    let dump = paths.find(|p| {
        let base = p.rsplit('/').next().unwrap_or(p);
        base.strip_prefix("jit-")
            .and_then(|r| r.strip_suffix(".dump"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    match dump {
        Some(p) => Source::JitDump(p.into()),
        None => Source::PerfMap(format!("/tmp/perf-{}.map", jit::namespace_pid(pid)).into()),
    }
}

impl Proc {
    /// Read what the file gained since the last read.
    fn refresh(&mut self, pid: u32, time: u64) {
        self.tried = Some(time);
        let Some(source) = &self.source else {
            return;
        };
        let from = match source {
            Source::PerfMap(_) => self.read,
            // A jitdump is parsed whole each time (its header first); the
            // functions already known are skipped.
            Source::JitDump(_) => 0,
        };
        let read = match (source, self.held.as_ref().and_then(|o| o.file())) {
            (Source::JitDump(_), Some(file)) => jit::read_mapped_file(file),
            _ => jit::read_process_file(pid, source.path(), from),
        };
        let Ok(bytes) = read else {
            self.missing = true;
            return;
        };
        self.missing = false;
        match source {
            Source::PerfMap(_) => {
                // Only whole lines: a line being written is read next time.
                let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                self.funcs.extend(jit::parse_perf_map(&bytes[..end]));
                self.read += end as u64;
            }
            Source::JitDump(_) => {
                if let Ok(d) = jit::parse_jitdump(&bytes) {
                    let known = self.read as usize;
                    if d.functions.len() > known {
                        self.funcs.extend(d.functions.into_iter().skip(known));
                    }
                    self.read = self.funcs.len() as u64;
                }
            }
        }
    }

    /// The function at `va` at sample time `time`: the latest loaded no
    /// later than the sample.
    fn find(&self, va: u64, time: u64) -> Option<&JitFunction> {
        self.funcs
            .iter()
            .rev()
            .find(|f| f.start <= va && va - f.start < f.size && (f.time == 0 || f.time <= time))
    }
}

impl Jit {
    /// The frame of `va` in process `pid`'s anonymous memory at sample
    /// time `time`, if a JIT file names it; `maps` are the process's
    /// mappings, for its jitdump.
    pub(crate) fn frame(
        &mut self,
        enc: &mut Encoder,
        pid: u32,
        va: u64,
        time: u64,
        maps: &[Mapping],
    ) -> Option<Frame> {
        let p = self.procs.entry(pid).or_default();
        let source = source_of(pid, maps.iter().map(|m| m.path.as_str()));
        if p.source.as_ref() != Some(&source) {
            // First sight, or a jitdump mapped since.
            *p = Proc {
                source: Some(source),
                ..Proc::default()
            };
        }
        if let (None, Some(Source::JitDump(dump))) = (&p.held, &p.source) {
            p.held = maps
                .iter()
                .find(|m| Path::new(&m.path) == dump)
                .and_then(|m| m.object.clone());
        }
        let due = match p.tried {
            None => true,
            Some(t) => time.saturating_sub(t) >= if p.missing { RETRY_NS } else { REREAD_NS },
        };
        if p.find(va, time).is_none() && due {
            p.refresh(pid, time);
        }
        let f = p.find(va, time)?.clone();
        let end = f.start + f.size;
        let clash = |g: &Generation| {
            g.written
                .range(..end)
                .next_back()
                .is_some_and(|(&s, (e, n))| *e > f.start && (s != f.start || *n != f.name))
        };
        if p.generations.last().is_none_or(clash) {
            let path = p
                .source
                .as_ref()
                .map_or_else(String::new, |s| s.path().display().to_string());
            let id = enc.object(&ObjectInfo {
                kind: ObjectKind::Anon,
                path,
                ..ObjectInfo::default()
            });
            p.generations.push(Generation {
                id,
                written: BTreeMap::new(),
            });
        }
        let g = p.generations.last_mut().expect("pushed above");
        if !g.written.contains_key(&f.start) {
            let mut files: Vec<String> = Vec::new();
            let lines = f
                .lines
                .iter()
                .map(|(addr, file, line)| Line {
                    addr: *addr,
                    file: match files.iter().position(|x| x == file) {
                        Some(i) => i as u32,
                        None => {
                            files.push(file.clone());
                            (files.len() - 1) as u32
                        }
                    },
                    line: *line,
                })
                .collect();
            let func = Function {
                start: f.start,
                len: f.size,
                name: f.name.clone(),
                lines,
            };
            let _ = enc.symbols(g.id, &files, &[func]);
            g.written.insert(f.start, (end, f.name));
        }
        Some(Frame {
            object: g.id,
            offset: va,
        })
    }

    /// A new recording begins: its objects are its own.
    pub(crate) fn cut(&mut self) {
        for p in self.procs.values_mut() {
            p.generations.clear();
        }
    }

    /// Process `pid` ended at `time` (its functions stay named where
    /// written); those that ended long enough before are forgotten.
    pub(crate) fn exited(&mut self, pid: u32, time: u64) {
        if self.procs.contains_key(&pid) {
            self.exits.push_back((time, pid));
        }
        while let Some(&(t, p)) = self.exits.front() {
            if time.saturating_sub(t) < KEEP_NS {
                break;
            }
            self.exits.pop_front();
            self.procs.remove(&p);
        }
    }

    /// Processes whose names are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.procs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jitdump_marker_is_preferred() {
        let s = source_of(
            1,
            ["/usr/lib/libc.so.6", "/home/u/.debug/jit/x/jit-77.dump"].into_iter(),
        );
        assert_eq!(
            s,
            Source::JitDump("/home/u/.debug/jit/x/jit-77.dump".into())
        );
        let s = source_of(
            std::process::id(),
            ["/tmp/jit-.dump", "/tmp/jit-7x.dump"].into_iter(),
        );
        assert_eq!(
            s,
            Source::PerfMap(format!("/tmp/perf-{}.map", std::process::id()).into())
        );
    }

    /// A process's names are kept two seconds of sample time past its
    /// exit record (its last samples may come after it), then forgotten:
    /// pid churn keeps the table small.
    #[test]
    fn ended_processes_are_forgotten() {
        let mut jit = Jit::default();
        for pid in 1..=1000u32 {
            jit.procs.insert(pid, Proc::default());
            jit.exited(pid, u64::from(pid) * 10_000_000);
        }
        // The last 2 s of exits (200 processes at 10 ms) are kept.
        assert_eq!(jit.len(), 200);
        jit.exited(1, 20_000_000_000);
        assert_eq!(jit.len(), 0);
    }

    /// A jitdump with one function, `name` at `addr` (16 bytes), loaded at
    /// time 1, as a runtime writes it.
    fn jitdump(pid: u32, addr: u64, name: &str) -> Vec<u8> {
        let mut d = Vec::new();
        for v in [0x4A69_5444u32, 1, 40, 62, 0, pid] {
            d.extend(v.to_le_bytes());
        }
        d.extend([0u8; 16]);
        let name = format!("{name}\0");
        let size = 16 + 40 + name.len() + 16;
        d.extend(0u32.to_le_bytes());
        d.extend((size as u32).to_le_bytes());
        d.extend(1u64.to_le_bytes());
        d.extend(pid.to_le_bytes());
        d.extend(pid.to_le_bytes());
        for v in [addr, addr, 16, 1] {
            d.extend(v.to_le_bytes());
        }
        d.extend(name.as_bytes());
        d.extend([0xc3u8; 16]);
        d
    }

    /// The recorder may reach a process's samples after the process has
    /// ended (a busy machine, a slow symbol read): its jitdump is then read
    /// from the descriptor opened when its mapping was reported, not
    /// through its root, which no longer resolves. Here the process is
    /// gone (reaped) and the file removed before the first sample is
    /// seen, and its function is still named; with no held descriptor the
    /// same sample has no name.
    #[test]
    fn a_jitdump_is_read_after_its_process_has_ended() {
        use profdev_formats::recording::{read, Header};
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("jit-{pid}.dump"));
        std::fs::write(&path, jitdump(pid, 0x7000_0000, "gen_spin")).unwrap();
        let objects = profdev_symbolize::Objects::new();
        let held = objects.open_path(path.to_str().unwrap()).unwrap();
        std::fs::remove_file(&path).unwrap();
        let mapping = |object| Mapping {
            start: 0x6000_0000,
            end: 0x6000_1000,
            pgoff: 0,
            path: path.display().to_string(),
            file: None,
            build_id: None,
            object,
        };
        let mut enc = Encoder::new(&Header::default());
        let mut unheld = Jit::default();
        assert_eq!(
            unheld.frame(&mut enc, pid, 0x7000_0004, 5, &[mapping(None)]),
            None,
            "the process is gone: nothing to read by path"
        );
        let mut jit = Jit::default();
        let fr = jit
            .frame(&mut enc, pid, 0x7000_0004, 5, &[mapping(Some(held))])
            .expect("named from the held descriptor");
        enc.end();
        let rec = read(&enc.take()).unwrap();
        let o = rec.object(fr.object).unwrap();
        assert_eq!(o.function_at(fr.offset).unwrap().name, "gen_spin");
        assert_eq!(o.info.path, path.display().to_string());
    }

    /// Two functions loaded at one address, one after the other: the
    /// samples of each are named by the one loaded at their time, in two
    /// generations of the object.
    #[test]
    fn a_reused_address_starts_a_new_generation() {
        use profdev_formats::recording::{read, Header};
        let f = |name: &str, time| JitFunction {
            start: 0x1000,
            size: 0x100,
            name: name.into(),
            lines: vec![(0x1000, "gen.js".into(), 3)],
            time,
        };
        let mut jit = Jit::default();
        jit.procs.insert(
            9,
            Proc {
                source: Some(Source::PerfMap("/tmp/perf-9.map".into())),
                funcs: vec![f("first", 10), f("second", 20)],
                tried: Some(15),
                ..Proc::default()
            },
        );
        let mut enc = Encoder::new(&Header::default());
        let mut frame = |enc: &mut Encoder, time| {
            jit.procs.get_mut(&9).unwrap().tried = Some(time);
            jit.frame(enc, 9, 0x1010, time, &[]).unwrap()
        };
        let a = frame(&mut enc, 15);
        let b = frame(&mut enc, 25);
        let c = frame(&mut enc, 26);
        assert_ne!(a.object, b.object);
        assert_eq!(b, c);
        enc.end();
        let rec = read(&enc.take()).unwrap();
        let name = |fr: Frame| {
            rec.object(fr.object)
                .unwrap()
                .function_at(fr.offset)
                .unwrap()
                .name
                .clone()
        };
        assert_eq!(
            (name(a), name(b)),
            ("first".to_string(), "second".to_string())
        );
        let o = rec.object(a.object).unwrap();
        assert_eq!(o.info.path, "/tmp/perf-9.map");
        assert_eq!(o.files, vec!["gen.js".to_string()]);
    }
}
