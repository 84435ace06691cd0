//! `mprof -p PID`: attach to a running process, wait for its exit, a
//! signal or the snapshot's time, and show what it counted; a process
//! that runs on is detached first.

use super::{private_device, through_device};
use crate::args::mprof::{startmp_message, Args};
use crate::prof::module_words;
use anyhow::{anyhow, bail, Context as _, Result};
use profdev_attach::{attach_process, AttachOptions, MemAttached};
use profdev_dev::prof::{POOL_FILE, POOL_MALLOC, POOL_MAP};
use profdev_dev::DevError;
use profdev_mprof::{merge, Module};
use profdev_sample::job::{signal_name, Catcher};

/// `mprof -p PID`'s run: the modules to show, and, if a signal ended the
/// wait, the signal and the sentence to say after the tables.
pub struct AttachRun {
    /// The modules read back through the private device.
    pub modules: Vec<Module>,
    /// Its reports' stacks and peak, for `--pprof`, `--folded` and
    /// `--peak`.
    pub run: super::show::Run,
    /// The signal that ended the wait, and the sentence to say.
    pub interrupted: Option<(i32, String)>,
    /// Its reports' directory, kept from the sweep of other runs (let go
    /// before the process below, as it was taken after it).
    _held: Option<std::fs::File>,
    /// The attached process, held until the tables are shown.
    _attached: MemAttached,
}

/// `mprof -p PID`: attach, wait for the process to exit (or a signal),
/// and read its tables from its report, through a private device as with
/// CMD. `note` gets what is said meanwhile.
pub fn run_attached(args: &Args, pid: u32, note: &mut dyn FnMut(String)) -> Result<AttachRun> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    let words = module_words(&args.modules, args.exec.then_some(exe.as_path()))?;
    let dev = private_device(&words, &startmp_message(&args.pools))?;
    let pools = args.pools.iter().fold(0, |b, p| {
        b | match p {
            '2' => POOL_MAP,
            '3' => POOL_FILE,
            _ => POOL_MALLOC,
        }
    });
    // Caught from here on: a signal during the attach (which holds PID's
    // threads) ends the wait right after it, never the attach half way.
    // SIGINT, SIGTERM and SIGHUP, those not ignored when mprof started
    // (nohup's stay ignored).
    let signals = Catcher::new().context("cannot catch signals")?;
    profdev_mprof::sweep(
        &std::env::temp_dir(),
        std::fs::metadata("/proc/self").map_or(0, |m| {
            use std::os::unix::fs::MetadataExt;
            m.uid()
        }),
    );
    let attached = attach_process(pid, &options(args, pools), None).map_err(|e| {
        anyhow!(match e {
            DevError::NoDevice(s) | DevError::NotPermitted(s) | DevError::Busy(s) => s,
            DevError::NoProcess(p) => format!("no process {p}"),
            e => e.to_string(),
        })
    })?;
    // Kept from the sweep of other runs while this one reads it.
    let held = attached.hold();
    note(match args.snapshot {
        Some(t) => format!(
            "mprof: attached to process {pid}; its tables are shown in {:.1} s, or when it exits",
            t.as_secs_f64()
        ),
        None => format!("mprof: attached to process {pid}; its tables are shown when it exits"),
    });
    let mut caught = None;
    let until = args.snapshot.map(|t| std::time::Instant::now() + t);
    let mut due = false;
    while attached.running() {
        if let Some(sig) = signals.caught() {
            caught = Some(sig);
            break;
        }
        if until.is_some_and(|u| std::time::Instant::now() >= u) {
            due = true;
            break;
        }
        signals.sleep(std::time::Duration::from_millis(50), None);
        signals.drain();
    }
    // Still running (interrupted, or the snapshot is due): its report
    // now, then the process goes on uncounted.
    let (requested, detached) = if (caught.is_some() || due) && attached.running() {
        detach(&attached)
    } else {
        (false, Err("it ended".to_string()))
    };
    // What became of it, for the last sentence.
    let fate = match &detached {
        Ok(true) => "it was detached and runs on, no longer counted".to_string(),
        Ok(false) => "it runs on: it exec'd another program, which was never counted".into(),
        Err(why) => format!(
            "it could not be detached ({why}) and goes on counting into {} (removed once it \
             has exited, by the next mprof)",
            attached.reports_dir().display()
        ),
    };
    if due {
        note(format!("mprof: process {pid}: {fate}"));
    }
    // Its report, or, if it ended without one (_exit, a signal, SIGKILL)
    // or still runs (mprof was interrupted), its table of counts.
    let mut reports = attached.reports();
    // Asked for: that report is the snapshot (its table, which reports()
    // prefers while the process runs, has no temporary blocks nor peak).
    if let Some(r) = attached.latest_report().filter(|_| requested) {
        reports.retain(|t| t.pid != pid);
        reports.push(r);
    }
    if reports.is_empty() {
        bail!(
            "process {pid} left neither a report nor its table of counts in {}: the library \
             could not write there (a full disk, or the directory was removed); nothing was \
             counted",
            attached.reports_dir().display()
        );
    }
    let modules = through_device(&dev, &merge(&reports), args.options.zeros)?;
    let interrupted = caught.map(|sig| {
        let sentence = format!(
            "mprof: interrupted by {}; the tables show what process {pid} counted until then; \
             {fate}",
            signal_name(sig)
        );
        (sig, sentence)
    });
    Ok(AttachRun {
        modules,
        run: super::show::Run::of(&reports, String::new()),
        interrupted,
        _held: held,
        _attached: attached,
    })
}

/// Its report now, then let it go on uncounted: whether the report came,
/// and true when detached, false when it exec'd since (its new image was
/// never counted: nothing to do), or why not.
fn detach(attached: &MemAttached) -> (bool, std::result::Result<bool, String>) {
    if !attached.maps_library() {
        return (false, Ok(false));
    }
    if !attached.request_report(profdev_attach::REPORT_TIMEOUT) {
        let why = format!(
            "no report came within {} s",
            profdev_attach::REPORT_TIMEOUT.as_secs()
        );
        return (false, Err(why));
    }
    (
        true,
        attached.detach().map(|_| true).map_err(|e| e.to_string()),
    )
}

/// The library's settings for `args` (as [`super::launch_env`] gives a
/// launched run's): the pools, wrappers, stacks, sampling (with
/// `PROFDEV_MPROF_SAMPLE_SEED` from mprof's own environment), temporary
/// blocks and the peak.
fn options(args: &Args, pools: u8) -> AttachOptions {
    let seed = std::env::var(profdev_mprof::sample::SAMPLE_SEED_ENV).ok();
    AttachOptions {
        pools: pools.max(POOL_MALLOC),
        wrappers: args.wrappers.clone(),
        stacks: args.stacks(),
        sample_bytes: args.sample_bytes,
        sample_seed: seed.and_then(|s| s.parse().ok()),
        temporary: args.temporary,
        peak: args.peak,
    }
}
