//! `perf script` text, the layout FlameGraph's `stackcollapse-perf.pl`,
//! speedscope and the Firefox Profiler import: per sample a header line
//!
//! ```text
//! COMM PID/TID [CPU] SECONDS.MICROS: WEIGHT cpu-clock:
//! ```
//!
//! then one line per frame, innermost first, a tab, the address (the
//! frame's offset in its object) in hex right-aligned to 16, the symbol
//! with `+0xOFFSET`, and the object in parentheses; then a blank line.
//! Frames no symbol covers show the label every export shows (`[unknown]
//! in OBJECT`, `[anon]`, `[unknown]`, without an offset); a stack that
//! could not be unwound ends in a `[unwind failed: REASON]` line, and the
//! idle task's samples have the command `[idle]` (stackcollapse-perf.pl
//! puts the command at the root of each stack, where the other exports put
//! their `[idle]` frame) and no `[idle]` frame line.
//!
//! The text is made per distinct stack once and copied per sample, with
//! the numbers of the header lines formatted by hand; [`Script`] streams it
//! in 1 MiB chunks (a million samples of 20 frames are 1.6 GB of text,
//! which `profdev export` writes without holding it).
//!
//! Of an `off-cpu` or `wall` view ([`Recording::view`]) an off-CPU
//! interval's header line names the event `offcpu-time:` instead of
//! `cpu-clock:`, as perf's own `--off-cpu` output does, its WEIGHT the ns
//! off the CPU, its time when the thread left the CPU. A consumer that
//! counts header lines (stackcollapse-perf.pl) counts intervals, not
//! time: `profdev export folded --type off-cpu` weighs them.

use super::Names;
use crate::recording::{Frame, ObjectKind, Recording};
use rustc_hash::FxHashMap as FastMap;
use std::fmt::Write;

/// The text of `rec`.
pub fn write(rec: &Recording) -> String {
    let script = Script::new(rec);
    let mut out = Vec::with_capacity(script.len());
    script.write_to(&mut out).expect("writing to memory");
    debug_assert_eq!(out.len(), script.len());
    // Only whole UTF-8 strings were appended.
    String::from_utf8(out).expect("UTF-8 pieces")
}

/// The text of a recording, ready to stream: each distinct stack's lines
/// made once, copied after each sample's header line.
pub struct Script<'r> {
    rec: &'r Recording,
    sample_stack: Vec<u32>,
    text: String,
    blocks: Vec<(usize, usize)>,
    comms: Vec<String>,
    len: usize,
}

impl<'r> Script<'r> {
    /// Make every distinct stack's lines.
    pub fn new(rec: &'r Recording) -> Script<'r> {
        let names = Names::new(rec);
        let mut text = String::new();
        let mut lines: FastMap<Frame, (usize, usize)> = FastMap::default();
        let mut frame_text = String::new();
        let mut blocks = Vec::with_capacity(names.stacks.len());
        for st in &names.stacks {
            let a = text.len();
            for f in st.iter() {
                let (x, y) = *lines.entry(*f).or_insert_with(|| {
                    let x = frame_text.len();
                    frame_line(&mut frame_text, &names, f);
                    (x, frame_text.len())
                });
                text.push_str(&frame_text[x..y]);
            }
            text.push('\n');
            blocks.push((a, text.len()));
        }
        let comms: Vec<String> = rec
            .tasks
            .iter()
            .map(|t| t.comm.replace(char::is_whitespace, "_"))
            .collect();
        let mut len = 0;
        for (sample, &u) in rec.samples.iter().zip(&names.sample_stack) {
            len += header_len(sample, &comms) + blocks[u as usize].1 - blocks[u as usize].0;
        }
        Script {
            rec,
            sample_stack: names.sample_stack,
            text,
            blocks,
            comms,
            len,
        }
    }

    /// Bytes [`Script::write_to`] writes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Write the text to `w` in chunks of about 1 MiB.
    ///
    /// # Errors
    ///
    /// What `w` returns.
    pub fn write_to(&self, w: &mut impl std::io::Write) -> std::io::Result<()> {
        const CHUNK: usize = 1 << 20;
        let mut s: Vec<u8> = Vec::with_capacity(CHUNK + (64 << 10));
        for (sample, &u) in self.rec.samples.iter().zip(&self.sample_stack) {
            header(&mut s, sample, &self.comms);
            let (a, b) = self.blocks[u as usize];
            s.extend_from_slice(&self.text.as_bytes()[a..b]);
            if s.len() >= CHUNK {
                w.write_all(&s)?;
                s.clear();
            }
        }
        w.write_all(&s)
    }
}

fn comm_of<'c>(sample: &crate::recording::Sample, comms: &'c [String]) -> &'c str {
    if super::is_idle(sample) {
        super::IDLE
    } else {
        comms.get(sample.task as usize).map_or("?", String::as_str)
    }
}

