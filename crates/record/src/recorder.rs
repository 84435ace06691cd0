//! The recorder proper: records in, the recording's entries out. It keeps
//! the task and mapping model (and with `-g` the unwinder), writes each
//! sampled thread's Task entry and each sampled file's Object entry before
//! the first sample using it, each sample as (object, offset) frames, and
//! queues the new addresses of each object for the [`SymbolThread`]. No
//! I/O but the reading of ELF layouts and the kernel's symbols: the
//! [`Encoder`]'s bytes are taken by the caller.

use crate::symbols::{SymbolJob, SymbolThread};
use crate::Error;
use profdev_core::waits::{Wait, Waits};
use profdev_core::{CpuMode, ProcessVa, Record, Sample};
use profdev_formats::recording::{
    unwind_failed_label, Encoder, Frame, Function, Loss, ObjectInfo, ObjectKind, OffCpu,
    SampleInfo, Task,
};
use profdev_symbolize::{ElfLayout, KernelSymbols, Objects, Symbolizer};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// The task and mapping model and the unwinder, behind the few calls the
/// recorder makes: the one place that knows `profdev_symbolize::Tasks` and
/// `UserUnwinder`.
struct Model {
    tasks: profdev_symbolize::Tasks,
    unwinder: Option<profdev_symbolize::unwind::UserUnwinder>,
}

/// A mapping as the recorder needs it.
struct Mapped {
    path: String,
    dev: u64,
    inode: u64,
    build_id: Vec<u8>,
    is_file: bool,
    file_offset: u64,
    /// The file that was mapped, opened when its mapping was reported.
    object: Option<Arc<profdev_symbolize::Object>>,
}

impl Model {
    fn new(stacks: bool, objects: Objects) -> Model {
        Model {
            tasks: profdev_symbolize::Tasks::with_objects(objects),
            unwinder: stacks.then(profdev_symbolize::unwind::UserUnwinder::new),
        }
    }
    fn observe(&mut self, r: &Record) {
        self.tasks.observe(r);
    }
    /// The user frames of `s` to symbolize, innermost first (return
    /// addresses less one); with `-g`, why the stack stops short of its
    /// root when the unwinder could not reach it.
    fn user_frames(&mut self, s: &Sample, out: &mut Vec<u64>, stack_bytes: u32) -> Option<String> {
        // A kernel thread or the idle task has no user context: no user
        // frames (not one "[unknown]" frame holding a kernel address).
        let no_user = s.is_idle()
            || (s.mode != CpuMode::User && s.user_regs.is_none() && s.user_chain.is_empty());
        match &mut self.unwinder {
            _ if no_user => None,
            Some(u) => {
                let st = u.unwind(&self.tasks, s);
                out.extend((0..st.frames.len()).map(|i| st.lookup_address(i).0));
                use profdev_symbolize::unwind::UnwindMethod;
                if !matches!(st.method, UnwindMethod::Truncated | UnwindMethod::IpOnly) {
                    return None;
                }
                Some(self.unwind_failure(s, out.last().copied(), stack_bytes))
            }
            None if s.mode == CpuMode::User => {
                out.push(s.ip);
                None
            }
            None => None,
        }
    }
    /// Why a stack that ends at `last` was not unwound further.
    fn unwind_failure(&self, s: &Sample, last: Option<u64>, stack_bytes: u32) -> String {
        if s.user_regs.is_none() || s.user_stack.is_empty() {
            return "no stack copy".into();
        }
        let Some(last) = last else {
            return "no frame".into();
        };
        match self.tasks.lookup(s.pid, ProcessVa(last)) {
            None => "address outside any mapping".into(),
            Some(m) if !m.is_file() => "anonymous memory (JIT?)".into(),
            Some(_) if s.user_stack.len() >= stack_bytes as usize => {
                format!("stack deeper than the {stack_bytes}-byte copy")
            }
            Some(m) => format!(
                "no caller found from {}",
                m.path.rsplit('/').next().unwrap_or(&m.path)
            ),
        }
    }
    fn lookup(&self, pid: u32, va: u64) -> Option<Mapped> {
        let m = self.tasks.lookup(pid, ProcessVa(va))?;
        Some(Mapped {
            path: m.path.clone(),
            dev: m.file.map_or(0, |f| libc::makedev(f.major, f.minor) as u64),
            inode: m.file.map_or(0, |f| f.ino),
            build_id: m.build_id.clone().unwrap_or_default(),
            is_file: m.is_file(),
            file_offset: m.file_offset(ProcessVa(va)),
            object: m.object.clone(),
        })
    }
    fn comm(&self, pid: u32, tid: u32) -> String {
        self.tasks
            .thread_comm(tid)
            .or_else(|| self.tasks.comm(pid))
            .unwrap_or("?")
            .to_string()
    }
    fn unwind_stats(&self) -> Option<String> {
        self.unwinder.as_ref().map(|u| u.stats().to_string())
    }
    fn held(&self) -> crate::intervals::Held {
        let (processes, thread_names) = self.tasks.held();
        let (unwinder_processes, unwinder_missing) =
            self.unwinder.as_ref().map_or((0, 0), |u| u.held());
        crate::intervals::Held {
            processes,
            thread_names,
            unwinder_processes,
            unwinder_missing,
        }
    }
}

