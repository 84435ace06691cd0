//! Records delivered by a sample source.
//!
//! These mirror the perf_event records profdev asks the kernel for, already
//! decoded into owned values with explicit meaning. A replayed or synthetic
//! stream produces the very same values, so every consumer is tested on the
//! path the live engine takes.

/// The privilege level a sample was taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CpuMode {
    /// Kernel mode.
    Kernel,
    /// User mode.
    User,
    /// Anything else the kernel reports (hypervisor, guest).
    #[default]
    Other,
}

/// The identity of a mapped file: device and inode (and the inode
/// generation when the kernel gives it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Inode number.
    pub ino: u64,
    /// Inode generation (0 when unknown).
    pub ino_generation: u64,
}

/// Registers of the interrupted user context, for unwinding (x86_64: the
/// three an unwinder needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UserRegs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer (rbp).
    pub bp: u64,
}

/// One sample: where a CPU was when the sampling clock fired.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Sample {
    /// The interrupted instruction pointer (kernel or user address, see `mode`).
    pub ip: u64,
    /// Process id (thread group id); 0 with `tid` 0 is the idle task.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// CPU the sample was taken on.
    pub cpu: u32,
    /// Timestamp in nanoseconds (perf's clock; monotonic).
    pub time: u64,
    /// The sampling period this sample stands for, in nanoseconds of CPU time.
    pub period: u64,
    /// Kernel or user mode.
    pub mode: CpuMode,
    /// Kernel part of the callchain, innermost first (starts with `ip` when
    /// in kernel mode). Empty if callchains were not requested.
    pub kernel_chain: Vec<u64>,
    /// User part of the callchain, innermost first (frame-pointer walk by the
    /// kernel). Empty if callchains were not requested or not available.
    pub user_chain: Vec<u64>,
    /// User registers at the sample, when requested.
    pub user_regs: Option<UserRegs>,
    /// A copy of the user stack starting at `user_regs.sp`, when requested.
    pub user_stack: Vec<u8>,
    /// Taken as the thread left the CPU (a context switch, with
    /// [`SessionConfig::off_cpu`](crate::SessionConfig::off_cpu)), not by
    /// the sampling clock: its stack is where the thread blocked, and the
    /// [`Record::Switch`] that brings it back ends its time off the CPU.
    pub switch_out: bool,
}

impl Sample {
    /// True if the CPU was running its idle task (pid 0, tid 0).
    pub fn is_idle(&self) -> bool {
        self.pid == 0 && self.tid == 0
    }
}

/// One record from a sample source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A sample.
    Sample(Sample),
    /// A task changed its name; `exec` is true when it did so by exec, which
    /// also replaces its address space.
    Comm {
        pid: u32,
        tid: u32,
        comm: String,
        exec: bool,
        time: u64,
    },
    /// A file or anonymous region was mapped executable into a process.
    Mmap {
        pid: u32,
        tid: u32,
        /// Start of the mapping in the process.
        addr: u64,
        /// Length in bytes.
        len: u64,
        /// Offset of the mapping in the file.
        pgoff: u64,
        /// The file's path as the kernel saw it (`[vdso]`, `//anon` for
        /// anonymous regions).
        path: String,
        /// Device and inode, when the kernel reported them.
        file: Option<FileId>,
        /// Build id, when the kernel reported it.
        build_id: Option<Vec<u8>>,
        time: u64,
    },
    /// A task was created.
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
        time: u64,
    },
    /// A task exited.
    Exit {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
        time: u64,
    },
    /// A thread left the CPU (`out`) or came back to it, with
    /// [`SessionConfig::off_cpu`](crate::SessionConfig::off_cpu).
    /// `preempt`: it left still runnable (preempted or yielding), not to
    /// wait.
    Switch {
        pid: u32,
        tid: u32,
        cpu: u32,
        out: bool,
        preempt: bool,
        time: u64,
    },
    /// The kernel dropped `count` records because a ring buffer was full.
    Lost { cpu: u32, count: u64, time: u64 },
    /// The kernel throttled (`throttled == true`) or unthrottled sampling on
    /// a CPU because interrupts took too long.
    Throttle {
        cpu: u32,
        throttled: bool,
        time: u64,
    },
}

impl Record {
    /// The record's timestamp in nanoseconds.
    pub fn time(&self) -> u64 {
        match self {
            Record::Sample(s) => s.time,
            Record::Comm { time, .. }
            | Record::Mmap { time, .. }
            | Record::Fork { time, .. }
            | Record::Exit { time, .. }
            | Record::Lost { time, .. }
            | Record::Switch { time, .. }
            | Record::Throttle { time, .. } => *time,
        }
    }
}
