//! Heap profiles of chosen processes (`profdev agent --heap PID`): mprof's
//! accounting library attached to each (`profdev_attach::attach_process`,
//! as `profdev mprof -p PID --sample-bytes N` attaches it: whole stacks,
//! allocations sampled by bytes), asked for a report at every cut, and the
//! report turned into one heap profile per process beside the CPU one.
//!
//! * **Values.** A report counts since the attach; a profile holds, per
//!   allocation stack, the bytes and blocks allocated during the interval
//!   (`alloc_space`, `alloc_objects`: this report's counts less the
//!   previous one's) and those in use at its end (`inuse_space`,
//!   `inuse_objects`): Go's delta heap profile, as Grafana Alloy sends
//!   Go's to Pyroscope. In sampling mode every count is the library's
//!   unbiased estimate (`profdev_mprof::sample`): the standard error of
//!   an estimate of B bytes is at most √(N·B) for a mean of N bytes.
//! * **Symbols** come from the modules' ELF files and DWARF as `mprof
//!   --pprof` names them (`profdev_classic::mprof::heap_stacks`), frames
//!   innermost first.
//! * **Refused**: the agent itself and any process running profdev's
//!   executable; then what `attach_process` refuses (no C library: a
//!   static program; the library loaded already: counted by `mprof` or
//!   detached before; held by another tracer). Root attaches any other
//!   process it names, as `mprof -p` run by root does: the agent only ever
//!   attaches the pids its command line names.
//! * **The end** ([`Heap::finish`]): a last report, then each process is
//!   detached (`MemAttached::detach`: its GOT given back) and runs on
//!   uncounted. A process that exits is dropped at the next cut.

use profdev_attach::{attach_process, AttachOptions, MemAttached};
use profdev_formats::pprof::heap::HeapStack;
use profdev_mprof::Stack;
use std::collections::HashMap;

/// The profile name (`__name__`) of heap profiles in Pyroscope and
/// Parca, as Go's heap profiles are named there.
pub const PROFILE_NAME: &str = "memory";
/// `--heap-sample-bytes`'s default: tcmalloc's and Go's mean of 512 KiB.
pub const DEFAULT_SAMPLE_BYTES: u64 = 524_288;

/// What `--heap` asks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeapOptions {
    /// `--heap PID`: the processes attached.
    pub pids: Vec<u32>,
    /// `--heap-comm NAME`: the processes running these commands (their
    /// `/proc/PID/comm`) attached when seen, at the start and each cut.
    pub comms: Vec<String>,
    /// `--heap-sample-bytes N`: the mean of the sampling (0: every
    /// allocation counted exactly).
    pub sample_bytes: u64,
    /// The samplers' seed; none: `PROFDEV_MPROF_SAMPLE_SEED` (tests) if
    /// set, else the clock's.
    pub seed: Option<u64>,
}

/// One process's heap profile of one interval.
#[derive(Clone, Debug, Default)]
pub struct HeapProfile {
    /// The process.
    pub pid: u32,
    /// Its command name.
    pub comm: String,
    /// The sampling's mean in bytes (0: exact counts).
    pub sample_bytes: u64,
    /// Its stacks: `alloc_*` the interval's, `inuse_*` at its end.
    pub stacks: Vec<HeapStack>,
}

impl HeapProfile {
    /// Its size in a spool file (`crate::disk`): what a spool's cap
    /// counts it for.
    pub fn bytes(&self) -> usize {
        let frame = |f: &profdev_formats::pprof::heap::HeapFrame| {
            15 + 4 * 3 + f.module.len() + f.function.len() + f.file.len()
        };
        let stack = |s: &HeapStack| 36 + s.frames.iter().map(frame).sum::<usize>();
        21 + self.comm.len() + self.stacks.iter().map(stack).sum::<usize>()
    }

    /// Its pprof (not compressed): Go's heap sample types, the interval
    /// `[start_ns, end_ns)` (Unix ns) as its time and duration, and, as
    /// Go's, period type `space`/`bytes` with the sampling's mean as its
    /// period.
    pub fn pprof(&self, start_ns: u64, end_ns: u64) -> Vec<u8> {
        use profdev_formats::pprof::{Profile, ValueType};
        use prost::Message;
        let bytes = profdev_formats::pprof::heap::encode_stacks(&self.stacks);
        let Ok(mut p) = Profile::decode(&bytes[..]) else {
            return bytes;
        };
        let mut ix = |s: &str| match p.string_table.iter().position(|t| t == s) {
            Some(i) => i as i64,
            None => {
                p.string_table.push(s.to_string());
                p.string_table.len() as i64 - 1
            }
        };
        let (space, unit) = (ix("space"), ix("bytes"));
        p.period_type = Some(ValueType {
            r#type: space,
            unit,
        });
        p.period = self.sample_bytes as i64;
        p.time_nanos = start_ns as i64;
        p.duration_nanos = end_ns.saturating_sub(start_ns) as i64;
        p.encode_to_vec()
    }
}

