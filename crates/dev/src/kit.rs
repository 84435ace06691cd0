//! The device kit: what every sampling device needs, written once.
//!
//! A device built from the kit is one file holding its tree (a static
//! [`File`] table, or its own `gen` for a tree that grows), its ctl table
//! (see [`crate::ctl`]) and its reads and writes. The kit gives it:
//!
//! * [`Session`]: the engine subscription behind one lock. `start` is
//!   idempotent and arms the device before the first sample can arrive
//!   (and disarms it if sampling cannot start); `stop` drains every sample
//!   taken before it, then keeps the session's counts.
//! * [`feeder`]: the engine sink that locks the device's state and counts a
//!   batch into it.
//! * [`open`], [`gen`], [`stat`] over a [`File`] table, with the one
//!   open-mode rule every device follows: a directory opens for reading
//!   only, a file only in the modes its owner bits allow (`0600` both ways,
//!   `0444` read-only, `0222` write-only).
//! * [`Snapshot`]: the bytes an open channel reads, taken once.
//! * The session's [`Health`]: samples, lost and throttled records counted
//!   as the engine hands each batch over, outside the device's lock, and
//!   the session clock and state, so that every device has a `stat/` file
//!   ([`crate::health`], [`crate::stat`]) without a line of its own beyond
//!   what only it knows (unwinding, symbol misses, memory).
//! * [`lock`]: a mutex that a panicking holder did not poison for good.
//! * `From<SourceError> for DevError`: one mapping of sampling errors.
//!
//! ```
//! use profdev_dev::kit::{self, File, Session, Snapshot};
//! use profdev_dev::engine::{Engine, ReplayFactory};
//! use profdev_dev::{Chan, Dev, DevError, DirEntry, OpenMode, Qid};
//! use profdev_core::{Record, SessionConfig};
//! use std::sync::{Arc, Mutex};
//!
//! const CTL: Qid = Qid::file(1);
//! const COUNT: Qid = Qid::file(2);
//! const FILES: &[File] = &[File::new("ctl", CTL, 0o222), File::new("count", COUNT, 0o444)];
//!
//! /// Counts samples while on.
//! struct Counter { n: Arc<Mutex<u64>>, session: Session }
//! impl Dev for Counter {
//!     fn name(&self) -> &'static str { "counter" }
//!     fn gen(&self, dir: Qid) -> Result<Vec<DirEntry>, DevError> { kit::gen(FILES, dir, |_| 0) }
//!     fn stat(&self, qid: Qid) -> Result<DirEntry, DevError> { kit::stat(FILES, qid, |_| 0) }
//!     fn open(&self, qid: Qid, mode: OpenMode) -> Result<Chan, DevError> {
//!         let mut chan = kit::open(FILES, qid, mode)?;
//!         if qid == COUNT {
//!             Snapshot::attach(&mut chan, format!("{}\n", kit::lock(&self.n)).into_bytes());
//!         }
//!         Ok(chan)
//!     }
//!     fn read(&self, chan: &mut Chan, offset: u64, count: u32) -> Result<Vec<u8>, DevError> {
//!         Snapshot::read(chan, offset, count)
//!     }
//!     fn write(&self, _chan: &mut Chan, _offset: u64, data: &[u8]) -> Result<usize, DevError> {
//!         let sink = kit::feeder(&self.n, |n: &mut u64, _r: &Record| *n += 1);
//!         self.session.start(|running| (!running).then(|| SessionConfig::system(100)), sink, || {})?;
//!         self.session.stop(|| {});
//!         Ok(data.len())
//!     }
//! }
//!
//! let engine = Engine::new(Arc::new(ReplayFactory::new(vec![Record::Sample(Default::default())])));
//! let dev = Counter { n: Arc::default(), session: Session::new(engine) };
//! let mut ctl = dev.open(CTL, OpenMode::Write).unwrap();
//! dev.write(&mut ctl, 0, b"go").unwrap();
//! assert_eq!(dev.open(CTL, OpenMode::Read).unwrap_err(), DevError::Perm);
//! let mut c = dev.open(COUNT, OpenMode::Read).unwrap();
//! // The replay may or may not have been read before the stop: either way
//! // the count is what the session saw.
//! let seen = dev.session.stats().samples;
//! assert_eq!(dev.read(&mut c, 0, 10).unwrap(), format!("{seen}\n").as_bytes());
//! ```

