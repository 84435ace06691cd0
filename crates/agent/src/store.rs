//! The local rolling store: with no destination (or with `--store DIR`),
//! the agent keeps each interval's recording in a directory, by default
//! `STATE/store`, so that one machine is served without any backend:
//! `profdev report --since 10m` and `profdev export FORMAT --since 2h`
//! read the recordings of the last minutes as one ([`read_window`]).
//!
//! The store is a [`Destination`]: it gets the cuts from the same sender
//! thread, spool and backoff as a network destination (a full disk is
//! retried, the spool's cap drops the oldest). Each cut's recording (a
//! whole `profdev.data`, see `profdev_formats::recording`) is one file
//! named by its interval, `START_END.data`, both UTC times in RFC 3339
//! with nanoseconds (`2026-11-27T15:44:09.123456789Z_2026-…Z.data`), so
//! that names sort as times; written 0600 through safefile (recordings
//! hold kernel addresses) in a directory made 0700. After each write the
//! store is pruned ([`Store::prune`]): the files whose interval ended
//! more than `--store-max-age` ago, then the oldest while the files
//! total more than `--store-max-bytes`; the newest interval's files are
//! always kept. Other names in the directory are left alone.
//!
//! Each heap profile of the cut (`--heap`) is a file of its own beside
//! the recording, `START_END.heap-PID-COMM.pb.gz` ([`heap_file_name`]; the
//! command name's characters other than letters, digits, `_` and `-`
//! become `_`): a gzipped pprof of Go's heap sample types (`alloc_space`,
//! `alloc_objects`, `inuse_space`, `inuse_objects`; the interval's
//! allocations, what was in use at its end), which `go tool pprof
//! -sample_index=alloc_space FILE` opens. They are pruned with the
//! recordings, as files of their interval; `--since` reads only the
//! recordings.

use crate::health::check_path;
use crate::send::Destination;
use crate::Cut;
use profdev_formats::recording::{self, Recording};
use profdev_safefile::Dir;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `--store-max-bytes` when not given: 256 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;
/// `--store-max-age` when not given: a day.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// The suffix of the store's files.
const SUFFIX: &str = ".data";
/// What a heap profile's name has after its interval, and its suffix.
const HEAP: &str = ".heap-";
const HEAP_SUFFIX: &str = ".pb.gz";
/// The largest recording read back.
const MAX_FILE: u64 = crate::disk::MAX_FILE;

/// A duration as `--since` and `--store-max-age` take it: `90s`, `10m`,
/// `2h`, `1d`, `1h30m` (humantime's units); more than zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("{s:?} is not a duration ({e}); give e.g. 90s, 10m, 2h or 1d"))?;
    if d.is_zero() {
        return Err(format!("{s:?} is no time; give e.g. 90s, 10m, 2h or 1d"));
    }
    Ok(d)
}

