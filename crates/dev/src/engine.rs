//! The sampling engine shared by every device.
//!
//! A device that is switched on asks the engine for a [`Subscription`]: a
//! session of the given [`SessionConfig`], read on a thread of its own, whose
//! records are handed in batches to the device's sink. Dropping the
//! subscription stops the session after one last drain and a
//! [`SampleSource::flush`] (which releases what a live source held back
//! for time ordering), so every sample taken before `stop` is counted.
//!
//! Where records come from is the [`SourceFactory`]'s business: the live
//! perf_event engine, or [`ReplayFactory`] in tests.

use profdev_core::{Record, SampleSource, SessionConfig, SourceError, SourceFactory, SourceStats};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Where a subscription's records go: called on the engine's thread with
/// each batch, in timestamp order.
pub type Sink = Arc<dyn Fn(&[Record]) + Send + Sync>;

/// Opens sampling sessions for devices.
#[derive(Clone)]
pub struct Engine {
    factory: Arc<dyn SourceFactory>,
}

impl Engine {
    /// An engine drawing sessions from `factory`.
    pub fn new(factory: Arc<dyn SourceFactory>) -> Self {
        Engine { factory }
    }

    /// Start a session; its records go to `sink` until the subscription is
    /// dropped.
    pub fn subscribe(
        &self,
        config: &SessionConfig,
        sink: Sink,
    ) -> Result<Subscription, SourceError> {
        config.validate()?;
        let source = self.factory.open(config)?;
        Ok(Subscription::run(source, sink))
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Engine")
    }
}

#[derive(Default)]
struct Shared {
    stats: SourceStats,
    error: Option<String>,
    ended: bool,
}

/// A running session. Dropping it stops sampling after a last drain.
pub struct Subscription {
    stop: Arc<AtomicBool>,
    shared: Arc<Mutex<Shared>>,
    thread: Option<JoinHandle<()>>,
}

const READ_TIMEOUT: Duration = Duration::from_millis(50);

impl Subscription {
    /// Read `source` on a new thread and hand its batches to `sink`.
    pub fn run(mut source: Box<dyn SampleSource>, sink: Sink) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Mutex::new(Shared::default()));
        let thread = {
            let stop = stop.clone();
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("profdev-engine".into())
                .spawn(move || {
                    let mut batch = Vec::new();
                    loop {
                        let last = stop.load(Ordering::Acquire);
                        let timeout = if last { Duration::ZERO } else { READ_TIMEOUT };
                        let result = source.read(&mut batch, timeout);
                        if last && result.is_ok() {
                            // What the source held back for ordering.
                            source.flush(&mut batch);
                        }
                        if !batch.is_empty() {
                            sink(&batch);
                            batch.clear();
                        }
                        let mut sh = shared.lock().unwrap_or_else(|p| p.into_inner());
                        sh.stats = source.stats();
                        match result {
                            Ok(()) => {}
                            Err(SourceError::Ended) => {
                                sh.ended = true;
                                break;
                            }
                            Err(e) => {
                                sh.error = Some(e.to_string());
                                sh.ended = true;
                                break;
                            }
                        }
                        if last {
                            break;
                        }
                    }
                })
                .expect("spawning the engine thread")
        };
        Subscription {
            stop,
            shared,
            thread: Some(thread),
        }
    }

    /// Counts so far (samples, lost, throttled).
    pub fn stats(&self) -> SourceStats {
        self.lock().stats
    }

    /// The error that ended the session early, if any.
    pub fn error(&self) -> Option<String> {
        self.lock().error.clone()
    }

    /// True once the source has ended (a replay ran out, or an error).
    pub fn ended(&self) -> bool {
        self.lock().ended
    }

    /// Stop sampling, drain what was taken, and return the final counts.
    pub fn stop(mut self) -> SourceStats {
        self.finish();
        self.stats()
    }

    fn finish(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A factory whose every session replays the same records once, then ends.
/// For tests and for replaying recorded data through the live path.
pub struct ReplayFactory {
    records: Vec<Record>,
}

impl ReplayFactory {
    /// Replay `records` (in the order given) to each session.
    pub fn new(records: Vec<Record>) -> Self {
        ReplayFactory { records }
    }
}

impl SourceFactory for ReplayFactory {
    fn open(&self, _config: &SessionConfig) -> Result<Box<dyn SampleSource>, SourceError> {
        Ok(Box::new(Replay {
            records: Some(self.records.clone()),
            stats: SourceStats::default(),
        }))
    }
}

struct Replay {
    records: Option<Vec<Record>>,
    stats: SourceStats,
}

impl SampleSource for Replay {
    fn read(&mut self, out: &mut Vec<Record>, _timeout: Duration) -> Result<(), SourceError> {
        let records = self.records.take().ok_or(SourceError::Ended)?;
        for r in &records {
            match r {
                Record::Sample(_) => self.stats.samples += 1,
                Record::Lost { count, .. } => self.stats.lost += count,
                Record::Throttle {
                    throttled: true, ..
                } => self.stats.throttled += 1,
                _ => {}
            }
        }
        out.extend(records);
        Ok(())
    }

    fn stats(&self) -> SourceStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_core::Sample;

    #[test]
    fn replay_reaches_the_sink_and_ends() {
        let recs = vec![
            Record::Sample(Sample {
                ip: 1,
                ..Default::default()
            }),
            Record::Lost {
                cpu: 0,
                count: 3,
                time: 5,
            },
        ];
        let engine = Engine::new(Arc::new(ReplayFactory::new(recs.clone())));
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        let sub = engine
            .subscribe(
                &SessionConfig::system(100),
                Arc::new(move |b: &[Record]| g.lock().unwrap().extend_from_slice(b)),
            )
            .unwrap();
        profdev_testkit::wait_until("the replay to end", Duration::from_secs(30), || sub.ended());
        let stats = sub.stop();
        assert_eq!(*got.lock().unwrap(), recs);
        assert_eq!(stats.samples, 1);
        assert_eq!(stats.lost, 3);
    }

    /// A source that, like the live one, holds its records back until it
    /// is flushed.
    struct Holding {
        held: Vec<Record>,
    }

    impl SampleSource for Holding {
        fn read(&mut self, _out: &mut Vec<Record>, _t: Duration) -> Result<(), SourceError> {
            Ok(())
        }
        fn flush(&mut self, out: &mut Vec<Record>) {
            out.append(&mut self.held);
        }
        fn stats(&self) -> SourceStats {
            SourceStats::default()
        }
    }

    #[test]
    fn stopping_flushes_what_the_source_held_back() {
        let held = vec![Record::Lost {
            cpu: 1,
            count: 2,
            time: 9,
        }];
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        let sub = Subscription::run(
            Box::new(Holding { held: held.clone() }),
            Arc::new(move |b: &[Record]| g.lock().unwrap().extend_from_slice(b)),
        );
        assert!(got.lock().unwrap().is_empty());
        sub.stop();
        assert_eq!(*got.lock().unwrap(), held);
    }

    #[test]
    fn frequency_limit_is_a_sentence() {
        let engine = Engine::new(Arc::new(ReplayFactory::new(vec![])));
        let err = engine
            .subscribe(&SessionConfig::system(20_000), Arc::new(|_: &[Record]| {}))
            .err()
            .unwrap();
        assert!(err.to_string().contains("livelock"), "{err}");
    }
}
