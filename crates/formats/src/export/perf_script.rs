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

use crate::recording::{ObjectKind, Recording};
use std::fmt::Write;

/// The text of `rec`.
pub fn write(rec: &Recording) -> String {
    let mut s = String::new();
    for sample in &rec.samples {
        let t = rec.task(sample);
        let comm = t.comm.replace(char::is_whitespace, "_");
        let _ = writeln!(
            s,
            "{comm} {}/{} [{:03}] {}.{:06}: {} cpu-clock: ",
            sample.pid,
            sample.tid,
            sample.cpu,
            sample.time / 1_000_000_000,
            sample.time % 1_000_000_000 / 1000,
            sample.weight
        );
        for f in rec.stack(sample) {
            let (sym, dso) = match rec.object(f.object) {
                None => ("[unknown]".to_string(), "[unknown]".to_string()),
                Some(o) => {
                    let dso = if o.info.kind == ObjectKind::Kernel {
                        "[kernel.kallsyms]".to_string()
                    } else {
                        o.info.path.clone()
                    };
                    match o.function_at(f.offset) {
                        Some(func) => (format!("{}+{:#x}", func.name, f.offset - func.start), dso),
                        None => ("[unknown]".to_string(), dso),
                    }
                }
            };
            let _ = writeln!(s, "\t{:>16x} {sym} ({dso})", f.offset);
        }
        s.push('\n');
    }
    s
}
