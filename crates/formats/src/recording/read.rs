//! The reader: a whole recording (or a torn `.partial`) into tables.

use super::{
    kind, unzig, End, Frame, Function, Header, Line, Loss, Object, ObjectInfo, ObjectKind, OffCpu,
    SampleType, Task, HEADER_LEN, MAGIC, MAX_BUILD_ID, MAX_RECORD, MAX_STRING, VERSION,
};
use rustc_hash::FxHashMap;
use std::collections::HashMap;

/// One sample as read; its frames are [`Recording::stack`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sample {
    /// ns, the recording's clock.
    pub time: u64,
    /// CPU.
    pub cpu: u32,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Index into [`Recording::tasks`] of the thread's entry at this sample.
    pub task: u32,
    /// Weight (ns of CPU time or events).
    pub weight: u64,
    /// Taken in kernel mode.
    pub kernel: bool,
    /// An off-CPU interval (its weight the ns off the CPU) and its state;
    /// `None` for a sample of the sampling clock.
    pub off_cpu: Option<OffCpu>,
    /// First frame in [`Recording::frames`].
    pub first: usize,
    /// Number of frames.
    pub depth: u32,
    /// Its stack's index in [`Recording::stacks`]: samples with the same
    /// frames share one stack (and one `first`).
    pub stack: u32,
}

/// A recording as read.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Recording {
    /// The header.
    pub header: Header,
    /// Every Task record, in file order.
    pub tasks: Vec<Task>,
    /// Every object, its symbols merged and sorted; `objects[i].id == i + 1`.
    pub objects: Vec<Object>,
    /// Every sample, in file order.
    pub samples: Vec<Sample>,
    /// The frames of every distinct stack, innermost first, back to back
    /// (a stack is stored once however many samples have it).
    pub frames: Vec<Frame>,
    /// The distinct stacks, in the order they first came: (first frame in
    /// `frames`, depth).
    pub stacks: Vec<(usize, u32)>,
    /// Loss records.
    pub losses: Vec<Loss>,
    /// The End record was read.
    pub complete: bool,
    /// Its totals.
    pub end: Option<End>,
    /// Byte offset of a partial last record (a cut file), if any.
    pub torn: Option<u64>,
    /// The samples it holds ([`Recording::view`]): as read, every sample
    /// is there, and exports count the clock's samples ([`SampleType::Cpu`]).
    pub view: SampleType,
}

impl Recording {
    /// Whether any sample has a kernel frame (its exports hold kernel
    /// addresses: files of them are 0600).
    pub fn has_kernel_frames(&self) -> bool {
        let kernel: Vec<u32> = self
            .objects
            .iter()
            .filter(|o| o.info.kind == ObjectKind::Kernel)
            .map(|o| o.id)
            .collect();
        !kernel.is_empty() && self.frames.iter().any(|f| kernel.contains(&f.object))
    }

    /// The recording with only the samples of type `ty`, weighted as
    /// that type says (an on-CPU sample by its period, an off-CPU one by
    /// its ns off the CPU), and `view` set: exports of a `Cpu` view count
    /// samples, as they always did; of an `OffCpu` or `Wall` view, they
    /// weigh time.
    pub fn view(mut self, ty: SampleType) -> Recording {
        if ty != SampleType::Wall {
            self.samples.retain(|s| ty.takes(s.off_cpu));
        }
        self.view = ty;
        self
    }

    /// Whether any sample is an off-CPU interval.
    pub fn has_off_cpu(&self) -> bool {
        self.samples.iter().any(|s| s.off_cpu.is_some())
    }

    /// The frames of `s`, innermost first.
    pub fn stack(&self, s: &Sample) -> &[Frame] {
        &self.frames[s.first..s.first + s.depth as usize]
    }

    /// The object with id `id` (none for 0).
    pub fn object(&self, id: u32) -> Option<&Object> {
        self.objects.get((id as usize).checked_sub(1)?)
    }

    /// The Task entry of a sample.
    pub fn task(&self, s: &Sample) -> &Task {
        &self.tasks[s.task as usize]
    }

    /// Total samples lost.
    pub fn lost(&self) -> u64 {
        self.losses.iter().map(|l| l.lost).sum()
    }
}

