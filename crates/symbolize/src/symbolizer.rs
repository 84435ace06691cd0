//! The one [`Symbolizer`]: names kernel pcs from the kernel's symbols
//! (`/proc/kallsyms`) and places in mapped files — an [`Object`] of the
//! objects table and a file offset — from their ELF symbols and DWARF.
//! `profdev top` and `profdev record` both name through it.
//!
//! It names in two ways, for two kinds of consumer:
//!
//! * **One frame at a time, cached** ([`Symbolizer::resolve`]): a live
//!   view names the same few thousand places again and again, so each
//!   kernel pc and each (object, offset) is named once and each (module,
//!   function) interned once as a [`FuncId`]. User names come from the
//!   object's symbols, loaded once and kept with the [`Object`].
//! * **Functions with their extent and source line**, for a file that
//!   outlives the binaries ([`Symbolizer::kernel_function`],
//!   [`Symbolizer::kernel_text_edges`], [`Symbolizer::object_functions`]):
//!   the core kernel's function holding a pc, start and length; a batch of
//!   one object's link-time addresses named with the line of each, the ELF
//!   opened for the batch and closed after, so a recording that meets
//!   thousands of objects keeps none of their symbols in memory.
//!
//! ```
//! use profdev_symbolize::{KernelSymbols, KSym, Symbolizer};
//! use profdev_symbolize::symbolizer::Frame;
//!
//! let k = KernelSymbols::from_symbols(vec![KSym {
//!     addr: 0x1000,
//!     kind: 'T',
//!     name: "do_work".into(),
//!     module: None,
//! }]);
//! let mut s = Symbolizer::new(Some(k));
//! let id = s.resolve(&Frame::Kernel(0x1004));
//! assert_eq!((s.func(id).module.as_str(), s.func(id).name.as_str()), ("[kernel]", "do_work"));
//! let f = s.kernel_function(0x1004).unwrap();
//! assert_eq!((f.start, f.len, f.name), (0x1000, 1, "do_work"));
//! ```

use crate::{ElfObject, FnSym, KernelSymbols, Object};
use profdev_core::FileAddr;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// One frame as sampled, not yet named.
#[derive(Clone, Debug)]
pub enum Frame {
    /// A kernel pc (a return address for every frame but the leaf).
    Kernel(u64),
    /// A user address in a file-backed mapping: its object and the byte of
    /// the file it falls on.
    User {
        /// The mapped file.
        object: Arc<Object>,
        /// The byte of the file the address falls on.
        offset: u64,
    },
    /// A user address in no known file (anonymous memory, a JIT, a
    /// process whose maps were never seen).
    Anonymous,
}

/// An interned (module, function).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncId(pub u32);

/// A function's names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Func {
    /// The module: `[kernel]`, a kernel module's name, an object's file name.
    pub module: String,
    /// The function, or `[unknown]`.
    pub name: String,
}

/// The name of a place no symbol names.
pub const UNKNOWN: &str = "[unknown]";

/// Cached entries before the caches are emptied and refilled (a bound on
/// memory: a long system-wide run sees many pcs).
const MAX_CACHED: usize = 1 << 20;

/// A core kernel function: where it starts, its bytes up to the next
/// function, its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelFunction<'a> {
    /// Its first address.
    pub start: u64,
    /// Bytes up to the next function's start (1 for the last).
    pub len: u64,
    /// Its name as the kernel lists it.
    pub name: &'a str,
}

/// A function of an object holding some of the addresses asked about, with
/// the source line of the one address that fell in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectFunction {
    /// Link-time address of its symbol.
    pub start: u64,
    /// Its symbol's size, at least up to the address named.
    pub len: u64,
    /// Demangled.
    pub name: String,
    /// The address named, its file (an index into
    /// [`ObjectFunctions::files`]) and line, where DWARF has them.
    pub line: Option<(u64, u32, u32)>,
}

/// The functions of one object's addresses ([`Symbolizer::object_functions`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectFunctions {
    /// The source files the lines name, each once.
    pub files: Vec<String>,
    /// One entry per address a symbol holds, in the order asked.
    pub funcs: Vec<ObjectFunction>,
}

/// Names frames: kernel pcs from the kernel's symbols, places in objects
/// from their ELF symbols and DWARF. See the [module doc](self).
pub struct Symbolizer {
    kernel: Option<KernelSymbols>,
    /// The core kernel's functions by start (`text_symbols`, address 0
    /// left out), made on first use by [`Symbolizer::kernel_function`].
    core_text: OnceLock<Vec<(u64, String)>>,
    kernel_pcs: HashMap<u64, FuncId>,
    user_pcs: HashMap<(u64, u64), FuncId>,
    ids: HashMap<Func, FuncId>,
    funcs: Vec<Func>,
    misses: u64,
}

