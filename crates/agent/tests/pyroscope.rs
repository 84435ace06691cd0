//! The agent end to end against Pyroscope on 127.0.0.1, through its push
//! API (the request decoded with the push.v1 messages from Pyroscope's
//! published .proto) and through `/ingest` (the multipart form's
//! profile), the pprof read by `go tool pprof`: the hot function, the
//! series labels, each process's sample labels (its cgroup named like a
//! docker container), the time span, the sample types.

mod common;

use common::*;
use profdev_agent::pyroscope::{Api, PushRequest};
use profdev_agent::Options;
use prost::Message;
use std::io::Read;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(180);

#[test]
fn pyroscope_push_names_the_hot_function_for_go_tool_pprof() {
    hot_function_through(Api::Push);
}

#[test]
fn pyroscope_ingest_names_the_hot_function_for_go_tool_pprof() {
    hot_function_through(Api::Ingest);
}

/// The series labels and gzipped pprof of a request `t` through `api`.
fn series_of(api: Api, t: &Taken) -> (std::collections::BTreeMap<String, String>, Vec<u8>) {
    match api {
        Api::Push => {
            assert_eq!(t.path, "/push.v1.PusherService/Push");
            assert_eq!(t.content_type, "application/proto");
            let req = PushRequest::decode(&t.body[..]).unwrap();
            assert_eq!(req.series.len(), 1);
            let labels = req.series[0]
                .labels
                .iter()
                .map(|l| (l.name.clone(), l.value.clone()))
                .collect();
            (labels, req.series[0].samples[0].raw_profile.clone())
        }
        Api::Ingest => {
            let query = t.path.strip_prefix("/ingest?").expect("the ingest path");
            let name = query
                .split('&')
                .next()
                .unwrap()
                .strip_prefix("name=")
                .unwrap();
            let name = name
                .replace("%7B", "{")
                .replace("%7D", "}")
                .replace("%3D", "=")
                .replace("%2C", ",");
            let (service, rest) = name.split_once('{').unwrap();
            let mut labels: std::collections::BTreeMap<String, String> = rest
                .trim_end_matches('}')
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            labels.insert("service_name".into(), service.into());
            labels.insert("__name__".into(), "process_cpu".into());
            assert!(query.contains("&format=pprof&sampleRate=99&"), "{query}");
            let boundary = t
                .content_type
                .strip_prefix("multipart/form-data; boundary=")
                .unwrap();
            let head = b"name=\"profile\"; filename=\"profile.pprof\"\r\nContent-Type: application/octet-stream\r\n\r\n";
            let at = t.body.windows(head.len()).position(|w| w == head).unwrap() + head.len();
            let end = format!("\r\n--{boundary}");
            let len = t.body[at..]
                .windows(end.len())
                .position(|w| w == end.as_bytes())
                .unwrap();
            (labels, t.body[at..at + len].to_vec())
        }
    }
}

fn hot_function_through(api: Api) {
    if !ready("profdev agent --pyroscope") || !profdev_testkit::tools("go tool pprof", &["go"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let hot = build_hot(d.path());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let got = http_collector(listener);
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let opts = Options {
        pyroscope: Some(url),
        pyroscope_api: api,
        ..options()
    };
    let agent = {
        let (stop, log) = (stop.clone(), log.clone());
        std::thread::spawn(move || {
            profdev_agent::run(&opts, profdev_symbolize::Objects::new(), &stop, &mut |l| {
                log.lock().unwrap().push(l.to_string())
            })
        })
    };
    profdev_testkit::wait_until("the first interval", LONG, || {
        !log.lock().unwrap().is_empty()
    });
    let group = Cgroup::new("pyro", &format!("system.slice/docker-{CONTAINER}.scope"));
    let mut child = group.spawn(&hot, "1.5");
    let pid = child.id();
    assert!(profdev_testkit::wait_exit("hot", &mut child, LONG).success());
    stop.store(true, Ordering::Relaxed);
    let out = agent.join().unwrap().expect("the agent runs");
    let taken = got.lock().unwrap().clone();
    assert_eq!(taken.len() as u64, out.profiles);
    let mut traces = String::new();
    for (i, t) in taken.iter().enumerate() {
        let (labels, raw) = series_of(api, t);
        assert_eq!(labels["__name__"], "process_cpu");
        assert_eq!(labels["service_name"], "hot-test");
        assert!(labels.contains_key("host_name"), "{labels:?}");
        let mut pb = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut pb)
            .unwrap();
        let p = profdev_formats::pprof::Profile::decode(&pb[..]).unwrap();
        // One second, but the last (cut when the agent is stopped).
        assert!(p.duration_nanos > 0 && p.duration_nanos < 5_000_000_000);
        let file = d.path().join(format!("cut{i}.pb.gz"));
        std::fs::write(&file, &raw).unwrap();
        let o = std::process::Command::new("go")
            .args(["tool", "pprof", "-traces", "-symbolize=none"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(o.status.success(), "go tool pprof: {o:?}");
        traces.push_str(&String::from_utf8_lossy(&o.stdout));
    }
    // The hot process's samples (go tool pprof prints each trace's labels
    // as `KEY:  VALUE` lines): its function and its labels.
    let blocks: Vec<(std::collections::BTreeMap<&str, &str>, &str)> = traces
        .split("-----------+")
        .map(|t| {
            let labels = t
                .lines()
                .filter_map(|l| l.split_once(":  "))
                .map(|(k, v)| (k.trim(), v.trim()))
                .collect();
            (labels, t)
        })
        .collect();
    let pid = pid.to_string();
    let mine: Vec<_> = blocks
        .iter()
        .filter(|(l, _)| l.get("pid") == Some(&pid.as_str()))
        .collect();
    assert!(!mine.is_empty(), "no sample of pid {pid} in\n{traces}");
    let (labels, _) = mine
        .iter()
        .find(|(_, t)| t.contains("hot_loop"))
        .unwrap_or_else(|| panic!("no hot_loop in\n{traces}"));
    assert_eq!(labels["comm"], "hot");
    assert_eq!(labels["container_id"], CONTAINER);
    assert_eq!(labels["process_executable_path"], hot.to_str().unwrap());
    assert!(traces.contains("Type: cpu"), "{traces}");
}