/// Why bytes are not a recording. Offsets are of the record's kind byte.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// Shorter than the header.
    #[error("a recording starts with a {HEADER_LEN}-byte header; this file has {len} bytes (is it a profdev recording?)")]
    TooShort { len: usize },
    /// Not the magic.
    #[error("not a profdev recording (the file does not begin with \"PDRECORD\"); record one with 'profdev record'")]
    Magic,
    /// A version this reader does not know.
    #[error("recording version {found} is newer than this profdev, which reads versions 1 to {VERSION}: read it with the profdev that recorded it, or a newer one")]
    Version { found: u16 },
    /// A header length below the version-1 header.
    #[error("recording header length {found} is below {HEADER_LEN}")]
    HeaderLen { found: u16 },
    /// A record longer than the reader accepts.
    #[error("record at byte {offset} claims {len} bytes, more than the {max} a recording allows")]
    TooLong { offset: u64, len: u64, max: u64 },
    /// A record's payload does not decode.
    #[error("record at byte {offset}: {what}")]
    Malformed { offset: u64, what: String },
}

struct Cur<'a> {
    b: &'a [u8],
    at: usize,
}

type R<T> = Result<T, String>;

impl<'a> Cur<'a> {
    fn left(&self) -> usize {
        self.b.len() - self.at
    }
    fn u8(&mut self) -> R<u8> {
        let v = *self.b.get(self.at).ok_or("ends inside a field")?;
        self.at += 1;
        Ok(v)
    }
    fn v(&mut self) -> R<u64> {
        // The common case: a one- or two-byte varint.
        if let Some(&[b0, b1]) = self
            .b
            .get(self.at..self.at + 2)
            .map(|b| <&[u8; 2]>::try_from(b).unwrap())
        {
            if b0 & 0x80 == 0 {
                self.at += 1;
                return Ok(u64::from(b0));
            }
            if b1 & 0x80 == 0 {
                self.at += 2;
                return Ok(u64::from(b0 & 0x7f) | u64::from(b1) << 7);
            }
        }
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a varint longer than 10 bytes".into())
    }
    fn v32(&mut self, what: &str) -> R<u32> {
        let v = self.v()?;
        u32::try_from(v).map_err(|_| format!("{what} {v} does not fit in 32 bits"))
    }
    fn z(&mut self) -> R<i64> {
        Ok(unzig(self.v()?))
    }
    fn bytes(&mut self, max: usize, what: &str) -> R<&'a [u8]> {
        let n = self.v()?;
        if n > max as u64 {
            return Err(format!("{what} of {n} bytes is longer than {max}"));
        }
        let n = n as usize;
        if n > self.left() {
            return Err(format!("{what} of {n} bytes runs past the record"));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn str(&mut self, what: &str) -> R<String> {
        Ok(String::from_utf8_lossy(self.bytes(MAX_STRING, what)?).into_owned())
    }
    /// A count of items each at least `min` bytes long, checked against
    /// what is left before anything is allocated for them.
    fn count(&mut self, min: usize, what: &str) -> R<usize> {
        let n = self.v()?;
        if n > (self.left() / min) as u64 {
            return Err(format!(
                "{n} {what} cannot fit in the {} bytes left",
                self.left()
            ));
        }
        Ok(n as usize)
    }
}

fn header(b: &[u8]) -> Result<(Header, usize, usize), ReadError> {
    if b.len() < HEADER_LEN {
        if b.len() >= 8 && b[..8] != MAGIC {
            return Err(ReadError::Magic);
        }
        return Err(ReadError::TooShort { len: b.len() });
    }
    if b[..8] != MAGIC {
        return Err(ReadError::Magic);
    }
    let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    let version = u16_at(8);
    if version == 0 || version > VERSION {
        return Err(ReadError::Version { found: version });
    }
    let hlen = u16_at(10);
    if (hlen as usize) < HEADER_LEN {
        return Err(ReadError::HeaderLen { found: hlen });
    }
    if b.len() < hlen as usize {
        return Err(ReadError::TooShort { len: b.len() });
    }
    let max = (u32_at(32) as usize).min(MAX_RECORD);
    let h = Header {
        flags: u32_at(12),
        start_ns: u64_at(16),
        period_ns: u64_at(24),
    };
    Ok((h, hlen as usize, max))
}

/// Read a recording. A file cut inside a record (a `.partial`) reads up to
/// its last whole record and sets [`Recording::torn`]; a record that breaks
/// the format is an error naming its offset.
pub fn read(bytes: &[u8]) -> Result<Recording, ReadError> {
    let (header, hlen, max) = header(bytes)?;
    let mut rec = Recording {
        header,
        ..Recording::default()
    };
    let mut st = State::default();
    let mut c = Cur { b: bytes, at: hlen };
    while c.left() > 0 {
        let offset = c.at as u64;
        // A record whose kind, length or payload is cut is the torn tail.
        let Ok(k) = c.u8() else { break };
        let Ok(len) = c.v() else {
            rec.torn = Some(offset);
            break;
        };
        if len > max as u64 {
            return Err(ReadError::TooLong {
                offset,
                len,
                max: max as u64,
            });
        }
        if len as usize > c.left() {
            rec.torn = Some(offset);
            break;
        }
        let payload = &bytes[c.at..c.at + len as usize];
        c.at += len as usize;
        if rec.complete {
            return Err(ReadError::Malformed {
                offset,
                what: "a record after the End record".into(),
            });
        }
        let mut p = Cur { b: payload, at: 0 };
        record(k, &mut p, &mut rec, &mut st)
            .and_then(|()| {
                if p.left() == 0 || !st.known(k) {
                    Ok(())
                } else {
                    Err(format!("{} bytes left over in the payload", p.left()))
                }
            })
            .map_err(|what| ReadError::Malformed { offset, what })?;
    }
    for o in &mut rec.objects {
        merge_functions(o);
    }
    Ok(rec)
}

/// Sort an object's functions; a function given by several Symbols
/// records (a recorder appends one as each of its addresses is first
/// seen) becomes one, with the longest length and every line row; file
/// names given more than once become one.
pub(crate) fn merge_functions(o: &mut Object) {
    let mut index: HashMap<&str, u32> = HashMap::new();
    let mut remap = Vec::with_capacity(o.files.len());
    let mut files: Vec<String> = Vec::new();
    for f in &o.files {
        let i = *index.entry(f.as_str()).or_insert_with(|| {
            files.push(f.clone());
            (files.len() - 1) as u32
        });
        remap.push(i);
    }
    drop(index);
    o.files = files;
    let mut funcs = std::mem::take(&mut o.functions);
    funcs.sort_by(|a, b| a.start.cmp(&b.start).then_with(|| a.name.cmp(&b.name)));
    for mut f in funcs {
        for l in &mut f.lines {
            l.file = remap[l.file as usize];
        }
        match o.functions.last_mut() {
            Some(last) if last.start == f.start && last.name == f.name => {
                last.len = last.len.max(f.len);
                last.lines.append(&mut f.lines);
            }
            _ => o.functions.push(f),
        }
    }
    for f in &mut o.functions {
        f.lines.sort_by_key(|l| l.addr);
        f.lines.dedup();
    }
}

#[derive(Default)]
struct State<'a> {
    /// tid -> index of its latest Task entry.
    tasks: FxHashMap<u32, u32>,
    last_time: u64,
    /// The encoded frames of each stack read (the bytes after a Sample's
    /// frame count) -> its stack: a stack seen before is not decoded
    /// again. (A writer that encodes the same frames two ways makes two
    /// stacks with the same frames, which exports merge.)
    stack_bytes: FxHashMap<&'a [u8], u32>,
}