/// A stack's key: its frames (and whether the table overflowed).
type Key = (bool, Vec<(String, u64)>);

/// An attached process.
struct Watched {
    attached: MemAttached,
    comm: String,
    /// Each stack's (blocks, bytes) allocated as of the previous report.
    before: HashMap<Key, (u64, u64)>,
    /// Its directory, kept from the sweep of other runs.
    _held: Option<std::fs::File>,
}

/// The processes whose heaps the agent profiles.
pub struct Heap {
    watched: Vec<Watched>,
    sample_bytes: u64,
    options: AttachOptions,
    /// `--heap-comm`: commands whose processes are attached when seen.
    comms: Vec<String>,
    /// Each process tried (pid, start time): attached or refused once.
    tried: HashMap<u32, u64>,
}

/// The command name of `pid`.
fn comm_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_default()
}

/// Why the agent will not attach `pid`, if it will not: it is the agent,
/// or runs profdev's executable.
fn refused(pid: u32) -> Option<String> {
    if pid == std::process::id() {
        return Some(format!("process {pid} is the agent itself"));
    }
    let exe = |p: &str| {
        std::fs::metadata(p).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        })
    };
    let mine = exe("/proc/self/exe");
    (mine.is_some() && exe(&format!("/proc/{pid}/exe")) == mine)
        .then(|| format!("process {pid} runs profdev itself"))
}

/// The start time of `pid` (/proc/PID/stat field 22): a reused pid is
/// another process.
fn start_of(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Whether `pid` is dumpable: its /proc directory belongs to its real
/// user (the kernel gives a non-dumpable process's to root).
fn dumpable(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next()?.parse::<u32>().ok());
    std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| Some(m.uid()) == uid)
}

impl Heap {
    /// Attach every process `opts` names, and those running a command it
    /// names; each said to `log` in one line (`heap: attached to process
    /// PID (COMM) …`, or why not: the agent goes on without it).
    pub fn start(opts: &HeapOptions, log: &mut dyn FnMut(&str)) -> Heap {
        let options = AttachOptions {
            stacks: true,
            sample_bytes: (opts.sample_bytes > 0).then_some(opts.sample_bytes),
            sample_seed: opts.seed.or_else(|| {
                let seed = std::env::var(profdev_mprof::sample::SAMPLE_SEED_ENV).ok()?;
                seed.parse().ok()
            }),
            ..AttachOptions::default()
        };
        if !opts.pids.is_empty() || !opts.comms.is_empty() {
            // Directories of earlier runs whose processes are gone.
            use std::os::unix::fs::MetadataExt;
            let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
            profdev_mprof::sweep(&std::env::temp_dir(), uid);
        }
        let mut heap = Heap {
            watched: Vec::new(),
            sample_bytes: opts.sample_bytes,
            options,
            comms: opts.comms.clone(),
            tried: HashMap::new(),
        };
        for &pid in &opts.pids {
            heap.attach(pid, log);
        }
        heap.discover(log);
        heap
    }

    /// Attach `pid` (once: a process refused is not tried again).
    fn attach(&mut self, pid: u32, log: &mut dyn FnMut(&str)) {
        let Some(start) = start_of(pid) else {
            log(&format!("heap: no process {pid}: not profiled"));
            return;
        };
        if self.tried.insert(pid, start) == Some(start) {
            return;
        }
        if let Some(why) = refused(pid) {
            log(&format!("heap: {why}: not profiled"));
            return;
        }
        match attach_process(pid, &self.options, None) {
            Ok(attached) => {
                let comm = comm_of(pid);
                let how = match self.sample_bytes {
                    0 => "every allocation counted".to_string(),
                    n => format!("sampling every {n} bytes"),
                };
                log(&format!("heap: attached to process {pid} ({comm}), {how}"));
                self.watched.push(Watched {
                    _held: attached.hold(),
                    attached,
                    comm,
                    before: HashMap::new(),
                });
            }
            Err(e) => log(&format!("heap: process {pid}: {e}: not profiled")),
        }
    }

