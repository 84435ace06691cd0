//! `union bpf_attr` of `<linux/bpf.h>`, one named `#[repr(C)]` struct per
//! bpf(2) command that profdev issues, and the call itself.
//!
//! # Description
//!
//! The kernel's `union bpf_attr` overlays one anonymous struct per
//! command. Each struct here mirrors the leading fields of one of them, up
//! to the last field profdev sets; the kernel reads a shorter attribute as
//! if its tail were zero (bpf(2) is passed the struct's size). Every byte
//! is a named field, so none is left uninitialized: padding the kernel
//! leaves implicit is an explicit [`Zero32`], which cannot hold anything
//! else.
//!
//! A `const` block under each struct asserts every field's offset and the
//! struct's size against the uapi header (the numbers are `offsetof` on
//! `union bpf_attr` of Linux 6.6, where `link_create.uprobe_multi`
//! appeared), so a misplaced field fails the build, not the verifier.
//!
//! Pointer fields are `__aligned_u64` in the kernel and `u64` here: the
//! caller stores an address (`slice.as_ptr() as u64`) and keeps what it
//! points to alive across [`syscall`].
//!
//! | command               | struct             | used by                          |
//! |-----------------------|--------------------|----------------------------------|
//! | `BPF_MAP_CREATE`      | [`MapCreate`]      | the kprof histogram, uprobe link |
//! | `BPF_MAP_LOOKUP_ELEM` | [`MapLookupElem`]  | the uprobe link's counts         |
//! | `BPF_PROG_LOAD`       | [`ProgLoad`]       | the kprof histogram, uprobe link |
//! | `BPF_LINK_CREATE`     | [`UprobeMultiLink`]| the uprobe link                  |

use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{FromRawFd, OwnedFd};

/// `BPF_MAP_CREATE`.
pub const BPF_MAP_CREATE: libc::c_long = 0;
/// `BPF_MAP_LOOKUP_ELEM`.
pub const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
/// `BPF_PROG_LOAD`.
pub const BPF_PROG_LOAD: libc::c_long = 5;
/// `BPF_LINK_CREATE`.
pub const BPF_LINK_CREATE: libc::c_long = 28;

/// `BPF_MAP_TYPE_ARRAY`.
pub const BPF_MAP_TYPE_ARRAY: u32 = 2;
/// `BPF_MAP_TYPE_PERCPU_ARRAY`.
pub const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
/// `BPF_F_MMAPABLE`, a `map_flags` bit.
pub const BPF_F_MMAPABLE: u32 = 1 << 10;
/// `BPF_PROG_TYPE_KPROBE`.
pub const BPF_PROG_TYPE_KPROBE: u32 = 2;
/// `BPF_PROG_TYPE_PERF_EVENT`.
pub const BPF_PROG_TYPE_PERF_EVENT: u32 = 7;
/// `BPF_TRACE_UPROBE_MULTI`, an attach type.
pub const BPF_TRACE_UPROBE_MULTI: u32 = 48;
/// `BPF_OBJ_NAME_LEN`: a map's or program's name, NUL included.
pub const BPF_OBJ_NAME_LEN: usize = 16;

/// Four bytes the kernel's layout leaves as padding: always zero.
#[repr(transparent)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Zero32(u32);

/// A command's attribute: a `#[repr(C)]` mirror of the leading fields of
/// one member of `union bpf_attr`.
///
/// # Safety
///
/// An implementor has the kernel's layout for [`BpfAttr::CMD`] up to its
/// last field, no byte that is not a field (so every byte the kernel reads
/// is initialized, and the tail it checks is zero), and no field the
/// kernel writes through other than the pointers its caller stores.
pub unsafe trait BpfAttr {
    /// The bpf(2) command that takes this attribute.
    const CMD: libc::c_long;
}

/// bpf(2) command [`BpfAttr::CMD`] on `attr`: its return value. The
/// pointers `attr` holds (instructions, license, log buffer, paths, keys,
/// values) must be live for the call.
pub fn syscall<A: BpfAttr>(attr: &mut A) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, exclusively borrowed block of
    // `size_of::<A>()` initialized bytes (the BpfAttr contract); the kernel
    // reads and writes at most that many, and the pointers inside it are
    // owned by the caller and outlive this call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            A::CMD,
            attr as *mut A,
            size_of::<A>() as libc::c_long,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret)
}

/// [`syscall`] for a command that returns a new descriptor.
pub fn fd<A: BpfAttr>(attr: &mut A) -> io::Result<OwnedFd> {
    let ret = syscall(attr)?;
    // SAFETY: the kernel just returned this descriptor; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as libc::c_int) })
}

