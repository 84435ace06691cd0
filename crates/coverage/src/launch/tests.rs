//! The server's bounds and conversations, tried.

use super::*;
use std::os::fd::AsRawFd;

/// Send one MOD line; the first line of the answer.
fn ask(server: &Server, line: &str) -> String {
    let mut c = UnixStream::connect(server.socket()).unwrap();
    c.write_all(line.as_bytes()).unwrap();
    let mut answer = String::new();
    BufReader::new(c).read_line(&mut answer).unwrap();
    answer
}

#[test]
fn a_client_gets_only_a_file_its_process_maps() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    std::fs::copy("/bin/true", &victim).unwrap();
    let meta = std::fs::metadata(&victim).unwrap();
    let (dev, ino) = (meta.dev(), meta.ino());
    let server = Server::new(&[]).unwrap();
    let me = std::process::id();
    let line = |lo: u64, hi: u64| {
        format!(
            "MOD {me} {dev} {ino} 0 {lo:x} {hi:x} {}\n",
            victim.display()
        )
    };
    // Not mapped by this process: refused, whatever it claims.
    assert_eq!(ask(&server, &line(0x10000, 0x20000)), "SKIP\n");
    let (_, notes) = server.collect();
    assert!(
        notes.iter().any(|n| n.contains("maps no such file")),
        "{notes:?}"
    );
    // Mapped: planned and served.
    let f = std::fs::File::open(&victim).unwrap();
    let len = meta.len() as usize;
    // SAFETY: a fresh private read-only mapping of a file we opened,
    // unmapped below; nothing else uses it.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(at, libc::MAP_FAILED);
    let lo = at as u64;
    let answer = ask(&server, &line(lo, lo + len as u64));
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(at, len) };
    assert!(answer.starts_with("SIZE "), "{answer:?}");
}

#[test]
fn a_conversation_given_up_leaves_no_store_pending() {
    // A runtime that takes the code and goes away without DONE (it
    // could not patch, or its process died): the store decided for
    // the new encoding must not stay pending, or the run's end
    // waits for it (30 s).
    let tmp = tempfile::tempdir().unwrap();
    let module = tmp.path().join("module");
    std::fs::copy("/bin/true", &module).unwrap();
    let meta = std::fs::metadata(&module).unwrap();
    let cache = Cache::open(&tmp.path().join("cache")).unwrap();
    let server = Server::with_cache(&[], Some(cache)).unwrap();
    let f = std::fs::File::open(&module).unwrap();
    let len = meta.len() as usize;
    // SAFETY: a fresh private read-only mapping of a file we opened,
    // unmapped below; nothing else uses it.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(at, libc::MAP_FAILED);
    let lo = at as u64;
    let mut c = UnixStream::connect(server.socket()).unwrap();
    writeln!(
        c,
        "MOD {} {} {} {lo:x} {lo:x} {:x} {}",
        std::process::id(),
        meta.dev(),
        meta.ino(),
        lo + len as u64,
        module.display()
    )
    .unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut size = String::new();
    r.read_line(&mut size).unwrap();
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(at, len) };
    assert!(size.starts_with("SIZE "), "{size:?}");
    // Any area: the code is never written anywhere.
    writeln!(c, "AT {:x} 0", lo.wrapping_sub(1 << 30)).unwrap();
    let mut code = String::new();
    r.read_line(&mut code).unwrap();
    assert!(code.starts_with("TEXT "), "{code:?}");
    drop((r, c));
    let storing = server.lock().storing.clone();
    profdev_testkit::wait_until(
        "the conversation's end",
        std::time::Duration::from_secs(60),
        || *storing.0.lock().unwrap() == 0,
    );
}

/// The tests of runs shared with another user, one at a time: they
/// share [`MAX_FOREIGN_CONNS`].
static SHARED_TESTS: Mutex<()> = Mutex::new(());

/// A file mapped readable and executable in this process.
struct Mapped(*mut libc::c_void, usize);

impl Mapped {
    fn new(path: &Path) -> Mapped {
        let f = std::fs::File::open(path).unwrap();
        let len = f.metadata().unwrap().len() as usize;
        // SAFETY: a fresh private mapping of a file we opened, unmapped
        // on drop; nothing reads it.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        Mapped(at, len)
    }

