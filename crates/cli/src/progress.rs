//! The health of a private run (`profdev sample`, `gmon`, `prof`): a live
//! progress line on a terminal, the totals at the end, and the ring size
//! (`--mmap-pages`).
//!
//! The rate is samples per second of the CPU time sampled: for `prof`
//! and `gmon`, which sample CMD's process tree, per second of CMD's CPU
//! time in the modes sampled ([`Progress::start_timed`], from
//! `profdev_sample::cputime`), so a program with two busy threads reads
//! the rate asked, as one with a single thread does; for `sample`, system
//! wide, per second of sampling per CPU.
//!
//! The numbers are a [`Health`], the same counters a mounted device shows
//! in its `stat/` file (`profdev_dev::health`): whoever feeds the run
//! counts into it, and [`Progress`] reads it from a thread of its own
//! every quarter second, only when stderr is a terminal:
//!
//! ```text
//! profdev gmon: 3.2s, 998 Hz, 3190 samples, 0 lost, 2 unwind failures
//! ```
//!
//! [`Progress::finish`] clears that line and prints the totals, terminal
//! or not, as one line on stderr:
//!
//! ```text
//! profdev gmon: totals: 3204 samples, 998 Hz (asked 1000), 0 lost, 0 throttled, 3190 stacks unwound, 14 unwind failures (no_stack 0, truncated 14, unresolved 0)
//! ```

use profdev_dev::health::{Health, HealthSnapshot};
use profdev_sample::cputime::CpuTime;
use std::io::{IsTerminal, Write as _};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the progress line is redrawn.
const PERIOD: Duration = Duration::from_millis(250);

/// Reads the CPU time of the tasks a run samples (a process tree's), for
/// the rate: see `profdev_sample::cputime`.
pub type CpuClock = Box<dyn Fn() -> Option<CpuTime> + Send + Sync>;

/// The progress line of one run.
pub struct Progress {
    name: &'static str,
    health: Arc<Health>,
    cpu: Option<Arc<CpuClock>>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Show `health` as `NAME: …` on stderr while the run lasts, if stderr
    /// is a terminal (nothing otherwise).
    pub fn start(name: &'static str, health: Arc<Health>) -> Self {
        Progress::start_on(name, health, None, std::io::stderr().is_terminal())
    }

    /// [`Progress::start`] for a run on a process tree whose CPU time
    /// `cpu` reads: the rate is per second of that time (see
    /// `profdev_dev::health`).
    pub fn start_timed(name: &'static str, health: Arc<Health>, cpu: CpuClock) -> Self {
        Progress::start_on(
            name,
            health,
            Some(Arc::new(cpu)),
            std::io::stderr().is_terminal(),
        )
    }

    fn start_on(
        name: &'static str,
        health: Arc<Health>,
        cpu: Option<Arc<CpuClock>>,
        terminal: bool,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<()>();
        let thread = terminal.then(|| {
            let health = health.clone();
            let cpu = cpu.clone();
            let started = Instant::now();
            std::thread::spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(PERIOD) {
                    set_cpu(&health, cpu.as_deref());
                    let line = health.snapshot().live_line(name, started.elapsed());
                    eprint!("\r\x1b[K{line}");
                }
                eprint!("\r\x1b[K");
            })
        });
        Progress {
            name,
            health,
            cpu,
            stop: Some(tx),
            thread,
        }
    }

    /// Stop the line (cleared), print the totals line, and return them.
    pub fn finish(self) -> HealthSnapshot {
        self.finish_timed(None)
    }

    /// [`Progress::finish`] for a run on a process tree: its CPU time is
    /// `cpu` (CMD's final one, once reaped) or, without it, read once more.
    pub fn finish_timed(mut self, cpu: Option<CpuTime>) -> HealthSnapshot {
        self.stop_line();
        match cpu {
            Some(t) => self.health.set_cpu_time(t.user, t.system),
            None => set_cpu(&self.health, self.cpu.as_deref()),
        }
        let totals = self.health.snapshot();
        eprintln!("{}", totals.totals_line(self.name));
        let _ = std::io::stderr().flush();
        totals
    }

    fn stop_line(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Progress {
    /// An early return (an error) still clears the line.
    fn drop(&mut self) {
        self.stop_line();
    }
}

/// Give `health` the CPU time `cpu` reads, when it reads one.
fn set_cpu(health: &Health, cpu: Option<&CpuClock>) {
    if let Some(t) = cpu.and_then(|read| read()) {
        health.set_cpu_time(t.user, t.system);
    }
}

pub use profdev_classic::cmdline::parse_mmap_pages;

/// The live engine with the ring `--mmap-pages` asked for (its log2), or
/// the engine's own size.
pub fn factory(mmap_pages_log2: Option<u32>) -> profdev_sample::PerfFactory {
    let f = profdev_sample::PerfFactory::new();
    match mmap_pages_log2 {
        Some(n) => f.ring_pages_log2(n),
        None => f,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_core::{Record, Sample, SessionConfig};

    #[test]
    fn mmap_pages_is_a_power_of_two() {
        assert_eq!(parse_mmap_pages("1"), Ok(0));
        assert_eq!(parse_mmap_pages("8"), Ok(3));
        assert_eq!(parse_mmap_pages("65536"), Ok(16));
        for bad in ["0", "3", "131072", "-1", "x", ""] {
            let e = parse_mmap_pages(bad).unwrap_err();
            assert!(e.contains("power of two"), "{bad}: {e}");
        }
        assert_eq!(factory(Some(0)).ring_pages(&SessionConfig::system(1000)), 1);
        assert_eq!(
            factory(Some(4)).ring_pages(&SessionConfig::system(1000)),
            16
        );
    }

    #[test]
    fn lines_show_the_health() {
        let h = Arc::new(Health::new());
        h.started(&SessionConfig::system(500));
        h.count(&[
            Record::Sample(Sample::default()),
            Record::Lost {
                cpu: 0,
                count: 4,
                time: 0,
            },
        ]);
        let s = h.snapshot();
        let live = s.live_line("profdev sample", Duration::from_millis(1500));
        assert!(live.starts_with("profdev sample: 1.5s, "), "{live}");
        assert!(live.ends_with(" Hz, 1 samples, 4 lost"), "{live}");
        let t = s.totals_line("profdev sample");
        assert!(t.contains(": totals: 1 samples, "), "{t}");
        assert!(t.contains("(asked 500), 4 lost, 0 throttled"), "{t}");
        assert!(!t.contains("unwind"), "{t}");
        h.set_unwind(7, [0, 2, 0]);
        let s = h.snapshot();
        assert!(s
            .live_line("x", Duration::ZERO)
            .ends_with(", 2 unwind failures"));
        assert!(s.totals_line("x").ends_with(
            ", 7 stacks unwound, 2 unwind failures (no_stack 0, truncated 2, unresolved 0)"
        ));
    }

    #[test]
    fn no_line_off_a_terminal() {
        let p = Progress::start_on("x", Arc::new(Health::new()), None, false);
        assert!(p.thread.is_none());
        assert_eq!(p.finish().samples, 0);
        // On a terminal the thread runs and stops when asked.
        let mut p = Progress::start_on("x", Arc::new(Health::new()), None, true);
        assert!(p.thread.is_some());
        p.stop_line();
        assert!(p.thread.is_none());
    }
}
