//! The agent end to end against OTLP collectors on 127.0.0.1: the whole
//! machine sampled at 99 Hz in one-second intervals while a CPU-hot C
//! program runs in cgroups named like a docker container, a systemd
//! service and a Kubernetes pod (each run until it has used 300 ms of
//! CPU time and the agent has read its start: a loaded machine makes that
//! later, never less); each request decoded with the
//! opentelemetry-proto crate's types (v1.10.0) and checked for what a
//! backend needs: the hot function's name, the labels, the time range,
//! the sample type and unit; the `--token-file` token in every HTTP
//! request and gRPC call (that collector refuses a call without it) and
//! in none of the agent's lines. A collector that refuses connections for
//! three intervals, then listens, gets every profile in order.

mod common;

use common::*;
use profdev_agent::otlp::Protocol;
use profdev_agent::{Options, OtlpOptions, Outcome};
use std::net::TcpListener;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

// Generous: the first cut waits for the names of every object sampled
// system wide, which on a busy machine can take tens of seconds.
const LONG: Duration = Duration::from_secs(180);
const TOKEN: &str = "t0k3n-0f-th3-t3st";

/// The agent running in a thread of the test.
struct Running {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<String>>>,
    thread: std::thread::JoinHandle<Result<Outcome, profdev_agent::Error>>,
}

fn start(opts: Options) -> Running {
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    let (s, l) = (stop.clone(), log.clone());
    let thread = std::thread::spawn(move || {
        profdev_agent::run(&opts, profdev_symbolize::Objects::new(), &s, &mut |line| {
            l.lock().unwrap().push(line.to_string())
        })
    });
    Running { stop, log, thread }
}

impl Running {
    fn intervals(&self) -> usize {
        self.log.lock().unwrap().len()
    }
    fn finish(self) -> (Outcome, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let out = self.thread.join().unwrap().expect("the agent runs");
        let log = self.log.lock().unwrap().clone();
        (out, log)
    }
}

/// A hot program run for as long as it is needed (`hot 1e9`), killed and
/// reaped when dropped (a failed test leaves nothing running).
struct Hot(Child);