use crate::engine::{Engine, Sink, Subscription};
use crate::error::DevError;
use crate::health::Health;
use crate::tree::{read_slice, Chan, DirEntry, OpenMode, Qid};
use profdev_core::{Record, SessionConfig, SourceError, SourceStats};
use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard};

/// Lock `m`, taking the value over if a holder panicked: a device keeps
/// serving what it has rather than failing every later request.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl From<SourceError> for DevError {
    /// Sampling could not start: the source's sentence, served as EPERM when
    /// it is a permission problem and EIO otherwise.
    fn from(e: SourceError) -> Self {
        DevError::Sampling {
            permission: matches!(e, SourceError::Permission(_)),
            msg: e.to_string(),
        }
    }
}

/// A sink that counts each batch into `state`, one record at a time, under
/// `state`'s lock (taken once per batch).
pub fn feeder<S, F>(state: &Arc<Mutex<S>>, count: F) -> Sink
where
    S: Send + 'static,
    F: Fn(&mut S, &Record) + Send + Sync + 'static,
{
    let state = state.clone();
    Arc::new(move |batch: &[Record]| {
        let mut s = lock(&state);
        for r in batch {
            count(&mut s, r);
        }
    })
}

/// A device's sampling session: at most one subscription, the counts
/// of the sessions that ended, and the device's [`Health`].
pub struct Session {
    engine: Engine,
    running: Mutex<Option<Subscription>>,
    past: Mutex<SourceStats>,
    health: Arc<Health>,
    /// Held while a batch is counted into the health and the device, and
    /// by [`Session::reset`]: a reset falls between two batches, so the
    /// health's counts and the device's restart together. Never taken by
    /// a reader.
    batch: Arc<Mutex<()>>,
}

impl Session {
    /// No session yet; sessions will come from `engine`.
    pub fn new(engine: Engine) -> Self {
        Session {
            engine,
            running: Mutex::new(None),
            past: Mutex::new(SourceStats::default()),
            health: Arc::new(Health::new()),
            batch: Arc::new(Mutex::new(())),
        }
    }

    /// The device's health, for its `stat/` file and for the device to
    /// count what only it knows (unwinding, symbol misses, memory).
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// Start the health's counters again and run `clear` (the device's own
    /// reset) between two batches, so that both restart at the same
    /// sample.
    pub fn reset(&self, clear: impl FnOnce()) {
        let _between = lock(&self.batch);
        self.health.reset();
        clear();
    }

    /// Start a session unless `arm` says not to.
    ///
    /// Under the session lock, `arm(running)` switches the device on (so
    /// the first samples count) and returns the configuration to open, or
    /// `None` to open nothing (already running, or nothing to do). If the
    /// session cannot start, `disarm` undoes what `arm` did and the
    /// source's error is returned. True if a session was started.
    pub fn start(
        &self,
        arm: impl FnOnce(bool) -> Option<SessionConfig>,
        sink: Sink,
        disarm: impl FnOnce(),
    ) -> Result<bool, DevError> {
        let mut running = lock(&self.running);
        let Some(config) = arm(running.is_some()) else {
            return Ok(false);
        };
        let (health, batch) = (self.health.clone(), self.batch.clone());
        let sink: Sink = Arc::new(move |records: &[Record]| {
            let _one_batch = lock(&batch);
            health.count(records);
            sink(records);
        });
        match self.engine.subscribe(&config, sink) {
            Ok(sub) => {
                self.health.started(&config);
                // A session started while one ran would have been refused by
                // `arm`; if not, the old one is drained and counted.
                if let Some(old) = running.replace(sub) {
                    self.keep(old.stop());
                }
                Ok(true)
            }
            Err(e) => {
                disarm();
                Err(e.into())
            }
        }
    }

