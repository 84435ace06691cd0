//! `profdev agent --heap PID`: mprof's library attached to a running
//! program (tests/data/agent/heap.c), sampling every 524,288 bytes on
//! average (fixed `PROFDEV_MPROF_SAMPLE_SEED`), and a heap profile per
//! interval beside the CPU one, to Pyroscope (push API, a series
//! `__name__=memory` holding a pprof of Go's heap sample types) and to
//! OTLP over HTTP (a request of its own, decoded with opentelemetry-proto):
//! the program's allocating stack (`churn` called by `main`) carries
//! alloc_space within 15% of the 200,000,000 bytes it allocated, summed
//! over the intervals. SIGTERM ends the agent: the program is detached
//! (its GOT's malloc is the C library's again), runs on and exits 0.
//! With `--heap-comm NAME` a program started after the agent is attached
//! at a cut and dropped once it has exited, and the agent refuses itself
//! (`--heap-comm profdev`). Heap profiles are first-class: with the
//! destination down they wait in `--spool DIR` (counted in the health
//! file) and a later agent sends them when it is up; `--store DIR` keeps
//! each as a pprof that `go tool pprof` reads.

mod common;

use common::{
    can_sample_system, collector, collector_unless, privileged, profdev, with_default_signals, Prog,
};
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use prost::Message;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the program allocates at its churning line.
const CHURNED: f64 = 200_000_000.0;

