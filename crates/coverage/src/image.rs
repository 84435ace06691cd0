//! What the planner reads of a module's file: only what its ELF headers
//! name, within stated bounds.
//!
//! The planning server runs as root for `startcp` and may read a module
//! for a process of another user, who chooses what that process maps. So
//! a module is never read whole: [`Layout::of`] reads the ELF header
//! (refusing anything that is not a 64-bit little-endian x86-64 ELF
//! object), the program and section header tables, and names the
//! sections planning needs: those loaded with the program (`SHF_ALLOC`:
//! the code, the data holding jump tables and code addresses, the
//! dynamic symbols and relocations, `.eh_frame`, the build-id note) and
//! the symbol tables with their strings. Debugging information and any
//! other unloaded section are not read. [`Layout::read`] then reads those
//! ranges, and only those, into one compact image: the same ELF with the
//! gaps between them left out (every offset in its headers moved to
//! match, each range keeping its offset modulo 16; a section not read
//! becomes `SHT_NOBITS`; the program headers keep the file's offsets). A
//! file whose headers name ranges past its end is refused.
//!
//! **Bounds** ([`Limits`]). For a module read on behalf of a process of
//! root or of profdev's own user, or one that only they can have written
//! ([`Limits::OWN`]): at most 1 GiB of code (executable sections) and 4
//! GiB read. For a file that a process of any other user asks for and
//! that such a user can have written ([`Limits::FOREIGN`], see
//! [`Limits::for_file`]): at most [`FOREIGN_CODE`] (4 MiB) of code and
//! [`FOREIGN_READ`] (16 MiB) read in all; a module beyond either is
//! refused from its headers alone (a few KiB read), before anything else
//! is read or allocated. Planning costs at most about 45 bytes of memory
//! per byte of code (code of zero bytes, all 2-byte instructions in one
//! block; compiled code about 12 bytes, libc's 2 MiB some 50 MB), so such
//! a module costs the server at most about 200 MB while it is planned.
//! The planning server also bounds what it plans for other users'
//! processes per run (see [`crate::launch`]).

use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::plan::PlanError;

/// Executable code planned for one module of another user's process.
pub const FOREIGN_CODE: u64 = 4 << 20;

/// Bytes read of one module for another user's process.
pub const FOREIGN_READ: u64 = 16 << 20;

/// What reading one module may cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of executable sections (what the planner decodes).
    pub code: u64,
    /// Bytes read in all (headers and sections).
    pub read: u64,
}

impl Limits {
    /// A module read for root's or profdev's own user's process.
    pub const OWN: Limits = Limits {
        code: 1 << 30,
        read: 4 << 30,
    };
    /// A module read for a process of another user.
    pub const FOREIGN: Limits = Limits {
        code: FOREIGN_CODE,
        read: FOREIGN_READ,
    };

    /// The limits of a file read for a process of another user (or with
    /// no requester to judge by: the uprobe fallback's executable):
    /// [`Limits::OWN`] when only root or profdev's user can have written
    /// it (owned by one of them, no group or other write bit), else
    /// [`Limits::FOREIGN`].
    pub fn for_file(meta: &std::fs::Metadata) -> Limits {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if (meta.uid() == 0 || meta.uid() == me) && meta.mode() & 0o022 == 0 {
            Limits::OWN
        } else {
            Limits::FOREIGN
        }
    }
}

const SHT_NOBITS: u32 = 8;
const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_SYMTAB_SHNDX: u32 = 18;
const SHF_ALLOC: u64 = 2;
const SHF_EXECINSTR: u64 = 4;
const EHDR: u64 = 64;
const SHDR: u64 = 64;
const PHDR: u64 = 56;

/// One section header's fields the layout uses.
#[derive(Clone, Copy, Debug)]
struct Section {
    kind: u32,
    flags: u64,
    offset: u64,
    size: u64,
}

impl Section {
    fn needed(&self) -> bool {
        self.kind != SHT_NOBITS
            && self.size > 0
            && (self.flags & SHF_ALLOC != 0
                || matches!(self.kind, SHT_SYMTAB | SHT_STRTAB | SHT_SYMTAB_SHNDX))
    }
}

/// The ranges of a module file planning reads, from its headers.
#[derive(Debug)]
pub struct Layout {
    phoff: u64,
    phnum: u64,
    shoff: u64,
    sections: Vec<Section>,
    /// Merged ranges (file offset, end), ascending.
    ranges: Vec<(u64, u64)>,
    code: u64,
    total: u64,
}

