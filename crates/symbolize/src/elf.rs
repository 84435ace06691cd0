//! User-space ELF objects: symbols, load segments, and DWARF.
//!
//! An [`ElfObject`] answers, for an address in the file's own link-time
//! space ([`FileAddr`]), which function holds it (symbol table) and which
//! source lines and inlined frames (DWARF, through `addr2line`). It also
//! turns a mapping's file offset into a [`FileAddr`], which is how a
//! process address loses its load bias.

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};
use profdev_core::FileAddr;
use std::path::{Path, PathBuf};

mod dwarf;
mod eh_frame;
mod file;
mod layout;
mod lsda;
mod plt;

use dwarf::{decl_of, load_dwarf};
use eh_frame::eh_frame_symbols;
use file::map_file;
pub use file::only_root_writes;
pub(crate) use file::{file_bytes, Bytes};
pub use file::{parse, ElfBytes};
pub use layout::ElfLayout;
pub use lsda::{call_site_pads, landing_pads};
use plt::plt_symbols;

type Reader = gimli::EndianReader<gimli::RunTimeEndian, dwarf::Section>;

/// Why an object could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The file is not ELF.
    #[error("{path} is not an ELF file")]
    NotElf { path: String },
    /// The ELF could not be parsed.
    #[error("{path} is a malformed ELF file: {why}")]
    Malformed { path: String, why: String },
}

impl ElfError {
    /// The reason alone, without the file's name: the parser's own
    /// sentence for a malformed file, the system's for one not read.
    pub fn reason(&self) -> String {
        match self {
            ElfError::Read { source, .. } => source.to_string(),
            ElfError::NotElf { .. } => "not an ELF file".into(),
            ElfError::Malformed { why, .. } => why.clone(),
        }
    }

    /// As an `io::Error`: a read's own error as it came, else
    /// `InvalidData` with the [`reason`](Self::reason).
    pub fn into_io(self) -> std::io::Error {
        match self {
            ElfError::Read { source, .. } => source,
            e => std::io::Error::new(std::io::ErrorKind::InvalidData, e.reason()),
        }
    }
}

/// A function symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FnSym {
    /// Link-time address.
    pub addr: u64,
    /// Size in bytes (0 if unknown).
    pub size: u64,
    /// The name as stored in the file (mangled); [`FnSym::name`] demangles.
    pub mangled: String,
    /// Where the symbol comes from.
    pub origin: SymOrigin,
}

/// Where a [`FnSym`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SymOrigin {
    /// `.symtab` or `.dynsym`.
    Table,
    /// Synthesized for a PLT entry (`.plt`, `.plt.sec`, `.plt.got`) from the
    /// GOT slot its `jmp` reads and the relocation of that slot, as binutils
    /// and perf name them: `random_r@plt`. The lazy-binding code at the head
    /// of `.plt` (and, with IBT, its per-entry lazy stubs) is named `.plt`.
    Plt,
    /// Synthesized from an `.eh_frame` FDE that no symbol covers:
    /// `sub_<link-time address in hex>`, or `NAME.cold` for a fragment (an
    /// FDE whose first instruction is not a function entry) that directly
    /// follows, in `.eh_frame`, the FDE of the named function `NAME` (the
    /// order compilers emit a function and its cold part in).
    EhFrame,
}

impl FnSym {
    /// The demangled name (Rust hashes dropped). Demangling is done here,
    /// on demand, because objects such as librustc_driver hold hundreds of
    /// thousands of symbols of which a profile touches a few.
    pub fn name(&self) -> String {
        demangle(&self.mangled)
    }
}

/// One frame at an address: the innermost first, inlined callers after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Function name (demangled), if known.
    pub function: Option<String>,
    /// Source file, if known.
    pub file: Option<String>,
    /// Line, if known.
    pub line: Option<u32>,
}

/// One row of a line table, as [`ElfObject::line_rows`] gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineRow {
    /// First address (link-time).
    pub addr: u64,
    /// Bytes covered.
    pub len: u64,
    /// Source file path.
    pub file: String,
    /// Line, never 0.
    pub line: u32,
    /// Column, 0 where the table gives none.
    pub column: u32,
}