/// Bytes of `num(v, width)`.
fn num_len(v: u64, width: usize) -> usize {
    let digits = v.checked_ilog10().map_or(1, |l| l as usize + 1);
    digits.max(width)
}

/// Bytes of a sample's header line.
fn header_len(sample: &crate::recording::Sample, comms: &[String]) -> usize {
    comm_of(sample, comms).len()
        + 1
        + num_len(sample.pid.into(), 0)
        + 1
        + num_len(sample.tid.into(), 0)
        + 2
        + num_len(sample.cpu.into(), 3)
        + 2
        + num_len(sample.time / 1_000_000_000, 0)
        + 1
        + 6
        + 2
        + num_len(sample.weight, 0)
        + event(sample).len()
}

/// A sample's header line.
fn header(s: &mut Vec<u8>, sample: &crate::recording::Sample, comms: &[String]) {
    s.extend_from_slice(comm_of(sample, comms).as_bytes());
    s.push(b' ');
    num(s, sample.pid.into(), 0);
    s.push(b'/');
    num(s, sample.tid.into(), 0);
    s.extend_from_slice(b" [");
    num(s, sample.cpu.into(), 3);
    s.extend_from_slice(b"] ");
    num(s, sample.time / 1_000_000_000, 0);
    s.push(b'.');
    num(s, sample.time % 1_000_000_000 / 1000, 6);
    s.extend_from_slice(b": ");
    num(s, sample.weight, 0);
    s.extend_from_slice(event(sample).as_bytes());
}

/// The end of a sample's header line: its event.
fn event(sample: &crate::recording::Sample) -> &'static str {
    match sample.off_cpu {
        None => " cpu-clock: \n",
        Some(_) => " offcpu-time: \n",
    }
}

/// `v` in decimal, zero-padded to `width` digits.
fn num(out: &mut Vec<u8>, mut v: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let start = i.min(buf.len() - width.min(buf.len()));
    out.extend_from_slice(&buf[start..]);
}

fn frame_line(out: &mut String, names: &Names, f: &Frame) {
    let func = &names.funcs[names.func_of(f) as usize];
    let dso = match names.rec.object(f.object) {
        Some(o) if o.info.kind == ObjectKind::Kernel => "[kernel.kallsyms]",
        Some(o) if o.info.kind != ObjectKind::Label => o.info.path.as_str(),
        _ => "[unknown]",
    };
    if func.resolved {
        let _ = writeln!(
            out,
            "\t{:>16x} {}+{:#x} ({dso})",
            f.offset,
            func.name,
            f.offset - func.start
        );
    } else {
        let _ = writeln!(out, "\t{:>16x} {} ({dso})", f.offset, func.name);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn numbers_are_padded() {
        let mut v = Vec::new();
        super::num(&mut v, 7, 3);
        v.push(b' ');
        super::num(&mut v, 1234, 3);
        v.push(b' ');
        super::num(&mut v, 0, 0);
        v.push(b' ');
        super::num(&mut v, 42, 6);
        v.push(b' ');
        super::num(&mut v, u64::MAX, 0);
        assert_eq!(
            String::from_utf8(v).unwrap(),
            "007 1234 0 000042 18446744073709551615"
        );
        for (v, w) in [(7, 3), (1234, 3), (0, 0), (42, 6), (u64::MAX, 0), (10, 0)] {
            let mut b = Vec::new();
            super::num(&mut b, v, w);
            assert_eq!(super::num_len(v, w), b.len(), "{v} {w}");
        }
    }
}
