//! prf — the operating system profiler (DG/UX prf(7), SVR4 `/dev/prf`).
//!
//! # Synopsis
//!
//! ```text
//! prf       0600  all processors together (DG/UX minor 255)
//! prf0      0600  processor 0 only (DG/UX minor 0)
//! …
//! prfK      0600  processor K only, one file per online CPU
//!
//! write: the address table            read: addresses, then counters
//! ioctl: PRF_GETSTATUS PRF_GETSIZE PRF_SETSTATE PRF_GETMAX
//!
//! stat/prf  0400  the device's health (crate::stat), reset by a table load
//! ```
//!
//! # Description
//!
//! The profiler is loaded with a sorted table of N kernel text addresses
//! (`prfld` loads the start of every kernel text symbol, after a leading
//! 0). While it is on, every tick of the sampling clock — 100 per second on
//! every CPU, as the seed's "every 100th of a second" — adds one to a
//! counter of the CPU that ticked:
//!
//! * counter N if the CPU was in user mode (or in a guest or hypervisor:
//!   anything but the kernel),
//! * counter N+1 if it was running its idle task,
//! * otherwise the counter of the largest loaded address not above the PC,
//!   found by SVR4's binary search (counter 0 if the PC is below
//!   `addr[1]`; the last counter for any PC at or above the last address).
//!
//! There is **one address table and one on/off state**, shared by all the
//! files: loading or switching through any of them acts on the profiler.
//! The **counters are per CPU**: `prfK` reads CPU K's, and `prf` reads their
//! sum, so the per-CPU files always add up to `prf` and `prf`'s total grows
//! N_cpus times as fast as one CPU's (the seed notes the same of minor 255).
//! DG/UX's `-f /dev/prfK` thus profiles one processor by reading its
//! counters; sampling the other processors as well costs nothing visible.
//!
//! Addresses and counters are native 64-bit words (little-endian on
//! x86_64), where SVR4 had 32-bit ones: Linux kernel addresses do not fit.
//!
//! **write** loads a table of N words. The checks come in the seed's order
//! and the first that fails decides:
//!
//! | condition | errno | profiler after |
//! |---|---|---|
//! | more than `PRF_GETMAX` words | ENOSPC | unchanged |
//! | not a whole number of words, or fewer than 3 | E2BIG | unchanged |
//! | profiler on | EBUSY | unchanged |
//! | (counters of every CPU zeroed, table copied) | | |
//! | some `addr[i] < addr[i-1]` (equal neighbours are fine) | EINVAL | no valid table, off |
//! | otherwise | returns the byte count | valid table, off |
//!
//! The file offset is ignored: every write is a whole load.
//!
//! **read** fails with ENXIO, copying nothing, unless a valid table is
//! loaded. Otherwise it returns, from the file offset on, as much of this
//! image as the caller asked for, and 0 (end of file) at its end, the
//! length `stat` reports:
//!
//! | offset | size | contents |
//! |---|---|---|
//! | 0 | 8·N | the addresses |
//! | 8·N | 8·N | the counter of each address |
//! | 16·N | 8 | user ticks |
//! | 16·N + 8 | 8 | idle ticks |
//!
//! Counters are read while sampling goes on; a read at offset 0 takes one
//! consistent snapshot (the seed warned that its reads might not be), and
//! the reads that continue it at higher offsets on the same descriptor are
//! served from it, so `cat prf` sees one image.
//!
//! **ioctl** takes its argument by value and returns its result as the
//! ioctl's return value, as SVR4 did:
//!
//! ```c
//! /* <prf.h> for profdev: _IO('P', n), the seed's numbers in the low byte */
//! #define PRF_ON          1       /* state bit: sampling */
//! #define PRF_VAL         2       /* state bit: a valid table is loaded */
//!
//! #define PRF_GETSTATUS   0x5001  /* ioctl(fd, PRF_GETSTATUS, 0) = state bits */
//! #define PRF_GETSIZE     0x5002  /* ioctl(fd, PRF_GETSIZE, 0) = N of the last table taken, even one refused as unsorted; 0 before any */
//! #define PRF_SETSTATE    0x5003  /* ioctl(fd, PRF_SETSTATE, on) = 0; bit 0 of on; */
//!                                 /*   no effect without a valid table (DG/UX) */
//! #define PRF_GETMAX      0x5004  /* ioctl(fd, PRF_GETMAX, 0) = most addresses a load may hold (130560) */
//! ```
//!
//! Any other command fails with EINVAL. SVR4 used the bare numbers 1, 2
//! and 3, but on Linux 1 and 2 are FIBMAP and FIGETBSZ, which the kernel's
//! VFS answers itself for every regular file (EFAULT with a 0 argument),
//! before a file system or driver sees them. So profdev keeps the seed's
//! numbers as the low byte of `_IO('P', n)`: same names, same calling
//! convention, numbers that reach the device.
//!
//! `PRF_GETMAX` is 130560. A table must reach the device in one FUSE
//! request, and Linux builds a request from at most 256 pages of the
//! caller's buffer (`fs.fuse.max_pages_limit`); a buffer that does not
//! start on a page boundary loses up to a page of that, so 1 MiB − 4 KiB
//! = 130560 words is the largest table that always arrives whole. A larger
//! write's first request is then already too large, so it fails as a whole
//! with ENOSPC instead of being loaded in part.
//!
//! **poll** and **select** always report the files ready, for reading and
//! for writing; **open** and **close** do nothing.
//!
//! **Access.** Only root, the mounting user and the users and groups the
//! mount names (`--allow-user`, `--allow-group`) may open, read, write or
//! send ioctls to these files: the file server checks every request's uid
//! (`profdev_dev::access`), whatever the modes say; others get EACCES.
//!
//! # Example
//!
//! ```text
//! % profdev prfld                     # load /proc/kallsyms' text symbols
//! % profdev prfstat on
//! profiling enabled
//! 64104 kernel text addresses
//! % profdev prfsnap /tmp/log; make -j2; profdev prfsnap /tmp/log
//! % profdev prfpr /tmp/log 1
//! % profdev prfsnap -f /run/profdev/prf1 /tmp/log1   # processor 1 only
//! ```
//!
//! # Bugs
//!
//! Counters are 64 bits and never wrap in practice.
//!
//! **Change from the seed:** SVR4's read ignored the file offset and always
//! copied from the start, so a program could read the same descriptor over
//! and over, and `cat prf` never ended. Here reads honour the offset and end
//! at the image's length, as every file in the mount does (`cat`, `cp`,
//! `tar`, `grep -r` all end). A single read of the whole image from offset
//! 0 — the seed's usage — returns exactly what it did. A program that reads
//! the same descriptor again must read at offset 0: `pread(fd, buf, n, 0)`
//! or `lseek(fd, 0, SEEK_SET)` first (`prfdc` does); a plain second
//! `read` returns 0. A read larger than one FUSE request (1 MiB) reaches the
//! device in pieces; they are served from one snapshot taken for the piece
//! at offset 0. A sampling session that dies (the
//! engine reports an error) leaves the profiler "on" but counting nothing.
//! A kernel with more than 130559 distinct code addresses cannot be loaded
//! whole (`prfld`: "too many text symbols"); x86_64 Linux 6.18 has about
//! 64000. On a VM whose idle vCPUs' timers do not fire, those CPUs count no
//! idle ticks (`perf record -a` sees the same).

