//! Exports of a [`Recording`](crate::recording::Recording) to the formats
//! other tools open (`profdev export`).
//!
//! # Synopsis
//!
//! ```text
//! folded::write(&Recording)                  -> "a;b;c count" lines, root first
//! otlp::write(&Recording)                    -> OpenTelemetry profiles (ProfilesData, proto v1.10.0)
//! otlp::write_with(&Recording, &Resource)    -> the same with resource attributes and a Unix time span (profdev agent)
//! svg::write(&Recording, &svg::Options)      -> a flame graph (icicle with inverted), explorable in a browser
//! svg::render(&Recording, &svg::Options)     -> the same, with its count of frames and samples
//! pprof::write(&Recording)                   -> gzipped profile.proto (go tool pprof)
//! pprof::encode_with(&Recording, &Resource)  -> profile.proto, samples labelled by process, a Unix time span (profdev agent)
//! firefox::write(&Recording)                 -> Firefox Profiler processed JSON
//! perf_script::write(&Recording)             -> `perf script` text (stackcollapse-perf, Firefox Profiler)
//! proc_profile::write(&Recording, shift)     -> Linux /proc/profile words (readprofile)
//! kpdata::write(&Recording, log2)            -> Inferno kpdata (profdev kprof)
//! gmon::write(&Recording, &gmon::Select)     -> GNU gmon.out of one executable (gprof)
//! ```
//!
//! # Description
//!
//! Every writer works from what the recording holds: its samples, their
//! stacks as (object, offset) frames and the objects' own symbol and line
//! tables, so an export made after the binaries changed names what ran.
//! [`Names`] resolves every frame once, and every export shows the same
//! names:
//!
//! * a frame in a function is that function (a stripped object's functions
//!   found from its `.eh_frame` are `sub_ADDR`, as the recording's symbol
//!   table names them);
//! * a frame in an object without a covering symbol is `[unknown] in
//!   OBJECT`, in anonymous or JIT memory `[anon]`, outside any object
//!   `[unknown]`;
//! * a stack whose user part could not be unwound to its root ends (as its
//!   outermost frame) in `[unwind failed: REASON]`, the recording's label;
//! * a sample of the idle task (pid 0, tid 0) has `[idle]` as its outermost
//!   frame, and `[idle]` as its command where the format shows one.
//!
//! [`Names::label_counts`] counts the samples of each such label.
//! Counts are samples; weights (ns) where the format has a unit for them
//! (pprof's `cpu/nanoseconds`, Firefox's CPU delta).
//!
//! A recording's view ([`Recording::view`], `profdev export --type`)
//! says what they count: a `cpu` view (the default) the sampling clock's
//! samples, exactly as before off-CPU recording existed; an `off-cpu` view
//! the intervals threads spent off the CPU, a `wall` view both, and these
//! two weigh time, not samples ([`Names::units`]): folded weights are µs,
//! flame graph widths time, pprof, Firefox and OTLP values nanoseconds of
//! their own sample types (see each writer).
//!
//! The SVG is profdev's own (no `inferno`: that crate is CDDL-1.0, a
//! file-level copyleft licence that profdev's MIT OR Apache-2.0 terms do
//! not carry, so it would impose its terms on every binary distribution).

use crate::recording::{Frame, ObjectKind, Recording, SampleType};
use rustc_hash::FxHashMap as FastMap;

pub mod firefox;
pub mod folded;
pub mod gmon;
pub mod heap;
pub mod kpdata;
pub mod otlp;
pub mod perf_script;
pub mod pprof;
pub mod proc_profile;
pub mod request;
pub mod svg;

/// What a sender adds to the profiles of a recording (`profdev agent`):
/// attributes of every resource or profile (the host, static labels), of
/// each process's, and the profile's time span on the Unix clock. The
/// OTLP writer makes them resource attributes ([`otlp::write_with`]), the
/// pprof writer sample labels ([`pprof::encode_with`]).
#[derive(Clone, Debug, Default)]
pub struct Resource {
    /// Attributes of every resource: key, value.
    pub common: Vec<(String, String)>,
    /// Attributes of each process's resource, by pid.
    pub processes: std::collections::BTreeMap<u32, Vec<(String, String)>>,
    /// The time the profiles cover, on the Unix clock.
    pub span: Option<Span>,
}

/// A profile's time span: `[start_ns, end_ns)` in Unix nanoseconds, and
/// what to add to a sample's time (the recording's clock) to put it on the
/// Unix clock (modulo 2^64).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub start_ns: u64,
    pub end_ns: u64,
    pub to_unix: u64,
}

