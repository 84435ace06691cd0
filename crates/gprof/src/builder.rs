//! A record stream turned into gmon.out for one executable: each sample's
//! user stack unwound (`profdev_symbolize::unwind`), its frames moved to
//! the executable's link-time addresses, the histogram ticked and one arc
//! counted per pair of adjacent frames in the executable
//! (`profdev_formats::gmon::build::CallGraph`, shared with kgmon). Then
//! [`Builder::finish`] encodes the profile (with `--exact`, its arcs from
//! the [`Counter`]) and [`Finished::summary`] says what it holds.

use crate::exact::Trampolines;
use crate::{symbols, Counter, Program, CALLED_NOTE, EXACT_NOTE};
use anyhow::{anyhow, Result};
use profdev_core::{CpuMode, FileAddr, Record, Sample, SampleSource, SourceError, SourceStats};
use profdev_formats::gmon::build::{ArcCounts, CallGraph};
use profdev_formats::gmon::{self, Format, GmonOut};
use profdev_safefile::SafeFile;
use profdev_symbolize::unwind::{UnwindStats, UserUnwinder};
use profdev_symbolize::{Objects, SymOrigin, Tasks};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the samples held.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counts {
    pub(crate) samples: u64,
    pub(crate) in_text: u64,
    pub(crate) saturated: u64,
    pub(crate) unresolved: u64,
    /// Arcs into PLT stubs (calls into shared libraries), not written.
    pub(crate) plt_calls: u64,
}

/// What a sample's callee frames were refused for (no arc).
#[derive(Debug, Default)]
struct Refused {
    unresolved: u64,
    plt_calls: u64,
}

/// Turns a record stream into a gmon.out for one executable.
pub struct Builder {
    exe: Program,
    tasks: Tasks,
    unwinder: UserUnwinder,
    /// The histogram and arcs (`profdev_formats::gmon::build`, shared with
    /// kgmon).
    graph: CallGraph<ArcCounts>,
    samples: u64,
    refused: Refused,
    /// The frames of the sample at hand, reused.
    frames: Vec<Option<u64>>,
    /// With `--exact`: user pcs outside every file mapping of the
    /// executable (trampolines among them), kept for [`Trampolines`].
    misses: Option<Vec<(u32, u64)>>,
    /// Samples of processes that do not map the executable (programs CMD
    /// ran: `gcc`'s `cc1`), by command name.
    others: BTreeMap<String, u64>,
}

impl Builder {
    /// A profile of `exe`, its processes' mappings followed with
    /// `objects` (which read the binaries the stacks are unwound with).
    /// With `exact`, no stack is unwound: pcs outside the executable's
    /// mappings are kept to be charged to the trampolines' blocks.
    pub fn new(exe: Program, objects: Objects, exact: bool) -> Self {
        let tasks = Tasks::with_objects(objects);
        Builder {
            graph: CallGraph::new(exe.lowpc, exe.highpc, ArcCounts::default()),
            exe,
            tasks,
            unwinder: UserUnwinder::new(),
            samples: 0,
            refused: Refused::default(),
            frames: Vec::new(),
            misses: exact.then(Vec::new),
            others: BTreeMap::new(),
        }
    }

    pub(crate) fn counts(&self) -> Counts {
        let g = self.graph.counts();
        Counts {
            samples: self.samples,
            in_text: g.ticks,
            saturated: g.saturated,
            unresolved: self.refused.unresolved,
            plt_calls: self.refused.plt_calls,
        }
    }

    /// The unwinder's figures so far; `None` with `--exact` (no stacks).
    pub fn unwind_stats(&self) -> Option<UnwindStats> {
        self.misses.is_none().then(|| self.unwinder.stats())
    }

    /// Take in one record: a mapping change, or a sample.
    pub fn record(&mut self, r: &Record) {
        self.tasks.observe(r);
        if let Record::Sample(s) = r {
            self.sample(s);
        }
    }

