//! kprof — kernel profiling device (Inferno kprof(3)).
//!
//! # Synopsis
//!
//! ```text
//! kpctl     0600  write: start | stop | startclr
//! kpdata    0600  read: the big-endian PC histogram of kernel text
//! stat/kprof 0400 read: the device's health (crate::stat), reset by startclr
//! ```
//!
//! # Description
//!
//! While profiling is on, every tick of the sampling clock (software
//! cpu-clock, one event per online CPU, system wide, kernel and user mode;
//! 1000 Hz by default) adds one to word 0 of `kpdata` and one to the bucket
//! holding the interrupted PC, or to word 1 if the PC is outside kernel text
//! `[_stext, _etext)` or within its first six buckets (which the header
//! shadows). A user-mode PC is outside kernel text.
//!
//! `kpctl` takes exactly these messages (a trailing newline is ignored):
//!
//! | message | effect |
//! |---|---|
//! | `start` | profiling on; counts continue accumulating |
//! | `stop` | profiling off; every tick taken before is counted |
//! | `startclr` | zero the histogram, restore words 2–5, profiling on |
//!
//! Anything else fails with EINVAL and the message quoted back
//! (`unknown control message "stopwatch"`), changing nothing. The original
//! matched prefixes, so `stopwatch` stopped it and `startxyz` started it;
//! profdev matches verbs exactly, on purpose. Reading `kpctl` returns no
//! bytes; writing `kpdata` fails ("inappropriate use of fd").
//!
//! `kpdata` is `nbuf` 32-bit big-endian words, laid out as Inferno 4th
//! edition (see [`profdev_formats::kpdata`]): total ticks, outside ticks,
//! microseconds per tick, `nbuf`, sample size 4, log2 bucket size (3 by
//! default), then buckets over `[_stext, _etext)`. A partial last bucket is
//! rounded up, so nothing is ever written out of bounds.
//!
//! Reads follow the original: the offset must be a multiple of 4 ("bad arg
//! in system call" otherwise), a read is clipped to the file and rounded
//! down to whole words (a 1–3 byte read returns nothing), and a read at or
//! past the end returns nothing. Each open of `kpdata` sees one consistent
//! point-in-time snapshot taken at open, even while profiling runs (the
//! original said its reads "may not be consistent"). Unlike Inferno 4e,
//! `stat kpdata` reports its true length.
//!
//! # Backends
//!
//! By default ([`Kprof::new`]) the device counts the sample records of an
//! engine session in user space. With [`Kprof::with_counter`] it counts
//! nothing itself: a [`HistogramCounter`] (in profdev, the in-kernel BPF
//! histogram of `profdev_sample::bpf`) keeps the words, `start`/`stop`
//! enable and disable it, `startclr` clears it first, and each open of
//! `kpdata` snapshots its words. The files, verbs, layout and read rules
//! are the same; [`Kprof::feed`] is then ignored.
//!
//! **Access.** Only root, the mounting user and the users and groups the
//! mount names (`--allow-user`, `--allow-group`) may open, read or write
//! these files: the file server checks every request's uid
//! (`profdev_dev::access`), whatever the modes say; others get EACCES.
//! Both files end: kpdata's reads return 0 at the length `stat` gives.
//!
//! # Example
//!
//! ```text
//! % echo startclr >/run/profdev/kpctl
//! % dd if=/dev/zero of=/dev/null bs=1M count=20000
//! % echo stop >/run/profdev/kpctl
//! % cp /run/profdev/kpdata /tmp/kpdata
//! % profdev kprof /proc/kallsyms /tmp/kpdata
//! ```
//!
//! # Bugs
//!
//! Counters are 32 bits and wrap, as the original's did (at 1000 Hz on two
//! CPUs that takes about 24 days). There is one histogram per device server:
//! two users profiling at once share it, as on Inferno.