/// The program, built as `dir/NAME` (its command name).
fn build(dir: &Path, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agent/heap.c");
    let exe = dir.join(name);
    let ok = Command::new("cc")
        .args(["-g", "-O0", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-ldl")
        .status()
        .expect("cc runs")
        .success();
    assert!(ok, "cc failed on heap.c");
    exe
}

/// The alloc_space of the stacks through `churn` (called by `main`) in a
/// pprof heap profile.
fn churned_in_pprof(pprof: &[u8]) -> u64 {
    profdev_formats::pprof::decode::heap_stacks(pprof)
        .unwrap()
        .iter()
        .filter(|s| {
            let names: Vec<&str> = s.frames.iter().map(|f| f.function.as_str()).collect();
            let churn = names.iter().position(|&n| n == "churn");
            churn.is_some_and(|c| names[c..].contains(&"main"))
        })
        .map(|s| s.alloc_space)
        .sum()
}

/// The heap pprofs of the Pyroscope pushes (series `__name__=memory`),
/// each with its `pid` label.
fn pyroscope_heaps(bodies: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (path, body) in bodies {
        assert_eq!(path, "/push.v1.PusherService/Push");
        let req = profdev_agent::pyroscope::PushRequest::decode(&body[..]).unwrap();
        for s in req.series {
            let label = |k: &str| {
                s.labels
                    .iter()
                    .find(|l| l.name == k)
                    .map(|l| l.value.clone())
                    .unwrap_or_default()
            };
            if label("__name__") == "memory" {
                out.push((label("pid"), s.samples[0].raw_profile.clone()));
            }
        }
    }
    out
}

/// The alloc_space of the stacks through `churn` then `main` in the OTLP
/// heap requests (the profiles of sample type alloc_space/bytes), and the
/// pids of their resources.
fn churned_in_otlp(bodies: &[(String, Vec<u8>)]) -> (u64, Vec<i64>) {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let (mut total, mut pids) = (0, Vec::new());
    for (_, body) in bodies {
        let req = ExportProfilesServiceRequest::decode(&body[..]).unwrap();
        let d = req.dictionary.unwrap_or_default();
        let s = |i: i32| d.string_table[i as usize].as_str();
        for rp in &req.resource_profiles {
            for p in rp.scope_profiles.iter().flat_map(|sp| &sp.profiles) {
                let st = p.sample_type.unwrap_or_default();
                if (s(st.type_strindex), s(st.unit_strindex)) != ("alloc_space", "bytes") {
                    continue;
                }
                for a in &rp.resource.as_ref().unwrap().attributes {
                    if let (Some(Value::IntValue(pid)), "process.pid") = (
                        a.value.as_ref().and_then(|v| v.value.clone()),
                        a.key.as_str(),
                    ) {
                        pids.push(pid);
                    }
                }
                for sample in &p.samples {
                    let stack = &d.stack_table[sample.stack_index as usize];
                    let names: Vec<&str> = stack
                        .location_indices
                        .iter()
                        .map(|&l| {
                            let loc = &d.location_table[l as usize];
                            let f = &d.function_table[loc.lines[0].function_index as usize];
                            s(f.name_strindex)
                        })
                        .collect();
                    let churn = names.iter().position(|&n| n == "churn");
                    if churn.is_some_and(|c| names[c..].contains(&"main")) {
                        total += sample.values[0] as u64;
                    }
                }
            }
        }
    }
    (total, pids)
}

/// Root (to attach to a process that is not the agent's child), system
/// sampling, and a C compiler.
fn ready() -> bool {
    let root = if profdev_testkit::is_root() {
        can_sample_system()
    } else {
        Err("attaching to a process that is not the agent's child needs root".to_string())
    };
    privileged("profdev agent --heap", root)
        && profdev_testkit::tools("profdev agent --heap", &["cc"])
}

/// `profdev agent -v --interval 1 ARGS` (`PROFDEV_MPROF_SAMPLE_SEED=7`),
/// its standard error lines gathered as they come.
struct Agent {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
    _state: tempfile::TempDir,
}

impl Agent {
    fn start(args: &[&str]) -> Agent {
        let state = common::tempdir();
        let mut cmd = profdev();
        cmd.args(["agent", "-v", "-F", "19", "--interval", "1"])
            .args(args)
            .arg("--state-dir")
            .arg(state.path())
            .env("PROFDEV_MPROF_SAMPLE_SEED", "7")
            .stderr(Stdio::piped());
        let mut child = with_default_signals(&mut cmd).spawn().unwrap();
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let reader = {
            let lines = lines.clone();
            let err = child.stderr.take().unwrap();
            std::thread::spawn(move || {
                for l in BufReader::new(err).lines() {
                    lines.lock().unwrap().push(l.unwrap());
                }
            })
        };
        Agent {
            child,
            lines,
            reader,
            _state: state,
        }
    }

    fn said(&self, what: &str) -> bool {
        self.lines.lock().unwrap().iter().any(|l| l.contains(what))
    }

    fn intervals(&self) -> usize {
        let l = self.lines.lock().unwrap();
        l.iter().filter(|l| l.contains(": interval ")).count()
    }

    /// Wait until it has said `what` (or ended, or refused `pid`).
    fn wait_for(&mut self, what: &str, pid: u32) {
        let refused =
            |l: &String| l.contains(&format!("process {pid}")) && l.contains("not profiled");
        profdev_testkit::wait_until(what, Duration::from_secs(120), || {
            self.said(what)
                || self.lines.lock().unwrap().iter().any(refused)
                || self.child.try_wait().unwrap().is_some()
        });
        assert!(self.said(what), "{:?}", self.lines.lock().unwrap());
    }

    /// SIGTERM, then its lines once it has ended well.
    fn stop(self) -> Vec<String> {
        self.stop_health().0
    }

    /// SIGTERM, then its lines and its last health file once it has
    /// ended well.
    fn stop_health(mut self) -> (Vec<String>, String) {
        let pid = self.child.id() as i32;
        // SAFETY: kill(2) on our own child's pid.
        let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(sent, 0);
        let status =
            profdev_testkit::wait_exit("profdev agent", &mut self.child, Duration::from_secs(120));
        self.reader.join().unwrap();
        let lines = self.lines.lock().unwrap().clone();
        assert!(status.success(), "{lines:?}");
        let health = std::fs::read_to_string(self._state.path().join("health")).unwrap();
        (lines, health)
    }
}

#[test]
fn the_agent_sends_a_heap_profile_and_detaches_at_sigterm() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut p = Prog::start(&build(dir.path(), "heap"));
    let pyro = TcpListener::bind("127.0.0.1:0").unwrap();
    let pyro_url = format!("http://{}", pyro.local_addr().unwrap());
    let pushed = collector(pyro);
    let otlp = TcpListener::bind("127.0.0.1:0").unwrap();
    let otlp_url = format!("http://{}", otlp.local_addr().unwrap());
    let exported = collector(otlp);
    let mut agent = Agent::start(&[
        "--pyroscope",
        &pyro_url,
        "--otlp-protocol",
        "http",
        "--otlp",
        &otlp_url,
        "--heap",
        &p.pid.to_string(),
    ]);
    let attached = format!(
        "heap: attached to process {} (heap), sampling every 524288 bytes",
        p.pid
    );
    agent.wait_for(&attached, p.pid);
    assert_eq!(p.ask("w"), "malloc in libprofdev_mprof.so", "counted");
    assert_eq!(p.ask("g"), "done");
    // The cut after the next began after the churn: its report has it.
    let seen = agent.intervals();
    profdev_testkit::wait_until("two more intervals", Duration::from_secs(120), || {
        agent.intervals() >= seen + 2
    });
    let lines = agent.stop();
    let detached = format!("heap: process {} detached: it runs on", p.pid);
    assert!(lines.iter().any(|l| l.contains(&detached)), "{lines:?}");

    let heaps = pyroscope_heaps(&pushed.lock().unwrap());
    assert!(!heaps.is_empty(), "no heap series pushed: {lines:?}");
    assert!(heaps.iter().all(|(pid, _)| *pid == p.pid.to_string()));
    let pyroscope: u64 = heaps.iter().map(|(_, pprof)| churned_in_pprof(pprof)).sum();
    let (otlp, pids) = churned_in_otlp(&exported.lock().unwrap());
    assert!(pids.iter().all(|&pid| pid == i64::from(p.pid)) && !pids.is_empty());
    eprintln!("churn alloc_space: pyroscope {pyroscope}, otlp {otlp} (true 200000000)");
    for (what, got) in [("pyroscope", pyroscope), ("otlp", otlp)] {
        let err = (got as f64 - CHURNED).abs() / CHURNED;
        assert!(
            err <= 0.15,
            "{what}: churn's alloc_space {got}, {:.1}% off 200,000,000",
            err * 100.0
        );
    }
    // Detached: the C library's malloc again; it runs on and ends well.
    assert_eq!(p.ask("w"), "malloc in libc.so.6", "its GOT given back");
    p.quit();
}

/// `--heap-comm heapcomm`: the program, started once the agent runs, is
/// attached at a cut, and dropped at the cut after its exit;
/// `--heap-comm profdev` finds the agent, refused.
#[test]
fn heap_comm_attaches_a_program_seen_later_and_never_the_agent() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "heapcomm");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let _pushed = collector(listener);
    let mut agent = Agent::start(&[
        "--pyroscope",
        &url,
        "--heap-comm",
        "heapcomm",
        "--heap-comm",
        "profdev",
    ]);
    let me = format!(
        "heap: process {} is the agent itself: not profiled",
        agent.child.id()
    );
    profdev_testkit::wait_until("the first interval", Duration::from_secs(120), || {
        agent.intervals() >= 1
    });
    assert!(agent.said(&me), "{:?}", agent.lines.lock().unwrap());
    let mut p = Prog::start(&exe);
    agent.wait_for(
        &format!("heap: attached to process {} (heapcomm)", p.pid),
        p.pid,
    );
    assert_eq!(p.ask("w"), "malloc in libprofdev_mprof.so", "counted");
    // It exits: dropped at the next cut, nothing left to detach.
    let pid = p.pid;
    p.quit();
    agent.wait_for(&format!("heap: process {pid} exited: dropped"), pid);
    let lines = agent.stop();
    assert!(
        !lines
            .iter()
            .any(|l| l.contains(&format!("process {pid} detached"))
                || l.contains("could not be detached")),
        "{lines:?}"
    );
}

