//! The agent end to end against a Parca profile store on 127.0.0.1 (a
//! gRPC server taking `ProfileStoreService/WriteRaw`): the request decoded
//! with the messages of Parca's published .proto, its pprof decoded:
//! the hot function, the series labels, the hot process's sample labels,
//! the time span, the sample types.

mod common;

use common::*;
use profdev_agent::parca::WriteRawRequest;
use profdev_agent::Options;
use prost::Message;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(180);

#[test]
fn parca_write_raw_names_the_hot_function() {
    if !ready("profdev agent --parca") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let hot = build_hot(d.path());
    let (url, got) = parca_collector();
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let opts = Options {
        parca: Some(url),
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
    let mut child = std::process::Command::new(&hot).arg("1.5").spawn().unwrap();
    let pid = i64::from(child.id());
    assert!(profdev_testkit::wait_exit("hot", &mut child, LONG).success());
    stop.store(true, Ordering::Relaxed);
    let out = agent.join().unwrap().expect("the agent runs");
    let taken = got.lock().unwrap().clone();
    let log = log.lock().unwrap().clone();
    assert_eq!(taken.len() as u64, out.profiles, "{log:?}");
    let mut hot_seen = false;
    for (path, body) in &taken {
        assert_eq!(
            path,
            "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw"
        );
        let req = WriteRawRequest::decode(&body[..]).unwrap();
        assert!(req.normalized);
        assert_eq!(req.series.len(), 1);
        let labels: std::collections::BTreeMap<&str, &str> = req.series[0]
            .labels
            .as_ref()
            .unwrap()
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(labels["__name__"], "process_cpu");
        assert_eq!(labels["service_name"], "hot-test");
        let mut pb = Vec::new();
        flate2::read::GzDecoder::new(&req.series[0].samples[0].raw_profile[..])
            .read_to_end(&mut pb)
            .unwrap();
        let p = profdev_formats::pprof::Profile::decode(&pb[..]).unwrap();
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(
            p.sample_type
                .iter()
                .map(|t| (s(t.r#type), s(t.unit)))
                .collect::<Vec<_>>(),
            vec![("samples", "count"), ("cpu", "nanoseconds")]
        );
        // One second, but the last (cut when the agent is stopped).
        assert!(p.duration_nanos > 0 && p.duration_nanos < 5_000_000_000);
        for sample in &p.sample {
            let is_hot = sample
                .label
                .iter()
                .any(|l| s(l.key) == "pid" && l.num == pid);
            if !is_hot {
                continue;
            }
            let names: Vec<&str> = sample
                .location_id
                .iter()
                .flat_map(|&id| &p.location[id as usize - 1].line)
                .map(|line| s(p.function[line.function_id as usize - 1].name))
                .collect();
            hot_seen |= names.contains(&"hot_loop");
            let path = sample
                .label
                .iter()
                .find(|l| s(l.key) == "process_executable_path")
                .map(|l| s(l.str));
            assert_eq!(path, hot.to_str());
        }
    }
    assert!(hot_seen, "no hot_loop sample of pid {pid}: {log:?}");
}
