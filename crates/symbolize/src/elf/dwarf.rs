//! DWARF: the line and inline context of an object, and where its
//! functions are declared.

use super::Reader;
use object::{Object, ObjectSection};
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

pub(super) fn load_dwarf(file: &object::File<'_>) -> Option<addr2line::Context<Reader>> {
    file.section_by_name(".debug_info")?;
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        let data: Cow<'_, [u8]> = file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[]));
        Ok(gimli::EndianArcSlice::new(Arc::from(&*data), endian))
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
