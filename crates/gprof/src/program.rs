//! CMD's executable as gmon.out describes it: its text in link-time
//! addresses, refused with a sentence when the file does not hold it; its
//! symbols; its identity, to know its mappings.

use anyhow::{anyhow, bail, Context, Result};
use profdev_formats::gmon::build;
use profdev_formats::symelf;
use profdev_symbolize::{ElfObject, SymOrigin};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// CMD's executable: its symbols, text range and identity.
pub struct Program {
    /// Its symbols.
    pub elf: ElfObject,
    /// Its canonical path.
    pub path: PathBuf,
    ino: u64,
    dev: (u32, u32),
    /// The histogram's low end (`.text`'s start, rounded as gmon does).
    pub lowpc: u64,
    /// The histogram's high end.
    pub highpc: u64,
    /// No symbol table: gprof needs the symbols file written beside gmon.out.
    pub stripped: bool,
    /// The symbol table's (`.symtab`'s) code symbols in `.text`, as gprof
    /// reads them from the file: address, size, name and binding.
    pub table: Vec<symelf::Symbol>,
}

impl Program {
    /// Open the executable at `path` (as the user named it, for messages).
    pub fn open(path: &Path) -> Result<Self> {
        let canonical = path
            .canonicalize()
            .with_context(|| format!("cannot read {}", path.display()))?;
        let meta = std::fs::metadata(&canonical)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let elf = match ElfObject::open(&canonical) {
            Ok(e) => e,
            Err(profdev_symbolize::ElfError::NotElf { .. }) => {
                bail!("{} is not an ELF executable", path.display())
            }
            Err(e) => return Err(e.into()),
        };
        if elf.text_range().is_none() {
            bail!("{} has no .text section to profile", path.display());
        }
        // The histogram covers the text the file holds, never what its
        // section header claims.
        let (start, end) = present_text(&canonical, path)?;
        let table = text_symbols(&canonical, path, start..end)?;
        // Stripped: no function of the symbol tables in its text. Its
        // functions then come from .dynsym and .eh_frame, written for gprof
        // to a symbols file beside gmon.out.
        let stripped = !elf
            .symbols()
            .iter()
            .any(|s| s.origin == SymOrigin::Table && s.addr >= start && s.addr < end);
        if stripped
            && !elf
                .all_symbols()
                .iter()
                .any(|s| s.addr >= start && s.addr < end)
        {
            bail!(
                "{} has no symbol table (it was stripped) and no .eh_frame, so gprof could not \
                 name its functions",
                path.display()
            );
        }
        Ok(Program {
            elf,
            path: canonical,
            ino: meta.ino(),
            dev: (libc::major(meta.dev()), libc::minor(meta.dev())),
            lowpc: build::text_bounds(start, end).0,
            highpc: build::text_bounds(start, end).1,
            stripped,
            table,
        })
    }

    /// Is the mapping this executable?
    pub fn is(&self, m: &profdev_symbolize::Mapping) -> bool {
        match m.file {
            Some(f) => f.ino == self.ino && (f.major, f.minor) == self.dev,
            None => Path::new(&m.path) == self.path,
        }
    }

    /// Does the executable name a dynamic loader (`.interp`), which
    /// `--exact` needs to preload its runtime?
    pub fn dynamically_linked(&self) -> bool {
        dynamically_linked(&self.path)
    }
}

/// Does the executable at `path` name a dynamic loader (`.interp`)?
fn dynamically_linked(path: &Path) -> bool {
    use object::read::elf::{ElfFile64, ProgramHeader};
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    // Only the headers are read.
    let cache = object::ReadCache::new(file);
    let Ok(elf) = ElfFile64::<object::Endianness, _>::parse(&cache) else {
        return false;
    };
    let endian = elf.endian();
    elf.elf_program_headers()
        .iter()
        .any(|ph| ph.p_type(endian) == object::elf::PT_INTERP)
}

