//! `/proc/PID/maps`: the one reader of a process's mappings.
//!
//! Every crate that asks which files a process maps (the sampler's
//! synthesized MMAP records, the coverage server's planning and sweeps,
//! the injector's search for the C library, mprof's sweep, the vDSO image
//! here) reads them through [`read`] and [`MapsEntry::parse`]; nothing
//! else in profdev parses the file.
//!
//! Each line is, as `proc(5)` and the kernel's `show_map_vma` print it:
//!
//! ```text
//! START-END PERMS OFFSET MAJOR:MINOR INODE [PADDING PATH]
//! 7f1c2a400000-7f1c2a428000 r--p 00028000 08:01 1835029    /usr/lib/x86_64-linux-gnu/libc.so.6
//! ```
//!
//! addresses, offset and device numbers in hexadecimal, the inode in
//! decimal, fields separated by one space; then, for a named mapping,
//! spaces up to a column and the path: a file's (which may hold spaces,
//! with ` (deleted)` appended once it is unlinked; a newline in it is
//! printed as `\012`), or a pseudo name (`[heap]`, `[stack]`, `[vdso]`).
//! An anonymous mapping has no path. A line that does not have the five
//! fields, each a number of its base, is left out, never guessed at.
//!
//! **Bounded.** A process chooses how many mappings it has and what its
//! files are called, and the coverage and mprof sweeps read every
//! process's maps: [`read`] reads at most [`MAX_MAPS_BYTES`] and refuses
//! a longer file with an error, and a line's bytes that are not UTF-8 are
//! replaced (`U+FFFD`), so one odd path costs that path, not the file.
//!
//! ```
//! use profdev_symbolize::maps::MapsEntry;
//! let e = MapsEntry::parse("7f00-7f10 r-xp 00001000 fd:1a 42   /tmp/a b.so (deleted)").unwrap();
//! assert_eq!((e.start, e.end, e.offset, e.inode), (0x7f00, 0x7f10, 0x1000, 42));
//! assert!(e.perms.exec() && e.is_file() && e.deleted());
//! assert_eq!(e.file_path(), "/tmp/a b.so");
//! assert_eq!((e.major, e.minor), (0xfd, 0x1a));
//! ```

use profdev_core::FileId;
use std::io::{self, Read};
use std::path::Path;

/// The most bytes of one `/proc/PID/maps` [`read`] reads: 64 MiB, ten
/// times what the default `vm.max_map_count` (65530 mappings) takes with
/// typical paths.
pub const MAX_MAPS_BYTES: u64 = 64 << 20;

/// A mapping's permissions, as printed: `r`/`-`, `w`/`-`, `x`/`-`, then
/// `p` (private) or `s` (shared).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Perms([u8; 4]);

impl Perms {
    /// Readable.
    pub fn read(&self) -> bool {
        self.0[0] == b'r'
    }

    /// Writable.
    pub fn write(&self) -> bool {
        self.0[1] == b'w'
    }

    /// Executable.
    pub fn exec(&self) -> bool {
        self.0[2] == b'x'
    }

    /// Shared (`s`), not private.
    pub fn shared(&self) -> bool {
        self.0[3] == b's'
    }

    /// The four letters, e.g. `r-xp`.
    pub fn as_str(&self) -> &str {
        // Parsed from ASCII only (see `MapsEntry::parse`).
        std::str::from_utf8(&self.0).unwrap_or("????")
    }
}

impl std::fmt::Display for Perms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapsEntry {
    /// First address.
    pub start: u64,
    /// Address after the last.
    pub end: u64,
    /// Permissions.
    pub perms: Perms,
    /// File offset of `start` (page units of the file for a file mapping;
    /// anything for others).
    pub offset: u64,
    /// Device major number of the file (0 for none).
    pub major: u32,
    /// Device minor number of the file.
    pub minor: u32,
    /// Inode of the file (0 for none).
    pub inode: u64,
    /// The path as printed: a file's (with ` (deleted)` if unlinked), a
    /// pseudo name such as `[vdso]`, or empty for an anonymous mapping.
    pub path: String,
}

