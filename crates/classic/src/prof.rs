//! prof's work between reading the prof device and printing: the device's
//! records, read through its files (a private device's, or a mounted
//! one's), and their histograms attributed to each module's functions and
//! source lines through its ELF file ([`ElfMap`]), formatted as Inferno's
//! prof did ([`listing`]). Also what cprof and mprof say when nothing was
//! counted ([`no_profile`]), and the source text of a listing's files
//! ([`source_lines`]), which mprof shares.

use anyhow::{anyhow, bail, Context as _, Result};
use profdev_core::FileAddr;
use profdev_dev::tree::walk;
use profdev_dev::{Dev, DevError, DirEntry, OpenMode, Qid};
use profdev_formats::prof_histogram;
use profdev_report::prof::{
    attribute, format, Function, ModuleProfile, Options, SourceMap, SrcRange,
};
use profdev_symbolize::open::{read_bounded, Follow};
use profdev_symbolize::ElfObject;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Inferno's message when nothing was sampled.
pub const NO_PROFILE: &str = "no profile information";

/// The -m list (and the executable `exe`, for -e) as `module` words:
/// paths made absolute, since the device may run in another directory.
/// Err: a word with a blank, which a control message cannot carry.
pub fn module_words(modules: &[String], exe: Option<&Path>) -> Result<Vec<String>> {
    let absolute = |p: &Path| {
        std::fs::canonicalize(p)
            .or_else(|_| std::path::absolute(p))
            .unwrap_or_else(|_| p.to_path_buf())
            .to_string_lossy()
            .into_owned()
    };
    let mut words: Vec<String> = modules
        .iter()
        .map(|m| {
            if m.contains('/') {
                absolute(Path::new(m))
            } else {
                m.clone()
            }
        })
        .collect();
    words.extend(exe.map(absolute));
    if let Some(w) = words.iter().find(|w| w.chars().any(char::is_whitespace)) {
        bail!("module name {w:?} contains a blank, which a control message cannot carry");
    }
    Ok(words)
}

/// Write one control message to a (private) prof device, as `echo MSG
/// >prof/ctl`.
pub fn ctl(dev: &dyn Dev, msg: &str) -> Result<()> {
    let entry = walk(dev, Qid::ROOT, "ctl").map_err(|e| anyhow!("ctl: {e}"))?;
    let mut chan = dev.open(entry.qid, OpenMode::Write)?;
    let r = dev.write(&mut chan, 0, format!("{msg}\n").as_bytes());
    dev.close(chan);
    match r {
        Ok(_) => Ok(()),
        Err(DevError::Sampling { msg, .. }) => bail!("cannot start profiling: {msg}"),
        Err(e) => Err(e.into()),
    }
}

/// A module's record as read from the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its id (its directory's name, in hex).
    pub id: u32,
    /// The module's name (its basename).
    pub name: String,
    /// The module's path.
    pub path: String,
    /// Its histogram: (pc, samples).
    pub pairs: Vec<(u64, u64)>,
    /// The module's file as it was mapped (the directory's `object`), when
    /// the device serves it and the reader may read it.
    pub object: Option<Vec<u8>>,
}

/// Every read of file `name` of directory `dir` of `dev`, `buf` bytes
/// at most each, in order.
pub fn read_file(dev: &dyn Dev, dir: &DirEntry, name: &str, buf: u32) -> Result<Vec<Vec<u8>>> {
    let f = walk(dev, dir.qid, name).map_err(|e| anyhow!("{}/{name}: {e}", dir.name))?;
    let mut chan = dev.open(f.qid, OpenMode::Read)?;
    let mut reads = Vec::new();
    let mut offset = 0;
    loop {
        let b = dev.read(&mut chan, offset, buf)?;
        if b.is_empty() {
            break;
        }
        offset += b.len() as u64;
        reads.push(b);
    }
    dev.close(chan);
    Ok(reads)
}

