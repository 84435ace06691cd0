//! kprof's command line: its operands and help (kprof takes its two
//! operands as they are: no option, not even `--`).

use crate::cmdline::{Longs, Operand, Spec};

/// kprof's command line: its operands and help.
pub static SPEC: Spec = Spec {
    name: "kprof",
    synopsis: "kprof text data",
    additions: "",
    about: "Format a kpdata histogram (Inferno 4e layout) against the kernel symbols in \
            text (/proc/kallsyms, a System.map or a vmlinux): total, in-text and outside \
            ticks, then milliseconds and percentage of in-text ticks per function.",
    longs: Longs::Any,
    opts: &[],
    operands: &[
        Operand::required("text", "/proc/kallsyms, a System.map or a vmlinux").file(),
        Operand::required("data", "A copy of the kprof device's kpdata").file(),
    ],
    after_help: "",
};