    /// Take in `source`'s records until it ends (`None`) or fails (the
    /// error), then drop it (the session ends) and give its counts. After
    /// each batch (read for at most 100 ms) `each` gets the batch and the
    /// unwinder's figures ([`Builder::unwind_stats`]): the caller's
    /// progress, and its chance to pass signals on and reap CMD.
    pub fn read_until_end(
        &mut self,
        mut source: Box<dyn SampleSource>,
        mut each: impl FnMut(&[Record], Option<UnwindStats>),
    ) -> (Option<SourceError>, SourceStats) {
        let mut batch = Vec::new();
        let ended = loop {
            let r = source.read(&mut batch, Duration::from_millis(100));
            batch.iter().for_each(|rec| self.record(rec));
            each(&batch, self.unwind_stats());
            batch.clear();
            match r {
                Ok(()) => {}
                Err(SourceError::Ended) => break None,
                Err(e) => break Some(e),
            }
        };
        (ended, source.stats())
    }

    /// The link-time address in the executable of process address `va`.
    fn file_addr(&self, pid: u32, va: u64) -> Option<FileAddr> {
        let m = self.tasks.lookup(pid, profdev_core::ProcessVa(va))?;
        if !self.exe.is(m) {
            return None;
        }
        self.exe
            .elf
            .file_addr_of_offset(m.file_offset(profdev_core::ProcessVa(va)))
    }

    fn sample(&mut self, s: &Sample) {
        if s.mode != CpuMode::User {
            return;
        }
        self.samples += 1;
        let stack = self.unwinder.unwind(&self.tasks, s);
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        frames.extend((0..stack.frames.len()).map(|i| {
            self.file_addr(s.pid, stack.lookup_address(i).0)
                .map(|a| a.0)
        }));
        if let (Some(misses), None) = (&mut self.misses, frames.first().copied().flatten()) {
            misses.push((s.pid, s.ip));
        }
        if frames.first().copied().flatten().is_none() {
            self.count_other(s.pid);
        }
        let (elf, refused) = (&self.exe.elf, &mut self.refused);
        // Arcs only into functions gprof can name: a PLT stub jumps into a
        // shared library (the call leaves the executable), and gprof,
        // which reads no PLT symbols, would charge the stub to `_init`.
        let entry = |callee: u64| match elf.symbol(FileAddr(callee)) {
            Some((sym, _)) if sym.origin == SymOrigin::Plt => {
                refused.plt_calls += 1;
                None
            }
            Some((sym, _)) => Some(sym.addr),
            None => {
                refused.unresolved += 1;
                None
            }
        };
        // An unbounded arc map never overflows.
        let _ = self.graph.sample(frames.iter().copied(), entry);
        self.frames = frames;
    }

    /// A sample outside the executable's text: counted by command name
    /// when its process does not map the executable at all (it runs
    /// another program).
    fn count_other(&mut self, pid: u32) {
        let mappings = self.tasks.mappings(pid);
        if mappings.is_empty() || mappings.iter().any(|m| self.exe.is(m)) {
            return;
        }
        let comm = match self.tasks.comm(pid) {
            Some(c) => c.to_string(),
            None => format!("pid {pid}"),
        };
        *self.others.entry(comm).or_default() += 1;
    }

    /// Charge the samples taken in the executable's trampolines (its code
    /// as the coverage runtime runs it) to the blocks they run: the
    /// histogram stays what it would be without `--exact`.
    fn charge_trampolines(&mut self, t: &Trampolines) -> u64 {
        let mut n = 0;
        for (_pid, ip) in self.misses.take().unwrap_or_default() {
            if let Some(a) = t.link_addr(ip) {
                if self.graph.tick(a) {
                    n += 1;
                }
            }
        }
        n
    }

    /// The sampled profile at `hz`, its arc counts as GNU's 32 bits hold
    /// them.
    fn gmon(&self, hz: u32) -> GmonOut {
        let mut out = self.graph.gmon_out(hz);
        for arc in &mut out.arcs {
            // The GNU layout's counts are 32 bits.
            arc.count = arc.count.min(u64::from(u32::MAX));
        }
        out
    }

