//! DWARF: the line and inline context of an object, and where its
//! functions are declared.

use super::file::Bytes;
use super::Reader;
use object::{Object, ObjectSection};
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

/// A DWARF section's bytes as gimli reads them: a range of the object
/// file's own bytes (mapped or read once, shared, never copied), or, for a
/// compressed section, its decompressed copy.
#[derive(Clone)]
pub(crate) enum Section {
    /// `bytes[start..end]` of the object.
    File {
        bytes: Arc<Bytes>,
        start: usize,
        end: usize,
    },
    /// A decompressed section.
    Owned(Arc<[u8]>),
}

impl std::fmt::Debug for Section {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Section({} bytes)", self.len())
    }
}

impl std::ops::Deref for Section {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Section::File { bytes, start, end } => &bytes[*start..*end],
            Section::Owned(v) => v,
        }
    }
}

// SAFETY: the bytes live behind an `Arc` (a map or a vector the object
// owns and never changes), so they stay at one address for as long as
// any clone of the section lives, and a clone derefs to the same bytes.
unsafe impl stable_deref_trait::StableDeref for Section {}
// SAFETY: as above; cloning copies the `Arc`, not the bytes.
unsafe impl stable_deref_trait::CloneStableDeref for Section {}

/// The DWARF context of `file`, whose bytes are `bytes`: the sections it
/// reads are ranges of `bytes`, only compressed ones are copied.
pub(super) fn load_dwarf(
    file: &object::File<'_>,
    bytes: &Arc<Bytes>,
) -> Option<addr2line::Context<Reader>> {
    file.section_by_name(".debug_info")?;
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let base = bytes.as_ptr() as usize;
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        // Lines and functions never read location lists or macros: left
        // out, they are neither decompressed nor copied.
        let unread = matches!(
            id,
            gimli::SectionId::DebugLoc
                | gimli::SectionId::DebugLocLists
                | gimli::SectionId::DebugMacinfo
                | gimli::SectionId::DebugMacro
        );
        let data: Cow<'_, [u8]> = file
            .section_by_name(id.name())
            .filter(|_| !unread)
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[]));
        let section = match data {
            // A slice of the file's own bytes: found by its address.
            Cow::Borrowed(d) if !d.is_empty() => {
                let start = (d.as_ptr() as usize).wrapping_sub(base);
                match start.checked_add(d.len()) {
                    Some(end) if end <= bytes.len() => Section::File {
                        bytes: bytes.clone(),
                        start,
                        end,
                    },
                    _ => Section::Owned(Arc::from(d)),
                }
            }
            d => Section::Owned(Arc::from(&*d)),
        };
        Ok(gimli::EndianReader::new(section, endian))
    };
    let dwarf = gimli::Dwarf::load(load).ok()?;
    addr2line::Context::from_dwarf(dwarf).ok()
}

pub(super) fn decl_of(
    unit: gimli::UnitRef<'_, Reader>,
    offset: gimli::UnitOffset,
) -> Option<(String, u32)> {
    let mut offset = offset;
    // Follow at most a few origin links: inlined → abstract → declaration.
    for _ in 0..4 {
        let entry = unit.entry(offset).ok()?;
        let line = entry
            .attr_value(gimli::DW_AT_decl_line)
            .ok()
            .flatten()
            .and_then(|v| v.udata_value());
        let file = entry
            .attr_value(gimli::DW_AT_decl_file)
            .ok()
            .flatten()
            .and_then(|v| match v {
                gimli::AttributeValue::FileIndex(i) => Some(i),
                other => other.udata_value(),
            });
        if let (Some(line), Some(file)) = (line, file) {
            return Some((file_path(unit, file)?, u32::try_from(line).ok()?));
        }
        let next = [gimli::DW_AT_abstract_origin, gimli::DW_AT_specification]
            .into_iter()
            .find_map(|at| match entry.attr_value(at).ok().flatten() {
                Some(gimli::AttributeValue::UnitRef(o)) => Some(o),
                _ => None,
            });
        offset = next?;
    }
    None
}

fn file_path(unit: gimli::UnitRef<'_, Reader>, index: u64) -> Option<String> {
    use gimli::Reader as _;
    let header = unit.line_program.as_ref()?.header();
    let file = header.file(index)?;
    let string = |v| -> Option<String> {
        Some(
            unit.attr_string(v)
                .ok()?
                .to_string_lossy()
                .ok()?
                .into_owned(),
        )
    };
    let name = string(file.path_name())?;
    if name.starts_with('/') {
        return Some(name);
    }
    let mut path = PathBuf::new();
    if let Some(dir) = unit.comp_dir.as_ref() {
        path.push(dir.to_string_lossy().ok()?.as_ref());
    }
    if let Some(dir) = file.directory(header).and_then(string) {
        path.push(dir);
    }
    path.push(name);
    Some(path.to_string_lossy().into_owned())
}