#[derive(Clone, Copy, Debug)]
struct LoadSegment {
    offset: u64,
    filesz: u64,
    vaddr: u64,
}

/// An ELF executable or shared library.
pub struct ElfObject {
    path: PathBuf,
    symbols: Vec<FnSym>,
    loads: Vec<LoadSegment>,
    build_id: Option<Vec<u8>>,
    text: Option<(u64, u64)>,
    entry: u64,
    is_dyn: bool,
    /// The file's bytes (mapped), kept to build the DWARF context lazily:
    /// symbol lookups never pay for it.
    bytes: std::sync::Arc<Bytes>,
    has_dwarf: bool,
    /// Behind a lock: addr2line's context fills its caches lazily and is
    /// not `Sync`, and an object is shared between threads.
    dwarf: std::sync::OnceLock<Option<std::sync::Mutex<addr2line::Context<Reader>>>>,
    /// Symbols from `.eh_frame` for the FDEs no symbol covers, built on
    /// the first lookup that misses the symbol table.
    eh_symbols: std::sync::OnceLock<Vec<FnSym>>,
}

impl std::fmt::Debug for ElfObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElfObject")
            .field("path", &self.path)
            .field("symbols", &self.symbols.len())
            .field("dwarf", &self.has_dwarf)
            .finish()
    }
}

impl ElfObject {
    /// Open and parse `path`.
    pub fn open(path: &Path) -> Result<Self, ElfError> {
        Self::from_bytes(map_file(path)?, path)
    }

    /// Parse the object open as `file` (mapped only if only root can write
    /// it, else read); `path` names it.
    pub fn from_file(file: &std::fs::File, path: &Path) -> Result<Self, ElfError> {
        Self::from_bytes(file_bytes(file, path)?, path)
    }

