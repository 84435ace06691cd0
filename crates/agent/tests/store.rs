//! The agent's health file and local store, over a replayed source (no
//! privilege needed): with no destination the recordings go to
//! `STATE/store` and read back as one with every sample; the health file
//! in the state directory says what the run's outcome says, a failing
//! destination's failures and last error included.

mod common;

use profdev_agent::{health, run_with, store, with_spools, Options, Outcome};
use profdev_core::{CpuMode, Record, Sample, SampleSource, SourceError, SourceStats};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime};

/// Two batches of samples of one process, `gap` apart (a live source's
/// wait for records), with losses; then the end.
struct Replay {
    batches: Vec<Vec<Record>>,
    next_at: Instant,
    gap: Duration,
    lost: u64,
}

fn samples(pid: u32, n: usize) -> Vec<Record> {
    let mut v = vec![Record::Comm {
        pid,
        tid: pid,
        comm: "replayed".into(),
        exec: false,
        time: 1,
    }];
    v.extend((0..n).map(|i| {
        Record::Sample(Sample {
            ip: 0x1000 + i as u64,
            pid,
            tid: pid,
            time: 10 + i as u64,
            period: 10_000_000,
            mode: CpuMode::User,
            ..Sample::default()
        })
    }));
    v
}

impl Replay {
    fn new(gap: Duration) -> Replay {
        Replay {
            batches: vec![samples(4242, 7), samples(4243, 5)],
            next_at: Instant::now(),
            gap,
            lost: 0,
        }
    }
}

impl SampleSource for Replay {
    fn read(&mut self, out: &mut Vec<Record>, timeout: Duration) -> Result<(), SourceError> {
        if self.batches.is_empty() {
            return Err(SourceError::Ended);
        }
        let now = Instant::now();
        if now < self.next_at {
            // As a live source waits for its rings.
            std::thread::sleep(timeout.min(self.next_at - now));
            return Ok(());
        }
        out.append(&mut self.batches.remove(0));
        self.lost += 3;
        self.next_at = Instant::now() + self.gap;
        Ok(())
    }
    fn stats(&self) -> SourceStats {
        SourceStats {
            lost: self.lost,
            ..SourceStats::default()
        }
    }
}

fn run(opts: &Options) -> (Outcome, Vec<String>) {
    let dests = with_spools(opts, profdev_agent::destinations(opts).unwrap()).unwrap();
    let mut log = Vec::new();
    let out = run_with(
        opts,
        &mut Replay::new(opts.interval * 2),
        profdev_symbolize::Objects::new(),
        dests,
        &AtomicBool::new(false),
        &mut |l| log.push(l.to_string()),
    );
    (out, log)
}

/// The health file's columns as a map per column.
fn health_of(state: &Path) -> Vec<(String, std::collections::BTreeMap<String, String>)> {
    health::read(state)
        .unwrap()
        .expect("a health file")
        .into_iter()
        .map(|(c, kv)| (c, kv.into_iter().collect()))
        .collect()
}

