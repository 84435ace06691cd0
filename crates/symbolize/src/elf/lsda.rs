//! C++ landing pads: the addresses the unwinder enters a function at,
//! from no jump or call of the function's own. A function that catches
//! or cleans up during unwinding has an LSDA (the FDE's augmentation in
//! `.eh_frame` points to it, usually in `.gcc_except_table`), whose
//! call-site table gives, per range of calls, the landing pad's offset
//! from the function's start (the Itanium C++ ABI's exception tables, as
//! GCC and Clang write them). A function without an LSDA has no landing
//! pad: the personality routine is never asked to stop in it.
//!
//! Coverage planning (`profdev-coverage`'s `plan`) takes the pads as
//! places control arrives from outside, as it takes function starts.

use object::{Object, ObjectSection};

/// `DW_EH_PE_omit`: no value follows.
const OMIT: u8 = 0xff;

/// The landing pads of every function of `file` with an LSDA, sorted and
/// without repeats (link-time addresses). `Ok(empty)` when no FDE has an
/// LSDA (C, or C++ that never unwinds through a frame of its own). An
/// error names what could not be read: an FDE of `.eh_frame`, an LSDA
/// outside the file's sections, through a pointer, with a landing pad
/// base of its own, or in an encoding not known here; then any
/// instruction of the object may be a landing pad.
pub fn landing_pads(file: &object::File<'_>) -> Result<Vec<u64>, String> {
    use gimli::UnwindSection;
    let (eh, bases) = match super::eh_frame::eh_frame(file) {
        Some(r) => r?,
        // No unwinder can reach an LSDA without an FDE.
        None => {
            return match file.section_by_name(".gcc_except_table") {
                Some(_) => Err("it has exception tables but no .eh_frame".into()),
                None => Ok(Vec::new()),
            }
        }
    };
    // The sections an LSDA may lie in: (address, bytes).
    let spans: Vec<(u64, &[u8])> = file
        .sections()
        .filter(|s| s.kind() != object::SectionKind::UninitializedData && s.address() != 0)
        .filter_map(|s| Some((s.address(), s.data().ok()?)))
        .collect();
    let mut pads = Vec::new();
    let mut entries = eh.entries(&bases);
    loop {
        let entry = entries
            .next()
            .map_err(|e| format!(".eh_frame cannot be read: {e}"))?;
        let Some(entry) = entry else { break };
        let gimli::CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let fde = partial
            .parse(gimli::EhFrame::cie_from_offset)
            .map_err(|e| format!("an FDE of .eh_frame cannot be read: {e}"))?;
        let at = match fde.lsda() {
            None => continue,
            Some(gimli::Pointer::Direct(a)) => a,
            Some(gimli::Pointer::Indirect(_)) => {
                return Err("an FDE reaches its LSDA through a pointer".into())
            }
        };
        let bytes = spans
            .iter()
            .find(|(a, d)| at >= *a && at - *a < d.len() as u64)
            .map(|(a, d)| &d[(at - a) as usize..])
            .ok_or_else(|| format!("the LSDA at {at:#x} is in no section of the file"))?;
        let base = fde.initial_address();
        pads.extend(call_site_pads(bytes, base).map_err(|e| format!("the LSDA at {at:#x}: {e}"))?);
    }
    pads.sort_unstable();
    pads.dedup();
    Ok(pads)
}

/// The landing pads one LSDA names: `bytes` from the LSDA's first byte
/// (to its section's end, which bounds every read; little-endian, as on
/// x86-64), `start` its function's first address, from which the pads
/// are offsets.
pub fn call_site_pads(bytes: &[u8], start: u64) -> Result<Vec<u64>, String> {
    use gimli::Reader as _;
    let why = |e: gimli::Error| format!("{e}");
    let mut r = gimli::EndianSlice::new(bytes, gimli::LittleEndian);
    if r.read_u8().map_err(why)? != OMIT {
        // GCC and Clang never write one: each function's pads are offsets
        // from its own start.
        return Err("it names a landing pad base of its own".into());
    }
    if r.read_u8().map_err(why)? != OMIT {
        r.read_uleb128().map_err(why)?; // the type table's offset: not needed here
    }
    let enc = r.read_u8().map_err(why)?;
    let len = r.read_uleb128().map_err(why)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&n| n <= r.len())
        .ok_or("its call-site table runs past its section")?;
    let mut table = r.split(len).map_err(why)?;
    let mut pads = Vec::new();
    while !table.is_empty() {
        let _call = value(&mut table, enc)?;
        let _len = value(&mut table, enc)?;
        let pad = value(&mut table, enc)?;
        let _action = table.read_uleb128().map_err(why)?;
        if pad != 0 {
            pads.push(
                start
                    .checked_add(pad)
                    .ok_or("a landing pad lies past the address space")?,
            );
        }
    }
    Ok(pads)
}