/// An object of the recording: its load layout (small, kept while
/// recording) turns file offsets into link-time addresses. Its symbols and
/// DWARF are opened only by the [`SymbolThread`], once per flush for all
/// its new addresses, and closed again: a system-wide recording meets
/// thousands of objects, too many to keep open.
struct Obj {
    id: u32,
    path: String,
    layout: Option<ElfLayout>,
    /// The mapped file (kept open by the objects table), read at each
    /// flush instead of whatever is at `path` by then.
    object: Option<Arc<profdev_symbolize::Object>>,
}

/// The kernel object: its id, and the symbolizer that names its functions
/// (without the kernel's symbols under `--no-symbols`).
struct Kernel {
    id: u32,
    names: Symbolizer,
}

/// An object's identity in the recording: path, device, inode, build id.
type ObjKey = (String, u64, u64, Vec<u8>);

/// What a recorder is asked to do.
#[derive(Clone, Debug)]
pub(crate) struct Setup {
    /// With -g: the unwinder, and the bytes of user stack each sample copies.
    pub stacks: bool,
    pub stack_bytes: u32,
    /// Write the symbol and line tables.
    pub symbols: bool,
    /// With -t: the one thread whose samples are kept.
    pub only_tid: Option<u32>,
}

/// Records in, entries of the recording out (see the module doc).
pub(crate) struct Recorder {
    pub(crate) enc: Encoder,
    model: Model,
    symbols: bool,
    /// tid -> (pid, generation, comm) as last written.
    tasks: HashMap<u32, (u32, u32, String)>,
    objects: HashMap<ObjKey, Obj>,
    /// New addresses to symbolize, by object.
    pending: HashMap<ObjKey, Vec<u64>>,
    kernel: Option<Kernel>,
    /// (object, offset) already symbolized; kernel function starts written.
    seen: HashSet<(u32, u64)>,
    frames: Vec<Frame>,
    addrs: Vec<u64>,
    only_tid: Option<u32>,
    /// Names addresses off the reader's path; gone after
    /// `finish_symbols`.
    symbolizer: Option<SymbolThread>,
    /// Unwind failures by reason: the label object's id and the count.
    failures: HashMap<String, (u32, u64)>,
    /// With -g, the bytes of user stack each sample copies.
    stack_bytes: u32,
    /// The kernel's symbolizer of a recording already cut, for the next.
    spare_kernel_names: Option<Symbolizer>,
    /// Recordings cut, oldest first, each with the symbol answers still
    /// due to it.
    waiting: std::collections::VecDeque<(Encoder, usize)>,
    /// The names of JIT code, by process.
    jit: crate::jit::Jit,
    /// Threads off the CPU now (`--off-cpu`), each with its sample as
    /// it left.
    off_cpu: Waits<Away>,
    /// The frame of each file-backed user address met, by (pid,
    /// address): forgotten at every change of any mapping (a new
    /// mapping, an exec, a process's exit), bounded.
    frame_cache: rustc_hash::FxHashMap<(u32, u64), Frame>,
}