    /// Stop the session, if one runs, after draining every sample it took
    /// into the sink; then run `after` (switch the device off), still under
    /// the session lock so that no `start` comes between. The stopped
    /// session's counts, if there was one.
    pub fn stop(&self, after: impl FnOnce()) -> Option<SourceStats> {
        let mut running = lock(&self.running);
        let ended = running.as_ref().is_some_and(Subscription::ended);
        let stats = running.take().map(Subscription::stop);
        if let Some(s) = stats {
            self.keep(s);
            if ended {
                self.health.stopped_after_end();
            } else {
                self.health.stopped();
            }
        }
        after();
        stats
    }

    fn keep(&self, s: SourceStats) {
        let mut past = lock(&self.past);
        past.samples += s.samples;
        past.lost += s.lost;
        past.throttled += s.throttled;
    }

    /// True while a session runs.
    pub fn is_running(&self) -> bool {
        lock(&self.running).is_some()
    }

    /// The running session's counts, if one runs.
    pub fn current(&self) -> Option<SourceStats> {
        lock(&self.running).as_ref().map(Subscription::stats)
    }

    /// The counts of every session since the last [`Session::forget`]: the
    /// ended ones and the running one.
    pub fn stats(&self) -> SourceStats {
        let now = self.current().unwrap_or_default();
        let past = *lock(&self.past);
        SourceStats {
            samples: past.samples + now.samples,
            lost: past.lost + now.lost,
            throttled: past.throttled + now.throttled,
        }
    }

    /// Forget the counts of the ended sessions.
    pub fn forget(&self) {
        *lock(&self.past) = SourceStats::default();
    }

    /// True once the running session's source has ended (a process
    /// target's tree exited and was drained, or a replay ran out).
    pub fn ended(&self) -> bool {
        lock(&self.running)
            .as_ref()
            .is_some_and(Subscription::ended)
    }

    /// The error that ended the running session early, if any.
    pub fn error(&self) -> Option<String> {
        lock(&self.running).as_ref().and_then(Subscription::error)
    }
}

/// One file of a fixed tree: name, qid and permission bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct File {
    /// The name in the device's directory.
    pub name: Cow<'static, str>,
    /// Its qid (a plain file).
    pub qid: Qid,
    /// Permission bits; the owner's bits are the modes it opens in.
    pub perm: u16,
}

impl File {
    /// A file named by a constant.
    pub const fn new(name: &'static str, qid: Qid, perm: u16) -> Self {
        File {
            name: Cow::Borrowed(name),
            qid,
            perm,
        }
    }

    /// A file whose name is made at run time.
    pub fn named(name: String, qid: Qid, perm: u16) -> Self {
        File {
            name: Cow::Owned(name),
            qid,
            perm,
        }
    }

    fn entry(&self, length: u64) -> DirEntry {
        DirEntry::file(&self.name, self.qid, self.perm, length)
    }
}

/// The open-mode rule of every device: a directory opens for reading only;
/// a file in the modes its owner bits allow (EPERM otherwise).
pub fn check_mode(qid: Qid, perm: u16, mode: OpenMode) -> Result<(), DevError> {
    let ok = if qid.is_dir() {
        mode == OpenMode::Read
    } else {
        (!mode.readable() || perm & 0o400 != 0) && (!mode.writable() || perm & 0o200 != 0)
    };
    if ok {
        Ok(())
    } else {
        Err(DevError::Perm)
    }
}

/// The root directory of a fixed tree: `files`, each with the length
/// `length` gives it.
pub fn gen(
    files: &[File],
    dir: Qid,
    length: impl Fn(Qid) -> u64,
) -> Result<Vec<DirEntry>, DevError> {
    if dir != Qid::ROOT {
        return Err(DevError::NotDir);
    }
    Ok(files.iter().map(|f| f.entry(length(f.qid))).collect())
}