/// A map's or program's name for `map_name`/`prog_name`: `name` followed
/// by zeros. Panics (at compile time when `const`) if `name` leaves no room
/// for the terminating NUL.
pub const fn obj_name(name: &[u8]) -> [u8; BPF_OBJ_NAME_LEN] {
    assert!(
        name.len() < BPF_OBJ_NAME_LEN,
        "a BPF object name is at most 15 bytes"
    );
    let mut out = [0u8; BPF_OBJ_NAME_LEN];
    let mut i = 0;
    while i < name.len() {
        out[i] = name[i];
        i += 1;
    }
    out
}

/// `BPF_MAP_CREATE`'s attribute, through `map_flags`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct MapCreate {
    /// `map_type`: `BPF_MAP_TYPE_*`.
    pub map_type: u32,
    /// `key_size` in bytes.
    pub key_size: u32,
    /// `value_size` in bytes.
    pub value_size: u32,
    /// `max_entries`.
    pub max_entries: u32,
    /// `map_flags`: `BPF_F_*`.
    pub map_flags: u32,
}

// SAFETY: the layout is asserted below; five u32 fields leave no padding.
unsafe impl BpfAttr for MapCreate {
    const CMD: libc::c_long = BPF_MAP_CREATE;
}

const _: () = {
    assert!(offset_of!(MapCreate, map_type) == 0);
    assert!(offset_of!(MapCreate, key_size) == 4);
    assert!(offset_of!(MapCreate, value_size) == 8);
    assert!(offset_of!(MapCreate, max_entries) == 12);
    assert!(offset_of!(MapCreate, map_flags) == 16);
    assert!(size_of::<MapCreate>() == 20);
};

/// `BPF_MAP_LOOKUP_ELEM`'s attribute (the element commands' struct),
/// through `flags`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct MapLookupElem {
    /// `map_fd`: the map's descriptor.
    pub map_fd: u32,
    /// Padding before the 8-byte-aligned `key`.
    pub pad: Zero32,
    /// `key`: the address of the key.
    pub key: u64,
    /// `value`: the address of a buffer for the value (one per possible
    /// CPU for a per-CPU map).
    pub value: u64,
    /// `flags`: `BPF_F_LOCK` and the like.
    pub flags: u64,
}

// SAFETY: the layout is asserted below; the padding after `map_fd` is a
// field. The kernel writes only through `value`.
unsafe impl BpfAttr for MapLookupElem {
    const CMD: libc::c_long = BPF_MAP_LOOKUP_ELEM;
}

const _: () = {
    assert!(offset_of!(MapLookupElem, map_fd) == 0);
    assert!(offset_of!(MapLookupElem, pad) == 4);
    assert!(offset_of!(MapLookupElem, key) == 8);
    assert!(offset_of!(MapLookupElem, value) == 16);
    assert!(offset_of!(MapLookupElem, flags) == 24);
    assert!(size_of::<MapLookupElem>() == 32);
};

/// `BPF_PROG_LOAD`'s attribute, through `expected_attach_type`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct ProgLoad {
    /// `prog_type`: `BPF_PROG_TYPE_*`.
    pub prog_type: u32,
    /// `insn_cnt`: the number of 8-byte instruction slots.
    pub insn_cnt: u32,
    /// `insns`: the address of the encoded instructions.
    pub insns: u64,
    /// `license`: the address of a NUL-terminated license string.
    pub license: u64,
    /// `log_level`: 0 for no verifier log, 1 for the log of a rejection.
    pub log_level: u32,
    /// `log_size`: the log buffer's length.
    pub log_size: u32,
    /// `log_buf`: the address of the verifier log buffer.
    pub log_buf: u64,
    /// `kern_version`: unused by the program types profdev loads.
    pub kern_version: u32,
    /// `prog_flags`: `BPF_F_*`.
    pub prog_flags: u32,
    /// `prog_name`: see [`obj_name`].
    pub prog_name: [u8; BPF_OBJ_NAME_LEN],
    /// `prog_ifindex`: for offloaded programs.
    pub prog_ifindex: u32,
    /// `expected_attach_type`: `BPF_TRACE_*` and the like.
    pub expected_attach_type: u32,
}

// SAFETY: the layout is asserted below; every field is naturally aligned
// after its predecessor, leaving no padding. The kernel writes only through
// `log_buf` (within `log_size`).
unsafe impl BpfAttr for ProgLoad {
    const CMD: libc::c_long = BPF_PROG_LOAD;
}

const _: () = {
    assert!(offset_of!(ProgLoad, prog_type) == 0);
    assert!(offset_of!(ProgLoad, insn_cnt) == 4);
    assert!(offset_of!(ProgLoad, insns) == 8);
    assert!(offset_of!(ProgLoad, license) == 16);
    assert!(offset_of!(ProgLoad, log_level) == 24);
    assert!(offset_of!(ProgLoad, log_size) == 28);
    assert!(offset_of!(ProgLoad, log_buf) == 32);
    assert!(offset_of!(ProgLoad, kern_version) == 40);
    assert!(offset_of!(ProgLoad, prog_flags) == 44);
    assert!(offset_of!(ProgLoad, prog_name) == 48);
    assert!(offset_of!(ProgLoad, prog_ifindex) == 64);
    assert!(offset_of!(ProgLoad, expected_attach_type) == 68);
    assert!(size_of::<ProgLoad>() == 72);
};

