//! The live engine against the running kernel (needs root or CAP_PERFMON;
//! skipped with a printed reason otherwise, unless
//! PROFDEV_REQUIRE_PRIVILEGED=1).

mod common;

use common::{kernel_text, monotonic_ns, open_fds, open_or_skip};
use profdev_core::{
    CpuMode, MappingHook, Record, SampleSource, SessionConfig, SourceError, SourceFactory, Target,
};
use profdev_sample::{online_cpus, spawn_profiled, PerfFactory, SpawnError};
use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The sessions and the descriptor counts must not interleave.
static SERIAL: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Read one batch, checking it is sorted by time, and append it.
fn read_batch(src: &mut dyn SampleSource, all: &mut Vec<Record>) -> Result<(), SourceError> {
    let mut batch = Vec::new();
    let r = src.read(&mut batch, Duration::from_millis(100));
    assert!(
        batch.windows(2).all(|w| w[0].time() <= w[1].time()),
        "a batch is not sorted by time"
    );
    all.append(&mut batch);
    r
}

fn samples(recs: &[Record]) -> impl Iterator<Item = &profdev_core::Sample> {
    recs.iter().filter_map(|r| match r {
        Record::Sample(s) => Some(s),
        _ => None,
    })
}

#[test]
fn system_wide_session_sees_dd_in_kernel_text() {
    let _g = lock();
    let fds_before = open_fds();
    let config = SessionConfig {
        callchain: true,
        track_tasks: true,
        ..SessionConfig::system(1000)
    };
    let t0 = monotonic_ns();
    let Some(mut src) = open_or_skip("system_wide", PerfFactory::new().open(&config)) else {
        return;
    };
    let mut child = Command::new("dd")
        .args(["if=/dev/zero", "of=/dev/null", "bs=1M", "count=3000"])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn dd");
    let dd = child.id();
    // An idle vCPU takes no cpu-clock ticks on these VMs: keep every CPU
    // busy for a moment so that each one's event has something to sample.
    let mut loaders: Vec<_> = online_cpus()
        .unwrap()
        .into_iter()
        .map(|cpu| {
            Command::new("taskset")
                .args(["-c", &cpu.to_string(), "sh", "-c"])
                .arg("i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done")
                .spawn()
                .expect("spawn a pinned loader (taskset, util-linux)")
        })
        .collect();
    let mut recs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        read_batch(&mut *src, &mut recs).expect("read");
        if child.try_wait().expect("wait dd").is_some()
            && loaders
                .iter_mut()
                .all(|l| l.try_wait().expect("wait loader").is_some())
        {
            break;
        }
        assert!(Instant::now() < deadline, "dd did not finish");
    }
    // The exit is recorded before wait() returns: the next read drains it,
    // and the per-CPU merge releases it once no other CPU can bring an
    // earlier record (a read or two later, at least 10 ms after its time;
    // see profdev_sample::merge).
    let dd_exit = |recs: &[Record]| {
        recs.iter()
            .any(|r| matches!(r, Record::Exit { pid, tid, .. } if *pid == dd && *tid == dd))
    };
    while !dd_exit(&recs) {
        read_batch(&mut *src, &mut recs).expect("read");
        assert!(
            Instant::now() < deadline,
            "the EXIT of dd was never delivered"
        );
    }
    let stats = src.stats();
    drop(src);
    let t1 = monotonic_ns();

    // Synthesized tasks come first, at time 0.
    assert!(
        matches!(&recs[0], Record::Comm { time: 0, .. }),
        "{:?}",
        recs[0]
    );

    let (stext, etext) = kernel_text();
    let all: Vec<_> = samples(&recs).collect();
    assert_eq!(stats.samples, all.len() as u64);
    let kernel_in_text = all
        .iter()
        .filter(|s| s.mode == CpuMode::Kernel && (stext..etext).contains(&s.ip))
        .count();
    assert!(
        kernel_in_text > 0,
        "no kernel-mode sample in [_stext, _etext)"
    );
    let dd_kernel = all
        .iter()
        .filter(|s| s.pid == dd && s.mode == CpuMode::Kernel)
        .count();
    assert!(dd_kernel > 10, "only {dd_kernel} kernel-mode samples of dd");
    // Kernel samples carry their kernel callchain, innermost = ip.
    for s in all.iter().filter(|s| s.mode == CpuMode::Kernel) {
        assert_eq!(s.kernel_chain.first(), Some(&s.ip), "{s:?}");
    }
    for s in &all {
        assert_eq!(s.period, 1_000_000);
        assert!(
            (t0..=t1).contains(&s.time),
            "sample time {} not in [{t0}, {t1}]",
            s.time
        );
    }
    let cpus: BTreeSet<u32> = all.iter().map(|s| s.cpu).collect();
    let online: BTreeSet<u32> = online_cpus().unwrap().into_iter().collect();
    assert_eq!(cpus, online, "samples did not come from every online CPU");

    assert!(
        recs.iter()
            .any(|r| matches!(r, Record::Comm { pid, comm, exec: true, .. }
            if *pid == dd && comm == "dd")),
        "no exec COMM \"dd\" for pid {dd}"
    );
    let dd_path = std::fs::canonicalize("/usr/bin/dd").unwrap();
    assert!(
        recs.iter().any(
            |r| matches!(r, Record::Mmap { pid, path, file: Some(_), time, .. }
            if *pid == dd && std::path::Path::new(path) == dd_path && *time > 0)
        ),
        "no MMAP2 of {dd_path:?} for pid {dd}"
    );
    // Across reads, records come in time order (the per-CPU merge).
    assert!(
        recs.windows(2).all(|w| w[0].time() <= w[1].time()),
        "records are not in time order across reads"
    );
    // Lost and throttle records agree with the counts.
    let lost: u64 = recs
        .iter()
        .map(|r| match r {
            Record::Lost { count, .. } => *count,
            _ => 0,
        })
        .sum();
    assert_eq!(lost, stats.lost);
    let throttled = recs
        .iter()
        .filter(|r| {
            matches!(
                r,
                Record::Throttle {
                    throttled: true,
                    ..
                }
            )
        })
        .count();
    assert_eq!(throttled as u64, stats.throttled);
    eprintln!(
        "system_wide: {} records, {} samples ({dd_kernel} of dd in kernel mode), lost {}, throttled {}",
        recs.len(),
        stats.samples,
        stats.lost,
        stats.throttled
    );
    assert_eq!(open_fds(), fds_before, "descriptors leaked after drop");
}