    /// The profile in `format`, sampled at `hz`: with a `counter`
    /// (`--exact`), its trampolines' samples charged back and its arcs the
    /// exact ones. Also a stripped executable's symbols file.
    pub fn finish(
        &mut self,
        counter: Option<&Counter>,
        hz: u32,
        format: Format,
    ) -> Result<Finished> {
        let charged = match counter {
            Some(c) => self.charge_trampolines(&c.trampolines(&self.exe.path)),
            None => 0,
        };
        let mut profile = self.gmon(hz);
        let exact = match counter {
            Some(c) => Some(c.arcs(&self.exe, format)?),
            None => None,
        };
        if let Some(x) = &exact {
            profile.arcs.clone_from(&x.arcs);
        }
        let bytes = gmon::write(&profile, format, gmon::Target::X86_64)
            .map_err(|e| anyhow!("cannot encode the profile: {e}"))?;
        Ok(Finished {
            bytes,
            symbols: symbols::exe_symbols_elf(&self.exe),
            exe: self.exe.path.clone(),
            hz,
            arcs: profile.arcs.len(),
            counts: self.counts(),
            unwind: self.unwind_stats(),
            charged,
            exact_notes: exact.map(|x| x.notes),
            others: self.others.clone(),
        })
    }
}

/// A finished profile: gmon.out's bytes, the symbols file gprof needs
/// beside it, and what to say about them.
pub struct Finished {
    /// gmon.out.
    pub bytes: Vec<u8>,
    /// The symbols ELF gprof reads in place of the executable (`CMD.syms`),
    /// for a stripped one or one with names gprof drops; else `None`.
    symbols: Option<symbols::SymbolsFile>,
    exe: PathBuf,
    hz: u32,
    arcs: usize,
    counts: Counts,
    unwind: Option<UnwindStats>,
    charged: u64,
    /// With `--exact`: what the counts said.
    exact_notes: Option<Vec<String>>,
    /// Samples in other programs, by command name ([`Builder`]'s `others`).
    others: BTreeMap<String, u64>,
}

impl Finished {
    /// The symbols file to write beside `output` (`CMD.syms`) and its
    /// bytes, for a stripped executable or one with names gprof drops
    /// (`symbols::exe_symbols_elf`).
    pub fn symbols_file(&self, output: &Path) -> Option<(PathBuf, &[u8])> {
        let file = self.symbols.as_ref()?;
        Some((symbols::symbols_path(output, &self.exe), &file.elf))
    }

    /// Write gmon.out into `out` (created at `output` when the run started,
    /// so an unwritable FILE was found at once) and put it in place; then,
    /// when gprof needs one, the symbols file beside it, created
    /// `mode` as `out` was (0644: the program's addresses, no kernel's).
    /// Each file is complete afterwards, or (on an error, e.g. a full disk)
    /// as it was before; a failure loses the file, not the summary.
    pub fn write(&self, out: SafeFile, output: &Path, mode: u32) -> Written {
        let put = |mut f: SafeFile, bytes: &[u8]| {
            f.write_bytes(bytes)?;
            f.commit()
        };
        let result = put(out, &self.bytes);
        let (result, symbols) = match (result, self.symbols_file(output)) {
            (Ok(()), Some((path, elf))) => {
                let result = SafeFile::create(&path, mode).and_then(|f| put(f, elf));
                let reason = self.symbols.as_ref().map(|s| s.reason.clone());
                (result, reason.map(|r| (path, r)))
            }
            (result, _) => (result, None),
        };
        Written {
            result,
            output: output.to_path_buf(),
            symbols,
        }
    }