/// The code symbols of the symbol table (`.symtab`) of the executable at
/// `path` (`shown` names it to the user) whose addresses are in `text`
/// (its end included: a symbol there ends the last function), as gprof
/// reads them: functions and untyped labels in executable sections, with
/// a name; not section or file symbols.
fn text_symbols(
    path: &Path,
    shown: &Path,
    text: std::ops::Range<u64>,
) -> Result<Vec<symelf::Symbol>> {
    use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", shown.display()))?;
    let cache = object::ReadCache::new(file);
    let elf = profdev_symbolize::elf::parse(&cache, shown).map_err(|e| {
        anyhow!(
            "{} is a malformed ELF file: {}; give an intact executable",
            shown.display(),
            e.reason()
        )
    })?;
    let code = |i: Option<object::SectionIndex>| {
        i.and_then(|i| elf.section_by_index(i).ok())
            .is_some_and(|sec| sec.kind() == SectionKind::Text)
    };
    Ok(elf
        .symbols()
        .filter(|s| !matches!(s.kind(), SymbolKind::Section | SymbolKind::File))
        .filter(|s| code(s.section_index()) && s.address() >= text.start && s.address() <= text.end)
        .filter_map(|s| {
            let name = s.name().ok().filter(|n| !n.is_empty())?;
            let binding = if s.is_weak() {
                symelf::Binding::Weak
            } else if s.is_global() {
                symelf::Binding::Global
            } else {
                symelf::Binding::Local
            };
            Some(symelf::Symbol {
                addr: s.address(),
                size: s.size(),
                name: name.to_string(),
                binding,
            })
        })
        .collect())
}

