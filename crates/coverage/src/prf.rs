//! `MODULE.prf`: the counts `cprof -r` records, summed over runs.
//!
//! Inferno's `.prf` (spec §2.6) was text, one `"%d %d\n"` line per Dis pc
//! and its count, in ascending pc, summed with the file already there.
//! profdev keeps those lines and adds what a Linux module needs to be
//! found and checked again:
//!
//! ```text
//! profdev-prf 1 <build id in hex, or -> <module path>\n     the header
//! <pc> <count>\n        one per instruction, pc ascending (decimal, link-time address)
//! b <pc> <taken> <not taken>\n     one per conditional jump, pc ascending, after the pcs
//! ```
//!
//! * The header names the module's file (the rest of the line: a path may
//!   hold blanks, not a newline) so that `cprof -m MODULE` without a
//!   command finds the file whose line table places the pcs, and its build
//!   id, checked against that file and against every run merged in.
//! * Unlike Inferno's, a count may be 0: every instruction the plan knew
//!   is listed, so the records alone tell the code that never ran (`-`).
//! * Merging adds counts instruction by instruction (saturating at
//!   2^64-1) and jump by jump. Records of another build are refused, with
//!   a sentence.
//!
//! The parser takes untrusted bytes (a `.prf` in the current directory
//! may be anyone's, and is opened without following a final symbolic
//! link): it reads at most [`MAX_PRF`] bytes and keeps at most one entry
//! per line it has read, so its memory is bounded by the input's length;
//! pcs must strictly ascend. Files are written through
//! `profdev_safefile` (a unique temporary, `O_EXCL|O_NOFOLLOW`, renamed).

use crate::counts::{Branch, ModuleCoverage};
use crate::lines::instruction_counts;
use std::path::{Path, PathBuf};

/// The header's first word.
pub const MAGIC: &str = "profdev-prf";
/// The format version this module reads and writes.
pub const VERSION: u32 = 1;
/// The largest `.prf` read: 256 MiB (about 15 million instructions).
/// Parsing keeps at most 16 bytes per line of at least 4 bytes, so a
/// hostile file costs at most five times its length.
pub const MAX_PRF: u64 = 256 << 20;

/// Why a `.prf` could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrfError {
    /// Malformed contents.
    #[error("{file}: line {line}: {why}")]
    Malformed {
        /// The file (or `<input>`).
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        why: String,
    },
    /// The records are of another build of the module.
    #[error(
        "{file} holds counts of another build of {module} (build id {theirs}, this one {ours}): \
         move it away or delete it to record anew"
    )]
    OtherBuild {
        /// The `.prf` file.
        file: String,
        /// The module's path.
        module: String,
        /// Build id in the file.
        theirs: String,
        /// Build id of this run's module.
        ours: String,
    },
    /// A module path a header cannot hold.
    #[error("the module path {0:?} holds a newline, which a .prf header cannot carry")]
    BadPath(String),
    /// Reading or writing failed.
    #[error("{0}")]
    Io(String),
}

/// The records of one module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prf {
    /// The module's build id.
    pub build_id: Option<Vec<u8>>,
    /// The module's file.
    pub path: String,
    /// (pc, count), pc strictly ascending.
    pub insns: Vec<(u64, u64)>,
    /// Conditional jumps, addr strictly ascending.
    pub branches: Vec<Branch>,
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || s.is_empty() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn id_text(id: &Option<Vec<u8>>) -> String {
    id.as_deref().map_or_else(|| "-".into(), hex)
}

/// `MODULE.prf` for a module file: its basename and `.prf`.
pub fn file_name(module: &Path) -> String {
    let base = module
        .file_name()
        .map_or_else(|| module.to_string_lossy(), |b| b.to_string_lossy());
    format!("{base}.prf")
}

impl Prf {
    /// The records of one run of `m`; the header names its file without a
    /// final symbolic link ([`ModuleCoverage::file_path`]: a library
    /// reached through its soname link is recorded as the file the link
    /// led to, which `cprof -m` opens again later).
    pub fn from_coverage(m: &ModuleCoverage) -> Prf {
        let mut branches = m.branches.clone();
        branches.sort_by_key(|b| b.addr);
        branches.dedup_by_key(|b| b.addr);
        Prf {
            build_id: m.build_id.clone(),
            path: m.file_path().to_string_lossy().into_owned(),
            insns: instruction_counts(m),
            branches,
        }
    }

    /// True if some instruction ran.
    pub fn has_data(&self) -> bool {
        self.insns.iter().any(|&(_, c)| c > 0)
    }