/// The most frames [`Recorder`]'s cache holds before it starts again.
const FRAME_CACHE_MAX: usize = 1 << 20;

/// A thread off the CPU as it left: its sample, why it waits, and where
/// it blocked.
struct Away {
    info: SampleInfo,
    state: OffCpu,
    frames: Vec<Frame>,
}

impl Recorder {
    /// A recorder writing through `enc`, its tasks' objects kept in
    /// `objects`; `thread` names user functions (none: not named).
    pub(crate) fn new(
        enc: Encoder,
        setup: &Setup,
        objects: Objects,
        thread: Option<SymbolThread>,
    ) -> Recorder {
        Recorder {
            enc,
            model: Model::new(setup.stacks, objects),
            symbols: setup.symbols,
            tasks: HashMap::new(),
            objects: HashMap::new(),
            pending: HashMap::new(),
            kernel: None,
            seen: HashSet::new(),
            frames: Vec::new(),
            addrs: Vec::new(),
            only_tid: setup.only_tid,
            symbolizer: thread,
            failures: HashMap::new(),
            stack_bytes: setup.stack_bytes,
            spare_kernel_names: None,
            waiting: std::collections::VecDeque::new(),
            jit: crate::jit::Jit::default(),
            off_cpu: Waits::new(),
            frame_cache: Default::default(),
        }
    }

    /// End the recording made so far and begin the next with `enc`. The
    /// ended one waits (in [`Recorder::ready`]) for the symbol tables of
    /// the addresses it sampled; the reader of the rings does not. The
    /// task model, the unwinder and the objects table go on; the next
    /// recording writes its own task, object and symbol entries.
    pub(crate) fn cut(&mut self, enc: Encoder) {
        self.flush_symbols();
        let due = self
            .symbolizer
            .as_ref()
            .map_or(0, SymbolThread::outstanding);
        let earlier: usize = self.waiting.iter().map(|w| w.1).sum();
        let old = std::mem::replace(&mut self.enc, enc);
        self.waiting.push_back((old, due - earlier));
        self.tasks.clear();
        self.objects.clear();
        self.pending.clear();
        self.seen.clear();
        self.failures.clear();
        self.jit.cut();
        // Their stacks name the ended recording's objects.
        self.off_cpu.clear();
        self.frame_cache.clear();
        self.spare_kernel_names = self.kernel.take().map(|k| k.names);
    }

    /// The recordings cut whose symbol tables have all come, oldest
    /// first, each ended and as bytes.
    pub(crate) fn ready(&mut self) -> Vec<Vec<u8>> {
        self.drain_symbols();
        let mut out = Vec::new();
        while self.waiting.front().is_some_and(|w| w.1 == 0) {
            let (mut enc, _) = self.waiting.pop_front().expect("checked");
            enc.end();
            out.push(enc.take());
        }
        out
    }

    /// Every recording cut, its symbol tables waited for.
    pub(crate) fn wait_cuts(&mut self) -> Vec<Vec<u8>> {
        while self.waiting.iter().any(|w| w.1 > 0) {
            let Some(answer) = self.symbolizer.as_mut().and_then(SymbolThread::answer) else {
                break;
            };
            self.route(answer);
        }
        for w in &mut self.waiting {
            w.1 = 0;
        }
        self.ready()
    }

    /// Write an answer of the symbol thread into the recording whose job
    /// it was: the oldest cut still waiting for one, else the current.
    fn route(&mut self, answer: Option<crate::symbols::SymbolTable>) {
        let enc = match self.waiting.iter_mut().find(|w| w.1 > 0) {
            Some(w) => {
                w.1 -= 1;
                &mut w.0
            }
            None => &mut self.enc,
        };
        if let Some((id, files, funcs)) = answer {
            let _ = enc.symbols(id, &files, &funcs);
        }
    }

