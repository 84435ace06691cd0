//! A statically linked program counted at near the loader route's cost
//! (`profdev cprof CMD`): it has no loader to preload the runtime through
//! and no `dlopen` to load it with, so profdev does the runtime's work
//! itself, through ptrace, at the program's first stop before `_start`.
//!
//! [`run_traced`] runs CMD traced (seized between its fork and its exec,
//! `PTRACE_SEIZE`, and taken from its exec event to the exit of the
//! `execve` call: stopped before any instruction of it has run, its
//! registers its own), and while it is stopped:
//!
//! * maps a page holding `syscall; int3` (one injected `mmap`, run from a
//!   copy of those bytes written over the entry point and put back), the
//!   stub every later injected system call runs;
//! * asks the planning [`Server`] for the executable's plan and
//!   trampolines, as the runtime does (the protocol of
//!   [`crate::launch`], on behalf of CMD's pid:
//!   [`Server::connect_for`]; counting mode, the same plans, encodings and
//!   cache), maps the trampoline area within reach of the module (injected
//!   `mmap`, `MAP_FIXED_NOREPLACE`), writes the code and the patches
//!   through `/proc/PID/mem`;
//! * maps a counter array and makes it the thread's GS base.
//!
//! Then it lets CMD run, following its events (`PTRACE_O_TRACECLONE`,
//! `TRACEFORK`, `TRACEVFORK`, `TRACEEXEC`, `TRACEEXIT`, `EXITKILL`):
//!
//! * a group stop (SIGSTOP, ^Z) is honoured (`PTRACE_LISTEN`): CMD stays
//!   stopped until SIGCONT;
//! * a new thread gets a counter array of its own (injected `mmap` in it)
//!   before its first instruction: counts stay exact;
//! * a forked child counts into its copy of its parent thread's array,
//!   zeroed at its first stop (what it ran after the fork); a `vfork`
//!   child shares its parent's memory and so its array;
//! * a process that execs is let go (its new program is not counted; the
//!   counts of the image it leaves are lost, a note says how many);
//! * a block counted through a breakpoint (too short for a jump) is
//!   counted here: its `int3` stops the thread, which is resumed at its
//!   trampoline (a few microseconds each; the notes give the number);
//! * each thread's counts are read when it exits (`PTRACE_EVENT_EXIT`,
//!   its memory still there) and summed.
//!
//! The sum is written as one report into the server's `out/` and read
//! back by [`Server::into_collected`], with the runtime's notes. Signals
//! profdev receives are passed on by the caller through [`Live`].

use crate::counts::ModuleCoverage;
use crate::encode::Patch;
use crate::launch::Server;
use profdev_sample::job::Foreground;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex};

mod seized;
pub use seized::{attach_seized, Seized};

/// Counter slots below the module's first (the runtime's own).
const RESERVED: u64 = crate::encode::RESERVED_SLOTS;
/// `syscall; int3`: what every injected system call runs.
const STUB: [u8; 3] = [0x0f, 0x05, 0xcc];

/// What the tracer and the caller's signal handling share.
#[derive(Default)]
struct Shared {
    /// Threads counting into an array of their own: tid -> (its
    /// process, the array's address).
    arrays: HashMap<u32, (u32, u64)>,
    /// Arrays of exited threads, zeroed, per process: a thread made
    /// later takes one before a new one is mapped (threads that come and
    /// go do not grow the process).
    free: HashMap<u32, Vec<u64>>,
    /// Processes traced (for the signals passed on).
    procs: HashSet<u32>,
    /// The module's counters (index from its first), summed.
    totals: Vec<u64>,
    /// Arrays that could not be read (their counts are lost).
    unread: u64,
    /// An attached run asked to end ([`Live::end`]).
    ending: bool,
    /// The thread following an attached run, while it does (woken by
    /// [`Live::end`]).
    follower: Option<libc::pthread_t>,
}

impl Shared {
    /// Add thread `tid`'s counts (read from its memory) and forget it;
    /// `exiting` (stopped at its exit, to run no more code): its array,
    /// zeroed, is kept for a later thread of its process.
    fn take(&mut self, tid: u32, exiting: bool) {
        let Some((tg, at)) = self.arrays.remove(&tid) else {
            return;
        };
        let mut buf = vec![0u8; self.totals.len() * 8];
        let read = File::open(format!("/proc/{tid}/mem"))
            .and_then(|f| f.read_exact_at(&mut buf, at + RESERVED * 8));
        if read.is_err() {
            self.unread += 1;
            return;
        }
        for (t, c) in self.totals.iter_mut().zip(buf.chunks_exact(8)) {
            let c = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            *t = t.saturating_add(c);
        }
        if exiting {
            buf.fill(0);
            if poke(tid, at + RESERVED * 8, &buf).is_ok() {
                self.free.entry(tg).or_default().push(at);
            }
        }
    }
}

