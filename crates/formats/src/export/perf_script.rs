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
//! Unresolved frames show `[unknown]`, as perf prints them.

use super::Names;
use crate::recording::{Frame, ObjectKind, Recording};
use rustc_hash::FxHashMap as FastMap;
use std::fmt::Write;

/// The text of `rec`.
pub fn write(rec: &Recording) -> String {
    let names = Names::new(rec);
    // Each distinct stack's lines, made once.
    let mut text = String::new();
    let mut lines: FastMap<Frame, (usize, usize)> = FastMap::default();
    let mut frame_text = String::new();
    let mut blocks = Vec::with_capacity(names.stacks.len());
    for st in &names.stacks {
        let a = text.len();
        for f in st.iter() {
            let (x, y) = *lines.entry(*f).or_insert_with(|| {
                let x = frame_text.len();
                frame_line(&mut frame_text, rec, f);
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
    let size: usize = names
        .sample_stack
        .iter()
        .map(|&u| blocks[u as usize].1 - blocks[u as usize].0 + 64)
        .sum();
    let mut s = String::with_capacity(size);
    for (sample, &u) in rec.samples.iter().zip(&names.sample_stack) {
        let _ = writeln!(
            s,
            "{} {}/{} [{:03}] {}.{:06}: {} cpu-clock: ",
            comms[sample.task as usize],
            sample.pid,
            sample.tid,
            sample.cpu,
            sample.time / 1_000_000_000,
            sample.time % 1_000_000_000 / 1000,
            sample.weight
        );
        let (a, b) = blocks[u as usize];
        s.push_str(&text[a..b]);
    }
    s
}

fn frame_line(out: &mut String, rec: &Recording, f: &Frame) {
    let (sym, dso) = match rec.object(f.object) {
        None => ("[unknown]".to_string(), "[unknown]"),
        Some(o) => {
            let dso = if o.info.kind == ObjectKind::Kernel {
                "[kernel.kallsyms]"
            } else {
                o.info.path.as_str()
            };
            match o.function_at(f.offset) {
                Some(func) => (format!("{}+{:#x}", func.name, f.offset - func.start), dso),
                None => ("[unknown]".to_string(), dso),
            }
        }
    };
    let _ = writeln!(out, "\t{:>16x} {sym} ({dso})", f.offset);
}