    /// The lines of the run's summary on stderr (each after `profdev
    /// gmon: `): what was `written`, for `program` (as the user named it);
    /// what was sampled (`s`: the session's counts) and left out; the note
    /// on the "called" column.
    pub fn summary(&self, written: &Written, program: &Path, s: &SourceStats) -> Vec<String> {
        let c = self.counts;
        let mut lines = vec![format!(
            "{} for {}: {} user samples at {} Hz, {} in its text, {} elsewhere \
             (libraries, other programs), {} arcs; {} lost, {} throttled",
            written.what(),
            program.display(),
            c.samples,
            self.hz,
            c.in_text,
            c.samples - c.in_text,
            self.arcs,
            s.lost,
            s.throttled
        )];
        if let Some(line) = self.others_line(program) {
            lines.push(line);
        }
        if let (None, Some(u)) = (&self.exact_notes, &self.unwind) {
            lines.push(u.to_string());
        }
        if c.saturated > 0 {
            lines.push(format!(
                "{} histogram counts were lost: cells stop at 65535",
                c.saturated
            ));
        }
        if c.unresolved > 0 {
            lines.push(format!(
                "{} arcs dropped: their callee is in no function of {}'s symbol table",
                c.unresolved,
                program.display()
            ));
        }
        if c.plt_calls > 0 && self.exact_notes.is_none() {
            lines.push(format!(
                "{} arcs into PLT stubs (calls into shared libraries) not written: \
                 gprof knows no PLT symbols and would charge them to _init",
                c.plt_calls
            ));
        }
        match &self.exact_notes {
            Some(notes) => {
                if self.charged > 0 {
                    lines.push(format!(
                        "{} of the samples in its text ran in the copies of its code that count \
                         the calls (trampolines), charged to the code they copy",
                        self.charged
                    ));
                }
                lines.extend(notes.iter().cloned());
                lines.push(format!("note: {EXACT_NOTE}"));
            }
            None => lines.push(format!("note: {CALLED_NOTE}")),
        }
        lines
    }
}

impl Finished {
    /// Where the samples went when many (a tenth or more, or all those
    /// outside an empty profile) were in other programs than `program`:
    /// `gmon -- gcc` samples `cc1`, which gmon.out cannot hold.
    fn others_line(&self, program: &Path) -> Option<String> {
        let total: u64 = self.others.values().sum();
        let c = self.counts;
        if total == 0 || (total * 10 < c.samples && c.in_text > 0) {
            return None;
        }
        let mut top: Vec<(&String, &u64)> = self.others.iter().collect();
        top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut names: Vec<String> = top
            .iter()
            .take(3)
            .map(|(n, k)| format!("{n} {k}"))
            .collect();
        if top.len() > 3 {
            names.push(format!("{} more", top.len() - 3));
        }
        Some(format!(
            "{total} of the {} samples were in other programs {} ran (by command name: {}); \
             gmon.out holds only {}'s: to profile one of them, run profdev gmon -- on it",
            c.samples,
            program.display(),
            names.join(", "),
            program.display(),
        ))
    }
}

/// What [`Finished::write`] wrote: gmon.out (at `output`), and the
/// symbols file (and why gprof needs it) when it was tried.
pub struct Written {
    /// Whether every file was written, or why not.
    pub result: Result<(), profdev_safefile::Error>,
    output: PathBuf,
    symbols: Option<(PathBuf, symbols::Reason)>,
}

impl Written {
    /// Were all the files written?
    pub fn is_ok(&self) -> bool {
        self.result.is_ok()
    }

    /// `wrote FILE` or `did not write FILE`.
    pub fn what(&self) -> String {
        let verb = if self.is_ok() {
            "wrote"
        } else {
            "did not write"
        };
        format!("{verb} {}", self.output.display())
    }