/// The processes of a traced run, for the signals profdev passes on
/// while it runs (cloned into the thread that catches them).
#[derive(Clone, Default)]
pub struct Live(Arc<Mutex<Shared>>);

impl Live {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Send `sig` to every process of the run (and `SIGCONT`).
    pub fn signal(&self, sig: i32) {
        self.signal_outside(sig, false);
    }

    /// [`Live::signal`], but not to the processes of this process's own
    /// process group when `from_terminal`: a signal from the terminal
    /// reached its whole foreground group, cprof and the CMD that shares
    /// cprof's group, already.
    pub fn signal_outside(&self, sig: i32, from_terminal: bool) {
        // SAFETY: getpgrp only queries.
        let own = unsafe { libc::getpgrp() };
        for &p in &self.lock().procs {
            // SAFETY: getpgid and kill have no memory-safety
            // preconditions.
            unsafe {
                if from_terminal && libc::getpgid(p as i32) == own {
                    continue;
                }
                libc::kill(p as i32, sig);
                libc::kill(p as i32, libc::SIGCONT);
            }
        }
    }

    /// Take the counts of every thread still running (read as they run),
    /// then kill every process of the run (SIGKILL, which skips the exit
    /// stop where the counts would be read). Whether any was left.
    pub fn kill(&self) -> bool {
        let mut s = self.lock();
        let tids: Vec<u32> = s.arrays.keys().copied().collect();
        for t in tids {
            s.take(t, false);
        }
        for &p in &s.procs {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(p as i32, libc::SIGKILL);
            }
        }
        !s.procs.is_empty()
    }

    /// Is a process of the run still traced?
    pub fn running(&self) -> bool {
        !self.lock().procs.is_empty()
    }
}

/// What a traced run gave.
pub struct TracedRun {
    /// The executable's counts.
    pub modules: Vec<ModuleCoverage>,
    /// Notes, one sentence each, on what was not counted.
    pub notes: Vec<String>,
    /// CMD's exit status.
    pub status: ExitStatus,
}

fn ptrace(req: libc::c_uint, tid: u32, addr: u64, data: u64) -> libc::c_long {
    // SAFETY: requests whose pointer arguments, when any, point into
    // locals of the caller of the right size (GETREGS, SETREGS,
    // GETEVENTMSG).
    unsafe { libc::ptrace(req, tid as libc::pid_t, addr, data) }
}

