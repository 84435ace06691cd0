//! stat: every device's health, as files.
//!
//! # Synopsis
//!
//! ```text
//! stat/kprof   0400
//! stat/prf     0400
//! stat/gmon    0400
//! stat/prof    0444
//! ```
//!
//! # Description
//!
//! One file per sampling device of the mount, named after the device's
//! directory (`gmon`, `prof`) or, for a device whose files sit at the
//! root, after the device (`kprof`, `prf`). Each holds the device's
//! health ([`crate::health`]) as plain `name value` lines, one per key,
//! always the same keys in the same order:
//!
//! ```text
//! state on
//! rate_asked 1000
//! rate_achieved 997
//! samples 20734
//! lost 0
//! throttled 0
//! unwind_ok 0
//! unwind_failed_no_stack 0
//! unwind_failed_truncated 0
//! unwind_failed_unresolved 0
//! symbol_misses 11
//! sessions 1
//! memory_bytes 5718016
//! uptime_ms 10395
//! ```
//!
//! An open takes one snapshot of the numbers, so every read of that open
//! agrees; `stat` gives the length of a snapshot taken then. Reading never
//! waits for the sampler: the numbers are atomics the engine's thread
//! updates as it hands each batch over, not the device's state behind its
//! lock. The files live in their own directory, outside the devices'
//! own, whose listings the classic tools parse.
//!
//! Who may read a `stat/` file is who may use the mount (the server's
//! rule, [`crate::access`]); its mode is the read bits that the device's
//! readable files all share: 0400 where the device's data is the owner's
//! only (kpdata, prf, gmon.out), 0444 for prof, whose histograms are 0444.
//! Writes are refused.
//!
//! # Example
//!
//! ```text
//! $ echo startclr >/run/profdev/kpctl
//! $ grep -E '^(state|samples|lost) ' /run/profdev/stat/kprof
//! state on
//! samples 1988
//! lost 0
//! $ profdev stat --json
//! ```
//!
//! # Bugs
//!
//! The length `stat` reports is that of a snapshot taken at that moment;
//! a later open may read a few bytes more or fewer as numbers grow.
//! `rate_achieved` divides by the CPUs online when the session started.

use crate::dev::Dev;
use crate::error::DevError;
use crate::health::Health;
use crate::kit::{self, File, Snapshot};
use crate::tree::{Chan, DirEntry, OpenMode, Qid};
use std::sync::Arc;

/// The `stat/` directory: one file per device with a [`Health`].
pub struct Stat {
    files: Vec<File>,
    healths: Vec<Arc<Health>>,
}

impl Stat {
    /// The health files of `devs`, in table order.
    pub fn of(devs: &[Arc<dyn Dev>]) -> Self {
        let mut files = Vec::new();
        let mut healths = Vec::new();
        for dev in devs {
            let Some(h) = dev.health() else { continue };
            let name = if dev.dir_name().is_empty() {
                dev.name()
            } else {
                dev.dir_name()
            };
            let qid = Qid::file(files.len() as u64 + 1);
            files.push(File::named(name.to_string(), qid, read_bits(dev.as_ref())));
            healths.push(h);
        }
        Stat { files, healths }
    }

    fn text(&self, qid: Qid) -> Option<Vec<u8>> {
        let i = usize::try_from(qid.number()).ok()?.checked_sub(1)?;
        Some(self.healths.get(i)?.snapshot().text().into_bytes())
    }

    fn length(&self, qid: Qid) -> u64 {
        self.text(qid).map_or(0, |t| t.len() as u64)
    }
}

/// The read bits every readable file at `dev`'s top shares (0444 if it has
/// none): a health file is no more readable than the device's data.
fn read_bits(dev: &dyn Dev) -> u16 {
    dev.gen(Qid::ROOT)
        .unwrap_or_default()
        .iter()
        .filter(|e| !e.qid.is_dir() && e.perm & 0o400 != 0)
        .fold(0o444, |bits, e| bits & e.perm & 0o444)
}