/// Why a recording cannot be exported in a format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    /// The recording has no kernel object with `_stext` and `_etext`, which the format needs.
    #[error("the recording holds no kernel symbol table with _stext and _etext, which {format} needs (record without --no-symbols, as root so that /proc/kallsyms shows addresses)")]
    NoKernelSymbols { format: &'static str },
    /// No executable matches the selection.
    #[error("{0}")]
    NoExecutable(String),
    /// An off-CPU or wall view was asked of a recording without off-CPU samples.
    #[error("{0} holds no off-CPU samples: record them with 'profdev record -g --off-cpu'")]
    NoOffCpu(String),
    /// A CPU-only format was asked for another view.
    #[error("{format} holds CPU samples only and takes no --type {ty}: --type off-cpu and wall are for {TIMED_FORMATS}")]
    CpuOnly { format: String, ty: &'static str },
    /// The underlying writer refused.
    #[error("{0}")]
    Write(String),
    /// A heap profile was asked for in a format that holds CPU samples.
    #[error("an allocation profile exports as svg (an allocation flame graph) or folded, not {0}; 'go tool pprof' reads the file itself")]
    HeapFormat(String),
    /// A view of a recording was asked of a heap profile.
    #[error("an allocation profile has the types alloc (bytes allocated, the default) and inuse (bytes live at the end), not --type {0}")]
    HeapType(String),
    /// A table the format needs would be larger than [`MAX_TABLE_WORDS`].
    #[error("{format}: {what} would need {words} counters, more than the {MAX_TABLE_WORDS} an export makes (a larger bucket size, --shift or --log-bucket, needs fewer)")]
    TooLarge {
        format: &'static str,
        what: &'static str,
        words: u64,
    },
}

/// Kish's effective sample size of samples with weights `w`,
/// `(Σw)² / Σw²` (0 for none): as many equally weighted independent
/// draws as would give a weighted share the same variance. An
/// approximation: it treats the weights as fixed, not drawn.
pub fn kish(w: impl Iterator<Item = u64>) -> f64 {
    let (sum, sq) = w.fold((0.0, 0.0), |(s, q), w| {
        let w = w as f64;
        (s + w, q + w * w)
    });
    if sq == 0.0 {
        0.0
    } else {
        sum * sum / sq
    }
}

/// The view of type `ty` of `rec`, read from `file` (`--type`): an
/// `off-cpu` or `wall` view of a recording without off-CPU samples is
/// refused with the sentence that says how to record them.
pub fn view(rec: Recording, ty: SampleType, file: &str) -> Result<Recording, ExportError> {
    if ty != SampleType::Cpu && !rec.has_off_cpu() {
        return Err(ExportError::NoOffCpu(file.to_string()));
    }
    Ok(rec.view(ty))
}

/// The formats that take `--type off-cpu|wall`; the others (gmon,
/// kpdata, proc-profile) are histograms of CPU samples by nature.
pub const TIMED_FORMATS: &str = "folded, svg, pprof, firefox, perf-script and otlp";

/// Whether `format` (its `profdev export` name) can show a view of type
/// `ty`: a CPU-only format refuses `off-cpu` and `wall`.
pub fn check_type(format: &str, ty: SampleType) -> Result<(), ExportError> {
    match format {
        "gmon" | "kpdata" | "proc-profile" if ty != SampleType::Cpu => Err(ExportError::CpuOnly {
            format: format.to_string(),
            ty: ty.name(),
        }),
        _ => Ok(()),
    }
}

/// The most counters a histogram export allocates (2^28: 1 GiB of u32
/// words): the text spans come from the recording, which may be hostile.
pub const MAX_TABLE_WORDS: u64 = 1 << 28;

/// One function as exports name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Func {
    /// Its name (`[unknown] in OBJECT`, `[unknown]` when not resolved).
    pub name: String,
    /// The object (0: none).
    pub object: u32,
    /// Its first offset; for an unresolved frame, the frame's offset.
    pub start: u64,
    /// Source file of its first line row, if the table has one.
    pub file: Option<String>,
    /// Whether a symbol named it.
    pub resolved: bool,
    /// Whether it is kernel code.
    pub kernel: bool,
}

/// The label of the idle task's samples (their outermost frame, and their
/// command), as `profdev sample` names it.
pub const IDLE: &str = "[idle]";

