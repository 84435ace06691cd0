//! Where the program's text is: executable segments and load biases, from
//! the dynamic linker (`dl_iterate_phdr`).
//!
//! gprof reads link-time addresses from the executable while a PIE runs at
//! `link-time address + load bias`; gmon.out must hold the former.

use std::ops::Range;

use libc::{c_int, c_void, dl_phdr_info, size_t};

/// An executable address range of one loaded object, in run-time addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Text {
    /// Lowest address of the object's executable `PT_LOAD` segments.
    pub low: usize,
    /// One past the highest.
    pub high: usize,
    /// The object's load bias (run-time minus link-time address; 0 for a
    /// non-PIE executable).
    pub bias: usize,
}

impl Text {
    /// The range as `low..high`.
    pub fn range(&self) -> Range<usize> {
        self.low..self.high
    }
}

struct Search {
    /// Find the object containing this address; `None`: the main program.
    addr: Option<usize>,
    found: Option<Text>,
}

fn executable_span(info: &dl_phdr_info) -> Option<(usize, usize)> {
    let bias = info.dlpi_addr as usize;
    // SAFETY: the dynamic linker hands out dlpi_phnum valid program headers.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let mut span: Option<(usize, usize)> = None;
    for ph in phdrs {
        if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
            let lo = bias.wrapping_add(ph.p_vaddr as usize);
            let hi = lo.wrapping_add(ph.p_memsz as usize);
            span = Some(match span {
                None => (lo, hi),
                Some((a, b)) => (a.min(lo), b.max(hi)),
            });
        }
    }
    span
}

fn contains(info: &dl_phdr_info, addr: usize) -> bool {
    let bias = info.dlpi_addr as usize;
    // SAFETY: as in `executable_span`.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    phdrs.iter().any(|ph| {
        let lo = bias.wrapping_add(ph.p_vaddr as usize);
        ph.p_type == libc::PT_LOAD && addr >= lo && addr - lo < ph.p_memsz as usize
    })
}

extern "C" fn visit(info: *mut dl_phdr_info, _size: size_t, data: *mut c_void) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info and our `Search`.
    let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
    let wanted = match search.addr {
        None => true, // the first object reported is the main program
        Some(a) => contains(info, a),
    };
    if !wanted {
        return 0;
    }
    search.found = executable_span(info).map(|(low, high)| Text {
        low,
        high,
        bias: info.dlpi_addr as usize,
    });
    if search.found.is_none() && search.addr.is_some() {
        // A non-executable object holding the address: report its bias.
        search.found = Some(Text {
            low: 0,
            high: 0,
            bias: info.dlpi_addr as usize,
        });
    }
    1
}

fn search(addr: Option<usize>) -> Option<Text> {
    let mut s = Search { addr, found: None };
    // SAFETY: `visit` matches the callback type and only uses `s` during the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut s as *mut Search as *mut c_void) };
    s.found
}

/// The main program's executable segments (run-time addresses) and bias.
pub fn main_program() -> Option<Text> {
    search(None).filter(|t| t.high > t.low)
}

/// The load bias of the object that maps `addr`, if any object does.
pub fn bias_of(addr: usize) -> Option<usize> {
    search(Some(addr)).map(|t| t.bias)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn main_program_text_holds_this_function() {
        let t = main_program().expect("the test binary has text");
        let me = main_program_text_holds_this_function as *const () as usize;
        assert!(t.range().contains(&me), "{t:?} does not contain {me:#x}");
        assert_eq!(bias_of(me), Some(t.bias));
        assert_eq!(bias_of(8), None);
    }
}
