//! Loading a library into the target: `dlopen`, `dlsym` and `dlerror`
//! found in its C library (or libdl, or glibc's private
//! `__libc_dlopen_mode`) through `/proc/PID/maps` and the file's dynamic
//! symbols, and called with [`Target::call`].

use crate::{maps, InjectError, Mapping, Target};
use profdev_symbolize::elf::{parse, ElfBytes};
use std::io;
use std::path::{Path, PathBuf};

/// A loaded shared object of the target: its path and load bias.
#[derive(Clone, Debug)]
pub struct Module {
    /// Its path as the target sees it.
    pub path: String,
    /// Runtime address minus link-time address.
    pub bias: u64,
}

/// The mapped object whose file name satisfies `matches`, with its bias.
///
/// Its first mapping at file offset 0 whose executable segment is mapped
/// where that bias puts it: a copy of the file the process mapped as data
/// (an ELF reader, a Rust panic's backtrace) has offset 0 too. Failing
/// that, the first mapping at offset 0.
pub(crate) fn find_module(
    pid: u32,
    matches: impl Fn(&str) -> bool,
) -> Result<Option<(Module, ElfBytes)>, InjectError> {
    let maps = maps(pid)?;
    let candidates: Vec<&Mapping> = maps
        .iter()
        .filter(|m| {
            m.offset == 0
                && m.path.starts_with('/')
                && Path::new(&m.path)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(&matches)
        })
        .collect();
    let Some(&first) = candidates.first() else {
        return Ok(None);
    };
    // Through /proc/PID/root: the process may live in another mount
    // namespace or chroot.
    let file = PathBuf::from(format!("/proc/{pid}/root{}", first.path));
    let bytes = ElfBytes::open_followed(&file).map_err(|e| InjectError::Io {
        what: format!("cannot read {} of process {pid}", first.path),
        err: e.into_io(),
    })?;
    let (seg0, text) = {
        use object::{Object, ObjectSegment, SegmentFlags};
        let obj = parse(&*bytes, &file).map_err(|e| InjectError::Io {
            what: format!("{} of process {pid} is not an ELF file", first.path),
            err: io::Error::new(io::ErrorKind::InvalidData, e.reason()),
        })?;
        let seg0 = obj
            .segments()
            .find(|s| s.file_range().0 == 0)
            .map(|s| s.address())
            .unwrap_or(0);
        let text = obj
            .segments()
            .find(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & 1 != 0))
            .map(|s| (s.address(), s.file_range().0));
        (seg0, text)
    };
    let bias_at = |m: &Mapping| m.start.wrapping_sub(seg0 & !0xfff);
    let chosen = candidates
        .iter()
        .find(|c| c.path == first.path && text_mapped(&maps, c, bias_at(c), text))
        .unwrap_or(&first);
    Ok(Some((
        Module {
            path: chosen.path.clone(),
            bias: bias_at(chosen),
        },
        bytes,
    )))
}

/// Is the executable segment `text` (link-time address, file offset) of
/// the object mapped at `at` with bias `bias` there in `maps`: inside an
/// executable mapping of the same file, at its file offset? True for an
/// object without one.
fn text_mapped(maps: &[Mapping], at: &Mapping, bias: u64, text: Option<(u64, u64)>) -> bool {
    let Some((addr, offset)) = text else {
        return true;
    };
    let va = addr.wrapping_add(bias);
    maps.iter().any(|m| {
        m.path == at.path
            && m.perms.exec()
            && m.start <= va
            && va < m.end
            && m.offset + (va - m.start) == offset
    })
}

/// The runtime address of the defined dynamic symbol `name` of an object.
pub(crate) fn dynsym(bytes: &[u8], bias: u64, name: &str) -> Option<u64> {
    use object::{Object, ObjectSymbol};
    let obj = parse(bytes, Path::new("")).ok()?;
    obj.dynamic_symbols()
        .find(|s| s.name() == Ok(name) && !s.is_undefined() && s.address() != 0)
        .map(|s| s.address().wrapping_add(bias))
}