/// The entry of `qid` in a fixed tree, computing only its own length.
pub fn stat(files: &[File], qid: Qid, length: impl Fn(Qid) -> u64) -> Result<DirEntry, DevError> {
    if qid == Qid::ROOT {
        return Ok(DirEntry::dir(".", Qid::ROOT, 0o500));
    }
    files
        .iter()
        .find(|f| f.qid == qid)
        .map(|f| f.entry(length(qid)))
        .ok_or(DevError::NotFound)
}

/// Open `qid` of a fixed tree under [`check_mode`]: a channel with no
/// per-open state yet (ENOENT for a qid not in the table).
pub fn open(files: &[File], qid: Qid, mode: OpenMode) -> Result<Chan, DevError> {
    let perm = if qid == Qid::ROOT {
        0o500
    } else {
        files
            .iter()
            .find(|f| f.qid == qid)
            .ok_or(DevError::NotFound)?
            .perm
    };
    check_mode(qid, perm, mode)?;
    Ok(Chan::new(qid, mode))
}

/// The bytes one open channel reads, taken once (at open, or at a read
/// that starts over), so every read of that open sees one point in time.
pub struct Snapshot {
    /// A version of the state the bytes came from, for devices that take a
    /// new snapshot when the state changes (0 for the others).
    pub version: u64,
    /// The file's contents.
    pub bytes: Vec<u8>,
}

impl Snapshot {
    /// Give `chan` the snapshot `bytes`.
    pub fn attach(chan: &mut Chan, bytes: Vec<u8>) {
        Snapshot::attach_version(chan, 0, bytes);
    }

    /// Give `chan` the snapshot `bytes` of state `version`.
    pub fn attach_version(chan: &mut Chan, version: u64, bytes: Vec<u8>) {
        chan.aux = Some(Box::new(Snapshot { version, bytes }));
    }

    /// The channel's snapshot, if it has one.
    pub fn of(chan: &mut Chan) -> Option<&mut Snapshot> {
        chan.aux_mut::<Snapshot>()
    }

    /// Read `count` bytes at `offset` of the channel's snapshot; EPERM for
    /// a channel without one (a file not opened for reading).
    pub fn read(chan: &mut Chan, offset: u64, count: u32) -> Result<Vec<u8>, DevError> {
        match Snapshot::of(chan) {
            Some(s) => Ok(read_slice(&s.bytes, offset, count)),
            None => Err(DevError::Perm),
        }
    }
}

#[cfg(test)]
mod tests {
    //! A tiny device made of the kit, driven by a replayed source.

    use super::*;
    use crate::dev::Dev;
    use crate::engine::ReplayFactory;
    use crate::{ctl, tree};
    use profdev_core::{Sample, SampleSource, SourceFactory};
    use std::time::Duration;

    const CTL: Qid = Qid::file(1);
    const TICKS: Qid = Qid::file(2);
    const SECRET: Qid = Qid::file(3);
    const FILES: &[File] = &[
        File::new("ctl", CTL, 0o222),
        File::new("ticks", TICKS, 0o444),
        File::new("secret", SECRET, 0o600),
    ];

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Op {
        On,
        Off,
    }
    const TABLE: &[ctl::Cmd<Op>] = &[ctl::Cmd::verb("on", Op::On), ctl::Cmd::verb("off", Op::Off)];

    #[derive(Default)]
    struct State {
        on: bool,
        ticks: u64,
    }

    /// Counts samples while on; `ticks` reads the count and a newline.
    struct Ticker {
        state: Arc<Mutex<State>>,
        session: Session,
    }

    impl Ticker {
        fn new(factory: Arc<dyn SourceFactory>) -> Self {
            Ticker {
                state: Arc::default(),
                session: Session::new(Engine::new(factory)),
            }
        }

        fn text(&self) -> Vec<u8> {
            format!("{}\n", lock(&self.state).ticks).into_bytes()
        }
    }