impl Symbolizer {
    /// A symbolizer with the kernel's symbols, if they could be read.
    pub fn new(kernel: Option<KernelSymbols>) -> Self {
        Symbolizer {
            kernel,
            core_text: OnceLock::new(),
            kernel_pcs: HashMap::new(),
            user_pcs: HashMap::new(),
            ids: HashMap::new(),
            funcs: Vec::new(),
            misses: 0,
        }
    }

    /// The function of frame `f`, named once per kernel pc and per
    /// (object, offset).
    pub fn resolve(&mut self, f: &Frame) -> FuncId {
        if self.kernel_pcs.len() + self.user_pcs.len() > MAX_CACHED {
            self.kernel_pcs.clear();
            self.user_pcs.clear();
        }
        match f {
            Frame::Kernel(pc) => {
                if let Some(&id) = self.kernel_pcs.get(pc) {
                    return id;
                }
                let func = match self.kernel.as_ref().and_then(|k| k.lookup(*pc)) {
                    Some((sym, _)) => Func {
                        module: sym
                            .module
                            .as_ref()
                            .map_or_else(|| "[kernel]".into(), |m| format!("[{m}]")),
                        name: sym.name.clone(),
                    },
                    None => self.miss("[kernel]"),
                };
                let id = self.intern(func);
                self.kernel_pcs.insert(*pc, id);
                id
            }
            Frame::User { object, offset } => {
                let key = (object.id(), *offset);
                if let Some(&id) = self.user_pcs.get(&key) {
                    return id;
                }
                let module = object.basename().to_string();
                // The address from the object's own load segments, the
                // name from its symbols (its debug file's, when installed,
                // whose segments need not describe the object's bytes).
                let name = object
                    .layout()
                    .ok()
                    .and_then(|layout| layout.file_addr_of_offset(*offset))
                    .zip(object.symbols().ok())
                    .and_then(|(addr, elf)| function_at(&elf, addr).map(FnSym::name));
                let func = match name {
                    Some(name) => Func { module, name },
                    None => self.miss(&module),
                };
                let id = self.intern(func);
                self.user_pcs.insert(key, id);
                id
            }
            Frame::Anonymous => {
                let func = self.miss("[anon]");
                self.intern(func)
            }
        }
    }

    fn miss(&mut self, module: &str) -> Func {
        self.misses += 1;
        Func {
            module: module.into(),
            name: UNKNOWN.into(),
        }
    }

    fn intern(&mut self, func: Func) -> FuncId {
        if let Some(&id) = self.ids.get(&func) {
            return id;
        }
        let id = FuncId(self.funcs.len() as u32);
        self.funcs.push(func.clone());
        self.ids.insert(func, id);
        id
    }

    /// The names of `id`.
    pub fn func(&self, id: FuncId) -> &Func {
        &self.funcs[id.0 as usize]
    }

    /// Frames no symbol named so far (each distinct frame counted once,
    /// when first seen).
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// Is `id` a place no symbol names (`[unknown]`)?
    pub fn is_unknown(&self, id: FuncId) -> bool {
        self.func(id).name == UNKNOWN
    }