/// A call-site table's value in encoding `enc` (`DW_EH_PE_*`): an
/// offset, so only the plain formats, no base applied, none negative.
fn value(r: &mut gimli::EndianSlice<'_, gimli::LittleEndian>, enc: u8) -> Result<u64, String> {
    use gimli::Reader as _;
    let why = |e: gimli::Error| format!("{e}");
    let signed = |v: i64| u64::try_from(v).map_err(|_| "an offset is negative".to_string());
    match enc {
        0x00 | 0x04 => r.read_u64().map_err(why),
        0x01 => r.read_uleb128().map_err(why),
        0x02 => r.read_u16().map(u64::from).map_err(why),
        0x03 => r.read_u32().map(u64::from).map_err(why),
        0x09 => signed(r.read_sleb128().map_err(why)?),
        0x0a => signed(i64::from(r.read_i16().map_err(why)?)),
        0x0b => signed(i64::from(r.read_i32().map_err(why)?)),
        0x0c => signed(r.read_i64().map_err(why)?),
        e => Err(format!(
            "its call sites are in an encoding not known here ({e:#x})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_site_table_gives_its_landing_pads_from_the_function_start() {
        // GCC's form: no base, a type table, call sites in ULEB128: two
        // calls with pads at +0x40 and +0x1234, one without (0).
        let lsda = [
            0xff, // no landing pad base
            0x9b, 0x0d, // type table (udata4 | pcrel | indirect), offset 13
            0x01, // call sites in ULEB128
            0x0d, // 13 bytes of them
            0x05, 0x05, 0x40, 0x01, // call at +5, 5 long, pad +0x40, action 1
            0x10, 0x05, 0x00, 0x00, // call at +0x10: no pad
            0x20, 0x05, 0xb4, 0x24, 0x00, // call at +0x20: pad +0x1234
            0x7f, 0x00, // (the action table, past the call sites)
        ];
        assert_eq!(
            call_site_pads(&lsda, 0x401000).unwrap(),
            [0x401040, 0x402234]
        );
        // Clang's older form: no type table, call sites in udata4 (the
        // action still ULEB128).
        let mut clang = vec![0xff, 0xff, 0x03, 13];
        for v in [4u32, 6, 0x30] {
            clang.extend(v.to_le_bytes());
        }
        clang.push(0);
        assert_eq!(call_site_pads(&clang, 0x2000).unwrap(), [0x2030]);
    }

    #[test]
    fn what_cannot_be_read_whole_is_refused() {
        // A base of its own (udata8 follows).
        assert!(call_site_pads(&[0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0x01, 0], 0).is_err());
        // A table longer than the bytes left.
        assert!(call_site_pads(&[0xff, 0xff, 0x01, 0x20, 0x00], 0).is_err());
        // A record cut short inside the table.
        assert!(call_site_pads(&[0xff, 0xff, 0x01, 0x02, 0x05, 0x05], 0).is_err());
        // An encoding with a base applied (pcrel).
        assert!(call_site_pads(&[0xff, 0xff, 0x13, 0x04, 0, 0, 0, 0], 0).is_err());
        // A negative offset.
        assert!(call_site_pads(&[0xff, 0xff, 0x09, 0x04, 0x01, 0x01, 0x7f, 0x00], 0).is_err());
        // An empty table: no pads.
        assert_eq!(
            call_site_pads(&[0xff, 0xff, 0x01, 0x00], 0).unwrap(),
            Vec::<u64>::new()
        );
        // Nothing at all.
        assert!(call_site_pads(&[], 0).is_err());
    }
}