use crate::dev::Dev;
use crate::engine::Engine;
use crate::error::DevError;
use crate::health::Health;
use crate::kit::{self, lock, File, Session, Snapshot};
use crate::tree::{Chan, DirEntry, OpenMode, Qid};
use profdev_core::{CpuMode, Record, Sample, SessionConfig};
use std::sync::{Arc, Mutex, MutexGuard};

/// State bit: sampling.
pub const PRF_ON: u32 = 1;
/// State bit: a valid address table is loaded.
pub const PRF_VAL: u32 = 2;

/// `_IO('P', 1)`: the state bits.
pub const PRF_GETSTATUS: u32 = 0x5001;
/// `_IO('P', 2)`: N, the number of loaded addresses.
pub const PRF_GETSIZE: u32 = 0x5002;
/// `_IO('P', 3)`: switch sampling with bit 0 of the by-value argument.
pub const PRF_SETSTATE: u32 = 0x5003;
/// `_IO('P', 4)`: the most addresses a load may hold.
pub const PRF_GETMAX: u32 = 0x5004;

/// Bytes per word of the table and the counters.
pub const WORD: usize = 8;
/// Default `PRF_GETMAX`: the words of 256 pages less one, the most a FUSE
/// request always carries whole, whatever the buffer's alignment.
pub const DEFAULT_MAXPRF: usize = ((256 - 1) * 4096) / WORD;
/// Default sampling frequency per CPU: the seed's 100th of a second.
pub const DEFAULT_FREQUENCY_HZ: u32 = 100;