    /// Parse a `.prf`; `file` names it in errors.
    pub fn parse(bytes: &[u8], file: &str) -> Result<Prf, PrfError> {
        let bad = |line: usize, why: String| PrfError::Malformed {
            file: file.into(),
            line,
            why,
        };
        let text = std::str::from_utf8(bytes).map_err(|e| {
            bad(
                1 + bytes[..e.valid_up_to()]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count(),
                "not text".into(),
            )
        })?;
        if !text.is_empty() && !text.ends_with('\n') {
            return Err(bad(
                text.lines().count(),
                "the last line has no newline (a partial write?)".into(),
            ));
        }
        let mut lines = text
            .split_terminator('\n')
            .enumerate()
            .map(|(i, l)| (i + 1, l));
        let (_, header) = lines.next().ok_or_else(|| {
            bad(
                1,
                format!("empty: a .prf starts with a \"{MAGIC} {VERSION}\" header"),
            )
        })?;
        let mut h = header.splitn(4, ' ');
        if h.next() != Some(MAGIC) {
            return Err(bad(
                1,
                format!("not a profdev .prf (it starts with \"{MAGIC} {VERSION}\")"),
            ));
        }
        if h.next() != Some("1") {
            return Err(bad(
                1,
                format!("unknown version: this profdev reads version {VERSION}"),
            ));
        }
        let build_id = match h.next() {
            Some("-") => None,
            Some(s) => Some(unhex(s).ok_or_else(|| bad(1, format!("bad build id {s:?}")))?),
            None => return Err(bad(1, "the header has no build id".into())),
        };
        let path = match h.next() {
            Some(p) if !p.is_empty() => p.to_string(),
            _ => return Err(bad(1, "the header has no module path".into())),
        };
        let mut prf = Prf {
            build_id,
            path,
            ..Prf::default()
        };
        let num = |line: usize, s: &str| {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(line, format!("{s:?} is not a decimal number")));
            }
            s.parse::<u64>()
                .map_err(|_| bad(line, format!("{s} is too large")))
        };
        for (n, l) in lines {
            let words: Vec<&str> = l.split(' ').collect();
            match words.as_slice() {
                [pc, count] => {
                    if !prf.branches.is_empty() {
                        return Err(bad(n, "an instruction after the branch records".into()));
                    }
                    let (pc, count) = (num(n, pc)?, num(n, count)?);
                    if prf.insns.last().is_some_and(|&(p, _)| p >= pc) {
                        return Err(bad(n, format!("pc {pc} is not above the one before")));
                    }
                    prf.insns.push((pc, count));
                }
                ["b", pc, taken, not_taken] => {
                    let b = Branch {
                        addr: num(n, pc)?,
                        taken: num(n, taken)?,
                        not_taken: num(n, not_taken)?,
                    };
                    if prf.branches.last().is_some_and(|p| p.addr >= b.addr) {
                        return Err(bad(
                            n,
                            format!("branch pc {} is not above the one before", b.addr),
                        ));
                    }
                    prf.branches.push(b);
                }
                _ => {
                    return Err(bad(
                        n,
                        "expected \"PC COUNT\" or \"b PC TAKEN NOT_TAKEN\"".into(),
                    ))
                }
            }
        }
        Ok(prf)
    }

    /// The file's bytes.
    pub fn encode(&self) -> Result<Vec<u8>, PrfError> {
        use std::fmt::Write as _;
        if self.path.contains('\n') || self.path.is_empty() {
            return Err(PrfError::BadPath(self.path.clone()));
        }
        let mut s = format!(
            "{MAGIC} {VERSION} {} {}\n",
            id_text(&self.build_id),
            self.path
        );
        for (pc, c) in &self.insns {
            let _ = writeln!(s, "{pc} {c}");
        }
        for b in &self.branches {
            let _ = writeln!(s, "b {} {} {}", b.addr, b.taken, b.not_taken);
        }
        Ok(s.into_bytes())
    }

    /// Add `other`'s counts to these (same build only; `file` names this
    /// record in the refusal).
    pub fn merge(&mut self, other: &Prf, file: &str) -> Result<(), PrfError> {
        if self.build_id != other.build_id {
            return Err(PrfError::OtherBuild {
                file: file.into(),
                module: other.path.clone(),
                theirs: id_text(&self.build_id),
                ours: id_text(&other.build_id),
            });
        }
        self.insns = merge_sorted(
            &self.insns,
            &other.insns,
            |p| p.0,
            |a, b| (a.0, a.1.saturating_add(b.1)),
        );
        self.branches = merge_sorted(
            &self.branches,
            &other.branches,
            |b| b.addr,
            |a, b| Branch {
                addr: a.addr,
                taken: a.taken.saturating_add(b.taken),
                not_taken: a.not_taken.saturating_add(b.not_taken),
            },
        );
        Ok(())
    }
}

/// The union of two ascending lists, equal keys combined.
fn merge_sorted<T: Clone>(
    a: &[T],
    b: &[T],
    key: impl Fn(&T) -> u64,
    add: impl Fn(&T, &T) -> T,
) -> Vec<T> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if key(x) == key(y) => {
                out.push(add(x, y));
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if key(x) < key(y) => {
                out.push(x.clone());
                i += 1;
            }
            (Some(x), None) => {
                out.push(x.clone());
                i += 1;
            }
            (_, Some(y)) => {
                out.push(y.clone());
                j += 1;
            }
            (None, None) => break,
        }
    }
    out
}

