//! Per-CPU record streams merged by time, released behind a watermark.
//!
//! Each CPU's ring holds that CPU's records in time order, but the rings
//! are read one after another, and a record becomes readable only once
//! the kernel has written it. A reader that sorts whatever one drain of
//! every ring gave it (as profdev did) can therefore deliver an EXIT taken
//! on CPU 0 at t = 100 in one batch and a sample taken on CPU 1 at t = 90
//! in the next: the consumer applies the exit first and then cannot
//! resolve the sample. [`Merge`] fixes this the way `perf report` orders
//! `perf record`'s data (its `FINISHED_ROUND` rule,
//! `tools/perf/util/ordered-events.c`):
//!
//! * records are queued per ring, in ring order (no sort);
//! * after a drain that read every ring's head first (one instant across
//!   CPUs), every queued record with a time at or below the **watermark**
//!   is released, by a k-way merge of the queue heads (a binary heap over
//!   at most one head per queue: O(n log k), no global sort);
//! * the watermark is the highest time seen in the drains *before* this
//!   one, and no later than a bound the reader gives (the live reader:
//!   its clock at the drain, less [`GUARD_NS`]).
//!
//! **Why that is safe.** Let drain k read the heads at instant H_k. Every
//! record seen by drain k-1 was readable at H_{k-1}, so its time is at
//! most H_{k-1}, and so is the watermark W_k of drain k. A record with time
//! t <= W_k that drain k has not seen was written into its ring after H_k,
//! more than H_k - H_{k-1} after it was timestamped, i.e. it took the
//! kernel longer than one whole read interval (the poll wait, 50 to 100 ms
//! for profdev's readers) to write a record it had already timestamped.
//! perf relies on the same bound; the kernel writes a record within
//! microseconds of taking its time. Reads can come much closer together
//! than the poll wait, though (a ring a quarter full, a process session's
//! hung-up events make poll return at once), and a virtual CPU can be
//! descheduled between stamping a record and writing it; so the live
//! reader also caps the watermark at its own clock (the records' clock,
//! `CLOCK_MONOTONIC`) read before the heads, less [`GUARD_NS`]: then a
//! record is only ever released early if the kernel took longer than both
//! the read interval and 10 ms to write it.
//!
//! **Latency.** Every record seen in drain k has a time at most the
//! highest time of drain k, which is the watermark of drain k+1: a record
//! waits at most one more read (and, when reads come faster than
//! [`GUARD_NS`], until a read at least that long after its time). A session's end releases everything:
//! [`Merge::flush`] (a Process session whose events all hung up, and the
//! engine's last read after `stop`).
//!
//! Records of the same time keep the order of their queues (lower queue
//! first) and, within a queue, ring order. Records the reader makes up
//! (synthesized tasks at time 0, `Lost` for undecodable bytes at the time
//! of the last good record of that ring) are queued like the others and
//! keep their place. A ring that is not in time order (the kernel does not
//! promise it for records written from different contexts, and a loaded
//! virtual CPU shows it) has a late record put back in time order among its
//! queued records as it is queued, so every release is in time order;
//! nothing is lost or repeated. (A record older than what an earlier
//! release already gave out can only follow it, in the next release.)

use profdev_core::Record;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// How far behind its clock the live reader keeps the watermark: 10 ms.
pub const GUARD_NS: u64 = 10_000_000;

/// Per-queue record streams, released in time order behind a watermark.
///
/// ```
/// use profdev_core::Record;
/// use profdev_sample::merge::Merge;
///
/// let exit = |time| Record::Exit { pid: 7, ppid: 1, tid: 7, ptid: 1, time };
/// let lost = |cpu, time| Record::Lost { cpu, count: 1, time };
/// let mut m = Merge::new(2);
/// let mut out = Vec::new();
/// // Drain 1: CPU 0's EXIT at t=100 is readable, CPU 1's record at t=90
/// // is not yet.
/// m.push(0, exit(100));
/// m.end_drain(u64::MAX, &mut out);
/// assert!(out.is_empty()); // nothing is safe yet
/// // Drain 2: CPU 1's record shows up.
/// m.push(1, lost(1, 90));
/// m.end_drain(u64::MAX, &mut out);
/// assert_eq!(out, vec![lost(1, 90), exit(100)]);
/// ```
#[derive(Debug, Default)]
pub struct Merge {
    queues: Vec<VecDeque<Record>>,
    /// The highest time pushed through the last completed drain: the next
    /// drain's watermark.
    seen: u64,
    /// The highest time pushed in the drain under way.
    drain_max: u64,
    /// Records queued and not yet released.
    held: usize,
    /// Scratch for the k-way merge: (time of a queue's head, queue).
    heap: BinaryHeap<Reverse<(u64, usize)>>,
}

