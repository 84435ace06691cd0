//! The agent's state directory (`--state-dir DIR`, default
//! [`DEFAULT_STATE_DIR`], systemd's `StateDirectory=profdev-agent`) and
//! the health file it writes there every interval, `DIR/health`, read by
//! `profdev stat --agent`.
//!
//! The directory is made 0700 if missing (through safefile, its last
//! component never followed when another user could have planted it);
//! a path through another user's symbolic link is refused, as
//! `profdev_fuse::check_ancestors` refuses a mount point's.
//!
//! # The file
//!
//! The stat format of the devices' `stat/NAME` files: one `key value`
//! line each. The agent's own keys first, then each destination's, their
//! keys prefixed with the destination's kind (`otlp-grpc.`, `pyroscope.`,
//! `parca.`, `store.`):
//!
//! | key | meaning |
//! |---|---|
//! | `state` | `running`, or `ended` once the agent has ended |
//! | `pid` | the agent's process id |
//! | `started` / `updated` | when the agent started, when the file was written (UTC, RFC 3339) |
//! | `interval_s` | seconds between profiles |
//! | `rate_asked` | samples per second per CPU (`-F`) |
//! | `profiles` | profiles cut |
//! | `samples` / `lost` | samples in them, records the kernel lost |
//! | `heap_processes` / `heap_profiles` | processes whose heap is profiled now (`--heap`), heap profiles cut |
//! | `KIND.destination` | the destination's address (the store's directory) |
//! | `KIND.sent` / `KIND.failures` | profiles it took, attempts that failed |
//! | `KIND.heap_sent` | heap profiles in the profiles it took |
//! | `KIND.last_error` | the last failure's sentence (`-` when none) |
//! | `KIND.spool_profiles` / `KIND.spool_bytes` | what waits in its spool (bytes of recordings and heap profiles) |
//! | `KIND.spool_heap_profiles` | heap profiles in the profiles waiting |
//! | `KIND.dropped` | profiles dropped, oldest first, past the spool's cap |
//! | `KIND.undelivered` | profiles left unsent when the agent ended |
//!
//! The file is 0644: it holds counts, times, destination addresses (which
//! never carry credentials: [`crate::url`] refuses them) and error
//! sentences, never a token (the token is only ever in request headers)
//! and no kernel address, so any user who may enter the state directory
//! may read the agent's health, as any user may read a device's `stat`.

use crate::send::Status;
use profdev_safefile::Dir;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The agent's state directory when `--state-dir` names none.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/profdev-agent";
/// The health file's name in the state directory.
pub const HEALTH: &str = "health";
/// The largest health file read.
const MAX_HEALTH: u64 = 1 << 20;

/// Refuse a path that goes through another user's symbolic link
/// (its last component included): whoever owns one chooses where the
/// agent writes, or what a reader reads. Links owned by root or by this
/// process's user are followed as the kernel would.
pub fn check_path(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("cannot read the current directory: {e}"))?
            .join(dir)
    };
    let euid = profdev_safefile::euid();
    for ancestor in abs.ancestors() {
        let Ok(m) = std::fs::symlink_metadata(ancestor) else {
            continue;
        };
        if m.file_type().is_symlink() && m.uid() != 0 && m.uid() != euid {
            return Err(format!(
                "{}: refusing a path through {}, a symbolic link of uid {}",
                dir.display(),
                ancestor.display(),
                m.uid()
            ));
        }
    }
    Ok(())
}

/// The state directory `dir`, made 0700 if missing.
pub fn open_state(dir: &Path) -> Result<Dir, String> {
    check_path(dir)?;
    Dir::create(dir, 0o700).map_err(|e| e.to_string())
}

/// What the health file says.
#[derive(Clone, Debug, Default)]
pub struct Health {
    /// The agent has ended.
    pub ended: bool,
    pub pid: u32,
    pub started: Option<SystemTime>,
    pub updated: Option<SystemTime>,
    pub interval: Duration,
    pub frequency: u32,
    pub profiles: u64,
    pub samples: u64,
    pub lost: u64,
    /// Processes whose heap is profiled now, heap profiles cut.
    pub heap_processes: usize,
    pub heap_profiles: u64,
    /// Each destination's counts.
    pub destinations: Vec<Status>,
}

