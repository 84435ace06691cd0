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

use crate::health::Health;
use crate::kit::{self, File, Snapshot};
use crate::tree::{Chan, DirEntry, OpenMode, Qid};
use crate::{Dev, DevError};
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
        let ctx = crate::DevContext {
            engine,
            kernel_text: text(),
            cpus: vec![0, 1],
            kernel_functions: Arc::from(vec![0x1000u64, 0x1800]),
        };
        let devs = crate::devtab(&ctx);
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