/// Read the `.prf` at `path` (at most [`MAX_PRF`] bytes); `Ok(None)` if
/// there is none.
pub fn read(path: &Path) -> Result<Option<Prf>, PrfError> {
    use profdev_symbolize::open::{read_bounded, Follow};
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    let bytes = read_bounded(path, MAX_PRF, Follow::No)
        .map_err(|e| PrfError::Io(format!("cannot read {}: {e}", path.display())))?;
    Prf::parse(&bytes, &path.display().to_string()).map(Some)
}

/// `cprof -r` for one module: add the run's counts to `dir/MODULE.prf`
/// (created if missing). Nothing is written when no instruction ran.
/// Returns the file and whether it was written.
pub fn record(dir: &Path, m: &ModuleCoverage) -> Result<(PathBuf, bool), PrfError> {
    let path = dir.join(file_name(&m.path));
    let mut run = Prf::from_coverage(m);
    if !run.has_data() {
        return Ok((path, false));
    }
    if let Some(mut old) = read(&path)? {
        old.merge(&run, &path.display().to_string())?;
        old.path = run.path;
        run = old;
    }
    let bytes = run.encode()?;
    profdev_safefile::write_file(&path, &bytes, 0o644)
        .map_err(|e| PrfError::Io(format!("cannot write {}: {e}", path.display())))?;
    Ok((path, true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counts::Block;

    fn module(count: u64) -> ModuleCoverage {
        ModuleCoverage {
            path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
            build_id: Some(vec![0xab, 0x01]),
            blocks: vec![
                Block {
                    start: 16,
                    end: 20,
                    insns: vec![16, 18].into(),
                    count,
                },
                Block {
                    start: 20,
                    end: 22,
                    insns: vec![20].into(),
                    count: 0,
                },
            ],
            branches: vec![Branch {
                addr: 18,
                taken: count,
                not_taken: 0,
            }],
            uncounted: 0,
            file: None,
        }
    }

    #[test]
    fn encode_parse_and_merge() {
        let p = Prf::from_coverage(&module(3));
        let text = String::from_utf8(p.encode().unwrap()).unwrap();
        assert_eq!(
            text,
            "profdev-prf 1 ab01 /usr/lib/x86_64-linux-gnu/libc.so.6\n16 3\n18 3\n20 0\nb 18 3 0\n"
        );
        assert_eq!(Prf::parse(text.as_bytes(), "x").unwrap(), p);
        assert_eq!(file_name(Path::new(&p.path)), "libc.so.6.prf");
        let mut q = p.clone();
        q.merge(&Prf::from_coverage(&module(4)), "x").unwrap();
        assert_eq!(q.insns, [(16, 7), (18, 7), (20, 0)]);
        assert_eq!(q.branches[0].taken, 7);
        let mut other = Prf::from_coverage(&module(1));
        other.build_id = Some(vec![1]);
        let e = q.merge(&other, "libc.so.6.prf").unwrap_err();
        assert_eq!(
            e.to_string(),
            "libc.so.6.prf holds counts of another build of \
             /usr/lib/x86_64-linux-gnu/libc.so.6 (build id ab01, this one 01): move it away or \
             delete it to record anew"
        );
    }

    #[test]
    fn hostile_inputs_are_refused_with_their_line() {
        for (text, line) in [
            ("", 1),
            ("hello\n", 1),
            ("profdev-prf 2 - /x\n", 1),
            ("profdev-prf 1 zz /x\n", 1),
            ("profdev-prf 1 -\n", 1),
            ("profdev-prf 1 - /x\n5 1\n5 1\n", 3),
            ("profdev-prf 1 - /x\n5 1\n", 0),
            ("profdev-prf 1 - /x\n5 -1\n", 2),
            ("profdev-prf 1 - /x\n99999999999999999999 1\n", 2),
            ("profdev-prf 1 - /x\nb 1 2 3\n4 5\n", 3),
            ("profdev-prf 1 - /x\n1 2", 2),
        ] {
            match Prf::parse(text.as_bytes(), "t") {
                Err(PrfError::Malformed { line: l, .. }) => assert_eq!(l, line, "{text:?}"),
                Ok(_) if line == 0 => {}
                r => panic!("{text:?}: {r:?}"),
            }
        }
    }

    #[test]
    fn record_writes_merges_and_refuses_another_build() {
        let dir = tempfile::tempdir().unwrap();
        let (path, wrote) = record(dir.path(), &module(0)).unwrap();
        assert!(
            !wrote && !path.exists(),
            "a run with no data writes nothing"
        );
        record(dir.path(), &module(2)).unwrap();
        record(dir.path(), &module(5)).unwrap();
        let back = read(&path).unwrap().unwrap();
        assert_eq!(back.insns, [(16, 7), (18, 7), (20, 0)]);
        let mut other = module(1);
        other.build_id = Some(vec![9]);
        assert!(matches!(
            record(dir.path(), &other),
            Err(PrfError::OtherBuild { .. })
        ));
        assert_eq!(read(&path).unwrap().unwrap(), back, "left as it was");
    }
}