/// The qid of `prf`, all CPUs; `prfK` is `Qid::file(K + 1)`.
const ALL: Qid = Qid::file(1 << 32);

/// Configuration of a prf device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrfConfig {
    /// The CPUs with a file of their own, in order.
    pub cpus: Vec<u32>,
    /// `PRF_GETMAX`.
    pub maxprf: usize,
    /// Sampling frequency per CPU.
    pub frequency_hz: u32,
}

impl PrfConfig {
    /// The defaults for these CPUs: 130560 addresses, 100 Hz.
    pub fn new(cpus: Vec<u32>) -> Self {
        PrfConfig {
            cpus,
            maxprf: DEFAULT_MAXPRF,
            frequency_hz: DEFAULT_FREQUENCY_HZ,
        }
    }
}

/// Which counters a file shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// `prf`: the sum over all CPUs.
    All,
    /// `prfK`: CPU K only.
    Cpu(u32),
}

/// SVR4's binary search: the counter for `pc` in the sorted table `addrs`,
/// the largest `i` with `addrs[i] <= pc` — or 0 when `pc < addrs[1]`, even
/// below `addrs[0]`.
pub fn bucket(addrs: &[u64], pc: u64) -> usize {
    let (mut l, mut h) = (0, addrs.len());
    loop {
        let m = (l + h) / 2;
        if m == l {
            return m;
        }
        if pc >= addrs[m] {
            l = m;
        } else {
            h = m;
        }
    }
}

/// The profiler's state without the sampling engine: the table, the state
/// bits and the per-CPU counters. Pure; every rule of write, read and the
/// ioctls lives here.
#[derive(Clone, Debug)]
pub struct PrfTable {
    maxprf: usize,
    status: u32,
    addrs: Vec<u64>,
    cpus: Vec<u32>,
    /// `counters[slot]`: N + 2 counters of `cpus[slot]`.
    counters: Vec<Vec<u64>>,
    /// Samples from a CPU without a file (hot-plugged after the mount).
    pub unknown_cpu_samples: u64,
    /// Loads tried so far: a read that continues a snapshot taken before
    /// another load starts over with a fresh one.
    loads: u64,
}

impl PrfTable {
    /// An empty profiler (state 0, N = 0) for `cpus`, holding at most
    /// `maxprf` addresses.
    pub fn new(cpus: &[u32], maxprf: usize) -> Self {
        PrfTable {
            maxprf,
            status: 0,
            addrs: Vec::new(),
            cpus: cpus.to_vec(),
            counters: vec![Vec::new(); cpus.len()],
            unknown_cpu_samples: 0,
            loads: 0,
        }
    }

    /// The state bits (`PRF_GETSTATUS`).
    pub fn status(&self) -> u32 {
        self.status
    }

    /// N (`PRF_GETSIZE`): the size of the last load that got past the size
    /// and state checks, valid or not; 0 before any.
    pub fn size(&self) -> usize {
        self.addrs.len()
    }

    /// `PRF_GETMAX`.
    pub fn maxprf(&self) -> usize {
        self.maxprf
    }

    /// The loaded addresses.
    pub fn addrs(&self) -> &[u64] {
        &self.addrs
    }

