//! `--spool DIR`: a destination's spool mirrored on disk, so that a
//! restarted agent sends what the last one could not. Each destination
//! has a directory of its own under DIR (0700, made through safefile
//! without following a planted link); each cut waiting is one file
//! `cut-START-SEQ` (0600, written whole through safefile), removed once the
//! destination took it or the spool's cap dropped it. At start the files
//! are read back (only files of this user that nobody else could have
//! written: `Dir::read_own`), oldest first, ahead of the new cuts.
//!
//! # The file (format of our own, version 3; integers little-endian)
//!
//! ```text
//! magic "profdev-cut\0" (12 bytes), version u16 = 3
//! seq u64, start_ns u64, end_ns u64, to_unix u64
//! processes u32, then each: pid u32, exe STR?, cgroup path STR?,
//!   executable's build id STR? (lower-case hex)
//!   (STR? = present u8 (0 or 1), then length u32 and UTF-8 bytes)
//! recording length u64, then the recording (profdev_formats::recording)
//! heap profiles u32 (`--heap`), then each: pid u32, comm STR?,
//!   sample_bytes u64, stacks u32, then each stack:
//!   alloc_objects u64, alloc_space u64, inuse_objects u64, inuse_space u64,
//!   frames u32, then each: module STR?, address u64, function STR?,
//!   file STR?, line u32
//! ```
//!
//! Version 2 (before the executable's build id was a label) is the same
//! without the build ids, version 1 (before heap profiles were spooled)
//! without those either; both are still read. The cgroup's container
//! id, unit and pod uid are derived again from its path
//! ([`crate::cgroup::of_path`]).

use crate::heap::HeapProfile;
use crate::labels::ProcessLabels;
use crate::Cut;
use profdev_formats::pprof::heap::{HeapFrame, HeapStack};
use std::path::Path;
use std::sync::Arc;

const MAGIC: &[u8; 12] = b"profdev-cut\0";
const VERSION: u16 = 3;
/// The version before the executable's build id, still read.
const VERSION_2: u16 = 2;
/// The version before heap profiles, still read.
const VERSION_1: u16 = 1;
/// The largest spool file read back.
pub const MAX_FILE: u64 = 256 << 20;

/// The bytes of `cut` (see the module doc).
pub fn encode(cut: &Cut) -> Vec<u8> {
    encode_version(cut, VERSION)
}

/// The bytes of `cut` in file version `version` (an older one leaves out
/// what it did not have).
fn encode_version(cut: &Cut, version: u16) -> Vec<u8> {
    let mut b = Vec::with_capacity(cut.recording.len() + 256);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&version.to_le_bytes());
    for v in [cut.seq, cut.start_ns, cut.end_ns, cut.to_unix] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&(cut.processes.len() as u32).to_le_bytes());
    let string = |b: &mut Vec<u8>, s: Option<&str>| match s {
        None => b.push(0),
        Some(s) => {
            b.push(1);
            b.extend_from_slice(&(s.len() as u32).to_le_bytes());
            b.extend_from_slice(s.as_bytes());
        }
    };
    for (pid, l) in &cut.processes {
        b.extend_from_slice(&pid.to_le_bytes());
        string(&mut b, l.exe.as_deref());
        string(&mut b, l.cgroup.as_ref().map(|c| c.path.as_str()));
        if version >= VERSION {
            string(&mut b, l.build_id.as_deref());
        }
    }
    b.extend_from_slice(&(cut.recording.len() as u64).to_le_bytes());
    b.extend_from_slice(&cut.recording);
    if version < VERSION_2 {
        return b;
    }
    b.extend_from_slice(&(cut.heap.len() as u32).to_le_bytes());
    for h in &cut.heap {
        b.extend_from_slice(&h.pid.to_le_bytes());
        string(&mut b, Some(&h.comm));
        b.extend_from_slice(&h.sample_bytes.to_le_bytes());
        b.extend_from_slice(&(h.stacks.len() as u32).to_le_bytes());
        for s in &h.stacks {
            for v in [
                s.alloc_objects,
                s.alloc_space,
                s.inuse_objects,
                s.inuse_space,
            ] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&(s.frames.len() as u32).to_le_bytes());
            for f in &s.frames {
                string(&mut b, Some(&f.module));
                b.extend_from_slice(&f.address.to_le_bytes());
                string(&mut b, Some(&f.function));
                string(&mut b, Some(&f.file));
                b.extend_from_slice(&f.line.to_le_bytes());
            }
        }
    }
    b
}