impl State<'_> {
    fn known(&self, k: u8) -> bool {
        (kind::TASK..=kind::END).contains(&k)
    }
}

/// The frames of a Sample record, from `p` (its frame count read) to the
/// end of the payload: the stack's id, decoded and stored if new.
fn read_stack<'a>(
    p: &mut Cur<'a>,
    depth: usize,
    rec: &mut Recording,
    st: &mut State<'a>,
) -> R<u32> {
    let tail = &p.b[p.at..];
    if let Some(&id) = st.stack_bytes.get(tail) {
        if rec.stacks[id as usize].1 as usize == depth {
            p.at = p.b.len();
            return Ok(id);
        }
    }
    let first = rec.frames.len();
    rec.frames.reserve(depth);
    let mut prev = 0u64;
    for _ in 0..depth {
        let object = match p.v32("object id") {
            Ok(o) if o as usize > rec.objects.len() => {
                Err(format!("frame in object {o} before its Object record"))
            }
            r => r,
        };
        let offset = object.and_then(|o| Ok((o, prev.wrapping_add(p.z()? as u64))));
        let (object, offset) = match offset {
            Ok(f) => f,
            Err(e) => {
                rec.frames.truncate(first);
                return Err(e);
            }
        };
        prev = offset;
        rec.frames.push(Frame { object, offset });
    }
    let id = rec.stacks.len() as u32;
    rec.stacks.push((first, depth as u32));
    if p.at == p.b.len() {
        st.stack_bytes.insert(tail, id);
    }
    Ok(id)
}