    /// Load a table from `data`, native words (write(2)).
    pub fn load(&mut self, data: &[u8]) -> Result<usize, DevError> {
        self.loads += 1;
        let len = data.len();
        if len > self.maxprf.saturating_mul(WORD) {
            return Err(DevError::NoSpace(format!(
                "a table of {len} bytes is more than the {} addresses ({} bytes) the profiler holds",
                self.maxprf,
                self.maxprf * WORD
            )));
        }
        if len % WORD != 0 || len < 3 * WORD {
            return Err(DevError::TooBig(format!(
                "a table of {len} bytes is not at least 3 whole {WORD}-byte addresses"
            )));
        }
        if self.status & PRF_ON != 0 {
            return Err(DevError::Busy(
                "the profiler is on; switch it off before loading".into(),
            ));
        }
        self.addrs = data
            .chunks_exact(WORD)
            .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or([0; WORD])))
            .collect();
        let counters = self.addrs.len() + 2;
        for c in &mut self.counters {
            *c = vec![0; counters];
        }
        if let Some(i) = (1..self.addrs.len()).find(|&i| self.addrs[i] < self.addrs[i - 1]) {
            self.status = 0;
            return Err(DevError::Invalid(format!(
                "addresses not sorted: address {i} ({:#x}) is below address {} ({:#x})",
                self.addrs[i],
                i - 1,
                self.addrs[i - 1]
            )));
        }
        self.status = PRF_VAL;
        Ok(len)
    }

    /// Switch sampling (`PRF_SETSTATE`): without a valid table, no effect.
    /// Returns true if the state bits changed.
    pub fn set_on(&mut self, on: bool) -> bool {
        if self.status & PRF_VAL == 0 {
            return false;
        }
        let new = PRF_VAL | if on { PRF_ON } else { 0 };
        let changed = new != self.status;
        self.status = new;
        changed
    }

    fn slot(&self, cpu: u32) -> Option<usize> {
        self.cpus.iter().position(|&c| c == cpu)
    }

    /// Count `r` if it is a sample; tell `health` of a tick counter 0
    /// took (a kernel pc below the table's second address: prfld's 0 in
    /// front) or that no CPU file could take.
    fn count(&mut self, r: &Record, health: &Health) {
        if let Record::Sample(s) = r {
            let on = self.status & PRF_ON != 0;
            if self.tick(s) == Some(0) || (on && self.slot(s.cpu).is_none()) {
                health.symbol_miss();
            }
        }
    }

    /// One tick of the sampling clock: counted only while on. The counter
    /// it went to.
    pub fn tick(&mut self, s: &Sample) -> Option<usize> {
        if self.status & PRF_ON == 0 {
            return None;
        }
        let Some(slot) = self.slot(s.cpu) else {
            self.unknown_cpu_samples += 1;
            return None;
        };
        let n = self.addrs.len();
        let i = if s.is_idle() {
            n + 1
        } else if s.mode != CpuMode::Kernel {
            n
        } else {
            bucket(&self.addrs, s.ip)
        };
        let c = &mut self.counters[slot][i];
        *c = c.wrapping_add(1);
        Some(i)
    }

    /// Bytes of the table and the counters.
    fn memory_bytes(&self) -> u64 {
        let words = self.addrs.capacity() + self.counters.iter().map(Vec::capacity).sum::<usize>();
        (words * WORD) as u64
    }

    /// The N + 2 counters a view shows, or None without a valid table or
    /// for a CPU without a file.
    pub fn counters(&self, view: View) -> Option<Vec<u64>> {
        if self.status & PRF_VAL == 0 {
            return None;
        }
        match view {
            View::Cpu(cpu) => Some(self.counters[self.slot(cpu)?].clone()),
            View::All => {
                let mut sum = vec![0u64; self.addrs.len() + 2];
                for c in &self.counters {
                    for (s, v) in sum.iter_mut().zip(c) {
                        *s = s.wrapping_add(*v);
                    }
                }
                Some(sum)
            }
        }
    }

    /// The bytes a read returns (read(2)): ENXIO without a valid table.
    pub fn image(&self, view: View) -> Result<Vec<u8>, DevError> {
        let counters = self.counters(view).ok_or_else(|| {
            DevError::NoDevice("no valid address table is loaded (run prfld)".into())
        })?;
        let mut out = Vec::with_capacity((self.addrs.len() + counters.len()) * WORD);
        for w in self.addrs.iter().chain(&counters) {
            out.extend_from_slice(&w.to_ne_bytes());
        }
        Ok(out)
    }

    /// The length of a read's image (0 without a valid table).
    pub fn image_len(&self) -> u64 {
        if self.status & PRF_VAL == 0 {
            0
        } else {
            ((2 * self.addrs.len() + 2) * WORD) as u64
        }
    }
}

/// The prf device.
pub struct Prf {
    config: PrfConfig,
    table: Arc<Mutex<PrfTable>>,
    session: Session,
    /// `prf`, then `prfN` for each CPU.
    files: Vec<File>,
}