/// A time as the file writes it.
fn utc(t: Option<SystemTime>) -> String {
    t.map_or_else(
        || "-".into(),
        |t| humantime::format_rfc3339_seconds(t).to_string(),
    )
}

/// A value on one line: control characters become spaces; empty is `-`.
fn one_line(v: &str) -> String {
    let v: String = v
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if v.trim().is_empty() {
        "-".into()
    } else {
        v.trim().to_string()
    }
}

/// The key prefix of destination `name` (its first word, `otlp-grpc`),
/// made unique among `taken`.
fn kind_of(name: &str, taken: &[String]) -> String {
    let word: String = name
        .split_whitespace()
        .next()
        .unwrap_or("destination")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut key = word.clone();
    let mut n = 2;
    while taken.contains(&key) {
        key = format!("{word}{n}");
        n += 1;
    }
    key
}

impl Health {
    /// `(key, value)` for every key, in the file's order.
    pub fn pairs(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = Vec::new();
        let mut put = |k: &str, x: String| v.push((k.to_string(), x));
        put("state", if self.ended { "ended" } else { "running" }.into());
        put("pid", self.pid.to_string());
        put("started", utc(self.started));
        put("updated", utc(self.updated));
        put("interval_s", self.interval.as_secs().to_string());
        put("rate_asked", self.frequency.to_string());
        put("profiles", self.profiles.to_string());
        put("samples", self.samples.to_string());
        put("lost", self.lost.to_string());
        put("heap_processes", self.heap_processes.to_string());
        put("heap_profiles", self.heap_profiles.to_string());
        let mut taken = Vec::new();
        for d in &self.destinations {
            let kind = kind_of(&d.name, &taken);
            let address = d.name.split_once(' ').map_or("", |(_, a)| a);
            let mut put = |k: &str, x: String| v.push((format!("{kind}.{k}"), one_line(&x)));
            put("destination", address.to_string());
            put("sent", d.sent.to_string());
            put("failures", d.failures.to_string());
            put("heap_sent", d.heap_sent.to_string());
            put("last_error", d.last_error.clone().unwrap_or_default());
            put("spool_profiles", d.spooled.to_string());
            put("spool_bytes", d.spool_bytes.to_string());
            put("spool_heap_profiles", d.spool_heap.to_string());
            put("dropped", d.dropped.to_string());
            put("undelivered", d.undelivered.to_string());
            taken.push(kind);
        }
        v
    }

    /// The file's text: one `key value` line per key.
    pub fn text(&self) -> String {
        self.pairs()
            .into_iter()
            .map(|(k, v)| format!("{k} {v}\n"))
            .collect()
    }

    /// Write `DIR/health` (0644, whole, through safefile).
    pub fn write(&self, dir: &Dir) -> Result<(), String> {
        dir.write_file(HEALTH, self.text().as_bytes(), 0o644)
            .map_err(|e| e.to_string())
    }
}

/// One column of `profdev stat`: a name and its `key value` rows.
pub type Column = (String, Vec<(String, String)>);

/// The health file of the state directory `dir` as `profdev stat`'s
/// columns: `agent` (the agent's keys), then one per destination named
/// `agent.KIND` (its keys without their prefix); `Ok(None)` when `dir` holds no health
/// file. Read only if it and `dir` belong to root or the caller (no
/// symbolic link followed, at most 1 MiB). A `running` agent whose
/// process is gone reads `state gone`.
pub fn read(dir: &Path) -> Result<Option<Vec<Column>>, String> {
    check_path(dir)?;
    let d = match Dir::open(dir) {
        Ok(d) => d,
        Err(e) if e.os_error().map(std::io::Error::kind) == Some(std::io::ErrorKind::NotFound) => {
            return Ok(None)
        }
        Err(e) => return Err(e.to_string()),
    };
    let Some(bytes) = d
        .read_trusted(HEALTH, MAX_HEALTH)
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    Ok(Some(columns(&String::from_utf8_lossy(&bytes))))
}