impl Drop for Hot {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The CPU time each hot program uses before it is killed.
const HOT_CPU: Duration = Duration::from_millis(300);

/// Wait (bounded) until each of `hot` has used [`HOT_CPU`] of CPU time,
/// then until the agent has cut two more intervals: the second one's
/// reading began after that, so that the agent has read the records of
/// each program's start (its exec, where its cgroup is read from /proc)
/// while the program still runs. Then kill them.
fn run_hot(agent: &Running, hot: Vec<Hot>) {
    let pids: Vec<u32> = hot.iter().map(|h| h.0.id()).collect();
    profdev_testkit::wait_until(
        &format!("the hot programs {pids:?} to use {HOT_CPU:?} of CPU time"),
        LONG,
        || {
            pids.iter().all(|&pid| {
                profdev_sample::cputime::of_process(pid)
                    .is_some_and(|t| t.user + t.system >= HOT_CPU)
            })
        },
    );
    let cut = agent.intervals();
    profdev_testkit::wait_until("two more intervals", LONG, || agent.intervals() >= cut + 2);
    drop(hot);
}

/// Unix time now, in nanoseconds.
fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The number of samples of each interval, from the agent's health lines
/// (`agent: interval SEQ: N samples, ...`), in order.
fn samples_by_interval(log: &[String]) -> Vec<usize> {
    log.iter()
        .filter_map(|l| l.strip_prefix("agent: interval "))
        .enumerate()
        .map(|(i, l)| {
            let (seq, rest) = l.split_once(": ").unwrap();
            assert_eq!(seq.parse::<usize>().unwrap(), i, "{l}");
            rest.split_once(" samples").unwrap().0.parse().unwrap()
        })
        .collect()
}

fn otlp(url: String, protocol: Protocol) -> Option<OtlpOptions> {
    Some(OtlpOptions { url, protocol })
}

/// Every process of `reqs` by pid, merged over the requests: attributes,
/// functions, samples.
fn by_pid(reqs: &[Seen]) -> Seen {
    let mut all = Seen::default();
    for s in reqs {
        all.attributes.extend(s.attributes.clone());
        all.functions.extend(s.functions.iter().cloned());
        all.samples += s.samples;
        all.sample_type = s.sample_type.clone();
    }
    all
}

#[test]
fn otlp_http_names_the_hot_function_and_the_cgroup_labels() {
    if !ready("profdev agent --otlp (http)") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let hot = build_hot(d.path());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let got = http_collector(listener);
    let token_file = d.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let began = unix_ns();
    let agent = start(Options {
        otlp: otlp(url, Protocol::Http),
        token: Some(profdev_agent::token::Token::read(&token_file).unwrap()),
        ..options()
    });
    // The agent's first interval has begun before the programs start.
    profdev_testkit::wait_until("the agent's first interval", LONG, || {
        agent.intervals() >= 1
    });
    let under = POD.replace('-', "_");
    let groups = [
        Cgroup::new("docker", &format!("system.slice/docker-{CONTAINER}.scope")),
        Cgroup::new("unit", "system.slice/hot.service"),
        Cgroup::new(
            "pod",
            &format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{under}.slice/cri-containerd-{CONTAINER}.scope"),
        ),
    ];
    let children: Vec<Hot> = groups.iter().map(|g| Hot(g.spawn(&hot, "1e9"))).collect();
    let pids: Vec<u32> = children.iter().map(|h| h.0.id()).collect();
    run_hot(&agent, children);
    let (out, log) = agent.finish();
    let ended = unix_ns();
    let taken = got.lock().unwrap().clone();
    assert_eq!(taken.len() as u64, out.profiles, "{log:?}");
    assert_eq!(out.destinations[0].sent, out.profiles);
    let mut per_pid: std::collections::BTreeMap<u32, Vec<Seen>> = Default::default();
    let mut last_end = None;
    // The token is in every request, and in none of the agent's words.
    for line in log.iter().chain(&out.summary()) {
        assert!(!line.contains(TOKEN), "{line}");
    }
    for t in &taken {
        assert_eq!(t.authorization, Some(format!("Bearer {TOKEN}")));
        assert_eq!(t.path, "/v1development/profiles");
        assert_eq!(t.content_type, "application/x-protobuf");
        assert_eq!(t.content_encoding.as_deref(), Some("gzip"));
        let req = decode(&t.body);
        let ps = profiles(&req);
        // Every profile of a request covers the interval; intervals follow
        // one another.
        if let Some(p) = ps.values().next() {
            for q in ps.values() {
                assert_eq!(
                    (q.time_unix_nano, q.duration_nano),
                    (p.time_unix_nano, p.duration_nano)
                );
            }
            // About a second, but not on the wall clock's schedule: a
            // loaded machine runs the agent's loop late, and the last
            // interval is cut when the agent is stopped. Each lies within
            // the agent's run, as this test's clock saw it.
            let end = p.time_unix_nano + p.duration_nano;
            assert!(
                p.duration_nano > 0 && p.time_unix_nano >= began && end <= ended,
                "[{}, {end}) is not within the run [{began}, {ended}]",
                p.time_unix_nano
            );
            if let Some(end) = last_end {
                assert!(p.time_unix_nano >= end, "intervals out of order");
            }
            last_end = Some(p.time_unix_nano + p.duration_nano);
        }
        for (pid, p) in ps {
            per_pid.entry(pid).or_default().push(p);
        }
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for (i, pid) in pids.iter().enumerate() {
        let p = by_pid(
            per_pid
                .get(pid)
                .unwrap_or_else(|| panic!("no profile of pid {pid}: {log:?}")),
        );
        assert!(
            p.functions.iter().any(|f| f == "hot_loop"),
            "{:?}",
            p.functions
        );
        assert_eq!(
            p.sample_type,
            ("cpu".to_string(), "nanoseconds".to_string())
        );
        let a = &p.attributes;
        assert_eq!(a["host.name"], host.trim());
        assert_eq!(a["service_name"], "hot-test");
        assert_eq!(a["process.executable.name"], "hot");
        assert_eq!(a["process.executable.path"], hot.to_str().unwrap());
        assert_eq!(a["process.executable.build_id.gnu"].len(), 40, "{a:?}");
        assert!(
            a["process.linux.cgroup"].starts_with("/profdev-test-"),
            "{a:?}"
        );
        let (container, unit, pod) = (
            a.get("container.id").map(String::as_str),
            a.get("profdev.systemd.unit").map(String::as_str),
            a.get("k8s.pod.uid").map(String::as_str),
        );
        match i {
            0 => {
                assert_eq!(container, Some(CONTAINER));
                assert_eq!(unit, Some(format!("docker-{CONTAINER}.scope").as_str()));
                assert_eq!(pod, None);
            }
            1 => assert_eq!((container, unit, pod), (None, Some("hot.service"), None)),
            _ => {
                assert_eq!((container, pod), (Some(CONTAINER), Some(POD)));
            }
        }
    }
}

#[test]
fn otlp_grpc_names_the_hot_function() {
    if !ready("profdev agent --otlp (grpc)") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let hot = build_hot(d.path());
    let (url, got) = grpc_collector(TOKEN);
    let token_file = d.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let agent = start(Options {
        otlp: otlp(url, Protocol::Grpc),
        token: Some(profdev_agent::token::Token::read(&token_file).unwrap()),
        ..options()
    });
    profdev_testkit::wait_until("the agent's first interval", LONG, || {
        agent.intervals() >= 1
    });
    let child = Hot(std::process::Command::new(&hot).arg("1e9").spawn().unwrap());
    let pid = child.0.id();
    run_hot(&agent, vec![child]);
    let (out, log) = agent.finish();
    let reqs = got.lock().unwrap().clone();
    // Every call carried the token (the collector refuses one without).
    assert_eq!(reqs.len() as u64, out.profiles, "{log:?}");
    assert_eq!(out.destinations[0].failures, 0, "{log:?}");
    let mine: Vec<Seen> = reqs
        .iter()
        .filter_map(|r| profiles(r).remove(&pid))
        .collect();
    let p = by_pid(&mine);
    assert!(
        p.functions.iter().any(|f| f == "hot_loop"),
        "{:?} {log:?}",
        p.functions
    );
    assert_eq!(
        p.sample_type,
        ("cpu".to_string(), "nanoseconds".to_string())
    );
    assert_eq!(p.attributes["service_name"], "hot-test");
    assert_eq!(
        p.attributes["process.executable.path"],
        hot.to_str().unwrap()
    );
}

/// The collector's port refuses connections (nothing listens) for three
/// intervals; then it listens, and gets every profile, in order.
#[test]
fn a_collector_down_for_three_intervals_gets_every_profile_in_order() {
    if !ready("profdev agent with a collector down, then up") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let hot = build_hot(d.path());
    // Busy until killed, at the end, so that intervals have samples.
    let busy = Hot(std::process::Command::new(&hot).arg("1e9").spawn().unwrap());
    // A loopback address of this test's own: a port it frees there cannot
    // be taken by another test's collector (they listen on 127.0.0.1).
    let port = TcpListener::bind("127.0.0.7:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let agent = start(Options {
        otlp: otlp(format!("http://{port}"), Protocol::Http),
        ..options()
    });
    // Three intervals cut, and at least three attempts refused (the
    // health line's "N failed"), nothing sent.
    profdev_testkit::wait_until("three intervals refused", LONG, || {
        let log = agent.log.lock().unwrap();
        let failed = |l: &String| -> u64 {
            l.split(" sent, ")
                .nth(1)
                .and_then(|r| r.split(" failed").next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        log.len() >= 3
            && log.iter().all(|l| l.contains(" 0 sent,"))
            && log.last().map_or(0, failed) >= 3
    });
    let got = http_collector(TcpListener::bind(port).unwrap());
    profdev_testkit::wait_until("the spool sent", LONG, || got.lock().unwrap().len() >= 5);
    let (out, log) = agent.finish();
    drop(busy);
    let taken = got.lock().unwrap().clone();
    let st = &out.destinations[0];
    assert_eq!(taken.len() as u64, out.profiles, "{log:?}");
    assert_eq!((st.sent, st.dropped, st.undelivered), (out.profiles, 0, 0));
    assert!(st.failures >= 3, "{st:?}");
    assert!(
        st.last_error
            .as_deref()
            .is_some_and(|e| e.contains(&port.to_string())),
        "{st:?}"
    );
    // In order: the Nth request holds as many samples as the agent's
    // health line said interval N had, and each profile's interval
    // begins where the previous ended. An interval without samples (the
    // last, cut when the agent stops, can be a few milliseconds long; on a
    // loaded machine one cut late can be followed by a short one) has no
    // profile, hence no span: the next one then begins later.
    let counts = samples_by_interval(&log);
    assert_eq!(counts.len(), taken.len(), "{log:?}");
    let mut spans: Vec<Option<(u64, u64)>> = Vec::new();
    for (i, t) in taken.iter().enumerate() {
        let ps = profiles(&decode(&t.body));
        let samples: usize = ps.values().map(|p| p.samples).sum();
        assert_eq!(samples, counts[i], "request {i}: {log:?}");
        spans.push(
            ps.values()
                .next()
                .map(|p| (p.time_unix_nano, p.time_unix_nano + p.duration_nano)),
        );
    }
    // The last span seen, and whether it was the previous request's.
    let (mut last, mut adjacent) = (None::<(u64, u64)>, false);
    for span in &spans {
        if let (Some(b), Some(a)) = (span, last) {
            if adjacent {
                assert_eq!(b.0, a.1, "{spans:?}");
            } else {
                assert!(b.0 >= a.1, "{spans:?}");
            }
        }
        last = span.or(last);
        adjacent = span.is_some();
    }
    assert!(counts.iter().sum::<usize>() > 0, "{log:?}");
}