    /// The core kernel's function at or below `pc` (modules' functions are
    /// not in the list: a pc in a module falls in the last core function
    /// below it, or none).
    pub fn kernel_function(&self, pc: u64) -> Option<KernelFunction<'_>> {
        let syms = self.core_text.get_or_init(|| match &self.kernel {
            Some(k) => k
                .text_symbols()
                .into_iter()
                .filter(|s| s.addr != 0)
                .map(|s| (s.addr, s.name.clone()))
                .collect(),
            None => Vec::new(),
        });
        let i = syms.partition_point(|(a, _)| *a <= pc);
        let j = i.checked_sub(1)?;
        let (start, name) = &syms[j];
        let end = syms.get(j + 1).map_or(start + 1, |(a, _)| *a);
        Some(KernelFunction {
            start: *start,
            len: end - start,
            name,
        })
    }

    /// The core kernel's `_stext` and `_etext`, those it lists with an
    /// address, in that order: the text range (taken from every symbol, as
    /// a text alias may hide them in the function list).
    pub fn kernel_text_edges(&self) -> Vec<(&'static str, u64)> {
        let Some(k) = &self.kernel else {
            return Vec::new();
        };
        ["_stext", "_etext"]
            .into_iter()
            .filter_map(|name| {
                k.all()
                    .iter()
                    .find(|s| s.name == name && s.module.is_none() && s.addr != 0)
                    .map(|s| (name, s.addr))
            })
            .collect()
    }

    /// Name link-time addresses `addrs` of one object: `object` (the file
    /// the objects table kept open), else the file at `path`. The ELF is
    /// opened for this call only, and only if its build id is `want` (the
    /// one its layout had when the addresses were taken); `None` when it
    /// cannot be opened or is another file. Names and lines come from its
    /// detached debug file when one is installed, as [`Symbolizer::resolve`]
    /// names them (`Object::symbols`): a place has one name in `top`,
    /// `record` and every export.
    pub fn object_functions(
        object: Option<&Object>,
        path: &str,
        want: Option<&[u8]>,
        addrs: &[u64],
    ) -> Option<ObjectFunctions> {
        let elf = Symbolizer::open_object(object, path, want)?;
        Some(Symbolizer::name_in(&elf, addrs))
    }

    /// The ELF that [`Symbolizer::object_functions`] names from (with its
    /// detached debug file when one is installed), for a caller that keeps
    /// it open across calls of [`Symbolizer::name_in`]; `None` when it
    /// cannot be opened or its build id is not `want`.
    pub fn open_object(
        object: Option<&Object>,
        path: &str,
        want: Option<&[u8]>,
    ) -> Option<ElfObject> {
        let opened = match object.and_then(|o| o.file()) {
            Some(f) => ElfObject::from_file(f, Path::new(path)),
            None => ElfObject::open(Path::new(path)),
        };
        let elf = opened.ok().filter(|e| e.build_id() == want)?;
        Some(elf.with_separate_debug_info())
    }

    /// Name link-time addresses `addrs` of an object opened by
    /// [`Symbolizer::open_object`], as [`Symbolizer::object_functions`] does.
    pub fn name_in(elf: &ElfObject, addrs: &[u64]) -> ObjectFunctions {
        name_addrs(elf, addrs, true)
    }

    /// [`Symbolizer::name_in`] with functions from the symbol tables
    /// only: no DWARF is read (a large object's is a hundred MB parsed),
    /// so no lines.
    pub fn name_only_in(elf: &ElfObject, addrs: &[u64]) -> ObjectFunctions {
        name_addrs(elf, addrs, false)
    }
}

/// The function symbol holding `addr`.
fn function_at(elf: &ElfObject, addr: FileAddr) -> Option<&FnSym> {
    elf.symbol(addr).map(|(s, _)| s)
}