/// The agent's columns for `profdev stat`: with `--agent STATE`, those of
/// STATE's health file, an error when it has none; without, when `plain`
/// (no mount named either), those of the default state directory's if it
/// has one that can be read; else none.
pub fn for_stat(state: Option<&Path>, plain: bool) -> Result<Option<Vec<Column>>, String> {
    match state {
        Some(dir) => match read(dir)? {
            Some(c) => Ok(Some(c)),
            None => Err(format!(
                "no health file in {}: is profdev agent running (with --state-dir {})?",
                dir.display(),
                dir.display()
            )),
        },
        None if plain => Ok(read(Path::new(DEFAULT_STATE_DIR)).ok().flatten()),
        None => Ok(None),
    }
}

/// The columns of a health file's text (see [`read`]).
pub fn columns(text: &str) -> Vec<Column> {
    let mut out: Vec<Column> = vec![("agent".into(), Vec::new())];
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (k, v) = line.split_once(' ').unwrap_or((line, ""));
        let (column, key) = match k.split_once('.') {
            Some((c, k)) => (format!("agent.{c}"), k),
            None => ("agent".into(), k),
        };
        let i = match out.iter().position(|(c, _)| *c == column) {
            Some(i) => i,
            None => {
                out.push((column, Vec::new()));
                out.len() - 1
            }
        };
        out[i].1.push((key.to_string(), v.trim().to_string()));
    }
    let agent = &mut out[0].1;
    let pid = agent
        .iter()
        .find(|(k, _)| k == "pid")
        .map(|(_, v)| v.clone());
    if let Some((_, state)) = agent.iter_mut().find(|(k, _)| k == "state") {
        let alive = pid.is_some_and(|p| PathBuf::from(format!("/proc/{p}")).exists());
        if state == "running" && !alive {
            *state = "gone".into();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> Health {
        Health {
            pid: std::process::id(),
            started: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)),
            updated: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_015)),
            interval: Duration::from_secs(15),
            frequency: 19,
            profiles: 2,
            samples: 120,
            lost: 1,
            destinations: vec![
                Status {
                    name: "otlp-grpc http://127.0.0.1:4317".into(),
                    sent: 2,
                    ..Status::default()
                },
                Status {
                    name: "pyroscope http://127.0.0.1:4040".into(),
                    failures: 3,
                    last_error: Some("connection\nrefused".into()),
                    spooled: 2,
                    spool_bytes: 900,
                    ..Status::default()
                },
            ],
            ..Health::default()
        }
    }

    #[test]
    fn the_file_is_key_value_lines_and_reads_back_as_columns() {
        let t = health().text();
        assert!(t.starts_with("state running\npid "), "{t}");
        assert!(t.contains("\nstarted 2027-01-15T08:00:00Z\n"), "{t}");
        assert!(
            t.contains("\npyroscope.last_error connection refused\n"),
            "{t}"
        );
        assert!(t.contains("\notlp-grpc.last_error -\n"), "{t}");
        let c = columns(&t);
        let names: Vec<&str> = c.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["agent", "agent.otlp-grpc", "agent.pyroscope"]);
        assert_eq!(c[0].1[0], ("state".into(), "running".into()));
        assert!(c[2].1.contains(&("failures".into(), "3".into())));
        assert!(c[2]
            .1
            .contains(&("destination".into(), "http://127.0.0.1:4040".into())));
        // A process that is gone.
        let dead = t.replacen(&format!("pid {}", std::process::id()), "pid 0", 1);
        assert_eq!(columns(&dead)[0].1[0].1, "gone");
    }

    #[test]
    fn written_0644_in_a_0700_directory_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        assert_eq!(read(&state).unwrap(), None);
        let dir = open_state(&state).unwrap();
        health().write(&dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&state), 0o700);
        assert_eq!(mode(&state.join(HEALTH)), 0o644);
        let c = read(&state).unwrap().unwrap();
        assert_eq!(c.len(), 3);
        // Not through another user's link.
        if profdev_testkit::is_root() {
            let link = d.path().join("link");
            std::os::unix::fs::symlink(&state, &link).unwrap();
            std::os::unix::fs::lchown(&link, Some(65534), None).unwrap();
            let e = read(&link).unwrap_err();
            assert!(e.contains("a symbolic link of uid 65534"), "{e}");
            assert!(open_state(&link.join("sub")).is_err());
        }
    }
}
