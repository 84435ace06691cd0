use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The root-only tests: run as root; otherwise say SKIPPED, or fail under
/// PROFDEV_REQUIRE_PRIVILEGED=1 (as the cli tests' `privileged()` does).
fn privileged(what: &str) -> bool {
    if root() {
        return true;
    }
    if std::env::var("PROFDEV_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
        panic!("{what} needs root, and PROFDEV_REQUIRE_PRIVILEGED=1");
    }
    eprintln!("SKIPPED {what}: needs root");
    false
}

#[test]
fn write_file_replaces_a_symlink_and_never_writes_through_it() {
    let d = tempfile::tempdir().unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::os::unix::fs::symlink(&victim, out.join("kpdata")).unwrap();
    write_file(out.join("kpdata"), b"new counts", 0o600).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    let m = std::fs::symlink_metadata(out.join("kpdata")).unwrap();
    assert!(m.file_type().is_file());
    assert_eq!(m.mode() & 0o7777, 0o600);
    assert_eq!(std::fs::read(out.join("kpdata")).unwrap(), b"new counts");
    assert_eq!(entries(&out), ["kpdata"]);
}

#[test]
fn write_file_replaces_a_hard_link_without_changing_the_other_name() {
    let d = tempfile::tempdir().unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::fs::hard_link(&victim, d.path().join("gmon.out")).unwrap();
    write_file(d.path().join("gmon.out"), b"profile", 0o644).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(
        std::fs::read(d.path().join("gmon.out")).unwrap(),
        b"profile"
    );
}

#[test]
fn an_uncommitted_file_leaves_nothing_and_keeps_the_old_one() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("kpdata");
    std::fs::write(&path, b"old").unwrap();
    let mut f = SafeFile::create(&path, 0o600).unwrap();
    f.write_bytes(b"half of the new").unwrap();
    assert_eq!(
        entries(d.path()).len(),
        2,
        "the temporary exists while writing"
    );
    drop(f);
    assert_eq!(entries(d.path()), ["kpdata"]);
    assert_eq!(std::fs::read(&path).unwrap(), b"old");
}

#[test]
fn concurrent_writers_use_distinct_temporaries() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("gmon.out");
    let files: Vec<SafeFile> = (0..8)
        .map(|_| SafeFile::create(&path, 0o644).unwrap())
        .collect();
    assert_eq!(entries(d.path()).len(), 8, "eight temporaries, eight names");
    for (i, mut f) in files.into_iter().enumerate() {
        f.write_bytes(format!("writer {i}").as_bytes()).unwrap();
        f.commit().unwrap();
    }
    assert_eq!(entries(d.path()), ["gmon.out"]);
    assert_eq!(std::fs::read(&path).unwrap(), b"writer 7");
}

#[test]
fn a_directory_writable_by_others_and_not_sticky_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let shared = d.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    for bits in [0o777, 0o775, 0o757] {
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(bits)).unwrap();
        let e = write_file(shared.join("kpdata"), b"x", 0o600).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "refusing to write in {0}: it is writable by other users and not sticky, so they \
                 could swap its files; use a directory only you can write (chmod go-w {0}) or a \
                 sticky one such as /tmp",
                shared.display()
            )
        );
        assert!(open_append(shared.join("log"), 0o600).is_err());
        assert!(entries(&shared).is_empty());
    }
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    write_file(shared.join("kpdata"), b"x", 0o600).unwrap();
    assert_eq!(entries(&shared), ["kpdata"]);
}

#[test]
fn a_name_that_is_no_file_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let dir = Dir::open(d.path()).unwrap();
    let e = dir.write_file("a/b", b"x", 0o600).unwrap_err();
    assert!(e.to_string().contains("does not name a file"), "{e}");
    assert!(write_file("/", b"x", 0o600).is_err());
    // A missing directory is told about the file the caller named.
    let e = write_file("/nonexistent/dir/gmon.out", b"x", 0o600).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot write /nonexistent/dir/gmon.out: No such file or directory (os error 2)"
    );
}

#[test]
fn open_append_creates_0600_and_appends_records_whole() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("prf.log");
    let mut f = open_append(&path, 0o600).unwrap();
    f.append(b"header").unwrap();
    f.append(b"record1").unwrap();
    drop(f);
    let mut f = open_append(&path, 0o600).unwrap();
    assert_eq!(f.len().unwrap(), 13);
    f.append(b"record2").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"headerrecord1record2");
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
}

#[test]
fn open_append_takes_extra_permission_bits_from_an_old_log() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("old.log");
    std::fs::write(&path, b"old records").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    open_append(&path, 0o600).unwrap().append(b"+").unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(std::fs::read(&path).unwrap(), b"old records+");
}

#[test]
fn create_append_refuses_an_existing_file() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("prf.log");
    std::fs::write(&path, b"theirs").unwrap();
    let e = create_append(&path, 0o600).unwrap_err();
    assert!(e.already_exists(), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"theirs");
    let fresh = d.path().join("new.log");
    create_append(&fresh, 0o600).unwrap().append(b"r").unwrap();
    assert_eq!(std::fs::read(&fresh).unwrap(), b"r");
}