    /// The MOD line of this mapping of `path`.
    fn line(&self, path: &Path) -> String {
        let m = std::fs::metadata(path).unwrap();
        let lo = self.0 as u64;
        format!(
            "MOD {} {} {} {lo:x} {lo:x} {:x} {}\n",
            std::process::id(),
            m.dev(),
            m.ino(),
            lo + self.1 as u64,
            path.display()
        )
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new, no longer used.
        unsafe { libc::munmap(self.0, self.1) };
    }
}

fn root() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        Ok(())
    } else {
        Err("sharing a run with user 65534 needs root (chown)".into())
    }
}

#[test]
fn another_users_huge_modules_are_refused_from_their_headers() {
    if !profdev_testkit::privileged("a run shared with user 65534", root()) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    std::fs::File::create(&plain)
        .unwrap()
        .set_len(768 << 20)
        .unwrap();
    let elf = tmp.path().join("elf");
    crate::image::sparse_elf(&elf, 768 << 20).unwrap();
    // Root's own: only the run's bound stops it.
    let roots = tmp.path().join("roots");
    crate::image::sparse_elf(&roots, 768 << 20).unwrap();
    for p in [&plain, &elf] {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    }
    let server = Server::with_cache(&[], None).unwrap();
    let _one = SHARED_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    server.share_with(65534, 65534).unwrap();
    let t = std::time::Instant::now();
    for p in [&plain, &elf, &roots] {
        let m = Mapped::new(p);
        assert_eq!(ask(&server, &m.line(p)), "SKIP\n", "{}", p.display());
    }
    // Refused from their headers: no time to read 1.5 GiB.
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
    let (_, notes) = server.collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("plain") && n.contains("not an ELF file")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("its code (768.0 MiB) is more than the 4.0 MiB")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("roots: planning it would take") && n.contains("64 MiB")),
        "{notes:?}"
    );
}

/// One module's conversation for the mapping `m` of `path`, with the
/// area `below` bytes below it (the code is never written anywhere):
/// whether the code came.
fn converse(server: &Server, m: &Mapped, path: &Path, below: u64) -> bool {
    converse_code(server, m, path, below).is_some()
}

#[test]
fn a_load_whose_area_lies_at_another_distance_gets_the_code_moved() {
    // The area offered (the distance of the first load) could not be
    // mapped: the code is moved, not encoded again, and is what encoding
    // for that place would have given.
    let tmp = tempfile::tempdir().unwrap();
    let module = tmp.path().join("module");
    std::fs::copy("/bin/true", &module).unwrap();
    let server = Server::with_cache(&[], None).unwrap();
    let m = Mapped::new(&module);
    let first = converse_code(&server, &m, &module, 1 << 30).expect("the code");
    let below = (1 << 30) + (77 << 12);
    let second = converse_code(&server, &m, &module, below).expect("the code");
    assert_eq!(server.encodings(), (1, 1), "moved, not encoded again");
    let bytes = std::fs::read(&module).unwrap();
    let plan = crate::plan::Plan::of_bytes(&bytes, &module).unwrap();
    let bias = m.0 as u64;
    let fresh = crate::encode::encode(&plan, bias, bias.wrapping_sub(below), 0);
    assert!(fresh.code.len() > 1000);
    assert!(
        second.0 == fresh.code,
        "the moved code is the fresh encoding"
    );
    assert_eq!(second.1, first.1, "as many patches");
    assert!(second.0 != first.0, "the fields reaching the module moved");
}

/// A conversation begun: the module's MOD line sent, its SIZE answer
/// read (the stream, and a reader of it holding that line).
fn converse_open(
    server: &Server,
    m: &Mapped,
    path: &Path,
) -> (UnixStream, BufReader<UnixStream>, String) {
    let mut c = UnixStream::connect(server.socket()).unwrap();
    c.write_all(m.line(path).as_bytes()).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("SIZE "), "{line:?}");
    (c, r, line)
}

/// [`converse`], and the code and the number of patches that came.
fn converse_code(server: &Server, m: &Mapped, path: &Path, below: u64) -> Option<(Vec<u8>, u64)> {
    let (mut c, mut r, mut line) = converse_open(server, m, path);
    writeln!(c, "AT {:x} 0", (m.0 as u64).wrapping_sub(below)).unwrap();
    line.clear();
    r.read_line(&mut line).unwrap();
    let code = line.trim_end().strip_prefix("TEXT ")?;
    let w: Vec<u64> = code.split(' ').map(|x| hex(x).unwrap()).collect();
    let mut sink = vec![0u8; w[0] as usize + crate::encode::wire::WIRE * w[1] as usize];
    r.read_exact(&mut sink).unwrap();
    writeln!(c, "DONE 0").unwrap();
    sink.truncate(w[0] as usize);
    Some((sink, w[1]))
}

