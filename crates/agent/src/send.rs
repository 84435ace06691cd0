//! Sending apart from sampling: one thread per destination, fed through a
//! bounded spool in memory. The sampling loop only pushes a cut (it never
//! waits for a network); the thread sends the oldest first and drops it
//! from the spool only once the destination took it, so profiles arrive
//! in order. A destination that fails is tried again after an exponential
//! backoff with jitter (half the delay fixed, half random), reset at the
//! next success. When the spool would exceed its byte cap, the oldest
//! profiles are dropped and counted.
//!
//! At the end ([`Sender::finish`]) the thread keeps sending until the
//! spool is empty or the deadline passes; what is left is counted as
//! undelivered.

use crate::disk::DiskSpool;
use crate::Cut;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Where profiles go: how a cut becomes a request body, and how the body
/// is sent.
pub trait Destination: Send {
    /// The destination as the health line names it (`otlp-http URL`).
    fn name(&self) -> String;
    /// The request body of `cut`.
    fn encode(&self, cut: &Cut) -> Result<Vec<u8>, String>;
    /// Send a body; an error is one sentence.
    fn send(&mut self, body: &[u8]) -> Result<(), String>;
    /// What the last successful send's answer said beyond success (an
    /// OTLP partial success), once: it becomes the status's last error.
    fn note(&mut self) -> Option<String> {
        None
    }
    /// Deliver `cut`: by default its body encoded and sent (the local
    /// store writes the cut itself).
    fn deliver(&mut self, cut: &Cut) -> Result<(), String> {
        let body = self.encode(cut)?;
        self.send(&body)
    }
}

/// Several request bodies as one (each after its length, 8 bytes
/// little-endian), for a destination that sends a cut in several
/// requests (the heap profiles' after the CPU one's).
pub fn frames(bodies: impl IntoIterator<Item = Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for body in bodies {
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body);
    }
    out
}

/// The bodies of [`frames`].
pub fn unframe(mut bytes: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes
            .split_first_chunk::<8>()
            .ok_or("internal error: a truncated request body")?;
        let len = usize::try_from(u64::from_le_bytes(*len)).unwrap_or(usize::MAX);
        if len > rest.len() {
            return Err("internal error: a truncated request body".into());
        }
        out.push(&rest[..len]);
        bytes = &rest[len..];
    }
    Ok(out)
}

/// The backoff after the first failure, and its cap.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The delay after `failures` consecutive failures (at least one),
    /// `random` a uniform 64-bit number: in `[d/2, d]` for
    /// `d = min(max, first * 2^(failures-1))`.
    pub fn delay(&self, failures: u32, random: u64) -> Duration {
        let d = self
            .first
            .saturating_mul(1u32 << failures.saturating_sub(1).min(20))
            .min(self.max);
        let half = d / 2;
        let nanos = half.as_nanos() as u64;
        half + Duration::from_nanos(if nanos == 0 { 0 } else { random % (nanos + 1) })
    }
}

/// A destination's counts, as the health line and the outcome show them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// The destination's name.
    pub name: String,
    /// Profiles the destination took.
    pub sent: u64,
    /// Heap profiles (`--heap`) in the profiles it took.
    pub heap_sent: u64,
    /// Attempts that failed.
    pub failures: u64,
    /// The last failure's sentence.
    pub last_error: Option<String>,
    /// Profiles dropped, oldest first, to keep the spool under its cap.
    pub dropped: u64,
    /// Profiles waiting, and their bytes (recordings and heap profiles).
    pub spooled: usize,
    pub spool_bytes: usize,
    /// Heap profiles in the profiles waiting.
    pub spool_heap: usize,
    /// Profiles still waiting when the agent ended.
    pub undelivered: u64,
}

struct State {
    queue: VecDeque<Arc<Cut>>,
    cap: usize,
    closing: Option<Instant>,
    status: Status,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// The spool's mirror on disk (`--spool DIR`).
    disk: Option<DiskSpool>,
}

/// One destination's spool and thread.
pub struct Sender {
    shared: Arc<Shared>,
    thread: std::thread::JoinHandle<()>,
}

