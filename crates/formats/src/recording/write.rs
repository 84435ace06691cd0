//! The encoder: records appended to a buffer the caller drains and writes.

use super::{
    kind, put_v, put_z, Frame, Function, Header, Loss, ObjectInfo, OffCpu, Task, HEADER_LEN, MAGIC,
    MAX_BUILD_ID, MAX_RECORD, MAX_STRING, SYMBOLS_CHUNK, VERSION,
};
use std::collections::HashMap;

/// A sample's fields other than its stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SampleInfo {
    /// ns, the recording's clock (monotonic).
    pub time: u64,
    /// CPU it was taken on.
    pub cpu: u32,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Weight: ns of CPU time (the period) or events.
    pub weight: u64,
    /// Taken in kernel mode.
    pub kernel: bool,
    /// An off-CPU interval (`weight` its ns) and the state it was in.
    pub off_cpu: Option<OffCpu>,
}

/// Why the encoder refuses a record: each breaks a rule of the format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A sample of a thread no Task record describes.
    #[error("sample of thread {tid} (pid {pid}) before any Task record for it")]
    UnknownTask { pid: u32, tid: u32 },
    /// A frame or Symbols record naming an object not yet written.
    #[error("object id {id} used before its Object record")]
    UnknownObject { id: u32 },
    /// A record larger than [`MAX_RECORD`].
    #[error("a record of {len} bytes is larger than a recording allows ({MAX_RECORD})")]
    TooLarge { len: usize },
}

/// Builds a recording: [`Encoder::new`] puts the header in the buffer, each
/// call appends one whole record, [`Encoder::take`] hands the bytes over.
#[derive(Debug)]
pub struct Encoder {
    buf: Vec<u8>,
    payload: Vec<u8>,
    tasks: HashMap<u32, u32>,
    objects: u32,
    last_time: u64,
    samples: u64,
    lost: u64,
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    let mut n = b.len().min(MAX_STRING);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    put_v(buf, n as u64);
    buf.extend_from_slice(&b[..n]);
}