/// A factory's mapping hook hears every MMAP record its sessions decode
/// (each delivered one was heard first); the hook of another factory,
/// built the same way, hears nothing: no hook is process-wide.
#[test]
fn the_mapping_hook_is_its_factorys_own() {
    let _g = lock();
    let config = SessionConfig {
        track_tasks: true,
        ..SessionConfig::system(1000)
    };
    let heard = std::sync::Arc::new(Mutex::new(Vec::new()));
    let h = heard.clone();
    let factory = PerfFactory::new().with_mapping_hook(MappingHook::new(move |r| {
        if let Record::Mmap { path, .. } = r {
            h.lock().unwrap().push(path.clone());
        }
    }));
    let other = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let o = other.clone();
    let _other = PerfFactory::new().with_mapping_hook(MappingHook::new(move |_| {
        o.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }));
    let (mut child, mut src) = match factory.spawn_profiled(&mut Command::new("true"), &config) {
        Ok(v) => v,
        Err(SpawnError::Source(e)) => {
            if open_or_skip::<()>("the mapping hook", Err(e)).is_none() {
                return;
            }
            unreachable!()
        }
        Err(e) => panic!("spawn_profiled: {e}"),
    };
    let mut recs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match read_batch(&mut *src, &mut recs) {
            Ok(()) => {}
            Err(SourceError::Ended) => break,
            Err(e) => panic!("read: {e}"),
        }
        assert!(Instant::now() < deadline, "the session did not end");
    }
    assert!(child.wait().unwrap().success());
    let delivered: Vec<&String> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Mmap { path, .. } => Some(path),
            _ => None,
        })
        .collect();
    assert!(!delivered.is_empty(), "true's exec maps files");
    let heard = heard.lock().unwrap();
    for p in &delivered {
        assert!(
            heard.contains(p),
            "{p} was delivered but not heard: {heard:?}"
        );
    }
    assert_eq!(other.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[test]
fn spawn_profiled_follows_only_its_process_tree() {
    let _g = lock();
    let fds_before = open_fds();
    let config = SessionConfig {
        callchain: true,
        user_stack_bytes: 8192,
        track_tasks: true,
        ..SessionConfig::system(1000)
    };
    // A CPU-bound loop, then a subshell (a forked child) doing the same.
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done; \
         (j=0; while [ $j -lt 150000 ]; do j=$((j+1)); done); exit 3",
    ]);
    let (mut child, mut src) = match spawn_profiled(&mut cmd, &config) {
        Ok(v) => v,
        Err(SpawnError::Source(e)) => {
            if open_or_skip::<()>("spawn_profiled", Err(e)).is_none() {
                return;
            }
            unreachable!()
        }
        Err(e) => panic!("spawn_profiled: {e}"),
    };
    let sh = child.id();
    let mut recs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let ended = loop {
        match read_batch(&mut *src, &mut recs) {
            Ok(()) => {}
            Err(SourceError::Ended) => break true,
            Err(e) => panic!("read: {e}"),
        }
        if Instant::now() > deadline {
            break false;
        }
    };
    assert!(
        ended,
        "the session did not end after the process tree exited"
    );
    assert_eq!(child.wait().unwrap().code(), Some(3));
    let stats = src.stats();
    drop(src);

    let mut tree: BTreeSet<u32> = BTreeSet::from([sh]);
    for r in &recs {
        if let Record::Fork { pid, ppid, .. } = r {
            if tree.contains(ppid) {
                tree.insert(*pid);
            }
        }
    }
    assert!(
        tree.len() >= 2,
        "the subshell's FORK was not seen: {tree:?}"
    );
    let all: Vec<_> = samples(&recs).collect();
    assert_eq!(stats.samples, all.len() as u64);
    assert!(all.len() > 50, "only {} samples", all.len());
    let outside: Vec<_> = all.iter().filter(|s| !tree.contains(&s.pid)).collect();
    assert!(
        outside.is_empty(),
        "samples outside the tree {tree:?}: {:?}",
        outside[0]
    );
    let pids: BTreeSet<u32> = all.iter().map(|s| s.pid).collect();
    assert!(
        pids.len() >= 2,
        "no sample of the forked subshell: {pids:?}"
    );

    let user: Vec<_> = all.iter().filter(|s| s.mode == CpuMode::User).collect();
    assert!(user.len() > 20, "only {} user-mode samples", user.len());
    for s in &user {
        let regs = s.user_regs.unwrap_or_else(|| panic!("no user regs: {s:?}"));
        assert_eq!(regs.ip, s.ip);
        assert!(regs.sp != 0);
        assert!(!s.user_stack.is_empty(), "empty user stack copy");
        assert!(s.user_stack.len() <= 8192);
        assert_eq!(s.user_chain.first(), Some(&s.ip));
    }
    let comm_exec = recs
        .iter()
        .any(|r| matches!(r, Record::Comm { pid, exec: true, .. } if *pid == sh));
    assert!(comm_exec, "no exec COMM for pid {sh}");
    let sh_path = std::fs::canonicalize("/bin/sh").unwrap();
    assert!(
        recs.iter()
            .any(|r| matches!(r, Record::Mmap { pid, path, .. }
            if *pid == sh && std::path::Path::new(path) == sh_path)),
        "no MMAP2 of {sh_path:?} for pid {sh}"
    );
    assert!(
        recs.iter()
            .any(|r| matches!(r, Record::Exit { pid, .. } if *pid == sh)),
        "no EXIT of pid {sh}"
    );
    eprintln!(
        "spawn_profiled: {} samples over pids {pids:?}, {} in user mode, lost {}",
        all.len(),
        user.len(),
        stats.lost
    );
    assert_eq!(open_fds(), fds_before, "descriptors leaked");
}