impl Sender {
    /// Start the thread of `dest`, its spool capped at `cap` bytes and
    /// mirrored in `disk` if given (what `disk` holds from an earlier run
    /// is queued first, oldest first).
    pub fn start(
        dest: Box<dyn Destination>,
        cap: usize,
        backoff: Backoff,
        disk: Option<DiskSpool>,
    ) -> Sender {
        let earlier = disk.as_ref().map(DiskSpool::load);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                cap,
                closing: None,
                status: Status {
                    name: dest.name(),
                    ..Status::default()
                },
            }),
            wake: Condvar::new(),
            disk,
        });
        if let Some((cuts, errors)) = earlier {
            for cut in cuts {
                queue(&shared, Arc::new(cut));
            }
            if let Some(e) = errors.into_iter().last() {
                lock(&shared).status.last_error = Some(e);
            }
        }
        let s = shared.clone();
        let thread = std::thread::spawn(move || run(&s, dest, backoff));
        Sender { shared, thread }
    }

    /// Queue a cut, dropping the oldest ones while the spool would hold
    /// more than its cap (the newest is always kept).
    pub fn push(&self, cut: Arc<Cut>) {
        if let Some(disk) = &self.shared.disk {
            if let Err(e) = disk.save(&cut) {
                lock(&self.shared).status.last_error = Some(format!("cannot spool: {e}"));
            }
        }
        queue(&self.shared, cut);
        self.shared.wake.notify_all();
    }

    /// The counts now.
    pub fn status(&self) -> Status {
        lock(&self.shared).status.clone()
    }

    /// Send what the spool holds until it is empty or `deadline` passes,
    /// then end the thread; the counts at the end.
    pub fn finish(self, deadline: Instant) -> Status {
        lock(&self.shared).closing = Some(deadline);
        self.shared.wake.notify_all();
        let _ = self.thread.join();
        let mut st = lock(&self.shared);
        st.status.undelivered = st.queue.len() as u64;
        st.status.clone()
    }
}