    /// Take in one record.
    pub(crate) fn record(&mut self, r: &Record) -> Result<(), Error> {
        self.model.observe(r);
        let remapped = match r {
            Record::Mmap { .. } | Record::Comm { exec: true, .. } => true,
            Record::Exit { pid, tid, .. } => pid == tid,
            _ => false,
        };
        if remapped || self.frame_cache.len() >= FRAME_CACHE_MAX {
            self.frame_cache.clear();
        }
        match r {
            Record::Comm {
                pid,
                tid,
                comm,
                exec,
                time,
            } => {
                // A thread already written gets a new entry at an exec (the
                // next generation) or a rename; others get theirs at
                // their first sample.
                if let Some((_, generation, old)) = self.tasks.get(tid).cloned() {
                    if *exec || old != *comm {
                        self.task(*pid, *tid, generation + u32::from(*exec), comm, *time);
                    }
                }
            }
            Record::Lost { cpu, count, time } => self.enc.loss(&Loss {
                time: *time,
                cpu: *cpu,
                lost: *count,
            }),
            Record::Sample(s) => self.sample(s)?,
            Record::Exit { pid, tid, time, .. } if pid == tid => self.jit.exited(*pid, *time),
            _ => {}
        }
        if let Some(w) = self.off_cpu.observe(r) {
            self.back(w)?;
        }
        Ok(())
    }

    /// A thread back on the CPU: its off-CPU sample, at the time it came
    /// back, weighing the interval.
    fn back(&mut self, w: Wait<Away>) -> Result<(), Error> {
        let info = SampleInfo {
            time: w.until,
            weight: w.until - w.since,
            off_cpu: Some(if w.preempted {
                OffCpu::Other
            } else {
                w.what.state
            }),
            ..w.what.info
        };
        self.enc
            .sample(&info, &w.what.frames)
            .map_err(|e| Error(format!("internal error: {e}")))
    }

    /// The end of the recording at `time`: threads still off the CPU are
    /// written with their time so far (a thread that waited through the
    /// whole recording shows it), in the order of their tids.
    pub(crate) fn close_off_cpu(&mut self, time: u64) -> Result<(), Error> {
        for w in self.off_cpu.close(time) {
            self.back(w)?;
        }
        Ok(())
    }

    /// The unwinder's counts, with -g.
    pub(crate) fn unwind_stats(&self) -> Option<String> {
        self.model.unwind_stats()
    }

    /// What the model and the unwinder hold across cuts.
    pub(crate) fn held(&self) -> crate::intervals::Held {
        self.model.held()
    }

    /// The unwind failures by reason, most frequent first.
    pub(crate) fn failures(&self) -> Vec<(String, u64)> {
        let mut f: Vec<(String, u64)> = self
            .failures
            .iter()
            .map(|(r, &(_, n))| (r.clone(), n))
            .collect();
        f.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        f
    }

    fn task(&mut self, pid: u32, tid: u32, generation: u32, comm: &str, time: u64) {
        self.enc.task(&Task {
            pid,
            tid,
            generation,
            time,
            comm: comm.to_string(),
        });
        self.tasks.insert(tid, (pid, generation, comm.to_string()));
    }

    fn sample(&mut self, s: &Sample) -> Result<(), Error> {
        if self.only_tid.is_some_and(|t| t != s.tid) {
            return Ok(());
        }
        if self.tasks.get(&s.tid).is_none_or(|t| t.0 != s.pid) {
            let comm = self.model.comm(s.pid, s.tid);
            self.task(s.pid, s.tid, 0, &comm, s.time);
        }
        self.frames.clear();
        if s.mode == CpuMode::Kernel {
            let chain: Vec<u64> = if s.kernel_chain.is_empty() {
                vec![s.ip]
            } else {
                s.kernel_chain.clone()
            };
            for (i, &a) in chain.iter().enumerate() {
                let f = self.kernel_frame(if i == 0 { a } else { a.wrapping_sub(1) });
                self.frames.push(f);
            }
        }
        let mut addrs = std::mem::take(&mut self.addrs);
        addrs.clear();
        let failed = self.model.user_frames(s, &mut addrs, self.stack_bytes);
        for &va in &addrs {
            let f = self.user_frame(s.pid, va, s.time);
            self.frames.push(f);
        }
        self.addrs = addrs;
        if let Some(reason) = failed {
            let f = self.label_frame(reason);
            self.frames.push(f);
        }
        let info = SampleInfo {
            time: s.time,
            cpu: s.cpu,
            pid: s.pid,
            tid: s.tid,
            weight: s.period,
            kernel: s.mode == CpuMode::Kernel,
            off_cpu: None,
        };
        if s.switch_out {
            // Held until the thread comes back.
            let state = self.waiting_state();
            let frames = &self.frames;
            self.off_cpu.left(s, || Away {
                info,
                state,
                frames: frames.clone(),
            });
            return Ok(());
        }
        let frames = std::mem::take(&mut self.frames);
        let r = self.enc.sample(&info, &frames);
        self.frames = frames;
        r.map_err(|e| Error(format!("internal error: {e}")))
    }

