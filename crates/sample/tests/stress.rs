//! Overflow stress: a reader that falls behind must see the loss reported,
//! never a silently short stream. Needs root or CAP_PERFMON (skipped with a
//! printed reason otherwise, unless PROFDEV_REQUIRE_PRIVILEGED=1).
//!
//! Workload: a shell that runs dd 100 times, each writing 4 MiB into one
//! file under the cargo test tmpdir. That is both kernel work (page cache
//! writes) and task churn (fork, exec, mmap, exit records), against a
//! one-page ring that nobody reads for 500 ms.

mod common;

use common::open_or_skip;
use profdev_core::{Record, SampleSource, SessionConfig, SourceError};
use profdev_sample::PerfFactory;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn overflowing_ring_reports_lost_records() {
    let config = SessionConfig {
        callchain: true,
        track_tasks: true,
        ..SessionConfig::system(1000)
    };
    let factory = PerfFactory::new().ring_pages_log2(0); // one 4 KiB data page per CPU
    let Some(mut src) = open_or_skip("stress", factory.open_perf(&config)) else {
        return;
    };
    assert_eq!(src.ring_data_bytes(), profdev_sample::sys::page_size());

    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("profdev-sample-stress");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("churn");
    let script = format!(
        "for i in $(seq 100); do dd if=/dev/zero of='{}' bs=64k count=64 conv=notrunc status=none; done",
        file.display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the workload");

    // Fall behind: no read while this thread keeps its CPU busy for 500 ms
    // of CPU time, so that at least that many ticks are taken on the CPUs
    // it runs on, whatever the load (a wall-clock sleep on a loaded machine
    // could see its CPUs taken by others, or idle).
    profdev_testkit::burn_cpu(Duration::from_millis(500));

    let mut recs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut exited_at: Option<Instant> = None;
    // Keep reading until the workload is done, and for 300 ms more: the
    // kernel writes a ring's LOST record only once there is room again.
    loop {
        match src.read(&mut recs, Duration::from_millis(50)) {
            Ok(()) => {}
            Err(SourceError::Ended) => unreachable!("system sessions do not end"),
            Err(e) => panic!("read: {e}"),
        }
        if exited_at.is_none() && child.try_wait().unwrap().is_some() {
            exited_at = Some(Instant::now());
        }
        let settled = exited_at.is_some_and(|t| t.elapsed() > Duration::from_millis(300));
        if (settled && src.stats().lost > 0) || Instant::now() > deadline {
            break;
        }
    }
    let exited = exited_at.is_some();
    if !exited {
        let _ = child.kill();
    }
    assert!(child.wait().unwrap().success(), "the workload failed");
    let _ = std::fs::remove_file(&file);

    let stats = src.stats();
    let lost_records: Vec<_> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Lost { cpu, count, .. } => Some((*cpu, *count)),
            _ => None,
        })
        .collect();
    let reported: u64 = lost_records.iter().map(|(_, n)| n).sum();
    eprintln!(
        "stress: {} records, {} samples, lost {} in {} LOST records, throttled {}",
        recs.len(),
        stats.samples,
        stats.lost,
        lost_records.len(),
        stats.throttled
    );
    // 500 ms of CPU time unread at 1000 Hz is ~500 sample attempts on the
    // CPUs this thread ran on (two at most here); a 4 KiB ring holds fewer
    // than 90 of even the smallest samples.
    assert!(
        stats.lost >= 100,
        "a full ring lost only {} records",
        stats.lost
    );
    assert_eq!(reported, stats.lost, "stats and Lost records disagree");
    assert_eq!(src.malformed(), 0);
    assert!(stats.samples > 0, "nothing survived the overflow");
}