/// Is `name` the file name of a C library (`libc.so.6`, `libc-2.31.so`)?
pub(crate) fn is_libc(name: &str) -> bool {
    name.starts_with("libc.so") || (name.starts_with("libc-") && name.ends_with(".so"))
}

/// The functions the loader needs, in the target.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Loader {
    dlopen: u64,
    dlsym: u64,
    dlerror: Option<u64>,
}

impl Target {
    fn loader(&mut self) -> Result<Loader, InjectError> {
        if let Some(l) = self.loader {
            return Ok(l);
        }
        let pid = self.pid;
        let Some((libc_mod, libc_bytes)) = find_module(pid, is_libc)? else {
            return Err(InjectError::Static(pid));
        };
        let sym = |n: &str| dynsym(&libc_bytes, libc_mod.bias, n);
        let l = if let (Some(o), Some(s)) = (sym("dlopen"), sym("dlsym")) {
            Loader {
                dlopen: o,
                dlsym: s,
                dlerror: sym("dlerror"),
            }
        } else if let Some((dl, dl_bytes)) = find_module(pid, |n| n.starts_with("libdl.so"))?
            .filter(|(m, b)| {
                dynsym(b, m.bias, "dlopen").is_some() && dynsym(b, m.bias, "dlsym").is_some()
            })
        {
            let s = |n: &str| dynsym(&dl_bytes, dl.bias, n);
            Loader {
                dlopen: s("dlopen").unwrap_or(0),
                dlsym: s("dlsym").unwrap_or(0),
                dlerror: s("dlerror"),
            }
        } else if let (Some(o), Some(s)) = (sym("__libc_dlopen_mode"), sym("__libc_dlsym")) {
            Loader {
                dlopen: o,
                dlsym: s,
                dlerror: None,
            }
        } else {
            return Err(InjectError::Symbol {
                pid,
                name: "dlopen".into(),
                why: format!(
                    " in {} (nor __libc_dlopen_mode): cannot load a library into it",
                    libc_mod.path
                ),
            });
        };
        self.loader = Some(l);
        Ok(l)
    }

    /// The C library of the target (path and bias).
    pub fn libc(&self) -> Result<Module, InjectError> {
        find_module(self.pid, is_libc)?
            .map(|(m, _)| m)
            .ok_or(InjectError::Static(self.pid))
    }

    /// The runtime address of `name`, a dynamic symbol of the target's C
    /// library, as its symbol table says: for an IFUNC (`strlen`...) that
    /// is the resolver; `dlsym(0, name)` (RTLD_DEFAULT) gives the function.
    pub fn libc_symbol(&self, name: &str) -> Result<u64, InjectError> {
        let (m, b) = find_module(self.pid, is_libc)?.ok_or(InjectError::Static(self.pid))?;
        dynsym(&b, m.bias, name).ok_or_else(|| InjectError::Symbol {
            pid: self.pid,
            name: name.into(),
            why: format!(" in {}", m.path),
        })
    }

    fn dlerror_text(&mut self, tid: u32, l: Loader) -> String {
        let Some(f) = l.dlerror else {
            return "the C library gives no reason (no dlerror)".into();
        };
        match self.call(tid, f, &[]) {
            Ok(0) => "no reason given".into(),
            Ok(p) => self
                .read_string(p, 4096)
                .unwrap_or_else(|e| format!("(cannot read dlerror's text: {e})")),
            Err(e) => format!("(dlerror failed: {e})"),
        }
    }

    /// Load the shared library `path` (as the target sees it) with
    /// `RTLD_NOW`, in the main thread; its handle. Its constructors have
    /// run when this returns.
    pub fn dlopen(&mut self, path: &str) -> Result<u64, InjectError> {
        self.dlopen_flags(path, libc::RTLD_NOW)
    }

    /// The handle of the shared library `path` if the target has it
    /// loaded already (`RTLD_NOLOAD`: nothing is ever loaded, no
    /// constructor runs); an error naming dlerror's words if not.
    pub fn dlopen_loaded(&mut self, path: &str) -> Result<u64, InjectError> {
        self.dlopen_flags(path, libc::RTLD_NOW | libc::RTLD_NOLOAD)
    }