/// A count read from the file, refused when fewer than `each` bytes per
/// item are left (a count is never trusted to size an allocation).
fn count(r: &mut Reader<'_>, each: usize, what: &str) -> Result<usize, String> {
    let at = r.at;
    let n = r.u32(what)? as usize;
    if n.saturating_mul(each) > r.b.len() - r.at {
        return Err(format!(
            "{what} at byte {at}: {n} is more than the file holds"
        ));
    }
    Ok(n)
}

/// The heap profiles at the end of a version 2 file.
fn heap_profiles(r: &mut Reader<'_>) -> Result<Vec<HeapProfile>, String> {
    let n = count(r, 17, "heap profiles")?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let pid = r.u32("heap pid")?;
        let comm = r.string("heap comm")?.unwrap_or_default();
        let sample_bytes = r.u64("heap sample_bytes")?;
        let stacks = count(r, 36, "heap stacks")?;
        let mut h = HeapProfile {
            pid,
            comm,
            sample_bytes,
            stacks: Vec::with_capacity(stacks),
        };
        for _ in 0..stacks {
            let mut s = HeapStack {
                alloc_objects: r.u64("alloc_objects")?,
                alloc_space: r.u64("alloc_space")?,
                inuse_objects: r.u64("inuse_objects")?,
                inuse_space: r.u64("inuse_space")?,
                ..HeapStack::default()
            };
            let frames = count(r, 15, "heap frames")?;
            s.frames.reserve(frames);
            for _ in 0..frames {
                s.frames.push(HeapFrame {
                    module: r.string("frame module")?.unwrap_or_default(),
                    address: r.u64("frame address")?,
                    function: r.string("frame function")?.unwrap_or_default(),
                    file: r.string("frame file")?.unwrap_or_default(),
                    line: r.u32("frame line")?,
                });
            }
            h.stacks.push(s);
        }
        out.push(h);
    }
    Ok(out)
}

/// Reads the file's fields in order, each bounded by what is left.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(format!("truncated at byte {} ({what})", self.at));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }
    fn string(&mut self, what: &str) -> Result<Option<String>, String> {
        match self.take(1, what)?[0] {
            0 => Ok(None),
            1 => {
                let n = self.u32(what)? as usize;
                let at = self.at;
                let s = self.take(n, what)?;
                String::from_utf8(s.to_vec())
                    .map(Some)
                    .map_err(|_| format!("{what} at byte {at} is not UTF-8"))
            }
            f => Err(format!("{what}: presence byte {f} at byte {}", self.at - 1)),
        }
    }
}

/// The cut of a file's bytes, or why they are not one (naming the field
/// and its byte offset).
pub fn decode(b: &[u8]) -> Result<Cut, String> {
    let mut r = Reader { b, at: 0 };
    if r.take(12, "magic")? != MAGIC {
        return Err("not a profdev spool file (magic)".into());
    }
    let version = u16::from_le_bytes(r.take(2, "version")?.try_into().expect("2 bytes"));
    if !(VERSION_1..=VERSION).contains(&version) {
        return Err(format!(
            "spool file version {version}, this agent reads {VERSION_1} to {VERSION}"
        ));
    }
    let mut cut = Cut {
        seq: r.u64("seq")?,
        start_ns: r.u64("start_ns")?,
        end_ns: r.u64("end_ns")?,
        to_unix: r.u64("to_unix")?,
        ..Cut::default()
    };
    let n = r.u32("processes")?;
    for _ in 0..n {
        let pid = r.u32("pid")?;
        let exe = r.string("exe")?;
        let cgroup = r.string("cgroup path")?.map(|p| crate::cgroup::of_path(&p));
        let build_id = if version >= VERSION {
            r.string("build id")?
        } else {
            None
        };
        cut.processes.insert(
            pid,
            Arc::new(ProcessLabels {
                exe,
                cgroup,
                build_id,
            }),
        );
    }
    let len = r.u64("recording length")?;
    let len = usize::try_from(len).map_err(|_| "recording length too large".to_string())?;
    cut.recording = r.take(len, "recording")?.to_vec();
    if version >= VERSION_2 {
        cut.heap = heap_profiles(&mut r)?;
    }
    if r.at != b.len() {
        return Err(format!("{} bytes after the cut", b.len() - r.at));
    }
    Ok(cut)
}