fn time_of(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

fn ns_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The file name of the interval `[start_ns, end_ns)` (Unix ns).
pub fn file_name(start_ns: u64, end_ns: u64) -> String {
    format!(
        "{}_{}{SUFFIX}",
        humantime::format_rfc3339_nanos(time_of(start_ns)),
        humantime::format_rfc3339_nanos(time_of(end_ns))
    )
}

/// The file name of the heap profile of process `pid` running `comm`
/// over the interval `[start_ns, end_ns)` (Unix ns).
pub fn heap_file_name(start_ns: u64, end_ns: u64, pid: u32, comm: &str) -> String {
    let comm: String = comm
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let data = file_name(start_ns, end_ns);
    let stem = data.strip_suffix(SUFFIX).unwrap_or(&data);
    format!("{stem}{HEAP}{pid}-{comm}{HEAP_SUFFIX}")
}

/// The interval of `START_END`.
fn interval(stem: &str) -> Option<(u64, u64)> {
    let (start, end) = stem.split_once('_')?;
    let start = ns_of(humantime::parse_rfc3339(start).ok()?);
    let end = ns_of(humantime::parse_rfc3339(end).ok()?);
    (start <= end).then_some((start, end))
}

/// The interval a recording's name says, or `None` for another name.
pub fn parse_name(name: &str) -> Option<(u64, u64)> {
    interval(name.strip_suffix(SUFFIX)?)
}

/// The interval and process id a heap profile's name says, or `None`
/// for another name.
pub fn parse_heap_name(name: &str) -> Option<(u64, u64, u32)> {
    let (stem, rest) = name.strip_suffix(HEAP_SUFFIX)?.split_once(HEAP)?;
    let (start, end) = interval(stem)?;
    let pid = rest.split_once('-')?.0.parse().ok()?;
    Some((start, end, pid))
}

/// The store's files: (name, start_ns, end_ns, bytes), oldest first;
/// with `heap`, the heap profiles too.
fn list(dir: &Dir, heap: bool) -> Result<Vec<(String, u64, u64, u64)>, String> {
    let mut out: Vec<_> = dir
        .files("")
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter_map(|(name, bytes, _)| {
            let name = name.into_string().ok()?;
            let (start, end) = parse_name(&name).or_else(|| {
                heap.then(|| parse_heap_name(&name).map(|(s, e, _)| (s, e)))
                    .flatten()
            })?;
            Some((name, start, end, bytes))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The store directory, written by the agent.
pub struct Store {
    dir: Dir,
    max_bytes: u64,
    max_age: Duration,
}

impl Store {
    /// The store at `path` (made 0700 if missing; not through another
    /// user's symbolic link), pruned to `max_bytes` and `max_age`.
    pub fn open(path: &Path, max_bytes: u64, max_age: Duration) -> Result<Store, String> {
        check_path(path).map_err(|e| format!("--store: {e}"))?;
        let dir = Dir::create(path, 0o700).map_err(|e| format!("--store: {e}"))?;
        Ok(Store {
            dir,
            max_bytes,
            max_age,
        })
    }

    /// Write `cut`'s recording, then each of its heap profiles as a
    /// gzipped pprof (all 0600).
    pub fn save(&self, cut: &Cut) -> Result<(), String> {
        use std::io::Write;
        self.dir
            .write_file(file_name(cut.start_ns, cut.end_ns), &cut.recording, 0o600)
            .map_err(|e| e.to_string())?;
        for h in &cut.heap {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            let pprof = gz
                .write_all(&h.pprof(cut.start_ns, cut.end_ns))
                .and_then(|()| gz.finish())
                .map_err(|e| {
                    format!("cannot compress the heap profile of process {}: {e}", h.pid)
                })?;
            let name = heap_file_name(cut.start_ns, cut.end_ns, h.pid, &h.comm);
            self.dir
                .write_file(name, &pprof, 0o600)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Remove the files that ended before `now - max_age`, then the
    /// oldest while the files total more than `max_bytes`, always keeping
    /// the newest interval's: the names removed, oldest first.
    pub fn prune(&self, now: SystemTime) -> Result<Vec<String>, String> {
        let files = list(&self.dir, true)?;
        let oldest_kept = ns_of(now).saturating_sub(self.max_age.as_nanos() as u64);
        let mut total: u64 = files.iter().map(|f| f.3).sum();
        let mut removed = Vec::new();
        let newest = files.last().map(|f| (f.1, f.2));
        for (name, start, end, bytes) in files {
            if Some((start, end)) == newest || (end >= oldest_kept && total <= self.max_bytes) {
                break;
            }
            self.dir.remove(&name).map_err(|e| e.to_string())?;
            total -= bytes;
            removed.push(name);
        }
        Ok(removed)
    }
}

impl Destination for Store {
    fn name(&self) -> String {
        format!("store {}", self.dir.path().display())
    }
    /// The recording as it is stored (what [`Destination::deliver`]
    /// writes).
    fn encode(&self, cut: &Cut) -> Result<Vec<u8>, String> {
        Ok(cut.recording.clone())
    }
    fn send(&mut self, _body: &[u8]) -> Result<(), String> {
        Err("the store writes whole cuts (deliver), not bodies".into())
    }
    fn deliver(&mut self, cut: &Cut) -> Result<(), String> {
        self.save(cut)?;
        self.prune(SystemTime::now()).map(|_| ())
    }
}

/// The recordings of a store's window, read as one.
#[derive(Debug)]
pub struct Window {
    /// Their samples, tasks and objects as one recording.
    pub recording: Recording,
    /// The files read, oldest first.
    pub files: Vec<PathBuf>,
    /// A sentence for each file skipped or read only in part.
    pub notes: Vec<String>,
}

/// The recordings of the store `dir` whose interval overlaps the last
/// `since` before `now`, read as one (`profdev_formats::recording::merge`).
/// Only regular files (no symbolic link followed) with one name, owned by
/// root or the caller and writable by nobody else, in a directory
/// likewise, each at most 256 MiB; one that is refused or is not a
/// recording is skipped with a note. A window with no sample is an error
/// that says where the agent should be.
pub fn read_window(dir: &Path, since: Duration, now: SystemTime) -> Result<Window, String> {
    let nothing = || {
        format!(
            "no profile in the last {} in {}: is profdev agent running?",
            humantime::format_duration(since),
            dir.display()
        )
    };
    check_path(dir)?;
    let d = match Dir::open(dir) {
        Ok(d) => d,
        Err(e) if e.os_error().map(std::io::Error::kind) == Some(std::io::ErrorKind::NotFound) => {
            return Err(nothing())
        }
        Err(e) => return Err(e.to_string()),
    };
    let from = ns_of(now).saturating_sub(since.as_nanos() as u64);
    let to = ns_of(now);
    let mut w = Window {
        recording: Recording::default(),
        files: Vec::new(),
        notes: Vec::new(),
    };
    let mut recs = Vec::new();
    for (name, start, end, _) in list(&d, false)? {
        if end <= from || start > to {
            continue;
        }
        let path = dir.join(&name);
        let bytes = match d.read_trusted(&name, MAX_FILE) {
            Ok(Some(b)) => b,
            Ok(None) => continue,
            Err(e) => {
                w.notes.push(format!("{e}; skipped"));
                continue;
            }
        };
        match recording::read(&bytes) {
            Ok(r) => {
                if let Some(at) = r.torn {
                    w.notes.push(format!(
                        "{}: the recording ends inside a record at byte {at}; its {} samples before it are read",
                        path.display(),
                        r.samples.len()
                    ));
                }
                recs.push(r);
                w.files.push(path);
            }
            Err(e) => w.notes.push(format!("{}: {e}; skipped", path.display())),
        }
    }
    if recs.iter().all(|r| r.samples.is_empty()) {
        let mut e = nothing();
        if !recs.is_empty() {
            e = e.replacen(
                "no profile",
                &format!("no sample ({} profiles)", recs.len()),
                1,
            );
        }
        for n in &w.notes {
            e.push_str(&format!("\n{n}"));
        }
        return Err(e);
    }
    w.recording = recording::merge(recs);
    Ok(w)
}

/// [`read_window`] of the store `dir` (default `STATE/store` of the
/// default state directory) over the last `since`, now.
pub fn read_since(dir: Option<&Path>, since: Duration) -> Result<Window, String> {
    let default = Path::new(crate::health::DEFAULT_STATE_DIR).join("store");
    read_window(dir.unwrap_or(&default), since, SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    /// 2027-01-15T08:00:00Z.
    const T0: u64 = 1_800_000_000 * S;

    fn cut(start_ns: u64, bytes: usize) -> Cut {
        Cut {
            start_ns,
            end_ns: start_ns + 15 * S,
            recording: vec![7; bytes],
            ..Cut::default()
        }
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn names_are_the_interval_in_utc_and_read_back() {
        let n = file_name(T0 + 5, T0 + 15 * S);
        assert_eq!(
            n,
            "2027-01-15T08:00:00.000000005Z_2027-01-15T08:00:15.000000000Z.data"
        );
        assert_eq!(parse_name(&n), Some((T0 + 5, T0 + 15 * S)));
        assert_eq!(parse_name("health"), None);
        assert_eq!(parse_name("a_b.data"), None);
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86400)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").unwrap_err().contains("90s, 10m"));
    }

    /// By age: what ended before now - max_age goes; by size: the oldest
    /// go until the rest fits; the newest stays even alone too big; other
    /// names stay.
    #[test]
    fn pruning_by_age_then_size_oldest_first() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("store");
        let s = Store::open(&root, 250, Duration::from_secs(60)).unwrap();
        std::fs::write(root.join("notes.txt"), "mine").unwrap();
        for i in 0..6 {
            s.save(&cut(T0 + i * 15 * S, 100)).unwrap();
        }
        assert_eq!(
            std::fs::metadata(&root).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let f = root.join(file_name(T0, T0 + 15 * S));
        assert_eq!(
            std::fs::metadata(f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // Now: the last interval (T0+75s..T0+90s) just ended. Max age 60s:
        // the first two ended at T0+15s and T0+30s, more than 60s ago.
        let now = time_of(T0 + 90 * S + 1);
        let by_age = Store::open(&root, 1 << 20, Duration::from_secs(60)).unwrap();
        let removed = by_age.prune(now).unwrap();
        assert_eq!(
            removed,
            [
                file_name(T0, T0 + 15 * S),
                file_name(T0 + 15 * S, T0 + 30 * S)
            ]
        );
        // Four left of 100 bytes, 250 allowed: the two oldest go by size.
        let removed = s.prune(now).unwrap();
        assert_eq!(
            removed,
            [
                file_name(T0 + 30 * S, T0 + 45 * S),
                file_name(T0 + 45 * S, T0 + 60 * S)
            ]
        );
        assert!(s.prune(now).unwrap().is_empty());
        assert_eq!(
            names(&root),
            [
                file_name(T0 + 60 * S, T0 + 75 * S),
                file_name(T0 + 75 * S, T0 + 90 * S),
                "notes.txt".into()
            ]
        );
        // The newest is kept even when it alone is too big, or too old.
        s.save(&cut(T0 + 90 * S, 1000)).unwrap();
        s.prune(time_of(T0 + 10_000 * S)).unwrap();
        assert_eq!(
            names(&root),
            [file_name(T0 + 90 * S, T0 + 105 * S), "notes.txt".into()]
        );
    }

    /// A heap profile is a gzipped pprof beside its interval's recording,
    /// named by the interval, pid and command; pruned with its interval.
    #[test]
    fn heap_profiles_are_pprof_files_of_their_interval() {
        use profdev_formats::pprof::heap::{HeapFrame, HeapStack};
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("store");
        let s = Store::open(&root, 1 << 20, Duration::from_secs(60)).unwrap();
        let heap = |pid| crate::heap::HeapProfile {
            pid,
            comm: "web srv/1".into(),
            sample_bytes: 524_288,
            stacks: vec![HeapStack {
                frames: vec![HeapFrame {
                    function: "churn".into(),
                    ..HeapFrame::default()
                }],
                alloc_objects: 2,
                alloc_space: 1_000_000,
                ..HeapStack::default()
            }],
        };
        let mut first = cut(T0, 100);
        first.heap.push(heap(42));
        s.save(&first).unwrap();
        let name = heap_file_name(T0, T0 + 15 * S, 42, "web srv/1");
        assert_eq!(
            name,
            "2027-01-15T08:00:00.000000000Z_2027-01-15T08:00:15.000000000Z.heap-42-web_srv_1.pb.gz"
        );
        assert_eq!(parse_heap_name(&name), Some((T0, T0 + 15 * S, 42)));
        assert_eq!(parse_name(&name), None);
        let bytes = std::fs::read(root.join(&name)).unwrap();
        assert_eq!(&bytes[..2], [0x1f, 0x8b], "gzipped");
        let stacks = profdev_formats::pprof::decode::heap_stacks(&bytes).unwrap();
        assert_eq!(
            (stacks[0].frames[0].function.as_str(), stacks[0].alloc_space),
            ("churn", 1_000_000)
        );
        // The next interval's files are the newest; the first's go by age,
        // the heap profile with its recording.
        let mut second = cut(T0 + 15 * S, 100);
        second.heap.push(heap(42));
        s.save(&second).unwrap();
        let removed = s.prune(time_of(T0 + 1000 * S)).unwrap();
        assert_eq!(removed, [file_name(T0, T0 + 15 * S), name]);
        assert_eq!(
            names(&root),
            [
                file_name(T0 + 15 * S, T0 + 30 * S),
                heap_file_name(T0 + 15 * S, T0 + 30 * S, 42, "web srv/1")
            ]
        );
    }

    #[test]
    fn an_empty_window_says_where_the_agent_should_be() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("store");
        let e = read_window(&root, Duration::from_secs(600), time_of(T0)).unwrap_err();
        assert_eq!(
            e,
            format!(
                "no profile in the last 10m in {}: is profdev agent running?",
                root.display()
            )
        );
        let s = Store::open(&root, DEFAULT_MAX_BYTES, DEFAULT_MAX_AGE).unwrap();
        // Not a recording: skipped, said.
        s.save(&cut(T0, 10)).unwrap();
        let e = read_window(&root, Duration::from_secs(600), time_of(T0 + 20 * S)).unwrap_err();
        assert!(e.contains("not a profdev recording"), "{e}");
        // Outside the window.
        let e = read_window(&root, Duration::from_secs(60), time_of(T0 + 100 * S)).unwrap_err();
        assert!(e.starts_with("no profile in the last 1m in "), "{e}");
    }
}