    fn dlopen_flags(&mut self, path: &str, flags: i32) -> Result<u64, InjectError> {
        let l = self.loader()?;
        let tid = self.main_thread();
        let s = self.write_string(tid, path)?;
        let h = self.call(tid, l.dlopen, &[s, flags as u64])?;
        if h == 0 {
            let why = self.dlerror_text(tid, l);
            return Err(InjectError::Dlopen {
                pid: self.pid,
                path: path.into(),
                why,
            });
        }
        Ok(h)
    }

    /// The address of `name` in the library `handle` [`Target::dlopen`]
    /// gave.
    pub fn dlsym(&mut self, handle: u64, name: &str) -> Result<u64, InjectError> {
        let l = self.loader()?;
        let tid = self.main_thread();
        let s = self.write_string(tid, name)?;
        let a = self.call(tid, l.dlsym, &[handle, s])?;
        if a == 0 {
            let why = self.dlerror_text(tid, l);
            return Err(InjectError::Symbol {
                pid: self.pid,
                name: name.into(),
                why: format!(": {why}"),
            });
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libc_names() {
        assert!(is_libc("libc.so.6"));
        assert!(is_libc("libc-2.31.so"));
        assert!(!is_libc("libcrypt.so.1"));
        assert!(!is_libc("libc-client.so.2007e"));
        assert!(!is_libc("libdl.so.2"));
    }

    /// The dynamic symbol table of this process's own C library, read from
    /// its file and biased as mapped, gives what the dynamic linker gives.
    #[test]
    fn dynamic_symbols_of_the_real_libc() {
        let pid = std::process::id();
        let (m, bytes) = find_module(pid, is_libc)
            .unwrap()
            .expect("the tests are linked with a C library");
        assert!(m.path.starts_with('/'), "{}", m.path);
        for name in ["getpid", "atoi", "malloc"] {
            let c = std::ffi::CString::new(name).unwrap();
            // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name
            // only looks the name up.
            let want = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) } as u64;
            assert_ne!(want, 0, "{name}");
            assert_eq!(dynsym(&bytes, m.bias, name), Some(want), "{name}");
        }
        assert_eq!(dynsym(&bytes, m.bias, "no_such_symbol_anywhere"), None);
        assert_eq!(dynsym(b"not an ELF file", 0, "getpid"), None);
    }

    /// The process maps its own C library's file as data (as a panic's
    /// backtrace does): that mapping at offset 0 is passed over.
    #[test]
    fn a_data_mapping_of_the_file_is_not_the_module() {
        use std::os::fd::AsRawFd;
        let pid = std::process::id();
        let (m, _) = find_module(pid, is_libc).unwrap().unwrap();
        let f = std::fs::File::open(&m.path).unwrap();
        let len = f.metadata().unwrap().len() as usize;
        // Several, so that one lies below the library whatever the
        // kernel's placement.
        let mut copies = Vec::new();
        for _ in 0..4 {
            // SAFETY: a new private read-only mapping of a file we opened;
            // nothing reads it, and it is unmapped below.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    f.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            copies.push(p);
        }
        let below = copies.iter().any(|&p| (p as u64) < m.bias + 0x1000);
        let (again, bytes) = find_module(pid, is_libc).unwrap().unwrap();
        let got = dynsym(&bytes, again.bias, "getpid");
        for p in copies {
            // SAFETY: a mapping made above, of that length.
            unsafe { libc::munmap(p, len) };
        }
        assert_eq!(again.bias, m.bias, "a copy lies below the library: {below}");
        let c = std::ffi::CString::new("getpid").unwrap();
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only
        // looks the name up.
        let want = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) } as u64;
        assert_eq!(got, Some(want));
    }

    #[test]
    fn a_module_not_mapped() {
        let none = find_module(std::process::id(), |n| n == "libnothing-here.so.9").unwrap();
        assert!(none.is_none());
        assert!(matches!(
            find_module(u32::MAX, is_libc),
            Err(InjectError::NoProcess(_))
        ));
    }
}
