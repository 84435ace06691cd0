//! Unwind tables (profdev_mprof::unwind and c/unwind.c): the table of a
//! real object built without frame pointers has the rules its code needs,
//! the library walks such a program's stacks with it (and only its site
//! without), and corrupt tables are refused or, where only their entries
//! are wrong, followed within the stack's bounds: the program never
//! crashes.

use profdev_mprof::unwind::{self, Rule};
use profdev_mprof::{merge_stacks, Session, STACKS_ENV};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAM: &str = r#"
#include <stdlib.h>
static void *b[4096];
__attribute__((noinline)) void leaf_alloc(void **s) { *s = malloc(100); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void build(void) { for (int i = 0; i < 4096; i++) leaf_alloc(&b[i]); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void other(void) { for (int i = 0; i < 500; i++) leaf_alloc(&b[i]); __asm__ volatile("" ::: "memory"); }
int main(void) {
    build();
    for (int i = 0; i < 4096; i++) free(b[i]);
    other();
    for (int i = 0; i < 500; i++) free(b[i]);
    return 0;
}
"#;

/// PROGRAM built without frame pointers into `dir`.
fn compile(dir: &Path) -> PathBuf {
    let src = dir.join("nofp.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.join("nofp");
    let ok = Command::new("cc")
        .args([
            "-O2",
            "-fomit-frame-pointer",
            "-fno-optimize-sibling-calls",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("cannot run cc")
        .success();
    assert!(ok, "cc failed");
    exe
}

/// (bytes, depth) per stack of `exe` run with the tables in `tables`
/// (none: no tables), sorted by bytes.
fn run(exe: &Path, tables: Option<&Path>) -> Vec<(u64, usize)> {
    let session = Session::new().unwrap();
    let mut cmd = Command::new(exe);
    cmd.envs(session.env(None, &[], false)).env(STACKS_ENV, "1");
    if let Some(t) = tables {
        cmd.env(unwind::UNWIND_ENV, t);
    }
    let status = cmd.status().unwrap();
    assert!(status.success(), "{status}");
    let (reports, errors) = session.reports();
    assert!(errors.is_empty(), "{errors:?}");
    let mut v: Vec<_> = merge_stacks(&reports)
        .iter()
        .map(|s| (s.bytes, s.frames.len()))
        .collect();
    v.sort();
    v
}

/// The address of the function `name` in the object `data`.
fn symbol(data: &[u8], name: &str) -> u64 {
    use object::{Object, ObjectSymbol};
    let file = object::File::parse(data).unwrap();
    file.symbols()
        .find(|s| s.name() == Ok(name))
        .map(|s| s.address())
        .unwrap_or_else(|| panic!("no symbol {name}"))
}

/// The rule the table gives at `addr`.
fn rule_at(table: &[(u64, Rule)], addr: u64) -> Rule {
    let i = table.partition_point(|e| e.0 <= addr);
    assert!(i > 0, "{addr:#x} before the table");
    table[i - 1].1
}

#[test]
fn the_table_of_a_real_object_has_its_rules() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path());
    let data = std::fs::read(&exe).unwrap();
    let table = unwind::build(&data).unwrap();
    assert!(table.windows(2).all(|w| w[0].0 < w[1].0), "sorted");
    assert_eq!(table.last().map(|e| e.1), Some(Rule::None));
    // Every function's first instruction: the CFA is rsp+8, rbp unchanged.
    for f in ["leaf_alloc", "build", "other", "main"] {
        let a = symbol(&data, f);
        let entry = Rule::Rsp {
            cfa_off: 8,
            rbp_off: 0,
        };
        assert_eq!(rule_at(&table, a), entry, "{f}");
    }
    // build() pushes rbp first (it keeps a value in it): then CFA=rsp+16,
    // rbp saved at CFA-16.
    assert!(table.iter().any(|e| matches!(
        e.1,
        Rule::Rsp {
            cfa_off: 16,
            rbp_off: -16
        }
    )));
    // The program's libraries, as the loader finds them: libc among them.
    let modules = unwind::modules(&exe);
    assert_eq!(modules[0], std::fs::canonicalize(&exe).unwrap());
    assert!(
        modules
            .iter()
            .any(|m| m.to_string_lossy().contains("libc.so")),
        "{modules:?}"
    );
}

#[test]
fn the_library_walks_with_the_tables() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path());
    let tables = dir.path().join("unwind");
    unwind::write_tables(&tables, &unwind::modules(&exe)).unwrap();
    let with = run(&exe, Some(&tables));
    assert_eq!(with.len(), 2, "{with:?}");
    assert_eq!(with[0].0, 50000);
    assert_eq!(with[1].0, 409600);
    // site, other/build, main and above it libc's start.
    assert!(with.iter().all(|s| s.1 >= 4), "{with:?}");
}

/// A table file for `exe` holding `bytes`, in a new directory (case i).
fn bad_table(dir: &Path, i: usize, exe: &Path, bytes: &[u8]) -> PathBuf {
    let t = dir.join(format!("bad{i}"));
    std::fs::create_dir(&t).unwrap();
    let meta = std::fs::metadata(exe).unwrap();
    std::fs::write(t.join(unwind::file_name(&meta)), bytes).unwrap();
    t
}

#[test]
fn a_corrupt_table_is_refused_or_followed_within_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path());
    let meta = std::fs::metadata(&exe).unwrap();
    let mtime = (meta.mtime() as u64) * 1_000_000_000 + meta.mtime_nsec() as u64;
    let good = unwind::encode(
        &unwind::build(&std::fs::read(&exe).unwrap()).unwrap(),
        meta.size(),
        mtime,
    );
    let mut cases: Vec<Vec<u8>> = Vec::new();
    // A count larger than the file.
    let mut c = good.clone();
    c[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    cases.push(c);
    // A bad magic, a bad version, a short file, another module's size.
    let mut c = good.clone();
    c[0] = b'X';
    cases.push(c);
    let mut c = good.clone();
    c[8] = 9;
    cases.push(c);
    cases.push(good[..20].to_vec());
    let mut c = good.clone();
    c[16] ^= 1;
    cases.push(c);
    // A well-formed header over garbage entries: huge and negative
    // offsets, rules of every kind (the known ones alone, then unknown
    // kinds too), unsorted starts.
    let n = (good.len() - unwind::HEADER) / unwind::ENTRY;
    let end = u64::from_le_bytes(good[good.len() - 16..][..8].try_into().unwrap());
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for kinds in [2u8, 6] {
        let mut c = good[..unwind::HEADER].to_vec();
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Spread over the code (the good table's last start), unsorted.
            let start = x % (end + 1) + (i as u64 % 3);
            c.extend_from_slice(&start.to_le_bytes());
            let cfa = if i % 2 == 0 {
                (x >> 8) as i32
            } else {
                ((x >> 8) % 256) as i32 - 64
            };
            c.extend_from_slice(&cfa.to_le_bytes());
            c.extend_from_slice(&((x >> 40) as i16).to_le_bytes());
            c.push(if kinds == 2 {
                1 + (x >> 56) as u8 % 2
            } else {
                (x >> 56) as u8 % 6
            });
            c.push(0);
        }
        cases.push(c);
    }
    // Well-formed tables whose one rule leads out of the stack: far above
    // it, below it, through rbp (a plain register here), misaligned, rbp
    // saved far away.
    let rules = [
        Rule::Rsp {
            cfa_off: 1 << 30,
            rbp_off: 0,
        },
        Rule::Rsp {
            cfa_off: -(1 << 30),
            rbp_off: 0,
        },
        Rule::Rbp {
            cfa_off: 16,
            rbp_off: -16,
        },
        Rule::Rsp {
            cfa_off: 12,
            rbp_off: 0,
        },
        Rule::Rsp {
            cfa_off: 8,
            rbp_off: 32000,
        },
    ];
    for r in rules {
        cases.push(unwind::encode(&[(0, r)], meta.size(), mtime));
    }
    for (i, bytes) in cases.iter().enumerate() {
        let t = bad_table(dir.path(), i, &exe, bytes);
        let v = run(&exe, Some(&t));
        let total: u64 = v.iter().map(|s| s.0).sum();
        assert_eq!(total, 459600, "case {i}: {v:?}");
    }
}

