//! Several sample sources read as one: `profdev record -p PID,PID…` opens
//! one per thread of each process (perf_event_open follows one task and
//! the tasks it starts afterwards, not the threads it already has).
//!
//! Each read waits on the first source and drains the others without
//! waiting, then puts the batch in time order. Each source's own records
//! arrive in time order across reads (its merge guarantees it); records
//! of two sources may cross a read boundary out of order, which matters
//! nothing for their consumers: the sources follow different tasks, and a
//! task's records all come from one source. A source that ends is dropped;
//! the whole ends when every one has.

use profdev_core::{Record, SampleSource, SourceError, SourceStats};
use std::time::Duration;

/// Sources read as one.
pub struct Several {
    live: Vec<Box<dyn SampleSource>>,
    /// Counts of the sources that ended.
    ended: SourceStats,
}

impl Several {
    /// Read `sources` as one.
    pub fn new(sources: Vec<Box<dyn SampleSource>>) -> Several {
        Several {
            live: sources,
            ended: SourceStats::default(),
        }
    }
}

fn add(a: &mut SourceStats, b: SourceStats) {
    a.samples += b.samples;
    a.lost += b.lost;
    a.throttled += b.throttled;
}

impl SampleSource for Several {
    fn read(&mut self, out: &mut Vec<Record>, timeout: Duration) -> Result<(), SourceError> {
        if self.live.is_empty() {
            return Err(SourceError::Ended);
        }
        let first = out.len();
        let mut i = 0;
        while i < self.live.len() {
            let wait = if i == 0 { timeout } else { Duration::ZERO };
            match self.live[i].read(out, wait) {
                Ok(()) => i += 1,
                Err(SourceError::Ended) => {
                    let gone = self.live.remove(i);
                    add(&mut self.ended, gone.stats());
                }
                Err(e) => return Err(e),
            }
        }
        out[first..].sort_by_key(Record::time);
        if self.live.is_empty() && out.len() == first {
            return Err(SourceError::Ended);
        }
        Ok(())
    }

    fn flush(&mut self, out: &mut Vec<Record>) {
        let first = out.len();
        for s in &mut self.live {
            s.flush(out);
        }
        out[first..].sort_by_key(Record::time);
    }

    fn stats(&self) -> SourceStats {
        let mut total = self.ended;
        for s in &self.live {
            add(&mut total, s.stats());
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that gives its batches one per read, then ends.
    struct Script(Vec<Vec<Record>>, SourceStats);

    impl SampleSource for Script {
        fn read(&mut self, out: &mut Vec<Record>, _: Duration) -> Result<(), SourceError> {
            if self.0.is_empty() {
                return Err(SourceError::Ended);
            }
            let batch = self.0.remove(0);
            self.1.samples += batch.len() as u64;
            out.extend(batch);
            Ok(())
        }
        fn stats(&self) -> SourceStats {
            self.1
        }
    }

    fn lost(time: u64) -> Record {
        Record::Lost {
            cpu: 0,
            count: 1,
            time,
        }
    }

    #[test]
    fn merges_in_time_order_and_ends_with_the_last() {
        let a = Script(
            vec![vec![lost(1), lost(5)], vec![lost(9)]],
            SourceStats::default(),
        );
        let b = Script(vec![vec![lost(3)]], SourceStats::default());
        let mut s = Several::new(vec![Box::new(a), Box::new(b)]);
        let mut out = Vec::new();
        s.read(&mut out, Duration::ZERO).unwrap();
        assert_eq!(out.iter().map(Record::time).collect::<Vec<_>>(), [1, 3, 5]);
        out.clear();
        s.read(&mut out, Duration::ZERO).unwrap();
        assert_eq!(out.iter().map(Record::time).collect::<Vec<_>>(), [9]);
        assert_eq!(s.stats().samples, 4, "counts of ended sources kept");
        out.clear();
        assert!(matches!(
            s.read(&mut out, Duration::ZERO),
            Err(SourceError::Ended)
        ));
        assert_eq!(s.stats().samples, 4);
    }
}