#[test]
fn a_settled_module_is_known_by_its_stamp_and_one_just_written_is_not() {
    // The system's `true`, unchanged for long, gets its key remembered:
    // the next run takes it without reading the module. A copy made just
    // now does not (a change to it could fall in the same clock tick).
    let tmp = tempfile::tempdir().unwrap();
    let old = std::fs::canonicalize("/bin/true").unwrap();
    let st = Stamp::of(&std::fs::metadata(&old).unwrap());
    assert!(
        st.settled_at(crate::cache::now()),
        "{} changed in the last seconds",
        old.display()
    );
    let fresh = tmp.path().join("fresh");
    std::fs::copy(&old, &fresh).unwrap();
    let cache_dir = tmp.path().join("cache");
    let server = Server::with_cache(&[], Some(Cache::open(&cache_dir).unwrap())).unwrap();
    for p in [&old, &fresh] {
        assert!(converse(&server, &Mapped::new(p), p, 1 << 30));
    }
    let stamps = || {
        std::fs::read_dir(&cache_dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("id-"))
            .count()
    };
    assert_eq!(stamps(), 1, "one stamp: the settled module's");
    let cache = Cache::open(&cache_dir).unwrap();
    let key = cache.known(&st, Mode::Counts).unwrap().expect("its key");
    let fresh_st = Stamp::of(&std::fs::metadata(&fresh).unwrap());
    assert_eq!(cache.known(&fresh_st, Mode::Counts).unwrap(), None);
    // The entry it names is the one the run stored.
    let storing = server.lock().storing.clone();
    profdev_testkit::wait_until(
        "the cache files written",
        std::time::Duration::from_secs(60),
        || *storing.0.lock().unwrap() == 0,
    );
    assert!(cache.load_split(&key).unwrap().is_some());
    // A second run takes the plan and encoding from there.
    let again = Server::with_cache(&[], Some(Cache::open(&cache_dir).unwrap())).unwrap();
    assert!(converse(&again, &Mapped::new(&old), &old, 1 << 30));
    assert_eq!(again.encodings_from_cache(), 1);
}

#[test]
fn another_users_process_gets_a_bounded_number_of_encodings() {
    if !profdev_testkit::privileged("a run shared with user 65534", root()) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let module = tmp.path().join("module");
    std::fs::copy("/bin/true", &module).unwrap();
    let server = Server::with_cache(&[], None).unwrap();
    let _one = SHARED_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    server.share_with(65534, 65534).unwrap();
    let m = Mapped::new(&module);
    for k in 0..FOREIGN_ENCODINGS as u64 {
        assert!(converse(&server, &m, &module, (1 << 30) + (k << 12)));
    }
    // A distance served already still is; a new one is not.
    assert!(converse(&server, &m, &module, 1 << 30));
    assert!(!converse(&server, &m, &module, 1 << 29));
    // One encoded, the others moved from it (Encoded::code_at), each
    // kept for the run all the same: the bound is on what is kept.
    assert_eq!(server.encodings(), (1, FOREIGN_ENCODINGS as u64));
    let (_, notes) = server.collect();
    assert!(
        notes.iter().any(|n| n.contains("more than 8 areas")),
        "{notes:?}"
    );
}

#[test]
fn another_users_modules_are_cached_apart() {
    if !profdev_testkit::privileged("a run shared with user 65534", root()) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let module = tmp.path().join("module");
    std::fs::copy("/bin/true", &module).unwrap();
    let cache_dir = tmp.path().join("cache");
    let cache = Cache::open(&cache_dir).unwrap();
    let server = Server::with_cache(&[], Some(cache)).unwrap();
    let _one = SHARED_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    server.share_with(65534, 65534).unwrap();
    let m = Mapped::new(&module);
    assert!(converse(&server, &m, &module, 1 << 30));
    let files = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("mod-"))
            .collect()
    };
    let theirs = cache_dir.join("65534");
    profdev_testkit::wait_until(
        "user 65534's cache file",
        std::time::Duration::from_secs(60),
        || theirs.exists() && !files(&theirs).is_empty(),
    );
    assert_eq!(files(&cache_dir), Vec::<String>::new());
    let mode = std::fs::metadata(&theirs).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