/// Read every record of a device through its files, as the library did:
/// the root's directories, each one's `name`, `path`, and `histogram` one
/// pair per read. Oldest record first.
pub fn read_dev(dev: &dyn Dev) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    for dir in dev.gen(Qid::ROOT)?.into_iter().filter(|e| e.qid.is_dir()) {
        let text = |name| -> Result<String> {
            let bytes = read_file(dev, &dir, name, 4096)?.concat();
            Ok(String::from_utf8_lossy(&bytes)
                .trim_end_matches('\n')
                .to_string())
        };
        let mut pairs = Vec::new();
        for pair in read_file(dev, &dir, "histogram", 64)? {
            pairs.push(
                prof_histogram::parse_pair(&pair)
                    .with_context(|| format!("{}/histogram", dir.name))?,
            );
        }
        let object = read_file(dev, &dir, "object", 1 << 20)
            .ok()
            .map(|r| r.concat());
        out.push(Record {
            id: u32::from_str_radix(&dir.name, 16).unwrap_or(0),
            name: text("name")?,
            path: text("path")?,
            pairs,
            object,
        });
    }
    out.sort_by_key(|r| r.id);
    Ok(out)
}

/// Read every record of a mounted device (`DIR` is its `prof/`).
pub fn read_mounted(dir: &Path) -> Result<Vec<Record>> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let mut out = Vec::new();
    for e in entries {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "ctl" {
            continue;
        }
        let Ok(id) = u32::from_str_radix(&name, 16) else {
            continue;
        };
        let text = |f: &str| -> Result<String> {
            let p = e.path().join(f);
            Ok(std::fs::read_to_string(&p)
                .with_context(|| format!("cannot read {}", p.display()))?
                .trim_end_matches('\n')
                .to_string())
        };
        let hist = e.path().join("histogram");
        let mut bytes = Vec::new();
        let mut f = std::fs::File::open(&hist)
            .with_context(|| format!("cannot open {}", hist.display()))?;
        // One pair per read; a large buffer takes several if a server
        // returns more.
        let mut buf = vec![0; 4096];
        loop {
            let n = f
                .read(&mut buf)
                .with_context(|| format!("cannot read {}", hist.display()))?;
            if n == 0 {
                break;
            }
            bytes.extend_from_slice(&buf[..n]);
        }
        let pairs = prof_histogram::parse_text(&String::from_utf8_lossy(&bytes))
            .with_context(|| hist.display().to_string())?;
        // The mapped file itself; absent from an older server, refused to
        // a reader who may not read the file.
        let object = read_bounded(
            &e.path().join("object"),
            profdev_symbolize::open::MAX_OBJECT,
            Follow::No,
        )
        .ok();
        out.push(Record {
            id,
            name: text("name")?,
            path: text("path")?,
            pairs,
            object,
        });
    }
    out.sort_by_key(|r| r.id);
    Ok(out)
}

/// A module's ELF file as a listing's source map: a pc's function is the
/// out-of-line function holding it, at its declaration line; its line the
/// line of that function's own code (code inlined there at its call
/// site), or with `innermost` the inlined subroutine's own.
pub struct ElfMap {
    obj: Option<Arc<ElfObject>>,
    /// `-i`: charge inlined code to its own lines and functions.
    innermost: bool,
    /// Charge code no symbol covers to the module's one unknown row
    /// (prof), rather than to no function (mprof).
    unknown_row: bool,
    functions: RefCell<HashMap<u64, Function>>,
}

impl ElfMap {
    /// The map of `obj` (None: a module that could not be read).
    pub fn new(obj: Option<ElfObject>, innermost: bool, unknown_row: bool) -> ElfMap {
        ElfMap::shared(obj.map(Arc::new), innermost, unknown_row)
    }

    /// The map of `obj` shared with others (None: a module that could not
    /// be read).
    pub fn shared(obj: Option<Arc<ElfObject>>, innermost: bool, unknown_row: bool) -> ElfMap {
        ElfMap {
            obj,
            innermost,
            unknown_row,
            functions: RefCell::new(HashMap::new()),
        }
    }