/// One request to the table service at `dir`: `byte`, with `fds`
/// attached; the answer (None: the connection was refused).
fn request(dir: &Path, byte: u8, fds: &[std::os::fd::BorrowedFd]) -> Option<u8> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::io::Read;
    let mut s = std::os::unix::net::UnixStream::connect(dir.join(unwind::SOCKET)).ok()?;
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        assert!(cmsg.push(SendAncillaryMessage::ScmRights(fds)));
    }
    rustix::net::sendmsg(
        &s,
        &[std::io::IoSlice::new(&[byte])],
        &mut cmsg,
        SendFlags::empty(),
    )
    .unwrap();
    let mut answer = [0u8; 1];
    s.read_exact(&mut answer).unwrap();
    Some(answer[0])
}

/// The table service (unwind::serve) builds the table of the very file
/// a request carries, named as the library names it, the same bytes as
/// a table built before the run; it answers `0` to a request without
/// exactly one regular file, writes nothing for it, and refuses
/// connections once stopped.
#[test]
fn the_table_service_builds_the_table_of_the_file_it_is_sent() {
    use std::os::fd::AsFd;
    let tmp = tempfile::tempdir().unwrap();
    let exe = compile(tmp.path());
    let before = tmp.path().join("before");
    unwind::write_tables(&before, std::slice::from_ref(&exe)).unwrap();
    let dir = tmp.path().join("tables");
    unwind::write_tables(&dir, &[]).unwrap();
    let server = unwind::serve(&dir, 0o400).unwrap();
    let listed = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != unwind::SOCKET)
            .collect();
        v.sort();
        v
    };

    // A client that sends nothing holds up no other: a request made after
    // it is answered while it still waits for its own answer (`0`, once
    // the service's wait for its message ends).
    let silent = std::os::unix::net::UnixStream::connect(dir.join(unwind::SOCKET)).unwrap();
    let (r, w) = std::io::pipe().unwrap();
    assert_eq!(request(&dir, b'u', &[r.as_fd()]), Some(b'0'));
    assert_eq!(request(&dir, b'u', &[]), Some(b'0'));
    let f = std::fs::File::open(&exe).unwrap();
    assert_eq!(request(&dir, b'u', &[f.as_fd(), w.as_fd()]), Some(b'0'));
    assert!(listed().is_empty(), "{:?}", listed());

    assert_eq!(request(&dir, b'u', &[f.as_fd()]), Some(b'1'));
    let name = unwind::file_name(&std::fs::metadata(&exe).unwrap());
    assert_eq!(listed(), std::slice::from_ref(&name));
    assert_eq!(
        std::fs::read(dir.join(&name)).unwrap(),
        std::fs::read(before.join(&name)).unwrap()
    );
    let mode = std::fs::metadata(dir.join(&name)).unwrap().mode();
    assert_eq!(mode & 0o777, 0o400);
    // Asked again: there already.
    assert_eq!(request(&dir, b'u', &[f.as_fd()]), Some(b'1'));
    silent.set_nonblocking(true).unwrap();
    let mut none = [0u8; 1];
    assert_eq!(
        std::io::Read::read(&mut &silent, &mut none).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock),
        "the silent client was answered first"
    );

    drop(server);
    assert_eq!(request(&dir, b'u', &[f.as_fd()]), None);
}