    /// Parse ELF bytes; `path` names the object.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Self, ElfError> {
        Self::from_bytes(Bytes::Owned(bytes.to_vec()), path)
    }

    fn from_bytes(data: Bytes, path: &Path) -> Result<Self, ElfError> {
        let bytes: &[u8] = &data;
        let file = parse(bytes, path)?;
        // At an address with several names (`write`, `__write`,
        // `__GI___write`…) keep the one a user would recognize: sized before
        // unsized, global before weak before local, fewest leading
        // underscores, then by name for a deterministic choice.
        let mut ranked: Vec<(FnSym, (u8, usize))> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok()?;
                let binding = if s.is_weak() {
                    1
                } else if s.is_global() {
                    0
                } else {
                    2
                };
                let underscores = name.bytes().take_while(|&b| b == b'_').count();
                Some((
                    FnSym {
                        addr: s.address(),
                        size: s.size(),
                        mangled: name.to_string(),
                        origin: SymOrigin::Table,
                    },
                    (binding, underscores),
                ))
            })
            .collect();
        // PLT entries rank after every table symbol at the same address.
        ranked.extend(plt_symbols(&file).into_iter().map(|s| (s, (3, 0))));
        ranked.sort_by(|(a, ra), (b, rb)| {
            a.addr
                .cmp(&b.addr)
                .then((b.size != 0).cmp(&(a.size != 0)))
                .then(ra.cmp(rb))
                .then(a.mangled.cmp(&b.mangled))
        });
        let mut symbols: Vec<FnSym> = ranked.into_iter().map(|(s, _)| s).collect();
        symbols.dedup_by_key(|s| s.addr);
        let loads = file
            .segments()
            .map(|seg| {
                let (offset, filesz) = seg.file_range();
                LoadSegment {
                    offset,
                    filesz,
                    vaddr: seg.address(),
                }
            })
            .collect();
        let text = file
            .section_by_name(".text")
            .map(|s| (s.address(), s.address().saturating_add(s.size())));
        let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        let is_dyn = matches!(file.kind(), object::ObjectKind::Dynamic);
        let entry = file.entry();
        let has_dwarf = file.section_by_name(".debug_info").is_some();
        drop(file);
        Ok(ElfObject {
            path: path.to_path_buf(),
            symbols,
            loads,
            build_id,
            text,
            entry,
            is_dyn,
            bytes: std::sync::Arc::new(data),
            has_dwarf,
            dwarf: std::sync::OnceLock::new(),
            eh_symbols: std::sync::OnceLock::new(),
        })
    }

    /// The object's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GNU build id, if the object has one.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    /// True for position-independent objects (ET_DYN: PIE executables and
    /// shared libraries), whose load bias is not zero.
    pub fn is_position_independent(&self) -> bool {
        self.is_dyn
    }

    /// `[start, end)` of `.text` in link-time addresses.
    pub fn text_range(&self) -> Option<(FileAddr, FileAddr)> {
        self.text.map(|(s, e)| (FileAddr(s), FileAddr(e)))
    }

    /// The entry point (`e_entry`), in link-time addresses: `_start` of an
    /// executable or of the dynamic loader.
    pub fn entry(&self) -> FileAddr {
        FileAddr(self.entry)
    }

    /// True if the object carries DWARF line information.
    pub fn has_debug_info(&self) -> bool {
        self.has_dwarf
    }

    /// Build the DWARF context now (the first lookup that needs it would
    /// otherwise): to have it ready ahead, from another thread.
    pub fn load_debug_info(&self) {
        drop(self.dwarf());
    }

    fn dwarf(&self) -> Option<std::sync::MutexGuard<'_, addr2line::Context<Reader>>> {
        self.dwarf
            .get_or_init(|| {
                let file = parse(&**self.bytes, &self.path).ok()?;
                load_dwarf(&file, &self.bytes).map(std::sync::Mutex::new)
            })
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Function symbols by address: the symbol tables' and the PLT
    /// entries' ([`SymOrigin::Plt`]).
    pub fn symbols(&self) -> &[FnSym] {
        &self.symbols
    }

    /// The symbols synthesized from `.eh_frame` for the FDEs that no symbol
    /// of [`symbols`](Self::symbols) covers, by address (see
    /// [`SymOrigin::EhFrame`]). Empty for objects whose symbol table covers
    /// all their code.
    pub fn eh_frame_symbols(&self) -> &[FnSym] {
        self.eh_symbols.get_or_init(|| {
            let Ok(file) = parse(&**self.bytes, &self.path) else {
                return Vec::new();
            };
            let table = |a: u64| lookup(&self.symbols, a).is_some();
            eh_frame_symbols(&file, &self.symbols, &table)
        })
    }

    /// Every function symbol, the table's, the PLT's and `.eh_frame`'s, by
    /// address: what a symbol file for this object should hold.
    pub fn all_symbols(&self) -> Vec<FnSym> {
        let mut all: Vec<FnSym> = self
            .symbols
            .iter()
            .chain(self.eh_frame_symbols())
            .cloned()
            .collect();
        all.sort_by_key(|s| s.addr);
        all
    }

    /// The file's name without its directory.
    pub fn module_name(&self) -> String {
        self.path.file_name().map_or_else(
            || self.path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    }

    /// The name of the function at `addr` as every report shows it: the
    /// symbol's ([`symbol`](Self::symbol)), else `[unknown] in MODULE`.
    pub fn function_name(&self, addr: FileAddr) -> String {
        match self.symbol(addr) {
            Some((s, _)) => s.name(),
            None => self.unknown_name(),
        }
    }

    /// `[unknown] in MODULE`: code of this object that no symbol or FDE
    /// covers.
    pub fn unknown_name(&self) -> String {
        format!("[unknown] in {}", self.module_name())
    }

    /// The link-time address of byte `file_offset` of the file, through the
    /// load segment that contains it.
    pub fn file_addr_of_offset(&self, file_offset: u64) -> Option<FileAddr> {
        self.loads
            .iter()
            .find(|l| file_offset >= l.offset && file_offset - l.offset < l.filesz)
            .map(|l| FileAddr(l.vaddr.wrapping_add(file_offset - l.offset)))
    }

    /// The function symbol holding `addr` and the offset into it. A symbol
    /// with a size holds only its bytes; one without holds up to the next.
    /// Where no symbol of the tables or the PLT holds `addr`, the
    /// `.eh_frame` FDE that covers it names it ([`SymOrigin::EhFrame`]).
    pub fn symbol(&self, addr: FileAddr) -> Option<(&FnSym, u64)> {
        lookup(&self.symbols, addr.0).or_else(|| lookup(self.eh_frame_symbols(), addr.0))
    }

    /// Source frames at `addr`, innermost (possibly inlined) first. Falls
    /// back to the symbol table, with no file or line, without DWARF.
    pub fn frames(&self, addr: FileAddr) -> Vec<Frame> {
        let mut out = Vec::new();
        if let Some(ctx) = self.dwarf() {
            if let Ok(mut frames) = ctx.find_frames(addr.0).skip_all_loads() {
                while let Ok(Some(f)) = frames.next() {
                    let function = f
                        .function
                        .as_ref()
                        .and_then(|n| n.demangle().ok())
                        .map(|n| clean_rust_name(&n));
                    let (file, line) = match f.location {
                        Some(l) => (l.file.map(|f| f.to_string()), l.line),
                        None => (None, None),
                    };
                    out.push(Frame {
                        function,
                        file,
                        line,
                    });
                }
            }
        }
        if out.is_empty() {
            if let Some((s, _)) = self.symbol(addr) {
                out.push(Frame {
                    function: Some(s.name()),
                    file: None,
                    line: None,
                });
            }
        } else if out.last().is_some_and(|f| f.function.is_none()) {
            if let Some((s, _)) = self.symbol(addr) {
                if let Some(last) = out.last_mut() {
                    last.function = Some(s.name());
                }
            }
        }
        out
    }

    /// The rows of the DWARF line tables that cover `[lo, hi)`, in
    /// address order: each says that addresses `[addr, addr + len)` come
    /// from `line`, `column` (0 where the table gives none) of `file`.
    /// Rows without a line (line 0) are left out; empty without DWARF.
    pub fn line_rows(&self, lo: FileAddr, hi: FileAddr) -> Vec<LineRow> {
        let Some(ctx) = self.dwarf() else {
            return Vec::new();
        };
        let Ok(rows) = ctx.find_location_range(lo.0, hi.0) else {
            return Vec::new();
        };
        let mut out: Vec<LineRow> = rows
            .filter_map(|(addr, len, loc)| {
                Some(LineRow {
                    addr,
                    len,
                    file: loc.file?.to_string(),
                    line: loc.line?,
                    column: loc.column.unwrap_or(0),
                })
            })
            .collect();
        out.sort_by_key(|r| r.addr);
        out
    }

    /// Where each frame of [`frames`](Self::frames)`(addr)` is declared:
    /// the function's `DW_AT_decl_file` and `DW_AT_decl_line` (followed
    /// through `DW_AT_abstract_origin` and `DW_AT_specification`), aligned
    /// with the frames, innermost first. Empty without DWARF; `None` where
    /// the debug info does not say (or the declaration is in another unit).
    pub fn frame_decls(&self, addr: FileAddr) -> Vec<Option<(String, u32)>> {
        let Some(ctx) = self.dwarf() else {
            return Vec::new();
        };
        let Some(unit) = ctx.find_dwarf_and_unit(addr.0).skip_all_loads() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Ok(mut frames) = ctx.find_frames(addr.0).skip_all_loads() {
            while let Ok(Some(f)) = frames.next() {
                out.push(f.dw_die_offset.and_then(|off| decl_of(unit, off)));
            }
        }
        out
    }

    /// The declaration (file, line) of the out-of-line function holding
    /// `addr`: the last of [`frame_decls`](Self::frame_decls).
    pub fn function_decl(&self, addr: FileAddr) -> Option<(String, u32)> {
        self.frame_decls(addr).pop().flatten()
    }
}