/// Each address's function and, with `lines`, innermost source line.
fn name_addrs(elf: &ElfObject, addrs: &[u64], lines: bool) -> ObjectFunctions {
    let mut out = ObjectFunctions::default();
    for &offset in addrs {
        let addr = FileAddr(offset);
        let Some(sym) = function_at(elf, addr) else {
            continue;
        };
        let files = &mut out.files;
        let frames = if lines { elf.frames(addr) } else { Vec::new() };
        let line = frames
            .last()
            .and_then(|f| Some((f.file.clone()?, f.line?)))
            .map(|(file, line)| {
                let i = files.iter().position(|f| *f == file).unwrap_or_else(|| {
                    files.push(file);
                    files.len() - 1
                });
                (offset, i as u32, line)
            });
        out.funcs.push(ObjectFunction {
            start: sym.addr,
            len: sym.size.max(offset - sym.addr + 1),
            name: sym.name(),
            line,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::KSym;

    fn ksym(addr: u64, kind: char, name: &str, module: Option<&str>) -> KSym {
        KSym {
            addr,
            kind,
            name: name.into(),
            module: module.map(Into::into),
        }
    }

    #[test]
    fn kernel_frames_are_named_once_and_interned() {
        let syms = KernelSymbols::from_symbols(vec![
            ksym(0x1000, 'T', "do_work", None),
            ksym(0x2000, 't', "mod_fn", Some("ext4")),
            ksym(0x3000, 'T', "_etext", None),
        ]);
        let mut s = Symbolizer::new(Some(syms));
        let a = s.resolve(&Frame::Kernel(0x1004));
        let b = s.resolve(&Frame::Kernel(0x1008));
        assert_eq!(a, b);
        assert_eq!(
            s.func(a),
            &Func {
                module: "[kernel]".into(),
                name: "do_work".into()
            }
        );
        let m = s.resolve(&Frame::Kernel(0x2010));
        assert_eq!(s.func(m).module, "[ext4]");
        assert_eq!(s.misses(), 0);
        let u = s.resolve(&Frame::Kernel(0x10));
        assert_eq!(s.func(u).name, "[unknown]");
        let anon = s.resolve(&Frame::Anonymous);
        assert_eq!(s.func(anon).module, "[anon]");
        assert!(s.is_unknown(u) && s.is_unknown(anon) && !s.is_unknown(a));
        assert_eq!(s.misses(), 2);
        // No kernel symbols: every kernel pc is [unknown] in [kernel].
        let mut none = Symbolizer::new(None);
        let x = none.resolve(&Frame::Kernel(0x1004));
        assert_eq!(none.func(x).name, "[unknown]");
    }

    /// The function list of a recording: core functions only, each up to
    /// the next one; a module's pc falls in the last core function below.
    #[test]
    fn kernel_functions_have_their_extent() {
        let s = Symbolizer::new(Some(KernelSymbols::from_symbols(vec![
            ksym(0, 'T', "hidden", None),
            ksym(0x1000, 'T', "_stext", None),
            ksym(0x1000, 'T', "start", None),
            ksym(0x1100, 'D', "data", None),
            ksym(0x1200, 't', "__pfx_next", None),
            ksym(0x1210, 't', "next", None),
            ksym(0x2000, 'T', "_etext", None),
            ksym(0x9000, 't', "mod_fn", Some("ext4")),
        ])));
        let f = |pc| s.kernel_function(pc).map(|f| (f.start, f.len, f.name));
        assert_eq!(f(0x10), None);
        assert_eq!(f(0x1000), Some((0x1000, 0x210, "start")));
        assert_eq!(f(0x1150), Some((0x1000, 0x210, "start")));
        assert_eq!(f(0x1210), Some((0x1210, 0xdf0, "next")));
        assert_eq!(f(0x9004), Some((0x2000, 1, "_etext")));
        assert_eq!(
            s.kernel_text_edges(),
            vec![("_stext", 0x1000), ("_etext", 0x2000)]
        );
        let none = Symbolizer::new(None);
        assert_eq!(none.kernel_function(0x1000), None);
        assert!(none.kernel_text_edges().is_empty());
    }

    /// A library with a detached debug file (libc, with the distribution's
    /// debug package): a place `top` names one frame at a time
    /// ([`Symbolizer::resolve`]) has the name `record` gives it
    /// ([`Symbolizer::object_functions`]): the debug file's, not
    /// `[unknown]` (the debug file's segments used as the library's) nor
    /// `sub_ADDR` (the library's own `.eh_frame`).
    #[test]
    fn top_and_record_name_a_place_alike() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let Some(lib) = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so"))
        else {
            eprintln!("skipped top_and_record_name_a_place_alike: no libc mapped");
            return;
        };
        let elf = ElfObject::open(Path::new(lib)).unwrap();
        let Some(debug) = elf.separate_debug_info() else {
            eprintln!("skipped top_and_record_name_a_place_alike: no debug file for {lib}");
            return;
        };
        // A function only the debug file names.
        let sym = debug
            .symbols()
            .iter()
            .find(|s| {
                s.size > 16
                    && elf
                        .symbol(FileAddr(s.addr))
                        .is_none_or(|(o, _)| o.origin == crate::SymOrigin::EhFrame)
            })
            .expect("a local function of libc")
            .clone();
        let len = std::fs::metadata(lib).unwrap().len();
        let offset = (0..len)
            .step_by(256)
            .find_map(|off| {
                let a = elf.file_addr_of_offset(off)?.0;
                (sym.addr >= a && sym.addr < a + 256).then(|| off + (sym.addr - a))
            })
            .expect("the function's file offset");
        let object = crate::Objects::new().open_path(lib).unwrap();
        let mut s = Symbolizer::new(None);
        let id = s.resolve(&Frame::User {
            object: object.clone(),
            offset,
        });
        let recorded =
            Symbolizer::object_functions(Some(&object), lib, elf.build_id(), &[sym.addr]).unwrap();
        assert_eq!(s.func(id).name, sym.name(), "top");
        assert_eq!(recorded.funcs[0].name, sym.name(), "record");
    }

    /// This test binary names its own functions, with a line for the
    /// address of a function with DWARF; a wrong build id names nothing.
    #[test]
    fn an_objects_addresses_are_named_with_their_lines() {
        let exe = std::env::current_exe().unwrap();
        let path = exe.to_str().unwrap();
        let elf = ElfObject::open(&exe).unwrap();
        let sym = elf
            .symbols()
            .iter()
            .find(|s| {
                s.name()
                    .contains("an_objects_addresses_are_named_with_their_lines")
            })
            .expect("the test's own symbol")
            .clone();
        let want = elf.build_id().map(<[u8]>::to_vec);
        let named =
            Symbolizer::object_functions(None, path, want.as_deref(), &[sym.addr, sym.addr + 1])
                .expect("the test binary opens");
        assert_eq!(named.funcs.len(), 2);
        assert_eq!(named.funcs[0].start, sym.addr);
        assert_eq!(named.funcs[0].name, sym.name());
        assert_eq!(named.funcs[1].len, sym.size.max(2));
        if let Some((addr, file, _)) = named.funcs[0].line {
            assert_eq!(addr, sym.addr);
            assert!(named.files[file as usize].ends_with("symbolizer.rs"));
        }
        let other = Some(&[1u8, 2, 3][..]);
        assert!(Symbolizer::object_functions(None, path, other, &[sym.addr]).is_none());
        assert!(Symbolizer::object_functions(None, "/nonexistent", None, &[1]).is_none());
    }
}