#[test]
fn with_no_destination_the_store_keeps_every_interval_and_reads_back_as_one() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("state");
    let opts = Options {
        interval: Duration::from_millis(100),
        state_dir: Some(state.clone()),
        flush: Duration::from_secs(30),
        ..Options::default()
    };
    let (out, log) = run(&opts);
    assert!(out.profiles >= 2, "{out:?} {log:?}");
    assert_eq!(out.samples, 12, "{out:?}");
    let st = &out.destinations[0];
    assert_eq!(st.name, format!("store {}", state.join("store").display()));
    assert_eq!((st.sent, st.failures, st.undelivered), (out.profiles, 0, 0));
    let files: Vec<String> = std::fs::read_dir(state.join("store"))
        .unwrap()
        .map(|f| f.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files.len() as u64, out.profiles, "{files:?}");
    assert!(files.iter().all(|f| store::parse_name(f).is_some()));
    let w = store::read_window(
        &state.join("store"),
        Duration::from_secs(600),
        SystemTime::now(),
    )
    .unwrap();
    assert!(w.notes.is_empty(), "{:?}", w.notes);
    assert_eq!(w.files.len() as u64, out.profiles);
    let rec = &w.recording;
    assert_eq!(rec.samples.len(), 12);
    let pids: std::collections::BTreeSet<u32> = rec.samples.iter().map(|s| s.pid).collect();
    assert_eq!(pids, [4242, 4243].into());
    assert!(rec.samples.iter().all(|s| rec.task(s).comm == "replayed"));
    // The health file at the end is the outcome.
    let h = health_of(&state);
    let agent = &h[0].1;
    assert_eq!(agent["state"], "ended");
    assert_eq!(agent["profiles"], out.profiles.to_string());
    assert_eq!(agent["samples"], "12");
    assert_eq!(agent["lost"], out.lost.to_string());
    assert_eq!(out.lost, 6);
    assert_eq!(agent["interval_s"], "0");
    assert_eq!(h[1].0, "agent.store");
    assert_eq!(h[1].1["sent"], out.profiles.to_string());
    assert_eq!(h[1].1["last_error"], "-");
}

#[test]
fn a_failing_destination_shows_its_failures_and_last_error() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("state");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = format!("http://{}", listener.local_addr().unwrap());
    let got = common::http_collector(listener);
    // A loopback address of this test's own, its port closed.
    let down = TcpListener::bind("127.0.0.9:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let opts = Options {
        interval: Duration::from_millis(100),
        state_dir: Some(state.clone()),
        otlp: Some(profdev_agent::OtlpOptions {
            url: up.clone(),
            protocol: profdev_agent::otlp::Protocol::Http,
        }),
        pyroscope: Some(format!("http://{down}")),
        flush: Duration::from_millis(500),
        ..Options::default()
    };
    let (out, _) = run(&opts);
    assert_eq!(got.lock().unwrap().len() as u64, out.profiles);
    let h = health_of(&state);
    let names: Vec<&str> = h.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(names, ["agent", "agent.otlp-http", "agent.pyroscope"]);
    assert_eq!(h[0].1["profiles"], out.profiles.to_string());
    assert_eq!(h[0].1["samples"], out.samples.to_string());
    assert_eq!(h[1].1["destination"], up);
    assert_eq!(h[1].1["sent"], out.profiles.to_string());
    assert_eq!(h[1].1["failures"], "0");
    let py = &out.destinations[1];
    assert!(py.failures >= 1 && py.sent == 0, "{py:?}");
    assert_eq!(h[2].1["failures"], py.failures.to_string());
    assert_eq!(h[2].1["undelivered"], py.undelivered.to_string());
    let e = py.last_error.clone().unwrap();
    assert_eq!(h[2].1["last_error"], e);
    assert!(e.contains(&down.to_string()), "{e}");
    // No store beside a destination unless --store is given.
    assert!(!state.join("store").exists());
}

/// A state directory that cannot be made costs the health file only: the
/// profiles still go to the destination, and the log says why.
#[test]
fn without_its_state_directory_the_agent_still_sends() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = format!("http://{}", listener.local_addr().unwrap());
    let got = common::http_collector(listener);
    let opts = Options {
        interval: Duration::from_millis(100),
        state_dir: Some(file.clone()),
        otlp: Some(profdev_agent::OtlpOptions {
            url: up,
            protocol: profdev_agent::otlp::Protocol::Http,
        }),
        ..Options::default()
    };
    let (out, log) = run(&opts);
    assert_eq!(got.lock().unwrap().len() as u64, out.profiles);
    assert_eq!(out.destinations[0].sent, out.profiles);
    assert_eq!(
        log.iter()
            .filter(|l| l.starts_with(&format!(
                "no health file: --state-dir: cannot write in {}",
                file.display()
            )))
            .count(),
        1,
        "{log:?}"
    );
}