/// The symbol of `syms` (sorted by address) holding `addr`.
fn lookup(syms: &[FnSym], addr: u64) -> Option<(&FnSym, u64)> {
    let i = syms.partition_point(|s| s.addr <= addr);
    let s = syms[..i].last()?;
    let off = addr - s.addr;
    if s.size != 0 && off >= s.size {
        return None;
    }
    Some((s, off))
}

/// Where distributions install detached debug information:
/// `/usr/lib/debug/.build-id/xx/yyyy….debug` (Debian's `-dbg` and `-dbgsym`
/// packages, Fedora's `debuginfo`).
pub const DEBUG_DIR: &str = "/usr/lib/debug/.build-id";

impl ElfObject {
    /// This object, or its detached debug file when it has no DWARF and
    /// the debug file (found by build id under [`DEBUG_DIR`]) has: same
    /// link-time addresses, full symbol table and line information.
    ///
    /// Use it for symbols and lines only: a debug file's load segments
    /// need not describe the original's file offsets, so map process
    /// addresses with the original ([`ElfObject::file_addr_of_offset`]).
    pub fn with_separate_debug_info(self) -> ElfObject {
        self.separate_debug_info().unwrap_or(self)
    }

    /// The detached debug file for this object, if it has no DWARF of its
    /// own and one with the same build id is installed.
    pub fn separate_debug_info(&self) -> Option<ElfObject> {
        if self.has_debug_info() {
            return None;
        }
        let id = self.build_id().filter(|id| id.len() > 1)?;
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let path = Path::new(DEBUG_DIR)
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..]));
        let mut debug = ElfObject::open(&path)
            .ok()
            .filter(|debug| debug.has_debug_info() && debug.build_id() == self.build_id())?;
        // A debug file's `.plt` and relocations carry no bytes: take the
        // PLT's names from the original.
        if !debug.symbols.iter().any(|s| s.origin == SymOrigin::Plt) {
            debug.symbols.extend(
                self.symbols
                    .iter()
                    .filter(|s| s.origin == SymOrigin::Plt)
                    .cloned(),
            );
            debug.symbols.sort_by_key(|s| s.addr);
        }
        Some(debug)
    }
}

