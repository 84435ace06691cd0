//! The recording: what `profdev record` writes and `profdev export` reads
//! (`profdev.data`).
//!
//! # Synopsis
//!
//! ```text
//! Encoder::new(&Header)        -> bytes of the header, then one record per call
//! Encoder::{task, object, symbols, sample, loss, end}; Encoder::take() -> bytes to append
//! read(&[u8])                  -> Recording { header, tasks, objects, samples, frames, stacks, losses, torn }
//! merge(Vec<Recording>)        -> one Recording (the agent's store: one recording per interval)
//! ```
//!
//! # Description
//!
//! Lineage: none; a profdev format, modelled on perf.data's split between
//! the tables of tasks and objects and the samples that refer to them, but
//! streamable: records are appended one by one, each with its length, so a
//! file cut anywhere after its header (a `profdev.data.partial` left by a
//! crash or SIGKILL) reads up to its last whole record.
//!
//! **Header**, 40 bytes, every field little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `"PDRECORD"` |
//! | 8 | 2 | version, u16: 2 (1: before off-CPU samples; read alike, its flags bits 1–3 are zero) |
//! | 10 | 2 | header length, u16: 40 (a later version may add fields; a reader skips them) |
//! | 12 | 4 | flags, u32: bit 0 stacks were recorded (`-g`) |
//! | 16 | 8 | start time, u64 nanoseconds since the Unix epoch |
//! | 24 | 8 | sampling period, u64 nanoseconds (0: unknown) |
//! | 32 | 4 | largest record payload the writer produces, u32 (a reader refuses larger ones, and any above [`MAX_RECORD`]) |
//! | 36 | 4 | reserved, zero |
//!
//! **Records** follow to the end of the file: kind (1 byte), payload length
//! (LEB128 varint, `v` below), payload. Strings are a `v` byte length then
//! UTF-8 bytes (read lossily). `z` is a zigzag varint. Unknown kinds are
//! skipped by their length, so later versions may add kinds.
//!
//! | kind | record | payload |
//! |---|---|---|
//! | 1 | Task | pid v, tid v, exec generation v, time v (ns), comm string |
//! | 2 | Object | id v (1, 2, 3… in order), kind u8 (0 user ELF, 1 kernel, 2 anonymous/JIT, 3 label), device v, inode v, build id (v length ≤ 64, bytes), path string |
//! | 3 | Symbols | object id v, file count v, file strings, function count v, then per function: start (`z` delta from the previous function of this record, the first from 0), length v, name string, line count v, per line: address offset from the function's start v, file index (into this record's files) v, line v |
//! | 4 | Sample | time (`z` delta from the previous sample, the first from 0), cpu v, pid v, tid v, weight v (ns of CPU time or events; of an off-CPU sample, ns off the CPU), flags u8 (bit 0 kernel mode; bit 1 off-CPU; bits 2–3 the off-CPU state: 0 other, 1 sleep, 2 I/O wait), frame count v, per frame innermost first: object id v (0: unknown, the offset is then a raw address), offset (`z` delta from the previous frame's offset, the first from 0) |
//! | 5 | Loss | time v, cpu v, lost samples v |
//! | 6 | End | samples v, lost v (the totals; absent from a `.partial` file) |
//!
//! An **off-CPU sample** (flags bit 1, version 2) is an interval a thread
//! spent off the CPU: its time is when the thread came back (the end of
//! the interval, so samples stay in time order), its weight the
//! nanoseconds it was away, its stack where it blocked (kernel frames
//! first), its state why ([`OffCpu`]). On-CPU samples
//! (bit 1 clear) are the sampling clock's, each standing for the period.
//! [`Recording::view`] keeps the kind a report or export asks for
//! ([`SampleType`]).
//!
//! A **label** object (kind 3) is no memory: its path is a name for the
//! frames that name it (offset 0), `[unwind failed: REASON]`, which a
//! recorder puts as the outermost frame of a stack whose user part could
//! not be unwound to its root, so that every export shows where the stack
//! stops and why ([`unwind_failed_label`]).
//!
//! A function may come in several Symbols records (a recorder writes each
//! as its first address is sampled, with that address's line): the reader
//! makes them one, with the longest length and every line row. A caller
//! frame holds its return address minus one (a byte of the call
//! instruction), so every frame's offset names the function and line that
//! was executing.
//!
//! An offset is an address in the object's link-time address space (for a
//! user ELF object the virtual address its symbols carry, load bias
//! removed; for the kernel object the running kernel's address), the space
//! of the object's symbol table. A Task is written before the first sample
//! of its thread (a later Task of the same tid, at an exec, supersedes the
//! earlier for later samples); an Object before its Symbols and before the
//! first sample naming it. The [`Encoder`] refuses to break these rules and
//! [`read`] reports a file that breaks them.
//!
//! # Example
//!
//! ```
//! use profdev_formats::recording::{self, Encoder, Frame, Header, ObjectInfo, ObjectKind, SampleInfo, Task};
//! let mut enc = Encoder::new(&Header { flags: 1, start_ns: 0, period_ns: 1_000_000 });
//! enc.task(&Task { pid: 7, tid: 7, generation: 0, time: 0, comm: "a.out".into() });
//! let obj = enc.object(&ObjectInfo { kind: ObjectKind::User, dev: 1, inode: 2,
//!     build_id: vec![0xab], path: "/bin/a.out".into() });
//! let s = SampleInfo { time: 5, cpu: 0, pid: 7, tid: 7, weight: 1_000_000, kernel: false, off_cpu: None };
//! enc.sample(&s, &[Frame { object: obj, offset: 0x1130 }]).unwrap();
//! let bytes = enc.take();
//! let rec = recording::read(&bytes).unwrap();
//! assert_eq!(rec.samples.len(), 1);
//! assert_eq!(rec.stack(&rec.samples[0])[0].offset, 0x1130);
//! assert!(rec.torn.is_none() && !rec.complete);
//! ```
//!
//! # Bugs
//!
//! * Strings are read lossily: a comm or path that is not UTF-8 comes back
//!   with U+FFFD in place of the bad bytes.