/// The frame [`Names`] puts outermost in the stacks of the idle task's
/// samples: no object of a recording has this id.
pub const IDLE_FRAME: Frame = Frame {
    object: u32::MAX,
    offset: 0,
};

/// Whether a sample is the idle task's (pid 0, tid 0).
pub fn is_idle(s: &crate::recording::Sample) -> bool {
    s.pid == 0 && s.tid == 0
}

/// The command of a sample's thread as exports show it: `[idle]` for the
/// idle task.
pub fn comm<'r>(rec: &'r Recording, s: &crate::recording::Sample) -> &'r str {
    if is_idle(s) {
        IDLE
    } else {
        rec.tasks
            .get(s.task as usize)
            .map_or("?", |t| t.comm.as_str())
    }
}

/// The distinct stacks of a recording, each frame resolved to a function
/// once: samples with the same stack share one entry, so the writers'
/// work grows with the distinct stacks, not with the samples.
#[derive(Clone, Debug)]
pub struct Names<'a> {
    /// The recording.
    pub rec: &'a Recording,
    /// The distinct functions.
    pub funcs: Vec<Func>,
    /// For each sample, its stack's index in `stacks`.
    pub sample_stack: Vec<u32>,
    /// The distinct stacks: their frames, innermost first.
    pub stacks: Vec<&'a [Frame]>,
    /// Whether each distinct stack is the idle task's ([`IDLE_FRAME`] follows its frames).
    pub stack_idle: Vec<bool>,
    /// How many samples have each stack, and their summed weight.
    pub stack_counts: Vec<(u64, u64)>,
    /// The functions of each distinct stack's frames, back to back.
    stack_funcs: Vec<u32>,
    /// Where each distinct stack's functions start in `stack_funcs`.
    stack_first: Vec<usize>,
    by_frame: FastMap<Frame, u32>,
}

impl<'a> Names<'a> {
    /// Resolve every distinct frame of `rec`.
    pub fn new(rec: &'a Recording) -> Names<'a> {
        // The reader shares one stack among the samples with the same
        // frames: a distinct stack here is (its stack, idle or not).
        let mut by_stack: Vec<[u32; 2]> = vec![[u32::MAX; 2]; rec.stacks.len()];
        let mut stacks: Vec<&[Frame]> = Vec::new();
        let mut stack_idle: Vec<bool> = Vec::new();
        let mut stack_counts: Vec<(u64, u64)> = Vec::new();
        let mut sample_stack = Vec::with_capacity(rec.samples.len());
        for s in &rec.samples {
            let idle = is_idle(s);
            let slot = &mut by_stack[s.stack as usize][usize::from(idle)];
            if *slot == u32::MAX {
                *slot = stacks.len() as u32;
                stacks.push(rec.stack(s));
                stack_idle.push(idle);
                stack_counts.push((0, 0));
            }
            let id = *slot;
            let c = &mut stack_counts[id as usize];
            c.0 += 1;
            c.1 += s.weight;
            sample_stack.push(id);
        }
        let mut by_frame: FastMap<Frame, u32> = FastMap::default();
        // A function is (object, start, resolved); the idle label is apart
        // from the `[unknown]` frames of object 0.
        let mut by_func: FastMap<(u32, u64, bool, bool), u32> = FastMap::default();
        let mut funcs = Vec::new();
        let mut stack_funcs = Vec::new();
        let mut stack_first = Vec::with_capacity(stacks.len());
        for (st, &idle) in stacks.iter().zip(&stack_idle) {
            stack_first.push(stack_funcs.len());
            for f in st.iter().chain(idle.then_some(&IDLE_FRAME)) {
                let id = *by_frame.entry(*f).or_insert_with(|| {
                    // The function's key first: its name is made once.
                    let key = match rec.object(f.object) {
                        Some(o) if o.info.kind != ObjectKind::Label => {
                            match o.function_at(f.offset) {
                                Some(func) => (f.object, func.start, true, false),
                                None => (f.object, 0, false, false),
                            }
                        }
                        Some(_) => (f.object, 0, false, false),
                        None => (0, 0, false, *f == IDLE_FRAME),
                    };
                    *by_func.entry(key).or_insert_with(|| {
                        funcs.push(resolve(rec, *f));
                        (funcs.len() - 1) as u32
                    })
                });
                stack_funcs.push(id);
            }
        }
        Names {
            rec,
            funcs,
            sample_stack,
            stacks,
            stack_idle,
            stack_counts,
            stack_funcs,
            stack_first,
            by_frame,
        }
    }

    /// The frames of distinct stack `u`, innermost first, with
    /// [`IDLE_FRAME`] last for the idle task's.
    pub fn stack_frames(&self, u: usize) -> impl Iterator<Item = &Frame> + '_ {
        self.stacks[u]
            .iter()
            .chain(self.stack_idle[u].then_some(&IDLE_FRAME))
    }