    /// Why the thread whose kernel frames are `self.frames` left the CPU
    /// to wait: I/O where the scheduler was entered through
    /// `io_schedule` (what the kernel counts as iowait), else a sleep
    /// (a preemption, told by its Switch record, makes it `Other`).
    fn waiting_state(&self) -> OffCpu {
        let Some(k) = &self.kernel else {
            return OffCpu::Sleep;
        };
        let io = self
            .frames
            .iter()
            .take_while(|f| f.object == k.id)
            .filter_map(|f| k.names.kernel_function(f.offset))
            .any(|f| f.name.starts_with("io_schedule"));
        if io {
            OffCpu::Io
        } else {
            OffCpu::Sleep
        }
    }

    /// The frame `[unwind failed: REASON]`, the outermost of a stack the
    /// unwinder could not take to its root (its label object written once).
    fn label_frame(&mut self, reason: String) -> Frame {
        let enc = &mut self.enc;
        let (id, n) = self.failures.entry(reason).or_insert_with_key(|reason| {
            let id = enc.object(&ObjectInfo {
                kind: ObjectKind::Label,
                path: unwind_failed_label(reason),
                ..ObjectInfo::default()
            });
            (id, 0)
        });
        *n += 1;
        Frame {
            object: *id,
            offset: 0,
        }
    }

    /// The kernel object, written (with the text range) at its first use.
    fn kernel(&mut self) -> &Kernel {
        if self.kernel.is_none() {
            let id = self.enc.object(&ObjectInfo {
                kind: ObjectKind::Kernel,
                path: "[kernel.kallsyms]".into(),
                ..ObjectInfo::default()
            });
            let symbols = self.symbols;
            let names = self.spare_kernel_names.take().unwrap_or_else(|| {
                Symbolizer::new(if symbols {
                    KernelSymbols::running().ok()
                } else {
                    None
                })
            });
            // The text range, for the proc-profile and kpdata exports.
            let edges: Vec<Function> = names
                .kernel_text_edges()
                .into_iter()
                .map(|(name, start)| Function {
                    start,
                    len: 0,
                    name: name.into(),
                    lines: vec![],
                })
                .collect();
            if !edges.is_empty() {
                let _ = self.enc.symbols(id, &[], &edges);
            }
            self.kernel = Some(Kernel { id, names });
        }
        self.kernel.as_ref().expect("made above")
    }

    fn kernel_frame(&mut self, addr: u64) -> Frame {
        self.kernel();
        let k = self.kernel.as_ref().expect("made by kernel()");
        let id = k.id;
        if let Some(f) = k.names.kernel_function(addr) {
            if self.seen.insert((id, f.start)) {
                let f = Function {
                    start: f.start,
                    len: f.len,
                    name: f.name.to_string(),
                    lines: vec![],
                };
                let _ = self.enc.symbols(id, &[], &[f]);
            }
        }
        Frame {
            object: id,
            offset: addr,
        }
    }