    /// The last line (after `profdev gmon: `): why a file was not written;
    /// or, when a symbols file was, why (`program`, as the user named it,
    /// is stripped, or has names gprof drops) and how to read the profile
    /// with it.
    pub fn last_line(&self, program: &Path) -> Option<String> {
        let (syms, reason) = match (&self.result, &self.symbols) {
            (Err(e), _) => return Some(e.to_string()),
            (Ok(()), Some((syms, reason))) => (syms, reason),
            (Ok(()), None) => return None,
        };
        let gprof = format!(
            "read the profile with: gprof {} {}",
            syms.display(),
            self.output.display()
        );
        Some(match reason {
            symbols::Reason::Stripped => format!(
                "{} is stripped: wrote its functions (.dynsym and .eh_frame: sub_ADDR) to {}; \
                 {gprof}",
                program.display(),
                syms.display(),
            ),
            symbols::Reason::Names(names) => format!(
                "gprof would drop {} of {} ({}: local symbols with '$' or a '.' suffix \
                 other than .N, .clone.N, .constprop.N) and charge their time to the function \
                 before: wrote its functions to {}, those as global symbols under the same \
                 names; {gprof}",
                crate::plural(names.len() as u64, "function name"),
                program.display(),
                symbols::examples(names),
                syms.display(),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_core::UserRegs;

    /// The test binary itself plays CMD: a PIE with symbols.
    fn me() -> Program {
        Program::open(&std::env::current_exe().unwrap()).unwrap()
    }

    #[test]
    fn synthetic_samples_become_histogram_and_arcs() {
        let exe = me();
        // Two functions of this binary, as a caller/callee pair.
        let syms = exe.elf.symbols();
        let callee = syms
            .iter()
            .find(|s| s.size > 16 && s.addr >= exe.lowpc)
            .unwrap()
            .clone();
        let caller = syms
            .iter()
            .find(|s| s.size > 16 && s.addr > callee.addr + callee.size)
            .unwrap()
            .clone();
        let path = exe.path.to_str().unwrap().to_string();
        let exe_name = exe.path.file_name().unwrap().to_owned();
        // Map the whole file at a bias: offset 0 at 0x5555_0000_0000.
        let base = 0x5555_0000_0000u64;
        let file_len = std::fs::metadata(&exe.path).unwrap().len();
        let offset_of = |fa: u64| {
            // Invert file_addr_of_offset by a search over the file.
            (0..file_len)
                .step_by(16)
                .find_map(|off| {
                    let a = exe.elf.file_addr_of_offset(off)?;
                    (fa >= a.0 && fa < a.0 + 16).then(|| off + (fa - a.0))
                })
                .unwrap()
        };
        let ip = base + offset_of(callee.addr + 8);
        let ret = base + offset_of(caller.addr + 10);
        let mut b = Builder::new(exe, Objects::with_loader(|_| None), false);
        b.record(&Record::Mmap {
            pid: 9,
            tid: 9,
            addr: base,
            len: 0x4000_0000,
            pgoff: 0,
            path,
            file: None,
            build_id: None,
            time: 0,
        });
        let s = Sample {
            pid: 9,
            tid: 9,
            ip,
            mode: CpuMode::User,
            user_chain: vec![ip, ret],
            ..Sample::default()
        };
        b.record(&Record::Sample(s.clone()));
        b.record(&Record::Sample(s));
        // A sample elsewhere (no mapping) and a kernel one.
        b.record(&Record::Sample(Sample {
            pid: 9,
            ip: 0x10,
            mode: CpuMode::User,
            user_regs: Some(UserRegs::default()),
            ..Sample::default()
        }));
        b.record(&Record::Sample(Sample {
            pid: 9,
            ip: 0x10,
            mode: CpuMode::Kernel,
            ..Sample::default()
        }));
        let g = b.gmon(1000);
        let h = &g.histograms[0];
        assert_eq!(h.bins[((callee.addr + 8 - h.low_pc) / 4) as usize], 2);
        assert_eq!(
            g.arcs,
            vec![gmon::Arc {
                from_pc: caller.addr + 9,
                self_pc: callee.addr,
                count: 2
            }]
        );
        let c = b.counts();
        assert_eq!((c.samples, c.in_text), (3, 2));
        assert_eq!(b.unwind_stats().unwrap().kernel_chain, 2);

        // Finished: the bytes are gmon.out, the summary says what it holds.
        let done = b.finish(None, 1000, Format::Gnu).unwrap();
        let back = gmon::parse(&done.bytes, gmon::Target::X86_64).unwrap().gmon;
        assert_eq!(back.arcs, g.arcs);
        // The test binary is a Rust program: gprof would drop its `$`
        // names, so its functions go to `NAME.syms` beside gmon.out.
        let (syms, _) = done.symbols_file(Path::new("gmon.out")).unwrap();
        let name = exe_name.to_string_lossy();
        assert_eq!(syms, PathBuf::from(format!("{name}.syms")));
        let written = Written {
            result: Ok(()),
            output: "gmon.out".into(),
            symbols: None,
        };
        let stats = SourceStats {
            samples: 3,
            lost: 1,
            throttled: 0,
        };
        let lines = done.summary(&written, Path::new("./me"), &stats);
        assert_eq!(
            lines[0],
            "wrote gmon.out for ./me: 3 user samples at 1000 Hz, 2 in its text, 1 elsewhere \
             (libraries, other programs), 1 arcs; 1 lost, 0 throttled"
        );
        assert_eq!(lines.last().unwrap(), &format!("note: {CALLED_NOTE}"));
    }

    /// Samples of a process running another program (`gcc`'s `cc1`) are
    /// counted by command name, and the summary says where they went.
    #[test]
    fn samples_in_other_programs_are_named() {
        let mut b = Builder::new(me(), Objects::with_loader(|_| None), false);
        b.record(&Record::Comm {
            pid: 7,
            tid: 7,
            comm: "cc1".into(),
            exec: true,
            time: 0,
        });
        b.record(&Record::Mmap {
            pid: 7,
            tid: 7,
            addr: 0x40_0000,
            len: 0x1000,
            pgoff: 0,
            path: "/usr/lib/gcc/cc1".into(),
            file: None,
            build_id: None,
            time: 0,
        });
        for _ in 0..3 {
            b.record(&Record::Sample(Sample {
                pid: 7,
                tid: 7,
                ip: 0x40_0010,
                mode: CpuMode::User,
                ..Sample::default()
            }));
        }
        let done = b.finish(None, 1000, Format::Gnu).unwrap();
        let written = Written {
            result: Ok(()),
            output: "gmon.out".into(),
            symbols: None,
        };
        let lines = done.summary(&written, Path::new("gcc"), &SourceStats::default());
        assert_eq!(
            lines[1],
            "3 of the 3 samples were in other programs gcc ran (by command name: cc1 3); \
             gmon.out holds only gcc's: to profile one of them, run profdev gmon -- on it"
        );
    }

    /// Batches, then the end.
    struct Batches(Vec<Vec<Record>>);

    impl SampleSource for Batches {
        fn read(&mut self, out: &mut Vec<Record>, _t: Duration) -> Result<(), SourceError> {
            if self.0.is_empty() {
                return Err(SourceError::Ended);
            }
            out.append(&mut self.0.remove(0));
            Ok(())
        }

        fn stats(&self) -> SourceStats {
            SourceStats::default()
        }
    }

    #[test]
    fn records_are_read_until_the_source_ends() {
        let mut b = Builder::new(me(), Objects::with_loader(|_| None), false);
        let user = |ip| {
            Record::Sample(Sample {
                pid: 4,
                ip,
                mode: CpuMode::User,
                ..Sample::default()
            })
        };
        let source = Batches(vec![vec![user(0x10), user(0x20)], vec![], vec![user(0x30)]]);
        let mut seen = Vec::new();
        let (ended, stats) = b.read_until_end(Box::new(source), |batch, unwind| {
            seen.push((batch.len(), unwind.map(|u| u.samples)));
        });
        assert!(ended.is_none());
        assert_eq!(stats, SourceStats::default());
        assert_eq!(
            seen,
            [(2, Some(2)), (0, Some(2)), (1, Some(3)), (0, Some(3))]
        );
        assert_eq!(b.counts().samples, 3);
    }

    #[test]
    fn written_files_are_complete_or_named_in_the_last_line() {
        let d = tempfile::tempdir().unwrap();
        let done = Builder::new(me(), Objects::with_loader(|_| None), false)
            .finish(None, 100, Format::Bsd)
            .unwrap();
        let output = d.path().join("gmon.out");
        let out = SafeFile::create(&output, 0o644).unwrap();
        let written = done.write(out, &output, 0o644);
        assert!(written.is_ok());
        assert_eq!(std::fs::read(&output).unwrap(), done.bytes);
        assert_eq!(written.what(), format!("wrote {}", output.display()));
        // The test binary (Rust) has names gprof drops: its symbols file
        // is written beside gmon.out, and the last line says how to read
        // the profile with it.
        let (syms, elf) = done.symbols_file(&output).unwrap();
        assert_eq!(std::fs::read(&syms).unwrap(), elf);
        let last = written.last_line(Path::new("p")).unwrap();
        assert!(last.starts_with("gprof would drop "), "{last}");
        assert!(
            last.ends_with(&format!(
                "names; read the profile with: gprof {} {}",
                syms.display(),
                output.display()
            )),
            "{last}"
        );
        let plain = Written {
            result: Ok(()),
            output: output.clone(),
            symbols: None,
        };
        assert_eq!(plain.last_line(Path::new("p")), None);
        // A file that could not be written is named in the last line.
        let failed = Written {
            result: SafeFile::create(d.path().join("no/such/dir"), 0o644).map(|_| ()),
            output: "x/gmon.out".into(),
            symbols: None,
        };
        assert_eq!(failed.what(), "did not write x/gmon.out");
        let why = failed.last_line(Path::new("p")).unwrap();
        assert_eq!(why, failed.result.as_ref().unwrap_err().to_string());
    }

    #[test]
    fn exact_builders_keep_misses_and_no_unwind_stats() {
        let mut b = Builder::new(me(), Objects::with_loader(|_| None), true);
        assert!(b.unwind_stats().is_none());
        b.record(&Record::Sample(Sample {
            pid: 3,
            ip: 0x7000_0010,
            mode: CpuMode::User,
            ..Sample::default()
        }));
        assert_eq!(b.misses.as_deref(), Some(&[(3, 0x7000_0010)][..]));
    }

    #[test]
    fn the_names_line_says_which_names_and_how_to_read_the_profile() {
        let written = Written {
            result: Ok(()),
            output: "gmon.out".into(),
            symbols: Some((
                "r.syms".into(),
                symbols::Reason::Names(vec!["f.isra.0".into(), "g$LT$".into(), "h.cold".into()]),
            )),
        };
        assert_eq!(
            written.last_line(Path::new("./r")).unwrap(),
            "gprof would drop 3 function names of ./r (f.isra.0, g$LT$ and 1 more: local \
             symbols with '$' or a '.' suffix other than .N, .clone.N, .constprop.N) and charge \
             their time to the function before: wrote its functions to r.syms, those as global \
             symbols under the same names; read the profile with: gprof r.syms gmon.out"
        );
    }

    #[test]
    fn the_stripped_line_says_how_to_read_the_profile() {
        let written = Written {
            result: Ok(()),
            output: "out/gmon.out".into(),
            symbols: Some(("out/prog.syms".into(), symbols::Reason::Stripped)),
        };
        assert_eq!(
            written.last_line(Path::new("./prog")).unwrap(),
            "./prog is stripped: wrote its functions (.dynsym and .eh_frame: sub_ADDR) to \
             out/prog.syms; read the profile with: gprof out/prog.syms out/gmon.out"
        );
    }
}

/// The PLT arc rule on synthetic stacks (a file of its own).
#[cfg(test)]
mod plt_arcs;