impl Merge {
    /// A merge of `queues` streams (one per ring, plus any the reader
    /// makes up), watermark 0: records at time 0 are released by the first
    /// drain.
    pub fn new(queues: usize) -> Self {
        Merge {
            queues: (0..queues).map(|_| VecDeque::new()).collect(),
            ..Merge::default()
        }
    }

    /// Queue `rec`, read from stream `queue` in the drain under way.
    /// Records of one queue come in their ring's order; one older than the
    /// queue's last is put in time order behind every queued record of its
    /// time or older (rare: a stable insertion, the queue stays sorted).
    ///
    /// # Panics
    ///
    /// If `queue` is not below the number given to [`Merge::new`].
    pub fn push(&mut self, queue: usize, rec: Record) {
        let t = rec.time();
        self.drain_max = self.drain_max.max(t);
        let q = &mut self.queues[queue];
        if q.back().is_none_or(|last| last.time() <= t) {
            q.push_back(rec);
        } else {
            let at = q.partition_point(|r| r.time() <= t);
            q.insert(at, rec);
        }
        self.held += 1;
    }

    /// The drain is over (every ring was read up to heads taken at one
    /// instant): append to `out`, in time order, every record at or below
    /// the watermark (the highest time seen before this drain) and at or
    /// below `not_after`, then raise the watermark to this drain's highest
    /// time. Returns the number of records released.
    pub fn end_drain(&mut self, not_after: u64, out: &mut Vec<Record>) -> usize {
        let n = self.release(self.seen.min(not_after), out);
        self.seen = self.seen.max(self.drain_max);
        n
    }

    /// The session ends: append every queued record to `out`, in time
    /// order. Returns the number of records released.
    pub fn flush(&mut self, out: &mut Vec<Record>) -> usize {
        self.seen = self.seen.max(self.drain_max);
        self.release(u64::MAX, out)
    }

    /// Records queued and not yet released.
    pub fn held(&self) -> usize {
        self.held
    }

    /// The time at or below which the next [`Merge::end_drain`] releases.
    pub fn watermark(&self) -> u64 {
        self.seen
    }