    /// The object entry of mapping `m`, written at its first use.
    fn object(&mut self, m: &Mapped, key: &ObjKey) -> &Obj {
        if !self.objects.contains_key(key) {
            let kind = if m.is_file {
                ObjectKind::User
            } else {
                ObjectKind::Anon
            };
            let layout = m
                .is_file
                .then(|| match &m.object {
                    Some(o) => o.layout().ok().map(|l| (*l).clone()),
                    None => ElfLayout::open(Path::new(&m.path)).ok(),
                })
                .flatten()
                // A file replaced since it was mapped is not the object.
                .filter(|e| m.build_id.is_empty() || e.build_id() == Some(&m.build_id[..]));
            // The kernel reports a build id or a device and inode, not
            // both: the other from the file.
            let build_id = match (&layout, m.build_id.is_empty()) {
                (Some(e), true) => e.build_id().map(<[u8]>::to_vec).unwrap_or_default(),
                _ => m.build_id.clone(),
            };
            let (dev, inode) = match (m.inode, m.is_file) {
                (0, true) => {
                    use std::os::unix::fs::MetadataExt;
                    std::fs::metadata(&m.path).map_or((0, 0), |md| (md.dev(), md.ino()))
                }
                _ => (m.dev, m.inode),
            };
            let id = self.enc.object(&ObjectInfo {
                kind,
                dev,
                inode,
                build_id,
                path: m.path.clone(),
            });
            self.objects.insert(
                key.clone(),
                Obj {
                    id,
                    path: m.path.clone(),
                    layout,
                    object: m.object.clone(),
                },
            );
        }
        &self.objects[key]
    }

    fn user_frame(&mut self, pid: u32, va: u64, time: u64) -> Frame {
        if let Some(f) = self.frame_cache.get(&(pid, va)) {
            return *f;
        }
        let Some(m) = self.model.lookup(pid, va) else {
            return Frame {
                object: 0,
                offset: va,
            };
        };
        if !m.is_file && self.symbols {
            let maps = self.model.tasks.mappings(pid);
            if let Some(f) = self.jit.frame(&mut self.enc, pid, va, time, maps) {
                return f;
            }
        }
        let key = (m.path.clone(), m.dev, m.inode, m.build_id.clone());
        let obj = self.object(&m, &key);
        let id = obj.id;
        let offset = match &obj.layout {
            Some(l) => l
                .file_addr_of_offset(m.file_offset)
                .map_or(m.file_offset, |a| a.0),
            None if m.is_file => m.file_offset,
            None => va,
        };
        let named = obj.layout.is_some();
        if self.symbols && named && self.seen.insert((id, offset)) {
            self.pending.entry(key).or_default().push(offset);
        }
        let f = Frame { object: id, offset };
        if m.is_file {
            self.frame_cache.insert((pid, va), f);
        }
        f
    }

    /// Hand the new addresses of each object to the symbolizer thread:
    /// reading ELF and DWARF files can take seconds, and the reader of the
    /// rings must not wait for it (the kernel drops what a full ring
    /// cannot take).
    pub(crate) fn flush_symbols(&mut self) {
        for (key, offsets) in std::mem::take(&mut self.pending) {
            let obj = &self.objects[&key];
            let Some(symbolizer) = &mut self.symbolizer else {
                return;
            };
            symbolizer.send(SymbolJob {
                id: obj.id,
                path: obj.path.clone(),
                object: obj.object.clone(),
                want: obj
                    .layout
                    .as_ref()
                    .and_then(|l| l.build_id().map(<[u8]>::to_vec)),
                offsets,
            });
        }
    }

    /// Write the symbol tables the symbolizer has finished, each into
    /// its recording.
    pub(crate) fn drain_symbols(&mut self) {
        while let Some(answer) = self.symbolizer.as_mut().and_then(SymbolThread::try_answer) {
            self.route(answer);
        }
    }

