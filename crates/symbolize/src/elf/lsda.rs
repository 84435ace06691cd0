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
    let Some(sec) = file.section_by_name(".eh_frame") else {
        // No unwinder can reach an LSDA without an FDE.
        return match file.section_by_name(".gcc_except_table") {
            Some(_) => Err("it has exception tables but no .eh_frame".into()),
            None => Ok(Vec::new()),
        };
    };
    let data = sec.data().map_err(|e| format!(".eh_frame: {e}"))?;
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
/// (to its section's end, which bounds every read), `start` its
/// function's first address, from which the pads are offsets.
pub fn call_site_pads(bytes: &[u8], start: u64) -> Result<Vec<u64>, String> {
    let mut r = Reader(bytes);
    if r.u8()? != OMIT {
        // GCC and Clang never write one: each function's pads are offsets
        // from its own start.
        return Err("it names a landing pad base of its own".into());
    }
    if r.u8()? != OMIT {
        r.uleb()?; // the type table's offset: not needed here
    }
    let enc = r.u8()?;
    let len = r.uleb()?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&n| n <= r.0.len())
        .ok_or("its call-site table runs past its section")?;
    let mut table = Reader(&r.0[..len]);
    let mut pads = Vec::new();
    while !table.0.is_empty() {
        let _call = table.value(enc)?;
        let _len = table.value(enc)?;
        let pad = table.value(enc)?;
        let _action = table.uleb()?;
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

/// A bounded reader of an LSDA's bytes.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("it ends inside a value".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn uleb(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a LEB128 value is longer than 64 bits".into())
    }

    fn sleb(&mut self) -> Result<i64, String> {
        let mut v = 0i64;
        let mut shift = 0;
        loop {
            let b = self.u8()?;
            if shift >= 64 {
                return Err("a LEB128 value is longer than 64 bits".into());
            }
            v |= i64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    v |= -1i64 << shift;
                }
                return Ok(v);
            }
        }
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// A call-site table's value in encoding `enc` (`DW_EH_PE_*`): an
    /// offset, so only the plain formats, no base applied, none negative.
    fn value(&mut self, enc: u8) -> Result<u64, String> {
        let signed = |v: i64| u64::try_from(v).map_err(|_| "an offset is negative".to_string());
        match enc {
            0x00 | 0x04 => Ok(u64::from_le_bytes(self.fixed()?)),
            0x01 => self.uleb(),
            0x02 => Ok(u64::from(u16::from_le_bytes(self.fixed()?))),
            0x03 => Ok(u64::from(u32::from_le_bytes(self.fixed()?))),
            0x09 => signed(self.sleb()?),
            0x0a => signed(i64::from(i16::from_le_bytes(self.fixed()?))),
            0x0b => signed(i64::from(i32::from_le_bytes(self.fixed()?))),
            0x0c => signed(i64::from_le_bytes(self.fixed()?)),
            e => Err(format!(
                "its call sites are in an encoding not known here ({e:#x})"
            )),
        }
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