/// Queue `cut`, dropping the oldest (and their files) past the cap.
fn queue(shared: &Shared, cut: Arc<Cut>) {
    let mut st = lock(shared);
    st.status.spool_bytes += cut.bytes();
    st.status.spool_heap += cut.heap.len();
    st.queue.push_back(cut);
    while st.status.spool_bytes > st.cap && st.queue.len() > 1 {
        let old = st.queue.pop_front().expect("more than one");
        st.status.spool_bytes -= old.bytes();
        st.status.spool_heap -= old.heap.len();
        st.status.dropped += 1;
        if let Some(disk) = &shared.disk {
            let _ = disk.remove(&old);
        }
    }
    st.status.spooled = st.queue.len();
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// A small random number generator for the jitter (xorshift), seeded from
/// the clock and the thread.
fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    (t ^ u64::from(std::process::id()).rotate_left(32)) | 1
}

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// The cut to send next, once the backoff allows it; `None` when the
/// thread is to end (closing with the spool empty, or past the deadline).
fn next_cut(shared: &Shared, retry_at: Option<Instant>) -> Option<Arc<Cut>> {
    let mut st = lock(shared);
    loop {
        let now = Instant::now();
        let closing_done = match st.closing {
            Some(deadline) => now >= deadline || st.queue.is_empty(),
            None => false,
        };
        if closing_done {
            return None;
        }
        let retry = retry_at.filter(|&r| r > now);
        if let (Some(c), None) = (st.queue.front(), retry) {
            return Some(c.clone());
        }
        // Woken by a push or the end; else at the retry or the deadline.
        let wake = match (retry, st.closing) {
            (Some(r), Some(d)) => Some(r.min(d)),
            (r, d) => r.or(d),
        };
        st = match wake {
            Some(w) => {
                shared
                    .wake
                    .wait_timeout(st, w.saturating_duration_since(now))
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => shared.wake.wait(st).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

fn run(shared: &Shared, mut dest: Box<dyn Destination>, backoff: Backoff) {
    let mut random = seed();
    let mut failures = 0u32;
    let mut retry_at: Option<Instant> = None;
    loop {
        let Some(cut) = next_cut(shared, retry_at) else {
            return;
        };
        let sent = dest.deliver(&cut);
        let mut st = lock(shared);
        match sent {
            Ok(()) => {
                failures = 0;
                retry_at = None;
                st.status.sent += 1;
                st.status.heap_sent += cut.heap.len() as u64;
                if let Some(n) = dest.note() {
                    st.status.last_error = Some(n);
                }
                // The cut may have been dropped for the cap meanwhile.
                if st.queue.front().is_some_and(|c| Arc::ptr_eq(c, &cut)) {
                    st.queue.pop_front();
                    st.status.spool_bytes -= cut.bytes();
                    st.status.spool_heap -= cut.heap.len();
                    if let Some(disk) = &shared.disk {
                        let _ = disk.remove(&cut);
                    }
                }
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                retry_at = Some(Instant::now() + backoff.delay(failures, next(&mut random)));
                st.status.failures += 1;
                st.status.last_error = Some(e);
            }
        }
        st.status.spooled = st.queue.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_back_whole() {
        let f = frames([b"ab".to_vec(), Vec::new(), b"c".to_vec()]);
        assert_eq!(unframe(&f).unwrap(), [&b"ab"[..], b"", b"c"]);
        assert!(unframe(&f[..f.len() - 1]).is_err());
        assert!(unframe(&f[..3]).is_err());
        assert_eq!(unframe(&[]).unwrap(), Vec::<&[u8]>::new());
    }
    use std::sync::mpsc;

    fn cut(seq: u64, bytes: usize) -> Arc<Cut> {
        Arc::new(Cut {
            seq,
            start_ns: 1_000 + seq,
            recording: vec![0; bytes],
            ..Cut::default()
        })
    }

    /// A destination that fails while `down` holds and reports each body
    /// it takes (the cut's sequence number).
    struct Flaky {
        down: Arc<Mutex<bool>>,
        got: mpsc::Sender<u64>,
        tried: mpsc::Sender<()>,
    }

    impl Destination for Flaky {
        fn name(&self) -> String {
            "flaky".into()
        }
        fn encode(&self, cut: &Cut) -> Result<Vec<u8>, String> {
            Ok(cut.seq.to_le_bytes().to_vec())
        }
        fn send(&mut self, body: &[u8]) -> Result<(), String> {
            // Whether it is down is read before the attempt is reported,
            // so that a test that saw N attempts knows how they ended.
            let down = *self.down.lock().unwrap();
            let _ = self.tried.send(());
            if down {
                return Err("connection refused".into());
            }
            let _ = self.got.send(u64::from_le_bytes(body.try_into().unwrap()));
            Ok(())
        }
    }

    #[test]
    fn the_delay_doubles_to_its_cap_with_jitter_in_its_upper_half() {
        let b = Backoff {
            first: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        assert_eq!(b.delay(1, 0), Duration::from_millis(50));
        assert_eq!(b.delay(1, u64::MAX), b.delay(1, u64::MAX));
        assert!(b.delay(1, 12345) <= Duration::from_millis(100));
        assert_eq!(b.delay(3, 0), Duration::from_millis(200));
        assert_eq!(b.delay(30, 0), Duration::from_millis(500));
        assert!(b.delay(30, 7) <= Duration::from_secs(1));
    }

    /// Down for the first cuts, then up: every cut arrives, in order, and
    /// the failures are counted with their sentence.
    #[test]
    fn a_destination_down_then_up_gets_every_profile_in_order() {
        let down = Arc::new(Mutex::new(true));
        let (got_tx, got) = mpsc::channel();
        let (tried_tx, tried) = mpsc::channel();
        let b = Backoff {
            first: Duration::from_millis(1),
            max: Duration::from_millis(4),
        };
        let dest = Flaky {
            down: down.clone(),
            got: got_tx,
            tried: tried_tx,
        };
        let s = Sender::start(Box::new(dest), 1 << 20, b, None);
        for seq in 0..3 {
            s.push(cut(seq, 10));
        }
        // Three failed attempts, then the destination comes back.
        for _ in 0..3 {
            tried.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        *down.lock().unwrap() = false;
        s.push(cut(3, 10));
        let mut seen = Vec::new();
        while seen.len() < 4 {
            seen.push(got.recv_timeout(Duration::from_secs(10)).unwrap());
        }
        assert_eq!(seen, vec![0, 1, 2, 3]);
        let st = s.finish(Instant::now() + Duration::from_secs(10));
        assert_eq!((st.sent, st.undelivered, st.dropped), (4, 0, 0));
        assert!(st.failures >= 3);
        assert_eq!(st.last_error.as_deref(), Some("connection refused"));
    }

    /// The spool's cap drops the oldest and counts them; at the end what
    /// could not be sent by the deadline is counted as undelivered.
    #[test]
    fn the_cap_drops_the_oldest_and_the_end_counts_what_is_left() {
        let down = Arc::new(Mutex::new(true));
        let (got_tx, _got) = mpsc::channel();
        let (tried_tx, _tried) = mpsc::channel();
        let b = Backoff {
            first: Duration::from_secs(3600),
            max: Duration::from_secs(3600),
        };
        let dest = Flaky {
            down,
            got: got_tx,
            tried: tried_tx,
        };
        let s = Sender::start(Box::new(dest), 250, b, None);
        for seq in 0..5 {
            s.push(cut(seq, 100));
        }
        let st = s.status();
        assert_eq!((st.dropped, st.spooled, st.spool_bytes), (3, 2, 200));
        let st = s.finish(Instant::now());
        assert_eq!((st.sent, st.undelivered), (0, 2));
    }

    /// A cut's heap profiles count in the spool's bytes and in the
    /// status: waiting, then taken.
    #[test]
    fn heap_profiles_are_counted_in_the_spool_and_when_sent() {
        let down = Arc::new(Mutex::new(true));
        let (got_tx, got) = mpsc::channel();
        let (tried_tx, tried) = mpsc::channel();
        let b = Backoff {
            first: Duration::from_millis(1),
            max: Duration::from_millis(4),
        };
        let dest = Flaky {
            down: down.clone(),
            got: got_tx,
            tried: tried_tx,
        };
        let s = Sender::start(Box::new(dest), 1 << 20, b, None);
        let mut c = Cut {
            seq: 5,
            recording: vec![0; 10],
            ..Cut::default()
        };
        c.heap.push(crate::heap::HeapProfile {
            pid: 1,
            comm: "a".into(),
            ..Default::default()
        });
        let bytes = c.bytes();
        assert_eq!(bytes, 10 + 22);
        s.push(Arc::new(c));
        tried.recv_timeout(Duration::from_secs(10)).unwrap();
        let st = s.status();
        assert_eq!((st.spooled, st.spool_bytes, st.spool_heap), (1, bytes, 1));
        *down.lock().unwrap() = false;
        assert_eq!(got.recv_timeout(Duration::from_secs(10)).unwrap(), 5);
        let st = s.finish(Instant::now() + Duration::from_secs(10));
        assert_eq!((st.sent, st.heap_sent), (1, 1));
        assert_eq!((st.spooled, st.spool_bytes, st.spool_heap), (0, 0, 0));
    }

    /// With a spool on disk: an agent that ends with its destination down
    /// leaves the cuts on disk; the next one sends them first, in order,
    /// and removes their files. The cap drops the oldest files too.
    #[test]
    fn a_restarted_sender_drains_the_spool_on_disk() {
        let d = tempfile::tempdir().unwrap();
        let disk = || Some(DiskSpool::open(&d.path().join("spool"), "flaky").unwrap());
        let files = || {
            std::fs::read_dir(d.path().join("spool/flaky"))
                .unwrap()
                .count()
        };
        let down = Arc::new(Mutex::new(true));
        let (got_tx, got) = mpsc::channel();
        let (tried_tx, _tried) = mpsc::channel();
        let never = Backoff {
            first: Duration::from_secs(3600),
            max: Duration::from_secs(3600),
        };
        let dest = Flaky {
            down: down.clone(),
            got: got_tx.clone(),
            tried: tried_tx.clone(),
        };
        let s = Sender::start(Box::new(dest), 250, never, disk());
        for seq in 0..4 {
            s.push(cut(seq, 100));
        }
        let st = s.finish(Instant::now());
        assert_eq!((st.sent, st.dropped, st.undelivered), (0, 2, 2));
        assert_eq!(files(), 2);
        // The next run: the destination is up.
        *down.lock().unwrap() = false;
        let dest = Flaky {
            down,
            got: got_tx,
            tried: tried_tx,
        };
        // A cap that holds the two left and the new one: with 250 the
        // push could drop the oldest before the thread sent it.
        let s = Sender::start(Box::new(dest), 1000, never, disk());
        s.push(cut(10, 100));
        let seen: Vec<u64> = (0..3)
            .map(|_| got.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(seen, vec![2, 3, 10]);
        let st = s.finish(Instant::now() + Duration::from_secs(10));
        assert_eq!((st.sent, st.undelivered), (3, 0));
        assert_eq!(files(), 0);
    }
}