#[test]
fn open_append_refuses_links_fifos_and_directories() {
    let d = tempfile::tempdir().unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let link = d.path().join("link.log");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let e = open_append(&link, 0o600).unwrap_err();
    assert!(e.to_string().contains("it is a symbolic link"), "{e}");
    let dangling = d.path().join("dangling.log");
    std::os::unix::fs::symlink(d.path().join("nowhere"), &dangling).unwrap();
    assert!(open_append(&dangling, 0o600).is_err());
    assert!(
        !d.path().join("nowhere").exists(),
        "a dangling link is not followed"
    );
    let hard = d.path().join("hard.log");
    std::fs::hard_link(&victim, &hard).unwrap();
    let e = open_append(&hard, 0o600).unwrap_err();
    assert!(e.to_string().contains("2 hard links"), "{e}");
    let fifo = d.path().join("fifo.log");
    rfs::mknodat(CWD, &fifo, FileType::Fifo, mode(0o600), 0).unwrap();
    // Opened without blocking (no writer would ever come), then refused.
    let e = open_append(&fifo, 0o600).unwrap_err();
    assert!(e.to_string().contains("it is a FIFO"), "{e}");
    let e = open_append(d.path(), 0o600).unwrap_err();
    assert!(e.to_string().contains("does not name a file") || e.to_string().contains("directory"));
    std::fs::create_dir(d.path().join("sub.log")).unwrap();
    let e = open_append(d.path().join("sub.log"), 0o600).unwrap_err();
    assert!(e.to_string().contains("a directory"), "{e}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
}

#[test]
fn open_append_refuses_a_file_of_another_user() {
    if !privileged("open_append_refuses_a_file_of_another_user (chown)") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("DIR.log");
    std::fs::write(&path, b"theirs").unwrap();
    std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
    let e = open_append(&path, 0o600).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "refusing to append to {}: it belongs to uid 65534, not to uid 0 who runs profdev; \
             remove it or choose another file",
            path.display()
        )
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"theirs");
}

#[test]
fn create_dir_makes_parents_and_refuses_a_planted_symlink() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("a/b/profdev.out");
    let dir = create_dir(&out, 0o755).unwrap();
    dir.write_file("kpdata", b"x", 0o600).unwrap();
    assert_eq!(std::fs::read(out.join("kpdata")).unwrap(), b"x");
    // A link of our own, in a directory of our own, is followed.
    let mine = d.path().join("mine");
    std::os::unix::fs::symlink(&out, &mine).unwrap();
    create_dir(&mine, 0o755).unwrap();
    // A file where the directory should be is not a directory.
    std::fs::write(d.path().join("file"), b"").unwrap();
    assert!(create_dir(d.path().join("file"), 0o755).is_err());
    if !privileged("create_dir's foreign-symlink half (lchown)") {
        return;
    }
    let victim = d.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    let planted = d.path().join("planted");
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    std::os::unix::fs::lchown(&planted, Some(65534), Some(65534)).unwrap();
    let e = create_dir(&planted, 0o755).unwrap_err();
    assert!(
        e.to_string()
            .contains("symbolic link that uid 65534 controls"),
        "{e}"
    );
}

/// A tmpfs of 64 KiB, unmounted on drop.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount() -> Option<Tmpfs> {
        let d = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs"])
            .arg(d.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(d))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn a_full_disk_leaves_the_file_complete_or_absent() {
    if !privileged("a_full_disk_leaves_the_file_complete_or_absent (mount tmpfs)") {
        return;
    }
    let fs = Tmpfs::mount().expect("mount -t tmpfs as root");
    let dir = fs.0.path();
    let big = vec![7u8; 200 * 1024];
    let e = write_file(dir.join("kpdata"), &big, 0o600).unwrap_err();
    assert_eq!(e.os_error().and_then(|e| e.raw_os_error()), Some(28), "{e}");
    assert!(e
        .to_string()
        .starts_with(&format!("cannot write {}: ", dir.join("kpdata").display())));
    assert!(
        entries(dir).is_empty(),
        "no temporary and no partial file: {:?}",
        entries(dir)
    );
    // An old complete file survives a failed rewrite.
    write_file(dir.join("kpdata"), b"old", 0o600).unwrap();
    assert!(write_file(dir.join("kpdata"), &big, 0o600).is_err());
    assert_eq!(entries(dir), ["kpdata"]);
    assert_eq!(std::fs::read(dir.join("kpdata")).unwrap(), b"old");
    // An append that does not fit leaves the records before it, whole.
    let mut log = open_append(dir.join("prf.log"), 0o600).unwrap();
    log.append(b"header+record").unwrap();
    let e = log.append(&big).unwrap_err();
    assert!(e.to_string().contains("prf.log"), "{e}");
    assert_eq!(
        std::fs::read(dir.join("prf.log")).unwrap(),
        b"header+record"
    );
}