impl Prf {
    /// A device for `config`, sampling through `engine` while on.
    pub fn new(config: PrfConfig, engine: Engine) -> Self {
        let table = PrfTable::new(&config.cpus, config.maxprf);
        let mut files = vec![File::new("prf", ALL, 0o600)];
        for &cpu in &config.cpus {
            let qid = Qid::file(u64::from(cpu) + 1);
            files.push(File::named(format!("prf{cpu}"), qid, 0o600));
        }
        let session = Session::new(engine);
        session.health().set_rate_asked(config.frequency_hz);
        session.health().set_memory(table.memory_bytes());
        Prf {
            config,
            table: Arc::new(Mutex::new(table)),
            session,
            files,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PrfConfig {
        &self.config
    }

    /// Count the samples among `records`: the tick entry point, used by the
    /// engine's sink and directly by tests.
    pub fn feed(&self, records: &[Record]) {
        let mut t = self.lock_table();
        for r in records {
            t.count(r, self.session.health());
        }
    }

    /// A copy of the pure state.
    pub fn table(&self) -> PrfTable {
        self.lock_table().clone()
    }

    fn lock_table(&self) -> MutexGuard<'_, PrfTable> {
        lock(&self.table)
    }

    fn view(&self, qid: Qid) -> Option<View> {
        if qid == ALL {
            return Some(View::All);
        }
        let k = qid.number().checked_sub(1)?;
        let cpu = u32::try_from(k).ok()?;
        (!qid.is_dir() && self.config.cpus.contains(&cpu)).then_some(View::Cpu(cpu))
    }

    /// PRF_SETSTATE: start or stop the engine's session with the state.
    fn set_state(&self, on: bool) -> Result<(), DevError> {
        if on {
            let config = SessionConfig::system(self.config.frequency_hz);
            self.session.start(
                |running| {
                    let mut t = self.lock_table();
                    // DG/UX: no effect without a valid table.
                    if running || t.status() & PRF_VAL == 0 {
                        return None;
                    }
                    // On before the session starts, so its first samples count.
                    t.set_on(true);
                    Some(config)
                },
                {
                    let health = self.session.health().clone();
                    kit::feeder(&self.table, move |t: &mut PrfTable, r: &Record| {
                        t.count(r, &health)
                    })
                },
                || {
                    self.lock_table().set_on(false);
                },
            )?;
        } else {
            // Drain the samples taken so far while still on, then switch
            // off (a table cannot be loaded while on, so a running session
            // means a valid one).
            self.session.stop(|| {
                self.lock_table().set_on(false);
            });
        }
        Ok(())
    }
}

impl Dev for Prf {
    fn name(&self) -> &'static str {
        "prf"
    }

    fn gen(&self, dir: Qid) -> Result<Vec<DirEntry>, DevError> {
        let len = self.lock_table().image_len();
        kit::gen(&self.files, dir, |_| len)
    }

    fn stat(&self, qid: Qid) -> Result<DirEntry, DevError> {
        kit::stat(&self.files, qid, |_| self.lock_table().image_len())
    }

    fn open(&self, qid: Qid, mode: OpenMode) -> Result<Chan, DevError> {
        kit::open(&self.files, qid, mode)
    }

    fn read(&self, chan: &mut Chan, offset: u64, count: u32) -> Result<Vec<u8>, DevError> {
        let view = self.view(chan.qid).ok_or(DevError::Perm)?;
        let (loads, valid) = {
            let t = self.lock_table();
            (t.loads, t.status() & PRF_VAL != 0)
        };
        // One read's image is kept by the channel so that the pieces of one
        // large read (FUSE splits reads over 1 MiB) come from the same
        // snapshot; its version is the table's load count.
        let current = Snapshot::of(chan).is_some_and(|s| s.version == loads);
        if offset == 0 || !current || !valid {
            let t = self.lock_table();
            let image = t.image(view)?;
            Snapshot::attach_version(chan, t.loads, image);
        }
        Snapshot::read(chan, offset, count)
    }

    fn write(&self, chan: &mut Chan, _offset: u64, data: &[u8]) -> Result<usize, DevError> {
        self.view(chan.qid).ok_or(DevError::Perm)?;
        let mut t = self.lock_table();
        let r = t.load(data);
        // A load that got past the size and state checks zeroed the
        // counters: the health restarts with them. (No session runs: a
        // table cannot be loaded while on.)
        if r.is_ok() || matches!(r, Err(DevError::Invalid(_))) {
            self.session.health().reset();
        }
        self.session.health().set_memory(t.memory_bytes());
        r
    }

    fn health(&self) -> Option<Arc<Health>> {
        Some(self.session.health().clone())
    }