    /// Function indices of distinct stack `u`, innermost first.
    pub fn stack_funcs(&self, u: usize) -> &[u32] {
        let a = self.stack_first[u];
        let n = self.stacks[u].len() + usize::from(self.stack_idle[u]);
        &self.stack_funcs[a..a + n]
    }

    /// What distinct stack `u` counts for in the call tree, the folded
    /// lines, the flame graph and [`Names::label_counts`]: its samples in
    /// a `cpu` view (as exports always counted), its summed weight in ns
    /// in an `off-cpu` or `wall` view ([`Recording::view`]).
    pub fn units(&self, u: usize) -> u64 {
        match self.rec.view {
            SampleType::Cpu => self.stack_counts[u].0,
            SampleType::OffCpu | SampleType::Wall => self.stack_counts[u].1,
        }
    }

    /// Whether the recording's view weighs time (ns) rather than
    /// counting samples ([`Names::units`]).
    pub fn timed(&self) -> bool {
        self.rec.view != SampleType::Cpu
    }

    /// Function indices of sample `i`'s stack, innermost first.
    pub fn stack(&self, i: usize) -> &[u32] {
        self.stack_funcs(self.sample_stack[i] as usize)
    }

    /// The function of a frame of the recording (or [`IDLE_FRAME`]).
    pub fn func_of(&self, f: &Frame) -> u32 {
        self.by_frame[f]
    }

    /// For each label (`[idle]`, `[unwind failed: REASON]`, `[anon]`,
    /// `[unknown] in OBJECT`, `[unknown]`), the samples with it anywhere in
    /// their stack (of a time view, their ns: [`Names::units`]), largest
    /// first, then by name.
    pub fn label_counts(&self) -> Vec<(&str, u64)> {
        let mut counts: Vec<u64> = vec![0; self.funcs.len()];
        let mut seen: Vec<u32> = Vec::new();
        for u in 0..self.stacks.len() {
            seen.clear();
            for &f in self.stack_funcs(u) {
                if !self.funcs[f as usize].resolved && !seen.contains(&f) {
                    seen.push(f);
                    counts[f as usize] += self.units(u);
                }
            }
        }
        let mut by_name: Vec<(&str, u64)> = Vec::new();
        for (f, &n) in self.funcs.iter().zip(&counts) {
            if n == 0 {
                continue;
            }
            match by_name.iter_mut().find(|(name, _)| *name == f.name) {
                Some(e) => e.1 += n,
                None => by_name.push((&f.name, n)),
            }
        }
        by_name.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        by_name
    }

    /// The mapping an export names for frame `f`'s object: its id, or 0 for
    /// none (outside any object, a label, [`IDLE_FRAME`]).
    pub fn mapping_of(&self, f: &Frame) -> u32 {
        match self.rec.object(f.object) {
            Some(o) if o.info.kind != ObjectKind::Label => f.object,
            _ => 0,
        }
    }
}

fn resolve(rec: &Recording, f: Frame) -> Func {
    let unresolved = |name: String, object: u32, kernel: bool| Func {
        name,
        object,
        start: 0,
        file: None,
        resolved: false,
        kernel,
    };
    if f == IDLE_FRAME {
        return unresolved(IDLE.into(), 0, true);
    }
    let Some(o) = rec.object(f.object) else {
        return unresolved("[unknown]".into(), 0, false);
    };
    let kernel = o.info.kind == ObjectKind::Kernel;
    if o.info.kind == ObjectKind::Label {
        return unresolved(o.info.path.clone(), f.object, false);
    }
    match o.function_at(f.offset) {
        Some(func) => Func {
            name: func.name.clone(),
            object: f.object,
            start: func.start,
            file: func
                .lines
                .first()
                .and_then(|l| o.files.get(l.file as usize).cloned()),
            resolved: true,
            kernel,
        },
        None if o.info.kind == ObjectKind::Anon => unresolved("[anon]".into(), f.object, kernel),
        None => unresolved(format!("[unknown] in {}", o.short_name()), f.object, kernel),
    }
}