fn u16_at(b: &[u8], at: usize) -> u64 {
    u64::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn u32_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes(
        b[at..at + 4].try_into().unwrap_or([0; 4]),
    ))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
}

impl Layout {
    /// Read the headers of the module open as `file` (`path` names it in
    /// errors) and name what planning will read, refusing a file that is
    /// not an x86-64 ELF object or that `limits` do not allow.
    pub fn of(file: &std::fs::File, path: &Path, limits: Limits) -> Result<Layout, PlanError> {
        let err = |why: String| PlanError::Read {
            path: path.display().to_string(),
            why,
        };
        let meta = file.metadata().map_err(|e| err(e.to_string()))?;
        if !meta.is_file() {
            return Err(err("it is not a regular file".into()));
        }
        let len = meta.len();
        let mut h = [0u8; EHDR as usize];
        if len < EHDR || file.read_exact_at(&mut h, 0).is_err() || !h.starts_with(b"\x7fELF") {
            return Err(err("it is not an ELF file".into()));
        }
        if h[4] != 2 || h[5] != 1 || u16_at(&h, 18) != u64::from(object::elf::EM_X86_64) {
            return Err(err("it is not an x86-64 object".into()));
        }
        let phoff = u64_at(&h, 32);
        let shoff = u64_at(&h, 40);
        let (phentsize, mut phnum) = (u16_at(&h, 54), u16_at(&h, 56));
        let (shentsize, mut shnum) = (u16_at(&h, 58), u16_at(&h, 60));
        let in_file = |off: u64, n: u64| off.checked_add(n).is_some_and(|e| e <= len);
        let bad = |what: &str| err(format!("its {what} lie outside the file"));
        if shoff != 0 {
            if shentsize != SHDR {
                return Err(err("its section headers are not ELF64's".into()));
            }
            // Extended numbering: counts too large for the header are in
            // section 0.
            if shnum == 0 || phnum == 0xffff {
                let mut s0 = [0u8; SHDR as usize];
                if !in_file(shoff, SHDR) || file.read_exact_at(&mut s0, shoff).is_err() {
                    return Err(bad("section headers"));
                }
                if shnum == 0 {
                    shnum = u64_at(&s0, 32);
                }
                if phnum == 0xffff {
                    phnum = u32_at(&s0, 44);
                }
            }
        } else {
            shnum = 0;
        }
        if phnum > 0 && phentsize != PHDR {
            return Err(err("its program headers are not ELF64's".into()));
        }
        let tables = shnum.saturating_mul(SHDR).saturating_add(phnum * PHDR);
        if tables > limits.read {
            return Err(err(format!(
                "its headers ({}) are more than the {} profdev reads of a module here",
                mib(tables),
                mib(limits.read)
            )));
        }
        if !in_file(shoff, shnum * SHDR) {
            return Err(bad("section headers"));
        }
        if phnum > 0 && !in_file(phoff, phnum * PHDR) {
            return Err(bad("program headers"));
        }
        let mut raw = vec![0u8; (shnum * SHDR) as usize];
        file.read_exact_at(&mut raw, shoff)
            .map_err(|e| err(e.to_string()))?;
        let sections: Vec<Section> = raw
            .chunks_exact(SHDR as usize)
            .map(|s| Section {
                kind: u32_at(s, 4) as u32,
                flags: u64_at(s, 8),
                offset: u64_at(s, 24),
                size: u64_at(s, 32),
            })
            .collect();
        let mut code: u64 = 0;
        let mut ranges = vec![(0, EHDR)];
        if phnum > 0 {
            ranges.push((phoff, phoff + phnum * PHDR));
        }
        if shnum > 0 {
            ranges.push((shoff, shoff + shnum * SHDR));
        }
        for s in &sections {
            if !s.needed() {
                continue;
            }
            if !in_file(s.offset, s.size) {
                return Err(bad("sections"));
            }
            if s.flags & SHF_EXECINSTR != 0 {
                code = code.saturating_add(s.size);
            }
            ranges.push((s.offset, s.offset + s.size));
        }
        if code > limits.code {
            return Err(err(format!(
                "its code ({}) is more than the {} profdev plans of a module here",
                mib(code),
                mib(limits.code)
            )));
        }
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (a, b) in ranges {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let total = merged.iter().map(|(a, b)| b - a + 16).sum::<u64>();
        if total > limits.read {
            return Err(err(format!(
                "what planning reads of it ({}) is more than the {} profdev reads of a module here",
                mib(total),
                mib(limits.read)
            )));
        }
        Ok(Layout {
            phoff,
            phnum,
            shoff,
            sections,
            ranges: merged,
            code,
            total,
        })
    }

    /// Bytes of executable sections.
    pub fn code(&self) -> u64 {
        self.code
    }

    /// Bytes [`Layout::read`] reads (at most; padding included).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Where file offset `off` lands in the image, given the ranges'
    /// places.
    fn moved(&self, places: &[u64], off: u64) -> Option<u64> {
        let i = self.ranges.partition_point(|r| r.0 <= off).checked_sub(1)?;
        let (a, b) = self.ranges[i];
        (off <= b).then(|| places[i] + (off - a))
    }

    /// Read the named ranges of `file` (the file [`Layout::of`] read)
    /// into the compact image the planner parses.
    pub fn read(&self, file: &std::fs::File, path: &Path) -> Result<Vec<u8>, PlanError> {
        let err = |why: String| PlanError::Read {
            path: path.display().to_string(),
            why,
        };
        let mut image: Vec<u8> = Vec::new();
        image
            .try_reserve_exact(self.total as usize)
            .map_err(|e| err(e.to_string()))?;
        let mut places = Vec::with_capacity(self.ranges.len());
        for &(a, b) in &self.ranges {
            // Each range keeps its offset modulo 16 (the headers' and
            // tables' alignment).
            let pad = (a.wrapping_sub(image.len() as u64)) & 15;
            image.resize(image.len() + pad as usize, 0);
            places.push(image.len() as u64);
            let at = image.len();
            image.resize(at + (b - a) as usize, 0);
            file.read_exact_at(&mut image[at..], a)
                .map_err(|e| err(format!("cannot read it: {e}")))?;
        }
        let put = |image: &mut Vec<u8>, at: u64, v: u64| {
            let at = at as usize;
            image[at..at + 8].copy_from_slice(&v.to_le_bytes());
        };
        let moved = |off: u64| self.moved(&places, off).unwrap_or(0);
        // The ELF header is range 0, at 0.
        put(
            &mut image,
            32,
            if self.phnum > 0 { moved(self.phoff) } else { 0 },
        );
        let sh = if self.sections.is_empty() {
            0
        } else {
            moved(self.shoff)
        };
        put(&mut image, 40, sh);
        for (i, s) in self.sections.iter().enumerate() {
            let at = sh + i as u64 * SHDR;
            if s.needed() {
                put(&mut image, at + 24, moved(s.offset));
            } else if s.kind != SHT_NOBITS && i > 0 {
                // Not read: present, without contents.
                let at = at as usize + 4;
                image[at..at + 4].copy_from_slice(&SHT_NOBITS.to_le_bytes());
            }
        }
        // The program headers keep the file's offsets (the uprobe
        // fallback places its probes by them; planning reads sections).
        Ok(image)
    }
}

/// The compact image of the module open as `file`, within `limits`.
pub fn read(file: &std::fs::File, path: &Path, limits: Limits) -> Result<Vec<u8>, PlanError> {
    Layout::of(file, path, limits)?.read(file, path)
}

/// Write at `p` an x86-64 ELF executable whose one executable section
/// (and loaded segment) is `code` bytes of zeros, the file sparse: a
/// fixture for the tests of these bounds (here and in the CLI's).
#[doc(hidden)]
pub fn sparse_elf(p: &Path, code: u64) -> std::io::Result<()> {
    let mut h = vec![0u8; 0x1000];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2;
    h[5] = 1;
    h[6] = 1;
    let put16 = |h: &mut [u8], at: usize, v: u16| h[at..at + 2].copy_from_slice(&v.to_le_bytes());
    let put32 = |h: &mut [u8], at: usize, v: u32| h[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let put64 = |h: &mut [u8], at: usize, v: u64| h[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put16(&mut h, 16, 2); // ET_EXEC
    put16(&mut h, 18, 62);
    put32(&mut h, 20, 1);
    put64(&mut h, 24, 0x400000 + 0x1000);
    put64(&mut h, 32, 64); // phoff
    put64(&mut h, 40, 0x200); // shoff
    put16(&mut h, 52, 64);
    put16(&mut h, 54, 56);
    put16(&mut h, 56, 1);
    put16(&mut h, 58, 64);
    put16(&mut h, 60, 3);
    put16(&mut h, 62, 2);
    // PT_LOAD r-x covering the file.
    let ph = 64;
    put32(&mut h, ph, 1);
    put32(&mut h, ph + 4, 5);
    put64(&mut h, ph + 8, 0);
    put64(&mut h, ph + 16, 0x400000);
    put64(&mut h, ph + 24, 0x400000);
    put64(&mut h, ph + 32, 0x1000 + code);
    put64(&mut h, ph + 40, 0x1000 + code);
    put64(&mut h, ph + 48, 0x1000);
    // Section names.
    let names = b"\0.text\0.shstrtab\0";
    h[0x100..0x100 + names.len()].copy_from_slice(names);
    // [1] .text, [2] .shstrtab
    let s1 = 0x200 + 64;
    put32(&mut h, s1, 1);
    put32(&mut h, s1 + 4, 1); // PROGBITS
    put64(&mut h, s1 + 8, 6); // ALLOC|EXEC
    put64(&mut h, s1 + 16, 0x401000);
    put64(&mut h, s1 + 24, 0x1000);
    put64(&mut h, s1 + 32, code);
    put64(&mut h, s1 + 48, 16);
    let s2 = 0x200 + 128;
    put32(&mut h, s2, 7);
    put32(&mut h, s2 + 4, 3); // STRTAB
    put64(&mut h, s2 + 24, 0x100);
    put64(&mut h, s2 + 32, names.len() as u64);
    put64(&mut h, s2 + 48, 1);
    let f = std::fs::File::create(p)?;
    f.write_all_at(&h, 0)?;
    f.set_len(0x1000 + code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Plan;

    fn exe() -> std::path::PathBuf {
        std::env::current_exe().unwrap()
    }

    #[test]
    fn the_image_plans_as_the_whole_file_does() {
        for p in [exe(), "/bin/true".into()] {
            let whole = std::fs::read(&p).unwrap();
            let f = std::fs::File::open(&p).unwrap();
            let image = read(&f, &p, Limits::OWN).unwrap();
            assert!(image.len() <= whole.len(), "{}", p.display());
            let a = Plan::of_bytes(&whole, &p).unwrap();
            let b = Plan::of_bytes(&image, &p).unwrap();
            assert_eq!(a.blocks.len(), b.blocks.len(), "{}", p.display());
            assert!(a
                .blocks
                .iter()
                .zip(&b.blocks)
                .all(|(x, y)| x.start == y.start && x.end == y.end && x.how == y.how));
            assert_eq!(a.branches, b.branches);
            assert_eq!(a.tables, b.tables);
            assert_eq!(a.build_id, b.build_id);
            assert!(a.build_id.is_some() || p == exe());
        }
    }

    #[test]
    fn a_file_that_is_not_elf_is_refused_from_its_first_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("sparse");
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(768 << 20).unwrap();
        let e = Layout::of(&f, &p, Limits::OWN).unwrap_err().to_string();
        assert!(e.contains("not an ELF file"), "{e}");
    }

    #[test]
    fn a_module_whose_code_is_over_the_limit_is_refused_from_its_headers() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("big");
        super::sparse_elf(&p, 768 << 20).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let e = Layout::of(&f, &p, Limits::FOREIGN).unwrap_err().to_string();
        assert!(e.contains("768.0 MiB") && e.contains("4.0 MiB"), "{e}");
        // Within root's limits it is named, but nothing is read yet.
        let l = Layout::of(&f, &p, Limits::OWN).unwrap();
        assert_eq!(l.code(), 768 << 20);
    }

    #[test]
    fn damaged_headers_are_refused_or_read_never_panic() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("damaged");
        let good = std::fs::read("/bin/true").unwrap();
        let shoff = u64_at(&good, 40) as usize;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..300 {
            let mut b = good.clone();
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // The ELF header, the program headers or the section
                // headers.
                let at = match x % 3 {
                    0 => (x >> 8) as usize % 64,
                    1 => 64 + (x >> 8) as usize % 0x200,
                    _ => shoff + (x >> 8) as usize % (b.len() - shoff),
                };
                b[at] = (x >> 40) as u8;
            }
            std::fs::write(&p, &b).unwrap();
            let f = std::fs::File::open(&p).unwrap();
            if let Ok(image) = read(&f, &p, Limits::FOREIGN) {
                assert!(image.len() as u64 <= FOREIGN_READ);
                let _ = Plan::of_bytes(&image, &p);
            }
        }
    }

    #[test]
    fn a_small_crafted_module_plans_from_its_image() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("small");
        super::sparse_elf(&p, 4096).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let image = read(&f, &p, Limits::FOREIGN).unwrap();
        assert!(image.len() < 0x3000, "{}", image.len());
        let plan = Plan::of_bytes(&image, &p).unwrap();
        assert!(!plan.blocks.is_empty());
    }
}
