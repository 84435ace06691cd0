//! The continuous-profiling agent of `profdev agent`: the whole machine
//! sampled with kernel and user stacks, one profile cut per interval,
//! labelled, and sent to the backends a fleet already runs. The
//! command's man page (`crates/cli/src/agent.rs`) says what it does; this
//! crate is how.
//!
//! * [`run`]: the interval loop. It opens a system-wide `PerfFactory`
//!   session (the objects table's mapping hook on it, as `record -a -g`
//!   does), hands each record to the label table and to
//!   `profdev_record::intervals::Intervals` (the recorder of `profdev
//!   record`, cut into one recording per interval, its symbols named
//!   locally and every object's build id kept), and at each cut pushes one
//!   [`Cut`] to every destination's [`send::Sender`]. [`run_with`] is the
//!   same loop over any `SampleSource` (tests replay records into it).
//! * [`labels`] and [`cgroup`]: each process's executable and cgroup (its
//!   container id, systemd unit, pod uid), read when it is first seen.
//! * [`send`]: a thread per destination, its bounded spool, backoff with
//!   jitter, delivery in order; [`disk`]: the spool mirrored on disk
//!   (`--spool DIR`), drained by the next start.
//! * [`store`]: the local rolling store kept without a destination (a
//!   [`send::Destination`] writing each cut's recording in a directory
//!   pruned by size and age), read by `profdev report` and `export
//!   --since`; [`health`]: the state directory and its health file, read
//!   by `profdev stat --agent`.
//! * [`heap`]: `--heap PID`, `--heap-comm NAME`: mprof's library
//!   attached to chosen processes, a report asked of each at every cut,
//!   turned into heap profiles ([`heap::HeapProfile`], in the [`Cut`]),
//!   the processes detached at the end; [`otlp_heap`]: their OTLP
//!   request.
//! * [`otlp`]: the OpenTelemetry destination (HTTP and gRPC);
//!   [`pyroscope`]: Grafana Pyroscope's push API (connect protocol, pprof);
//!   [`parca`]: Parca's WriteRaw (gRPC, pprof); [`grpc`]: their client;
//!   [`url`]: destination addresses and the plain-http rule; [`tls`]: the
//!   roots https is checked against; [`token`]: the credentials.
//!
//! Sampling never waits for a network: a destination that is down only
//! fills its spool (oldest dropped past the cap, counted).
//!
//! # Not built yet (issue 26), and where each goes
//!
//! * A process's cgroup from the kernel (`PERF_RECORD_CGROUP`) rather than
//!   from `/proc` when first seen.

#![forbid(unsafe_code)]

pub mod cgroup;
pub mod disk;
#[doc(hidden)]
pub mod fuzzing;
pub mod grpc;
pub mod health;
pub mod heap;
pub mod labels;
pub mod otlp;
pub mod otlp_heap;
pub mod parca;
pub mod pyroscope;
pub mod send;
pub mod store;
pub mod tls;
pub mod token;
pub mod url;

use disk::DiskSpool;
use labels::{Labels, ProcessLabels};
use profdev_core::{Record, SampleSource, SessionConfig, SourceError, Target};
use profdev_record::intervals::{IntervalOptions, Intervals};
use send::{Backoff, Destination, Sender, Status};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why the agent could not run: one sentence.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Error(pub String);

/// One interval's profile, as every destination gets it.
#[derive(Clone, Debug, Default)]
pub struct Cut {
    /// Its number, from 0.
    pub seq: u64,
    /// The interval, `[start_ns, end_ns)` in Unix nanoseconds.
    pub start_ns: u64,
    pub end_ns: u64,
    /// What turns the recording's times (`CLOCK_MONOTONIC`) into Unix
    /// ones, added modulo 2^64.
    pub to_unix: u64,
    /// The interval's recording (`profdev_formats::recording`).
    pub recording: Vec<u8>,
    /// The labels of the processes it samples.
    pub processes: BTreeMap<u32, Arc<ProcessLabels>>,
    /// The heap profiles of the `--heap` processes (spooled, stored and
    /// retried with the recording).
    pub heap: Vec<heap::HeapProfile>,
}

impl Cut {
    /// The bytes it holds, as a spool's cap counts them: its recording
    /// and its heap profiles (their size in a spool file).
    pub fn bytes(&self) -> usize {
        self.recording.len()
            + self
                .heap
                .iter()
                .map(heap::HeapProfile::bytes)
                .sum::<usize>()
    }
}