mod merge;
mod read;
mod write;

#[cfg(test)]
mod tests;

pub use merge::merge;
pub use read::{read, ReadError, Recording, Sample};
pub use write::{EncodeError, Encoder, SampleInfo};

/// The first 8 bytes of every recording.
pub const MAGIC: [u8; 8] = *b"PDRECORD";
/// The version this module writes; it reads this and every earlier one.
pub const VERSION: u16 = 2;
/// Bytes of the version-1 header.
pub const HEADER_LEN: usize = 40;
/// The largest record payload any reader accepts (16 MiB): a kernel's
/// symbol table is written as several Symbols records well below it.
pub const MAX_RECORD: usize = 16 << 20;
/// The payload size above which the encoder starts a new Symbols record.
pub const SYMBOLS_CHUNK: usize = 1 << 20;
/// The longest string (comm, path, function or file name) written or read.
pub const MAX_STRING: usize = 4096;
/// The longest build id.
pub const MAX_BUILD_ID: usize = 64;
/// Header flag: samples carry stacks (`-g`).
pub const FLAG_STACKS: u32 = 1;
/// Header flag: off-CPU intervals were recorded (`--off-cpu`).
pub const FLAG_OFF_CPU: u32 = 2;

/// Why a thread was off the CPU (an off-CPU sample's state).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OffCpu {
    /// Runnable but not running: preempted, or yielded (in `wall`, not
    /// in `off-cpu`, which is the time spent waiting).
    Other,
    /// Waiting for an event: a sleep, a lock, a read of a pipe or socket.
    Sleep,
    /// Waiting for block I/O (the kernel's `io_schedule`, counted as
    /// iowait).
    Io,
}

impl OffCpu {
    /// The state's label: `other`, `sleep`, `io`.
    pub fn name(self) -> &'static str {
        match self {
            OffCpu::Other => "other",
            OffCpu::Sleep => "sleep",
            OffCpu::Io => "io",
        }
    }
    pub(crate) fn code(self) -> u8 {
        match self {
            OffCpu::Other => 0,
            OffCpu::Sleep => 1,
            OffCpu::Io => 2,
        }
    }
    pub(crate) fn from_code(c: u8) -> Option<OffCpu> {
        Some(match c {
            0 => OffCpu::Other,
            1 => OffCpu::Sleep,
            2 => OffCpu::Io,
            _ => return None,
        })
    }
}

/// Which samples a report or export takes (`--type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SampleType {
    /// The sampling clock's samples, as before off-CPU recording existed.
    #[default]
    Cpu,
    /// The intervals threads spent waiting (states `sleep` and `io`),
    /// weighted by their nanoseconds: as perf's `--off-cpu` counts,
    /// without the time a runnable thread waited for a CPU.
    OffCpu,
    /// Everything: each on-CPU sample weighted by its period, each
    /// off-CPU interval (preempted ones, state `other`, too) by its
    /// length, so that a thread's weights add up to its elapsed time.
    Wall,
}

impl SampleType {
    /// Parse `cpu`, `off-cpu` or `wall`.
    pub fn parse(s: &str) -> Option<SampleType> {
        Some(match s {
            "cpu" => SampleType::Cpu,
            "off-cpu" => SampleType::OffCpu,
            "wall" => SampleType::Wall,
            _ => return None,
        })
    }
    /// The name `--type` takes.
    pub fn name(self) -> &'static str {
        match self {
            SampleType::Cpu => "cpu",
            SampleType::OffCpu => "off-cpu",
            SampleType::Wall => "wall",
        }
    }
    /// Whether a sample of kind `off_cpu` belongs to this type.
    pub fn takes(self, off_cpu: Option<OffCpu>) -> bool {
        match self {
            SampleType::Cpu => off_cpu.is_none(),
            SampleType::OffCpu => off_cpu.is_some_and(|s| s != OffCpu::Other),
            SampleType::Wall => true,
        }
    }
}