use crate::ctl::{self, Cmd};
use crate::dev::Dev;
use crate::engine::Engine;
use crate::error::DevError;
use crate::health::{Health, State};
use crate::kit::{self, lock, File, Session, Snapshot};
use crate::tree::{Chan, DirEntry, OpenMode, Qid};
use profdev_core::{KernelPc, KernelText, Record, SessionConfig, SourceError};
use profdev_formats::kpdata;
use std::sync::{Arc, Mutex, MutexGuard};

const KPCTL: Qid = Qid::file(1);
const KPDATA: Qid = Qid::file(2);
const FILES: &[File] = &[
    File::new("kpctl", KPCTL, 0o600),
    File::new("kpdata", KPDATA, 0o600),
];

/// Geometry and clock of a kprof device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KprofConfig {
    /// Kernel text, `[_stext, _etext)`; `_stext` is Inferno's KTZERO.
    pub text: KernelText,
    /// log2 of bytes per bucket (Inferno's LRES, 3).
    pub log_bucket: u32,
    /// Sampling frequency per CPU.
    pub frequency_hz: u32,
}

impl KprofConfig {
    /// The default geometry over `text`: 8-byte buckets, 1000 Hz.
    pub fn new(text: KernelText) -> Self {
        KprofConfig {
            text,
            log_bucket: kpdata::DEFAULT_LOG_BUCKET_SIZE,
            frequency_hz: 1000,
        }
    }

    /// Number of words in kpdata.
    pub fn words(&self) -> usize {
        kpdata::words_for(self.text.len(), self.log_bucket)
    }

    fn microseconds_per_tick(&self) -> u32 {
        1_000_000 / self.frequency_hz.max(1)
    }
}

/// A kpdata histogram kept outside the device (e.g. counted in the kernel
/// by a BPF program), in kpdata's word layout and host order, with words
/// 2–5 already set.
pub trait HistogramCounter: Send {
    /// Start counting (idempotent).
    fn enable(&mut self) -> Result<(), SourceError>;
    /// Stop counting; every tick taken before is counted.
    fn disable(&mut self);
    /// Zero the counts and restore words 2–5.
    fn clear(&mut self);
    /// The words now.
    fn words(&self) -> Vec<u32>;
}

/// A counter backend and whether it is on.
struct Counter {
    counter: Box<dyn HistogramCounter>,
    on: bool,
}

/// The histogram: the words of kpdata, in host order.
struct Histogram {
    config: KprofConfig,
    words: Vec<u32>,
    /// Where a tick outside kernel text in kernel mode is told.
    health: Arc<Health>,
}

impl Histogram {
    fn new(config: KprofConfig, health: Arc<Health>) -> Self {
        let mut h = Histogram {
            config,
            words: Vec::new(),
            health,
        };
        h.clear();
        h
    }

    /// Zero everything and rewrite words 2–5 (Inferno's kprofbufinit).
    fn clear(&mut self) {
        self.words = vec![0; self.config.words()];
        kpdata::init_header(
            &mut self.words,
            self.config.microseconds_per_tick(),
            self.config.log_bucket,
        );
    }

    /// Count `r` if it is a sample.
    fn count(&mut self, r: &Record) {
        if let Record::Sample(s) = r {
            if self.tick(KernelPc(s.ip)) == kpdata::OUTSIDE_TICKS
                && s.mode != profdev_core::CpuMode::User
            {
                self.health.symbol_miss();
            }
        }
    }

    /// One tick at `pc` (Inferno 4e kproftick); the word it went to.
    fn tick(&mut self, pc: KernelPc) -> usize {
        let c = &self.config;
        let w = &mut self.words;
        w[kpdata::TOTAL_TICKS] = w[kpdata::TOTAL_TICKS].wrapping_add(1);
        let first = c
            .text
            .start
            .0
            .saturating_add((kpdata::SPECIAL_WORDS as u64) << c.log_bucket);
        let slot = if pc.0 >= first && pc < c.text.end {
            ((pc.0 - c.text.start.0) >> c.log_bucket) as usize
        } else {
            kpdata::OUTSIDE_TICKS
        };
        w[slot] = w[slot].wrapping_add(1);
        slot
    }
}