    /// Wait for every table still being made and write it.
    pub(crate) fn finish_symbols(&mut self) {
        self.flush_symbols();
        let Some(symbolizer) = self.symbolizer.take() else {
            return;
        };
        for (id, files, funcs) in symbolizer.finish() {
            let _ = self.enc.symbols(id, &files, &funcs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_formats::export::folded;
    use profdev_formats::recording::{read, Header};

    fn recorder(setup: Setup) -> Recorder {
        Recorder::new(
            Encoder::new(&Header::default()),
            &setup,
            Objects::new(),
            None,
        )
    }

    fn stacks() -> Setup {
        Setup {
            stacks: true,
            stack_bytes: 16384,
            symbols: false,
            only_tid: None,
        }
    }

    fn user(pid: u32, tid: u32, time: u64) -> Sample {
        Sample {
            ip: 0x40_1000,
            pid,
            tid,
            time,
            period: 1_000_000,
            mode: CpuMode::User,
            user_chain: vec![0x40_1000],
            ..Sample::default()
        }
    }

    /// A user sample with -g whose stack copy is missing cannot be unwound
    /// past its instruction: its stack ends in one label frame naming why,
    /// the label written once for every such stack; the idle task's
    /// kernel-only sample gets none.
    #[test]
    fn a_stack_the_unwinder_cannot_walk_ends_in_unwind_failed() {
        let mut r = recorder(stacks());
        let user = user(7, 7, 10);
        let idle = Sample {
            ip: 0xffff_ffff_8100_0010,
            time: 20,
            period: 1_000_000,
            mode: CpuMode::Kernel,
            kernel_chain: vec![0xffff_ffff_8100_0010],
            ..Sample::default()
        };
        for s in [&user, &idle, &user] {
            r.record(&Record::Sample(s.clone())).unwrap();
        }
        r.enc.end();
        let rec = read(&r.enc.take()).unwrap();
        assert_eq!(rec.samples.len(), 3);
        let labels: Vec<_> = rec
            .objects
            .iter()
            .filter(|o| o.info.kind == ObjectKind::Label)
            .collect();
        assert_eq!(labels.len(), 1, "{:?}", rec.objects);
        assert_eq!(labels[0].info.path, "[unwind failed: no stack copy]");
        let last = |i: usize| rec.stack(&rec.samples[i]).last().copied().unwrap();
        assert_eq!(last(0).object, labels[0].id);
        assert_eq!(last(2).object, labels[0].id);
        assert_ne!(last(1).object, labels[0].id);
        assert_eq!(r.failures(), vec![("no stack copy".to_string(), 2)]);
        let text = folded::write(&rec);
        assert!(
            text.contains("[unwind failed: no stack copy];[unknown] 2\n"),
            "{text}"
        );
        assert!(text.contains("[idle];"), "{text}");
    }

    /// A thread's Task entry comes with its first sample; an exec writes
    /// the next generation, a rename a new entry of the same one, and a
    /// thread never sampled gets none. Losses are written as they come.
    #[test]
    fn tasks_are_written_at_first_sample_and_again_at_exec() {
        let mut r = recorder(Setup {
            stacks: false,
            ..stacks()
        });
        let comm = |tid: u32, name: &str, exec: bool, time: u64| Record::Comm {
            pid: 7,
            tid,
            comm: name.into(),
            exec,
            time,
        };
        r.record(&comm(7, "sh", false, 1)).unwrap();
        r.record(&comm(8, "never", false, 2)).unwrap();
        r.record(&Record::Sample(user(7, 7, 3))).unwrap();
        r.record(&comm(7, "prog", true, 4)).unwrap();
        r.record(&comm(7, "worker", false, 5)).unwrap();
        r.record(&comm(7, "worker", false, 6)).unwrap();
        r.record(&Record::Lost {
            cpu: 1,
            count: 5,
            time: 7,
        })
        .unwrap();
        r.enc.end();
        let rec = read(&r.enc.take()).unwrap();
        let tasks: Vec<(u32, u32, &str, u64)> = rec
            .tasks
            .iter()
            .map(|t| (t.tid, t.generation, t.comm.as_str(), t.time))
            .collect();
        assert_eq!(
            tasks,
            vec![(7, 0, "sh", 3), (7, 1, "prog", 4), (7, 1, "worker", 5)]
        );
        assert_eq!(
            rec.losses,
            vec![Loss {
                time: 7,
                cpu: 1,
                lost: 5
            }]
        );
        // Without -g a user sample is its pc alone, in no known mapping:
        // object 0, the address itself.
        let f = rec.stack(&rec.samples[0]);
        assert_eq!((f.len(), f[0].object, f[0].offset), (1, 0, 0x40_1000));
    }

    /// With -t only that thread's samples are written; a kernel sample's
    /// callchain is looked up one byte back in its callers, in one kernel
    /// object written once (no symbols under --no-symbols).
    #[test]
    fn only_the_thread_asked_and_kernel_chains() {
        let mut r = recorder(Setup {
            stacks: false,
            only_tid: Some(8),
            ..stacks()
        });
        r.record(&Record::Sample(user(7, 7, 1))).unwrap();
        let k = Sample {
            ip: 0xffff_ffff_8100_0010,
            pid: 7,
            tid: 8,
            time: 2,
            period: 1,
            mode: CpuMode::Kernel,
            kernel_chain: vec![0xffff_ffff_8100_0010, 0xffff_ffff_8100_0100],
            ..Sample::default()
        };
        r.record(&Record::Sample(k.clone())).unwrap();
        r.record(&Record::Sample(k)).unwrap();
        r.enc.end();
        let rec = read(&r.enc.take()).unwrap();
        assert_eq!(rec.samples.len(), 2);
        assert!(rec.samples.iter().all(|s| s.tid == 8));
        let kernels: Vec<_> = rec
            .objects
            .iter()
            .filter(|o| o.info.kind == ObjectKind::Kernel)
            .collect();
        assert_eq!(kernels.len(), 1);
        assert_eq!(kernels[0].info.path, "[kernel.kallsyms]");
        assert!(kernels[0].functions.is_empty());
        let offsets: Vec<u64> = rec
            .stack(&rec.samples[0])
            .iter()
            .map(|f| f.offset)
            .collect();
        assert_eq!(offsets, vec![0xffff_ffff_8100_0010, 0xffff_ffff_8100_00ff]);
    }

    /// A switch-out sample is held until its thread comes back, then
    /// written at that time weighing the interval; a preemption makes it
    /// `other`; a thread that exited is not waiting; one still away at the
    /// end counts until the end; the idle task never waits.
    #[test]
    fn off_cpu_intervals_pair_a_switch_out_with_the_switch_back() {
        let mut r = recorder(Setup {
            stacks: false,
            ..stacks()
        });
        let out = |tid: u32, time: u64| {
            Record::Sample(Sample {
                switch_out: true,
                period: 1,
                ..user(7, tid, time)
            })
        };
        let switch = |tid: u32, out: bool, preempt: bool, time: u64| Record::Switch {
            pid: 7,
            tid,
            cpu: 0,
            out,
            preempt,
            time,
        };
        let exit = |tid: u32, time: u64| Record::Exit {
            pid: 7,
            ppid: 1,
            tid,
            ptid: 7,
            time,
        };
        let idle = Record::Sample(Sample {
            switch_out: true,
            ..Sample::default()
        });
        for rec in [
            out(7, 100),
            switch(7, true, false, 101),
            Record::Sample(user(8, 8, 150)),
            switch(7, false, false, 1_000),
            out(8, 2_000),
            switch(8, true, true, 2_001),
            switch(8, false, false, 2_500),
            // Thread 9 leaves for good: its exit comes first.
            exit(9, 3_000),
            out(9, 3_001),
            idle,
            // A switch back with no switch out seen: nothing.
            switch(10, false, false, 3_500),
            out(7, 4_000),
        ] {
            r.record(&rec).unwrap();
        }
        r.close_off_cpu(5_000).unwrap();
        let rec = read(&r.enc.take()).unwrap();
        let got: Vec<_> = rec
            .samples
            .iter()
            .map(|s| (s.tid, s.time, s.weight, s.off_cpu))
            .collect();
        assert_eq!(
            got,
            [
                (8, 150, 1_000_000, None),
                (7, 1_000, 900, Some(OffCpu::Sleep)),
                (8, 2_500, 500, Some(OffCpu::Other)),
                (7, 5_000, 1_000, Some(OffCpu::Sleep)),
            ]
        );
        // Every off-CPU sample has the stack it left with.
        assert!(rec.samples.iter().all(|s| s.depth == 1));
    }
}