/// Whether lines can be found for the ELF image `bytes`: it carries DWARF,
/// or a detached debug file of its build id is installed under
/// `debug_dir` (in use, [`DEBUG_DIR`]) and carries it, the same test as
/// [`ElfObject::separate_debug_info`]'s, told from section headers alone
/// (no symbol table or DWARF is read; the debug file is read only where
/// its headers are).
pub fn has_debug_info_in(bytes: &[u8], debug_dir: &Path) -> bool {
    let Ok(file) = object::File::parse(bytes) else {
        return false;
    };
    if file.section_by_name(".debug_info").is_some() {
        return true;
    }
    let Some(id) = file.build_id().ok().flatten().filter(|id| id.len() > 1) else {
        return false;
    };
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let path = debug_dir
        .join(&hex[..2])
        .join(format!("{}.debug", &hex[2..]));
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    let cache = object::ReadCache::new(f);
    object::File::parse(&cache).is_ok_and(|debug| {
        debug.section_by_name(".debug_info").is_some()
            && debug.build_id().ok().flatten() == Some(id)
    })
}

/// The GNU build id of the ELF file open as `file`, read from its headers
/// and notes alone (through an `object::ReadCache`: a large file is not
/// read whole), or `None` for a file without one or not ELF.
pub fn build_id_of(file: std::fs::File) -> Option<Vec<u8>> {
    let cache = object::ReadCache::new(file);
    let parsed = object::File::parse(&cache).ok()?;
    let id = parsed.build_id().ok().flatten()?;
    (!id.is_empty()).then(|| id.to_vec())
}

/// Demangle a Rust or C++ symbol; other names are returned unchanged.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        let d = addr2line::demangle_auto(name.into(), None);
        return clean_rust_name(&d);
    }
    name.to_string()
}