/// Record kinds.
pub(crate) mod kind {
    pub const TASK: u8 = 1;
    pub const OBJECT: u8 = 2;
    pub const SYMBOLS: u8 = 3;
    pub const SAMPLE: u8 = 4;
    pub const LOSS: u8 = 5;
    pub const END: u8 = 6;
}

/// The header's fields other than magic, version and lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    /// [`FLAG_STACKS`] and later flags.
    pub flags: u32,
    /// Start of the recording, ns since the Unix epoch.
    pub start_ns: u64,
    /// Sampling period in ns; 0 when unknown.
    pub period_ns: u64,
}

/// One thread as of one exec.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Task {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// 0 for the thread as first seen, +1 at each exec.
    pub generation: u32,
    /// When this entry became true (ns, the samples' clock).
    pub time: u64,
    /// The command name.
    pub comm: String,
}

/// What an object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ObjectKind {
    /// An ELF file mapped by a process.
    #[default]
    User,
    /// The kernel (offsets are kernel addresses).
    Kernel,
    /// Anonymous or JIT memory (no file).
    Anon,
    /// No memory: a name for frames (its path), such as
    /// `[unwind failed: REASON]`.
    Label,
}

/// The path of the label object whose frame ends a stack that could not
/// be unwound to its root, for `reason`.
pub fn unwind_failed_label(reason: &str) -> String {
    format!("[unwind failed: {reason}]")
}

impl ObjectKind {
    fn code(self) -> u8 {
        match self {
            ObjectKind::User => 0,
            ObjectKind::Kernel => 1,
            ObjectKind::Anon => 2,
            ObjectKind::Label => 3,
        }
    }
    fn from_code(c: u8) -> Option<ObjectKind> {
        Some(match c {
            0 => ObjectKind::User,
            1 => ObjectKind::Kernel,
            2 => ObjectKind::Anon,
            3 => ObjectKind::Label,
            _ => return None,
        })
    }
}

/// An object as the Object record describes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ObjectInfo {
    /// User ELF, kernel, anonymous.
    pub kind: ObjectKind,
    /// Device of the file (0 when none).
    pub dev: u64,
    /// Inode of the file (0 when none).
    pub inode: u64,
    /// GNU build id, raw bytes (empty when none).
    pub build_id: Vec<u8>,
    /// Path as mapped (or `[kernel.kallsyms]`, `[anon]`; a label's text).
    pub path: String,
}

/// An object with its symbol table, as read.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Object {
    /// The id samples use (index + 1 in [`Recording::objects`]).
    pub id: u32,
    /// The Object record's fields.
    pub info: ObjectInfo,
    /// Source file names the functions' lines index.
    pub files: Vec<String>,
    /// Functions, sorted by start once the file is read.
    pub functions: Vec<Function>,
}

/// One function of an object's symbol table.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Function {
    /// First offset.
    pub start: u64,
    /// Length in bytes (0: one byte).
    pub len: u64,
    /// The (demangled) name.
    pub name: String,
    /// Line rows sorted by address: each covers from its address to the next.
    pub lines: Vec<Line>,
}

/// One row of a line table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Line {
    /// Offset (absolute, in the object's space).
    pub addr: u64,
    /// Index into the object's files (for [`Encoder::symbols`], the files passed with it).
    pub file: u32,
    /// Line number.
    pub line: u32,
}

/// One frame: an offset in an object (object 0: unknown, a raw address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Frame {
    /// Object id, 0 for unknown.
    pub object: u32,
    /// Offset in the object's space.
    pub offset: u64,
}

/// Samples lost (by the kernel's ring or the recorder).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Loss {
    /// When (ns).
    pub time: u64,
    /// On which CPU.
    pub cpu: u32,
    /// How many.
    pub lost: u64,
}

/// Totals of the End record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct End {
    /// Samples written.
    pub samples: u64,
    /// Samples lost.
    pub lost: u64,
}

impl Object {
    /// The function covering `offset`.
    pub fn function_at(&self, offset: u64) -> Option<&Function> {
        let i = self.functions.partition_point(|f| f.start <= offset);
        let f = self.functions.get(i.checked_sub(1)?)?;
        (offset - f.start < f.len.max(1)).then_some(f)
    }

    /// The file name and line of `offset` in `f`.
    pub fn line_at(&self, f: &Function, offset: u64) -> Option<(&str, u32)> {
        let i = f.lines.partition_point(|l| l.addr <= offset);
        let l = f.lines.get(i.checked_sub(1)?)?;
        Some((self.files.get(l.file as usize)?.as_str(), l.line))
    }

    /// The file's base name (`[kernel.kallsyms]` and labels as they are).
    pub fn short_name(&self) -> &str {
        if self.info.kind == ObjectKind::Label || self.info.path.starts_with('[') {
            return &self.info.path;
        }
        self.info.path.rsplit('/').next().unwrap_or(&self.info.path)
    }
}

// ---- varints ----

pub(crate) fn put_v(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

pub(crate) fn put_z(buf: &mut Vec<u8>, v: i64) {
    put_v(buf, ((v << 1) ^ (v >> 63)) as u64);
}

pub(crate) fn unzig(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}