    fn ioctl(
        &self,
        chan: &mut Chan,
        cmd: u32,
        arg: u64,
        _input: &[u8],
        _out_size: u32,
    ) -> Result<(i32, Vec<u8>), DevError> {
        self.view(chan.qid).ok_or(DevError::NoIoctl)?;
        let value = |v: usize| i32::try_from(v).unwrap_or(i32::MAX);
        let result = match cmd {
            PRF_GETSTATUS => self.lock_table().status() as i32,
            PRF_GETSIZE => value(self.lock_table().size()),
            PRF_SETSTATE => {
                self.set_state(arg & u64::from(PRF_ON) != 0)?;
                0
            }
            PRF_GETMAX => value(self.config.maxprf),
            _ => {
                return Err(DevError::Invalid(format!(
                    "unknown prf ioctl {cmd:#x} (PRF_GETSTATUS {PRF_GETSTATUS:#x}, PRF_GETSIZE \
                     {PRF_GETSIZE:#x}, PRF_SETSTATE {PRF_SETSTATE:#x}, PRF_GETMAX {PRF_GETMAX:#x})"
                )))
            }
        };
        Ok((result, Vec::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ReplayFactory;

    const TV_R1: [u64; 4] = [0, 0xC000_1000, 0xC000_2000, 0xC000_3000];

    fn words(ws: &[u64]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    fn kernel(cpu: u32, ip: u64) -> Record {
        Record::Sample(Sample {
            ip,
            cpu,
            pid: 42,
            tid: 42,
            mode: CpuMode::Kernel,
            ..Default::default()
        })
    }

    fn user(cpu: u32) -> Record {
        Record::Sample(Sample {
            ip: 0x40_0000,
            cpu,
            pid: 42,
            tid: 42,
            mode: CpuMode::User,
            ..Default::default()
        })
    }

    fn idle(cpu: u32) -> Record {
        Record::Sample(Sample {
            ip: 0xC000_3010,
            cpu,
            pid: 0,
            tid: 0,
            mode: CpuMode::Kernel,
            ..Default::default()
        })
    }

    fn device(cpus: &[u32], maxprf: usize, replay: Vec<Record>) -> Prf {
        let mut config = PrfConfig::new(cpus.to_vec());
        config.maxprf = maxprf;
        Prf::new(config, Engine::new(Arc::new(ReplayFactory::new(replay))))
    }

    fn ioctl(p: &Prf, qid: Qid, cmd: u32, arg: u64) -> Result<i32, DevError> {
        let mut c = p.open(qid, OpenMode::Read).unwrap();
        p.ioctl(&mut c, cmd, arg, &[], 0).map(|(r, _)| r)
    }

    fn load(p: &Prf, qid: Qid, data: &[u8]) -> Result<usize, DevError> {
        let mut c = p.open(qid, OpenMode::Write).unwrap();
        p.write(&mut c, 0, data)
    }

    fn read(p: &Prf, qid: Qid, count: u32) -> Result<Vec<u8>, DevError> {
        let mut c = p.open(qid, OpenMode::Read).unwrap();
        p.read(&mut c, 0, count)
    }

    #[test]
    fn tv_r1_binary_search() {
        for (pc, want) in [
            (0x10, 0),
            (0xC000_0FFF, 0),
            (0xC000_1000, 1),
            (0xC000_2500, 2),
            (0xC000_3000, 3),
            (0xFFFF_FFFF, 3),
            (u64::MAX, 3),
        ] {
            assert_eq!(bucket(&TV_R1, pc), want, "pc {pc:#x}");
        }
        // Equal neighbours: the last of them counts.
        assert_eq!(bucket(&[0, 0x10, 0x10, 0x20], 0x10), 2);

        let mut t = PrfTable::new(&[0], 1000);
        t.load(&words(&TV_R1)).unwrap();
        t.set_on(true);
        for r in [kernel(0, 0x10), kernel(0, 0xC000_2500), user(0), idle(0)] {
            let Record::Sample(s) = r else { unreachable!() };
            t.tick(&s);
        }
        assert_eq!(t.counters(View::All).unwrap(), [1, 0, 1, 0, 1, 1]);
    }

    #[test]
    fn tv_r2_write_checks_in_the_seeds_order() {
        let p = device(&[0, 1], 1000, vec![]);
        // The spec's byte counts are for 4-byte words; here words are 8 bytes.
        let cases: &[(usize, &str)] = &[
            (8, "E2BIG"),     // one word
            (14, "E2BIG"),    // not whole words
            (16, "E2BIG"),    // two words (the spec's "8 bytes")
            (28, "E2BIG"),    // 3.5 words (the spec's "14 bytes")
            (8008, "ENOSPC"), // 1001 words (the spec's "4004 bytes")
            (8010, "ENOSPC"), // ENOSPC is checked before alignment
        ];
        for &(len, want) in cases {
            let err = load(&p, ALL, &vec![0; len]).unwrap_err();
            let got = match err {
                DevError::TooBig(_) => "E2BIG",
                DevError::NoSpace(_) => "ENOSPC",
                _ => "other",
            };
            assert_eq!(got, want, "{len} bytes: {err}");
            assert_eq!(p.table().status(), 0, "state unchanged");
            assert_eq!(p.table().size(), 0, "state unchanged");
        }
        // Exactly maxprf words is fine.
        let full: Vec<u64> = (0..1000).collect();
        assert_eq!(load(&p, ALL, &words(&full)), Ok(8000));
        assert_eq!(p.table().status(), PRF_VAL);

        // A good load, then ON: EBUSY, and nothing changes.
        load(&p, ALL, &words(&TV_R1)).unwrap();
        ioctl(&p, ALL, PRF_SETSTATE, 1).unwrap();
        p.feed(&[kernel(1, 0xC000_1004)]);
        let before = read(&p, ALL, 1 << 16).unwrap();
        let busy = load(&p, Qid::file(1), &words(&[0, 1, 2])).unwrap_err();
        assert!(matches!(busy, DevError::Busy(_)), "{busy}");
        // Size checks still come first while on.
        assert!(matches!(load(&p, ALL, &[0; 16]), Err(DevError::TooBig(_))));
        assert_eq!(read(&p, ALL, 1 << 16).unwrap(), before);
        assert_eq!(p.table().status(), PRF_ON | PRF_VAL);
        ioctl(&p, ALL, PRF_SETSTATE, 0).unwrap();

        // Unsorted: EINVAL, then no valid table and reads fail with ENXIO.
        let e = load(&p, ALL, &words(&[0, 0x20, 0x10])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: addresses not sorted: address 2 (0x10) is below address 1 (0x20)"
        );
        assert_eq!(p.table().status(), 0);
        assert!(matches!(read(&p, ALL, 100), Err(DevError::NoDevice(_))));
        assert!(matches!(
            read(&p, Qid::file(2), 100),
            Err(DevError::NoDevice(_))
        ));
        // SETSTATE without a valid table has no effect (DG/UX).
        assert_eq!(ioctl(&p, ALL, PRF_SETSTATE, 1), Ok(0));
        assert_eq!(ioctl(&p, ALL, PRF_GETSTATUS, 0), Ok(0));

        // Equal neighbours are accepted.
        assert_eq!(load(&p, ALL, &words(&[0, 0x10, 0x10])), Ok(24));
        assert_eq!(p.table().status(), PRF_VAL);
    }

    #[test]
    fn tv_r3_ioctls() {
        let p = device(&[0], 1000, vec![]);
        // Before any load: SETSTATE has no effect (DG/UX; SVR4 said EINVAL).
        assert_eq!(ioctl(&p, ALL, PRF_SETSTATE, 1), Ok(0));
        assert_eq!(ioctl(&p, ALL, PRF_GETSTATUS, 0), Ok(0));
        assert_eq!(ioctl(&p, ALL, PRF_GETSIZE, 0), Ok(0));
        assert_eq!(ioctl(&p, ALL, PRF_GETMAX, 0), Ok(1000));

        load(&p, ALL, &words(&TV_R1)).unwrap();
        assert_eq!(ioctl(&p, ALL, PRF_GETSTATUS, 0), Ok(2));
        assert_eq!(ioctl(&p, ALL, PRF_SETSTATE, 1), Ok(0));
        assert_eq!(ioctl(&p, ALL, PRF_GETSTATUS, 0), Ok(3));
        assert_eq!(ioctl(&p, ALL, PRF_GETSIZE, 0), Ok(4));
        assert_eq!(ioctl(&p, Qid::file(1), PRF_SETSTATE, 0x11), Ok(0));
        assert_eq!(ioctl(&p, Qid::file(1), PRF_GETSTATUS, 0), Ok(3));
        assert_eq!(ioctl(&p, ALL, PRF_SETSTATE, 0x10), Ok(0));
        assert_eq!(ioctl(&p, ALL, PRF_GETSTATUS, 0), Ok(2));
        for bad in [9, 1, 2, 3, 4, 0x5000, 0x5005] {
            assert!(
                matches!(ioctl(&p, ALL, bad, 0), Err(DevError::Invalid(_))),
                "cmd {bad:#x}"
            );
        }
    }

    #[test]
    fn read_layout_truncation_and_per_cpu_sums() {
        let p = device(&[0, 2], 1000, vec![]);
        load(&p, ALL, &words(&TV_R1)).unwrap();
        ioctl(&p, ALL, PRF_SETSTATE, 1).unwrap();
        p.feed(&[
            kernel(0, 0xC000_1000),
            kernel(2, 0xC000_1000),
            kernel(2, 0xC000_2000),
            user(0),
            idle(2),
            idle(2),
            kernel(7, 0xC000_1000), // no such CPU
        ]);
        let all = read(&p, ALL, 1 << 16).unwrap();
        assert_eq!(all.len(), 80);
        assert_eq!(
            all,
            words(&[0, 0xC000_1000, 0xC000_2000, 0xC000_3000, 0, 2, 1, 0, 1, 2])
        );
        let cpu0 = read(&p, Qid::file(1), 1 << 16).unwrap();
        assert_eq!(&cpu0[32..], words(&[0, 1, 0, 0, 1, 0]));
        let cpu2 = read(&p, Qid::file(3), 1 << 16).unwrap();
        assert_eq!(&cpu2[32..], words(&[0, 1, 1, 0, 0, 2]));
        assert_eq!(p.table().unknown_cpu_samples, 1);
        // Truncated to the caller's count, at any byte.
        assert_eq!(read(&p, ALL, 13).unwrap(), all[..13]);
        assert_eq!(read(&p, ALL, 40).unwrap(), all[..40]);
        // Stat shows the image length; unknown files do not open.
        assert_eq!(p.stat(Qid::file(3)).unwrap().length, 80);
        assert_eq!(
            p.open(Qid::file(2), OpenMode::Read).unwrap_err(),
            DevError::NotFound
        );
        let names: Vec<String> = p
            .gen(Qid::ROOT)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["prf", "prf0", "prf2"]);

        // Off: ticks are ignored; a reload zeroes every CPU's counters.
        ioctl(&p, ALL, PRF_SETSTATE, 0).unwrap();
        p.feed(&[kernel(0, 0xC000_1000)]);
        assert_eq!(read(&p, ALL, 1 << 16).unwrap(), all);
        load(&p, ALL, &words(&TV_R1)).unwrap();
        assert_eq!(&read(&p, ALL, 1 << 16).unwrap()[32..], &[0; 48]);
    }

    #[test]
    fn one_read_is_one_snapshot_even_in_pieces() {
        let p = device(&[0], 1000, vec![]);
        load(&p, ALL, &words(&TV_R1)).unwrap();
        ioctl(&p, ALL, PRF_SETSTATE, 1).unwrap();
        let mut c = p.open(ALL, OpenMode::Read).unwrap();
        let first = p.read(&mut c, 0, 40).unwrap();
        p.feed(&[kernel(0, 0xC000_3000)]);
        let second = p.read(&mut c, 40, 40).unwrap();
        assert_eq!(
            &second[..],
            &[0; 40][..],
            "the piece at offset 40 is from the same snapshot"
        );
        assert_eq!(first, words(&[0, 0xC000_1000, 0xC000_2000, 0xC000_3000, 0]));
        // A read at offset 0 takes a new one.
        assert_eq!(p.read(&mut c, 0, 80).unwrap()[56..64], 1u64.to_ne_bytes());
    }

    #[test]
    fn sampling_through_the_engine() {
        let p = device(
            &[0, 1],
            1000,
            vec![kernel(0, 0xC000_2004), kernel(1, 0xC000_2008), user(1)],
        );
        load(&p, ALL, &words(&TV_R1)).unwrap();
        ioctl(&p, ALL, PRF_SETSTATE, 1).unwrap();
        ioctl(&p, ALL, PRF_SETSTATE, 0).unwrap();
        let all = read(&p, ALL, 1 << 16).unwrap();
        assert_eq!(&all[32..], words(&[0, 0, 2, 0, 1, 0]));
    }
}