    impl Dev for Ticker {
        fn name(&self) -> &'static str {
            "ticker"
        }
        fn gen(&self, dir: Qid) -> Result<Vec<DirEntry>, DevError> {
            gen(FILES, dir, |q| self.length(q))
        }
        fn stat(&self, qid: Qid) -> Result<DirEntry, DevError> {
            stat(FILES, qid, |q| self.length(q))
        }
        fn open(&self, qid: Qid, mode: OpenMode) -> Result<Chan, DevError> {
            let mut chan = open(FILES, qid, mode)?;
            if qid == TICKS {
                Snapshot::attach(&mut chan, self.text());
            }
            Ok(chan)
        }
        fn read(&self, chan: &mut Chan, offset: u64, count: u32) -> Result<Vec<u8>, DevError> {
            Snapshot::read(chan, offset, count)
        }
        fn write(&self, chan: &mut Chan, _offset: u64, data: &[u8]) -> Result<usize, DevError> {
            if chan.qid != CTL {
                return Err(DevError::Perm);
            }
            match ctl::parse(data, TABLE)?.0 {
                Op::On => {
                    let sink = feeder(&self.state, |s: &mut State, r: &Record| {
                        if s.on && matches!(r, Record::Sample(_)) {
                            s.ticks += 1;
                        }
                    });
                    self.session.start(
                        |running| {
                            lock(&self.state).on = true;
                            (!running).then(|| SessionConfig::system(100))
                        },
                        sink,
                        || lock(&self.state).on = false,
                    )?;
                }
                Op::Off => {
                    self.session.stop(|| lock(&self.state).on = false);
                }
            }
            Ok(data.len())
        }
    }

    impl Ticker {
        fn length(&self, qid: Qid) -> u64 {
            if qid == TICKS {
                self.text().len() as u64
            } else {
                0
            }
        }
    }

    fn samples(n: usize) -> Vec<Record> {
        let mut v: Vec<Record> = (0..n)
            .map(|i| {
                Record::Sample(Sample {
                    ip: i as u64,
                    ..Default::default()
                })
            })
            .collect();
        v.push(Record::Lost {
            cpu: 0,
            count: 2,
            time: 0,
        });
        v
    }

    fn ctl(t: &Ticker, msg: &str) -> Result<usize, DevError> {
        let mut c = t.open(CTL, OpenMode::Write)?;
        t.write(&mut c, 0, msg.as_bytes())
    }

    fn read_ticks(t: &Ticker) -> String {
        let mut c = t.open(TICKS, OpenMode::Read).unwrap();
        String::from_utf8(t.read(&mut c, 0, 100).unwrap()).unwrap()
    }

    #[test]
    fn a_replayed_session_is_counted_and_drained() {
        let t = Ticker::new(Arc::new(ReplayFactory::new(samples(5))));
        ctl(&t, "on\n").unwrap();
        assert!(t.session.is_running());
        profdev_testkit::wait_until("the replay to end", Duration::from_secs(30), || {
            t.session.ended()
        });
        assert_eq!(t.session.current().unwrap().samples, 5);
        ctl(&t, "off").unwrap();
        assert!(!t.session.is_running());
        assert!(!lock(&t.state).on);
        assert_eq!(read_ticks(&t), "5\n");
        // The ended session's counts are kept, and add up over sessions.
        assert_eq!(t.session.stats().lost, 2);
        ctl(&t, "on").unwrap();
        ctl(&t, "off").unwrap();
        assert_eq!(read_ticks(&t), "10\n", "stop drains every sample");
        assert_eq!(t.session.stats().lost, 4);
        t.session.forget();
        assert_eq!(t.session.stats(), SourceStats::default());
    }

    #[test]
    fn start_is_idempotent() {
        let t = Ticker::new(Arc::new(ReplayFactory::new(samples(3))));
        ctl(&t, "on").unwrap();
        ctl(&t, "on").unwrap(); // `arm` says it runs: no second session
        ctl(&t, "off").unwrap();
        assert_eq!(read_ticks(&t), "3\n");
        assert_eq!(t.session.stop(|| {}), None, "nothing runs any more");
    }

    /// A factory that refuses, as perf_event_open does without privilege.
    struct Refusing;
    impl SourceFactory for Refusing {
        fn open(&self, _c: &SessionConfig) -> Result<Box<dyn SampleSource>, SourceError> {
            Err(SourceError::Permission("perf_event_open: no".into()))
        }
    }

    #[test]
    fn a_refused_session_disarms_and_maps_the_error() {
        let t = Ticker::new(Arc::new(Refusing));
        let e = ctl(&t, "on").unwrap_err();
        assert_eq!(
            e,
            DevError::Sampling {
                msg: SourceError::Permission("perf_event_open: no".into()).to_string(),
                permission: true
            }
        );
        assert!(!lock(&t.state).on, "disarm ran");
        assert!(!t.session.is_running());
        let e: DevError = SourceError::Ended.into();
        assert!(matches!(
            e,
            DevError::Sampling {
                permission: false,
                ..
            }
        ));
    }

    #[test]
    fn open_modes_follow_the_owner_bits() {
        let t = Ticker::new(Arc::new(ReplayFactory::new(vec![])));
        assert!(t.open(CTL, OpenMode::Write).is_ok());
        assert_eq!(t.open(CTL, OpenMode::Read).unwrap_err(), DevError::Perm);
        assert_eq!(
            t.open(CTL, OpenMode::ReadWrite).unwrap_err(),
            DevError::Perm
        );
        assert!(t.open(TICKS, OpenMode::Read).is_ok());
        assert_eq!(t.open(TICKS, OpenMode::Write).unwrap_err(), DevError::Perm);
        for mode in [OpenMode::Read, OpenMode::Write, OpenMode::ReadWrite] {
            assert!(t.open(SECRET, mode).is_ok(), "{mode:?}");
        }
        assert!(t.open(Qid::ROOT, OpenMode::Read).is_ok());
        assert_eq!(
            t.open(Qid::ROOT, OpenMode::Write).unwrap_err(),
            DevError::Perm
        );
        assert_eq!(
            t.open(Qid::file(9), OpenMode::Read).unwrap_err(),
            DevError::NotFound
        );
        // A channel opened write-only has no snapshot to read.
        let mut c = t.open(SECRET, OpenMode::Write).unwrap();
        assert_eq!(t.read(&mut c, 0, 1).unwrap_err(), DevError::Perm);
        assert_eq!(
            check_mode(Qid::dir(1), 0o777, OpenMode::Write),
            Err(DevError::Perm)
        );
    }

    #[test]
    fn tree_stat_and_snapshots() {
        let t = Ticker::new(Arc::new(ReplayFactory::new(vec![])));
        let names: Vec<_> = t
            .gen(Qid::ROOT)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["ctl", "ticks", "secret"]);
        assert_eq!(t.gen(TICKS).unwrap_err(), DevError::NotDir);
        // stat agrees with the listing and with a walk of the tree.
        for e in t.gen(Qid::ROOT).unwrap() {
            assert_eq!(t.stat(e.qid).unwrap(), e);
            assert_eq!(tree::walk(&t, Qid::ROOT, &e.name).unwrap(), e);
        }
        assert_eq!(t.stat(TICKS).unwrap().length, 2);
        assert_eq!(t.stat(Qid::file(9)).unwrap_err(), DevError::NotFound);
        let mut c = t.open(TICKS, OpenMode::Read).unwrap();
        lock(&t.state).ticks = 1234;
        assert_eq!(t.read(&mut c, 0, 100).unwrap(), b"0\n", "taken at open");
        assert_eq!(t.stat(TICKS).unwrap().length, 5);
        assert_eq!(read_ticks(&t), "1234\n");
        let mut c = t.open(TICKS, OpenMode::Read).unwrap();
        assert_eq!(t.read(&mut c, 2, 100).unwrap(), b"34\n");
        assert_eq!(t.read(&mut c, 5, 100).unwrap(), b"");
    }
}