/// The call tree of a recording: node 0 is the root, each other node a
/// function called from its parent's.
#[derive(Clone, Debug, Default)]
pub struct Tree {
    /// The nodes; `nodes[0]` is the root. A parent comes before its children.
    pub nodes: Vec<Node>,
    /// For each sample, the node of its innermost frame (0: no frames).
    pub leaf: Vec<u32>,
}

/// One node of a [`Tree`].
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// Function index ([`Names::funcs`]); `u32::MAX` at the root.
    pub func: u32,
    /// Parent node (0 for the root's children and the root).
    pub parent: u32,
    /// Samples in this node and below ([`Names::units`]: of a time view, ns).
    pub total: u64,
    /// Samples whose innermost frame is this node (of a time view, ns).
    pub self_count: u64,
    /// Children, sorted by function name.
    pub children: Vec<u32>,
}

impl Tree {
    /// The tree of every sample's stack, root first.
    pub fn new(names: &Names) -> Tree {
        let mut nodes = vec![Node {
            func: u32::MAX,
            ..Node::default()
        }];
        let mut index: FastMap<(u32, u32), u32> = FastMap::default();
        let mut stack_leaf = Vec::with_capacity(names.stacks.len());
        for u in 0..names.stacks.len() {
            let mut at = 0u32;
            for &func in names.stack_funcs(u).iter().rev() {
                let next = nodes.len() as u32;
                at = *index.entry((at, func)).or_insert_with(|| {
                    nodes.push(Node {
                        func,
                        parent: at,
                        ..Node::default()
                    });
                    next
                });
            }
            nodes[at as usize].self_count += names.units(u);
            stack_leaf.push(at);
        }
        let leaf = names
            .sample_stack
            .iter()
            .map(|&u| stack_leaf[u as usize])
            .collect();
        // Totals: children come after their parents.
        for i in (0..nodes.len()).rev() {
            nodes[i].total += nodes[i].self_count;
            if i > 0 {
                let (p, t) = (nodes[i].parent as usize, nodes[i].total);
                nodes[p].total += t;
            }
        }
        for i in 1..nodes.len() {
            let p = nodes[i].parent as usize;
            nodes[p].children.push(i as u32);
        }
        for i in 0..nodes.len() {
            let mut children = std::mem::take(&mut nodes[i].children);
            let name = |n: u32| names.funcs[nodes[n as usize].func as usize].name.as_str();
            children.sort_by(|&a, &b| name(a).cmp(name(b)));
            nodes[i].children = children;
        }
        Tree { nodes, leaf }
    }

    /// The names from the root's child down to `node`.
    pub fn path<'n>(&self, names: &'n Names, mut node: u32) -> Vec<&'n str> {
        let mut out = Vec::new();
        while node != 0 {
            let n = &self.nodes[node as usize];
            out.push(names.funcs[n.func as usize].name.as_str());
            node = n.parent;
        }
        out.reverse();
        out
    }
}

/// What an export holds, for the line that names the file written.
pub enum Written {
    /// A flame graph of so many frames and samples.
    Svg { frames: usize, samples: u64 },
    /// The gmon.out of this executable.
    Gmon { exe: String },
    /// An allocation flame graph of so many frames, stacks and bytes.
    Alloc {
        frames: usize,
        stacks: usize,
        bytes: u64,
    },
    /// Any other format.
    Other,
}

/// The line (after `profdev export: `) that says what was written to
/// `out` (`-`: standard output) in `format`, `len` bytes; None for an
/// export to standard output that needs no word.
pub fn wrote(format: &str, out: &std::path::Path, len: usize, what: &Written) -> Option<String> {
    let file = out.display();
    if out == std::path::Path::new("-") {
        return match what {
            Written::Gmon { exe } => Some(format!(
                "gmon.out of {exe} on standard output: read it with 'gprof {exe} FILE', FILE where it was saved"
            )),
            _ => None,
        };
    }
    Some(match what {
        Written::Svg { frames, samples } => format!(
            "wrote {file} (flame graph: {frames} frames, {samples} samples; in a web browser, click to zoom, Ctrl-F to search)"
        ),
        Written::Gmon { exe } => {
            format!("wrote {file} (gmon.out of {exe}): read it with 'gprof {exe} {file}'")
        }
        Written::Alloc {
            frames,
            stacks,
            bytes,
        } => format!(
            "wrote {file} (allocation flame graph: {frames} frames, {stacks} stacks, {bytes} bytes; in a web browser, click to zoom, Ctrl-F to search)"
        ),
        Written::Other => format!("wrote {file} ({format}, {len} bytes)"),
    })
}