impl MapsEntry {
    /// Parse one line (a trailing newline is allowed); `None` when it is
    /// not a mapping line (see the module doc).
    pub fn parse(line: &str) -> Option<MapsEntry> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let mut f = line.splitn(6, ' ');
        let (range, perms, offset, dev, inode) =
            (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        let path = f.next().unwrap_or("").trim_start_matches(' ');
        let (start, end) = range.split_once('-')?;
        let (major, minor) = dev.split_once(':')?;
        let perms: [u8; 4] = perms.as_bytes().try_into().ok()?;
        if !perms.iter().all(|b| b.is_ascii_graphic()) {
            return None;
        }
        Some(MapsEntry {
            start: hex(start)?,
            end: hex(end)?,
            perms: Perms(perms),
            offset: hex(offset)?,
            major: u32::try_from(hex(major)?).ok()?,
            minor: u32::try_from(hex(minor)?).ok()?,
            inode: decimal(inode)?,
            path: path.to_string(),
        })
    }

    /// A file mapping: the path is absolute (not anonymous, not a pseudo
    /// name). The file may have been deleted since ([`Self::deleted`]).
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/')
    }

    /// The file was unlinked after it was mapped (` (deleted)`).
    pub fn deleted(&self) -> bool {
        self.is_file() && self.path.ends_with(" (deleted)")
    }

    /// The path without ` (deleted)`: where the file was when mapped.
    pub fn file_path(&self) -> &str {
        if self.deleted() {
            &self.path[..self.path.len() - " (deleted)".len()]
        } else {
            &self.path
        }
    }

    /// The file's device and inode, for a named mapping with an inode.
    pub fn file_id(&self) -> Option<FileId> {
        (!self.path.is_empty() && self.inode != 0).then_some(FileId {
            major: self.major,
            minor: self.minor,
            ino: self.inode,
            ino_generation: 0,
        })
    }

    /// The name of this mapping's entry in `/proc/PID/map_files/`
    /// (`start-end`, lowercase hexadecimal).
    pub fn map_files_name(&self) -> String {
        format!("{:x}-{:x}", self.start, self.end)
    }
}

/// A number of 1 to 16 hexadecimal digits (no sign, no prefix).
fn hex(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// A decimal number that fits in 64 bits (no sign).
fn decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The mappings listed in `text`, the contents of a `/proc/PID/maps`, in
/// order; lines that do not parse are left out.
pub fn parse(text: &str) -> impl Iterator<Item = MapsEntry> + '_ {
    // Split at newlines only: a carriage return is a byte of a name.
    text.split('\n').filter_map(MapsEntry::parse)
}

/// The same for bytes: each line's bytes that are not UTF-8 replaced.
pub fn parse_bytes(bytes: &[u8]) -> impl Iterator<Item = MapsEntry> + '_ {
    bytes
        .split(|&b| b == b'\n')
        .filter_map(|l| MapsEntry::parse(&String::from_utf8_lossy(l)))
}

/// The mappings of process `pid`, from `/proc/PID/maps` (see [`read_file`]).
pub fn read(pid: u32) -> io::Result<Vec<MapsEntry>> {
    read_file(Path::new(&format!("/proc/{pid}/maps")))
}

/// The mappings of this process, from `/proc/self/maps`.
pub fn read_self() -> io::Result<Vec<MapsEntry>> {
    read_file(Path::new("/proc/self/maps"))
}

/// The mappings listed in the maps file at `path`, at most
/// [`MAX_MAPS_BYTES`] read. The open's error is returned as it is (a gone
/// process is `NotFound`, another user's `PermissionDenied`); a longer
/// file is `InvalidData`, saying so.
pub fn read_file(path: &Path) -> io::Result<Vec<MapsEntry>> {
    read_bounded(path, MAX_MAPS_BYTES)
}

fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<MapsEntry>> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is longer than {limit} bytes, more than profdev reads",
                path.display()
            ),
        ));
    }
    Ok(parse_bytes(&bytes).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_mapping() {
        let l = "7f1c2a400000-7f1c2a428000 r--p 00028000 08:01 1835029                    \
                 /usr/lib/x86_64-linux-gnu/libc.so.6\n";
        let e = MapsEntry::parse(l).unwrap();
        assert_eq!(
            e,
            MapsEntry {
                start: 0x7f1c2a400000,
                end: 0x7f1c2a428000,
                perms: Perms(*b"r--p"),
                offset: 0x28000,
                major: 8,
                minor: 1,
                inode: 1835029,
                path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
            }
        );
        assert_eq!(e.perms.as_str(), "r--p");
        assert!(e.perms.read() && !e.perms.write() && !e.perms.exec() && !e.perms.shared());
        assert!(e.is_file() && !e.deleted());
        assert_eq!(
            e.file_id(),
            Some(FileId {
                major: 8,
                minor: 1,
                ino: 1835029,
                ino_generation: 0
            })
        );
        assert_eq!(e.map_files_name(), "7f1c2a400000-7f1c2a428000");
    }

    #[test]
    fn anonymous_and_pseudo_mappings() {
        // The kernel ends an anonymous line with the space after the inode.
        for l in [
            "55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0 ",
            "55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0",
        ] {
            let e = MapsEntry::parse(l).unwrap();
            assert_eq!(e.path, "");
            assert!(!e.is_file() && e.file_id().is_none());
        }
        let e = MapsEntry::parse(
            "7ffd4a5f3000-7ffd4a5f5000 r-xp 00000000 00:00 0                          [vdso]",
        )
        .unwrap();
        assert_eq!(e.path, "[vdso]");
        assert!(e.perms.exec() && !e.is_file() && e.file_id().is_none());
        let e = MapsEntry::parse(
            "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]",
        )
        .unwrap();
        assert_eq!((e.start, e.end), (0xffffffffff600000, 0xffffffffff601000));
        assert_eq!(e.path, "[vsyscall]");
        // A shared mapping of a file on a device with a large minor.
        let e = MapsEntry::parse("7f00-7f10 rw-s 00000000 00:1a3 7 /dev/shm/x").unwrap();
        assert!(e.perms.shared() && e.perms.write());
        assert_eq!((e.major, e.minor), (0, 0x1a3));
    }

    #[test]
    fn deleted_files_and_spaces_in_paths() {
        let e =
            MapsEntry::parse("7f00-7f10 r-xp 00001000 08:01 42   /tmp/a dir/lib x.so (deleted)")
                .unwrap();
        assert_eq!(e.path, "/tmp/a dir/lib x.so (deleted)");
        assert!(e.deleted());
        assert_eq!(e.file_path(), "/tmp/a dir/lib x.so");
        // Spaces at the end of a name are the name's.
        let e = MapsEntry::parse("7f00-7f10 r-xp 00001000 08:01 42 /tmp/trailing  ").unwrap();
        assert_eq!(e.path, "/tmp/trailing  ");
        assert!(!e.deleted());
        // A newline in a name is printed escaped: still one line.
        let e = MapsEntry::parse("7f00-7f10 r-xp 0 08:01 42 /tmp/a\\012b").unwrap();
        assert_eq!(e.path, "/tmp/a\\012b");
        // "(deleted)" alone is a name, not a mark.
        let e = MapsEntry::parse("7f00-7f10 r-xp 0 08:01 42 [anon: (deleted)]").unwrap();
        assert!(!e.deleted());
    }

    #[test]
    fn huge_numbers() {
        let e = MapsEntry::parse(
            "fffffffffffff000-ffffffffffffffff r--p ffffffffffffffff ffffffff:ffffffff \
             18446744073709551615 /x",
        )
        .unwrap();
        assert_eq!((e.inode, e.offset), (u64::MAX, u64::MAX));
        assert_eq!((e.major, e.minor), (u32::MAX, u32::MAX));
        for l in [
            // one past u64 in the inode, the address, the offset, the device
            "7f00-7f10 r--p 0 08:01 18446744073709551616 /x",
            "10000000000000000-7f10 r--p 0 08:01 1 /x",
            "7f00-7f10 r--p 10000000000000000 08:01 1 /x",
            "7f00-7f10 r--p 0 100000000:01 1 /x",
            // signs and prefixes are no numbers here
            "+7f00-7f10 r--p 0 08:01 1 /x",
            "7f00-7f10 r--p 0x0 08:01 1 /x",
            "7f00-7f10 r--p 0 08:01 -1 /x",
            "7f00-7f10 r--p 0 08:01 +1 /x",
        ] {
            assert_eq!(MapsEntry::parse(l), None, "{l}");
        }
    }

    #[test]
    fn truncated_and_garbage_lines() {
        let whole = "7f00-7f10 r-xp 00001000 08:01 42 /lib.so";
        // Every cut before the inode's end is no mapping; after it, a
        // shorter path.
        let inode_end = whole.find(" /").unwrap();
        for cut in 0..whole.len() {
            let e = MapsEntry::parse(&whole[..cut]);
            if cut < inode_end - 1 {
                assert_eq!(e, None, "{:?}", &whole[..cut]);
            }
        }
        for l in [
            "",
            "garbage",
            "7f00-7f10 r-xp",
            "7f00 r-xp 0 08:01 42 /x",
            "zz-7f10 r-xp 0 08:01 42 /x",
            "7f00-7f10 r-xpp 0 08:01 42 /x",
            "7f00-7f10 r- 0 08:01 42 /x",
            "7f00-7f10 r-xp 0 0801 42 /x",
            "7f00-7f10  r-xp 0 08:01 42 /x",
            "7f00-7f10\tr-xp 0 08:01 42 /x",
        ] {
            assert_eq!(MapsEntry::parse(l), None, "{l:?}");
        }
    }

    #[test]
    fn whole_texts_and_bytes() {
        let text = "55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0 \n\
                    55d0c0a21000-55d0c0a42000 rw-p 00000000 00:00 0                  [heap]\n\
                    7ffd1000-7ffd2000 r-xp 00000000 00:00 0\n\
                    7f00-7f10 r-xp 00001000 08:01 42   /tmp/a dir/lib x.so (deleted)\n\
                    not a mapping\n\
                    zz-7f10 r-xp 0 08:01 42 /x\n\
                    7f00-7f10 r-xp\n";
        let paths: Vec<String> = parse(text).map(|m| m.path).collect();
        assert_eq!(paths, ["", "[heap]", "", "/tmp/a dir/lib x.so (deleted)"]);
        let from_bytes: Vec<MapsEntry> = parse_bytes(text.as_bytes()).collect();
        assert_eq!(from_bytes, parse(text).collect::<Vec<_>>());
        // A name that is not UTF-8 costs that name only.
        let mut odd = b"7f00-7f10 r-xp 0 08:01 42 /tmp/\xff\xfe.so\n".to_vec();
        odd.extend_from_slice(b"7f10-7f20 r-xp 0 08:01 43 /lib.so\n");
        let m: Vec<MapsEntry> = parse_bytes(&odd).collect();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].path, "/tmp/\u{fffd}\u{fffd}.so");
        assert_eq!(m[1].path, "/lib.so");
    }

    #[test]
    fn this_process() {
        let maps = read_self().unwrap();
        let here = this_process as fn() as usize as u64;
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let m = maps
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .expect("the code of this test is mapped");
        assert_eq!(m.path, exe.to_str().unwrap());
        assert!(m.perms.exec() && m.file_id().is_some(), "{m:?}");
        assert!(maps.iter().any(|m| m.path == "[stack]"));
        assert!(read(std::process::id()).unwrap().len() > 3);
        let e = read(u32::MAX).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_longer_file_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("maps");
        let line = b"7f00-7f10 r-xp 0 08:01 42 /x\n";
        let mut text = line.repeat(100);
        let limit = text.len() as u64;
        std::fs::write(&f, &text).unwrap();
        assert_eq!(read_bounded(&f, limit).unwrap().len(), 100);
        text.push(b'\n');
        std::fs::write(&f, &text).unwrap();
        let e = read_bounded(&f, limit).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(
            e.to_string()
                .contains(&format!("longer than {limit} bytes")),
            "{e}"
        );
    }
}