/// The kprof device.
pub struct Kprof {
    config: KprofConfig,
    histogram: Arc<Mutex<Histogram>>,
    session: Session,
    counter: Option<Mutex<Counter>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CtlOp {
    Start,
    Stop,
    StartClr,
}

const CTL_TABLE: &[Cmd<CtlOp>] = &[
    Cmd::verb("start", CtlOp::Start),
    Cmd::verb("stop", CtlOp::Stop),
    Cmd::verb("startclr", CtlOp::StartClr),
];

impl Kprof {
    /// A device with the given geometry, sampling through `engine`.
    pub fn new(config: KprofConfig, engine: Engine) -> Self {
        let session = Session::new(engine);
        let health = session.health().clone();
        health.set_rate_asked(config.frequency_hz);
        health.set_memory(config.words() as u64 * 4);
        Kprof {
            config,
            histogram: Arc::new(Mutex::new(Histogram::new(config, health))),
            session,
            counter: None,
        }
    }

    /// A device whose histogram is kept by `counter` (which must have
    /// `config.words()` words) instead of counted from engine records.
    /// Fails, saying why, if the counter's geometry differs.
    pub fn with_counter(
        config: KprofConfig,
        counter: Box<dyn HistogramCounter>,
    ) -> Result<Self, DevError> {
        let n = counter.words().len();
        if n != config.words() {
            return Err(DevError::Sampling {
                msg: format!(
                    "the histogram counter has {n} words where kpdata needs {}",
                    config.words()
                ),
                permission: false,
            });
        }
        let engine = Engine::new(Arc::new(crate::engine::ReplayFactory::new(Vec::new())));
        let mut k = Kprof::new(config, engine);
        k.counter = Some(Mutex::new(Counter { counter, on: false }));
        Ok(k)
    }

    fn lock_counter(&self) -> Option<MutexGuard<'_, Counter>> {
        self.counter.as_ref().map(lock)
    }

    /// The device's geometry.
    pub fn config(&self) -> &KprofConfig {
        &self.config
    }

    /// Count the samples among `records`: the tick entry point, used by the
    /// engine's sink and directly by tests.
    pub fn feed(&self, records: &[Record]) {
        let mut h = lock(&self.histogram);
        for r in records {
            h.count(r);
        }
    }

    /// True while profiling is on.
    pub fn is_on(&self) -> bool {
        if let Some(c) = self.lock_counter() {
            return c.on;
        }
        self.session.is_running()
    }

    /// The current kpdata bytes (a consistent snapshot).
    pub fn snapshot(&self) -> Vec<u8> {
        if let Some(c) = self.lock_counter() {
            return kpdata::encode(&c.counter.words());
        }
        kpdata::encode(&lock(&self.histogram).words)
    }

    /// The running session's counts, if profiling is on.
    pub fn session_stats(&self) -> Option<profdev_core::SourceStats> {
        self.session.current()
    }

    fn start(&self) -> Result<(), DevError> {
        if let Some(mut c) = self.lock_counter() {
            if !c.on {
                c.counter.enable()?;
                c.on = true;
                self.session.health().set_state(State::On);
            }
            return Ok(());
        }
        let config = SessionConfig::system(self.config.frequency_hz);
        let sink = kit::feeder(&self.histogram, Histogram::count);
        self.session
            .start(|running| (!running).then_some(config), sink, || {})?;
        Ok(())
    }

    fn stop(&self) {
        if let Some(mut c) = self.lock_counter() {
            c.counter.disable();
            c.on = false;
            self.session.health().set_state(State::Off);
            return;
        }
        // Stopping drains the last samples into the histogram.
        self.session.stop(|| {});
    }

