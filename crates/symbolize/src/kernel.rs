//! Kernel symbols: `/proc/kallsyms`, `System.map`, or a `vmlinux` ELF.
//!
//! `/proc/kallsyms` and `System.map` share one text format,
//! `ADDRESS TYPE NAME [\t[MODULE]]`, one symbol per line. A `vmlinux` is
//! read with the `object` crate. [`KernelSymbols::load`] tells them apart
//! by the ELF magic.

use profdev_core::{KernelPc, KernelText};
use std::path::Path;

/// One kernel symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KSym {
    /// Its address.
    pub addr: u64,
    /// nm-style type letter (`T`, `t`, `W`, `D`, …).
    pub kind: char,
    /// Its name.
    pub name: String,
    /// The module it belongs to, `None` for the core kernel.
    pub module: Option<String>,
}

impl KSym {
    /// True for code symbols (`T`, `t`, `W`, `w`).
    pub fn is_text(&self) -> bool {
        matches!(self.kind, 'T' | 't' | 'W' | 'w')
    }
}

/// Why a symbol file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Not a symbol file: names the line that failed.
    #[error("{path} is not a symbol file (kallsyms, System.map or vmlinux): line {line}: {why}")]
    NotSymbols {
        path: String,
        line: usize,
        why: String,
    },
    /// An ELF that could not be parsed.
    #[error("{path} is not a readable vmlinux: {why}")]
    BadElf { path: String, why: String },
    /// Addresses are all zero: the sysctls hide them from this user; `why`
    /// names the one that does, as [`why_hidden`] says.
    #[error("{path} shows every kernel address as zero: {why}")]
    Restricted { path: String, why: String },
    /// No code symbols at all.
    #[error("{path} holds no text symbols")]
    NoText { path: String },
    /// No `_stext`/`_etext` pair.
    #[error("{path} has no _stext and _etext symbols, so kernel text cannot be located")]
    NoTextBounds { path: String },
}

/// Why /proc/kallsyms shows this user zeros, from the two sysctls the
/// kernel consults (`kallsyms_show_value`): with `kernel.kptr_restrict` 0,
/// addresses are shown when `kernel.perf_event_paranoid` is 1 or less, or
/// to a user with CAP_SYSLOG; with 1, only to CAP_SYSLOG; with 2, to no one.
/// Sampling the kernel system wide needs CAP_PERFMON (or a paranoid of 0 or
/// less) besides, so the remedy names both capabilities.
pub fn why_hidden(kptr_restrict: Option<i64>, perf_event_paranoid: Option<i64>) -> String {
    const CAPS: &str = "run as root (or with CAP_PERFMON and CAP_SYSLOG)";
    match (kptr_restrict, perf_event_paranoid) {
        (Some(0), Some(p)) => format!(
            "the sysctl kernel.perf_event_paranoid is {p}, and with kernel.kptr_restrict 0 the \
             kernel shows its addresses only when it is 1 or less or to a user with CAP_SYSLOG; \
             {CAPS}, or set kernel.perf_event_paranoid=0"
        ),
        (Some(1), _) => format!(
            "the sysctl kernel.kptr_restrict is 1, which shows kernel addresses only to a user \
             with CAP_SYSLOG; {CAPS}"
        ),
        (Some(k), _) if k >= 2 => format!(
            "the sysctl kernel.kptr_restrict is {k}, which hides kernel addresses from every \
             user; set kernel.kptr_restrict=1 and {CAPS}"
        ),
        _ => format!(
            "kernel addresses are hidden from this user (kernel.kptr_restrict and \
             kernel.perf_event_paranoid could not be read); {CAPS}"
        ),
    }
}

/// A kernel's symbol table, sorted by address.
#[derive(Clone, Debug, Default)]
pub struct KernelSymbols {
    syms: Vec<KSym>,
    text: Option<KernelText>,
}

/// The longest kallsyms or System.map text read: 256 MiB (a kernel with
/// every module loaded lists a few hundred thousand symbols, some 20 MiB).
pub const MAX_SYMBOL_TEXT: u64 = 256 << 20;