/// One destination's spool directory.
pub struct DiskSpool {
    dir: profdev_safefile::Dir,
}

impl DiskSpool {
    /// The directory of destination `name` under `root` (both made 0700
    /// if missing).
    pub fn open(root: &Path, name: &str) -> Result<DiskSpool, String> {
        let key: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        profdev_safefile::Dir::create(root, 0o700).map_err(|e| e.to_string())?;
        let dir =
            profdev_safefile::Dir::create(&root.join(key), 0o700).map_err(|e| e.to_string())?;
        Ok(DiskSpool { dir })
    }

    fn name(cut: &Cut) -> String {
        format!("cut-{:020}-{:010}", cut.start_ns, cut.seq)
    }

    /// Write `cut`'s file.
    pub fn save(&self, cut: &Cut) -> Result<(), String> {
        self.dir
            .write_file(Self::name(cut), &encode(cut), 0o600)
            .map_err(|e| e.to_string())
    }

    /// Remove `cut`'s file.
    pub fn remove(&self, cut: &Cut) -> Result<(), String> {
        self.dir.remove(Self::name(cut)).map_err(|e| e.to_string())
    }

    /// The cuts the directory holds, oldest first, and a sentence for each
    /// file that could not be read back (such a file is removed).
    pub fn load(&self) -> (Vec<Cut>, Vec<String>) {
        let mut names = match self.dir.files("cut-") {
            Ok(f) => f.into_iter().map(|(n, _, _)| n).collect::<Vec<_>>(),
            Err(e) => return (Vec::new(), vec![e.to_string()]),
        };
        names.sort();
        let mut cuts = Vec::new();
        let mut errors = Vec::new();
        for name in names {
            let path = self.dir.path().join(&name);
            match self.dir.read_own(&name, MAX_FILE) {
                Ok(Some(bytes)) => match decode(&bytes) {
                    Ok(c) => cuts.push(c),
                    Err(e) => {
                        errors.push(format!("{}: {e}; removed", path.display()));
                        let _ = self.dir.remove(&name);
                    }
                },
                Ok(None) => {}
                Err(e) => errors.push(e.to_string()),
            }
        }
        (cuts, errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut() -> Cut {
        let mut c = Cut {
            seq: 7,
            start_ns: 1_700_000_000_000_000_000,
            end_ns: 1_700_000_015_000_000_000,
            to_unix: 42,
            recording: b"recording bytes".to_vec(),
            ..Cut::default()
        };
        c.processes.insert(
            9,
            Arc::new(ProcessLabels {
                exe: Some("/usr/bin/hot".into()),
                cgroup: Some(crate::cgroup::of_path("/system.slice/hot.service")),
                build_id: Some("0123456789abcdef0123456789abcdef01234567".into()),
            }),
        );
        c.processes.insert(10, Arc::new(ProcessLabels::default()));
        c.heap.push(HeapProfile {
            pid: 9,
            comm: "hot".into(),
            sample_bytes: 524_288,
            stacks: vec![HeapStack {
                frames: vec![
                    HeapFrame {
                        module: "/usr/bin/hot".into(),
                        address: 0x1234,
                        function: "churn".into(),
                        file: "hot.c".into(),
                        line: 12,
                    },
                    HeapFrame {
                        function: "main".into(),
                        ..HeapFrame::default()
                    },
                ],
                alloc_objects: 3,
                alloc_space: 3_000_000,
                inuse_objects: 1,
                inuse_space: 1_000_000,
            }],
        });
        c
    }

    #[test]
    fn a_cut_reads_back_as_it_was_written() {
        let c = cut();
        let back = decode(&encode(&c)).unwrap();
        assert_eq!(
            (back.seq, back.start_ns, back.end_ns, back.to_unix),
            (7, c.start_ns, c.end_ns, 42)
        );
        assert_eq!(back.recording, c.recording);
        assert_eq!(back.processes, c.processes);
        assert_eq!(back.heap.len(), 1);
        let (h, want) = (&back.heap[0], &c.heap[0]);
        assert_eq!((h.pid, &h.comm, h.sample_bytes), (9, &want.comm, 524_288));
        assert_eq!(h.stacks, want.stacks);
        let unit = back.processes[&9].cgroup.as_ref().unwrap();
        assert_eq!(unit.systemd_unit.as_deref(), Some("hot.service"));
    }

    /// Every truncation, and a byte more, is refused with a sentence.
    #[test]
    fn every_truncation_is_refused() {
        let b = encode(&cut());
        for n in 0..b.len() {
            assert!(decode(&b[..n]).is_err(), "{n}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(decode(&longer).unwrap_err(), "1 bytes after the cut");
        let mut bad = b;
        bad[12] = 4;
        assert!(decode(&bad).unwrap_err().contains("version 4"));
    }

    /// Files of versions 1 (an agent before heap profiles were spooled)
    /// and 2 (before the executable's build id) still read: the cut
    /// without what they did not hold.
    #[test]
    fn older_files_read_without_what_they_did_not_hold() {
        let c = cut();
        let mut without_ids = c.processes.clone();
        for l in without_ids.values_mut() {
            Arc::make_mut(l).build_id = None;
        }
        let v2 = decode(&encode_version(&c, VERSION_2)).unwrap();
        assert_eq!((&v2.recording, v2.heap.len()), (&c.recording, 1));
        assert_eq!(v2.heap[0].stacks, c.heap[0].stacks);
        assert_eq!(v2.processes, without_ids);
        let b = encode_version(&c, VERSION_1);
        // Version 1 ends with the recording.
        assert!(b.ends_with(&c.recording));
        let v1 = decode(&b).unwrap();
        assert_eq!((&v1.recording, v1.heap.len()), (&c.recording, 0));
        assert_eq!(v1.processes, without_ids);
    }

    /// Saved, listed oldest first, removed; a file that is not a cut is
    /// reported and removed; files are 0600 in a 0700 directory.
    #[test]
    fn the_directory_keeps_the_cuts_in_order() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("spool");
        let s = DiskSpool::open(&root, "otlp-http http://127.0.0.1:4318").unwrap();
        let mut a = cut();
        let mut b = cut();
        a.start_ns += 1;
        b.start_ns += 2;
        s.save(&b).unwrap();
        s.save(&a).unwrap();
        let sub = root.join("otlp-http_http___127_0_0_1_4318");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&sub), 0o700);
        std::fs::write(sub.join("cut-0-junk"), b"not a cut, only junk").unwrap();
        let (cuts, errors) = s.load();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("not a profdev spool file"), "{errors:?}");
        assert_eq!(
            cuts.iter().map(|c| c.start_ns).collect::<Vec<_>>(),
            vec![a.start_ns, b.start_ns]
        );
        for f in std::fs::read_dir(&sub).unwrap() {
            assert_eq!(mode(&f.unwrap().path()), 0o600);
        }
        s.remove(&a).unwrap();
        assert_eq!(s.load().0.len(), 1);
    }

    /// The fuzz target's seeds are this test's cut, whole and torn
    /// (`PROFDEV_BLESS=1` rewrites them).
    #[test]
    fn the_fuzz_seeds_are_a_cut_whole_and_torn() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/agent_cut");
        let b = encode(&cut());
        profdev_testkit::golden(&dir.join("whole"), &b);
        profdev_testkit::golden(&dir.join("torn"), &b[..b.len() - 5]);
        crate::fuzzing::agent_cut(&b);
    }
}