impl Dev for Stat {
    fn name(&self) -> &'static str {
        "stat"
    }

    fn dir_name(&self) -> &'static str {
        "stat"
    }

    fn gen(&self, dir: Qid) -> Result<Vec<DirEntry>, DevError> {
        kit::gen(&self.files, dir, |q| self.length(q))
    }

    fn stat(&self, qid: Qid) -> Result<DirEntry, DevError> {
        kit::stat(&self.files, qid, |q| self.length(q))
    }

    fn open(&self, qid: Qid, mode: OpenMode) -> Result<Chan, DevError> {
        let mut chan = kit::open(&self.files, qid, mode)?;
        if let Some(text) = self.text(qid) {
            Snapshot::attach(&mut chan, text);
        }
        Ok(chan)
    }

    fn read(&self, chan: &mut Chan, offset: u64, count: u32) -> Result<Vec<u8>, DevError> {
        Snapshot::read(chan, offset, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, ReplayFactory};
    use crate::kprof::{Kprof, KprofConfig};
    use profdev_core::{KernelPc, KernelText, Record, Sample};

    fn text() -> KernelText {
        KernelText {
            start: KernelPc(0x1000),
            end: KernelPc(0x2000),
        }
    }

    #[test]
    fn one_file_per_device_with_health() {
        let engine = Engine::new(Arc::new(ReplayFactory::new(vec![Record::Sample(Sample {
            ip: 0x1800,
            ..Default::default()
        })])));
        let ctx = crate::devtab::DevContext {
            engine,
            kernel_text: text(),
            cpus: vec![0, 1],
            kernel_functions: Arc::from(vec![0x1000u64, 0x1800]),
            prof_engines: Default::default(),
            objects: Default::default(),
        };
        let devs = crate::devtab::devtab(&ctx);
        let stat = devs.last().unwrap();
        assert_eq!(stat.dir_name(), "stat");
        let entries = stat.gen(Qid::ROOT).unwrap();
        let names: Vec<(&str, u16)> = entries.iter().map(|e| (e.name.as_str(), e.perm)).collect();
        assert_eq!(
            names,
            [
                ("kprof", 0o400),
                ("prf", 0o400),
                ("gmon", 0o400),
                ("prof", 0o444)
            ]
        );
        for e in &entries {
            let mut c = stat.open(e.qid, OpenMode::Read).unwrap();
            let t = String::from_utf8(stat.read(&mut c, 0, 4096).unwrap()).unwrap();
            assert!(t.starts_with("state off\nrate_asked "), "{t}");
            assert_eq!(t.len() as u64, e.length);
            assert_eq!(
                stat.open(e.qid, OpenMode::Write).unwrap_err(),
                DevError::Perm
            );
        }
    }

    fn write(dev: &dyn Dev, file: &str, msg: &[u8]) -> Result<usize, DevError> {
        let e = crate::tree::walk(dev, Qid::ROOT, file).unwrap();
        let mut c = dev.open(e.qid, OpenMode::Write).unwrap();
        dev.write(&mut c, 0, msg)
    }

    fn kernel(ip: u64, chain: &[u64]) -> Record {
        Record::Sample(Sample {
            ip,
            mode: profdev_core::CpuMode::Kernel,
            kernel_chain: chain.to_vec(),
            pid: 1,
            tid: 1,
            ..Default::default()
        })
    }

    /// kgmon's kernel callchains, each sample told once: walked (every
    /// callee in a function, every call site in text), nothing beyond the
    /// pc, cut at the kernel's depth limit, or a frame outside text.
    #[test]
    fn kgmon_tells_each_callchain_walk() {
        use crate::kgmon::{Kgmon, KgmonConfig};
        const LO: u64 = 0xffff_ffff_8100_0000;
        let (f0, f1, f2) = (LO, LO + 0x100, LO + 0x200);
        let text = KernelText {
            start: KernelPc(LO),
            end: KernelPc(LO + 0x402),
        };
        let engine = Engine::new(Arc::new(ReplayFactory::new(vec![])));
        let k = Kgmon::new(KgmonConfig::new(text, &[f0, f1, f2]), engine);
        let h = k.health().unwrap();
        assert_eq!(
            h.snapshot().memory_bytes,
            0,
            "nothing allocated before begin"
        );
        write(&k, "ctl", b"begin").unwrap();
        assert!(h.snapshot().memory_bytes > 0);
        let mut deep = vec![f2 + 0x10];
        deep.extend(std::iter::repeat_n(f1 + 0x15, 126));
        let outside = 0xffff_ffff_c000_0010;
        k.feed(&[
            kernel(f2 + 0x10, &[f2 + 0x10, f1 + 0x15, f0 + 0x21]),
            kernel(f1 + 3, &[f1 + 3]),
            kernel(f2 + 0x10, &deep),
            kernel(f2 + 0x10, &[f2 + 0x10, outside]),
            kernel(outside, &[]),
        ]);
        let s = h.snapshot();
        assert_eq!(s.unwind_ok, 1);
        assert_eq!(
            s.unwind_failed,
            [2, 1, 1],
            "no_stack, truncated, unresolved"
        );
        assert_eq!(s.symbol_misses, 1, "one pc outside kernel text");
        write(&k, "ctl", b"reset").unwrap();
        let s = h.snapshot();
        assert_eq!(
            (s.unwind_ok, s.unwind_failed, s.symbol_misses),
            (0, [0; 3], 0)
        );
        assert_eq!(s.state, crate::health::State::On, "reset does not halt");
        write(&k, "ctl", b"halt").unwrap();
        assert_eq!(h.snapshot().state, crate::health::State::Off);
    }

    /// prf: a kernel pc below the table's second address (prfld's 0 in
    /// front) and a CPU without a file are misses; a load restarts the
    /// counts.
    #[test]
    fn prf_tells_its_misses_and_restarts_at_a_load() {
        use crate::prf::{Prf, PrfConfig, PRF_SETSTATE};
        let engine = Engine::new(Arc::new(ReplayFactory::new(vec![])));
        let p = Prf::new(PrfConfig::new(vec![0]), engine);
        let h = p.health().unwrap();
        assert_eq!(h.snapshot().rate_asked, 100);
        let table: Vec<u8> = [0u64, 0x1000, 0x2000]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        write(&p, "prf", &table).unwrap();
        assert!(h.snapshot().memory_bytes > 0);
        let e = crate::tree::walk(&p, Qid::ROOT, "prf").unwrap();
        let mut c = p.open(e.qid, OpenMode::Read).unwrap();
        p.ioctl(&mut c, PRF_SETSTATE, 1, &[], 0).unwrap();
        assert_eq!(h.snapshot().state, crate::health::State::On);
        let other_cpu = Sample {
            ip: 0x1500,
            cpu: 7,
            pid: 1,
            tid: 1,
            mode: profdev_core::CpuMode::Kernel,
            ..Default::default()
        };
        p.feed(&[
            kernel(0x500, &[]),
            kernel(0x1500, &[]),
            Record::Sample(other_cpu),
        ]);
        assert_eq!(h.snapshot().symbol_misses, 2);
        p.ioctl(&mut c, PRF_SETSTATE, 0, &[], 0).unwrap();
        write(&p, "prf", &table).unwrap();
        assert_eq!(h.snapshot().symbol_misses, 0, "a load restarts the counts");
        assert_eq!(h.snapshot().sessions, 0);
    }

    /// prof: a user pc in no known module is a miss; `interval` sets the
    /// rate asked; `end` restarts everything.
    #[test]
    fn prof_tells_its_misses_and_restarts_at_end() {
        use crate::prof::Prof;
        let p = Prof::new(Engine::new(Arc::new(ReplayFactory::new(vec![]))));
        let h = p.health().unwrap();
        assert_eq!(h.snapshot().rate_asked, 10, "Inferno's 100 ms");
        write(&p, "ctl", b"interval 1").unwrap();
        assert_eq!(h.snapshot().rate_asked, 1000);
        write(&p, "ctl", b"start").unwrap();
        p.feed(&[Record::Sample(Sample {
            ip: 0x40_1000,
            pid: u32::MAX - 1,
            tid: u32::MAX - 1,
            mode: profdev_core::CpuMode::User,
            ..Default::default()
        })]);
        let s = h.snapshot();
        assert_eq!((s.symbol_misses, s.sessions), (1, 1));
        assert_eq!(s.state, crate::health::State::On);
        write(&p, "ctl", b"end").unwrap();
        let s = h.snapshot();
        assert_eq!((s.symbol_misses, s.sessions, s.memory_bytes), (0, 0, 0));
        assert_eq!((s.state, s.rate_asked), (crate::health::State::Off, 10));
    }

    #[test]
    fn kprof_counts_show_and_restart_at_startclr() {
        let samples: Vec<Record> = [0x1800u64, 0x1808, 0x9000]
            .iter()
            .map(|&ip| {
                Record::Sample(Sample {
                    ip,
                    ..Default::default()
                })
            })
            .collect();
        let engine = Engine::new(Arc::new(ReplayFactory::new(samples)));
        let kprof: Arc<dyn Dev> = Arc::new(Kprof::new(KprofConfig::new(text()), engine));
        let stat = Stat::of(std::slice::from_ref(&kprof));
        let ctl = |msg: &str| {
            let mut c = kprof.open(Qid::file(1), OpenMode::Write).unwrap();
            kprof.write(&mut c, 0, msg.as_bytes()).unwrap();
        };
        let read = || {
            let mut c = stat.open(Qid::file(1), OpenMode::Read).unwrap();
            String::from_utf8(stat.read(&mut c, 0, 4096).unwrap()).unwrap()
        };
        let value = |t: &str, k: &str| -> String {
            t.lines()
                .find_map(|l| l.strip_prefix(&format!("{k} ")))
                .unwrap()
                .to_string()
        };
        ctl("start");
        assert_eq!(value(&read(), "state"), "on");
        ctl("stop"); // drains the replay
        let t = read();
        assert_eq!(value(&t, "state"), "off");
        assert_eq!(value(&t, "samples"), "3");
        assert_eq!(value(&t, "symbol_misses"), "1", "0x9000 is outside text");
        assert_eq!(value(&t, "sessions"), "1");
        ctl("start");
        ctl("stop");
        assert_eq!(value(&read(), "samples"), "6");
        ctl("startclr");
        ctl("stop");
        let t = read();
        assert_eq!(value(&t, "samples"), "3", "startclr restarts the counts");
        assert_eq!(value(&t, "sessions"), "1");
    }
}