/// Read a kallsyms copy, System.map or vmlinux: a regular file (opened
/// without blocking), at most [`MAX_SYMBOL_TEXT`] bytes of text, or
/// [`crate::open::MAX_OBJECT`] for an ELF file; procfs files, whose size
/// is 0, are bounded by the read itself.
fn read_symbol_file(path: &Path) -> Result<Vec<u8>, crate::open::OpenError> {
    use crate::open::{open_bounded, Follow, OpenError, MAX_OBJECT};
    use std::io::Read;
    let (file, size) = open_bounded(path, MAX_OBJECT, Follow::Yes)?;
    let read_err = |source| OpenError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = file;
    let mut bytes = Vec::new();
    (&mut file)
        .take(4)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    let limit = if bytes.starts_with(b"\x7fELF") {
        MAX_OBJECT
    } else {
        MAX_SYMBOL_TEXT
    };
    let too_large = || OpenError::TooLarge {
        path: path.to_path_buf(),
        limit,
    };
    if size > limit {
        return Err(too_large());
    }
    bytes.reserve(usize::try_from(size).unwrap_or(0));
    file.take(limit + 1 - bytes.len() as u64)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// Page size used to find KTZERO from the first text symbol, as kprof does.
pub const PAGE_SIZE: u64 = 4096;

impl KernelSymbols {
    /// The running kernel's symbols, from `/proc/kallsyms`.
    pub fn running() -> Result<Self, SymbolError> {
        Self::load(Path::new("/proc/kallsyms"))
    }

    /// Load a kallsyms copy, a System.map or a vmlinux.
    pub fn load(path: &Path) -> Result<Self, SymbolError> {
        let name = path.display().to_string();
        let bytes = read_symbol_file(path).map_err(|e| SymbolError::Read {
            path: name.clone(),
            source: e.into_io(),
        })?;
        if bytes.starts_with(b"\x7fELF") {
            Self::from_vmlinux(&bytes, &name)
        } else {
            Self::from_text(&bytes, &name)
        }
    }

    /// Parse the kallsyms / System.map text format. `path` names the input
    /// in errors.
    pub fn from_text(bytes: &[u8], path: &str) -> Result<Self, SymbolError> {
        let not = |line: usize, why: &str| SymbolError::NotSymbols {
            path: path.to_string(),
            line,
            why: why.to_string(),
        };
        let text = std::str::from_utf8(bytes).map_err(|e| {
            let line = bytes[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1;
            not(line, "not text")
        })?;
        let mut syms = Vec::new();
        let mut nonzero = false;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let (main, module) = match line.split_once('\t') {
                Some((m, rest)) => {
                    let rest = rest.trim();
                    let module = rest
                        .strip_prefix('[')
                        .and_then(|r| r.strip_suffix(']'))
                        .ok_or_else(|| not(i + 1, "expected [module] after a tab"))?;
                    (m, Some(module.to_string()))
                }
                None => (line, None),
            };
            let mut f = main.split_whitespace();
            let (Some(addr), Some(kind), Some(name), None) =
                (f.next(), f.next(), f.next(), f.next())
            else {
                return Err(not(i + 1, "expected ADDRESS TYPE NAME"));
            };
            let addr = u64::from_str_radix(addr, 16)
                .map_err(|_| not(i + 1, "address is not hexadecimal"))?;
            let mut kc = kind.chars();
            let (Some(kind), None) = (kc.next(), kc.next()) else {
                return Err(not(i + 1, "type is not one letter"));
            };
            if !kind.is_ascii_alphabetic() && kind != '?' {
                return Err(not(i + 1, "type is not a letter"));
            }
            nonzero |= addr != 0;
            syms.push(KSym {
                addr,
                kind,
                name: name.to_string(),
                module,
            });
        }
        if syms.is_empty() {
            return Err(not(1, "no symbols"));
        }
        if !nonzero {
            let sysctl = |name: &str| {
                std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
            };
            return Err(SymbolError::Restricted {
                path: path.to_string(),
                why: why_hidden(sysctl("kptr_restrict"), sysctl("perf_event_paranoid")),
            });
        }
        Ok(Self::from_symbols(syms))
    }

    /// Read the symbol table of a vmlinux ELF.
    pub fn from_vmlinux(bytes: &[u8], path: &str) -> Result<Self, SymbolError> {
        use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
        let bad = |why: String| SymbolError::BadElf {
            path: path.to_string(),
            why,
        };
        let file = crate::elf::parse(bytes, Path::new(path)).map_err(|e| bad(e.reason()))?;
        let mut syms = Vec::new();
        for s in file.symbols() {
            let Ok(name) = s.name() else { continue };
            if name.is_empty() || s.kind() == SymbolKind::File || s.kind() == SymbolKind::Section {
                continue;
            }
            let in_text = s
                .section_index()
                .and_then(|i| file.section_by_index(i).ok())
                .map(|sec| sec.kind() == SectionKind::Text)
                .unwrap_or(false);
            let kind = match (in_text || s.kind() == SymbolKind::Text, s.is_global()) {
                (true, true) => 'T',
                (true, false) => 't',
                (false, true) => 'D',
                (false, false) => 'd',
            };
            syms.push(KSym {
                addr: s.address(),
                kind,
                name: name.to_string(),
                module: None,
            });
        }
        if syms.is_empty() {
            return Err(bad("it has no symbol table".into()));
        }
        Ok(Self::from_symbols(syms))
    }

    /// Build from symbols in any order.
    pub fn from_symbols(mut syms: Vec<KSym>) -> Self {
        // Stable sort keeps the file's order among aliases.
        syms.sort_by_key(|s| s.addr);
        let find = |n: &str| {
            syms.iter()
                .find(|s| s.name == n && s.module.is_none())
                .map(|s| s.addr)
        };
        let text = match (find("_stext"), find("_etext")) {
            (Some(s), Some(e)) if e > s => Some(KernelText {
                start: KernelPc(s & !(PAGE_SIZE - 1)),
                end: KernelPc(e),
            }),
            _ => None,
        };
        KernelSymbols { syms, text }
    }

    /// Kernel text: `[_stext rounded down to a page, _etext)`.
    pub fn text(&self) -> Option<KernelText> {
        self.text
    }

    /// Kernel text, or an error naming `path`.
    pub fn require_text(&self, path: &str) -> Result<KernelText, SymbolError> {
        self.text.ok_or_else(|| SymbolError::NoTextBounds {
            path: path.to_string(),
        })
    }

    /// Every symbol, by address.
    pub fn all(&self) -> &[KSym] {
        &self.syms
    }

    /// The core kernel's code symbols in ascending address order, one name
    /// per address (the last alias listed wins, as in a stable sort), and
    /// without the `__pfx_`/`__cfi_` padding labels that precede functions
    /// on recent kernels.
    pub fn text_symbols(&self) -> Vec<&KSym> {
        let mut out: Vec<&KSym> = Vec::new();
        for s in self.syms.iter().filter(|s| {
            s.module.is_none()
                && s.is_text()
                && !s.name.starts_with("__pfx_")
                && !s.name.starts_with("__cfi_")
        }) {
            match out.last_mut() {
                Some(last) if last.addr == s.addr => *last = s,
                _ => out.push(s),
            }
        }
        out
    }

    /// The code symbol containing `pc` (the nearest at or below it) and the
    /// offset into it, core kernel and modules alike.
    pub fn lookup(&self, pc: u64) -> Option<(&KSym, u64)> {
        let i = self.syms.partition_point(|s| s.addr <= pc);
        self.syms[..i]
            .iter()
            .rev()
            .find(|s| s.is_text() && !s.name.starts_with("__pfx_") && !s.name.starts_with("__cfi_"))
            .map(|s| (s, pc - s.addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81000100 t __pfx_fnA
ffffffff81000110 T fnA
ffffffff81000200 W fnB
ffffffff81001000 D some_data
ffffffff81002000 T _etext
ffffffffc0000000 t modfn\t[kvm]
0000000000000000 A fixed_percpu_data
";

    #[test]
    fn parses_kallsyms_and_finds_text() {
        let k = KernelSymbols::from_text(MAP.as_bytes(), "map").unwrap();
        let t = k.text().unwrap();
        assert_eq!(
            (t.start.0, t.end.0),
            (0xffffffff81000000, 0xffffffff81002000)
        );
        let names: Vec<_> = k.text_symbols().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["_text", "fnA", "fnB", "_etext"]);
        let (s, off) = k.lookup(0xffffffff81000115).unwrap();
        assert_eq!((s.name.as_str(), off), ("fnA", 5));
        let (s, _) = k.lookup(0xffffffffc0000010).unwrap();
        assert_eq!(s.module.as_deref(), Some("kvm"));
        assert!(k.lookup(0x10).is_none());
    }

    #[test]
    fn restricted_and_malformed_inputs_are_sentences() {
        let e = KernelSymbols::from_text(b"0000000000000000 T a\n0000000000000000 T b\n", "k")
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("k shows every kernel address as zero: "),
            "{e}"
        );
        let e = KernelSymbols::from_text(b"hello world\n", "f").unwrap_err();
        assert_eq!(
            e.to_string(),
            "f is not a symbol file (kallsyms, System.map or vmlinux): line 1: expected ADDRESS TYPE NAME"
        );
        let e = KernelSymbols::from_text(b"zz T a\n", "f").unwrap_err();
        assert!(e.to_string().contains("not hexadecimal"), "{e}");
        let e = KernelSymbols::from_text(b"\xff\xfe", "f").unwrap_err();
        assert!(e.to_string().contains("not text"), "{e}");
        let e = KernelSymbols::from_text(b"", "f").unwrap_err();
        assert!(e.to_string().contains("no symbols"), "{e}");
    }

    #[test]
    fn running_kernel_when_readable() {
        // /proc/kallsyms is always present on Linux; addresses may be hidden
        // for unprivileged users, which must then be the sentence above.
        match KernelSymbols::running() {
            Ok(k) => {
                let t = k.text().expect("kallsyms has _stext and _etext");
                assert!(!t.is_empty());
                assert!(k.text_symbols().len() > 1000);
            }
            Err(e) => assert!(
                e.to_string().contains("shows every kernel address as zero"),
                "{e}"
            ),
        }
    }

    #[test]
    fn hidden_addresses_name_the_sysctl_that_hides_them() {
        // kptr_restrict 0 hides nothing by itself: paranoid 2 does.
        let w = why_hidden(Some(0), Some(2));
        assert!(
            w.starts_with("the sysctl kernel.perf_event_paranoid is 2,"),
            "{w}"
        );
        assert!(w.contains("CAP_PERFMON") && w.contains("CAP_SYSLOG"), "{w}");
        let w = why_hidden(Some(1), Some(2));
        assert!(
            w.starts_with("the sysctl kernel.kptr_restrict is 1,"),
            "{w}"
        );
        assert!(w.contains("CAP_SYSLOG"), "{w}");
        let w = why_hidden(Some(2), Some(-1));
        assert!(
            w.starts_with("the sysctl kernel.kptr_restrict is 2,"),
            "{w}"
        );
        let w = why_hidden(None, None);
        assert!(w.contains("could not be read"), "{w}");
    }
}

#[cfg(test)]
mod sweep {
    use super::*;

    /// Stand-in for the fuzz target on stable: truncated and corrupted
    /// symbol files parse or fail with a sentence, never panic.
    #[test]
    fn truncations_and_corruptions_never_panic() {
        let good =
            b"ffffffff81000000 T _stext\nffffffff81000010 t f\t[m]\nffffffff81000100 T _etext\n";
        for n in 0..good.len() {
            if let Ok(k) = KernelSymbols::from_text(&good[..n], "t") {
                let _ = (k.text_symbols(), k.lookup(0xffffffff81000011), k.text());
            }
        }
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..5000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut bad = good.to_vec();
            let i = (seed as usize) % bad.len();
            bad[i] = (seed >> 40) as u8;
            if let Ok(k) = KernelSymbols::from_text(&bad, "t") {
                let _ = (k.text_symbols(), k.lookup(seed));
            }
            let _ = KernelSymbols::from_vmlinux(&bad, "t");
        }
    }
}
