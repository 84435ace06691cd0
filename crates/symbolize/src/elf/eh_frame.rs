//! Symbols for the `.eh_frame` FDEs that no symbol covers
//! ([`SymOrigin::EhFrame`]).

use super::{FnSym, SymOrigin};
use object::{Object, ObjectSection};

/// An object's `.eh_frame`, read in place.
pub(super) type EhFrame<'a> = gimli::EhFrame<gimli::EndianSlice<'a, gimli::RunTimeEndian>>;

/// The object's `.eh_frame`, ready to read (with the bases its pointers
/// are relative to); `None` when it has none, an error when its bytes
/// cannot be had.
pub(super) fn eh_frame<'a>(
    file: &object::File<'a>,
) -> Option<Result<(EhFrame<'a>, gimli::BaseAddresses), String>> {
    let sec = file.section_by_name(".eh_frame")?;
    let data = match sec.data() {
        Ok(d) => d,
        Err(e) => return Some(Err(format!(".eh_frame: {e}"))),
    };
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let mut eh = gimli::EhFrame::new(data, endian);
    eh.set_address_size(if file.is_64() { 8 } else { 4 });
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(sec.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = file.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    Some(Ok((eh, bases)))
}

/// Symbols for the `.eh_frame` FDEs whose first byte `covered` says no
/// symbol holds: see [`SymOrigin::EhFrame`]. `table` is the object's other
/// symbols, sorted by address, for naming `.cold` fragments.
pub(super) fn eh_frame_symbols(
    file: &object::File<'_>,
    table: &[FnSym],
    covered: &dyn Fn(u64) -> bool,
) -> Vec<FnSym> {
    use gimli::UnwindSection;
    let Some(Ok((eh, bases))) = eh_frame(file) else {
        return Vec::new();
    };
    let x86_64 = file.architecture() == object::Architecture::X86_64;
    // (start, len, entry, parent) of the FDEs no symbol covers: entry is
    // false for a fragment whose first instruction does not see the CFA at
    // rsp+8, as every x86-64 function entry does (the return address just
    // pushed); parent is the start of the FDE just before it in .eh_frame.
    // Only uncovered FDEs are evaluated: an object with a symbol table
    // pays for a walk over its FDEs and nothing more.
    let mut fdes: Vec<(u64, u64, bool, Option<u64>)> = Vec::new();
    let mut ctx = gimli::UnwindContext::new();
    let mut entries = eh.entries(&bases);
    let mut previous: Option<u64> = None;
    while let Ok(Some(entry)) = entries.next() {
        let gimli::CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(gimli::EhFrame::cie_from_offset) else {
            continue;
        };
        let (start, len) = (fde.initial_address(), fde.len());
        if start == 0 || len == 0 {
            continue;
        }
        let parent = previous.replace(start);
        if covered(start) {
            continue;
        }
        let entry = !x86_64
            || match fde.unwind_info_for_address(&eh, &bases, &mut ctx, start) {
                Ok(row) => matches!(
                    row.cfa(),
                    gimli::CfaRule::RegisterAndOffset { register, offset: 8 }
                        if *register == gimli::X86_64::RSP
                ),
                Err(_) => true,
            };
        fdes.push((start, len, entry, parent));
    }
    fdes.sort_unstable_by_key(|f| f.0);
    fdes.dedup_by_key(|f| f.0);
    let mut out = Vec::new();
    for &(start, len, entry, parent) in &fdes {
        let mut name = format!("sub_{start:x}");
        if !entry {
            // Compilers emit a function's FDE and then its cold part's, so
            // a fragment whose predecessor in .eh_frame is a named
            // function's entry is that function's `.cold` part.
            let named = parent.and_then(|p| {
                let i = table.partition_point(|s| s.addr < p);
                table
                    .get(i)
                    .filter(|s| s.addr == p && s.origin == SymOrigin::Table)
            });
            if let Some(s) = named {
                name = format!("{}.cold", s.mangled);
            }
        }
        out.push(FnSym {
            addr: start,
            size: len,
            mangled: name,
            origin: SymOrigin::EhFrame,
        });
    }
    out
}