/// An OTLP destination as the command line gives it.
#[derive(Clone, Debug)]
pub struct OtlpOptions {
    pub url: String,
    pub protocol: otlp::Protocol,
}

/// What the agent is asked to do, as `profdev agent`'s options say.
#[derive(Clone, Debug)]
pub struct Options {
    /// `-F`: samples per second per CPU.
    pub frequency: u32,
    /// `--interval`: one profile per destination this often.
    pub interval: Duration,
    /// Bytes of user stack each sample copies.
    pub stack_bytes: u32,
    /// `--label KEY=VALUE`: on every profile.
    pub labels: Vec<(String, String)>,
    /// `--otlp URL` with `--otlp-protocol`.
    pub otlp: Option<OtlpOptions>,
    /// `--pyroscope URL`.
    pub pyroscope: Option<String>,
    /// `--pyroscope-api`: push (default) or ingest.
    pub pyroscope_api: pyroscope::Api,
    /// `--parca URL`.
    pub parca: Option<String>,
    /// `--insecure`: plain http to another machine is accepted (never
    /// with a token).
    pub insecure: bool,
    /// `--token-file` or `--basic-auth-file`: the credential every
    /// request carries.
    pub token: Option<token::Token>,
    /// `--tls-ca`: the CA certificates https destinations are checked
    /// against instead of the system's roots.
    pub tls_ca: Option<std::path::PathBuf>,
    /// Each destination's spool cap, in bytes of recordings.
    pub spool_bytes: usize,
    /// `--spool DIR`: the spools mirrored on disk, drained at the next
    /// start.
    pub spool: Option<std::path::PathBuf>,
    /// How long the end may spend sending what the spools hold.
    pub flush: Duration,
    /// `-v`: a health line per interval.
    pub verbose: bool,
    /// `--lines`: name source lines too (DWARF read: memory and time).
    pub lines: bool,
    /// `--state-dir`: where the health file is written each interval
    /// (and the store kept, under `store/`); none: no health file.
    pub state_dir: Option<std::path::PathBuf>,
    /// `--store DIR`: the local store, kept even beside destinations;
    /// without it and without a destination, `STATE/store`.
    pub store: Option<std::path::PathBuf>,
    /// `--store-max-bytes` and `--store-max-age`: the store's bounds.
    pub store_max_bytes: u64,
    pub store_max_age: Duration,
    /// `--heap PID`, `--heap-sample-bytes`: heap profiles too.
    pub heap: heap::HeapOptions,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            frequency: 19,
            interval: Duration::from_secs(15),
            stack_bytes: 16384,
            labels: Vec::new(),
            otlp: None,
            pyroscope: None,
            pyroscope_api: pyroscope::Api::Push,
            parca: None,
            insecure: false,
            token: None,
            tls_ca: None,
            spool_bytes: 64 << 20,
            spool: None,
            flush: Duration::from_secs(10),
            verbose: false,
            lines: false,
            state_dir: None,
            store: None,
            store_max_bytes: store::DEFAULT_MAX_BYTES,
            store_max_age: store::DEFAULT_MAX_AGE,
            heap: heap::HeapOptions {
                sample_bytes: heap::DEFAULT_SAMPLE_BYTES,
                ..heap::HeapOptions::default()
            },
        }
    }
}

/// How the agent ended, for the command to print.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Profiles cut.
    pub profiles: u64,
    /// Samples in them.
    pub samples: u64,
    /// Records the kernel lost.
    pub lost: u64,
    /// Heap profiles cut (`--heap`), and the processes profiled at the
    /// last cut.
    pub heap_profiles: u64,
    pub heap_processes: usize,
    /// Each destination's counts.
    pub destinations: Vec<Status>,
    /// Why sampling stopped, when it was not asked to.
    pub stopped: Option<String>,
}

impl Outcome {
    /// The lines that say how the agent ended: profiles, samples and
    /// losses, then each destination's counts and last error.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "{} profiles, {} samples, {} lost",
            self.profiles, self.samples, self.lost
        )];
        for d in &self.destinations {
            let mut line = format!(
                "{}: {} sent, {} failed, {} dropped, {} undelivered",
                d.name, d.sent, d.failures, d.dropped, d.undelivered
            );
            if let Some(e) = &d.last_error {
                line.push_str(&format!(" (last error: {e})"));
            }
            lines.push(line);
        }
        lines
    }
}