fn regs(tid: u32) -> io::Result<libc::user_regs_struct> {
    // SAFETY: all zeros is a valid value of the C struct.
    let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    if ptrace(libc::PTRACE_GETREGS, tid, 0, &mut r as *mut _ as u64) != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

fn set_regs(tid: u32, r: &libc::user_regs_struct) -> io::Result<()> {
    if ptrace(libc::PTRACE_SETREGS, tid, 0, r as *const _ as u64) != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn resume(tid: u32, sig: i32) {
    ptrace(libc::PTRACE_CONT, tid, 0, sig as u64);
}

/// The thread or process a clone, fork or vfork event of `tid` made.
fn event_msg(tid: u32) -> u32 {
    let mut new: libc::c_ulong = 0;
    ptrace(libc::PTRACE_GETEVENTMSG, tid, 0, &mut new as *mut _ as u64);
    new as u32
}

/// waitpid for `pid` (-1: any), every kind of child: (tid, status), None
/// when there is none left.
fn wait(pid: i32) -> Option<(u32, i32)> {
    loop {
        let mut st = 0;
        // SAFETY: waitpid writes the status into our local.
        let r = unsafe { libc::waitpid(pid, &mut st, libc::__WALL) };
        if r > 0 {
            return Some((r as u32, st));
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

/// Write `data` at `addr` of process `pid` (through `/proc/PID/mem`,
/// which writes read-only code too).
fn poke(pid: u32, addr: u64, data: &[u8]) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/mem"))?
        .write_all_at(data, addr)
}

/// Run system call `nr` with `args` in the stopped thread `tid`, through
/// the `syscall; int3` at `stub`; its registers are put back after.
/// Signals that stop it meanwhile are sent again after. The call's
/// return value (negative: -errno).
fn syscall(tid: u32, stub: u64, nr: i64, args: [u64; 6]) -> io::Result<i64> {
    let saved = regs(tid)?;
    let mut r = saved;
    r.rip = stub;
    r.rax = nr as u64;
    // No system call to restart: these registers are not the thread's.
    r.orig_rax = u64::MAX;
    (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) =
        (args[0], args[1], args[2], args[3], args[4], args[5]);
    set_regs(tid, &r)?;
    resume(tid, 0);
    let mut again = Vec::new();
    let gone = || io::Error::from_raw_os_error(libc::ESRCH);
    loop {
        let (_, st) = wait(tid as i32).ok_or_else(gone)?;
        if !libc::WIFSTOPPED(st) {
            return Err(gone());
        }
        let sig = libc::WSTOPSIG(st);
        if sig == libc::SIGTRAP && st >> 16 == 0 {
            break;
        }
        if st >> 16 == 0 {
            again.push(sig);
        }
        resume(tid, 0);
    }
    let ret = regs(tid)?.rax as i64;
    set_regs(tid, &saved)?;
    for sig in again {
        // SAFETY: tgkill has no memory-safety preconditions.
        unsafe {
            libc::syscall(libc::SYS_tgkill, tgid(tid) as i64, tid as i64, sig as i64);
        }
    }
    Ok(ret)
}

/// The process thread `tid` belongs to.
fn tgid(tid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(tid)
}

/// `mmap` in thread `tid`: the address, or the error.
fn mmap(tid: u32, stub: u64, at: u64, len: u64, prot: i32, flags: i32) -> io::Result<u64> {
    let r = syscall(
        tid,
        stub,
        libc::SYS_mmap,
        [at, len, prot as u64, flags as u64, u64::MAX, 0],
    )?;
    if (-4095..0).contains(&r) {
        return Err(io::Error::from_raw_os_error(-r as i32));
    }
    Ok(r as u64)
}

/// The executable's place in process `pid`: (path, dev, ino, bias, lo, hi).
fn module_of(pid: u32) -> Result<(String, u64, u64, u64, u64, u64), String> {
    let exe = format!("/proc/{pid}/exe");
    let meta = std::fs::metadata(&exe).map_err(|e| format!("cannot read {exe}: {e}"))?;
    let maps = profdev_symbolize::maps::read(pid).map_err(|e| e.to_string())?;
    let mine: Vec<_> = maps
        .iter()
        .filter(|m| m.is_file() && m.inode == meta.ino())
        .collect();
    let lo = mine
        .iter()
        .map(|m| m.start)
        .min()
        .ok_or("no executable mapped")?;
    let hi = mine.iter().map(|m| m.end).max().unwrap_or(lo);
    let path = mine[0].file_path().to_string();
    // ET_EXEC is linked where it runs; a static-pie (ET_DYN) from 0.
    let mut head = [0u8; 18];
    File::open(&exe)
        .and_then(|mut f| f.read_exact(&mut head))
        .map_err(|e| format!("cannot read {exe}: {e}"))?;
    let bias = if u16::from_le_bytes([head[16], head[17]]) == 2 {
        0
    } else {
        lo
    };
    Ok((path, meta.dev(), meta.ino(), bias, lo, hi))
}

/// Which of `patches` must not be written while threads are stopped at
/// `stopped` (each pc, and whether it is in a system call, whose restart
/// runs the 2 bytes before it again): a patch over the middle of an
/// instruction one of them is in; a hop's `jmp` (a `PATCH_JMP` a
/// `PATCH_REL8` leads to, in the dead bytes of the block before it,
/// its host) when the host's own patch is not written or a thread is in
/// the host before the hop's end (the bytes are live code for it), and
/// the `jmp rel8` to a hop not written. Nothing, with no thread stopped.
fn busy_patches(patches: &[Patch], stopped: &[(u64, bool)]) -> Vec<bool> {
    use crate::encode::{PATCH_JMP, PATCH_REL8};
    let within = |lo: u64, hi: u64| {
        stopped.iter().any(|&(pc, call)| {
            (pc > lo && pc < hi) || (call && pc.wrapping_sub(2) > lo && pc.wrapping_sub(2) < hi)
        })
    };
    let mut busy: Vec<bool> = patches
        .iter()
        .map(|p| within(p.addr, p.addr + u64::from(p.len)))
        .collect();
    if stopped.is_empty() {
        return busy;
    }
    let slots: HashSet<u64> = patches
        .iter()
        .filter(|p| p.kind == PATCH_REL8)
        .map(|p| p.entry)
        .collect();
    // The patches that are no hop, by address: a hop's host is the last
    // one before it.
    let mut hosts: Vec<(u64, usize)> = patches
        .iter()
        .enumerate()
        .filter(|(_, p)| p.kind != PATCH_REL8 && !(p.kind == PATCH_JMP && slots.contains(&p.addr)))
        .map(|(i, p)| (p.addr, i))
        .collect();
    hosts.sort_unstable();
    let mut hop_busy: HashMap<u64, bool> = HashMap::new();
    for (i, p) in patches.iter().enumerate() {
        if p.kind != PATCH_JMP || !slots.contains(&p.addr) {
            continue;
        }
        let host = hosts[..hosts.partition_point(|&(a, _)| a < p.addr)].last();
        let b = match host {
            Some(&(at, h)) => busy[h] || busy[i] || within(at, p.addr + 5),
            None => true,
        };
        busy[i] = b;
        hop_busy.insert(p.addr, b);
    }
    for (i, p) in patches.iter().enumerate() {
        if p.kind == PATCH_REL8 && hop_busy.get(&p.entry).copied().unwrap_or(true) {
            busy[i] = true;
        }
    }
    busy
}

/// Map the `syscall; int3` page every injected system call runs, in
/// process `pid` whose threads are all stopped: one `mmap` run by thread
/// `tid` from a copy of those bytes written where it stopped, put back
/// after. The page's address.
fn make_stub(pid: u32, tid: u32) -> Result<u64, String> {
    let e = |what: &'static str| move |err: io::Error| format!("{what}: {err}");
    let at = regs(tid).map_err(e("cannot read its registers"))?.rip;
    let mut orig = [0u8; 3];
    File::open(format!("/proc/{pid}/mem"))
        .and_then(|f| f.read_exact_at(&mut orig, at))
        .map_err(e("cannot read its code"))?;
    poke(pid, at, &STUB).map_err(e("cannot write its code"))?;
    let page = mmap(
        tid,
        at,
        0,
        4096,
        libc::PROT_READ | libc::PROT_EXEC,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    );
    poke(pid, at, &orig).map_err(e("cannot write its code"))?;
    let stub = page.map_err(e("cannot map a page in it"))?;
    poke(pid, stub, &STUB).map_err(e("cannot write in it"))?;
    Ok(stub)
}

/// What the tracer knows of the run.
struct Tracer {
    pid: u32,
    stub: u64,
    /// The module's id in the server.
    id: u64,
    /// Counters of the module.
    counters: u64,
    /// Breakpoints: address -> the trampoline to resume at.
    traps: HashMap<u64, u64>,
    /// One-shot probes (hit mode): address -> the block marked when it
    /// is taken, and the byte put back.
    onces: HashMap<u64, (u64, u8)>,
    /// The bytes each patch replaced, and whether it is a breakpoint
    /// (attached: the breakpoints' are put back when the process is let
    /// go, nobody taking its traps then; all, if it could not be set up;
    /// the launch route keeps only the breakpoints').
    originals: Vec<(u64, Vec<u8>, bool)>,
    taken: u64,
    /// Threads set up or being followed.
    known: HashSet<u32>,
    /// New threads and processes announced by their creator, not stopped yet.
    announced: HashMap<u32, i32>,
    /// New ones stopped, not announced yet.
    early: HashSet<u32>,
    /// Threads left sharing their creator's array.
    sharing: u64,
    /// Images that exec'd (their counts lost).
    execs: u64,
    live: Live,
}

/// Place the trampoline area of `size` bytes within reach of `lo..hi`
/// (below the module first, then above, leaving the heap room to grow),
/// `want` first when given.
fn place_area(
    tid: u32,
    stub: u64,
    (lo, hi): (u64, u64),
    size: u64,
    want: Option<u64>,
) -> Option<u64> {
    const REACH: u64 = (1 << 31) - (16 << 20);
    const STEP: u64 = 1 << 20;
    let fits = |a: u64| a + size <= lo + REACH && hi <= a + REACH && a & 0xfff == 0;
    let mut tries: Vec<u64> = want.into_iter().filter(|&a| fits(a)).collect();
    for k in 0..256 {
        let d = size + (k + 1) * STEP;
        if lo >= d + STEP {
            tries.push((lo - d) & !0xffff);
        }
    }
    for k in 0..256 {
        tries.push(((hi + 0xffff) & !0xffff) + (1 << 30) + k * STEP);
    }
    for a in tries.into_iter().filter(|&a| fits(a)) {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE;
        match mmap(tid, stub, a, size, libc::PROT_READ | libc::PROT_EXEC, flags) {
            Ok(p) if p == a => return Some(a),
            Ok(p) => {
                // A kernel before 4.17 took the address as a hint.
                let _ = syscall(tid, stub, libc::SYS_munmap, [p, size, 0, 0, 0, 0]);
            }
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return None,
            Err(_) => {}
        }
    }
    None
}

fn line(r: &mut impl BufRead) -> Result<String, String> {
    let mut l = String::new();
    r.read_line(&mut l).map_err(|e| e.to_string())?;
    Ok(l.trim_end().to_string())
}

fn hex(s: Option<&str>) -> Result<u64, String> {
    s.and_then(|s| u64::from_str_radix(s, 16).ok())
        .ok_or_else(|| "the planning server's answer is not understood".into())
}

impl Tracer {
    /// At the first stop: the stub, the module's trampolines and patches,
    /// the main thread's array.
    fn prepare(pid: u32, server: &Server, live: Live) -> Result<Tracer, String> {
        let stub = make_stub(pid, pid)?;
        let mut t = Tracer::patched(pid, stub, server, &[], live)?;
        if !t.own_array(pid) {
            return Err("cannot map a counter array in it".into());
        }
        Ok(t)
    }

    /// Plan the executable of the stopped process `pid` through `server`,
    /// write its trampolines and patches (system calls run by `pid`'s
    /// main thread through `stub`), all its threads stopped. A patch over
    /// an instruction a stopped thread is in (`stopped`: its pc, and
    /// whether it is in a system call, which a restart runs again from
    /// 2 bytes back) is skipped and said to the server. The tracer,
    /// without any thread's array yet.
    fn patched(
        pid: u32,
        stub: u64,
        server: &Server,
        stopped: &[(u64, bool)],
        live: Live,
    ) -> Result<Tracer, String> {
        let e = |what: &'static str| move |err: io::Error| format!("{what}: {err}");
        let (path, dev, ino, bias, lo, hi) = module_of(pid)?;
        let conn = server
            .connect_for(pid)
            .map_err(e("cannot reach the planning server"))?;
        let mut r = BufReader::new(conn.try_clone().map_err(|e| e.to_string())?);
        let mut w = conn;
        let io = |err: io::Error| format!("the planning server: {err}");
        writeln!(w, "MOD {pid} {dev} {ino} {bias:x} {lo:x} {hi:x} {path}").map_err(io)?;
        let size_line = line(&mut r)?;
        let Some(rest) = size_line.strip_prefix("SIZE ") else {
            return Err(format!("{path} could not be planned (see the notes)"));
        };
        let mut it = rest.split(' ');
        let size = hex(it.next())?;
        let counters = hex(it.next())?;
        let offer = it.next().map(|o| hex(Some(o))).transpose()?;
        let area = place_area(
            pid,
            stub,
            (lo, hi),
            size,
            offer.map(|o| bias.wrapping_add(o)),
        )
        .ok_or("no room for its trampolines within 2 GiB of its code")?;
        writeln!(w, "AT {area:x} {RESERVED:x}").map_err(io)?;
        let code_line = line(&mut r)?;
        let mut it = code_line
            .strip_prefix("TEXT ")
            .ok_or("the planning server sent no code")?
            .split(' ');
        let (len, np, id) = (hex(it.next())?, hex(it.next())?, hex(it.next())?);
        if len > size {
            return Err("the planning server sent too much code".into());
        }
        let mut code = vec![0u8; len as usize];
        r.read_exact(&mut code).map_err(io)?;
        poke(pid, area, &code).map_err(e("cannot write its trampolines"))?;
        let mut traps = HashMap::new();
        let mut onces = HashMap::new();
        let mut originals = Vec::new();
        let attach = !stopped.is_empty();
        let mut skipped = Vec::new();
        let mut rec = [0u8; crate::encode::wire::WIRE];
        let mut patches = Vec::with_capacity(np.min(1 << 20) as usize);
        for _ in 0..np {
            r.read_exact(&mut rec).map_err(io)?;
            patches.push(crate::encode::wire::patch_of(&rec, bias, area));
        }
        let busy = busy_patches(&patches, stopped);
        let mem = File::open(format!("/proc/{pid}/mem")).map_err(e("cannot read its memory"))?;
        for (p, busy) in patches.iter().zip(busy) {
            // A one-shot probe (hit mode): an `int3` the tracer takes
            // (`trap_to_trampoline`), for a block of this module.
            let once = p.kind == crate::encode::PATCH_ONCE;
            let bytes = match once {
                true => (p.entry < counters && p.len == 1).then(|| vec![0xcc]),
                false => p.bytes(),
            };
            let mut written =
                bytes.filter(|_| !busy && p.addr >= lo && p.addr + u64::from(p.len) <= hi);
            let int3 = p.kind == crate::encode::PATCH_INT3;
            let mut was = Vec::new();
            if let (true, Some(b)) = (int3 || once || attach, &written) {
                // Put back when an attached process is let go (the
                // breakpoints), or could not be set up (all): a patch
                // whose bytes cannot be read first is not written, nor a
                // probe on the program's own `int3`.
                was = vec![0u8; b.len()];
                match mem.read_exact_at(&mut was, p.addr) {
                    Ok(()) if once && was[0] == 0xcc => written = None,
                    Ok(()) => originals.push((p.addr, was.clone(), int3 || once)),
                    Err(_) => written = None,
                }
            }
            match written.map(|b| poke(pid, p.addr, &b)) {
                Some(Ok(())) => {
                    if int3 {
                        traps.insert(p.addr, p.entry);
                    }
                    if once {
                        onces.insert(p.addr, (p.entry, was[0]));
                    }
                }
                _ => skipped.push(p.addr),
            }
        }
        let told = writeln!(w, "DONE {:x}", skipped.len())
            .and_then(|()| skipped.iter().try_for_each(|a| writeln!(w, "S {a:x}")));
        if let Err(err) = told {
            if attach {
                // Its threads run on, without counter arrays: not into
                // the patches.
                for (addr, was, _) in &originals {
                    let _ = poke(pid, *addr, was);
                }
            }
            return Err(io(err));
        }
        drop((r, w));
        let t = Tracer {
            pid,
            stub,
            id,
            counters,
            traps,
            onces,
            originals,
            taken: 0,
            known: HashSet::from([pid]),
            announced: HashMap::new(),
            early: HashSet::new(),
            sharing: 0,
            execs: 0,
            live,
        };
        {
            let mut s = t.live.lock();
            s.totals = vec![0; counters as usize];
            s.procs.insert(pid);
        }
        Ok(t)
    }

    /// Give the stopped thread `tid` a counter array of its own.
    fn own_array(&mut self, tid: u32) -> bool {
        let tg = tgid(tid);
        let kept = self.live.lock().free.get_mut(&tg).and_then(Vec::pop);
        let len = ((RESERVED + self.counters) * 8 + 4095) & !4095;
        let Some(a) = kept.or_else(|| {
            mmap(
                tid,
                self.stub,
                0,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            )
            .ok()
        }) else {
            return false;
        };
        let ok = regs(tid).and_then(|mut r| {
            r.gs_base = a;
            set_regs(tid, &r)
        });
        if ok.is_ok() {
            self.live.lock().arrays.insert(tid, (tg, a));
        }
        ok.is_ok()
    }

    /// The new thread or process `tid` (made by `event`), stopped: set it
    /// up and let it run.
    fn start(&mut self, tid: u32, event: i32) {
        self.known.insert(tid);
        match event {
            libc::PTRACE_EVENT_FORK => {
                // Its copy of its parent thread's array, from zero.
                if let Ok(r) = regs(tid) {
                    let zero = vec![0u8; (self.counters * 8) as usize];
                    if poke(tid, r.gs_base + RESERVED * 8, &zero).is_ok() {
                        self.live.lock().arrays.insert(tid, (tid, r.gs_base));
                    }
                }
                self.live.lock().procs.insert(tid);
            }
            libc::PTRACE_EVENT_VFORK => {
                // Its parent's memory, and so its array.
                self.live.lock().procs.insert(tid);
            }
            _ => {
                if !self.own_array(tid) {
                    self.sharing += 1;
                }
            }
        }
        resume(tid, 0);
    }

    /// Follow the run until no traced process is left; CMD's status.
    /// `fg`: CMD's stops from the terminal and its exit, for job control
    /// (a launch's; an attached process has none).
    fn follow(&mut self, mut fg: Option<&mut Foreground>) -> ExitStatus {
        let mut status = ExitStatus::from_raw(0);
        while let Some((tid, st)) = wait(-1) {
            if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
                let mut s = self.live.lock();
                s.take(tid, false);
                s.procs.remove(&tid);
                s.free.remove(&tid);
                drop(s);
                if tid == self.pid {
                    status = ExitStatus::from_raw(st);
                    if let Some(fg) = fg.as_deref_mut() {
                        fg.ended(tid);
                    }
                }
                continue;
            }
            if !libc::WIFSTOPPED(st) {
                continue;
            }
            let sig = libc::WSTOPSIG(st);
            match st >> 16 {
                libc::PTRACE_EVENT_EXIT => {
                    self.live.lock().take(tid, true);
                    resume(tid, 0);
                }
                ev @ (libc::PTRACE_EVENT_CLONE
                | libc::PTRACE_EVENT_FORK
                | libc::PTRACE_EVENT_VFORK) => {
                    let new = event_msg(tid);
                    if self.early.remove(&new) {
                        self.start(new, ev);
                    } else {
                        self.announced.insert(new, ev);
                    }
                    resume(tid, 0);
                }
                libc::PTRACE_EVENT_EXEC => {
                    // Another program: let it go.
                    let mut s = self.live.lock();
                    if s.arrays.remove(&tid).is_some() {
                        self.execs += 1;
                    }
                    s.procs.remove(&tid);
                    drop(s);
                    ptrace(libc::PTRACE_DETACH, tid, 0, 0);
                }
                0 => self.signalled(tid, sig),
                libc::PTRACE_EVENT_STOP if !self.known.contains(&tid) => self.first_stop(tid),
                libc::PTRACE_EVENT_STOP
                    if matches!(
                        sig,
                        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
                    ) =>
                {
                    // A group stop (SIGSTOP, ^Z): it stays stopped until
                    // SIGCONT. CMD's from the terminal stops cprof too.
                    ptrace(libc::PTRACE_LISTEN, tid, 0, 0);
                    if let (true, Some(fg)) = (tid == self.pid, fg.as_deref_mut()) {
                        fg.stopped(tid, sig);
                    }
                }
                _ => resume(tid, 0),
            }
            if self.live.lock().ending {
                self.let_go();
                break;
            }
        }
        status
    }

    /// A new thread or process `tid` at its first stop: set up now, or
    /// once its creator's event names how it was made.
    fn first_stop(&mut self, tid: u32) {
        match self.announced.remove(&tid) {
            Some(ev) => self.start(tid, ev),
            // Announced later, by its creator's event.
            None => {
                self.early.insert(tid);
            }
        }
    }

    /// The run's counts as one report into the server's `out/`, read
    /// back with the notes; `status`, CMD's.
    fn finish(&mut self, status: ExitStatus, server: Server) -> TracedRun {
        let pid = self.pid;
        let mut report = format!("profdev-coverage 1\npid {pid}\ntraps {}\n", self.taken);
        let (unread, totals) = {
            let mut s = self.live.lock();
            // Threads whose exit was not seen (killed): read now if still possible.
            let left: Vec<u32> = s.arrays.keys().copied().collect();
            for tid in left {
                s.take(tid, false);
            }
            (s.unread, std::mem::take(&mut s.totals))
        };
        report.push_str(&format!("M {} {RESERVED} {}\n", self.id, self.counters));
        for (i, c) in totals.iter().enumerate().filter(|(_, c)| **c > 0) {
            report.push_str(&format!("{i:x} {c:x}\n"));
        }
        report.push_str("end\n");
        let file = server.reports_dir().join(format!("cov.{pid}.0"));
        let written = profdev_safefile::write_file(&file, report.as_bytes(), 0o600);
        let (modules, mut notes) = server.into_collected();
        if let Err(e) = written {
            notes.push(format!(
                "cannot write {}: {e}; nothing counted",
                file.display()
            ));
        }
        if unread > 0 {
            notes.push(format!(
                "the counts of {unread} threads could not be read (killed): they are not listed"
            ));
        }
        if self.sharing > 0 {
            notes.push(format!(
                "{} threads shared their creator's counter array (none could be mapped for them): \
                 their counts may race",
                self.sharing
            ));
        }
        if self.execs > 0 {
            notes.push(format!(
                "{} processes exec'd another program: what they ran before is not counted",
                self.execs
            ));
        }
        TracedRun {
            modules,
            notes,
            status,
        }
    }

    /// Thread `tid` stopped by signal `sig`.
    fn signalled(&mut self, tid: u32, sig: i32) {
        if sig == libc::SIGTRAP && self.trap_to_trampoline(tid) {
            resume(tid, 0);
            return;
        }
        if sig == libc::SIGSTOP && !self.known.contains(&tid) {
            self.first_stop(tid);
            return;
        }
        resume(tid, sig);
    }
}

/// Wait for the seized CMD `pid` to stop at its exec (`PTRACE_EVENT_EXEC`,
/// inside the system call), then take it on to the system call's exit
/// (`PTRACE_SYSCALL`): stopped there, with its return value written, its
/// registers are its own to change and no instruction of it has run.
fn first_stop(pid: u32) -> Result<(), String> {
    match wait(pid as i32) {
        Some((_, st)) if libc::WIFSTOPPED(st) && st >> 16 == libc::PTRACE_EVENT_EXEC => {}
        _ => return Err("it did not stop at its exec".into()),
    }
    ptrace(libc::PTRACE_SYSCALL, pid, 0, 0);
    match wait(pid as i32) {
        Some((_, st))
            if libc::WIFSTOPPED(st) && libc::WSTOPSIG(st) == libc::SIGTRAP && st >> 16 == 0 =>
        {
            Ok(())
        }
        _ => Err("it did not stop at its start".into()),
    }
}

/// Run `cmd` (a statically linked program) counted by patching it at its
/// first stop (the module doc), planned by `server`; `live` is for the
/// caller's signals. Err (one sentence) when it could not be set up: CMD
/// was then killed before its first instruction (or not started), and
/// may be counted another way.
pub fn run_traced(
    cmd: &mut Command,
    server: Server,
    live: &Live,
    fg: &mut Foreground,
) -> Result<TracedRun, String> {
    // CMD is seized (PTRACE_SEIZE, so that its stops can be honoured:
    // PTRACE_LISTEN) between its fork and its exec: the child sends its
    // pid through one pipe and waits for a byte on the other before it
    // execs; no byte (the seize failed) and it gives up. The fork and
    // exec are another thread's (spawn returns once CMD has exec'd).
    let pipe = || {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| format!("cannot make a pipe: {e}"))
    };
    let (said_r, said_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    let (said, go) = (said_w.as_raw_fd(), go_r.as_raw_fd());
    // SAFETY: the hook runs between fork and exec and makes only
    // async-signal-safe system calls on integers and its own stack.
    unsafe {
        cmd.pre_exec(move || {
            let pid = libc::getpid().to_ne_bytes();
            let mut byte = 0u8;
            if libc::write(said, pid.as_ptr().cast(), 4) != 4
                || libc::read(go, (&mut byte as *mut u8).cast(), 1) != 1
            {
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
            Ok(())
        });
    }
    let ready: Result<(u32, Result<Tracer, String>), String> = std::thread::scope(|s| {
        let spawned = s.spawn(move || {
            let child = cmd.spawn();
            // The child has its own copies (closed as it execs or exits):
            // the reader sees the end if it never wrote.
            drop((said_w, go_r));
            child
        });
        let mut pid = [0u8; 4];
        let seized = rustix::io::read(&said_r, &mut pid)
            .ok()
            .filter(|&n| n == 4)
            .map(|_| u32::from_ne_bytes(pid))
            .ok_or_else(|| "it did not start".to_string())
            .and_then(|pid| {
                let opts = libc::PTRACE_O_TRACECLONE
                    | libc::PTRACE_O_TRACEFORK
                    | libc::PTRACE_O_TRACEVFORK
                    | libc::PTRACE_O_TRACEEXEC
                    | libc::PTRACE_O_TRACEEXIT
                    | libc::PTRACE_O_EXITKILL;
                if ptrace(libc::PTRACE_SEIZE, pid, 0, opts as u64) != 0 {
                    return Err(format!("ptrace: {}", io::Error::last_os_error()));
                }
                rustix::io::write(&go_w, &[1])
                    .map(|_| pid)
                    .map_err(|e| format!("cannot start it: {e}"))
            });
        drop(go_w);
        let child = spawned.join().map_err(|_| "cannot run it".to_string())?;
        let pid = seized?;
        child.map_err(|e| format!("cannot run it under ptrace: {e}"))?;
        Ok((
            pid,
            first_stop(pid).and_then(|()| Tracer::prepare(pid, &server, live.clone())),
        ))
    });
    let (pid, ready) = ready?;
    let mut t = match ready {
        Ok(t) => t,
        Err(e) => {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
            while wait(pid as i32).is_some_and(|(_, st)| libc::WIFSTOPPED(st)) {}
            live.lock().procs.clear();
            return Err(e);
        }
    };
    resume(pid, 0);
    let status = t.follow(Some(fg));
    Ok(t.finish(status, server))
}