/// The `.text` of the executable at `path` (`shown` names it to the user)
/// as gmon.out describes it, `(start, end)` in link-time addresses, when
/// its bytes are in the file: within the file's length, and within the
/// file bytes of one loadable segment (what exec maps and runs). The
/// histogram and the arc table are sized from this range, so a section
/// header that claims more text than the file holds (2^62 bytes) is
/// refused with a sentence instead of sizing them.
fn present_text(path: &Path, shown: &Path) -> Result<(u64, u64)> {
    use object::{Object, ObjectSection, ObjectSegment};
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", shown.display()))?;
    let len = file
        .metadata()
        .with_context(|| format!("cannot read {}", shown.display()))?
        .len();
    // Read what the headers name, not the whole file.
    let cache = object::ReadCache::new(file);
    let elf = profdev_symbolize::elf::parse(&cache, shown).map_err(|e| {
        anyhow!(
            "{} is a malformed ELF file: {}; give an intact executable",
            shown.display(),
            e.reason()
        )
    })?;
    let malformed = |why: String| {
        anyhow!(
            "{} is a malformed ELF file: {why}; give an intact executable",
            shown.display()
        )
    };
    let Some(text) = elf.section_by_name(".text") else {
        bail!("{} has no .text section to profile", shown.display());
    };
    let (start, size) = (text.address(), text.size());
    let Some((offset, _)) = text.file_range() else {
        return Err(malformed(
            "its .text section has no bytes in the file".into(),
        ));
    };
    if offset.checked_add(size).is_none_or(|e| e > len) {
        return Err(malformed(format!(
            "its .text section claims {size} bytes at file offset {offset}, past the end of \
             the file ({len} bytes)"
        )));
    }
    let end = start.checked_add(size).ok_or_else(|| {
        malformed(format!(
            "its .text section ends past 2^64 ({start:#x} + {size})"
        ))
    })?;
    let mapped = elf.segments().any(|seg| {
        let (seg_off, seg_len) = seg.file_range();
        let seg_end = seg.address().checked_add(seg_len);
        seg_off.checked_add(seg_len).is_some_and(|e| e <= len)
            && seg.address() <= start
            && seg_end.is_some_and(|e| end <= e)
    });
    if !mapped {
        return Err(malformed(format!(
            "its .text section ({size} bytes at {start:#x}) is not within the file bytes of a \
             loadable segment, so it is not the code that runs"
        )));
    }
    Ok((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unwinder's fixture (9 KB, static): `.text` is section 1, 0x12b
    /// bytes at 0x401000 from file offset 0x1000, all of its second load
    /// segment.
    const FX: &[u8] = include_bytes!("../../symbolize/fuzz-fixture/fx.elf");

    /// FX with `.text`'s section header field at `at` (bytes into the
    /// header) set to `value`, written to `dir/name`.
    fn fx_with(dir: &Path, name: &str, at: usize, value: u64) -> PathBuf {
        let mut b = FX.to_vec();
        let shoff = u64::from_le_bytes(b[0x28..0x30].try_into().unwrap()) as usize;
        let text = shoff + 64 + at;
        if at == 4 {
            b[text..text + 4].copy_from_slice(&(value as u32).to_le_bytes());
        } else {
            b[text..text + 8].copy_from_slice(&value.to_le_bytes());
        }
        let path = dir.join(name);
        std::fs::write(&path, b).unwrap();
        path
    }

    #[test]
    fn the_histogram_covers_only_text_the_file_holds() {
        let d = tempfile::tempdir().unwrap();
        let fx = fx_with(d.path(), "fx", 0x20, 0x12b);
        assert_eq!(present_text(&fx, &fx).unwrap(), (0x401000, 0x40112b));
        let p = Program::open(&fx).unwrap();
        assert_eq!((p.lowpc, p.highpc), (0x401000, 0x40112c));
        // The fixture is static: no loader to preload a runtime with.
        assert!(!p.dynamically_linked());
        // sh_size 2^62: past the end of the file, refused before anything
        // is sized from it.
        let huge = fx_with(d.path(), "huge", 0x20, 1 << 62);
        assert_eq!(
            format!("{:#}", Program::open(&huge).err().unwrap()),
            format!(
                "{} is a malformed ELF file: its .text section claims 4611686018427387904 \
                 bytes at file offset 4096, past the end of the file (9448 bytes); give an \
                 intact executable",
                huge.display()
            )
        );
        // In the file, but beyond what the segment maps: not the code that
        // runs.
        let long = fx_with(d.path(), "long", 0x20, 0x1000);
        assert_eq!(
            format!("{:#}", Program::open(&long).err().unwrap()),
            format!(
                "{} is a malformed ELF file: its .text section (4096 bytes at 0x401000) is not \
                 within the file bytes of a loadable segment, so it is not the code that runs; \
                 give an intact executable",
                long.display()
            )
        );
        // SHT_NOBITS: no bytes at all.
        let nobits = fx_with(d.path(), "nobits", 4, u64::from(object::elf::SHT_NOBITS));
        assert!(format!("{:#}", Program::open(&nobits).err().unwrap())
            .ends_with("its .text section has no bytes in the file; give an intact executable"));
        // An address range that wraps.
        let wraps = fx_with(d.path(), "wraps", 0x10, u64::MAX - 0x10);
        assert!(format!("{:#}", present_text(&wraps, &wraps).unwrap_err())
            .contains("its .text section ends past 2^64"));
    }

    #[test]
    fn not_elf_is_a_sentence() {
        let d = tempfile::tempdir().unwrap();
        let script = d.path().join("s.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let e = Program::open(&script).err().unwrap();
        assert_eq!(
            format!("{e:#}"),
            format!("{} is not an ELF executable", script.display())
        );
        let e = Program::open(&d.path().join("missing")).err().unwrap();
        assert!(format!("{e:#}").starts_with("cannot read "), "{e:#}");
    }

    #[test]
    fn the_test_binary_is_dynamic_with_symbols() {
        let me = Program::open(&std::env::current_exe().unwrap()).unwrap();
        assert!(me.dynamically_linked());
        assert!(!me.stripped);
        assert!(me.lowpc < me.highpc);
    }
}