/// The value of `key` in a health file's text.
fn health_value(health: &str, key: &str) -> u64 {
    let line = health
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")));
    line.unwrap_or_else(|| panic!("no {key} in {health}"))
        .parse()
        .unwrap()
}

/// The destination is down while the program churns: the heap profiles
/// wait in `--spool DIR` (the health file counts them); the agent ends
/// with them undelivered; a later agent (no `--heap`) sends them once the
/// destination is up, churn's bytes within 15%. `--store DIR` of the
/// first agent holds each interval's heap profile as a gzipped pprof
/// `START_END.heap-PID-COMM.pb.gz`: summed, churn's bytes within 15%, and
/// `go tool pprof -raw` reads one with churn in it.
#[test]
fn heap_profiles_are_spooled_while_down_sent_when_up_and_stored() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut p = Prog::start(&build(dir.path(), "heap"));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let down = Arc::new(AtomicBool::new(true));
    let pushed = collector_unless(listener, down.clone());
    let (spool, store) = (dir.path().join("spool"), dir.path().join("store"));
    let (spool_arg, store_arg) = (spool.to_str().unwrap(), store.to_str().unwrap());
    let pid = p.pid.to_string();
    let mut agent = Agent::start(&[
        "--pyroscope",
        &url,
        "--spool",
        spool_arg,
        "--store",
        store_arg,
        "--heap",
        &pid,
    ]);
    agent.wait_for(&format!("heap: attached to process {pid} (heap)"), p.pid);
    assert_eq!(p.ask("g"), "done");
    let seen = agent.intervals();
    profdev_testkit::wait_until("two more intervals", Duration::from_secs(120), || {
        agent.intervals() >= seen + 2
    });
    let (lines, health) = agent.stop_health();
    assert!(pushed.lock().unwrap().is_empty(), "down: {lines:?}");
    let cut = health_value(&health, "heap_profiles");
    assert!(cut >= 3, "{health}");
    assert_eq!(health_value(&health, "pyroscope.sent"), 0, "{health}");
    assert_eq!(
        health_value(&health, "pyroscope.spool_heap_profiles"),
        cut,
        "{health}"
    );
    assert_eq!(health_value(&health, "store.heap_sent"), cut, "{health}");

    // The store: one pprof per interval, churn's bytes in their sum.
    let mut heaps: Vec<PathBuf> = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|f| {
            let name = f.file_name().unwrap().to_str().unwrap();
            name.ends_with(&format!(".heap-{pid}-heap.pb.gz"))
        })
        .collect();
    heaps.sort();
    assert_eq!(heaps.len() as u64, cut, "{heaps:?}");
    let stored: u64 = heaps
        .iter()
        .map(|f| churned_in_pprof(&std::fs::read(f).unwrap()))
        .sum();
    let err = (stored as f64 - CHURNED).abs() / CHURNED;
    assert!(err <= 0.15, "the store's churn alloc_space {stored}");
    if profdev_testkit::tools("go tool pprof of a stored heap profile", &["go"]) {
        let churned = heaps
            .iter()
            .find(|f| churned_in_pprof(&std::fs::read(f).unwrap()) > 0)
            .unwrap();
        let home = tempfile::tempdir().unwrap();
        let out = Command::new("go")
            .args(["tool", "pprof", "-raw", "-sample_index=alloc_space"])
            .arg(churned)
            .env("HOME", home.path())
            .env("PPROF_TMPDIR", home.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("alloc_space/bytes"), "{text}");
        assert!(text.contains(" churn"), "{text}");
    }

    // The destination is up: a later agent sends the spooled profiles.
    down.store(false, Ordering::SeqCst);
    let agent = Agent::start(&["--pyroscope", &url, "--spool", spool_arg]);
    let churned = || -> u64 {
        let heaps = pyroscope_heaps(&pushed.lock().unwrap());
        heaps.iter().map(|(_, pprof)| churned_in_pprof(pprof)).sum()
    };
    profdev_testkit::wait_until(
        "the spooled heap profiles",
        Duration::from_secs(120),
        || churned() as f64 >= 0.85 * CHURNED,
    );
    let lines = agent.stop();
    let sent = churned();
    let err = (sent as f64 - CHURNED).abs() / CHURNED;
    assert!(err <= 0.15, "spooled churn alloc_space {sent}: {lines:?}");
    let heaps = pyroscope_heaps(&pushed.lock().unwrap());
    assert!(!heaps.is_empty() && heaps.iter().all(|(p, _)| *p == pid));
    p.quit();
}