fn record<'a>(k: u8, p: &mut Cur<'a>, rec: &mut Recording, st: &mut State<'a>) -> R<()> {
    match k {
        kind::TASK => {
            let t = Task {
                pid: p.v32("pid")?,
                tid: p.v32("tid")?,
                generation: p.v32("generation")?,
                time: p.v()?,
                comm: p.str("comm")?,
            };
            st.tasks.insert(t.tid, rec.tasks.len() as u32);
            rec.tasks.push(t);
        }
        kind::OBJECT => {
            let id = p.v32("object id")?;
            if id as usize != rec.objects.len() + 1 {
                return Err(format!(
                    "object id {id} out of order (the next is {})",
                    rec.objects.len() + 1
                ));
            }
            let code = p.u8()?;
            let kind = ObjectKind::from_code(code).ok_or(format!("unknown object kind {code}"))?;
            let dev = p.v()?;
            let inode = p.v()?;
            let build_id = p.bytes(MAX_BUILD_ID, "build id")?.to_vec();
            let path = p.str("path")?;
            rec.objects.push(Object {
                id,
                info: ObjectInfo {
                    kind,
                    dev,
                    inode,
                    build_id,
                    path,
                },
                ..Object::default()
            });
        }
        kind::SYMBOLS => {
            let id = p.v32("object id")?;
            let Some(o) = (id as usize)
                .checked_sub(1)
                .and_then(|i| rec.objects.get_mut(i))
            else {
                return Err(format!("symbols of object {id} before its Object record"));
            };
            let nfiles = p.count(1, "files")?;
            let base = o.files.len();
            for _ in 0..nfiles {
                o.files.push(p.str("file name")?);
            }
            let nfuncs = p.count(4, "functions")?;
            o.functions.reserve(nfuncs);
            let mut prev = 0u64;
            for _ in 0..nfuncs {
                let start = prev.wrapping_add(p.z()? as u64);
                prev = start;
                let len = p.v()?;
                let name = p.str("function name")?;
                let nlines = p.count(3, "lines")?;
                let mut lines = Vec::with_capacity(nlines);
                for _ in 0..nlines {
                    let addr = start.wrapping_add(p.v()?);
                    let file = p.v()?;
                    if file >= nfiles as u64 {
                        return Err(format!("line names file {file} of {nfiles}"));
                    }
                    let line = p.v32("line")?;
                    lines.push(Line {
                        addr,
                        file: (base as u64 + file) as u32,
                        line,
                    });
                }
                lines.sort_by_key(|l| l.addr);
                o.functions.push(Function {
                    start,
                    len,
                    name,
                    lines,
                });
            }
        }
        kind::SAMPLE => {
            let time = st.last_time.wrapping_add(p.z()? as u64);
            let cpu = p.v32("cpu")?;
            let pid = p.v32("pid")?;
            let tid = p.v32("tid")?;
            let weight = p.v()?;
            let flags = p.u8()?;
            let off_cpu = if flags & 2 != 0 {
                match OffCpu::from_code((flags >> 2) & 3) {
                    Some(s) => Some(s),
                    None => return Err(format!("off-CPU sample with state {}", (flags >> 2) & 3)),
                }
            } else {
                None
            };
            let Some(&task) = st.tasks.get(&tid) else {
                return Err(format!("sample of thread {tid} before its Task record"));
            };
            if rec.tasks[task as usize].pid != pid {
                return Err(format!(
                    "sample of thread {tid} in pid {pid}; its Task record says pid {}",
                    rec.tasks[task as usize].pid
                ));
            }
            let depth = p.count(2, "frames")?;
            let stack = read_stack(p, depth, rec, st)?;
            let first = rec.stacks[stack as usize].0;
            st.last_time = time;
            rec.samples.push(Sample {
                time,
                cpu,
                pid,
                tid,
                task,
                weight,
                kernel: flags & 1 != 0,
                off_cpu,
                first,
                depth: depth as u32,
                stack,
            });
        }
        kind::LOSS => rec.losses.push(Loss {
            time: p.v()?,
            cpu: p.v32("cpu")?,
            lost: p.v()?,
        }),
        kind::END => {
            rec.end = Some(End {
                samples: p.v()?,
                lost: p.v()?,
            });
            rec.complete = true;
        }
        _ => {} // a later version's record: skipped by its length
    }
    Ok(())
}