#[test]
fn a_forged_report_is_refused_from_its_size_and_reports_are_counted() {
    let server = Server::with_cache(&[], None).unwrap();
    let out = server.reports_dir();
    std::fs::File::create(out.join("cov.1.0"))
        .unwrap()
        .set_len(128 << 20)
        .unwrap();
    std::fs::write(
        out.join("cov.2.0"),
        "profdev-coverage 1\npid 2\ntraps 0\nend\n",
    )
    .unwrap();
    let t = std::time::Instant::now();
    let (_, notes) = server.collect();
    assert!(t.elapsed() < std::time::Duration::from_secs(1));
    assert!(
        notes
            .iter()
            .any(|n| n.contains("cov.1.0") && n.contains("134217728 bytes, more than the 256")),
        "{notes:?}"
    );
    assert!(!notes.iter().any(|n| n.contains("cov.2.0")), "{notes:?}");
    // At most MAX_REPORTS are read.
    for i in 0..MAX_REPORTS {
        std::fs::File::create(out.join(format!("cov.{}.1", i + 10))).unwrap();
    }
    let (_, notes) = server.collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("more than 10000 reports; the others were not read")),
        "{notes:?}"
    );
}

#[test]
fn another_users_connections_are_bounded() {
    if !profdev_testkit::privileged("a run shared with user 65534", root()) {
        return;
    }
    let server = Server::with_cache(&[], None).unwrap();
    let _one = SHARED_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    server.share_with(65534, 65534).unwrap();
    let held: Vec<UnixStream> = (0..MAX_FOREIGN_CONNS)
        .map(|_| UnixStream::connect(server.socket()).unwrap())
        .collect();
    // One more than the bound: closed at once.
    let mut extra = UnixStream::connect(server.socket()).unwrap();
    extra
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut b = [0u8; 1];
    assert_eq!(extra.read(&mut b).unwrap(), 0);
    // Once they go, a connection is served again.
    drop(held);
    let me = std::process::id();
    let line = format!("MOD {me} 1 1 0 1000 2000 /nonexistent\n");
    profdev_testkit::wait_until(
        "a connection served",
        std::time::Duration::from_secs(60),
        || {
            // Until the server has seen the others go, a connection is
            // still over the bound: closed at once (EPIPE on the write).
            let Ok(mut c) = UnixStream::connect(server.socket()) else {
                return false;
            };
            if c.write_all(line.as_bytes()).is_err() {
                return false;
            }
            let mut answer = String::new();
            let _ = BufReader::new(c).read_line(&mut answer);
            answer == "SKIP\n"
        },
    );
}

#[test]
fn notes_are_bounded() {
    let mut s = State::default();
    for i in 0..MAX_NOTES + 5 {
        s.note(format!("note {i}"));
        s.note(format!("note {i}"));
    }
    assert_eq!(s.notes.len(), MAX_NOTES + 1);
    assert!(s.notes[MAX_NOTES].contains("the others were dropped"));
}

#[test]
fn private_directories_are_0700() {
    let server = Server::with_cache(&[], None).unwrap();
    let dir = server.reports_dir().parent().unwrap().to_path_buf();
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
}

#[test]
fn the_sweep_removes_only_what_nothing_uses() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let made = |name: &str, runtime: bool| -> PathBuf {
        let d = t.join(name);
        std::fs::create_dir(&d).unwrap();
        if runtime {
            std::fs::copy("/bin/true", d.join(RUNTIME_NAME)).unwrap();
            std::fs::create_dir(d.join("out")).unwrap();
        }
        d
    };
    let stale = made("profdev-cov.stale", true);
    let locked = made("profdev-cov.locked", true);
    let mapped = made("profdev-cov.mapped", true);
    let fresh = made("profdev-cov.fresh", false);
    // A run's whose runtime was removed while its process ran on.
    let left = made("profdev-cov.left", true);
    std::fs::remove_file(left.join(RUNTIME_NAME)).unwrap();
    let other = made("other", true);
    let lock = std::fs::File::open(&locked).unwrap();
    // SAFETY: flock on a descriptor we own.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    let m = Mapped::new(&mapped.join(RUNTIME_NAME));
    assert_eq!(sweep(t), 2);
    assert!(!stale.exists() && !left.exists());
    for kept in [&locked, &mapped, &fresh, &other] {
        assert!(kept.exists(), "{}", kept.display());
    }
    // Once unmapped and unlocked, they go too (not the fresh one
    // without a runtime: a run being set up).
    drop((m, lock));
    assert_eq!(sweep(t), 2);
    assert!(fresh.exists() && other.exists());
}

