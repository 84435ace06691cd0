//! `/proc/PID/maps`: the mappings of a process.

use crate::InjectError;
use std::io;

/// One mapping of /proc/PID/maps.
#[derive(Clone, Debug)]
pub struct Mapping {
    /// Start address.
    pub start: u64,
    /// End address.
    pub end: u64,
    /// File offset.
    pub offset: u64,
    /// Permissions, e.g. `r-xp`.
    pub perms: String,
    /// The file's path, or a pseudo name (`[stack]`), or empty.
    pub path: String,
}

/// The mappings of process `pid`.
pub fn maps(pid: u32) -> Result<Vec<Mapping>, InjectError> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            InjectError::NoProcess(pid)
        } else {
            InjectError::Io {
                what: format!("cannot read /proc/{pid}/maps"),
                err: e,
            }
        }
    })?;
    Ok(parse(&text))
}

/// The mappings listed in `text`, the contents of a `/proc/PID/maps`;
/// lines that do not parse are left out.
fn parse(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

/// One line of `/proc/PID/maps`: `START-END PERMS OFFSET DEV INODE
/// [PATH]`, the path (which may hold spaces) after the padding.
fn parse_line(line: &str) -> Option<Mapping> {
    let mut f = line.splitn(6, ' ');
    let (Some(range), Some(perms), Some(off)) = (f.next(), f.next(), f.next()) else {
        return None;
    };
    let path = f.nth(2).unwrap_or("").trim_start().to_string();
    let (a, b) = range.split_once('-')?;
    let (Ok(start), Ok(end), Ok(offset)) = (
        u64::from_str_radix(a, 16),
        u64::from_str_radix(b, 16),
        u64::from_str_radix(off, 16),
    ) else {
        return None;
    };
    Some(Mapping {
        start,
        end,
        offset,
        perms: perms.to_string(),
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_mapping() {
        let m = parse_line(
            "7f1c2a400000-7f1c2a428000 r--p 00028000 08:01 1835029                    \
             /usr/lib/x86_64-linux-gnu/libc.so.6",
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.offset),
            (0x7f1c2a400000, 0x7f1c2a428000, 0x28000)
        );
        assert_eq!(m.perms, "r--p");
        assert_eq!(m.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
    }

    #[test]
    fn anonymous_pseudo_and_odd_paths() {
        let text = "55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0 \n\
                    55d0c0a21000-55d0c0a42000 rw-p 00000000 00:00 0                  [heap]\n\
                    7ffd1000-7ffd2000 r-xp 00000000 00:00 0\n\
                    7f00-7f10 r-xp 00001000 08:01 42   /tmp/a dir/lib x.so (deleted)\n\
                    not a mapping\n\
                    zz-7f10 r-xp 0 08:01 42 /x\n\
                    7f00-7f10 r-xp\n";
        let maps = parse(text);
        let paths: Vec<&str> = maps.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(paths, ["", "[heap]", "", "/tmp/a dir/lib x.so (deleted)"]);
        assert_eq!(maps[3].offset, 0x1000);
    }

    #[test]
    fn this_process() {
        let maps = maps(std::process::id()).unwrap();
        let here = a_file_mapping as fn() as usize as u64;
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let m = maps
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .expect("the code of this test is mapped");
        assert_eq!(m.path, exe.to_str().unwrap());
        assert!(m.perms.contains('x'), "{}", m.perms);
    }

    #[test]
    fn no_such_process() {
        assert!(matches!(
            maps(u32::MAX),
            Err(InjectError::NoProcess(u32::MAX))
        ));
    }
}