/// A `BPF_PROG_LOAD` the kernel refused: its error, and the verifier's
/// log (empty when the verifier never ran: no permission, or no such
/// program or attach type in this kernel).
#[derive(Debug)]
pub struct LoadError {
    /// bpf(2)'s error.
    pub error: io::Error,
    /// The verifier's log, up to its first NUL.
    pub log: String,
}

impl LoadError {
    /// The log's first lines joined by ` | `: what one sentence can hold.
    pub fn log_head(&self) -> String {
        self.log.lines().take(8).collect::<Vec<_>>().join(" | ")
    }
}

/// Load a GPL program of `prog_type` named `name` ([`obj_name`]) from
/// its encoded instructions `code` (8 bytes each), with
/// `expected_attach_type` (0 for none), keeping the verifier's log for the
/// error. The kprof histogram and coverage's uprobe link load theirs here.
pub fn load_program(
    prog_type: u32,
    expected_attach_type: u32,
    name: [u8; BPF_OBJ_NAME_LEN],
    code: &[u8],
) -> Result<OwnedFd, LoadError> {
    let license = c"GPL";
    let mut log = vec![0u8; 1 << 16];
    let mut attr = ProgLoad {
        prog_type,
        insn_cnt: (code.len() / 8) as u32,
        insns: code.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        prog_name: name,
        expected_attach_type,
        ..ProgLoad::default()
    };
    fd(&mut attr).map_err(|error| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        LoadError {
            error,
            log: String::from_utf8_lossy(&log[..end]).into_owned(),
        }
    })
}

/// `BPF_LINK_CREATE`'s attribute with its `uprobe_multi` member (attach
/// type [`BPF_TRACE_UPROBE_MULTI`], Linux 6.6), through `pid`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UprobeMultiLink {
    /// `link_create.prog_fd`: the program's descriptor.
    pub prog_fd: u32,
    /// `link_create.target_fd`: unused by uprobe-multi links.
    pub target_fd: u32,
    /// `link_create.attach_type`: [`BPF_TRACE_UPROBE_MULTI`].
    pub attach_type: u32,
    /// `link_create.flags`.
    pub flags: u32,
    /// `uprobe_multi.path`: the address of the NUL-terminated path of the
    /// file probed.
    pub path: u64,
    /// `uprobe_multi.offsets`: the address of `cnt` u64 file offsets.
    pub offsets: u64,
    /// `uprobe_multi.ref_ctr_offsets`: the address of `cnt` reference
    /// counter offsets, or 0.
    pub ref_ctr_offsets: u64,
    /// `uprobe_multi.cookies`: the address of `cnt` u64 cookies, or 0.
    pub cookies: u64,
    /// `uprobe_multi.cnt`: the number of probes.
    pub cnt: u32,
    /// `uprobe_multi.flags`: `BPF_F_UPROBE_MULTI_RETURN` and the like.
    pub multi_flags: u32,
    /// `uprobe_multi.pid`: the only process counted, or 0 for all.
    pub pid: u32,
    /// The struct's tail padding up to 8-byte alignment.
    pub pad: Zero32,
}

// SAFETY: the layout is asserted below; the tail padding is a field. The
// kernel writes through none of the pointers.
unsafe impl BpfAttr for UprobeMultiLink {
    const CMD: libc::c_long = BPF_LINK_CREATE;
}

const _: () = {
    assert!(offset_of!(UprobeMultiLink, prog_fd) == 0);
    assert!(offset_of!(UprobeMultiLink, target_fd) == 4);
    assert!(offset_of!(UprobeMultiLink, attach_type) == 8);
    assert!(offset_of!(UprobeMultiLink, flags) == 12);
    assert!(offset_of!(UprobeMultiLink, path) == 16);
    assert!(offset_of!(UprobeMultiLink, offsets) == 24);
    assert!(offset_of!(UprobeMultiLink, ref_ctr_offsets) == 32);
    assert!(offset_of!(UprobeMultiLink, cookies) == 40);
    assert!(offset_of!(UprobeMultiLink, cnt) == 48);
    assert!(offset_of!(UprobeMultiLink, multi_flags) == 52);
    assert!(offset_of!(UprobeMultiLink, pid) == 56);
    assert!(offset_of!(UprobeMultiLink, pad) == 60);
    assert!(size_of::<UprobeMultiLink>() == 64);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_nul_padded() {
        let n = obj_name(b"kproftck");
        assert_eq!(&n[..8], b"kproftck");
        assert!(n[8..].iter().all(|&b| b == 0));
    }

    #[test]
    fn padding_is_zero() {
        assert_eq!(Zero32::default(), Zero32(0));
    }
}