fn clean_rust_name(name: &str) -> String {
    // addr2line's demangle keeps Rust's trailing hash (`::h0123…`); drop it.
    match name.rsplit_once("::h") {
        Some((head, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            head.to_string()
        }
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn declared_here() -> u32 {
        line!() - 1
    }

    #[test]
    fn function_declarations() {
        let decl_line = std::hint::black_box(declared_here)();
        let exe = std::env::current_exe().unwrap();
        let obj = ElfObject::open(&exe).unwrap();
        if !obj.has_debug_info() {
            eprintln!("SKIPPED function_declarations: test binary has no DWARF");
            return;
        }
        let sym = obj
            .symbols()
            .iter()
            .find(|s| s.name().ends_with("tests::declared_here"))
            .expect("the helper's symbol");
        let (file, line) = obj
            .function_decl(FileAddr(sym.addr))
            .expect("a declaration");
        assert!(file.ends_with("src/elf.rs"), "{file}");
        assert_eq!(line, decl_line);
        assert_eq!(
            obj.frame_decls(FileAddr(sym.addr)).len(),
            obj.frames(FileAddr(sym.addr)).len()
        );
    }

    #[test]
    fn debug_info_is_found_in_the_image_or_its_installed_debug_file() {
        if !profdev_testkit::tools("debug file lookup", &["cc", "objcopy", "strip"]) {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("p.c");
        std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
        let full = d.path().join("full");
        profdev_testkit::cc(&src, &["-g", "-Wl,--build-id"], &full);
        let run = |tool: &str, args: &[&str]| {
            let st = std::process::Command::new(tool)
                .args(args)
                .current_dir(d.path())
                .status()
                .unwrap();
            assert!(st.success(), "{tool} {args:?}");
        };
        run("objcopy", &["--only-keep-debug", "full", "full.debug"]);
        run("strip", &["-g", "-o", "stripped", "full"]);
        let bytes = |name: &str| std::fs::read(d.path().join(name)).unwrap();
        let empty = d.path().join("none");
        assert!(has_debug_info_in(&bytes("full"), &empty));
        assert!(!has_debug_info_in(&bytes("stripped"), &empty));
        assert!(!has_debug_info_in(b"#!/bin/sh", &empty));
        // Installed by build id: found.
        let id = ElfObject::open(&full).unwrap().build_id().unwrap().to_vec();
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let dir = d.path().join("debug");
        std::fs::create_dir_all(dir.join(&hex[..2])).unwrap();
        let at = dir.join(&hex[..2]).join(format!("{}.debug", &hex[2..]));
        std::fs::copy(d.path().join("full.debug"), &at).unwrap();
        assert!(has_debug_info_in(&bytes("stripped"), &dir));
        // A file there of another build (its id differs): not it.
        let other = d.path().join("other");
        profdev_testkit::cc(&src, &["-g", "-O2", "-Wl,--build-id"], &other);
        std::fs::copy(&other, &at).unwrap();
        assert!(!has_debug_info_in(&bytes("stripped"), &dir));
    }

    #[test]
    fn layout_agrees_with_object() {
        let exe = std::env::current_exe().unwrap();
        let obj = ElfObject::open(&exe).unwrap();
        let lay = ElfLayout::open(&exe).unwrap();
        assert_eq!(lay.build_id(), obj.build_id());
        assert_eq!(lay.is_position_independent(), obj.is_position_independent());
        for off in [0u64, 0x1000, 0x1234, 0x10_0000] {
            assert_eq!(lay.file_addr_of_offset(off), obj.file_addr_of_offset(off));
        }
        assert!(matches!(
            ElfLayout::parse(b"#!/bin/sh", Path::new("s")),
            Err(ElfError::NotElf { .. })
        ));
    }

    #[test]
    fn not_elf_is_a_sentence() {
        let e = ElfObject::parse(b"#!/bin/sh\n", Path::new("/x/script")).unwrap_err();
        assert_eq!(e.to_string(), "/x/script is not an ELF file");
        let e = ElfObject::parse(b"\x7fELF\x02\x01", Path::new("t")).unwrap_err();
        assert!(
            e.to_string().starts_with("t is a malformed ELF file"),
            "{e}"
        );
    }

    #[test]
    fn own_test_binary_symbolizes_itself() {
        // This test binary has symbols and (in debug builds) DWARF.
        let exe = std::env::current_exe().unwrap();
        let obj = ElfObject::open(&exe).unwrap();
        let sym = obj
            .symbols()
            .iter()
            .find(|s| s.name().contains("own_test_binary_symbolizes_itself"))
            .expect("the test's own symbol");
        let frames = obj.frames(FileAddr(sym.addr));
        assert!(frames.iter().any(|f| f
            .function
            .as_deref()
            .is_some_and(|n| n.contains("own_test_binary"))));
        if obj.has_debug_info() {
            let f = frames.last().unwrap();
            assert!(
                f.file.as_deref().is_some_and(|p| p.ends_with("elf.rs")),
                "{f:?}"
            );
        }
        assert!(obj.is_position_independent());
    }
}