/// The backoff of a destination: from a tenth of the interval (at least
/// 100 ms), doubling to eight intervals (at most five minutes).
pub fn backoff(interval: Duration) -> Backoff {
    Backoff {
        first: (interval / 10).max(Duration::from_millis(100)),
        max: (interval * 8).min(Duration::from_secs(300)),
    }
}

/// The destinations `opts` names, checked (addresses, the plain-http
/// rule); at least one: without a network destination, the local store
/// (`--store DIR`, else `STATE/store`).
pub fn destinations(opts: &Options) -> Result<Vec<Box<dyn Destination>>, Error> {
    let mut common = vec![("host.name".to_string(), labels::host_name())];
    common.extend(opts.labels.iter().cloned());
    let token = opts.token.clone();
    let tls = match &opts.tls_ca {
        Some(f) => tls::Tls::with_ca(f).map_err(Error)?,
        None => tls::Tls::system(),
    };
    let mut out: Vec<Box<dyn Destination>> = Vec::new();
    if let Some(o) = &opts.otlp {
        let port = match o.protocol {
            otlp::Protocol::Grpc => 4317,
            otlp::Protocol::Http => 4318,
        };
        let url = checked(&o.url, port, opts)?;
        let d =
            otlp::Otlp::new(url, o.protocol, common.clone(), token.clone(), &tls).map_err(Error)?;
        out.push(Box::new(d));
    }
    if let Some(u) = &opts.pyroscope {
        let url = checked(u, 4040, opts)?;
        out.push(Box::new(
            pyroscope::Pyroscope::new(
                url,
                opts.pyroscope_api,
                opts.frequency,
                common.clone(),
                token.clone(),
                &tls,
            )
            .map_err(Error)?,
        ));
    }
    if let Some(u) = &opts.parca {
        let url = checked(u, 7070, opts)?;
        let d = parca::Parca::new(url, common.clone(), token.clone(), &tls).map_err(Error)?;
        out.push(Box::new(d));
    }
    let store = match (&opts.store, &opts.state_dir) {
        (Some(d), _) => Some(d.clone()),
        (None, Some(state)) if out.is_empty() => {
            health::open_state(state).map_err(|e| Error(format!("--state-dir: {e}")))?;
            Some(state.join("store"))
        }
        _ => None,
    };
    if let Some(d) = store {
        let s = store::Store::open(&d, opts.store_max_bytes, opts.store_max_age).map_err(Error)?;
        out.push(Box::new(s));
    }
    if out.is_empty() {
        return Err(Error(
            "no destination: give --otlp URL, --pyroscope URL, --parca URL, or a state directory for the local store"
                .into(),
        ));
    }
    Ok(out)
}

/// The address `text` (`port` when it names none), checked: plain http
/// only to this machine unless `--insecure`, and never a credential over
/// plain http to another machine.
fn checked(text: &str, port: u16, opts: &Options) -> Result<url::Url, Error> {
    let url = url::Url::parse(text, port).map_err(Error)?;
    if let Some(t) = &opts.token {
        if url.scheme == "http" && !url.is_loopback() {
            return Err(Error(format!(
                "{url}: refusing to send the {} credential over plain http to another machine, even with --insecure; use https",
                t.flag()
            )));
        }
    }
    url.check(opts.insecure).map_err(Error)?;
    Ok(url)
}

/// A destination and its spool directory, if any.
pub type Spooled = (Box<dyn Destination>, Option<DiskSpool>);

/// Each destination with its spool directory under `--spool DIR`, if
/// given.
pub fn with_spools(
    opts: &Options,
    dests: Vec<Box<dyn Destination>>,
) -> Result<Vec<Spooled>, Error> {
    dests
        .into_iter()
        .map(|d| {
            let disk = match &opts.spool {
                Some(root) => Some(
                    DiskSpool::open(root, &d.name()).map_err(|e| Error(format!("--spool: {e}")))?,
                ),
                None => None,
            };
            Ok((d, disk))
        })
        .collect()
}

/// The system-wide session the agent samples with.
pub fn session_config(opts: &Options) -> Result<SessionConfig, Error> {
    let config = SessionConfig {
        target: Target::System,
        frequency_hz: opts.frequency,
        kernel: true,
        user: true,
        callchain: true,
        user_stack_bytes: opts.stack_bytes,
        track_tasks: true,
        off_cpu: false,
    };
    config.validate().map_err(|e| Error(e.to_string()))?;
    Ok(config)
}