    /// The module's ELF file, if it could be read.
    pub fn object(&self) -> Option<&ElfObject> {
        self.obj.as_deref()
    }

    /// The function whose symbol starts at `addr`.
    pub fn function_at(&self, obj: &ElfObject, addr: u64) -> Function {
        if let Some(f) = self.functions.borrow().get(&addr) {
            return f.clone();
        }
        let frames = obj.frames(FileAddr(addr));
        let name = frames
            .last()
            .and_then(|f| f.function.clone())
            .or_else(|| obj.symbol(FileAddr(addr)).map(|(s, _)| s.name()))
            .unwrap_or_else(|| "??".into());
        let decl = obj.function_decl(FileAddr(addr));
        let f = Function {
            file: decl.as_ref().map(|d| d.0.clone()),
            line: decl.map(|d| d.1),
            name,
            addr: Some(addr),
        };
        self.functions.borrow_mut().insert(addr, f.clone());
        f
    }
}

impl SourceMap for ElfMap {
    fn lines(&self, pc: u64) -> Option<SrcRange> {
        let obj = self.obj.as_deref()?;
        if !obj.has_debug_info() {
            return None;
        }
        let frames = obj.frames(FileAddr(pc));
        let frame = if self.innermost {
            frames.into_iter().next()?
        } else {
            frames.into_iter().next_back()?
        };
        let line = frame.line.filter(|&l| l != 0)?;
        Some(SrcRange {
            file: frame.file?,
            first: line,
            last: line,
        })
    }

    fn function(&self, pc: u64) -> Option<Function> {
        let obj = self.obj.as_deref()?;
        if self.innermost {
            let frames = obj.frames(FileAddr(pc));
            if frames.len() > 1 {
                let decl = obj.frame_decls(FileAddr(pc)).into_iter().next().flatten();
                return Some(Function {
                    file: decl.as_ref().map(|d| d.0.clone()),
                    line: decl.map(|d| d.1),
                    name: frames[0].function.clone().unwrap_or_else(|| "??".into()),
                    addr: None,
                });
            }
        }
        match obj.symbol(FileAddr(pc)) {
            Some((sym, _)) => Some(self.function_at(obj, sym.addr)),
            // Code no symbol and no FDE covers: one row per module.
            None if self.unknown_row => Some(Function {
                file: None,
                line: None,
                name: obj.unknown_name(),
                addr: None,
            }),
            None => None,
        }
    }
}

/// A source map that calls `tick` once per function looked up
/// (`attribute` looks up each pc's function once): a progress bar's step.
struct Ticking<'a> {
    map: &'a ElfMap,
    tick: &'a dyn Fn(),
}

impl SourceMap for Ticking<'_> {
    fn lines(&self, pc: u64) -> Option<SrcRange> {
        self.map.lines(pc)
    }

    fn function(&self, pc: u64) -> Option<Function> {
        (self.tick)();
        self.map.function(pc)
    }
}

/// Open module `path` for a listing of `tool`'s: `bytes` (the file as
/// mapped) if the device gave them, else the file `file` (`path` or where
/// it leads); with its separate debug information. Says (through `note`)
/// when it cannot be read or has no debug information.
pub fn open_module(
    tool: &str,
    path: &str,
    file: &Path,
    bytes: Option<&[u8]>,
    note: &mut dyn FnMut(String),
) -> Option<ElfObject> {
    let opened = match bytes {
        Some(bytes) => ElfObject::parse(bytes, file),
        None => ElfObject::open(file),
    };
    let opened = opened.map(|o| Box::new(o.with_separate_debug_info()));
    module_opened(tool, path, opened, note).map(|o| *o)
}

/// What [`open_module`] says of a module opened (its detached debug
/// information found) as `opened`: a note when it has no debug
/// information, or could not be read (then None).
pub fn module_opened<T: std::ops::Deref<Target = ElfObject>>(
    tool: &str,
    path: &str,
    opened: Result<T, profdev_symbolize::ElfError>,
    note: &mut dyn FnMut(String),
) -> Option<T> {
    match opened {
        Ok(o) => {
            if !o.has_debug_info() {
                note(format!(
                    "{tool}: {path} has no debug information: functions from its symbol table, \
                     no lines"
                ));
            }
            Some(o)
        }
        Err(e) => {
            note(format!("{tool}: cannot read module {path}: {e}"));
            None
        }
    }
}