#[test]
fn frequency_out_of_bounds_is_refused_with_a_sentence() {
    let e = PerfFactory::new()
        .open(&SessionConfig::system(20_000))
        .err()
        .expect("20000 Hz refused");
    assert!(matches!(e, SourceError::Frequency(_)));
    assert_eq!(
        e.to_string(),
        "20000 Hz is above the limit of 10000 Hz per CPU: the only sampling clock here is the \
         software cpu-clock, whose timer interrupts livelock the machine well before 100 kHz"
    );
    let e = PerfFactory::new()
        .open(&SessionConfig::system(0))
        .err()
        .expect("0 Hz refused");
    assert_eq!(
        e.to_string(),
        "a sampling frequency of 0 Hz takes no samples"
    );
    let e = spawn_profiled(&mut Command::new("true"), &SessionConfig::system(20_000))
        .err()
        .expect("refused");
    assert!(
        e.to_string().starts_with("20000 Hz is above the limit"),
        "{e}"
    );
    // the limit itself is accepted (a config check only: no session opened)
    assert!(SessionConfig::system(10_000).validate().is_ok());
}

#[test]
fn missing_process_is_one_sentence() {
    let _g = lock();
    let config = SessionConfig {
        target: Target::Process {
            pid: i32::MAX as u32,
            inherit: true,
        },
        ..SessionConfig::system(1000)
    };
    match PerfFactory::new().open(&config) {
        Ok(_) => panic!("opened a session on a process that cannot exist"),
        Err(e @ SourceError::Permission(_)) => {
            open_or_skip::<()>("missing_process", Err(e));
        }
        Err(e) => assert_eq!(
            e.to_string(),
            format!(
                "process {} does not exist: No such process (os error 3)",
                i32::MAX
            )
        ),
    }
}