    /// Attach the processes that run a command of `--heap-comm` and were
    /// not tried yet, but non-dumpable ones (not named by root: their
    /// pids never were).
    fn discover(&mut self, log: &mut dyn FnMut(&str)) {
        if self.comms.is_empty() {
            return;
        }
        // Processes gone are forgotten.
        self.tried
            .retain(|&pid, start| start_of(pid) == Some(*start));
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return;
        };
        let pids: Vec<u32> = dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|&pid| self.comms.contains(&comm_of(pid)))
            .filter(|&pid| self.tried.get(&pid).copied() != start_of(pid))
            .collect();
        for pid in pids {
            if dumpable(pid) {
                self.attach(pid, log);
            } else if let Some(start) = start_of(pid) {
                self.tried.insert(pid, start);
                log(&format!(
                    "heap: process {pid} ({}) is not dumpable: not profiled (name it with --heap PID)",
                    comm_of(pid)
                ));
            }
        }
    }

    /// Whether no process is attached.
    pub fn is_empty(&self) -> bool {
        self.watched.is_empty()
    }

    /// How many processes are attached.
    pub fn processes(&self) -> usize {
        self.watched.len()
    }

    /// The interval's profile of every attached process (a report asked
    /// of each); a process that exited is dropped, said to `log`.
    pub fn cut(&mut self, log: &mut dyn FnMut(&str)) -> Vec<HeapProfile> {
        let mut out = Vec::new();
        self.watched.retain_mut(|w| {
            let pid = w.attached.pid();
            if !w.attached.running() {
                log(&format!("heap: process {pid} exited: dropped"));
                return false;
            }
            if !w.attached.request_report(profdev_attach::REPORT_TIMEOUT) {
                if w.attached.running() {
                    log(&format!(
                        "heap: process {pid}: no report came within {} s: this interval left out",
                        profdev_attach::REPORT_TIMEOUT.as_secs()
                    ));
                }
                return true;
            }
            if let Some(r) = w.attached.latest_report() {
                let stacks = profdev_mprof::merge_stacks(std::slice::from_ref(&r));
                out.push(HeapProfile {
                    pid,
                    comm: w.comm.clone(),
                    sample_bytes: self.sample_bytes,
                    stacks: delta(&mut w.before, stacks),
                });
            }
            true
        });
        self.discover(log);
        out
    }

    /// The last profiles ([`Heap::cut`]), then every process detached:
    /// it runs on uncounted. Each detach (or why not) is said to `log`.
    pub fn finish(mut self, log: &mut dyn FnMut(&str)) -> Vec<HeapProfile> {
        let last = self.cut(log);
        for w in &self.watched {
            let pid = w.attached.pid();
            match w.attached.detach() {
                Ok(_) => log(&format!(
                    "heap: process {pid} detached: it runs on, no longer counted"
                )),
                Err(e) => log(&format!("heap: process {pid} could not be detached: {e}")),
            }
        }
        last
    }
}

/// `stacks` (counts since the attach) as the interval's: blocks and bytes
/// allocated since `before` (then updated), those in use as they are;
/// stacks with nothing allocated nor in use left out; symbolized.
fn delta(before: &mut HashMap<Key, (u64, u64)>, stacks: Vec<Stack>) -> Vec<HeapStack> {
    let mut kept = Vec::with_capacity(stacks.len());
    for mut s in stacks {
        let key = (s.overflow, s.frames.clone());
        let (objects, bytes) = before.insert(key, (s.allocs, s.bytes)).unwrap_or((0, 0));
        s.allocs = s.allocs.saturating_sub(objects);
        s.bytes = s.bytes.saturating_sub(bytes);
        if s.bytes != 0 || s.current != 0 {
            kept.push(s);
        }
    }
    profdev_classic::mprof::heap_stacks(&kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(pc: u64, allocs: u64, bytes: u64, current: u64) -> Stack {
        Stack {
            frames: vec![(String::new(), pc)],
            allocs,
            bytes,
            live: allocs,
            current,
            ..Stack::default()
        }
    }

    /// Allocated: the interval's; in use: as it is; a stack idle and
    /// empty is left out.
    #[test]
    fn alloc_counts_are_the_intervals() {
        let mut before = HashMap::new();
        let first = delta(
            &mut before,
            vec![stack(0x11, 3, 300, 300), stack(0x21, 1, 5, 0)],
        );
        assert_eq!(
            first
                .iter()
                .map(|s| (s.alloc_objects, s.alloc_space, s.inuse_space))
                .collect::<Vec<_>>(),
            [(3, 300, 300), (1, 5, 0)]
        );
        let second = delta(
            &mut before,
            vec![stack(0x11, 5, 700, 100), stack(0x21, 1, 5, 0)],
        );
        assert_eq!(second.len(), 1);
        assert_eq!(
            (
                second[0].alloc_objects,
                second[0].alloc_space,
                second[0].inuse_space
            ),
            (2, 400, 100)
        );
        assert_eq!(second[0].frames[0].function, "0x10");
    }

    #[test]
    fn the_pprof_has_the_interval_and_the_period() {
        use prost::Message;
        let p = HeapProfile {
            sample_bytes: 524288,
            stacks: delta(&mut HashMap::new(), vec![stack(0x11, 3, 300, 300)]),
            ..HeapProfile::default()
        };
        let bytes = p.pprof(1_000, 16_000);
        let d = profdev_formats::pprof::Profile::decode(&bytes[..]).unwrap();
        assert_eq!(
            (d.time_nanos, d.duration_nanos, d.period),
            (1_000, 15_000, 524288)
        );
        let pt = d.period_type.unwrap();
        assert_eq!(
            (
                d.string_table[pt.r#type as usize].as_str(),
                d.string_table[pt.unit as usize].as_str()
            ),
            ("space", "bytes")
        );
        let back = profdev_formats::pprof::decode::heap_stacks(&bytes).unwrap();
        assert_eq!(back[0].alloc_space, 300);
    }
}