#[test]
fn hit_mode_plans_branch_edges_only_for_a_module_with_lines() {
    // `cprof --hits --lcov` (edges): a module with DWARF gets its branches'
    // edges; a stripped one (no debug file either) its hits alone, so no
    // jump keeps a trampoline for edges no line would show.
    if !profdev_testkit::tools("edges only with lines", &["cc", "strip"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("b.c");
    std::fs::write(
        &src,
        "int f(int x) { return x > 3 ? x * 2 : x + 1; }\n\
         int main(int c, char **v) { (void)v; for (int i = 0; i < c; i++) c += f(i) & 1; return c; }\n",
    )
    .unwrap();
    let full = tmp.path().join("full");
    profdev_testkit::cc(&src, &["-g", "-O0"], &full);
    let stripped = tmp.path().join("stripped");
    let st = std::process::Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&full)
        .status()
        .unwrap();
    assert!(st.success());
    let server = Server::with_cache(&[], None).unwrap();
    server.set_mode(Mode::Edges);
    for path in [&full, &stripped] {
        let m = Mapped::new(path);
        assert!(converse(&server, &m, path, 1 << 30), "{}", path.display());
    }
    let (modules, notes) = server.into_collected();
    let branches = |p: &Path| {
        let m = modules.iter().find(|m| m.path == p);
        m.unwrap_or_else(|| panic!("{} collected: {notes:?}", p.display()))
            .branches
            .len()
    };
    assert!(branches(&full) > 0, "the module with lines has its edges");
    assert_eq!(branches(&stripped), 0, "the stripped one, hits alone");
}

#[test]
fn the_counts_taken_with_the_server_are_the_counts_collected() {
    // into_collected moves each plan's blocks into the counts (in
    // place); what it gives is what collect gives, counts, uncounted
    // blocks and notes alike, in counting and hit mode.
    for mode in [Mode::Counts, Mode::Hits] {
        let server = Server::with_cache(&[], None).unwrap();
        server.set_mode(mode);
        let path = Path::new("/bin/true");
        let m = Mapped::new(path);
        assert!(converse(&server, &m, path, 1 << 30));
        let n = server.lock().entries[0].plan.counters();
        assert!(n > 10, "{n}");
        // Counters 0, 3, 7, ... ran; in counting mode, k times.
        let mut report = format!("profdev-coverage 1\npid 2\ntraps 0\nM 0 {n:x} {n}\n");
        for k in (0..n).step_by(4) {
            report += &format!("{k:x} {:x}\n", k % 5 + 1);
        }
        report += "end\n";
        std::fs::write(server.reports_dir().join("cov.2.0"), report).unwrap();
        let (want, want_notes) = server.collect();
        assert_eq!(want.len(), 1);
        assert!(want[0].blocks.iter().any(|b| b.count > 0));
        assert!(want[0].blocks.iter().any(|b| b.count == 0));
        let (got, notes) = server.into_collected();
        assert_eq!(got, want, "{mode:?}");
        assert_eq!(notes, want_notes);
    }
}

#[test]
fn modules_are_listed_in_the_order_their_loads_were_served() {
    // A process opens conversations ahead of their turn (the runtime's
    // cover_all): the entries are made as the server finds them, the
    // loads served in the loader's order. The counts follow the loads.
    let server = Server::with_cache(&[], None).unwrap();
    let (first, second) = (Path::new("/bin/true"), Path::new("/bin/false"));
    let (m1, m2) = (Mapped::new(first), Mapped::new(second));
    // The first module's entry is made (its SIZE came) ...
    let (mut c, mut r, mut line) = converse_open(&server, &m1, first);
    // ... but the second module's load is served first.
    assert!(converse(&server, &m2, second, 1 << 30));
    writeln!(c, "AT {:x} 0", (m1.0 as u64).wrapping_sub(1 << 30)).unwrap();
    line.clear();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("TEXT "), "{line:?}");
    let (modules, _) = server.collect();
    let paths: Vec<&Path> = modules.iter().map(|m| m.path.as_path()).collect();
    assert_eq!(paths, [second, first]);
}