    /// The k-way merge of the queue heads at or below `limit`.
    fn release(&mut self, limit: u64, out: &mut Vec<Record>) -> usize {
        let head = |q: &VecDeque<Record>| q.front().map(Record::time).filter(|&t| t <= limit);
        self.heap.clear();
        for (i, q) in self.queues.iter().enumerate() {
            if let Some(t) = head(q) {
                self.heap.push(Reverse((t, i)));
            }
        }
        let before = out.len();
        while let Some(Reverse((_, i))) = self.heap.pop() {
            let q = &mut self.queues[i];
            out.extend(q.pop_front());
            if let Some(t) = head(q) {
                self.heap.push(Reverse((t, i)));
            }
        }
        let n = out.len() - before;
        self.held -= n;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_core::{CpuMode, Sample};

    fn sample(cpu: u32, time: u64, id: u64) -> Record {
        Record::Sample(Sample {
            ip: id,
            pid: 9,
            tid: 9,
            cpu,
            time,
            mode: CpuMode::User,
            ..Sample::default()
        })
    }

    fn exit(time: u64) -> Record {
        Record::Exit {
            pid: 9,
            ppid: 1,
            tid: 9,
            ptid: 1,
            time,
        }
    }

    fn sorted(recs: &[Record]) -> bool {
        recs.windows(2).all(|w| w[0].time() <= w[1].time())
    }

    #[test]
    fn exit_waits_for_an_earlier_sample_of_another_cpu() {
        let mut m = Merge::new(2);
        let mut out = Vec::new();
        // Drain 1: CPU 0 has a sample at 40 and the EXIT at 100; CPU 1's
        // sample at 90 is not yet written.
        m.push(0, sample(0, 40, 1));
        m.push(0, exit(100));
        assert_eq!(m.end_drain(u64::MAX, &mut out), 0);
        assert_eq!(m.watermark(), 100);
        // Drain 2: the sample at 90 arrives; both go out, sample first.
        m.push(1, sample(1, 90, 2));
        assert_eq!(m.end_drain(u64::MAX, &mut out), 3);
        assert_eq!(out, vec![sample(0, 40, 1), sample(1, 90, 2), exit(100)]);
        assert_eq!(m.held(), 0);
        // Sorting each drain's batch, the old way, gets it wrong: the EXIT
        // comes out one batch before the sample it must follow.
        let first_batch_sorted = {
            let mut b = vec![sample(0, 40, 1), exit(100)];
            b.sort_by_key(Record::time);
            b
        };
        assert_eq!(first_batch_sorted.last(), Some(&exit(100)));
    }

    #[test]
    fn the_readers_bound_holds_records_back() {
        let mut m = Merge::new(1);
        let mut out = Vec::new();
        m.push(0, sample(0, 40, 1));
        m.push(0, sample(0, 60, 2));
        m.end_drain(u64::MAX, &mut out);
        // Watermark 60, but the reader's clock says nothing above 50 is
        // safe yet.
        assert_eq!(m.end_drain(50, &mut out), 1);
        assert_eq!(out, vec![sample(0, 40, 1)]);
        assert_eq!(m.end_drain(60, &mut out), 1);
        assert_eq!(m.held(), 0);
    }

    #[test]
    fn time_zero_goes_first_and_at_once() {
        let mut m = Merge::new(3);
        let comm = Record::Comm {
            pid: 9,
            tid: 9,
            comm: "sh".into(),
            exec: false,
            time: 0,
        };
        // Queue 0: synthesized tasks; the rings' records come with it.
        m.push(0, comm.clone());
        m.push(1, sample(0, 5, 1));
        m.push(2, sample(1, 3, 2));
        let mut out = Vec::new();
        assert_eq!(m.end_drain(u64::MAX, &mut out), 1);
        assert_eq!(out, vec![comm.clone()]);
        m.end_drain(u64::MAX, &mut out);
        assert_eq!(out, vec![comm, sample(1, 3, 2), sample(0, 5, 1)]);
    }

    #[test]
    fn lost_and_throttle_keep_their_place() {
        let mut m = Merge::new(2);
        let lost = Record::Lost {
            cpu: 0,
            count: 7,
            time: 20,
        };
        let throttle = Record::Throttle {
            cpu: 1,
            throttled: true,
            time: 25,
        };
        m.push(0, sample(0, 10, 1));
        m.push(0, lost.clone());
        m.push(0, sample(0, 30, 2));
        m.push(1, sample(1, 20, 3));
        m.push(1, throttle.clone());
        let mut out = Vec::new();
        m.end_drain(u64::MAX, &mut out);
        assert!(out.is_empty());
        m.flush(&mut out);
        // Equal times: lower queue first, so CPU 0's Lost precedes CPU 1's
        // sample at 20.
        assert_eq!(
            out,
            vec![
                sample(0, 10, 1),
                lost,
                sample(1, 20, 3),
                throttle,
                sample(0, 30, 2)
            ]
        );
    }

    #[test]
    fn flush_releases_everything_and_an_unsorted_ring_comes_out_sorted() {
        let mut m = Merge::new(2);
        m.push(0, sample(0, 50, 1));
        m.push(0, sample(0, 40, 2)); // out of order within its ring
        m.push(1, sample(1, 45, 3));
        let mut out = Vec::new();
        m.end_drain(u64::MAX, &mut out);
        m.push(1, sample(1, 60, 4));
        // Watermark 50: queue 0's 40 was put before its 50 when queued.
        m.end_drain(u64::MAX, &mut out);
        assert_eq!(
            out,
            vec![sample(0, 40, 2), sample(1, 45, 3), sample(0, 50, 1)]
        );
        assert_eq!(m.held(), 1);
        assert_eq!(m.flush(&mut out), 1);
        assert_eq!(out.last(), Some(&sample(1, 60, 4)));
        assert_eq!(m.flush(&mut out), 0);
    }

    /// xorshift64*: a fixed-seed generator, so every run tests the same
    /// interleavings.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Random per-CPU streams, written into their rings with a delay of up
    /// to `delay` after their timestamps (in ring order), drained at
    /// random instants at least `delay` apart: the merged output is in time
    /// order and a permutation of the input, and only the final flush
    /// releases records above the last watermark.
    #[test]
    fn random_interleavings_come_out_sorted_and_complete() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..300 {
            let cpus = 1 + rng.below(8) as usize;
            let delay = 1 + rng.below(50);
            // Per CPU: (time, publish instant, id), in ring order.
            let mut id = 0u64;
            let mut rings: Vec<Vec<(u64, u64, u64)>> = Vec::new();
            for _ in 0..cpus {
                let mut t = rng.below(20);
                let mut published = 0;
                let n = rng.below(60);
                let mut ring = Vec::new();
                for _ in 0..n {
                    t += rng.below(30); // equal times happen
                    published = (t + rng.below(delay)).max(published);
                    ring.push((t, published, id));
                    id += 1;
                }
                rings.push(ring);
            }
            let mut m = Merge::new(cpus);
            let mut next = vec![0usize; cpus];
            let mut out = Vec::new();
            let mut now = 0;
            while next.iter().zip(&rings).any(|(i, r)| *i < r.len()) {
                now += delay + rng.below(40);
                for (c, ring) in rings.iter().enumerate() {
                    while let Some(&(t, p, id)) = ring.get(next[c]) {
                        if p > now {
                            break;
                        }
                        m.push(c, sample(c as u32, t, id));
                        next[c] += 1;
                    }
                }
                let before = out.len();
                let watermark = m.watermark();
                m.end_drain(u64::MAX, &mut out);
                assert!(
                    out[before..].iter().all(|r| r.time() <= watermark),
                    "round {round}: released above the watermark"
                );
            }
            m.flush(&mut out);
            assert_eq!(m.held(), 0);
            assert!(sorted(&out), "round {round}: output not in time order");
            let mut ids: Vec<u64> = out
                .iter()
                .map(|r| match r {
                    Record::Sample(s) => s.ip,
                    _ => unreachable!(),
                })
                .collect();
            ids.sort_unstable();
            assert_eq!(ids, (0..id).collect::<Vec<_>>(), "round {round}");
        }
    }

