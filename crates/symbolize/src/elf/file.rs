//! The one ELF opener: an object file's bytes ([`ElfBytes`]), read or
//! mapped within [`crate::open::MAX_OBJECT`], and [`parse`], the one call
//! of the `object` crate's parser, which names the file in its errors.
//! Every crate of profdev that reads an ELF file goes through these (or
//! through [`super::ElfObject`] and [`super::ElfLayout`], which do).
//!
//! ```
//! use profdev_symbolize::elf::{parse, ElfBytes};
//! use object::Object;
//! let exe = std::env::current_exe().unwrap();
//! let bytes = ElfBytes::open_followed(&exe).unwrap();
//! let file = parse(&*bytes, &exe).unwrap();
//! assert!(file.entry() != 0);
//! ```

use super::ElfError;
use crate::open::{open_bounded, Follow, MAX_OBJECT};
use std::path::Path;

/// An ELF file's bytes: mapped read-only when only root can write the
/// file, else read (another user could truncate a mapped file and kill
/// the reader with SIGBUS).
pub struct ElfBytes(Bytes);

impl std::ops::Deref for ElfBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for ElfBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElfBytes")
            .field("len", &self.len())
            .finish()
    }
}

impl ElfBytes {
    /// The object at `path`, a path another user may have named (a
    /// mapping's): opened as [`crate::open::open_object`] does (no final
    /// symbolic link followed, a regular file, at most
    /// [`MAX_OBJECT`] bytes).
    pub fn open(path: &Path) -> Result<ElfBytes, ElfError> {
        map_file(path).map(ElfBytes)
    }

    /// The object at `path`, a path profdev or its user chose (a final
    /// symbolic link is followed: `libz.so.1`), otherwise as bounded as
    /// [`ElfBytes::open`].
    pub fn open_followed(path: &Path) -> Result<ElfBytes, ElfError> {
        let (file, _) =
            open_bounded(path, MAX_OBJECT, Follow::Yes).map_err(|e| ElfError::Read {
                path: path.display().to_string(),
                source: e.into_io(),
            })?;
        file_bytes(&file, path).map(ElfBytes)
    }

    /// The bytes of the object open as `file` (`path` names it).
    pub fn from_file(file: &std::fs::File, path: &Path) -> Result<ElfBytes, ElfError> {
        file_bytes(file, path).map(ElfBytes)
    }
}

/// Parse ELF `data` (bytes, or an `object::ReadCache` over a file, which
/// reads only what the headers name), `path` naming it in errors: not
/// starting with the ELF magic is [`ElfError::NotElf`], anything the
/// parser refuses [`ElfError::Malformed`] with its reason.
pub fn parse<'a, R: object::ReadRef<'a>>(
    data: R,
    path: &Path,
) -> Result<object::File<'a, R>, ElfError> {
    if data.read_bytes_at(0, 4) != Ok(&b"\x7fELF"[..]) {
        return Err(ElfError::NotElf {
            path: path.display().to_string(),
        });
    }
    object::File::parse(data).map_err(|e| ElfError::Malformed {
        path: path.display().to_string(),
        why: e.to_string(),
    })
}

pub(crate) enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// Open `path` (an object: no final symbolic link followed, bounded) and
/// get its bytes as [`file_bytes`] does.
pub(super) fn map_file(path: &Path) -> Result<Bytes, ElfError> {
    let (file, _) = crate::open::open_object(path, None).map_err(|e| ElfError::Read {
        path: path.display().to_string(),
        source: e.into_io(),
    })?;
    file_bytes(&file, path)
}

/// True when only root can change the file: owned by root, writable by
/// nobody else. Only such a file is memory-mapped; anyone who can write a
/// mapped file can truncate it, and a read of a truncated mapping kills
/// the reader with SIGBUS (a root server serving other users would die).
pub fn only_root_writes(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.uid() == 0 && meta.mode() & 0o022 == 0
}

/// The bytes of an opened object file: mapped read-only when only root can
/// write it (system libraries, debug files), else read (at most
/// [`crate::open::MAX_OBJECT`] bytes) from offset 0 with pread, so a
/// descriptor shared with other readers keeps its offset.
pub(crate) fn file_bytes(file: &std::fs::File, path: &Path) -> Result<Bytes, ElfError> {
    let read_error = |source| ElfError::Read {
        path: path.display().to_string(),
        source,
    };
    let meta = file.metadata().map_err(read_error)?;
    if meta.len() > crate::open::MAX_OBJECT {
        return Err(read_error(std::io::Error::other(format!(
            "larger than {} bytes",
            crate::open::MAX_OBJECT
        ))));
    }
    if only_root_writes(&meta) {
        // SAFETY: the map is read-only and private, and only root can write
        // (or truncate) the file, so it cannot shrink under the map.
        if let Ok(map) = unsafe { memmap2::Mmap::map(file) } {
            return Ok(Bytes::Mapped(map));
        }
    }
    let mut out = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        use std::os::unix::fs::FileExt;
        let n = file
            .read_at(&mut chunk, out.len() as u64)
            .map_err(read_error)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&chunk[..n]);
        if out.len() as u64 > crate::open::MAX_OBJECT {
            return Err(read_error(std::io::Error::other(format!(
                "larger than {} bytes",
                crate::open::MAX_OBJECT
            ))));
        }
    }
    Ok(Bytes::Owned(out))
}