impl Encoder {
    /// A recording with `header`; its bytes are the first [`Encoder::take`] returns.
    pub fn new(header: &Header) -> Encoder {
        let mut buf = Vec::with_capacity(4096);
        buf.extend_from_slice(&MAGIC);
        buf.extend_from_slice(&VERSION.to_le_bytes());
        buf.extend_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        buf.extend_from_slice(&header.flags.to_le_bytes());
        buf.extend_from_slice(&header.start_ns.to_le_bytes());
        buf.extend_from_slice(&header.period_ns.to_le_bytes());
        buf.extend_from_slice(&(MAX_RECORD as u32).to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        debug_assert_eq!(buf.len(), HEADER_LEN);
        Encoder {
            buf,
            payload: Vec::with_capacity(256),
            tasks: HashMap::new(),
            objects: 0,
            last_time: 0,
            samples: 0,
            lost: 0,
        }
    }

    /// The bytes encoded since the last call (whole records only).
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Bytes waiting in the buffer.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Samples encoded so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    fn emit(&mut self, kind: u8) -> Result<(), EncodeError> {
        if self.payload.len() > MAX_RECORD {
            let len = self.payload.len();
            self.payload.clear();
            return Err(EncodeError::TooLarge { len });
        }
        self.buf.push(kind);
        put_v(&mut self.buf, self.payload.len() as u64);
        self.buf.extend_from_slice(&self.payload);
        self.payload.clear();
        Ok(())
    }

    /// Describe a thread (again at each exec, with the next generation).
    pub fn task(&mut self, t: &Task) {
        let p = &mut self.payload;
        put_v(p, t.pid.into());
        put_v(p, t.tid.into());
        put_v(p, t.generation.into());
        put_v(p, t.time);
        put_str(p, &t.comm);
        self.tasks.insert(t.tid, t.pid);
        self.emit(kind::TASK).expect("a Task record is small");
    }

    /// Whether a Task record describes `tid`.
    pub fn has_task(&self, tid: u32) -> bool {
        self.tasks.contains_key(&tid)
    }

    /// Describe an object; returns its id (1, 2, 3…).
    pub fn object(&mut self, o: &ObjectInfo) -> u32 {
        self.objects += 1;
        let p = &mut self.payload;
        put_v(p, self.objects.into());
        p.push(o.kind.code());
        put_v(p, o.dev);
        put_v(p, o.inode);
        let b = &o.build_id[..o.build_id.len().min(MAX_BUILD_ID)];
        put_v(p, b.len() as u64);
        p.extend_from_slice(b);
        put_str(p, &o.path);
        self.emit(kind::OBJECT).expect("an Object record is small");
        self.objects
    }

    /// Append functions (with their lines, indexing `files`) to object
    /// `id`'s symbol table, in as many records as their size needs.
    pub fn symbols(
        &mut self,
        id: u32,
        files: &[String],
        functions: &[Function],
    ) -> Result<(), EncodeError> {
        if id == 0 || id > self.objects {
            return Err(EncodeError::UnknownObject { id });
        }
        let mut rest = functions;
        while !rest.is_empty() {
            // Functions of this chunk, encoded apart from the header.
            let mut body = Vec::new();
            let mut n = 0;
            let mut prev = 0u64;
            for f in rest {
                if n > 0 && body.len() >= SYMBOLS_CHUNK {
                    break;
                }
                put_z(&mut body, f.start.wrapping_sub(prev) as i64);
                prev = f.start;
                put_v(&mut body, f.len);
                put_str(&mut body, &f.name);
                put_v(&mut body, f.lines.len() as u64);
                for l in &f.lines {
                    put_v(&mut body, l.addr.wrapping_sub(f.start));
                    put_v(&mut body, l.file.into());
                    put_v(&mut body, l.line.into());
                }
                n += 1;
            }
            let p = &mut self.payload;
            put_v(p, id.into());
            put_v(p, files.len() as u64);
            for f in files {
                put_str(p, f);
            }
            put_v(p, n as u64);
            p.extend_from_slice(&body);
            self.emit(kind::SYMBOLS)?;
            rest = &rest[n..];
        }
        Ok(())
    }

    /// One sample with its stack, innermost frame first.
    pub fn sample(&mut self, s: &SampleInfo, frames: &[Frame]) -> Result<(), EncodeError> {
        if self.tasks.get(&s.tid) != Some(&s.pid) {
            return Err(EncodeError::UnknownTask {
                pid: s.pid,
                tid: s.tid,
            });
        }
        if let Some(f) = frames.iter().find(|f| f.object > self.objects) {
            return Err(EncodeError::UnknownObject { id: f.object });
        }
        let p = &mut self.payload;
        put_z(p, s.time.wrapping_sub(self.last_time) as i64);
        put_v(p, s.cpu.into());
        put_v(p, s.pid.into());
        put_v(p, s.tid.into());
        put_v(p, s.weight);
        p.push(u8::from(s.kernel) | s.off_cpu.map_or(0, |o| 2 | (o.code() << 2)));
        put_v(p, frames.len() as u64);
        let mut prev = 0u64;
        for f in frames {
            put_v(p, f.object.into());
            put_z(p, f.offset.wrapping_sub(prev) as i64);
            prev = f.offset;
        }
        self.emit(kind::SAMPLE)?;
        self.last_time = s.time;
        self.samples += 1;
        Ok(())
    }

    /// Samples lost.
    pub fn loss(&mut self, l: &Loss) {
        let p = &mut self.payload;
        put_v(p, l.time);
        put_v(p, l.cpu.into());
        put_v(p, l.lost);
        self.lost += l.lost;
        self.emit(kind::LOSS).expect("a Loss record is small");
    }

    /// The End record with the totals: the recording is complete.
    pub fn end(&mut self) {
        let p = &mut self.payload;
        put_v(p, self.samples);
        put_v(p, self.lost);
        self.emit(kind::END).expect("an End record is small");
    }
}