/// prof's listing of `records` (Inferno's format, `options`): each pc
/// attributed through its module's ELF file (`innermost`: `-i`), the
/// source files read. `tick` is called once per pc symbolized; `note`
/// gets each sentence for standard error. Err: [`NO_PROFILE`] when
/// nothing was sampled.
pub fn listing(
    records: &[Record],
    options: &Options,
    innermost: bool,
    tick: &dyn Fn(),
    note: &mut dyn FnMut(String),
) -> Result<String> {
    if records.iter().all(|r| r.pairs.is_empty()) {
        bail!("{NO_PROFILE}");
    }
    let mut modules = Vec::new();
    for r in records {
        let obj = open_module(
            "prof",
            &r.path,
            Path::new(&r.path),
            r.object.as_deref(),
            note,
        );
        let has_lines = obj.as_ref().is_some_and(ElfObject::has_debug_info);
        let map = ElfMap::new(obj, innermost, true);
        let a = attribute(&r.pairs, &Ticking { map: &map, tick });
        let mut m = ModuleProfile::new(&r.name, &r.path, &a, has_lines);
        if options.zeros {
            if let Some(obj) = map.object() {
                let seen: std::collections::HashSet<Option<u64>> =
                    m.functions.iter().map(|(f, _)| f.addr).collect();
                for s in obj.all_symbols() {
                    if !seen.contains(&Some(s.addr)) {
                        m.functions.push((map.function_at(obj, s.addr), 0));
                    }
                }
            }
        }
        for f in &mut m.files {
            f.text = source_lines("prof", &f.path, &r.path, note);
        }
        modules.push(m);
    }
    Ok(format(&modules, options))
}

/// The largest source file a listing reads.
pub const MAX_SOURCE: u64 = 64 << 20;

