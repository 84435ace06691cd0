//! The prf commands' command lines (profiler(1M): prfld, prfstat, prfdc,
//! prfsnap, prfpr): their tables. Their options all take a value
//! (`-f DEVICE`), parsed by [`crate::cmdline::Opts::parse`]; prfpr takes
//! operands only.

use crate::cmdline::{Longs, Operand, Opt, Spec};

/// The `-f DEVICE` option every prf command takes.
pub const DEVICE: Opt = Opt::value(
    'f',
    "device_name",
    "The prf device: a path, or a file name in the mount directory \
     ($PROFDEV_MOUNT, default /run/profdev) such as prf1; prf there by default",
)
.id("device")
.hint(clap::ValueHint::FilePath);

/// prfld's command line: its options, operands and help.
pub static PRFLD: Spec = Spec {
    name: "prfld",
    synopsis: "prfld [-f device_name] [namelist]",
    additions: "",
    about: "Load the prf device with the sorted start addresses of the kernel's code \
            symbols, after a 0.",
    longs: Longs::Any,
    opts: &[DEVICE],
    operands: &[Operand::optional(
        "namelist",
        "/proc/kallsyms (the default), or a System.map or vmlinux",
    )
    .file()],
    after_help: "",
};

/// prfstat's command line: its options, operands and help.
pub static PRFSTAT: Spec = Spec {
    name: "prfstat",
    synopsis: "prfstat [-f device_name] [on|off]",
    additions: "",
    about: "Switch the prf profiler on or off and report its state.",
    longs: Longs::Any,
    opts: &[DEVICE],
    operands: &[
        Operand::optional("state", "on or off; without it, only the state is reported")
            .choices(&["on", "off"]),
    ],
    after_help: "",
};

/// prfdc's command line: its options, operands and help.
pub static PRFDC: Spec = Spec {
    name: "prfdc",
    synopsis: "prfdc [-f device_name] [-u seconds] [-n count] logfile [period [off_hour]]",
    additions: "",
    about: "Switch the prf profiler on and, in the background, append its counters to \
            logfile now and every period minutes (default 10; -u: seconds per period \
            unit) until a record is taken in hour off_hour, count records are written, \
            or the collector, whose pid it prints, is killed. (SVR4's default off_hour, \
            17, is not kept: without off_hour the collector runs until stopped.)",
    longs: Longs::Any,
    opts: &[
        DEVICE,
        Opt::value(
            'u',
            "seconds",
            "Seconds per period unit (default 60: the period counts minutes)",
        )
        .id("unit"),
        Opt::value('n', "count", "Stop the collector after this many records").id("count"),
    ],
    operands: &[
        Operand::required(
            "logfile",
            "The prf log to create (an existing file is refused)",
        )
        .file(),
        Operand::optional("period", "Units between records (default 10)"),
        Operand::optional("off_hour", "The hour of day whose record is the last"),
    ],
    after_help: "",
};

/// prfsnap's command line: its options, operands and help.
pub static PRFSNAP: Spec = Spec {
    name: "prfsnap",
    synopsis: "prfsnap [-f device_name] logfile",
    additions: "",
    about: "Switch the prf profiler on and append a snapshot of its counters to logfile.",
    longs: Longs::Any,
    opts: &[DEVICE],
    operands: &[Operand::required("logfile", "The prf log (created 0600 if missing)").file()],
    after_help: "",
};

/// prfpr's command line: its operands and help.
pub static PRFPR: Spec = Spec {
    name: "prfpr",
    synopsis: "prfpr file [cutoff [namelist]]",
    additions: "",
    about: "Print a prf log: per interval, each kernel function's share of the ticks above \
            cutoff percent (default 1), named from namelist (default /proc/kallsyms).",
    longs: Longs::Any,
    opts: &[],
    operands: &[
        Operand::required("file", "A log written by prfsnap or prfdc").file(),
        Operand::optional(
            "cutoff",
            "Percent of the ticks below which a function is not shown (default 1)",
        ),
        Operand::optional(
            "namelist",
            "/proc/kallsyms (the default), or a System.map or vmlinux of the boot that wrote the log",
        )
        .file(),
    ],
    after_help: "",
};
