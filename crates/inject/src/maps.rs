//! `/proc/PID/maps`: the mappings of a process, read by profdev's one
//! reader (`profdev_symbolize::maps`).

use crate::InjectError;
use std::io;

/// One mapping of /proc/PID/maps.
pub use profdev_symbolize::maps::MapsEntry as Mapping;

/// The mappings of process `pid`.
pub fn maps(pid: u32) -> Result<Vec<Mapping>, InjectError> {
    profdev_symbolize::maps::read(pid).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            InjectError::NoProcess(pid)
        } else {
            InjectError::Io {
                what: format!("cannot read /proc/{pid}/maps"),
                err: e,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process() {
        let maps = maps(std::process::id()).unwrap();
        let here = this_process as fn() as usize as u64;
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let m = maps
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .expect("the code of this test is mapped");
        assert_eq!(m.path, exe.to_str().unwrap());
        assert!(m.perms.exec(), "{}", m.perms);
    }

    #[test]
    fn no_such_process() {
        assert!(matches!(
            maps(u32::MAX),
            Err(InjectError::NoProcess(u32::MAX))
        ));
    }
}