/// The lines (each with its newline) of `source`, a path from `module`'s
/// debug information, for `tool`'s listing; `None` when it cannot be read
/// (noted: `TOOL: source file F not found: line numbers only`), with a
/// warning when it is newer than the module. Another user may have
/// written the path: a regular file only (no FIFO or device), bounded.
pub fn source_lines(
    tool: &str,
    source: &str,
    module: &str,
    note: &mut dyn FnMut(String),
) -> Option<Vec<String>> {
    let Ok(bytes) = read_bounded(Path::new(source), MAX_SOURCE, Follow::Yes) else {
        note(format!(
            "{tool}: source file {source} not found: line numbers only"
        ));
        return None;
    };
    let modified = |p: &str| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if let (Some(s), Some(m)) = (modified(source), modified(module)) {
        if s > m {
            note(format!(
                "{tool}: warning: {source} is newer than {module}: lines may not match"
            ));
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    Some(text.split_inclusive('\n').map(String::from).collect())
}

/// The modules of a `-m` list given as paths, as [`not_profilable`] takes
/// them.
pub fn asked_by_path(modules: &[String]) -> impl Iterator<Item = (PathBuf, bool)> + '_ {
    modules
        .iter()
        .filter(|m| m.contains('/'))
        .map(|m| (m.into(), true))
}

/// For each `(file, asked as a module)`: why it cannot be profiled, if it
/// is a malformed ELF file or, asked as a module, not a readable ELF file
/// at all. One sentence each, naming the file; duplicates dropped.
pub fn not_profilable(files: impl IntoIterator<Item = (PathBuf, bool)>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (path, module) in files {
        let why = match ElfObject::open(&path) {
            Ok(_) => continue,
            Err(e @ profdev_symbolize::ElfError::Malformed { .. }) => e.to_string(),
            Err(e) if module => e.to_string(),
            Err(_) => continue,
        };
        if !out.contains(&why) {
            out.push(why);
        }
    }
    out
}

/// The error of a cprof or mprof run that counted nothing: the classic
/// message `classic` (`no profile information (…)`), byte for byte, then
/// one line `NAME: why` for each module of the `-m` list given as a path
/// that is not a readable ELF file (the classic line names none).
pub fn no_profile(name: &str, classic: &str, modules: &[String]) -> anyhow::Error {
    let mut msg = classic.to_string();
    for why in not_profilable(asked_by_path(modules)) {
        msg.push_str(&format!("\n{name}: {why}"));
    }
    anyhow!(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_profile_names_the_modules_that_are_no_elf_files() {
        let d = tempfile::tempdir().unwrap();
        let text = d.path().join("notes.txt");
        std::fs::write(&text, "x\n").unwrap();
        let cut = d.path().join("cut");
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        std::fs::write(&cut, &me[..100]).unwrap();
        let modules = [
            "libc.so.6".to_string(),
            text.display().to_string(),
            cut.display().to_string(),
            text.display().to_string(),
        ];
        let e = no_profile(
            "cprof",
            "no profile information (no module asked for ran)",
            &modules,
        );
        assert_eq!(
            e.to_string(),
            format!(
                "no profile information (no module asked for ran)\ncprof: {} is not an ELF file\n\
                 cprof: {} is a malformed ELF file: Invalid ELF program header size or alignment",
                text.display(),
                cut.display()
            )
        );
        // Nothing to say: the classic message alone.
        let e = no_profile("mprof", "no profile information (x)", &["libc.so.6".into()]);
        assert_eq!(e.to_string(), "no profile information (x)");
        // A file asked for only as a command is named when malformed, not
        // when it is no ELF file at all (a script).
        assert!(not_profilable([(text.clone(), false)]).is_empty());
        assert_eq!(not_profilable([(cut.clone(), false)]).len(), 1);
    }

    #[test]
    fn a_listing_of_nothing_is_no_profile() {
        let r = Record {
            id: 1,
            name: "x".into(),
            path: "/x".into(),
            pairs: vec![],
            object: None,
        };
        let e = listing(&[r], &Options::default(), false, &|| {}, &mut |_| {}).unwrap_err();
        assert_eq!(e.to_string(), NO_PROFILE);
    }

    /// This test binary's own pcs: the module is read, every pc is looked
    /// up once, and the function table names the functions.
    #[test]
    fn a_listing_attributes_pcs_through_the_module() {
        let exe = std::env::current_exe().unwrap();
        let obj = ElfObject::open(&exe).unwrap();
        let sym = obj
            .all_symbols()
            .into_iter()
            .find(|s| {
                s.name()
                    .contains("a_listing_attributes_pcs_through_the_module")
            })
            .unwrap();
        let r = Record {
            id: 1,
            name: "me".into(),
            path: exe.display().to_string(),
            pairs: vec![(sym.addr, 3)],
            object: None,
        };
        let ticks = std::cell::Cell::new(0);
        let mut notes = Vec::new();
        let options = Options {
            functions: true,
            ..Options::default()
        };
        let text = listing(
            &[r],
            &options,
            false,
            &|| ticks.set(ticks.get() + 1),
            &mut |n| notes.push(n),
        )
        .unwrap();
        assert_eq!(ticks.get(), 1);
        assert!(
            text.contains("a_listing_attributes_pcs_through_the_module"),
            "{text}"
        );
        assert!(text.contains("100.00"), "{text}");
    }

    #[test]
    fn an_unreadable_module_is_noted_and_shown_as_unknown() {
        let mut notes = Vec::new();
        let path = "/no/such/module";
        assert!(open_module("prof", path, Path::new(path), None, &mut |n| notes.push(n)).is_none());
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("prof: cannot read module /no/such/module: "));
        let map = ElfMap::new(None, false, true);
        assert_eq!(map.function(1), None);
        assert_eq!(map.lines(1), None);
    }

    #[test]
    fn a_missing_source_is_noted() {
        let mut notes = Vec::new();
        assert!(source_lines("mprof", "/no/such.c", "/no/mod", &mut |n| notes.push(n)).is_none());
        assert_eq!(
            notes,
            ["mprof: source file /no/such.c not found: line numbers only"]
        );
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("a.c");
        std::fs::write(&src, "one\ntwo").unwrap();
        let lines = source_lines("prof", src.to_str().unwrap(), "/no/mod", &mut |n| {
            notes.push(n)
        });
        assert_eq!(lines.unwrap(), ["one\n", "two"]);
    }

    /// The reader prof uses, on a device fed with TV-P2's counts:
    /// five ticks at pc 1 and seven at pc 4 of this test binary (a PIE
    /// whose first load segment maps offset 0 at address 0).
    #[test]
    fn reads_a_device_through_its_files() {
        use profdev_core::{CpuMode, Record as R, Sample};
        let exe = std::env::current_exe().unwrap();
        let base = 0x5555_0000_0000;
        let mut recs = vec![R::Mmap {
            pid: 3,
            tid: 3,
            addr: base,
            len: 0x1000,
            pgoff: 0,
            path: exe.to_string_lossy().into_owned(),
            file: None,
            build_id: None,
            time: 0,
        }];
        for (pc, n) in [(1, 5), (4, 7)] {
            for _ in 0..n {
                recs.push(R::Sample(Sample {
                    ip: base + pc,
                    pid: 3,
                    tid: 3,
                    mode: CpuMode::User,
                    ..Default::default()
                }));
            }
        }
        let factory = profdev_dev::engine::ReplayFactory::new(recs);
        let dev =
            profdev_dev::prof::Prof::new(profdev_dev::Engine::new(std::sync::Arc::new(factory)));
        ctl(&dev, "start").unwrap();
        profdev_testkit::wait_until(
            "the replay to end",
            std::time::Duration::from_secs(30),
            || dev.session_ended(),
        );
        ctl(&dev, "stop").unwrap();
        let records = read_dev(&dev).unwrap();
        assert_eq!(
            records,
            [Record {
                id: 1,
                name: exe.file_name().unwrap().to_string_lossy().into_owned(),
                path: exe.to_string_lossy().into_owned(),
                pairs: vec![(1, 5), (4, 7)],
                object: Some(std::fs::read(&exe).unwrap()),
            }]
        );
        ctl(&dev, "end").unwrap();
        assert!(read_dev(&dev).unwrap().is_empty());
    }

    /// A mounted device's directory, as the FUSE server shows it: the
    /// records in id order, `ctl` and other names skipped, the histogram
    /// one pair a line, the object when present.
    #[test]
    fn reads_a_mounted_device() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("ctl"), "").unwrap();
        std::fs::create_dir(d.path().join("notes")).unwrap();
        for (id, name, hist) in [("0000000a", "b", "4 7\n"), ("00000002", "a", "1 5\n2 1\n")] {
            let r = d.path().join(id);
            std::fs::create_dir(&r).unwrap();
            std::fs::write(r.join("name"), format!("{name}\n")).unwrap();
            std::fs::write(r.join("path"), format!("/x/{name}\n")).unwrap();
            std::fs::write(r.join("histogram"), hist).unwrap();
        }
        std::fs::write(d.path().join("00000002/object"), b"ELF").unwrap();
        let records = read_mounted(d.path()).unwrap();
        assert_eq!(
            records,
            [
                Record {
                    id: 2,
                    name: "a".into(),
                    path: "/x/a".into(),
                    pairs: vec![(1, 5), (2, 1)],
                    object: Some(b"ELF".to_vec()),
                },
                Record {
                    id: 10,
                    name: "b".into(),
                    path: "/x/b".into(),
                    pairs: vec![(4, 7)],
                    object: None,
                },
            ]
        );
        std::fs::write(d.path().join("0000000a/histogram"), "x\n").unwrap();
        assert!(read_mounted(d.path()).is_err());
    }
}