/// Run as `opts` asks until `stop` is set (or sampling fails): the whole
/// machine, its mapped files kept in `objects`; `log` gets the health
/// lines (with `-v`).
pub fn run(
    opts: &Options,
    objects: profdev_symbolize::Objects,
    stop: &AtomicBool,
    log: &mut dyn FnMut(&str),
) -> Result<Outcome, Error> {
    let dests = with_spools(opts, destinations(opts)?)?;
    let config = session_config(opts)?;
    let factory = profdev_sample::PerfFactory::new().with_mapping_hook(objects.mapping_hook());
    let mut source = factory
        .open_perf(&config)
        .map_err(|e| Error(e.to_string()))?;
    Ok(run_with(opts, &mut source, objects, dests, stop, log))
}

/// Unix time now, in nanoseconds.
fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The loop of [`run`] over `source`, sending to `dests`.
pub fn run_with(
    opts: &Options,
    source: &mut dyn SampleSource,
    objects: profdev_symbolize::Objects,
    dests: Vec<Spooled>,
    stop: &AtomicBool,
    log: &mut dyn FnMut(&str),
) -> Outcome {
    let senders: Vec<Sender> = dests
        .into_iter()
        .map(|(d, disk)| Sender::start(d, opts.spool_bytes, backoff(opts.interval), disk))
        .collect();
    let iv_opts = IntervalOptions {
        stacks: true,
        stack_bytes: opts.stack_bytes,
        frequency: opts.frequency,
        symbols: true,
        // Memory over speed: functions come from the symbol tables alone
        // (with --lines a large object's DWARF is parsed too), the object
        // named last kept parsed: a large library sampled in many
        // processes (a compiler's) is not parsed again for each address.
        keep_open: 1,
        lines: opts.lines,
    };
    let mut start = unix_ns();
    let mut iv = Intervals::new(&iv_opts, objects, start);
    let mut health = Health::new(opts, log);
    let mut heap = Some(heap::Heap::start(&opts.heap, log));
    let mut labels = Labels::new("/proc".into());
    let mut out = Outcome::default();
    let mut batch: Vec<Record> = Vec::new();
    let mut next = Instant::now() + opts.interval;
    let mut ticked = Instant::now();
    let mut lost_before = 0;
    // Intervals cut whose recordings wait for their symbols, oldest first.
    let mut cutting: VecDeque<Cut> = VecDeque::new();
    loop {
        let r = source.read(&mut batch, Duration::from_millis(100));
        let stopping = stop.load(Ordering::Relaxed) || r.is_err();
        if let Err(e) = r {
            if !matches!(e, SourceError::Ended) {
                out.stopped = Some(e.to_string());
            }
        }
        if stopping && out.stopped.is_none() {
            // What the rings and the merge still hold.
            let _ = source.read(&mut batch, Duration::ZERO);
            source.flush(&mut batch);
        }
        for record in batch.drain(..) {
            labels.observe(&record);
            if let Err(e) = iv.record(&record) {
                out.stopped = Some(e.to_string());
            }
        }
        if ticked.elapsed() >= Duration::from_secs(1) {
            iv.tick();
            ticked = Instant::now();
        }
        if Instant::now() >= next || stopping {
            let end = unix_ns();
            let to_unix = end.wrapping_sub(profdev_sample::sys::monotonic_ns());
            let samples = iv.samples();
            iv.cut(end);
            let heaps = match (stopping, &mut heap) {
                (true, h) => h.take().map_or_else(Vec::new, |h| h.finish(log)),
                (false, Some(h)) => h.cut(log),
                (false, None) => Vec::new(),
            };
            out.heap_profiles += heaps.len() as u64;
            out.heap_processes = heap.as_ref().map_or(0, heap::Heap::processes);
            cutting.push_back(Cut {
                seq: out.profiles,
                start_ns: start,
                end_ns: end,
                to_unix,
                recording: Vec::new(),
                processes: labels.cut(),
                heap: heaps,
            });
            out.profiles += 1;
            out.samples += samples;
            let lost = source.stats().lost;
            let statuses: Vec<Status> = senders.iter().map(Sender::status).collect();
            out.lost = lost;
            health.write(&out, &statuses, false, log);
            if opts.verbose {
                log(&health_line(
                    out.profiles - 1,
                    samples,
                    lost - lost_before,
                    &statuses,
                ));
            }
            lost_before = lost;
            start = end;
            next = (next + opts.interval).max(Instant::now());
        }
        hand_on(&mut cutting, iv.ready(), &senders);
        if stopping {
            break;
        }
    }
    hand_on(&mut cutting, iv.finish(), &senders);
    out.lost = source.stats().lost;
    let deadline = Instant::now() + opts.flush;
    out.destinations = senders.into_iter().map(|s| s.finish(deadline)).collect();
    health.write(&out, &out.destinations, true, log);
    out
}