#[test]
fn read_own_reads_only_what_nobody_else_could_have_written() {
    let d = tempfile::tempdir().unwrap();
    let dir = Dir::create(&d.path().join("cache"), 0o700).unwrap();
    assert!(dir.read_own("absent", 100).unwrap().is_none());
    dir.write_file("mine", b"kept", 0o600).unwrap();
    assert_eq!(dir.read_own("mine", 100).unwrap().unwrap(), b"kept");
    // Longer than the caller's bound.
    assert!(dir.read_own("mine", 3).is_err());
    // A symbolic link is not followed.
    std::os::unix::fs::symlink(dir.path().join("mine"), dir.path().join("link")).unwrap();
    assert!(dir.read_own("link", 100).is_err());
    // A second name for the file.
    std::fs::hard_link(dir.path().join("mine"), dir.path().join("alias")).unwrap();
    assert!(dir.read_own("alias", 100).is_err());
    std::fs::remove_file(dir.path().join("alias")).unwrap();
    // Writable by others.
    dir.write_file("open", b"x", 0o622).unwrap();
    std::fs::set_permissions(
        dir.path().join("open"),
        std::fs::Permissions::from_mode(0o622),
    )
    .unwrap();
    let e = dir.read_own("open", 100).unwrap_err().to_string();
    assert!(e.contains("writable by group or others"), "{e}");
    if privileged("read_own's other-user half (chown)") {
        std::os::unix::fs::chown(dir.path().join("mine"), Some(65534), None).unwrap();
        let e = dir.read_own("mine", 100).unwrap_err().to_string();
        assert!(e.contains("belongs to uid 65534"), "{e}");
    }
}

/// read_trusted keeps read_own's rules (no link followed, bounded, one
/// name, nobody else's file); it only adds root as an owner it accepts.
#[test]
fn read_trusted_reads_what_root_or_the_caller_wrote() {
    let d = tempfile::tempdir().unwrap();
    let dir = Dir::create(&d.path().join("store"), 0o700).unwrap();
    assert!(dir.read_trusted("absent", 100).unwrap().is_none());
    dir.write_file("mine", b"kept", 0o600).unwrap();
    assert_eq!(dir.read_trusted("mine", 100).unwrap().unwrap(), b"kept");
    assert!(dir.read_trusted("mine", 3).is_err());
    std::os::unix::fs::symlink(dir.path().join("mine"), dir.path().join("link")).unwrap();
    assert!(dir.read_trusted("link", 100).is_err());
    std::fs::hard_link(dir.path().join("mine"), dir.path().join("alias")).unwrap();
    assert!(dir.read_trusted("alias", 100).is_err());
    if privileged("read_trusted's other-user half (chown)") {
        std::os::unix::fs::chown(dir.path().join("mine"), Some(65534), None).unwrap();
        std::fs::remove_file(dir.path().join("alias")).unwrap();
        let e = dir.read_trusted("mine", 100).unwrap_err().to_string();
        assert!(e.contains("belongs to uid 65534"), "{e}");
    }
}

/// `-o /dev/null` writes into the device, never renames a regular file
/// over it (as root, the rename would succeed: /dev is root's).
#[test]
fn a_character_device_is_written_in_place_never_replaced() {
    use std::os::unix::fs::FileTypeExt;
    write_file("/dev/null", b"discarded", 0o644).unwrap();
    let mut f = SafeFile::create("/dev/null", 0o644).unwrap();
    f.write_bytes(b"more").unwrap();
    f.commit().unwrap();
    let md = std::fs::symlink_metadata("/dev/null").unwrap();
    assert!(md.file_type().is_char_device(), "{md:?}");
    assert!(!entries(Path::new("/dev"))
        .iter()
        .any(|e| e.starts_with(".null.")));
}

/// A FIFO gets the bytes through itself, and stays a FIFO; a socket (or
/// a directory) is refused in one sentence.
#[test]
fn a_fifo_is_written_through_and_a_socket_refused() {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("pipe");
    rfs::mknodat(
        CWD,
        &fifo,
        FileType::Fifo,
        Mode::from_bits_truncate(0o600),
        0,
    )
    .unwrap();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut s = Vec::new();
            File::open(fifo).unwrap().read_to_end(&mut s).unwrap();
            s
        })
    };
    write_file(&fifo, b"through the pipe", 0o644).unwrap();
    assert_eq!(reader.join().unwrap(), b"through the pipe");
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(entries(d.path()), ["pipe"]);

    let sock = d.path().join("sock");
    let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let e = write_file(&sock, b"x", 0o644).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "refusing to write {}: it is a socket; give a file's name, a character device such as /dev/null, or a FIFO",
            sock.display()
        )
    );
    let e = write_file(d.path(), b"x", 0o644).unwrap_err().to_string();
    assert!(
        e.contains("does not name a file") || e.contains("is a directory"),
        "{e}"
    );
}
