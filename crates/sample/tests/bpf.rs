//! The in-kernel BPF histogram, live: the verifier accepts the program, and
//! a `dd if=/dev/zero` workload lands in a zeroing function. Privileged:
//! skipped (saying why) when bpf(2) or perf_event_open is refused, unless
//! PROFDEV_REQUIRE_PRIVILEGED=1.

mod common;

use profdev_sample::bpf::KernelHistogram;
use std::process::Command;
use std::time::Duration;

fn open(test: &str, lres: u32, hz: u32) -> Option<(KernelHistogram, u64, u64)> {
    let (start, end) = common::kernel_text();
    let h = common::open_or_skip(test, KernelHistogram::open(start, end, lres, hz))?;
    Some((h, start, end))
}

#[test]
fn verifier_accepts_the_program_and_header_is_set() {
    let Some((mut h, start, end)) = open("verifier_accepts_the_program", 3, 1000) else {
        return;
    };
    let w = h.words();
    let nbuf = (end - start).div_ceil(8) as usize;
    assert_eq!(w.len(), nbuf);
    assert_eq!(&w[2..6], &[1000, nbuf as u32, 4, 3]);
    assert!(w[..2].iter().chain(&w[6..]).all(|&x| x == 0));
    // Disabled: nothing is counted, though this CPU is busy for 50 ms.
    profdev_testkit::burn_cpu(Duration::from_millis(50));
    assert_eq!(h.words()[0], 0);
    h.enable().unwrap();
    // Enabled: ticks are counted while this CPU is busy (an idle vCPU
    // takes none).
    profdev_testkit::wait_until("a tick to be counted", Duration::from_secs(30), || {
        profdev_testkit::burn_cpu(Duration::from_millis(5));
        h.words()[0] > 0
    });
    h.disable();
    let w = h.words();
    assert!(w[0] > 0);
    h.clear();
    let w = h.words();
    assert_eq!(w[0], 0);
    assert_eq!(&w[2..6], &[1000, nbuf as u32, 4, 3]);
}

/// Kernel text symbols, sorted: (address, name).
fn text_symbols(start: u64, end: u64) -> Vec<(u64, String)> {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let mut v: Vec<(u64, String)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let a = u64::from_str_radix(f.next()?, 16).ok()?;
            let ty = f.next()?;
            let name = f.next()?;
            (matches!(ty, "t" | "T") && f.next().is_none() && (start..end).contains(&a))
                .then(|| (a, name.to_string()))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn dd_from_dev_zero_counts_a_zeroing_function() {
    let Some((mut h, start, end)) = open("dd_from_dev_zero", 3, 1000) else {
        return;
    };
    h.enable().unwrap();
    // Every CPU busy, so every CPU's clock ticks (an idle vCPU takes none).
    let cpus = h.cpus();
    let mut children: Vec<_> = (0..cpus)
        .map(|_| {
            Command::new("dd")
                .args(["if=/dev/zero", "of=/dev/null", "bs=1M", "count=30000"])
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("run dd")
        })
        .collect();
    for c in &mut children {
        assert!(c.wait().unwrap().success());
    }
    h.disable();
    let w = h.words();
    let buckets: u64 = w[6..].iter().map(|&x| u64::from(x)).sum();
    assert_eq!(
        u64::from(w[0]),
        u64::from(w[1]) + buckets,
        "word0 = word1 + buckets"
    );
    assert!(w[0] > 100, "only {} ticks", w[0]);

    let syms = text_symbols(start, end);
    let mut per: std::collections::HashMap<&str, u64> = Default::default();
    for (i, &n) in w.iter().enumerate().skip(6) {
        if n == 0 {
            continue;
        }
        let pc = start + ((i as u64) << 3);
        let k = syms.partition_point(|s| s.0 <= pc);
        if k > 0 {
            *per.entry(syms[k - 1].1.as_str()).or_default() += u64::from(n);
        }
    }
    let mut top: Vec<_> = per.into_iter().collect();
    top.sort_by_key(|t| std::cmp::Reverse(t.1));
    let top3: Vec<&str> = top.iter().take(3).map(|t| t.0).collect();
    eprintln!("top three: {top3:?} of {} ticks", w[0]);
    assert!(
        top3.iter().any(|n| n.contains("clear_user")
            || n.contains("read_zero")
            || n.contains("rep_stos")
            || n.contains("memset")),
        "top three {top:?}"
    );
}