/// The health file of a run, if it has a state directory.
struct Health {
    dir: Option<profdev_safefile::Dir>,
    file: health::Health,
    /// A failure was said already (it is said once).
    failed: bool,
}

impl Health {
    fn new(opts: &Options, log: &mut dyn FnMut(&str)) -> Health {
        let dir = opts
            .state_dir
            .as_deref()
            .and_then(|d| match health::open_state(d) {
                Ok(d) => Some(d),
                Err(e) => {
                    // Sending goes on; only the health file is missing.
                    log(&format!("no health file: --state-dir: {e}"));
                    None
                }
            });
        let now = std::time::SystemTime::now();
        let file = health::Health {
            pid: std::process::id(),
            started: Some(now),
            interval: opts.interval,
            frequency: opts.frequency,
            ..health::Health::default()
        };
        Health {
            dir,
            file,
            failed: false,
        }
    }

    /// Write the counts of `out` and `dests`.
    fn write(&mut self, out: &Outcome, dests: &[Status], ended: bool, log: &mut dyn FnMut(&str)) {
        let Some(dir) = &self.dir else { return };
        let f = &mut self.file;
        f.ended = ended;
        f.updated = Some(std::time::SystemTime::now());
        (f.profiles, f.samples, f.lost) = (out.profiles, out.samples, out.lost);
        (f.heap_processes, f.heap_profiles) = (out.heap_processes, out.heap_profiles);
        f.destinations = dests.to_vec();
        if let Err(e) = f.write(dir) {
            if !std::mem::replace(&mut self.failed, true) {
                log(&format!("cannot write the health file: {e}"));
            }
        }
    }
}

/// Give each recording ready its cut (the oldest waiting: they come in
/// order) and hand the cut to every destination.
fn hand_on(cutting: &mut VecDeque<Cut>, ready: Vec<Vec<u8>>, senders: &[Sender]) {
    for recording in ready {
        let Some(mut cut) = cutting.pop_front() else {
            return;
        };
        cut.recording = recording;
        let cut = Arc::new(cut);
        for s in senders {
            s.push(cut.clone());
        }
    }
}

/// The health line of interval `seq`: its samples and losses, then each
/// destination's counts.
pub fn health_line(seq: u64, samples: u64, lost: u64, dests: &[Status]) -> String {
    let mut line = format!("agent: interval {seq}: {samples} samples, {lost} lost");
    for d in dests {
        line.push_str(&format!(
            "; {}: {} sent, {} failed, spool {} profiles ({} bytes), {} dropped",
            d.name, d.sent, d.failures, d.spooled, d.spool_bytes, d.dropped
        ));
        if let Some(e) = &d.last_error {
            line.push_str(&format!(" (last error: {e})"));
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(url: &str, insecure: bool, token: bool) -> Options {
        let token = token.then(|| {
            let d = tempfile::tempdir().unwrap();
            let f = d.path().join("t");
            std::fs::write(&f, "tok").unwrap();
            token::Token::read(&f).unwrap()
        });
        Options {
            pyroscope: Some(url.into()),
            insecure,
            token,
            ..Options::default()
        }
    }

    /// Plain http to another machine needs --insecure, and with a token
    /// is refused even then; to this machine both are fine.
    #[test]
    fn a_token_never_goes_over_plain_http_to_another_machine() {
        let far = "http://collector.example:4040";
        assert!(destinations(&opts(far, false, false)).is_err());
        assert!(destinations(&opts(far, true, false)).is_ok());
        let e = destinations(&opts(far, true, true))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            e,
            "http://collector.example:4040: refusing to send the --token-file credential over plain http to another machine, even with --insecure; use https"
        );
        assert!(destinations(&opts("http://127.0.0.1:4040", false, true)).is_ok());
        let none = destinations(&Options::default()).err().unwrap().to_string();
        assert!(none.starts_with("no destination: "), "{none}");
        // With a state directory, the store is the destination.
        let d = tempfile::tempdir().unwrap();
        let o = Options {
            state_dir: Some(d.path().into()),
            ..Options::default()
        };
        let names: Vec<String> = destinations(&o).unwrap().iter().map(|d| d.name()).collect();
        assert_eq!(
            names,
            [format!("store {}", d.path().join("store").display())]
        );
    }
}