    fn ctl(&self, data: &[u8]) -> Result<(), DevError> {
        let (op, _) = ctl::parse(data, CTL_TABLE)?;
        match op {
            CtlOp::Start => self.start(),
            CtlOp::Stop => {
                self.stop();
                Ok(())
            }
            CtlOp::StartClr => {
                // Between two batches: the health restarts with kpdata.
                self.session.reset(|| {
                    if let Some(mut c) = self.lock_counter() {
                        c.counter.clear();
                    }
                    lock(&self.histogram).clear();
                });
                self.start()
            }
        }
    }
}

impl Kprof {
    fn length(&self, qid: Qid) -> u64 {
        if qid == KPDATA {
            self.config.words() as u64 * 4
        } else {
            0
        }
    }
}

impl Dev for Kprof {
    fn name(&self) -> &'static str {
        "kprof"
    }

    fn gen(&self, dir: Qid) -> Result<Vec<DirEntry>, DevError> {
        kit::gen(FILES, dir, |q| self.length(q))
    }

    fn stat(&self, qid: Qid) -> Result<DirEntry, DevError> {
        kit::stat(FILES, qid, |q| self.length(q))
    }

    fn open(&self, qid: Qid, mode: OpenMode) -> Result<Chan, DevError> {
        let mut chan = kit::open(FILES, qid, mode)?;
        if qid == KPDATA && mode.readable() {
            Snapshot::attach(&mut chan, self.snapshot());
        }
        Ok(chan)
    }

    fn read(&self, chan: &mut Chan, offset: u64, count: u32) -> Result<Vec<u8>, DevError> {
        match chan.qid {
            KPCTL => Ok(Vec::new()),
            KPDATA => {
                if offset % 4 != 0 {
                    return Err(DevError::BadArg);
                }
                Snapshot::read(chan, offset, count & !3)
            }
            _ => Err(DevError::Perm),
        }
    }

    fn health(&self) -> Option<Arc<Health>> {
        Some(self.session.health().clone())
    }

    fn write(&self, chan: &mut Chan, _offset: u64, data: &[u8]) -> Result<usize, DevError> {
        match chan.qid {
            KPCTL => {
                self.ctl(data)?;
                Ok(data.len())
            }
            KPDATA => Err(DevError::BadUseFd),
            _ => Err(DevError::Perm),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ReplayFactory;
    use profdev_core::Sample;

    /// TV-K1's geometry: KTZERO=0x80100000, etext=0x80100400, LRES=3.
    fn tv_k1() -> Kprof {
        let text = KernelText {
            start: KernelPc(0x8010_0000),
            end: KernelPc(0x8010_0400),
        };
        let mut config = KprofConfig::new(text);
        config.frequency_hz = 100;
        Kprof::new(config, Engine::new(Arc::new(ReplayFactory::new(vec![]))))
    }

    fn samples(pcs: &[u64]) -> Vec<Record> {
        pcs.iter()
            .map(|&ip| {
                Record::Sample(Sample {
                    ip,
                    ..Default::default()
                })
            })
            .collect()
    }

    fn words(k: &Kprof) -> Vec<u32> {
        k.snapshot()
            .chunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn write(k: &Kprof, msg: &str) -> Result<usize, DevError> {
        let mut c = k.open(KPCTL, OpenMode::Write).unwrap();
        k.write(&mut c, 0, msg.as_bytes())
    }

    #[test]
    fn tv_k1_sampling() {
        let k = tv_k1();
        assert_eq!(k.config().words(), 128);
        k.feed(&samples(&[0x8010_0000]));
        assert_eq!(words(&k)[1], 1);
        k.feed(&samples(&[0x8010_002F]));
        assert_eq!(words(&k)[1], 2);
        k.feed(&samples(&[0x8010_0030]));
        assert_eq!(words(&k)[6], 1);
        k.feed(&samples(&[0x8010_03FF]));
        assert_eq!(words(&k)[127], 1);
        k.feed(&samples(&[0x8010_0400]));
        let w = words(&k);
        assert_eq!(w[1], 3);
        assert_eq!(w[0], 5);
        assert_eq!(&w[2..6], &[10_000, 128, 4, 3]);
    }

    #[test]
    fn partial_last_bucket_is_in_bounds() {
        let text = KernelText {
            start: KernelPc(0x1000),
            end: KernelPc(0x1403),
        };
        let k = Kprof::new(
            KprofConfig::new(text),
            Engine::new(Arc::new(ReplayFactory::new(vec![]))),
        );
        assert_eq!(k.config().words(), 129);
        k.feed(&samples(&[0x1402]));
        assert_eq!(words(&k)[128], 1);
    }

    #[test]
    fn tv_k2_read_rules() {
        let k = tv_k1();
        let mut w = vec![0u32; 128];
        w[0] = 0x64;
        k.histogram.lock().unwrap().words = w;
        let mut c = k.open(KPDATA, OpenMode::Read).unwrap();
        assert_eq!(k.read(&mut c, 2, 8), Err(DevError::BadArg));
        assert_eq!(
            k.read(&mut c, 2, 8).unwrap_err().to_string(),
            "bad arg in system call"
        );
        assert_eq!(k.read(&mut c, 0, 3).unwrap(), b"");
        assert_eq!(k.read(&mut c, 508, 100).unwrap().len(), 4);
        assert_eq!(k.read(&mut c, 512, 100).unwrap(), b"");
        assert_eq!(k.read(&mut c, 0, 4).unwrap(), [0, 0, 0, 0x64]);
        assert_eq!(k.read(&mut c, 0, 7).unwrap().len(), 4);
        assert_eq!(k.stat(KPDATA).unwrap().length, 512);
    }

    #[test]
    fn tv_k3_ctl() {
        let k = tv_k1();
        k.feed(&samples(&[0x8010_0100, 0x8010_0100]));
        write(&k, "startclr").unwrap();
        assert!(k.is_on());
        let w = words(&k);
        assert!(w[..2].iter().chain(&w[6..]).all(|&x| x == 0));
        assert_eq!(&w[2..6], &[10_000, 128, 4, 3]);
        write(&k, "stop\n").unwrap();
        assert!(!k.is_on());

        // Exact verbs: "stopped" no longer stops; "go" is refused.
        write(&k, "start").unwrap();
        let e = write(&k, "stopped").unwrap_err();
        assert_eq!(e.to_string(), "unknown control message \"stopped\"");
        assert!(k.is_on(), "a bad message must change nothing");
        assert_eq!(write(&k, "go").unwrap_err(), DevError::BadCtl("go".into()));
        assert_eq!(write(&k, "stop\n").unwrap(), 5);
    }

    #[test]
    fn bad_messages_keep_counts() {
        let k = tv_k1();
        k.feed(&samples(&[0x8010_0100; 7]));
        let before = k.snapshot();
        for bad in ["stopwatch", "startxyz", "", "start now", "clear"] {
            assert!(write(&k, bad).is_err(), "{bad:?}");
        }
        assert_eq!(k.snapshot(), before);
        let mut c = k.open(KPDATA, OpenMode::Write).unwrap();
        assert_eq!(k.write(&mut c, 0, b"x"), Err(DevError::BadUseFd));
    }

    #[test]
    fn snapshot_is_taken_at_open() {
        let k = tv_k1();
        let mut c = k.open(KPDATA, OpenMode::Read).unwrap();
        k.feed(&samples(&[0x8010_0100; 3]));
        assert_eq!(k.read(&mut c, 0, 4).unwrap(), [0, 0, 0, 0]);
        let mut c2 = k.open(KPDATA, OpenMode::Read).unwrap();
        assert_eq!(k.read(&mut c2, 0, 4).unwrap(), [0, 0, 0, 3]);
    }

    #[test]
    fn replayed_session_counts_through_the_engine() {
        let text = KernelText {
            start: KernelPc(0x8010_0000),
            end: KernelPc(0x8010_0400),
        };
        let recs = samples(&[0x8010_0100, 0x8010_0108, 0x1234]);
        let k = Kprof::new(
            KprofConfig::new(text),
            Engine::new(Arc::new(ReplayFactory::new(recs))),
        );
        write(&k, "startclr\n").unwrap();
        write(&k, "stop\n").unwrap();
        let w = words(&k);
        assert_eq!((w[0], w[1], w[32], w[33]), (3, 1, 1, 1));
    }

    /// A counter whose state the test can see and change.
    #[derive(Clone, Default)]
    struct FakeCounter(Arc<Mutex<FakeState>>);

    /// Words, on, and the calls made, in order.
    type FakeState = (Vec<u32>, bool, Vec<&'static str>);

    impl HistogramCounter for FakeCounter {
        fn enable(&mut self) -> Result<(), SourceError> {
            let mut s = self.0.lock().unwrap();
            s.1 = true;
            s.2.push("enable");
            Ok(())
        }
        fn disable(&mut self) {
            let mut s = self.0.lock().unwrap();
            s.1 = false;
            s.2.push("disable");
        }
        fn clear(&mut self) {
            let mut s = self.0.lock().unwrap();
            let n = s.0.len();
            s.0 = vec![0; n];
            kpdata::init_header(&mut s.0, 10_000, 3);
            s.2.push("clear");
        }
        fn words(&self) -> Vec<u32> {
            self.0.lock().unwrap().0.clone()
        }
    }

    fn counted() -> (Kprof, FakeCounter) {
        let fake = FakeCounter::default();
        fake.0.lock().unwrap().0 = vec![7; 128];
        let config = tv_k1().config;
        let k = Kprof::with_counter(config, Box::new(fake.clone())).unwrap();
        (k, fake)
    }

    #[test]
    fn counter_backend_follows_the_verbs() {
        let (k, fake) = counted();
        assert!(!k.is_on());
        assert_eq!(words(&k), vec![7; 128], "kpdata is the counter's words");
        write(&k, "startclr\n").unwrap();
        assert!(k.is_on());
        assert!(fake.0.lock().unwrap().1);
        let w = words(&k);
        assert!(w[..2].iter().chain(&w[6..]).all(|&x| x == 0));
        assert_eq!(&w[2..6], &[10_000, 128, 4, 3]);
        write(&k, "start").unwrap(); // already on: no second enable
        assert!(write(&k, "stopwatch").is_err());
        assert!(k.is_on());
        write(&k, "stop").unwrap();
        assert!(!k.is_on());
        write(&k, "start").unwrap();
        write(&k, "stop").unwrap();
        assert_eq!(
            fake.0.lock().unwrap().2,
            ["clear", "enable", "disable", "enable", "disable"]
        );
        // Records fed to a counter-backed device are not counted.
        k.feed(&samples(&[0x8010_0100]));
        assert_eq!(words(&k)[0], 0);
    }

    #[test]
    fn counter_backend_snapshots_at_open() {
        let (k, fake) = counted();
        let mut c = k.open(KPDATA, OpenMode::Read).unwrap();
        fake.0.lock().unwrap().0[0] = 99;
        assert_eq!(k.read(&mut c, 0, 4).unwrap(), [0, 0, 0, 7]);
        assert_eq!(k.read(&mut c, 2, 4), Err(DevError::BadArg));
        let mut c2 = k.open(KPDATA, OpenMode::Read).unwrap();
        assert_eq!(k.read(&mut c2, 0, 4).unwrap(), [0, 0, 0, 99]);
        assert_eq!(k.stat(KPDATA).unwrap().length, 512);
    }

    #[test]
    fn counter_of_the_wrong_size_is_refused() {
        let fake = FakeCounter::default();
        fake.0.lock().unwrap().0 = vec![0; 100];
        let e = Kprof::with_counter(tv_k1().config, Box::new(fake))
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "the histogram counter has 100 words where kpdata needs 128"
        );
    }
}
