//! [`ElfLayout`]: an object's load segments and build id, without its
//! symbols or DWARF.

use super::{file_bytes, map_file, parse, ElfError};
use object::{Object, ObjectSegment};
use profdev_core::FileAddr;
use std::path::Path;

/// The load layout of an ELF file without its symbols or DWARF: enough to
/// turn a mapping's file offset into a [`FileAddr`] and to identify the file
/// by build id. Cheap to open: only the headers and notes are read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElfLayout {
    loads: Vec<(u64, u64, u64)>,
    build_id: Option<Vec<u8>>,
    is_dyn: bool,
}

impl ElfLayout {
    /// Open `path` and read its program headers and build id.
    pub fn open(path: &Path) -> Result<Self, ElfError> {
        Self::parse(&map_file(path)?, path)
    }

    /// Read the layout of the object open as `file`; `path` names it.
    pub fn from_file(file: &std::fs::File, path: &Path) -> Result<Self, ElfError> {
        Self::parse(&file_bytes(file, path)?, path)
    }

    /// Parse ELF bytes; `path` names the object in errors.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Self, ElfError> {
        let file = parse(bytes, path)?;
        Ok(ElfLayout {
            loads: file
                .segments()
                .map(|seg| {
                    let (offset, filesz) = seg.file_range();
                    (offset, filesz, seg.address())
                })
                .collect(),
            build_id: file.build_id().ok().flatten().map(<[u8]>::to_vec),
            is_dyn: matches!(file.kind(), object::ObjectKind::Dynamic),
        })
    }

    /// The GNU build id, if the object has one.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    /// True for position-independent objects (ET_DYN).
    pub fn is_position_independent(&self) -> bool {
        self.is_dyn
    }

    /// The link-time address of byte `file_offset` of the file, through the
    /// load segment that contains it (as [`super::ElfObject::file_addr_of_offset`]).
    pub fn file_addr_of_offset(&self, file_offset: u64) -> Option<FileAddr> {
        self.loads
            .iter()
            .find(|&&(off, len, _)| file_offset >= off && file_offset - off < len)
            .map(|&(off, _, vaddr)| FileAddr(vaddr.wrapping_add(file_offset - off)))
    }
}