    /// Rings that are not in time order (a record now and then written
    /// after a younger one): every release is in time order and nothing is
    /// lost or repeated.
    #[test]
    fn unsorted_rings_give_sorted_releases() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for round in 0..300 {
            let cpus = 1 + rng.below(4) as usize;
            let mut m = Merge::new(cpus);
            let mut pushed = 0;
            let mut out = Vec::new();
            for _drain in 0..rng.below(20) {
                for c in 0..cpus {
                    let base = rng.below(1000);
                    for k in 0..rng.below(10) {
                        // Mostly ascending, sometimes a step back.
                        let t = (base + 10 * k).saturating_sub(rng.below(4) * rng.below(30));
                        m.push(c, sample(c as u32, t, pushed));
                        pushed += 1;
                    }
                }
                let before = out.len();
                m.end_drain(u64::MAX, &mut out);
                assert!(
                    sorted(&out[before..]),
                    "round {round}: a release not in time order"
                );
            }
            m.flush(&mut out);
            let mut ids: Vec<u64> = out
                .iter()
                .map(|r| match r {
                    Record::Sample(s) => s.ip,
                    _ => unreachable!(),
                })
                .collect();
            ids.sort_unstable();
            assert_eq!(ids, (0..pushed).collect::<Vec<_>>(), "round {round}");
        }
    }
}
